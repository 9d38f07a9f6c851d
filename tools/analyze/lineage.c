/* shapetrace analyze, lineage pass (per process): per process, which call last wrote each byte
 * (copy destinations, collective and p2p receive buffers, by each op's size rule), and for every
 * read (copy source, collective send buffer, send) the producers of the bytes it reads. Reads of
 * one producer region from one call site form a pattern (pieces, piece size, stride, offset): a 2-D
 * view of the region. When the producer's rows are known (a 2-D copy's pitch, or --dim values
 * that factor the region) and the consumer reads pieces shorter than a row at a stride of one
 * row, it cuts the region along another axis than the producer laid it out: shape_mismatch.
 * Later writes replace earlier ones, so a block reused by a caching allocator starts afresh. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"
#include "tools/lib/allocs.h"
#include "tools/lib/ranges.h"

/* ---- the regions: what one call wrote, while some of its bytes are in memory ---- */

/* What the lineage pass looks at for every read and write of a region, apart from where the
 * region came from (struct an_origin, by the same number), which only a write that copies it
 * and a finding read: the regions a process keeps live outgrow the cache, and this part is a
 * quarter of the whole. */
struct an_region {
    uint64_t start, len;
    uint64_t pitch, width; /* rows of a 2-D write; 0 for 1-D */
    uint64_t replay;       /* a producer that a graph replay executed: the replay's number
                              among the process's launches (its launch: origin) */
    int esize;             /* element size from the origin's datatype, 0 if unknown */
    int dtype;
    uint32_t site; /* stack id of the producer (its process's) */
    /* A region lives while some of its bytes are still in memory; then its reads are judged
     * and its slot reused, so memory follows what is live, not how many writes there were. */
    uint32_t nodes;
    uint32_t groups; /* first group + 1 */
    uint32_t next_free;
    bool replayed; /* a graph replay executed the producer */
};

/* The ancestors' ring: a power of two above the AN_MAX_LINEAGE - 1 ancestors a chain keeps. */
#define ANC_RING 8
_Static_assert(ANC_RING >= AN_MAX_LINEAGE && (ANC_RING & (ANC_RING - 1)) == 0,
               "a ring of a power of two, with room for a chain and one more");

struct an_origin {
    struct an_ref ref; /* the producing call */
    /* A producer that a graph replay executed: the launch (rec NULL otherwise). */
    struct an_ref launch;
    /* Where the bytes came from, nearest first, copied from the parent when this region was
     * written: a chain of in-place collectives would otherwise keep every ancestor alive. A
     * ring: the i-th is anc[(head + i) % ANC_RING], so that an in-place write, which puts its
     * region's producer in front of the chain (rewrite), moves nothing. */
    uint8_t nanc, head;
    struct an_ref anc[ANC_RING];
};

/* The i-th ancestor of o. */
static inline const struct an_ref *anc_at(const struct an_origin *o, unsigned i)
{
    return &o->anc[(o->head + i) & (ANC_RING - 1)];
}

struct group {
    uint32_t site;
    uint32_t next; /* next group of the same region + 1 (or next free) */
    struct an_ref first;
    struct an_ref first_launch; /* the launch that executed the first read (rec NULL: none) */
    uint64_t first_replay;
    uint64_t n, piece, first_off, last_off, stride;
    bool same_piece, regular;
};

struct an_lineage {
    struct an_ctx *ctx;
    /* Which region holds each byte range of the process being walked: the driver walks one
     * process whole, then ends it, so one map serves them all in turn. */
    struct shp_ranges map;
    struct an_region *regions;
    struct an_origin *origins; /* by region, as regions */
    size_t nregions, cap;
    uint32_t free_region; /* + 1 */
    struct group *groups;
    size_t ngroups, gcap;
    uint32_t free_group; /* + 1 */
    /* The allocations of the process being walked, for what a free ends. */
    struct shp_allocs al;
    bool stale_reported; /* this process's first stale read is its finding */
    /* Whether --dim values were given: without them only a region written in rows has rows to
     * judge its reads against (rows_of). */
    bool dims;
    /* Whether a pass after this one reads the step's producers: only the expectations do, and
     * only with an expectation file. Without one, copying the chain into every reading step
     * was a twentieth of the pass's instructions. */
    bool producers;
};

static void retire(struct an_lineage *L, uint32_t region);
static void judge(struct an_lineage *L, uint32_t region, const struct group *g);

/* Judge the region's groups of reads (one at least) and free them. */
static void judge_groups(struct an_lineage *L, uint32_t region)
{
    struct an_region *r = &L->regions[region - 1];
    for (uint32_t g = r->groups; g;) {
        uint32_t next = L->groups[g - 1].next;
        judge(L, region, &L->groups[g - 1]);
        L->groups[g - 1].next = L->free_group;
        L->free_group = g;
        g = next;
    }
    r->groups = 0;
}

static void drop_node_ref(struct an_lineage *L, uint32_t region)
{
    struct an_region *r = &L->regions[region - 1];
    if (--r->nodes == 0)
        retire(L, region);
}

/* The map's count of the ranges that hold each region: a region whose last range goes is
 * retired. */
static void on_ref(void *arg, uint32_t region, int delta)
{
    struct an_lineage *L = arg;
    if (delta > 0)
        L->regions[region - 1].nodes++;
    else
        drop_node_ref(L, region);
}

/* Make [s, e) belong to region (0: to nothing), trimming what it overlaps. */
static void assign(struct an_lineage *L, uint64_t s, uint64_t e, uint32_t region)
{
    shp_ranges_assign(&L->map, s, e, region, on_ref, L);
}

/* ---- groups of reads ---- */

/* The group of region's reads from site of pieces of that size; a new one when there is none
 * and make is set, else NULL. */
static struct group *group_of(struct an_lineage *L, uint32_t region, uint32_t site, uint64_t piece,
                              bool make)
{
    /* Reads of different sizes from one site are different views (one per sample, say). */
    struct an_region *r = &L->regions[region - 1];
    for (uint32_t g = r->groups; g; g = L->groups[g - 1].next)
        if (L->groups[g - 1].site == site && L->groups[g - 1].piece == piece)
            return &L->groups[g - 1];
    if (!make)
        return NULL;
    uint32_t g = L->free_group;
    if (g) {
        L->free_group = L->groups[g - 1].next;
    } else {
        if (L->ngroups == L->gcap) {
            size_t ncap = L->gcap ? L->gcap * 2 : 1024;
            struct group *ng = realloc(L->groups, ncap * sizeof(*ng));
            if (!ng)
                return NULL;
            L->groups = ng;
            L->gcap = ncap;
        }
        g = (uint32_t)++L->ngroups;
    }
    struct group *gr = &L->groups[g - 1];
    /* Field by field: a memset of the group is a rep stosq here, slow to start. add_piece
     * sets the rest at the first piece, which follows at once. */
    gr->n = 0;
    gr->stride = 0;
    gr->first_launch = (struct an_ref){0};
    gr->first_replay = 0;
    gr->site = site;
    gr->piece = piece;
    gr->next = r->groups;
    r->groups = g;
    return gr;
}

static void add_piece(struct group *g, const struct an_step *st, uint64_t off, uint64_t len)
{
    if (g->n == 0) {
        g->first = *st->ref;
        g->first_launch = st->launch ? *st->launch : (struct an_ref){0};
        g->first_replay = st->replay;
        g->piece = len;
        g->first_off = off;
        g->same_piece = g->regular = true;
    } else {
        if (len != g->piece)
            g->same_piece = false;
        if (g->n == 1)
            g->stride = off - g->last_off;
        else if (off - g->last_off != g->stride)
            g->regular = false;
    }
    g->last_off = off;
    g->n++;
}

/* ---- the pass ---- */

struct read_ctx {
    struct an_lineage *L;
    const struct an_step *st;
    const struct an_ref *ref;
    uint32_t site;
    uint64_t s, e;
    uint32_t best; /* the producer of most of the bytes read */
    uint64_t best_bytes;
    uint32_t first; /* the producer of the first byte read */
    uint32_t stale; /* an earlier replay's region read past the end of `first` (stale_of) */
    /* What the step's own write removes right after (ws = we: nothing). */
    uint64_t ws, we;
};

/* Whether the bytes of region `old` that a read takes past the end of `newer` (which holds the
 * read's first byte) are stale: both were written by graph replays, from the same start, the
 * newer one shorter, at a later launch. That is a static output buffer that the latest replay
 * filled with fewer rows than the reader takes (a graph of a smaller batch-size bucket); the
 * rest is what an earlier step's replay left there. */
static bool stale_of(const struct an_region *newer, const struct an_region *old)
{
    return newer->replayed && old->replayed && old->replay < newer->replay &&
           old->start == newer->start && old->len > newer->len;
}

/* Inline where do_read calls it for the one range it found (most reads), as well as through the
 * visit's pointer: the call was a third of its cost. */
static inline __attribute__((always_inline)) void on_read(void *arg, const struct shp_range *n)
{
    struct read_ctx *rc = arg;
    uint64_t a = n->start > rc->s ? n->start : rc->s, b = n->end < rc->e ? n->end : rc->e;
    if (b - a > rc->best_bytes) {
        rc->best_bytes = b - a;
        rc->best = n->value;
    }
    struct an_region *r = &rc->L->regions[n->value - 1];
    if (!rc->first && n->start <= rc->s)
        rc->first = n->value;
    else if (rc->first && !rc->stale && n->value != rc->first &&
             stale_of(&rc->L->regions[rc->first - 1], r))
        rc->stale = n->value;
    /* Reads of a region without rows (a 1-D write, with no --dim values to factor it) are
     * never a finding (judge finds no rows): they are not grouped. Without --dim, that is
     * every read of a copy's or a collective's output but an all-gather's. */
    if (!rc->L->dims && !(r->pitch && r->width && r->width <= r->pitch))
        return;
    /* A region whose only range the step's own write removes (an in-place collective) is
     * retired and its groups judged right after: a new group would hold this one piece, and
     * one piece is never a finding, so none is made (each in-place collective made one, a
     * tenth of the pass). */
    bool goes = n->start >= rc->ws && n->end <= rc->we && r->nodes == 1;
    struct group *g = group_of(rc->L, n->value, rc->site, b - a, !goes);
    /* A read is one piece of each region it touches: counted once, at its first range. */
    if (g && (g->n == 0 || g->last_off != a - r->start || g->first.index != rc->ref->index))
        add_piece(g, rc->st, a - r->start, b - a);
}

static void chain(struct an_lineage *L, struct an_finding *f, uint32_t region);

/* The first stale read of a process (stale_of): the reader, the replayed call that wrote the
 * first bytes and its launch, and the earlier launch whose bytes were read past them. */
static void report_stale(struct an_lineage *L, const struct an_step *st, const struct read_ctx *rc)
{
    struct an_ctx *ctx = L->ctx;
    const struct an_region *nw = &L->regions[rc->first - 1];
    const struct an_origin *nwo = &L->origins[rc->first - 1], *oldo = &L->origins[rc->stale - 1];
    uint64_t old_replay = L->regions[rc->stale - 1].replay;
    struct an_finding *f = an_finding_add(&ctx->findings, AN_STALE_READ);
    if (!f)
        return;
    L->stale_reported = true;
    if (st->proc->sp->rank >= 0)
        an_finding_rank(f, st->proc->sp->rank);
    an_finding_event(f, st->ref, st->e->t_ns);
    f->labels[f->nevents] = "the replayed call that wrote the first bytes";
    f->events[f->nevents++] = nwo->ref;
    f->labels[f->nevents] = "the graph launch that executed it";
    f->events[f->nevents++] = nwo->launch;
    f->labels[f->nevents] = "the earlier launch that wrote the bytes past them";
    f->events[f->nevents++] = oldo->launch;
    chain(L, f, rc->first);
    char csite[256], note[600], onote[600];
    an_site(ctx, st->ref, csite, sizeof(csite));
    an_replay_note(ctx, &nwo->launch, nw->replay, &nwo->ref, note, sizeof(note));
    an_replay_note(ctx, &oldo->launch, old_replay, &oldo->ref, onote, sizeof(onote));
    uint64_t fresh = nw->start + nw->len - rc->s, total = rc->e - rc->s;
    size_t l = (size_t)snprintf(f->summary, sizeof(f->summary),
                                "%s reads %" PRIu64 " bytes at 0x%" PRIx64
                                ", of which %s wrote only the first %" PRIu64,
                                csite, total, rc->s, note, fresh);
    if (l < sizeof(f->summary))
        snprintf(f->summary + l, sizeof(f->summary) - l,
                 "; the other %" PRIu64 " are stale, left by %s, an earlier launch: the graph "
                 "replayed wrote fewer rows than are read",
                 total - fresh, onote);
}

/* The range that begins at s and reaches e or past it, where the hash of starts finds it: the
 * only one a read of [s, e) touches (no range before it can reach s). A buffer read whole, or
 * its head: an all-gather's input inside what a copy wrote, a step's activations shorter than
 * the last step's. */
static struct shp_range *covering(struct an_lineage *L, uint64_t s, uint64_t e)
{
    struct shp_range *r = shp_ranges_starting(&L->map, s);
    return r && r->end >= e ? r : NULL;
}

/* Read [s, e) in the step's process; returns the main producer (region + 1) or 0. The first
 * read of a step that finds one hands its chain to the passes after this one. x: the range
 * that begins at s and reaches e or past it when the caller found it (covering), the only one
 * the read touches. */
static uint32_t do_read(struct an_lineage *L, struct an_step *st, uint64_t s, uint64_t e,
                        const struct shp_span *then, const struct shp_range *x)
{
    struct read_ctx rc = {.L = L, .st = st, .ref = st->ref, .site = st->e->stack, .s = s, .e = e};
    if (then) {
        rc.ws = then->start;
        rc.we = then->start + then->len;
    }
    if (x)
        on_read(&rc, x);
    else if (s < e)
        shp_ranges_visit(&L->map, s, e, on_read, &rc);
    if (rc.stale && !st->launch && !L->stale_reported)
        report_stale(L, st, &rc);
    if (rc.best && L->producers && !st->nproducers) {
        const struct an_origin *o = &L->origins[rc.best - 1];
        st->producers[0] = o->ref;
        for (unsigned i = 0; i < o->nanc; i++)
            st->producers[1 + i] = *anc_at(o, i);
        st->nproducers = 1 + o->nanc;
    }
    return rc.best;
}

/* An in-place write of the only range of region `parent`, what it read (an all-reduce's buffer):
 * the region ends and a new one begins with the same bytes, its chain the old one's with the old
 * producer first. The old region's readers are judged as retire would judge them, and its slot
 * is the new region's: no slot taken from the free list and given back, no range changed in the
 * map. */
static uint32_t rewrite(struct an_lineage *L, struct an_step *st, uint32_t parent, uint64_t pitch,
                        uint64_t width, int dtype)
{
    struct an_region *r = &L->regions[parent - 1];
    struct an_origin *o = &L->origins[parent - 1];
    if (r->groups)
        judge_groups(L, parent);
    size_t n = o->nanc < AN_MAX_LINEAGE - 2 ? o->nanc : AN_MAX_LINEAGE - 2;
    /* In front of the ring, where the farthest beyond the chain's length was, or a free slot. */
    o->head = (uint8_t)((o->head - 1) & (ANC_RING - 1));
    o->anc[o->head] = o->ref;
    o->nanc = (uint8_t)(1 + n);
    o->ref = *st->ref;
    o->launch = st->launch ? *st->launch : (struct an_ref){0};
    r->pitch = pitch;
    r->width = width;
    r->site = st->e->stack;
    r->replayed = st->launch != NULL;
    r->replay = st->replay;
    /* A copy keeps the datatype of what it copies: here, its own. */
    if (dtype >= 0) {
        r->dtype = dtype;
        r->esize = (int)shp_dtype_size((unsigned)dtype);
    }
    return parent;
}

/* The step's call writes the span w (rows when w->pitch is set), made of what `parent` holds.
 * x: the range exactly w's bytes when the caller found it (shp_ranges_exact). */
static uint32_t do_write(struct an_lineage *L, struct an_step *st, const struct shp_span *w,
                         uint32_t parent, int dtype, struct shp_range *x)
{
    uint32_t site = st->e->stack;
    const struct an_ref *ref = st->ref;
    uint64_t s = w->start, len = w->len, pitch = w->pitch, width = w->width;
    if (!len)
        return 0;
    if (x && x->value == parent && !(pitch && width < pitch) && L->regions[parent - 1].nodes == 1)
        return rewrite(L, st, parent, pitch, width, dtype);
    uint32_t id = L->free_region;
    if (id) {
        L->free_region = L->regions[id - 1].next_free;
    } else {
        if (L->nregions == L->cap) {
            size_t ncap = L->cap ? L->cap * 2 : 1024;
            struct an_region *n = realloc(L->regions, ncap * sizeof(*n));
            if (!n)
                return 0;
            L->regions = n;
            struct an_origin *no = realloc(L->origins, ncap * sizeof(*no));
            if (!no)
                return 0;
            L->origins = no;
            L->cap = ncap;
        }
        id = (uint32_t)++L->nregions;
    }
    struct an_region *r = &L->regions[id - 1];
    struct an_origin *o = &L->origins[id - 1];
    /* Field by field: the ancestors past nanc are never read, and clearing the whole region
     * for every write showed in the profile. */
    o->ref = *ref;
    r->start = s;
    r->len = len;
    r->pitch = pitch;
    r->width = width;
    r->dtype = dtype;
    r->esize = 0;
    r->site = site;
    o->launch = st->launch ? *st->launch : (struct an_ref){0};
    r->replayed = st->launch != NULL;
    r->replay = st->replay;
    r->nodes = r->groups = r->next_free = 0;
    o->nanc = o->head = 0;
    if (parent) {
        const struct an_origin *po = &L->origins[parent - 1];
        size_t n = po->nanc < AN_MAX_LINEAGE - 2 ? po->nanc : AN_MAX_LINEAGE - 2;
        /* All the slots, whatever nanc says: a copy of a constant size is a few moves, where
         * one of n was a call into memcpy for every write (the slots past nanc are never
         * read). The parent's producer goes in front, as rewrite puts it. */
        memcpy(o->anc, po->anc, sizeof(o->anc));
        o->head = (uint8_t)((po->head - 1) & (ANC_RING - 1));
        o->anc[o->head] = po->ref;
        o->nanc = (uint8_t)(1 + n);
    }
    /* A copy keeps the datatype of what it copies. */
    if (dtype >= 0)
        r->esize = (int)shp_dtype_size((unsigned)dtype);
    else if (parent)
        r->esize = L->regions[parent - 1].esize, r->dtype = L->regions[parent - 1].dtype;
    else
        r->dtype = -1;
    if (x && !(pitch && width < pitch)) {
        /* The bytes of one region written again whole: what assign would do, without a
         * search or a count told through ref. The new region holds the one range; the old one
         * loses it (it is live, so never the slot just taken). */
        uint32_t old = x->value;
        x->value = id;
        r->nodes = 1;
        drop_node_ref(L, old);
        return id;
    }
    /* Hold the region while its bytes go in: what it replaces may be its own parent. */
    r->nodes++;
    if (pitch && width < pitch && len / pitch < 65536) {
        /* A 2-D write of narrower rows leaves the bytes between them alone (one column block
         * of a transpose, say). */
        for (uint64_t row = 0; row < len / pitch + (len % pitch != 0); row++)
            assign(L, s + row * pitch, s + row * pitch + width, id);
    } else {
        assign(L, s, s + len, id);
    }
    drop_node_ref(L, id);
    return id;
}

static void lineage_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct an_lineage *L = st;
    const struct shp_event *e = s->e;
    (void)ctx;
    if (e->result != 0)
        return;
    struct shp_span rd, wr;
    an_step_spans(s, &rd, &wr);
    uint32_t parent = 0;
    switch (e->type) {
    case SHP_REC_COPY:
        /* A 2-D read is its rows, at the source pitch. */
        if (rd.rows == 1 && rd.len) {
            parent = do_read(L, s, rd.start, rd.start + rd.len, NULL,
                             covering(L, rd.start, rd.start + rd.len));
        } else {
            for (uint64_t row = 0; row < rd.rows && row < 65536 && rd.len; row++) {
                uint64_t from = rd.start + row * rd.pitch;
                uint32_t pr =
                    do_read(L, s, from, from + (rd.pitch ? rd.width : rd.len), NULL, NULL);
                if (!parent)
                    parent = pr;
            }
        }
        do_write(L, s, &wr, parent, -1,
                 wr.len ? shp_ranges_exact(&L->map, wr.start, wr.start + wr.len) : NULL);
        break;
    case SHP_REC_COLL:
    case SHP_REC_P2P: {
        /* A buffer read or written again with the same bounds is found without a search; an
         * in-place collective's, once for both (reading changes nothing in the map). */
        struct shp_range *x = rd.len ? covering(L, rd.start, rd.start + rd.len) : NULL;
        bool in_place = rd.len && rd.start == wr.start && rd.len == wr.len;
        /* do_write clears a 1-D span whole, once it has a region for it (a free slot, or
         * room for one). */
        parent = do_read(L, s, rd.start, rd.start + rd.len,
                         !wr.pitch && (L->free_region || L->nregions < L->cap) ? &wr : NULL, x);
        if (!in_place)
            x = wr.len ? shp_ranges_exact(&L->map, wr.start, wr.start + wr.len) : NULL;
        else if (x && x->end != wr.start + wr.len)
            x = NULL;
        do_write(L, s, &wr, e->op == SHP_OP_ncclRecv ? 0 : parent, e->dtype, x);
        break;
    }
    case SHP_REC_ALLOC:
        if (e->cls == SHP_CLS_FREE && e->ptr != SHP_NONE) {
            /* Freed memory holds nothing any more. */
            const struct shp_alloc *a = shp_allocs_at(&L->al, e->ptr);
            if (a)
                assign(L, a->ptr, a->ptr + a->size, 0);
        }
        shp_allocs_event(&L->al, e);
        break;
    default:
        break;
    }
}

/* Rows from the --dim values when they factor the region's element count into at least two
 * rows; 0 when they do not. */
static uint64_t dim_rows(const struct an_ctx *ctx, const struct an_region *r, uint64_t *pitch,
                         uint64_t *esize, char *shape, size_t len)
{
    uint64_t es = r->esize ? (uint64_t)r->esize : 1;
    /* The element size comes from the collective the bytes came from; a region whose origin
     * is a copy of kernel output has none, and is tried as 2-byte elements (bf16, fp16: what
     * inference moves most), then 4, then 1, saying so in the shape. */
    static const uint64_t guesses[] = {2, 4, 1};
    for (size_t i = 0; i < (r->esize ? 1 : sizeof(guesses) / sizeof(guesses[0])); i++) {
        uint64_t size = r->esize ? es : guesses[i];
        if (r->len % size)
            continue;
        uint64_t elems = r->len / size, best = 0;
        char name[64];
        an_factor(&ctx->dims, elems, &best, name, sizeof(name));
        if (!best || best == elems)
            continue;
        snprintf(shape, len, "[%" PRIu64 ", %s]", elems / best, name);
        *pitch = best * size;
        *esize = size;
        return *pitch;
    }
    return 0;
}

/* The rows of a region: a 2-D write's rows (width bytes every pitch bytes), else rows from the
 * --dim values. The pieces of an all-gather lie side by side (pitch equal to width): rows from
 * --dim that factor the region come first there, since the consumer cuts the gathered tensor
 * by its own rows, not by the ranks' pieces. Returns the row width, sets *pitch and *shape;
 * 0 when the rows are unknown. */
static uint64_t rows_of(const struct an_ctx *ctx, const struct an_region *r, uint64_t *pitch,
                        uint64_t *esize, char *shape, size_t len)
{
    shape[0] = 0;
    *esize = r->esize ? (uint64_t)r->esize : 1;
    bool pieces = r->pitch && r->width && r->width <= r->pitch;
    if (!pieces || r->width == r->pitch) {
        uint64_t w = dim_rows(ctx, r, pitch, esize, shape, len);
        if (w || !pieces)
            return w;
    }
    *pitch = r->pitch;
    *esize = r->esize ? (uint64_t)r->esize : 1;
    snprintf(shape, len, "[%" PRIu64 ", %" PRIu64 "]", (r->len + r->pitch - 1) / r->pitch,
             r->width / *esize);
    return r->width;
}

/* Fill f's lineage with the producer chain from region (+1) back to its origin. */
static void chain(struct an_lineage *L, struct an_finding *f, uint32_t region)
{
    if (!region)
        return;
    const struct an_origin *o = &L->origins[region - 1];
    f->lineage[f->nlineage++] = o->ref;
    for (unsigned i = 0; i < o->nanc && f->nlineage < AN_MAX_LINEAGE; i++)
        f->lineage[f->nlineage++] = *anc_at(o, i);
}

/* A region's reads from one site, judged against the rows the region was written in. */
static void judge(struct an_lineage *L, uint32_t region, const struct group *g)
{
    struct an_ctx *ctx = L->ctx;
    if (g->n < 2 || !g->same_piece || !g->regular)
        return;
    const struct an_region *r = &L->regions[region - 1];
    const struct an_origin *o = &L->origins[region - 1];
    char pshape[160];
    uint64_t pitch = 0, es = 1, row = rows_of(ctx, r, &pitch, &es, pshape, sizeof(pshape));
    if (!row || g->piece >= row || g->stride != pitch || (g->first_off % pitch) + g->piece > row)
        return;
    struct an_finding *f = an_finding_add(&ctx->findings, AN_SHAPE_MISMATCH);
    if (!f)
        return;
    f->events[f->nevents++] = g->first;
    f->t_ns = 0;
    struct shp_event e;
    if (shp_event_decode(&ctx->procs[g->first.proc].sp->t, g->first.rec, g->first.type, &e))
        f->t_ns = e.t_ns;
    int rank = ctx->procs[g->first.proc].sp->rank;
    if (rank >= 0)
        f->ranks[f->nranks++] = rank;
    chain(L, f, region);
    struct shp_event pe;
    const char *producer = "?";
    if (shp_event_decode(&ctx->procs[o->ref.proc].sp->t, o->ref.rec, o->ref.type, &pe))
        producer = shp_op_name(pe.op);
    char csite[256], psite[256];
    an_site(ctx, &g->first, csite, sizeof(csite));
    an_site(ctx, &o->ref, psite, sizeof(psite));
    snprintf(f->summary, sizeof(f->summary),
             "%s reads [%" PRIu64 ", %" PRIu64 "] of a %s %s region that %s wrote at %s: %" PRIu64
             " pieces of %" PRIu64 " bytes at a stride of %" PRIu64 " bytes, each part of "
             "one %" PRIu64 "-byte row",
             csite, g->n, g->piece / es, pshape,
             r->dtype >= 0 ? shp_dtype_name((unsigned)r->dtype)
             : es == 2     ? "2-byte (bf16 or fp16?)"
             : es == 4     ? "4-byte"
                           : "byte",
             producer, psite, g->n, g->piece, g->stride, row);
    /* Reads or a producer inside graph replays: which replay, launched and captured where. */
    char note[600];
    size_t l = strlen(f->summary);
    if (g->first_launch.rec) {
        an_replay_note(ctx, &g->first_launch, g->first_replay, &g->first, note, sizeof(note));
        l += (size_t)snprintf(f->summary + l, sizeof(f->summary) - l, "; read in %s", note);
        if (f->nevents < AN_MAX_EVENTS) {
            f->labels[f->nevents] = "the graph launch that executed the read";
            f->events[f->nevents++] = g->first_launch;
        }
    }
    if (o->launch.rec && l < sizeof(f->summary)) {
        an_replay_note(ctx, &o->launch, r->replay, &o->ref, note, sizeof(note));
        snprintf(f->summary + l, sizeof(f->summary) - l, "; written in %s", note);
    }
    if (o->launch.rec && f->nevents < AN_MAX_EVENTS) {
        f->labels[f->nevents] = "the graph launch that executed the producer";
        f->events[f->nevents++] = o->launch;
    }
}

/* The region's last bytes are gone: judge its readers and reuse its slot. */
static void retire(struct an_lineage *L, uint32_t region)
{
    struct an_region *r = &L->regions[region - 1];
    /* Most regions have none (no group for a region without rows): no call. */
    if (r->groups)
        judge_groups(L, region);
    r->next_free = L->free_region;
    L->free_region = region;
}

static void *lineage_init(struct an_ctx *ctx)
{
    struct an_lineage *L = calloc(1, sizeof(*L));
    if (!L)
        return NULL;
    L->ctx = ctx;
    L->producers = ctx->expect != NULL;
    L->dims = ctx->dims.n > 0;
    return L;
}

/* What is still in memory at the end of a process: judge its readers too. */
static void lineage_proc_end(void *st, struct an_ctx *ctx, struct an_proc *p)
{
    struct an_lineage *L = st;
    (void)ctx;
    shp_ranges_clear(&L->map, on_ref, L);
    L->stale_reported = false;
    shp_allocs_clear(&L->al);
    madvise((void *)p->sp->t.map, p->sp->t.size, MADV_DONTNEED);
}

static void lineage_finish(void *st, struct an_ctx *ctx)
{
    struct an_lineage *L = st;
    (void)ctx;
    if (getenv("SHP_DEBUG_LINEAGE")) {
        size_t live = 0;
        for (size_t i = 0; i < L->nregions; i++)
            live += L->regions[i].nodes > 0;
        fprintf(stderr, "lineage: %zu region slots, %zu live, %zu group slots\n", L->nregions, live,
                L->ngroups);
    }
}

static void lineage_free(void *st)
{
    struct an_lineage *L = st;
    shp_ranges_free(&L->map);
    shp_allocs_free(&L->al);
    free(L->regions);
    free(L->origins);
    free(L->groups);
    free(L);
}

const struct an_pass an_pass_lineage = {
    .name = "lineage",
    .init = lineage_init,
    .event = lineage_event,
    .proc_end = lineage_proc_end,
    .finish = lineage_finish,
    .free = lineage_free,
};
