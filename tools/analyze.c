/* shapetrace analyze: line the ranks up and report where they first diverge. The driver: reads
 * the merged event stream once and hands each event to the passes (see analyze.h). */
#define _GNU_SOURCE
#include "analyze.h"

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"

static void analyze_usage(FILE *f)
{
    fputs("usage: shapetrace analyze [--json] [--dim NAME=VALUE]... [--expect FILE] PATH...\n"
          "\n"
          "Lines the ranks' collectives up by communicator and sequence number, matches sends\n"
          "with receives, checks buffers against their allocations, and reports the first\n"
          "place where ranks diverge. PATHs are trace files or run directories, from any\n"
          "number of hosts.\n"
          "  --json             DESIGN's JSON report\n"
          "  --dim NAME=VALUE   a model dimension (hidden=7168, tp=8): counts that factor are\n"
          "                     shown as shapes ([512, hidden/tp]), and a region's rows are\n"
          "                     known, so that a consumer cutting them is reported\n"
          "  --expect FILE      shapes you believe in (JSON: see the README)\n"
          "Exit status: 0 no findings, 1 findings, 2 bad usage or unreadable input.\n",
          f);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct worker {
    pthread_t thread;
    struct an_ctx ctx; /* a copy: own findings, lineage state and expectation counters */
    _Atomic size_t *next;
    bool started;
};

static _Atomic size_t next_proc;

static void *work(void *arg)
{
    struct worker *w = arg;
    for (;;) {
        size_t i = atomic_fetch_add(w->next, 1);
        if (i >= w->ctx.nprocs)
            break;
        an_lineage_process(&w->ctx, (uint32_t)i);
    }
    an_lineage_finish(&w->ctx);
    return NULL;
}

static int start_workers(struct an_ctx *ctx, struct worker *ws, int n)
{
    atomic_store(&next_proc, 0);
    int started = 0;
    for (int i = 0; i < n; i++) {
        struct worker *w = &ws[i];
        memset(w, 0, sizeof(*w));
        w->ctx = *ctx;
        w->ctx.findings = NULL;
        w->ctx.nfindings = w->ctx.findings_cap = 0;
        w->ctx.comms = NULL;
        w->ctx.p2p = NULL;
        w->next = &next_proc;
        an_lineage_init(&w->ctx);
        if (an_expect_clone(ctx, &w->ctx) < 0)
            break;
        if (pthread_create(&w->thread, NULL, work, w) != 0) {
            /* No thread: do it here, before the alignment. */
            work(w);
        } else {
            w->started = true;
        }
        started++;
    }
    return started;
}

static void join_workers(struct an_ctx *ctx, struct worker *ws, int n)
{
    for (int i = 0; i < n; i++) {
        struct worker *w = &ws[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        size_t base = ctx->nfindings;
        for (size_t k = 0; k < w->ctx.nfindings; k++) {
            struct an_finding *f = an_add_finding(ctx, w->ctx.findings[k].kind, true);
            if (f)
                *f = w->ctx.findings[k];
        }
        an_expect_merge(ctx, &w->ctx, base);
        an_lineage_free(&w->ctx);
        an_expect_free(&w->ctx);
        free(w->ctx.findings);
    }
}

/* Drop the findings that merging made redundant (marked with AN_KIND_COUNT). */
static void compact_findings(struct an_ctx *ctx)
{
    size_t out = 0;
    for (size_t i = 0; i < ctx->nfindings; i++)
        if (ctx->findings[i].kind != AN_KIND_COUNT)
            ctx->findings[out++] = ctx->findings[i];
    ctx->nfindings = out;
}

static int parse_dim(struct an_ctx *ctx, const char *arg)
{
    const char *eq = strchr(arg, '=');
    char *end;
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(ctx->dims[0].name))
        return -1;
    unsigned long long v = strtoull(eq + 1, &end, 10);
    if (*end || !eq[1] || v == 0)
        return -1;
    for (const char *c = arg; c < eq; c++)
        if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (c > arg && *c >= '0' && *c <= '9')))
            return -1;
    if (ctx->ndims == (int)(sizeof(ctx->dims) / sizeof(ctx->dims[0])))
        return -1;
    snprintf(ctx->dims[ctx->ndims].name, sizeof(ctx->dims[0].name), "%.*s", (int)(eq - arg), arg);
    ctx->dims[ctx->ndims++].value = v;
    return 0;
}

int shp_cmd_analyze(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},         {"dim", required_argument, 0, 'd'},
        {"expect", required_argument, 0, 'e'}, {"stats", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    struct an_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    bool json = false, stats = false;
    const char *expect = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
        } else if (c == 'd') {
            if (parse_dim(&ctx, optarg) < 0) {
                shp_err("--dim takes NAME=VALUE with a positive integer VALUE, not '%s'", optarg);
                return SHP_EXIT_USAGE;
            }
        } else if (c == 's') {
            stats = true;
        } else if (c == 'e') {
            expect = optarg;
        } else if (c == 'h') {
            analyze_usage(stdout);
            return SHP_EXIT_OK;
        } else {
            analyze_usage(stderr);
            return SHP_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        shp_err("analyze: no trace given (shapetrace analyze PATH...)");
        return SHP_EXIT_USAGE;
    }
    if (expect && an_expect_load(&ctx, expect) < 0) {
        an_expect_free(&ctx);
        return SHP_EXIT_USAGE;
    }
    double t0 = now_s();
    if (an_load(&ctx, argv + optind, argc - optind) < 0) {
        an_expect_free(&ctx);
        an_unload(&ctx);
        return SHP_EXIT_USAGE;
    }
    an_align_init(&ctx);
    /* Lineage and expectations concern one process at a time, so they run per trace on worker
     * threads while this thread lines the ranks up: each worker keeps one process's memory
     * map hot instead of interleaving all of them. */
    struct worker workers[2];
    int nworkers = start_workers(&ctx, workers, 2);
    bool progress = isatty(2), shown = false;
    struct an_proc *p;
    struct shp_event e;
    struct an_ref ref;
    while (an_next(&ctx, &p, &e, &ref)) {
        ctx.events++;
        p->last = ref;
        an_align_event(&ctx, p, &e, &ref);
        an_buffers_event(&ctx, p, &e, &ref);
        if (p->ended)
            an_align_proc_ended(&ctx, p);
        if (progress && (ctx.events & 0xffff) == 0 && now_s() - t0 > 1.0) {
            fprintf(stderr, "\rshapetrace: analyzing %3.0f%% (%" PRIu64 " events)",
                    100.0 * (double)ctx.bytes_done / (double)(ctx.bytes_total + 1), ctx.events);
            shown = true;
        }
    }
    if (shown)
        fprintf(stderr, "\r%60s\r", "");
    an_align_finish(&ctx);
    join_workers(&ctx, workers, nworkers);
    an_expect_finish(&ctx);
    compact_findings(&ctx);
    an_order(&ctx);
    bool color = !json && isatty(1) && !getenv("NO_COLOR");
    if (json)
        an_report_json(&ctx);
    else
        an_report_text(&ctx, color);
    if (stats) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(stderr, "shapetrace: analyze took %.3f s, max RSS %ld MiB, %" PRIu64 " events\n",
                now_s() - t0, ru.ru_maxrss / 1024, ctx.events);
    }
    int status = ctx.nfindings ? SHP_EXIT_FINDINGS : SHP_EXIT_OK;
    an_align_free(&ctx);
    an_expect_free(&ctx);
    free(ctx.findings);
    an_unload(&ctx);
    return status;
}
