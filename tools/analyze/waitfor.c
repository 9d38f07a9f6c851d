/* shapetrace analyze, wait-for pass: deadlocks across communicators, as MPI checkers find them
 * (MUST's wait-for graph). Each process is taken to execute its collectives in the order it
 * issued them, each one blocking until every member of its communicator has reached it (the
 * calls of one NCCL group together); NCCL matches the k-th collective of each member on a
 * communicator (an_place). What cannot complete at the end is where each process waits, and on
 * whom: ranks that wait on each other around a cycle are a deadlock, reported once with each
 * rank's call and site. Send and receive calls are not followed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"
#include "tools/lib/out.h"

/* One collective a process executed and is waiting in, or will wait in. */
struct wcomm;
struct wop {
    struct wcomm *c;   /* its communicator */
    uint64_t comm, at; /* the communicator's id, and the call's place there */
    uint64_t unit;     /* the calls of one unit (a group, or one call) are issued together */
    int member;        /* the process's rank in comm */
    bool done;
    struct an_entry en;
};

struct wproc {
    struct wop *v; /* what it waits in or will, from v[head] to v[n - 1] */
    size_t head, n, cap;
    struct wop *group; /* the calls of the group this process has open, not issued yet */
    size_t ngroup, cap_group;
    uint64_t units;
    bool ended;
    struct wcomm *last; /* the communicator of its last call: the next is most often on it too */
};

struct wmember {
    int proc;
    bool started, ended, unknown_after;
    uint64_t first; /* its first place: before it, it is not known */
    struct an_place place;
};

/* A place of a communicator that some members' front calls have reached. */
struct arrival {
    uint64_t at;
    int n;
};

struct wcomm {
    uint64_t id;
    size_t index; /* its position in W->comms */
    int nranks;
    struct wmember *m;
    bool special; /* a member not known everywhere (traced late, or its trace lost its end) */
    struct arrival *arr;
    size_t narr, cap_arr;
};

struct waitfor {
    struct an_table comms; /* of struct wcomm, by id */
    struct an_graphs graphs;
    struct wproc *procs;
    size_t nprocs;
    int *moved; /* processes whose front unit is new: its calls have not arrived yet */
    size_t nmoved, cap_moved;
    struct an_memberships members; /* by process, the members it claimed */
};

static uint64_t wcomm_key(const void *item)
{
    return ((const struct wcomm *)item)->id;
}

static struct wcomm *comm_get(struct waitfor *W, uint64_t id, int nranks)
{
    struct wcomm *c = an_table_get(&W->comms, id);
    if (c)
        return c; /* a trace that says another size is the alignment's to report */
    if (!id || nranks <= 0)
        return NULL;
    if (!(c = calloc(1, sizeof(*c))) || !(c->m = calloc((size_t)nranks, sizeof(*c->m)))) {
        free(c);
        return NULL;
    }
    c->id = id;
    c->nranks = nranks;
    for (int i = 0; i < nranks; i++) {
        c->m[i].proc = -1;
        an_place_init(&c->m[i].place);
    }
    if (an_table_add(&W->comms, c) < 0) {
        free(c->m);
        free(c);
        return NULL;
    }
    c->index = W->comms.n - 1;
    return c;
}

/* The member of c that process p's call e speaks for; NULL when another process holds it.
 * Inline, the claim out of line: nearly every call is at a member its process claimed. */
static inline struct wmember *member_of(struct waitfor *W, struct wcomm *c, int p,
                                        const struct shp_event *e)
{
    if (!c || e->comm_rank < 0 || e->comm_rank >= c->nranks)
        return NULL;
    struct wmember *m = &c->m[e->comm_rank];
    if (m->proc == p)
        return m;
    if (m->proc >= 0)
        return NULL;
    an_memberships_add(&W->members, (size_t)p, c->index, e->comm_rank);
    m->proc = p;
    return m;
}

/* The i-th call from p's front; w->n - w->head calls are waiting. */
static struct wop *front(struct wproc *w, size_t i)
{
    return &w->v[w->head + i];
}

static size_t waiting(const struct wproc *w)
{
    return w->n - w->head;
}

/* Whether member m is not known at place `at`: traced from a later place on, or past the end of
 * a trace that lost its end. */
static bool unknown_at(const struct wmember *m, uint64_t at)
{
    return (m->started && m->first > at) ||
           (m->ended && m->unknown_after && (!m->started || at >= m->place.next));
}

/* The members whose front calls must reach place `at` for it to complete. */
static int needed(const struct wcomm *c, uint64_t at)
{
    if (!c->special)
        return c->nranks;
    int n = 0;
    for (int i = 0; i < c->nranks; i++)
        n += !unknown_at(&c->m[i], at);
    return n;
}

static struct arrival *arrival_at(struct wcomm *c, uint64_t at, bool make)
{
    for (size_t i = 0; i < c->narr; i++)
        if (c->arr[i].at == at)
            return &c->arr[i];
    if (!make || !shp_grow((void **)&c->arr, &c->cap_arr, c->narr, sizeof(*c->arr)))
        return NULL;
    c->arr[c->narr] = (struct arrival){.at = at};
    return &c->arr[c->narr++];
}

/* The front call of process p on comm at place `at`, if its front unit holds one. */
static struct wop *front_call(struct waitfor *W, int p, uint64_t comm, uint64_t at)
{
    struct wproc *w = &W->procs[p];
    for (size_t i = 0; i < waiting(w) && front(w, i)->unit == front(w, 0)->unit; i++) {
        struct wop *o = front(w, i);
        if (o->comm == comm && o->at == at && !o->done)
            return o;
    }
    return NULL;
}

/* Process p has a new front unit: its calls arrive when settle gets to it. */
static void moved_on(struct waitfor *W, int p)
{
    if (shp_grow((void **)&W->moved, &W->cap_moved, W->nmoved, sizeof(*W->moved)))
        W->moved[W->nmoved++] = p;
}

/* The place of arrival a (one of c's) completes when its needed members' front calls have all
 * reached it: they are done, and each process whose front unit is then done moves on to its
 * next. */
static void try_complete(struct waitfor *W, struct wcomm *c, struct arrival *a)
{
    uint64_t at = a->at;
    if (a->n < needed(c, at))
        return;
    *a = c->arr[--c->narr];
    for (int i = 0; i < c->nranks; i++) {
        int p = c->m[i].proc;
        if (p < 0)
            continue;
        /* One look at p's front unit: its call here (the first not done, as front_call finds
         * it), and whether the others are done; three looks (front_call, the others, the pops)
         * were a fifth of the pass. */
        struct wproc *w = &W->procs[p];
        struct wop *o = NULL;
        bool all = true;
        size_t k = 0;
        for (uint64_t unit = waiting(w) ? front(w, 0)->unit : 0;
             k < waiting(w) && front(w, k)->unit == unit; k++) {
            struct wop *x = front(w, k);
            if (!o && x->comm == c->id && x->at == at && !x->done)
                o = x;
            else
                all = all && x->done;
        }
        if (!o)
            continue;
        o->done = true;
        if (!all)
            continue;
        w->head += k;
        if (waiting(w))
            moved_on(W, p);
    }
}

/* The calls of p's front unit arrive at their places, one by one, until one completes the
 * unit (then p has moved on, and its next unit is settled in its turn). */
static void arrive_front(struct waitfor *W, int p)
{
    struct wproc *w = &W->procs[p];
    if (!waiting(w))
        return;
    uint64_t unit = front(w, 0)->unit, units = w->units;
    for (size_t i = 0; i < waiting(w) && front(w, i)->unit == unit; i++) {
        struct wcomm *c = front(w, i)->c;
        uint64_t at = front(w, i)->at;
        struct arrival *a = arrival_at(c, at, true);
        if (a) {
            a->n++;
            try_complete(W, c, a);
        }
        if (!waiting(w) || front(w, 0)->unit != unit || w->units != units)
            return;
    }
}

/* Let every process that moved on arrive at its next unit, until none moves. */
static void settle(struct waitfor *W)
{
    while (W->nmoved)
        arrive_front(W, W->moved[--W->nmoved]);
}

/* What was done is dropped from p's front once it is the larger part: returns whether nothing
 * waits, before a unit is issued. */
static bool drop_done(struct wproc *w)
{
    if (w->head && w->head >= waiting(w)) {
        if (waiting(w))
            memmove(w->v, w->v + w->head, waiting(w) * sizeof(*w->v));
        w->n -= w->head;
        w->head = 0;
    }
    return !waiting(w);
}

/* A unit is issued on p: it arrives if nothing waited before it. */
static void issued(struct waitfor *W, int p, bool was_empty)
{
    if (was_empty && waiting(&W->procs[p])) {
        arrive_front(W, p);
        settle(W);
    }
}

/* Issue a unit (ops, n) on process p: it waits behind the units before it. */
static void issue(struct waitfor *W, int p, const struct wop *ops, size_t n)
{
    struct wproc *w = &W->procs[p];
    if (!n)
        return;
    bool was_empty = drop_done(w);
    uint64_t unit = w->units++;
    for (size_t i = 0; i < n; i++) {
        if (!shp_grow((void **)&w->v, &w->cap, w->n, sizeof(*w->v)))
            break;
        w->v[w->n] = ops[i];
        w->v[w->n++].unit = unit;
    }
    issued(W, p, was_empty);
}

/* A member whose first call sits at a later place is not known before it: the places others
 * wait at there may now complete. */
static void placed_late(struct waitfor *W, struct wcomm *c)
{
    c->special = true;
    /* try_complete takes a completed place out by moving the last one into it: downwards, each
     * is looked at once. */
    for (size_t i = c->narr; i-- > 0;)
        if (i < c->narr)
            try_complete(W, c, &c->arr[i]);
    settle(W);
}

/* A call waiting (or to wait) on c at place at. */
static inline void put_wop(struct wop *o, struct wcomm *c, uint64_t at, uint64_t unit, int member,
                           const struct an_entry *en)
{
    o->c = c;
    o->comm = c->id;
    o->at = at;
    o->unit = unit;
    o->member = member;
    o->done = false;
    o->en = *en;
}

/* What process p executed on a communicator (eager, or in a replay). */
static void executed(struct waitfor *W, int p, const struct shp_event *e, const struct an_entry *en,
                     bool in_group)
{
    struct wproc *w = &W->procs[p];
    struct wcomm *c = w->last && w->last->id == e->comm ? w->last : comm_get(W, e->comm, e->nranks);
    struct wmember *m = member_of(W, c, p, e);
    if (!m)
        return;
    w->last = c;
    uint64_t at = an_place_next(&m->place, en);
    bool late = !m->started && at > 0;
    if (!m->started) {
        m->started = true;
        m->first = at;
    }
    /* The call written in place, field by field: building it on the stack (every field of its
     * entry zeroed first) and copying it, then its entry, over it was a sixth of executed. */
    if (in_group) {
        if (shp_grow((void **)&w->group, &w->cap_group, w->ngroup, sizeof(*w->group)))
            put_wop(&w->group[w->ngroup++], c, at, 0, e->comm_rank, en);
    } else {
        /* issue(W, p, &o, 1), the call written where it waits: copying it there after building
         * it was a tenth of the pass. */
        bool was_empty = drop_done(w);
        uint64_t unit = w->units++;
        if (shp_grow((void **)&w->v, &w->cap, w->n, sizeof(*w->v)))
            put_wop(&w->v[w->n++], c, at, unit, e->comm_rank, en);
        issued(W, p, was_empty);
    }
    if (late)
        placed_late(W, c);
}

static void flush_group(struct waitfor *W, int p)
{
    struct wproc *w = &W->procs[p];
    issue(W, p, w->group, w->ngroup);
    w->ngroup = 0;
}

static void *waitfor_init(struct an_ctx *ctx)
{
    struct waitfor *W = calloc(1, sizeof(*W));
    if (!W)
        return NULL;
    W->comms.key = wcomm_key;
    W->nprocs = ctx->nprocs;
    if (!(W->procs = calloc(W->nprocs ? W->nprocs : 1, sizeof(*W->procs)))) {
        free(W);
        return NULL;
    }
    an_memberships_init(&W->members, W->nprocs);
    return W;
}

static void waitfor_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct waitfor *W = st;
    const struct shp_event *e = s->e;
    int p = (int)(s->proc - ctx->procs);
    if (e->type == SHP_REC_COLL && an_refused(e)) {
        struct wmember *m = member_of(W, comm_get(W, e->comm, e->nranks), p, e);
        struct an_entry en = an_entry_of(e, s->ref);
        if (m && !(e->flags & SHP_EV_CAPTURED))
            an_place_refused(&m->place, &en);
        return;
    }
    if (an_graphs_event(&W->graphs, s, SHP_REC_COLL)) {
        struct wmember *m = member_of(W, comm_get(W, e->comm, e->nranks), p, e);
        if (m)
            m->place.captured++;
        return;
    }
    uint64_t replay = 0;
    struct an_graph *g = an_graphs_launch(&W->graphs, s, &replay);
    for (size_t i = 0; g && i < g->n; i++) {
        struct an_entry en = an_replay_entry(&g->calls[i], s, replay);
        executed(W, p, &g->calls[i].e, &en, false);
    }
    if (e->type == SHP_REC_COLL) {
        executed(W, p, e, an_step_entry(s), e->group > 0);
    } else if (e->type == SHP_REC_GROUP && e->op == SHP_OP_ncclGroupEnd && e->group <= 1) {
        flush_group(W, p); /* the outermost group's end issues its calls together */
    } else if (e->type == SHP_REC_COMM && e->comm_kind > SHP_COMM_SHRINK) {
        struct wcomm *c = an_table_get(&W->comms, e->comm);
        if (c && e->comm_rank >= 0 && e->comm_rank < c->nranks && c->m[e->comm_rank].proc == p)
            c->m[e->comm_rank].ended = true;
    }
}

static void waitfor_proc_end(void *st, struct an_ctx *ctx, struct an_proc *ap)
{
    struct waitfor *W = st;
    int p = (int)(ap - ctx->procs);
    flush_group(W, p);
    W->procs[p].ended = true;
    bool lost = an_lost_end(ap);
    if (W->members.lost) {
        for (size_t i = 0; i < W->comms.n; i++) {
            struct wcomm *c = W->comms.v[i];
            bool touched = false;
            for (int r = 0; r < c->nranks; r++)
                if (c->m[r].proc == p) {
                    c->m[r].ended = true;
                    c->m[r].unknown_after = lost;
                    touched = lost;
                }
            if (touched)
                placed_late(W, c);
        }
        return;
    }
    /* The same visits, in the same order (by the table's position), of the communicators where
     * the process claimed a member: no other member can be p's. */
    size_t n;
    const struct an_membership *ms = an_memberships_of(&W->members, (size_t)p, &n);
    for (size_t k = 0; k < n;) {
        struct wcomm *c = W->comms.v[ms[k].comm];
        for (; k < n && W->comms.v[ms[k].comm] == c; k++) {
            c->m[ms[k].rank].ended = true;
            c->m[ms[k].rank].unknown_after = lost;
        }
        if (lost)
            placed_late(W, c);
    }
}

/* ---- the wait-for graph at the end ---- */

/* What one blocked process waits in, and on whom. */
struct wait {
    const struct wop *in; /* its first call that cannot complete */
    int *on, non;         /* the blocked processes it waits on */
    int group;            /* index of its group: the processes waiting in the same call */
};

/* The first incomplete call of p's front unit, and the processes whose front it waits for; a
 * member that is not known there, or whose front holds the call, is not waited on. */
static void wait_of(struct waitfor *W, int p, struct wait *wt)
{
    struct wproc *w = &W->procs[p];
    wt->in = NULL;
    wt->non = 0;
    for (size_t i = 0; i < waiting(w) && front(w, i)->unit == front(w, 0)->unit; i++)
        if (!front(w, i)->done) {
            wt->in = front(w, i);
            break;
        }
    if (!wt->in)
        return;
    struct wcomm *c = wt->in->c;
    for (int r = 0; c && r < c->nranks; r++) {
        const struct wmember *m = &c->m[r];
        if (r == wt->in->member || unknown_at(m, wt->in->at) || m->proc < 0 || m->proc == p)
            continue;
        if (front_call(W, m->proc, c->id, wt->in->at))
            continue;
        if (waiting(&W->procs[m->proc])) /* blocked elsewhere; nothing waiting: it stopped */
            wt->on[wt->non++] = m->proc;
    }
}

/* Tarjan's strongly connected components over the waits, iteratively. comp[p]: its component's
 * number, -1 for a process that waits on no one. */
static int components(struct wait *wt, size_t n, int *comp)
{
    int *index = malloc(n * sizeof(int)), *low = malloc(n * sizeof(int)),
        *stack = malloc(n * sizeof(int)), *call = malloc(n * sizeof(int)),
        *edge = malloc(n * sizeof(int));
    bool *on = calloc(n, sizeof(bool));
    int ncomp = 0;
    if (!index || !low || !stack || !call || !edge || !on)
        goto out;
    for (size_t i = 0; i < n; i++)
        index[i] = -1, comp[i] = -1;
    int next = 0, sp = 0;
    for (size_t root = 0; root < n; root++) {
        if (index[root] >= 0 || !wt[root].in)
            continue;
        int depth = 0;
        call[depth] = (int)root;
        edge[depth] = 0;
        index[root] = low[root] = next++;
        stack[sp++] = (int)root;
        on[root] = true;
        while (depth >= 0) {
            int v = call[depth];
            if (edge[depth] < wt[v].non) {
                int u = wt[v].on[edge[depth]++];
                if (index[u] < 0) {
                    index[u] = low[u] = next++;
                    stack[sp++] = u;
                    on[u] = true;
                    depth++;
                    call[depth] = u;
                    edge[depth] = 0;
                } else if (on[u] && index[u] < low[v]) {
                    low[v] = index[u];
                }
                continue;
            }
            if (low[v] == index[v]) {
                int u;
                do {
                    u = stack[--sp];
                    on[u] = false;
                    comp[u] = ncomp;
                } while (u != v);
                ncomp++;
            }
            if (--depth >= 0 && low[v] < low[call[depth]])
                low[call[depth]] = low[v];
        }
    }
out:
    free(index);
    free(low);
    free(stack);
    free(call);
    free(edge);
    free(on);
    return ncomp;
}

static int rank_of(const struct an_ctx *ctx, int p)
{
    return ctx->procs[p].sp->rank >= 0 ? ctx->procs[p].sp->rank : p;
}

/* "ranks 0, 1, 3" of the processes ps. */
static void ranks_text(const struct an_ctx *ctx, const int *ps, int n, char *out, size_t len)
{
    int r[AN_MAX_RANKS];
    int k = 0;
    for (; k < n && k < AN_MAX_RANKS; k++)
        r[k] = rank_of(ctx, ps[k]);
    char list[160];
    an_rank_list(r, k, n > AN_MAX_RANKS, list, sizeof(list));
    snprintf(out, len, "rank%s %s", n > 1 ? "s" : "", list);
}

/* "ncclAllReduce #3 on communicator 1234abcd" */
static void call_text(const struct wop *o, char *out, size_t len)
{
    snprintf(out, len, "%s #%" PRIu64 " on communicator %.8" PRIx64, shp_op_name(o->en.op),
             o->en.seq, o->comm >> 32);
}

/* The collectives a cycle's ranks wait in never complete: the alignment's missing_collective at
 * each of them is this finding seen from one communicator; it is dropped, what it counted as its
 * consequences counted here. */
static void absorb(struct an_ctx *ctx, struct an_finding *dl, const struct wop *in)
{
    for (size_t i = 0; i < ctx->findings.n; i++) {
        struct an_finding *f = &ctx->findings.v[i];
        if (f == dl || f->kind != AN_MISSING_COLLECTIVE || f->comm != in->comm ||
            f->seq != in->en.seq)
            continue;
        dl->consequences += f->consequences;
        f->kind = AN_KIND_COUNT; /* dropped by an_findings_compact */
    }
}

/* The earliest finding of the alignment on in's communicator before in's collective, or NULL. */
static struct an_finding *earlier_on(struct an_ctx *ctx, const struct wop *in)
{
    struct an_finding *best = NULL;
    for (size_t i = 0; i < ctx->findings.n; i++) {
        struct an_finding *f = &ctx->findings.v[i];
        if (f->comm == in->comm && f->kind != AN_KIND_COUNT && f->position != SHP_NONE &&
            f->seq != SHP_NONE && f->seq < in->en.seq && (!best || f->seq < best->seq))
            best = f;
    }
    return best;
}

/* One finding for the component `k` of the waits: its groups, each the processes waiting in one
 * call, in order of their first process. */
static void report_cycle(struct an_ctx *ctx, struct wait *wt, const int *comp, size_t n, int k)
{
    int *members = malloc(n * sizeof(int)), *gfirst = malloc(n * sizeof(int));
    int *gsize = calloc(n, sizeof(int));
    if (!members || !gfirst || !gsize)
        goto out;
    int nm = 0, ng = 0;
    for (size_t p = 0; p < n; p++) {
        if (comp[p] != k)
            continue;
        members[nm++] = (int)p;
        int g = 0;
        for (; g < ng; g++) {
            const struct wop *a = wt[gfirst[g]].in, *b = wt[p].in;
            if (a->comm == b->comm && a->at == b->at)
                break;
        }
        if (g == ng)
            gfirst[ng++] = (int)p;
        wt[p].group = g;
        gsize[g]++;
    }
    if (nm < 2)
        goto out;
    /* A communicator of the cycle went wrong before: NCCL went on matching calls that no longer
     * corresponded (a skipped collective shifts every later one), and this hang is what followed;
     * it is that finding's consequence. */
    for (int g = 0; g < ng; g++) {
        struct an_finding *cause = earlier_on(ctx, wt[gfirst[g]].in);
        if (cause) {
            cause->consequences++;
            goto out;
        }
    }
    struct an_finding *f = an_finding_add(&ctx->findings, AN_DEADLOCK);
    if (!f)
        goto out;
    /* The culprits: the ranks of the smaller side when two sides wait on each other, else
     * every rank of the cycle. */
    int culprit = -1;
    if (ng == 2 && gsize[0] != gsize[1])
        culprit = gsize[0] < gsize[1] ? 0 : 1;
    f->comm = wt[gfirst[culprit >= 0 ? culprit : 0]].in->comm;
    f->seq = wt[gfirst[culprit >= 0 ? culprit : 0]].in->en.seq;
    for (int i = 0; i < nm; i++)
        if (culprit < 0 || wt[members[i]].group == culprit)
            an_finding_rank_in(f, rank_of(ctx, members[i]), wt[members[i]].in->member);
    /* The culprits' call first, then each other group's first call, then the others', as
     * room allows. */
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < nm && f->nevents < AN_MAX_EVENTS; i++) {
            int p = members[i];
            bool first = gfirst[wt[p].group] == p,
                 mine = wt[p].group == (culprit < 0 ? 0 : culprit);
            if (pass != (first && mine ? 0 : first ? 1 : 2))
                continue;
            f->labels[f->nevents] = "where it waits";
            an_finding_event(f, &wt[p].in->en.ref, wt[p].in->en.t_ns);
            if (wt[p].in->en.launch.rec && f->nevents < AN_MAX_EVENTS) {
                f->labels[f->nevents] = "the graph launch that executed it";
                f->events[f->nevents++] = wt[p].in->en.launch;
            }
        }
    for (int i = 0; i < nm; i++)
        if (wt[members[i]].in->en.t_ns < f->t_ns)
            f->t_ns = wt[members[i]].in->en.t_ns;
    char text[sizeof(f->summary) - 64];
    size_t off = 0;
    if (ng == 2) {
        int *ps = malloc((size_t)nm * sizeof(int));
        char a[200], b[200], ca[160], cb[160];
        int na = 0, nb = 0;
        for (int i = 0; ps && i < nm; i++)
            if (wt[members[i]].group == 0)
                ps[na++] = members[i];
        ranks_text(ctx, ps, na, a, sizeof(a));
        for (int i = 0; ps && i < nm; i++)
            if (wt[members[i]].group == 1)
                ps[nb++] = members[i];
        ranks_text(ctx, ps, nb, b, sizeof(b));
        free(ps);
        call_text(wt[gfirst[0]].in, ca, sizeof(ca));
        call_text(wt[gfirst[1]].in, cb, sizeof(cb));
        off += (size_t)snprintf(
            text + off, sizeof(text) - off, "%s wait%s in %s for %s, which wait%s in %s for %s", a,
            na > 1 ? "" : "s", ca, b, nb > 1 ? "" : "s", cb, na > 1 ? "them" : "it");
    } else {
        for (int g = 0; g < ng && off < sizeof(text); g++) {
            int *ps = malloc((size_t)nm * sizeof(int)), np = 0;
            for (int i = 0; ps && i < nm; i++)
                if (wt[members[i]].group == g)
                    ps[np++] = members[i];
            char who[200], whom[200], in[160];
            ranks_text(ctx, ps, np, who, sizeof(who));
            ranks_text(ctx, wt[gfirst[g]].on, wt[gfirst[g]].non, whom, sizeof(whom));
            free(ps);
            call_text(wt[gfirst[g]].in, in, sizeof(in));
            off += (size_t)snprintf(text + off, sizeof(text) - off, "%s%s wait%s in %s for %s",
                                    g ? "; " : "", who, np > 1 ? "" : "s", in, whom);
        }
    }
    snprintf(f->summary, sizeof(f->summary),
             "%s: a deadlock (they call the communicators in different orders)", text);
    for (int g = 0; g < ng; g++)
        absorb(ctx, f, wt[gfirst[g]].in);
out:
    free(members);
    free(gfirst);
    free(gsize);
}

static void waitfor_finish(void *st, struct an_ctx *ctx)
{
    struct waitfor *W = st;
    size_t n = W->nprocs;
    struct wait *wt = calloc(n ? n : 1, sizeof(*wt));
    int *comp = malloc((n ? n : 1) * sizeof(int));
    for (size_t p = 0; wt && p < n; p++) {
        flush_group(W, (int)p);
        if (!(wt[p].on = malloc((n ? n : 1) * sizeof(int))))
            goto out;
        wait_of(W, (int)p, &wt[p]);
    }
    if (!wt || !comp)
        goto out;
    int ncomp = components(wt, n, comp);
    for (int k = 0; k < ncomp; k++)
        report_cycle(ctx, wt, comp, n, k);
out:
    for (size_t p = 0; wt && p < n; p++)
        free(wt[p].on);
    free(wt);
    free(comp);
}

static void waitfor_free(void *st)
{
    struct waitfor *W = st;
    for (size_t i = 0; i < W->comms.n; i++) {
        struct wcomm *c = W->comms.v[i];
        free(c->m);
        free(c->arr);
        free(c);
    }
    an_table_free(&W->comms);
    an_graphs_free(&W->graphs);
    for (size_t p = 0; p < W->nprocs; p++) {
        free(W->procs[p].v);
        free(W->procs[p].group);
    }
    free(W->procs);
    free(W->moved);
    an_memberships_free(&W->members);
    free(W);
}

const struct an_pass an_pass_waitfor = {
    .name = "waitfor",
    .types = AN_TYPE(COMM) | AN_TYPE(COLL) | AN_TYPE(GROUP) | AN_TYPE(GRAPH),
    .init = waitfor_init,
    .event = waitfor_event,
    .proc_end = waitfor_proc_end,
    .finish = waitfor_finish,
    .free = waitfor_free,
};
