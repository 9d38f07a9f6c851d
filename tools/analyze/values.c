/* shapetrace analyze, values pass: the fingerprints of values that must agree across ranks
 * (SHAPETRACE_VALUES; the rule is docs/analyzer.md's "Values"). On the merged stream, so on the
 * main thread: value records are read with a cursor of this pass's own on each trace that has them
 * (they are not events), beside the calls they name, which the stream hands out first.
 *   - The output of an all-reduce, all-gather or broadcast: every member of the communicator
 *     must hold the same bytes (NCCL forwards one result to every rank). Compared per
 *     (communicator, seq).
 *   - A copy: compared among the ranks that copied from the same site (the same code) as their
 *     n-th copy there after the same collective's communicator, once those ranks had copied the
 *     same bytes there at an earlier occurrence (a site whose ranks always differ holds each
 *     rank's own data, a shard; bytes that are all zero do not count as agreeing).
 * A comparison is made when every member has gone three collectives past it on that
 * communicator (or ended), so memory follows the ranks' skew, not the traces' length. The first
 * difference on a communicator, in executed order, is the finding; later ones are counted as its
 * consequences. */
#define _GNU_SOURCE
#include "include/shapetrace/values.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"
#include "tools/lib/out.h"
#include "tools/lib/value.h"

#define RING 512           /* recent calls of a process that a value record may name */
#define SLACK 3            /* collectives every member must be past before a comparison */
#define MAX_OPEN (1 << 16) /* comparisons waiting on one communicator, at most */

/* One rank's fingerprint in a comparison. */
struct report {
    uint32_t proc;
    uint64_t fp, bytes, t_ns;
    struct an_ref call;
};

/* One comparison: a collective (comm, seq) or a copy (comm, site, occurrence). */
struct group {
    bool copy;
    uint64_t seq, site, occ;
    uint64_t pos2; /* executed order on the communicator: 2 x position, + 1 for a copy after it */
    unsigned op;
    struct report *r;
    int n, cap;
};

struct member {
    uint32_t proc;
    uint64_t count; /* collectives it executed on the communicator so far */
    bool ended;
};

struct vcomm {
    uint64_t id;
    int nranks;
    struct member *m;
    size_t nm, capm;
    uint64_t min; /* the fewest collectives a member that has not ended executed */
    size_t at_min;
    bool min_valid;
    struct group **open; /* sorted by pos2 */
    size_t nopen, capopen;
    uint64_t *agreed; /* copy sites known to hold replicated data */
    size_t nagreed, capagreed;
    struct group *first; /* the earliest difference, the finding */
    uint64_t first_fp, first_maj_fp;
    uint64_t later; /* differences after it */
};

/* A call of a process, noted when the stream hands it out. */
struct recent {
    uint64_t off;
    struct an_ref ref;
    uint64_t t_ns;
    uint64_t pos;               /* a collective's executed position on its communicator */
    uint64_t ctx_comm, ctx_pos; /* a copy's: the last collective executed before it */
};

struct vproc {
    struct shp_cursor cur; /* this pass's walk of the trace, for value records */
    const struct shp_rec *ahead;
    unsigned ahead_type;
    struct recent ring[RING];
    uint64_t nring;
    struct {
        uint64_t id, count;
    } * counts; /* executed collectives per communicator */
    size_t ncounts, capcounts;
    uint64_t last_comm, last_pos;
};

struct values {
    struct vproc **procs; /* NULL for a trace without value records */
    size_t nprocs;
    struct an_table comms; /* of struct vcomm */
    struct an_graphs graphs;
    struct an_values_counts counts;
    uint64_t zero_bytes[8], zero_fp[8];
    unsigned nzero;
};

static uint64_t vcomm_key(const void *item)
{
    return ((const struct vcomm *)item)->id;
}

static void *values_init(struct an_ctx *ctx)
{
    bool any = false;
    for (size_t i = 0; i < ctx->nprocs; i++)
        any |= shp_trace_version_values(ctx->procs[i].sp->t.hdr->version);
    if (!any)
        return NULL;
    struct values *V = calloc(1, sizeof(*V));
    if (!V || !(V->procs = calloc(ctx->nprocs, sizeof(*V->procs)))) {
        free(V);
        return NULL;
    }
    V->nprocs = ctx->nprocs;
    V->comms.key = vcomm_key;
    for (size_t i = 0; i < ctx->nprocs; i++)
        if (shp_trace_version_values(ctx->procs[i].sp->t.hdr->version))
            V->procs[i] = calloc(1, sizeof(struct vproc));
    return V;
}

/* ---- communicators, their members and what they executed ---- */

static struct vcomm *vcomm_get(struct values *V, uint64_t id, int nranks)
{
    struct vcomm *c = an_table_get(&V->comms, id);
    if (c || !id)
        return c;
    if (!(c = calloc(1, sizeof(*c))))
        return NULL;
    c->id = id;
    c->nranks = nranks;
    if (an_table_add(&V->comms, c) < 0) {
        free(c);
        return NULL;
    }
    return c;
}

static struct member *member_of(struct vcomm *c, uint32_t proc)
{
    for (size_t i = 0; i < c->nm; i++)
        if (c->m[i].proc == proc)
            return &c->m[i];
    if (!shp_grow((void **)&c->m, &c->capm, c->nm, sizeof(*c->m)))
        return NULL;
    c->m[c->nm] = (struct member){.proc = proc};
    c->min_valid = false;
    return &c->m[c->nm++];
}

/* The fewest collectives any member that has not ended executed (UINT64_MAX when none is left),
 * and how many members are there. */
static void min_refresh(struct vcomm *c)
{
    c->min = UINT64_MAX;
    c->at_min = 0;
    for (size_t i = 0; i < c->nm; i++) {
        if (c->m[i].ended)
            continue;
        if (c->m[i].count < c->min) {
            c->min = c->m[i].count;
            c->at_min = 0;
        }
        c->at_min += c->m[i].count == c->min;
    }
    c->min_valid = true;
}

static void close_ready(struct values *V, struct an_ctx *ctx, struct vcomm *c, bool all);

/* Process `proc` executed a collective on comm: its position there, from 0. */
static uint64_t executed(struct values *V, struct an_ctx *ctx, struct vproc *vp, uint32_t proc,
                         uint64_t comm)
{
    size_t i = 0;
    while (i < vp->ncounts && vp->counts[i].id != comm)
        i++;
    if (i == vp->ncounts) {
        if (!shp_grow((void **)&vp->counts, &vp->capcounts, vp->ncounts, sizeof(*vp->counts)))
            return SHP_NONE;
        vp->counts[vp->ncounts++] = (typeof(*vp->counts)){comm, 0};
    }
    uint64_t pos = vp->counts[i].count++;
    vp->last_comm = comm;
    vp->last_pos = pos;
    struct vcomm *c = vcomm_get(V, comm, -1);
    struct member *m = c ? member_of(c, proc) : NULL;
    if (m) {
        /* The slowest member moving on is what makes comparisons ready. */
        bool at_min = c->min_valid && m->count == c->min;
        m->count = pos + 1;
        if (!c->min_valid || (at_min && --c->at_min == 0)) {
            min_refresh(c);
            if (c->nopen)
                close_ready(V, ctx, c, false);
        }
    }
    return pos;
}

/* ---- comparisons ---- */

/* The fingerprint of `bytes` zero bytes (fresh buffers are zero on every rank: agreeing on them
 * says nothing). The last few sizes are kept. */
static uint64_t zero_fingerprint(struct values *V, uint64_t bytes)
{
    for (unsigned i = 0; i < V->nzero; i++)
        if (V->zero_bytes[i] == bytes)
            return V->zero_fp[i];
    uint64_t a = 0, b = 0, words = bytes / 8;
    for (uint64_t i = 0; i < words; i++) {
        a += shp_values_lane_a(0, i);
        b += shp_values_lane_b(0, i);
    }
    if (bytes % 8) {
        uint64_t t = (uint64_t)(bytes % 8) << 56;
        a += shp_values_lane_a(t, words);
        b += shp_values_lane_b(t, words);
    }
    uint64_t fp = shp_values_final(a, b, bytes);
    unsigned k = V->nzero < 8 ? V->nzero++ : (unsigned)(bytes % 8);
    V->zero_bytes[k] = bytes;
    V->zero_fp[k] = fp;
    return fp;
}

static bool site_agreed(const struct vcomm *c, uint64_t site)
{
    for (size_t i = 0; i < c->nagreed; i++)
        if (c->agreed[i] == site)
            return true;
    return false;
}

static void group_free(struct group *g)
{
    if (g)
        free(g->r);
    free(g);
}

/* The fingerprints of g, compared: a difference becomes the communicator's finding if it is the
 * earliest so far. Frees g unless it is kept as the finding. */
static void evaluate(struct values *V, struct vcomm *c, struct group *g)
{
    if (g->n < 2) {
        group_free(g);
        return;
    }
    for (int i = 1; i < g->n; i++)
        if (g->r[i].bytes != g->r[0].bytes) {
            /* Different sizes: the alignment's or lineage's business, not a value's. */
            group_free(g);
            return;
        }
    /* The majority: the fingerprint most ranks hold (none on a tie). */
    uint64_t maj = 0;
    int best = 0, second = 0, ndistinct = 0;
    for (int i = 0; i < g->n; i++) {
        int k = 0;
        bool seen = false;
        for (int j = 0; j < g->n; j++) {
            k += g->r[j].fp == g->r[i].fp;
            seen |= j < i && g->r[j].fp == g->r[i].fp;
        }
        if (seen)
            continue;
        ndistinct++;
        if (k > best) {
            second = best;
            best = k;
            maj = g->r[i].fp;
        } else if (k > second) {
            second = k;
        }
    }
    if (ndistinct == 1) {
        if (g->copy && !site_agreed(c, g->site) && maj != zero_fingerprint(V, g->r[0].bytes) &&
            shp_grow((void **)&c->agreed, &c->capagreed, c->nagreed, sizeof(*c->agreed)))
            c->agreed[c->nagreed++] = g->site;
        V->counts.compared++;
        group_free(g);
        return;
    }
    if (g->copy && !site_agreed(c, g->site)) {
        group_free(g); /* not known to hold replicated data */
        return;
    }
    V->counts.compared++;
    V->counts.differ++;
    if (best == second)
        maj = 0;
    uint64_t t = UINT64_MAX;
    for (int i = 0; i < g->n; i++)
        if (g->r[i].t_ns < t)
            t = g->r[i].t_ns;
    uint64_t ft = UINT64_MAX;
    if (c->first)
        for (int i = 0; i < c->first->n; i++)
            if (c->first->r[i].t_ns < ft)
                ft = c->first->r[i].t_ns;
    if (c->first && (c->first->pos2 < g->pos2 || (c->first->pos2 == g->pos2 && ft <= t))) {
        c->later++;
        group_free(g);
        return;
    }
    if (c->first)
        c->later++;
    group_free(c->first);
    c->first = g;
    c->first_maj_fp = maj;
}

/* Compare what every member has gone SLACK collectives past, and what every member reported
 * (all: everything still open). */
static void close_ready(struct values *V, struct an_ctx *ctx, struct vcomm *c, bool all)
{
    (void)ctx;
    if (!c->min_valid)
        min_refresh(c);
    size_t k = 0;
    while (k < c->nopen) {
        struct group *g = c->open[k];
        bool full = !g->copy && c->nranks > 0 && g->n >= c->nranks;
        bool past = c->min == UINT64_MAX || c->min >= g->pos2 / 2 + SLACK;
        if (!all && !full && !past && c->nopen <= MAX_OPEN) {
            k++;
            continue;
        }
        memmove(c->open + k, c->open + k + 1, (c->nopen - k - 1) * sizeof(*c->open));
        c->nopen--;
        evaluate(V, c, g);
    }
}

/* The open comparison with this key on c, made (in pos2 order) if there is none. */
static struct group *group_for(struct vcomm *c, bool copy, uint64_t seq, uint64_t site,
                               uint64_t occ, uint64_t pos2, unsigned op)
{
    for (size_t k = c->nopen; k-- > 0;) {
        struct group *g = c->open[k];
        if (g->copy == copy && (copy ? g->site == site && g->occ == occ : g->seq == seq))
            return g;
    }
    if (!shp_grow((void **)&c->open, &c->capopen, c->nopen, sizeof(*c->open)))
        return NULL;
    struct group *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    *g = (struct group){.copy = copy, .seq = seq, .site = site, .occ = occ, .pos2 = pos2, .op = op};
    size_t k = c->nopen;
    while (k > 0 && c->open[k - 1]->pos2 > pos2)
        k--;
    memmove(c->open + k + 1, c->open + k, (c->nopen - k) * sizeof(*c->open));
    c->open[k] = g;
    c->nopen++;
    return g;
}

static const struct recent *recent_find(const struct vproc *vp, uint64_t off)
{
    uint64_t n = vp->nring < RING ? vp->nring : RING;
    for (uint64_t k = 0; k < n; k++) {
        const struct recent *r = &vp->ring[(vp->nring - 1 - k) % RING];
        if (r->off == off)
            return r;
    }
    return NULL;
}

static void value(struct values *V, struct an_ctx *ctx, uint32_t proc, const struct shp_value *v)
{
    V->counts.records++;
    switch (v->status) {
    case SHP_VALUE_DONE:
        break;
    case SHP_VALUE_CAPTURED:
        V->counts.captured++;
        return;
    case SHP_VALUE_BUSY:
        V->counts.busy++;
        return;
    case SHP_VALUE_PENDING:
        V->counts.pending++;
        return;
    default:
        V->counts.lost++;
        return;
    }
    struct vproc *vp = V->procs[proc];
    const struct recent *rc = recent_find(vp, v->call);
    struct recent fallback;
    if (!rc) {
        /* Farther from its call than the recent ones (another thread's records between them):
         * the call from its offset, its index found later if it is reported. */
        unsigned type;
        const struct shp_rec *r = shp_value_call_at(&ctx->procs[proc].sp->t, v->call, &type);
        if (!r)
            return;
        fallback = (struct recent){
            .off = v->call,
            .ref = {.proc = proc, .index = SHP_NONE, .rec = r, .type = type},
            .t_ns = v->t_ns,
            .pos = v->seq,
            .ctx_comm = v->comm,
            .ctx_pos = v->seq,
        };
        rc = &fallback;
    }
    bool copy = v->what == SHP_VALUE_COPIED;
    uint64_t comm = copy ? rc->ctx_comm : v->comm;
    uint64_t pos = copy ? rc->ctx_pos : rc->pos;
    if (!comm || pos == SHP_NONE)
        return; /* a copy before any collective: no communicator to compare it in */
    struct vcomm *c = vcomm_get(V, comm, -1);
    struct group *g = c ? group_for(c, copy, v->seq, v->site, v->occ, 2 * pos + copy, v->op) : NULL;
    if (!g)
        return;
    if (g->n == g->cap) {
        int ncap = g->cap ? 2 * g->cap : 4;
        struct report *nr = realloc(g->r, (size_t)ncap * sizeof(*nr));
        if (!nr)
            return;
        g->r = nr;
        g->cap = ncap;
    }
    g->r[g->n++] = (struct report){
        .proc = proc, .fp = v->fp, .bytes = v->bytes, .t_ns = rc->t_ns, .call = rc->ref};
    if (!copy && c->nranks > 0 && g->n >= c->nranks)
        close_ready(V, ctx, c, false);
}

/* Read proc's value records that lie before file offset `until` (UINT64_MAX: all). */
static void drain(struct values *V, struct an_ctx *ctx, uint32_t proc, uint64_t until)
{
    struct vproc *vp = V->procs[proc];
    const struct shp_trace *t = &ctx->procs[proc].sp->t;
    for (;;) {
        if (!vp->ahead) {
            size_t size;
            vp->ahead = shp_trace_next(t, &vp->cur, &vp->ahead_type, &size);
            if (!vp->ahead)
                return;
        }
        if ((uint64_t)((const unsigned char *)vp->ahead - t->map) >= until)
            return;
        struct shp_value v;
        if (shp_value_decode(t, vp->ahead, vp->ahead_type, &v))
            value(V, ctx, proc, &v);
        vp->ahead = NULL;
    }
}

static void note(struct vproc *vp, uint64_t off, const struct an_step *s, uint64_t pos)
{
    struct recent *r = &vp->ring[vp->nring++ % RING];
    *r = (struct recent){.off = off,
                         .ref = *s->ref,
                         .t_ns = s->e->t_ns,
                         .pos = pos,
                         .ctx_comm = vp->last_comm,
                         .ctx_pos = vp->last_comm ? vp->last_pos : SHP_NONE};
}

static void values_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct values *V = st;
    uint32_t proc = s->ref->proc;
    struct vproc *vp = proc < V->nprocs ? V->procs[proc] : NULL;
    if (!vp)
        return;
    const struct shp_event *e = s->e;
    uint64_t off = (uint64_t)((const unsigned char *)s->ref->rec - ctx->procs[proc].sp->t.map);
    /* The value records before this call first: the calls they name came before it. */
    drain(V, ctx, proc, off);
    if (e->type == SHP_REC_COMM && e->comm && e->nranks > 0 &&
        (e->comm_kind == SHP_COMM_INIT || e->comm_kind == SHP_COMM_SPLIT ||
         e->comm_kind == SHP_COMM_SHRINK)) {
        struct vcomm *c = vcomm_get(V, e->comm, e->nranks);
        if (c && c->nranks <= 0)
            c->nranks = e->nranks;
        if (c)
            member_of(c, proc);
        return;
    }
    if (an_graphs_event(&V->graphs, s, SHP_REC_COLL))
        return; /* captured: it executes at its graph's launches */
    uint64_t replay;
    struct an_graph *g = an_graphs_launch(&V->graphs, s, &replay);
    if (g) {
        for (size_t i = 0; i < g->n; i++)
            if (g->calls[i].e.comm)
                executed(V, ctx, vp, proc, g->calls[i].e.comm);
        return;
    }
    if (e->type == SHP_REC_COLL && e->comm && e->seq != SHP_NONE) {
        uint64_t pos = executed(V, ctx, vp, proc, e->comm);
        note(vp, off, s, pos);
    } else if (e->type == SHP_REC_COPY && e->height == 1) {
        note(vp, off, s, SHP_NONE);
    }
}

static void values_proc_end(void *st, struct an_ctx *ctx, struct an_proc *p)
{
    struct values *V = st;
    uint32_t proc = (uint32_t)(p - ctx->procs);
    if (!V->procs[proc])
        return;
    drain(V, ctx, proc, UINT64_MAX);
    for (size_t i = 0; i < V->comms.n; i++) {
        struct vcomm *c = V->comms.v[i];
        for (size_t k = 0; k < c->nm; k++)
            if (c->m[k].proc == proc && !c->m[k].ended) {
                c->m[k].ended = true;
                c->min_valid = false;
                close_ready(V, ctx, c, false);
            }
    }
}

/* ---- the finding ---- */

/* The index of the call at r in its trace, for a value record whose call was not among the
 * recent ones: counted by a walk. */
static void resolve_index(struct an_ctx *ctx, struct an_ref *r)
{
    if (r->index != SHP_NONE)
        return;
    const struct shp_trace *t = &ctx->procs[r->proc].sp->t;
    struct shp_cursor cur = {0};
    const struct shp_rec *x;
    unsigned type;
    size_t size;
    uint64_t index = 0;
    while ((x = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, x, type, &e))
            continue;
        if (x == r->rec) {
            r->index = index;
            return;
        }
        index++;
    }
}

static void rank_list(struct an_ctx *ctx, const struct group *g, uint64_t fp, bool in, char *out,
                      size_t len)
{
    int ranks[AN_MAX_RANKS];
    int n = 0;
    bool more = false;
    for (int i = 0; i < g->n; i++)
        if ((g->r[i].fp == fp) == in) {
            if (n < AN_MAX_RANKS)
                ranks[n++] = ctx->procs[g->r[i].proc].sp->rank;
            else
                more = true;
        }
    an_rank_list(ranks, n, more, out, len);
}

static int by_rank(const void *a, const void *b, void *arg)
{
    const struct an_ctx *ctx = arg;
    const struct report *x = a, *y = b;
    int rx = ctx->procs[x->proc].sp->rank, ry = ctx->procs[y->proc].sp->rank;
    return rx != ry ? (rx > ry) - (rx < ry) : (x->proc > y->proc) - (x->proc < y->proc);
}

static void finding_of(struct values *V, struct an_ctx *ctx, struct vcomm *c)
{
    (void)V;
    struct group *g = c->first;
    /* In rank order, whatever order the traces were merged in. */
    qsort_r(g->r, (size_t)g->n, sizeof(*g->r), by_rank, ctx);
    struct an_finding *f = an_finding_add(&ctx->findings, AN_VALUE_MISMATCH);
    if (!f)
        return;
    uint64_t maj = c->first_maj_fp;
    f->comm = c->id;
    f->seq = g->copy ? SHP_NONE : g->seq;
    f->position = g->pos2 / 2 + (g->copy ? 1 : 0);
    f->consequences = c->later;
    const struct report *culprit = NULL, *majority = NULL;
    for (int i = 0; i < g->n; i++) {
        struct report *r = &g->r[i];
        if (maj && r->fp == maj) {
            if (!majority)
                majority = r;
            continue;
        }
        if (!culprit)
            culprit = r;
        resolve_index(ctx, &r->call);
        struct shp_event e;
        int cr = an_decode(ctx, &r->call, &e) && e.comm == c->id ? e.comm_rank : -1;
        an_finding_rank_in(f, ctx->procs[r->proc].sp->rank, cr);
        an_finding_event(f, &r->call, r->t_ns);
    }
    if (majority) {
        struct an_ref ref = majority->call;
        resolve_index(ctx, &ref);
        f->expected = ref;
        f->has_expected = true;
        if (!f->t_ns || majority->t_ns < f->t_ns)
            f->t_ns = majority->t_ns;
    }
    char site[256], culprits[160], others[160];
    an_site(ctx, &culprit->call, site, sizeof(site));
    rank_list(ctx, g, maj, false, culprits, sizeof(culprits));
    uint64_t bytes = culprit->bytes;
    int nc = 0;
    for (int i = 0; i < g->n; i++)
        nc += !maj || g->r[i].fp != maj;
    if (!g->copy) {
        if (maj) {
            rank_list(ctx, g, maj, true, others, sizeof(others));
            snprintf(f->summary, sizeof(f->summary),
                     "%s #%" PRIu64 " on communicator %.8" PRIx64
                     ": rank%s %s received other bytes than rank%s %s (fingerprint 0x%016" PRIx64
                     ", not 0x%016" PRIx64 "; %" PRIu64 " bytes) at %s",
                     shp_op_name(g->op), g->seq, c->id >> 32, nc > 1 ? "s" : "", culprits,
                     g->n - nc > 1 ? "s" : "", others, culprit->fp, maj, bytes, site);
        } else {
            snprintf(f->summary, sizeof(f->summary),
                     "%s #%" PRIu64 " on communicator %.8" PRIx64
                     ": ranks %s received different bytes (no two of a majority; %" PRIu64
                     " bytes) at %s",
                     shp_op_name(g->op), g->seq, c->id >> 32, culprits, bytes, site);
        }
        return;
    }
    char after[96] = "";
    struct shp_event e;
    if (an_decode(ctx, &culprit->call, &e)) {
        const char *k = e.kind >= 0 && e.kind <= 4 ? shp_kind_names[e.kind] : "?";
        snprintf(after, sizeof(after), "%s ", k);
    }
    if (maj) {
        rank_list(ctx, g, maj, true, others, sizeof(others));
        snprintf(f->summary, sizeof(f->summary),
                 "%scopy at %s, the %" PRIu64 "%s there: rank%s %s copied other bytes than "
                 "rank%s %s, which had agreed there before (fingerprint 0x%016" PRIx64
                 ", not 0x%016" PRIx64 "; %" PRIu64 " bytes; after collective %" PRIu64
                 " on communicator %.8" PRIx64 ")",
                 after, site, g->occ + 1,
                 (g->occ + 1) % 10 == 1 && (g->occ + 1) % 100 != 11   ? "st"
                 : (g->occ + 1) % 10 == 2 && (g->occ + 1) % 100 != 12 ? "nd"
                 : (g->occ + 1) % 10 == 3 && (g->occ + 1) % 100 != 13 ? "rd"
                                                                      : "th",
                 nc > 1 ? "s" : "", culprits, g->n - nc > 1 ? "s" : "", others, culprit->fp, maj,
                 bytes, g->seq, c->id >> 32);
    } else {
        snprintf(f->summary, sizeof(f->summary),
                 "%scopy at %s, copy %" PRIu64 " there: ranks %s copied different bytes where "
                 "they had agreed before (no two of a majority; %" PRIu64 " bytes)",
                 after, site, g->occ, culprits, bytes);
    }
}

static void values_finish(void *st, struct an_ctx *ctx)
{
    struct values *V = st;
    for (size_t i = 0; i < V->nprocs; i++)
        if (V->procs[i])
            drain(V, ctx, (uint32_t)i, UINT64_MAX);
    for (size_t i = 0; i < V->comms.n; i++) {
        struct vcomm *c = V->comms.v[i];
        close_ready(V, ctx, c, true);
        if (c->first)
            finding_of(V, ctx, c);
    }
    ctx->values = V->counts;
}

static void values_free(void *st)
{
    struct values *V = st;
    for (size_t i = 0; i < V->nprocs; i++)
        if (V->procs[i]) {
            free(V->procs[i]->counts);
            free(V->procs[i]);
        }
    free(V->procs);
    for (size_t i = 0; i < V->comms.n; i++) {
        struct vcomm *c = V->comms.v[i];
        for (size_t k = 0; k < c->nopen; k++)
            group_free(c->open[k]);
        free(c->open);
        free(c->m);
        free(c->agreed);
        group_free(c->first);
        free(c);
    }
    an_table_free(&V->comms);
    an_graphs_free(&V->graphs);
    free(V);
}

const struct an_pass an_pass_values = {
    .name = "values",
    .init = values_init,
    .event = values_event,
    .proc_end = values_proc_end,
    .finish = values_finish,
    .free = values_free,
};
