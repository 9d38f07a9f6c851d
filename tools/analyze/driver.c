/* shapetrace analyze, the driver: the only place that names the passes. Each process's trace
 * is read once, in order, for the merge (load.c), on reader threads or on this thread; this
 * thread takes the events of all processes merged by time for the merged-stream passes. The
 * per-process passes run either on the reader that reads a process (a streamed run: no event
 * is decoded twice) or on worker threads that walk one process's trace at a time. Then it
 * gathers what every thread found, orders the findings and returns them as the result the
 * reporters print. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* Passes that see every process's events merged by time, in this order (each the record types
 * it asks for; the wait-for pass after the alignment: its deadlocks take in the alignment's
 * findings that they explain). */
static const struct an_pass *const merged_passes[] = {&an_pass_align, &an_pass_p2p,
                                                      &an_pass_waitfor, &an_pass_values};
/* Passes of the merged stream that look at one process at a time: each process's events go
 * through them on the thread that reads the process, and what they find joins the merged
 * stream's findings where that event is merged, after the first FEED_AT passes above, as if
 * they ran among them. Their state is one for all the processes, which it keeps apart (several
 * threads may call event at once, each for processes of its own); event and free only. */
static const struct an_pass *const feed_passes[] = {&an_pass_buffers};
#define FEED_AT 2
/* Passes that see one process's events at a time, in this order: a pass sees what the passes
 * before it left in the step (lineage's producers, for the expectations). */
static const struct an_pass *const process_passes[] = {&an_pass_lineage, &an_pass_expect};

#define NMERGED (sizeof(merged_passes) / sizeof(merged_passes[0]))
#define NFEED (sizeof(feed_passes) / sizeof(feed_passes[0]))
#define NPROCESS (sizeof(process_passes) / sizeof(process_passes[0]))
_Static_assert(FEED_AT < NMERGED, "the feed passes' findings join among the merged passes'");

/* Up to this many processes, a run is streamed: each process's per-process passes run on the
 * thread that decodes its trace for the merge, as it decodes it, so that no event is decoded
 * twice, and every process's state is live at once. With more, worker threads walk one
 * process's trace at a time, decoding it again, so that memory follows the live buffers of a
 * few processes, not of all of them. */
#define AN_STREAM_MAX 64

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

/* The per-process passes' states for some processes, with a context of their own (its own
 * findings): a worker thread's for the processes it walks, or one process's in a streamed
 * run. */
struct worker {
    pthread_t thread;
    struct an_ctx ctx; /* a copy: its own findings */
    void *state[NPROCESS];
    struct an_replay replay;
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
    s->has_spans = false;
    s->has_entry = false;
}

/* One executed call through the per-process passes. */
static void process_step(void *arg, struct an_step *s)
{
    struct worker *w = arg;
    for (size_t k = 0; k < NPROCESS; k++)
        if (w->state[k])
            process_passes[k]->event(w->state[k], &w->ctx, s);
}

/* One event of a process (a step with no producers yet) through the per-process passes, as
 * the process executed it: a captured call at each launch of its graph (replay.h). */
static void process_event(struct worker *w, struct an_step *s)
{
    w->events++;
    if (an_replay_plain(s))
        process_step(w, s);
    else
        an_replay_step(&w->replay, s, process_step, w);
}

/* The walk of p is over. */
static void process_end(struct worker *w, struct an_proc *p)
{
    an_replay_free(&w->replay);
    for (size_t k = 0; k < NPROCESS; k++)
        if (w->state[k] && process_passes[k]->proc_end)
            process_passes[k]->proc_end(w->state[k], &w->ctx, p);
    w->procs++;
}

/* After the last process of w, on the thread that walked. */
static void process_finish(struct worker *w)
{
    for (size_t k = 0; k < NPROCESS; k++)
        if (w->state[k] && process_passes[k]->finish)
            process_passes[k]->finish(w->state[k], &w->ctx);
}

/* Pages already read are given back as a worker's walk passes them, 8 MiB at a time (see
 * load.c): a worker walks a whole trace while the merge reads all of them. */
#define WALK_RELEASE (8ull << 20)

/* One process's trace, from its start, through the per-process passes. */
static void walk(struct worker *w, uint32_t proc)
{
    struct an_ctx *ctx = &w->ctx;
    struct an_proc *p = &ctx->procs[proc];
    struct shp_cursor cur = {0}; /* its own: the merged stream may be reading p meanwhile */
    uint64_t index = 0, released = 0;
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    const struct shp_trace *t = &p->sp->t;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e))
            continue;
        e.index = index++;
        struct an_ref ref = {.proc = proc, .index = e.index, .rec = r, .type = type};
        struct an_step s;
        step_init(&s, p, &e, &ref);
        process_event(w, &s);
        if (cur.off >= released + 2 * WALK_RELEASE) {
            uint64_t upto = (cur.off - WALK_RELEASE) & ~(WALK_RELEASE - 1);
            madvise((void *)(t->map + released), upto - released, MADV_DONTNEED);
            released = upto;
        }
    }
    process_end(w, p);
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
    }
    process_finish(w);
    w->wall = now_s() - t0;
    w->cpu = cpu_s() - c0;
    return NULL;
}

/* A context of ctx's for per-process passes, with findings of its own. */
static void worker_init(struct worker *w, const struct an_ctx *ctx)
{
    memset(w, 0, sizeof(*w));
    w->ctx = *ctx;
    memset(&w->ctx.findings, 0, sizeof(w->ctx.findings));
    for (size_t k = 0; k < NPROCESS; k++)
        w->state[k] = process_passes[k]->init(&w->ctx);
}

/* n workers on threads of their own (none: on this thread, before the merged stream). */
static void start_workers(struct an_ctx *ctx, struct worker *ws, unsigned n, _Atomic size_t *next,
                          bool threads)
{
    atomic_store(next, 0);
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = &ws[i];
        worker_init(w, ctx);
        w->next = next;
        if (!threads || pthread_create(&w->thread, NULL, work, w) != 0)
            work(w); /* no thread: do it here, before the merged stream */
        else
            w->started = true;
    }
}

/* The findings of w into ctx, and its passes' states into `into`. */
static void join_worker(struct an_ctx *ctx, struct worker *w, void **into)
{
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

/* The workers' findings into ctx, and their passes' states into `into`; with stats, a line
 * per worker on stderr. */
static void join_workers(struct an_ctx *ctx, struct worker *ws, unsigned n, void **into, bool stats)
{
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = &ws[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        if (stats)
            fprintf(stderr,
                    "shapetrace: worker %u (lineage, expect): wall %.3f s, CPU %.3f s, %" PRIu64
                    " processes, %" PRIu64 " events%s\n",
                    i + 1, w->wall, w->cpu, w->procs, w->events,
                    w->started ? "" : " (no thread: ran on the main thread)");
        join_worker(ctx, w, into);
    }
}

/* What the feeds run on each event they read: the feed passes, with a context per process
 * (its findings, handed to the merge with the event), and in a streamed run the per-process
 * passes of the process. */
struct feeding {
    struct an_ctx *ctx;
    void *feed_state[NFEED];
    struct an_ctx *fctx; /* by process */
    struct worker *pw;   /* by process; NULL when workers walk the processes */
};

/* Findings of the feed passes at one event. */
struct found {
    struct an_findings fs;
};

static void *feed_event(void *arg, struct an_proc *p, const struct shp_event *e,
                        const struct an_ref *ref)
{
    struct feeding *F = arg;
    struct an_ctx *fc = &F->fctx[ref->proc];
    struct found *note = NULL;
    struct an_step s;
    step_init(&s, p, e, ref);
    for (size_t k = 0; k < NFEED; k++)
        if (F->feed_state[k])
            feed_passes[k]->event(F->feed_state[k], fc, &s);
    if (fc->findings.n) {
        /* Handed over whole: the store becomes the merge's, and a new one starts here. */
        if ((note = malloc(sizeof(*note)))) {
            note->fs = fc->findings;
            memset(&fc->findings, 0, sizeof(fc->findings));
        } else {
            fc->findings.n = 0;
        }
    }
    /* The same step: what the feed passes computed of the call (its spans) serves again. */
    if (F->pw)
        process_event(&F->pw[ref->proc], &s);
    return note;
}

static void feed_end(void *arg, struct an_proc *p)
{
    struct feeding *F = arg;
    if (!F->pw)
        return;
    struct worker *w = &F->pw[p - F->ctx->procs];
    process_end(w, p);
    process_finish(w);
}

/* The record types each merged pass that runs (a state of their own) is handed, in want (0 for
 * one that does not run), and all of them: what the merge decodes. */
static unsigned merged_types(void *const *merged, unsigned *want)
{
    unsigned types = 0;
    for (size_t k = 0; k < NMERGED; k++) {
        want[k] = !merged[k] ? 0 : merged_passes[k]->types ? merged_passes[k]->types : ~0u;
        types |= want[k];
    }
    return types;
}

/* The merged passes' names, "align, p2p, ...", for --stats. */
static void merged_names(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < NMERGED && at < len; k++) {
        int n = snprintf(buf + at, len - at, "%s%s", k ? ", " : "", merged_passes[k]->name);
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

/* How a run uses its threads, besides the one that merges. */
struct plan {
    unsigned threads; /* what it may use */
    bool streamed;
    unsigned readers, workers;
};

static struct plan plan_for(unsigned threads, size_t nprocs)
{
    struct plan pl = {.threads = threads ? threads : shp_cores_available()};
    unsigned n = nprocs < UINT32_MAX ? (unsigned)nprocs : UINT32_MAX;
    pl.streamed = nprocs <= AN_STREAM_MAX;
    if (pl.streamed) {
        /* The readers do most of the work (decoding and the per-process passes); the merge's
         * thread shares a core with one of them. */
        pl.readers = pl.threads > 1 ? pl.threads : 0;
    } else if (pl.threads == 1) {
        pl.workers = 1; /* on this thread */
    } else {
        /* The workers read the traces again; readers take the reading off the merge's thread,
         * which has the most to do: on 2 cores, 2,048 traces, one reader took the merge's CPU
         * from 2.18 s to 1.45 s for 0.29 s of its own. */
        pl.readers = pl.threads >= 8 ? pl.threads / 4 : 1;
        pl.workers = pl.threads >= 4 ? pl.threads - pl.readers : 2;
    }
    if (pl.readers > n)
        pl.readers = n;
    if (pl.workers > n)
        pl.workers = n ? n : 1;
    return pl;
}

/* The findings the per-process passes added (from index base on) in the order of their
 * processes, each process's in the order it found them: the same order whichever thread walked
 * which process. Stable: an insertion sort, findings are few. */
static void order_by_process(struct an_findings *fs, size_t base)
{
    for (size_t i = base + 1; i < fs->n; i++) {
        struct an_finding f = fs->v[i];
        uint32_t pf = f.nevents ? f.events[0].proc : UINT32_MAX;
        size_t k = i;
        while (k > base && (fs->v[k - 1].nevents ? fs->v[k - 1].events[0].proc : UINT32_MAX) > pf) {
            fs->v[k] = fs->v[k - 1];
            k--;
        }
        fs->v[k] = f;
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
    struct plan pl = plan_for(o->threads, session->nprocs);
    struct feeding F = {.ctx = &ctx};
    struct an_feed_ops ops = {.event = feed_event, .end = feed_end, .arg = &F};
    struct worker *workers = NULL;
    void *merged[NMERGED] = {0}, *main_state[NPROCESS] = {0};
    int rc = -1;
    if (an_load(&ctx, session, pl.readers, &ops) < 0)
        goto out;
    for (size_t k = 0; k < NMERGED; k++)
        merged[k] = merged_passes[k]->init(&ctx);
    for (size_t k = 0; k < NFEED; k++)
        F.feed_state[k] = feed_passes[k]->init(&ctx);
    for (size_t k = 0; k < NPROCESS; k++)
        main_state[k] = process_passes[k]->merge ? process_passes[k]->init(&ctx) : NULL;
    /* Streamed: a context per process, that its feed runs. Walked: the per-process passes
     * concern one process at a time, so they run per trace on worker threads while this thread
     * lines the ranks up: each worker keeps one process's memory map hot instead of
     * interleaving all of them. */
    size_t nw = pl.streamed ? ctx.nprocs : pl.workers;
    workers = calloc(nw ? nw : 1, sizeof(*workers));
    F.fctx = calloc(ctx.nprocs ? ctx.nprocs : 1, sizeof(*F.fctx));
    if (!workers || !F.fctx) {
        shp_err("out of memory");
        goto out;
    }
    for (size_t i = 0; i < ctx.nprocs; i++) {
        F.fctx[i] = ctx;
        memset(&F.fctx[i].findings, 0, sizeof(F.fctx[i].findings));
    }
    _Atomic size_t next_proc;
    if (pl.streamed) {
        F.pw = workers;
        for (size_t i = 0; i < nw; i++)
            worker_init(&workers[i], &ctx);
    } else {
        start_workers(&ctx, workers, (unsigned)nw, &next_proc, pl.threads > 1);
    }
    double t_merge = now_s(), c_merge = cpu_s();
    unsigned want[NMERGED];
    an_load_start(&ctx, merged_types(merged, want));
    /* By record type, the merged passes that want it, in order: an event without findings
     * goes to them alone (testing every pass's mask for every event was a tenth of the
     * merge's own instructions). */
    unsigned char run[SHP_REC_TYPE_COUNT][NMERGED], nrun[SHP_REC_TYPE_COUNT] = {0};
    for (unsigned t = 0; t < SHP_REC_TYPE_COUNT; t++)
        for (size_t k = 0; k < NMERGED; k++)
            if (want[k] & (1u << t))
                run[t][nrun[t]++] = (unsigned char)k;
    bool progress = isatty(2), shown = false;
    struct an_proc *p;
    const struct shp_event *e;
    struct an_ref ref;
    void *note;
    uint64_t handed = 0; /* events an_next handed out (it counts the others in ctx.events) */
    while (an_next(&ctx, &p, &e, &ref, &note)) {
        ctx.events++;
        handed++;
        p->last = ref;
        struct an_step s;
        step_init(&s, p, e, &ref);
        unsigned type = e ? 1u << e->type : 0;
        if (!note && (!e || e->type < SHP_REC_TYPE_COUNT)) {
            for (unsigned i = 0; e && i < nrun[e->type]; i++)
                merged_passes[run[e->type][i]]->event(merged[run[e->type][i]], &ctx, &s);
        } else {
            for (size_t k = 0; k < NMERGED; k++) {
                /* What the feed passes found at this event joins the store after what the first
                 * FEED_AT merged passes found at it, as if they had run there. */
                if (k == FEED_AT && note) {
                    struct found *fd = note;
                    an_findings_append(&ctx.findings, &fd->fs);
                    an_findings_free(&fd->fs);
                    free(fd);
                }
                if (want[k] & type)
                    merged_passes[k]->event(merged[k], &ctx, &s);
            }
        }
        for (size_t k = 0; k < NMERGED && p->ended; k++)
            if (merged[k] && merged_passes[k]->proc_end)
                merged_passes[k]->proc_end(merged[k], &ctx, p);
        if (progress && (handed & 0xffff) == 0 && now_s() - t0 > 1.0) {
            uint64_t done, total;
            an_load_progress(&ctx, &done, &total);
            fprintf(stderr, "\rshapetrace: analyzing %3.0f%% (%" PRIu64 " events)",
                    100.0 * (double)done / (double)(total + 1), ctx.events);
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
    an_load_join(&ctx);
    if (o->stats) {
        char names[128];
        merged_names(names, sizeof(names));
        fprintf(stderr, "shapetrace: %u threads: the merge, %u reader%s, %u worker%s (%s)\n",
                pl.threads, pl.readers, pl.readers == 1 ? "" : "s", pl.workers,
                pl.workers == 1 ? "" : "s",
                pl.streamed ? "streamed: lineage and expect run where each trace is read"
                            : "walked: the workers read each trace again for lineage and expect");
        fprintf(stderr,
                "shapetrace: main thread, merge (%s%s): wall %.3f s, CPU %.3f s, "
                "%" PRIu64 " events\n",
                names,
                pl.readers    ? ""
                : pl.streamed ? "; reading: buffers, lineage, expect"
                              : "; reading: buffers",
                t_merge, c_merge, ctx.events);
        an_load_stats(&ctx, stderr,
                      pl.streamed ? "reading: buffers, lineage, expect" : "reading: buffers");
    }
    /* The per-process passes' findings come after the merged stream's, by process. */
    size_t base = ctx.findings.n;
    if (pl.streamed)
        for (size_t i = 0; i < nw; i++)
            join_worker(&ctx, &workers[i], main_state);
    else
        join_workers(&ctx, workers, (unsigned)nw, main_state, o->stats);
    free(workers);
    workers = NULL;
    for (size_t k = 0; k < NPROCESS; k++)
        if (main_state[k] && process_passes[k]->done)
            process_passes[k]->done(main_state[k], &ctx);
    order_by_process(&ctx.findings, base);
    an_findings_compact(&ctx.findings);
    an_findings_order(&ctx.findings);
    struct an_result *res = calloc(1, sizeof(*res));
    rc = res && build_result(&ctx, res) == 0 ? 0 : -1;
    if (rc < 0) {
        shp_err("out of memory");
        an_result_free(res);
        res = NULL;
    }
    *out = res;
out:
    if (workers) {
        /* A run stopped early: what the workers (and the feeds) were given. */
        an_load_join(&ctx);
        if (pl.streamed) {
            for (size_t i = 0; i < nw; i++)
                join_worker(&ctx, &workers[i], main_state);
        } else {
            join_workers(&ctx, workers, (unsigned)nw, main_state, false);
        }
        free(workers);
    }
    for (size_t i = 0; F.fctx && i < ctx.nprocs; i++)
        an_findings_free(&F.fctx[i].findings);
    free(F.fctx);
    for (size_t k = 0; k < NMERGED; k++)
        if (merged[k])
            merged_passes[k]->free(merged[k]);
    for (size_t k = 0; k < NFEED; k++)
        if (F.feed_state[k])
            feed_passes[k]->free(F.feed_state[k]);
    for (size_t k = 0; k < NPROCESS; k++)
        if (main_state[k])
            process_passes[k]->free(main_state[k]);
    for (size_t i = 0; i < ctx.ncomms; i++)
        free(ctx.comms[i].ranks);
    free(ctx.comms);
    free(ctx.matches);
    an_findings_free(&ctx.findings);
    an_unload(&ctx);
    return rc;
}
