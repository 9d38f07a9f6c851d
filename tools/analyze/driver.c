/* shapetrace analyze, the driver: the only place that names the passes. It reads the merged
 * event stream once on this thread for the merged-stream passes, while worker threads walk
 * one process's trace at a time for the per-process passes, then merges what the workers
 * found, orders the findings and reports them. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "tools/analyze/analyze.h"
#include "tools/analyze/expect.h"
#include "tools/analyze/load.h"
#include "tools/analyze/pass.h"
#include "tools/analyze/replay.h"
#include "tools/analyze/report.h"

extern const struct an_pass an_pass_align, an_pass_p2p, an_pass_buffers, an_pass_waitfor;
extern const struct an_pass an_pass_lineage, an_pass_expect;

/* Passes that see every process's events merged by time, in this order (the wait-for pass after
 * the alignment: its deadlocks take in the alignment's findings that they explain). */
static const struct an_pass *const merged_passes[] = {&an_pass_align, &an_pass_p2p,
                                                      &an_pass_buffers, &an_pass_waitfor};
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
    while ((r = shp_trace_next(&p->t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(&p->t, r, type, &e))
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

static void free_summaries(struct an_ctx *ctx)
{
    for (size_t i = 0; i < ctx->ncomms; i++)
        free(ctx->comms[i].ranks);
    free(ctx->comms);
    ctx->comms = NULL;
    ctx->ncomms = 0;
}

int an_analyze(const struct an_options *o)
{
    struct an_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.dims = o->dims;
    struct an_expect *expect = NULL;
    if (o->expect && !(expect = an_expect_load(o->expect, &ctx.dims)))
        return -1;
    ctx.expect = expect;
    double t0 = now_s(), c0 = cpu_s();
    if (an_load(&ctx, o->paths, o->npaths) < 0) {
        an_expect_free(expect);
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
    if (o->json)
        an_report_json(&ctx, o->out ? o->out : stdout);
    else
        an_report_text(&ctx, o->out ? o->out : stdout, o->color);
    if (o->stats) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(stderr, "shapetrace: main thread, all: wall %.3f s, CPU %.3f s\n", now_s() - t0,
                cpu_s() - c0);
        fprintf(stderr, "shapetrace: analyze took %.3f s, max RSS %ld MiB, %" PRIu64 " events\n",
                now_s() - t0, ru.ru_maxrss / 1024, ctx.events);
    }
    int status = ctx.findings.n ? 1 : 0;
    for (size_t k = 0; k < NMERGED; k++)
        if (merged[k])
            merged_passes[k]->free(merged[k]);
    for (size_t k = 0; k < NPROCESS; k++)
        if (main_state[k])
            process_passes[k]->free(main_state[k]);
    free_summaries(&ctx);
    an_expect_free(expect);
    an_findings_free(&ctx.findings);
    an_unload(&ctx);
    return status;
}
