/* shapetrace analyze, the driver: the only place that names the passes. It reads the merged
 * event stream once on this thread for the merged-stream passes, while worker threads walk
 * one process's trace at a time for the per-process passes, then merges what the workers
 * found, orders the findings and returns them as the result the reporters print. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/analyze/analyze.h"
#include "tools/analyze/expect.h"
#include "tools/analyze/load.h"
#include "tools/analyze/pass.h"
#include "tools/analyze/replay.h"
#include "tools/lib/out.h"

extern const struct an_pass an_pass_align, an_pass_p2p, an_pass_buffers, an_pass_waitfor;
extern const struct an_pass an_pass_lineage, an_pass_expect, an_pass_values;

/* Passes that see every process's events merged by time, in this order (the wait-for pass after
 * the alignment: its deadlocks take in the alignment's findings that they explain). */
static const struct an_pass *const merged_passes[] = {
    &an_pass_align, &an_pass_p2p, &an_pass_buffers, &an_pass_waitfor, &an_pass_values};
/* Passes that see one process's events at a time, in this order: a pass sees what the passes
 * before it left in the step (lineage's producers, for the expectations). */
static const struct an_pass *const process_passes[] = {&an_pass_lineage, &an_pass_expect};

#define NMERGED (sizeof(merged_passes) / sizeof(merged_passes[0]))
#define NPROCESS (sizeof(process_passes) / sizeof(process_passes[0]))
#define NWORKERS 2

static double clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* CPU time of the calling thread: with two cores shared, wall time alone cannot say which
 * thread is the bottleneck. */
static double cpu_s(void)
{
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

struct worker {
    pthread_t thread;
    struct an_ctx ctx; /* a copy: its own findings */
    void *state[NPROCESS];
    _Atomic size_t *next; /* the next process to walk, shared by the workers */
    bool started;
    /* for --stats: what this worker did and how long it took */
    uint64_t events, procs;
    double wall, cpu;
};

/* A step with no producers yet. Its producer slots are left as they are: a pass reads only
 * the first nproducers, and zeroing them all for every event showed in the profile. */
static void step_init(struct an_step *s, struct an_proc *p, const struct shp_event *e,
                      const struct an_ref *ref)
{
    s->proc = p;
    s->e = e;
    s->ref = ref;
    s->nproducers = 0;
    s->launch = NULL;
    s->replay = 0;
}

/* One executed call through the per-process passes. */
static void process_step(void *arg, struct an_step *s)
{
    struct worker *w = arg;
    for (size_t k = 0; k < NPROCESS; k++)
        if (w->state[k])
            process_passes[k]->event(w->state[k], &w->ctx, s);
}

/* One process's trace, from its start, through the per-process passes, as the process executed
 * it: a captured call at each launch of its graph (replay.h). */
static void walk(struct worker *w, uint32_t proc)
{
    struct an_ctx *ctx = &w->ctx;
    struct an_proc *p = &ctx->procs[proc];
    struct shp_cursor cur = {0}; /* its own: the merged stream may be reading p meanwhile */
    struct an_replay replay = {0};
    uint64_t index = 0;
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    const struct shp_trace *t = &p->sp->t;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e))
            continue;
        e.index = index++;
        w->events++;
        struct an_ref ref = {.proc = proc, .index = e.index, .rec = r, .type = type};
        struct an_step s;
        step_init(&s, p, &e, &ref);
        an_replay_step(&replay, &s, process_step, w);
    }
    an_replay_free(&replay);
    for (size_t k = 0; k < NPROCESS; k++)
        if (w->state[k] && process_passes[k]->proc_end)
            process_passes[k]->proc_end(w->state[k], ctx, p);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    double t0 = now_s(), c0 = cpu_s();
    for (;;) {
        size_t i = atomic_fetch_add(w->next, 1);
        if (i >= w->ctx.nprocs)
            break;
        walk(w, (uint32_t)i);
        w->procs++;
    }
    for (size_t k = 0; k < NPROCESS; k++)
        if (w->state[k] && process_passes[k]->finish)
            process_passes[k]->finish(w->state[k], &w->ctx);
    w->wall = now_s() - t0;
    w->cpu = cpu_s() - c0;
    return NULL;
}

static void start_workers(struct an_ctx *ctx, struct worker *ws, _Atomic size_t *next)
{
    atomic_store(next, 0);
    for (int i = 0; i < NWORKERS; i++) {
        struct worker *w = &ws[i];
        memset(w, 0, sizeof(*w));
        w->ctx = *ctx;
        memset(&w->ctx.findings, 0, sizeof(w->ctx.findings));
        w->next = next;
        for (size_t k = 0; k < NPROCESS; k++)
            w->state[k] = process_passes[k]->init(&w->ctx);
        if (pthread_create(&w->thread, NULL, work, w) != 0)
            work(w); /* no thread: do it here, before the merged stream */
        else
            w->started = true;
    }
}

/* The workers' findings into ctx, and their passes' states into `into`; with stats, a line
 * per worker on stderr. */
static void join_workers(struct an_ctx *ctx, struct worker *ws, void **into, bool stats)
{
    for (int i = 0; i < NWORKERS; i++) {
        struct worker *w = &ws[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        if (stats)
            fprintf(stderr,
                    "shapetrace: worker %d (lineage, expect): wall %.3f s, CPU %.3f s, %" PRIu64
                    " processes, %" PRIu64 " events%s\n",
                    i + 1, w->wall, w->cpu, w->procs, w->events,
                    w->started ? "" : " (no thread: ran on the main thread)");
        size_t base = an_findings_append(&ctx->findings, &w->ctx.findings);
        for (size_t k = 0; k < NPROCESS; k++) {
            const struct an_pass *ps = process_passes[k];
            if (!w->state[k])
                continue;
            if (base != SIZE_MAX && into[k] && ps->merge)
                ps->merge(into[k], ctx, w->state[k], base);
            ps->free(w->state[k]);
        }
        an_findings_free(&w->ctx.findings);
    }
}

int an_options_expect(struct an_options *o)
{
    if (!o->expect || o->spec)
        return 0;
    o->spec = an_expect_load(o->expect, &o->dims);
    return o->spec ? 0 : -1;
}

void an_options_free(struct an_options *o)
{
    an_expect_free(o->spec);
    o->spec = NULL;
}

/* The count of the call at r, or 0 when it has none: the other side of a comparison. */
static uint64_t count_of(struct an_ctx *ctx, const struct an_ref *r)
{
    struct shp_event e;
    return an_decode(ctx, r, &e) && e.count != SHP_NONE ? e.count : 0;
}

/* The call at r, decoded, with its shape in the factoring it shares with other (0: none). */
static void call_of(struct an_ctx *ctx, const struct an_ref *r, uint64_t other, const char *label,
                    struct an_call *c)
{
    memset(c, 0, sizeof(*c));
    c->label = label;
    if (!an_decode(ctx, r, &c->e))
        return;
    c->ok = true;
    c->proc = r->proc;
    if (c->e.count != SHP_NONE)
        an_shape_as(&ctx->dims, c->e.count, other, c->shape, sizeof(c->shape));
}

/* The findings in causal order, their calls decoded, and each process's last call: all the
 * reporters need, so that none of them reads the passes' store. */
static int build_result(struct an_ctx *ctx, struct an_result *res)
{
    res->session = ctx->session;
    res->events = ctx->events;
    res->collectives = ctx->collectives;
    res->comms = ctx->comms;
    res->ncomms = ctx->ncomms;
    res->values = ctx->values;
    ctx->comms = NULL;
    ctx->ncomms = 0;
    res->last = calloc(ctx->nprocs ? ctx->nprocs : 1, sizeof(*res->last));
    res->findings = calloc(ctx->findings.n ? ctx->findings.n : 1, sizeof(*res->findings));
    if (!res->last || !res->findings)
        return -1;
    for (size_t i = 0; i < ctx->nprocs; i++)
        call_of(ctx, &ctx->procs[i].last, 0, NULL, &res->last[i]);
    /* at[o]: the finding at causal position o, as an_findings_order numbered them (when it
     * had no memory to, they stay in the order they were added). */
    size_t n = ctx->findings.n, *at = malloc((n ? n : 1) * sizeof(*at));
    bool numbered = true;
    if (!at)
        return -1;
    for (size_t o = 0; o < n; o++)
        at[o] = SIZE_MAX;
    for (size_t i = 0; i < n && numbered; i++) {
        size_t o = ctx->findings.v[i].order;
        numbered = o < n && at[o] == SIZE_MAX;
        if (numbered)
            at[o] = i;
    }
    for (size_t o = 0; o < n && !numbered; o++)
        at[o] = o;
    if (ctx->nmatches && !(res->matches = malloc(ctx->nmatches * sizeof(*res->matches)))) {
        free(at);
        return -1;
    }
    for (size_t i = 0; i < ctx->nmatches; i++) {
        struct an_match_end *ends[2] = {&res->matches[res->nmatches].send,
                                        &res->matches[res->nmatches].recv};
        const struct an_ref *refs[2] = {&ctx->matches[i].send, &ctx->matches[i].recv};
        struct shp_event e;
        bool ok = true;
        for (int k = 0; k < 2 && ok; k++)
            if ((ok = an_decode(ctx, refs[k], &e)))
                *ends[k] = (struct an_match_end){refs[k]->proc, refs[k]->index, e.t_ns, e.dur_ns};
        res->nmatches += ok;
    }
    res->nfindings = n;
    for (size_t o = 0; o < n; o++) {
        struct an_finding *f = &ctx->findings.v[at[o]];
        struct an_result_finding *rf = &res->findings[o];
        /* Every culprit's rank in the finding's communicator, where its calls say it. */
        an_finding_comm_ranks(ctx, f);
        rf->f = *f;
        uint64_t expected = f->has_expected ? count_of(ctx, &f->expected) : 0;
        for (int i = 0; i < f->nevents; i++)
            call_of(ctx, &f->events[i], expected, f->labels[i], &rf->events[i]);
        for (int i = 0; i < f->nlineage; i++)
            call_of(ctx, &f->lineage[i], 0, NULL, &rf->lineage[i]);
        if (f->has_expected)
            call_of(ctx, &f->expected, f->nevents ? count_of(ctx, &f->events[0]) : 0, NULL,
                    &rf->expected);
    }
    free(at);
    return 0;
}

void an_result_free(struct an_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->ncomms; i++)
        free(r->comms[i].ranks);
    free(r->comms);
    free(r->last);
    free(r->findings);
    free(r->matches);
    free(r);
}

int an_run(struct an_options *o, struct shp_session *session, struct an_result **out)
{
    struct an_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    *out = NULL;
    if (an_options_expect(o) < 0)
        return -1;
    ctx.dims = o->dims;
    ctx.expect = o->spec;
    ctx.keep_matches = o->matches;
    double t0 = now_s();
    if (an_load(&ctx, session) < 0) {
        an_unload(&ctx);
        return -1;
    }
    void *merged[NMERGED], *main_state[NPROCESS];
    for (size_t k = 0; k < NMERGED; k++)
        merged[k] = merged_passes[k]->init(&ctx);
    for (size_t k = 0; k < NPROCESS; k++)
        main_state[k] = process_passes[k]->merge ? process_passes[k]->init(&ctx) : NULL;
    /* The per-process passes concern one process at a time, so they run per trace on worker
     * threads while this thread lines the ranks up: each worker keeps one process's memory
     * map hot instead of interleaving all of them. */
    struct worker workers[NWORKERS];
    _Atomic size_t next_proc;
    start_workers(&ctx, workers, &next_proc);
    double t_merge = now_s(), c_merge = cpu_s();
    bool progress = isatty(2), shown = false;
    struct an_proc *p;
    const struct shp_event *e;
    struct an_ref ref;
    while (an_next(&ctx, &p, &e, &ref)) {
        ctx.events++;
        p->last = ref;
        struct an_step s;
        step_init(&s, p, e, &ref);
        for (size_t k = 0; k < NMERGED; k++)
            if (merged[k])
                merged_passes[k]->event(merged[k], &ctx, &s);
        for (size_t k = 0; k < NMERGED && p->ended; k++)
            if (merged[k] && merged_passes[k]->proc_end)
                merged_passes[k]->proc_end(merged[k], &ctx, p);
        if (progress && (ctx.events & 0xffff) == 0 && now_s() - t0 > 1.0) {
            fprintf(stderr, "\rshapetrace: analyzing %3.0f%% (%" PRIu64 " events)",
                    100.0 * (double)ctx.bytes_done / (double)(ctx.bytes_total + 1), ctx.events);
            shown = true;
        }
    }
    if (shown)
        fprintf(stderr, "\r%60s\r", "");
    for (size_t k = 0; k < NMERGED; k++)
        if (merged[k] && merged_passes[k]->finish)
            merged_passes[k]->finish(merged[k], &ctx);
    t_merge = now_s() - t_merge;
    c_merge = cpu_s() - c_merge;
    if (o->stats)
        fprintf(stderr,
                "shapetrace: main thread, merge (align, p2p, buffers, waitfor): wall %.3f s, CPU "
                "%.3f s, "
                "%" PRIu64 " events\n",
                t_merge, c_merge, ctx.events);
    join_workers(&ctx, workers, main_state, o->stats);
    for (size_t k = 0; k < NPROCESS; k++)
        if (main_state[k] && process_passes[k]->done)
            process_passes[k]->done(main_state[k], &ctx);
    an_findings_compact(&ctx.findings);
    an_findings_order(&ctx.findings);
    struct an_result *res = calloc(1, sizeof(*res));
    int rc = res && build_result(&ctx, res) == 0 ? 0 : -1;
    if (rc < 0) {
        shp_err("out of memory");
        an_result_free(res);
        res = NULL;
    }
    for (size_t k = 0; k < NMERGED; k++)
        if (merged[k])
            merged_passes[k]->free(merged[k]);
    for (size_t k = 0; k < NPROCESS; k++)
        if (main_state[k])
            process_passes[k]->free(main_state[k]);
    for (size_t i = 0; i < ctx.ncomms; i++)
        free(ctx.comms[i].ranks);
    free(ctx.comms);
    free(ctx.matches);
    an_findings_free(&ctx.findings);
    an_unload(&ctx);
    *out = res;
    return rc;
}
