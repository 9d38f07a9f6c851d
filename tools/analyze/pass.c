/* shapetrace analyze: the containers that passes share (see pass.h): a queue of open calls and
 * a table indexed by 64-bit keys. */
#include "tools/analyze/pass.h"

#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/lib/out.h"

struct an_entry an_entry_of(const struct shp_event *e, const struct an_ref *ref)
{
    return (struct an_entry){.ref = *ref,
                             .t_ns = e->t_ns,
                             .seq = e->seq,
                             .count = e->count,
                             .root = e->root,
                             .redop = e->redop,
                             .dtype = e->dtype,
                             .op = e->op};
}

void an_note_match(struct an_ctx *ctx, const struct an_entry *send, const struct an_entry *recv)
{
    if (!ctx->keep_matches ||
        !shp_grow((void **)&ctx->matches, &ctx->cap_matches, ctx->nmatches, sizeof(*ctx->matches)))
        return;
    ctx->matches[ctx->nmatches++] =
        (struct an_match){.send = send->launch.rec ? send->launch : send->ref,
                          .recv = recv->launch.rec ? recv->launch : recv->ref};
}

bool an_lost_end(const struct an_proc *p)
{
    const struct shp_file_header *h = p->sp->t.hdr;
    return h->dropped || (h->flags & SHP_FILE_DISABLED) || h->off_reason ||
           h->ctl[SHP_CTL_ARMED] == 0;
}

void an_place_init(struct an_place *p)
{
    *p = (struct an_place){.refused_seq = SHP_NONE};
}

/* seq + replayed - captured - refused, saturating at both ends (a crafted seq may be huge). */
static uint64_t place_of_seq(const struct an_place *p, uint64_t seq)
{
    uint64_t x, less = p->captured + p->refused;
    if (__builtin_add_overflow(seq, p->replayed, &x))
        x = UINT64_MAX;
    return x > less ? x - less : 0;
}

/* An eager call after a refused one: if it has a later seq, the refused call kept its own (a
 * preload from before seqs were given back): it counts among the refused. */
static void settle_refused(struct an_place *p, const struct an_entry *en)
{
    if (p->refused_seq != SHP_NONE && en->seq != SHP_NONE && en->seq > p->refused_seq)
        p->refused++;
    p->refused_seq = SHP_NONE;
}

uint64_t an_place_next(struct an_place *p, const struct an_entry *en)
{
    uint64_t at;
    if (en->launch.rec || en->seq == SHP_NONE) {
        at = p->placed ? p->next : 0;
        p->replayed++;
    } else {
        settle_refused(p, en);
        at = place_of_seq(p, en->seq);
        /* Never before the last place: a seq that went back is not a rank going back. */
        if (p->placed && at < p->next)
            at = p->next;
    }
    p->placed = true;
    p->next = at + 1;
    return at;
}

uint64_t an_place_refused(struct an_place *p, const struct an_entry *en)
{
    uint64_t at = p->placed ? p->next : 0;
    if (!en->launch.rec && en->seq != SHP_NONE) {
        settle_refused(p, en);
        uint64_t x = place_of_seq(p, en->seq);
        at = p->placed && x < p->next ? p->next : x;
        p->refused_seq = en->seq;
    }
    return at;
}

int an_queue_push_grow(struct an_queue *q, const struct an_entry *e)
{
    size_t ncap = q->cap ? q->cap * 2 : 8;
    struct an_entry *nv = malloc(ncap * sizeof(*nv));
    if (!nv)
        return -1;
    for (size_t i = 0; i < q->n; i++)
        nv[i] = *an_queue_at(q, i);
    free(q->v);
    q->v = nv;
    q->head = 0;
    q->cap = ncap;
    q->v[q->n++] = *e;
    return 0;
}

uint64_t an_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static size_t *slot_of(size_t *slots, size_t nslots, void *const *v, uint64_t (*key)(const void *),
                       uint64_t k)
{
    for (size_t i = an_mix(k) & (nslots - 1);; i = (i + 1) & (nslots - 1))
        if (!slots[i] || key(v[slots[i] - 1]) == k)
            return &slots[i];
}

void *an_table_get(const struct an_table *t, uint64_t k)
{
    if (!t->nslots)
        return NULL;
    size_t s = *slot_of(t->slots, t->nslots, t->v, t->key, k);
    return s ? t->v[s - 1] : NULL;
}

/* Keep the index at most half full. */
static int regrow(struct an_table *t)
{
    if (t->nslots && t->n * 2 < t->nslots)
        return 0;
    size_t ns = t->nslots ? t->nslots * 2 : 64;
    size_t *s = calloc(ns, sizeof(*s));
    if (!s)
        return -1;
    for (size_t i = 0; i < t->n; i++)
        *slot_of(s, ns, t->v, t->key, t->key(t->v[i])) = i + 1;
    free(t->slots);
    t->slots = s;
    t->nslots = ns;
    return 0;
}

int an_table_add(struct an_table *t, void *item)
{
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        void **nv = realloc(t->v, ncap * sizeof(*nv));
        if (!nv)
            return -1;
        t->v = nv;
        t->cap = ncap;
    }
    t->v[t->n++] = item;
    if (regrow(t) == 0)
        *slot_of(t->slots, t->nslots, t->v, t->key, t->key(item)) = t->n;
    return 0;
}

void an_table_free(struct an_table *t)
{
    free(t->v);
    free(t->slots);
    t->v = NULL;
    t->slots = NULL;
    t->n = t->cap = t->nslots = 0;
}

/* ---- CUDA graphs ---- */

/* Graphs are few (one per batch-size bucket), so a scan from the newest is enough; newest
 * first because a handle the driver reuses after a destroy names the latest graph. */
static struct an_graph *graph_by(struct an_graphs *g, uint32_t proc, uint64_t capture,
                                 uint64_t graph)
{
    for (size_t i = g->n; i-- > 0;)
        if (g->v[i].proc == proc &&
            (capture ? g->v[i].capture == capture : graph && g->v[i].graph == graph))
            return &g->v[i];
    return NULL;
}

static struct an_graph *graph_new(struct an_graphs *g, uint32_t proc, uint64_t capture)
{
    if (!shp_grow((void **)&g->v, &g->cap, g->n, sizeof(*g->v)))
        return NULL;
    struct an_graph *n = &g->v[g->n++];
    *n = (struct an_graph){.proc = proc, .capture = capture};
    return n;
}

static void exec_add(struct an_graphs *g, uint32_t proc, uint64_t exec, size_t graph)
{
    if (!shp_grow((void **)&g->execs, &g->cap_execs, g->nexecs, sizeof(*g->execs)))
        return;
    g->execs[g->nexecs++] = (struct an_exec){.proc = proc, .exec = exec, .graph = graph};
}

bool an_graphs_event_of(struct an_graphs *g, const struct an_step *s, unsigned keep)
{
    const struct shp_event *e = s->e;
    uint32_t proc = s->ref->proc;
    bool kept = keep == AN_KEEP_CALLS
                    ? e->type == SHP_REC_COLL || e->type == SHP_REC_P2P || e->type == SHP_REC_COPY
                    : e->type == keep;
    if (kept && (e->flags & SHP_EV_CAPTURED)) {
        if (an_refused(e))
            return true; /* NCCL refused it: nothing was captured */
        uint64_t cap = e->graph != SHP_NONE ? e->graph : 0;
        struct an_graph *gr = cap ? graph_by(g, proc, cap, 0) : NULL;
        if (cap && !gr)
            gr = graph_new(g, proc, cap);
        if (gr && gr->n == gr->cap) {
            size_t c = gr->cap ? gr->cap * 2 : 4;
            struct an_captured *v = realloc(gr->calls, c * sizeof(*v));
            if (v) {
                gr->calls = v;
                gr->cap = c;
            }
        }
        if (gr && gr->n < gr->cap)
            gr->calls[gr->n++] = (struct an_captured){.e = *e, .ref = *s->ref};
        return true;
    }
    if (e->type != SHP_REC_GRAPH || e->result != 0)
        return false;
    if (e->cls == SHP_CLS_CAPTURE && e->capture != SHP_NONE && e->graph != SHP_NONE) {
        /* cudaStreamEndCapture: the capture becomes this graph (a capture with nothing of
         * ours in it is kept too, so that its launches are known to execute nothing). */
        struct an_graph *gr = graph_by(g, proc, e->capture, 0);
        if (!gr)
            gr = graph_new(g, proc, e->capture);
        if (gr)
            gr->graph = e->graph;
    } else if (e->cls == SHP_CLS_GRAPH && e->graph != SHP_NONE && e->exec != SHP_NONE) {
        struct an_graph *gr = graph_by(g, proc, 0, e->graph);
        if (gr)
            exec_add(g, proc, e->exec, (size_t)(gr - g->v));
    }
    return false;
}

struct an_graph *an_graphs_launch_of(struct an_graphs *g, const struct an_step *s, uint64_t *replay)
{
    const struct shp_event *e = s->e;
    uint32_t proc = s->ref->proc;
    if (e->type != SHP_REC_GRAPH || e->cls != SHP_CLS_LAUNCH || e->exec == SHP_NONE ||
        (e->result != 0 && e->dur_ns != SHP_NONE))
        return NULL;
    if (proc >= g->nlaunches) {
        uint64_t *v = realloc(g->launches, (proc + 1) * sizeof(*v));
        if (!v)
            return NULL;
        memset(v + g->nlaunches, 0, (proc + 1 - g->nlaunches) * sizeof(*v));
        g->launches = v;
        g->nlaunches = proc + 1;
    }
    *replay = ++g->launches[proc];
    for (size_t i = g->nexecs; i-- > 0;)
        if (g->execs[i].proc == proc && g->execs[i].exec == e->exec)
            return &g->v[g->execs[i].graph];
    return NULL;
}

struct an_entry an_replay_entry(const struct an_captured *c, const struct an_step *launch,
                                uint64_t replay)
{
    struct an_entry en = an_entry_of(&c->e, &c->ref);
    en.t_ns = launch->e->t_ns;
    en.launch = *launch->ref;
    en.replay = replay;
    return en;
}

void an_graphs_free(struct an_graphs *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->v[i].calls);
    free(g->v);
    free(g->execs);
    free(g->launches);
    *g = (struct an_graphs){0};
}

/* ---- the communicators each process is a member of ---- */

int an_memberships_init(struct an_memberships *ms, size_t nprocs)
{
    ms->nprocs = nprocs;
    ms->lost = false;
    ms->by_proc = calloc(nprocs ? nprocs : 1, sizeof(*ms->by_proc));
    if (!ms->by_proc) {
        ms->nprocs = 0;
        ms->lost = true;
        return -1;
    }
    return 0;
}

void an_memberships_add(struct an_memberships *ms, size_t proc, size_t comm, int rank)
{
    if (proc >= ms->nprocs) {
        ms->lost = true;
        return;
    }
    struct an_membership **v = &ms->by_proc[proc].v;
    size_t *n = &ms->by_proc[proc].n;
    if (!shp_grow((void **)v, &ms->by_proc[proc].cap, *n, sizeof(**v))) {
        ms->lost = true;
        return;
    }
    /* Kept in order as it grows: a process claims a few members, most often in the order of
     * the table already. */
    size_t i = *n;
    while (i > 0 &&
           ((*v)[i - 1].comm > comm || ((*v)[i - 1].comm == comm && (*v)[i - 1].rank > rank))) {
        (*v)[i] = (*v)[i - 1];
        i--;
    }
    (*v)[i] = (struct an_membership){comm, rank};
    (*n)++;
}

const struct an_membership *an_memberships_of(struct an_memberships *ms, size_t proc, size_t *n)
{
    *n = proc < ms->nprocs ? ms->by_proc[proc].n : 0;
    return *n ? ms->by_proc[proc].v : NULL;
}

void an_memberships_free(struct an_memberships *ms)
{
    for (size_t i = 0; i < ms->nprocs; i++)
        free(ms->by_proc[i].v);
    free(ms->by_proc);
    ms->by_proc = NULL;
    ms->nprocs = 0;
}
