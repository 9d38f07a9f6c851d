/* shapetrace export: the traces as a timeline for ui.perfetto.dev and chrome://tracing. The
 * command line: options, usage and exit status; the drawing is tools/render/timeline.h, its
 * backends Chrome's JSON and Perfetto's protobuf. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tools/analyze/analyze.h"
#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"
#include "tools/lib/session.h"
#include "tools/lib/site.h"
#include "tools/render/sink.h"
#include "tools/render/timeline.h"

static void export_usage(FILE *f)
{
    fputs("usage: shapetrace export [--format chrome|perfetto] [--ranks LIST] [--from T --to T]\n"
          "                         [--dim NAME=VALUE]... [--expect FILE] [--no-findings]\n"
          "                         [--site-skip GLOB]... [--stats] [-o FILE] PATH...\n"
          "\n"
          "Writes the traces in PATH as one timeline that ui.perfetto.dev and chrome://tracing\n"
          "open: a process per rank, a thread track per thread, a slice per call, arrows between\n"
          "the calls of one collective across ranks (at each graph replay that executed it too),\n"
          "from each send to the receive it matched, and from each producer to its consumer\n"
          "where the analysis found lineage, and each finding as an instant event.\n"
          "  --format chrome    Chrome's JSON trace-event format (the default)\n"
          "  --format perfetto  Perfetto's protobuf format: smaller, faster to load\n"
          "  --ranks LIST       only these global ranks (0,2,4-7)\n"
          "  --from T, --to T   only calls that overlap [T, T] seconds after the first call\n"
          "  --dim, --expect    passed to the analysis, as in shapetrace analyze\n"
          "  --no-findings      no analysis: no finding events, no lineage or send/receive\n"
          "                     arrows\n" SHP_SITE_SKIP_HELP
          "  --stats            where the time went, on stderr after the file is written\n"
          "  -o FILE            write FILE (default: trace.json or trace.perfetto-trace)\n"
          "Exit status: 0, or 2 on bad usage or a PATH that is not a readable trace.\n",
          f);
}

/* The analysis, run beside the walk's scan. */
struct analysis {
    pthread_t thread;
    struct an_options *o;
    struct shp_session *s;
    struct an_result *res; /* NULL after its one line on stderr */
    double wall;           /* seconds it took */
};

static void *analysis_run(void *arg)
{
    struct analysis *a = arg;
    double t0 = shp_cmd_seconds(CLOCK_MONOTONIC);
    shp_cmd_analysis(a->o, a->s, &a->res);
    a->wall = shp_cmd_seconds(CLOCK_MONOTONIC) - t0;
    return NULL;
}

/* "0,2,4-7" into *out (*n ranks). -EINVAL when malformed, -ENOMEM. */
static int parse_ranks(const char *s, int **out, size_t *n)
{
    size_t cap = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0)
            return -EINVAL;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a)
                return -EINVAL;
        }
        for (long r = a; r <= b; r++) {
            if (!shp_grow((void **)out, &cap, *n, sizeof(**out)))
                return -ENOMEM;
            (*out)[(*n)++] = (int)r;
        }
        if (*end == ',')
            end++;
        else if (*end)
            return -EINVAL;
        s = end;
    }
    return *n ? 0 : -EINVAL;
}

/* Seconds, or a number with s, ms, us or ns. */
static int parse_time(const char *s, uint64_t *ns)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    double scale = 1e9;
    if (!strcmp(end, "ms"))
        scale = 1e6;
    else if (!strcmp(end, "us"))
        scale = 1e3;
    else if (!strcmp(end, "ns"))
        scale = 1;
    else if (*end && strcmp(end, "s"))
        return -1;
    *ns = (uint64_t)(v * scale);
    return 0;
}

int shp_cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, 0, 'f'},
        {"ranks", required_argument, 0, 'r'},
        {"from", required_argument, 0, 'F'},
        {"to", required_argument, 0, 'T'},
        {"dim", required_argument, 0, 'd'},
        {"expect", required_argument, 0, 'e'},
        {"no-findings", no_argument, 0, 'n'},
        {"site-skip", required_argument, 0, 'S'},
        {"stats", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    struct shp_session session;
    memset(&session, 0, sizeof(session));
    struct an_options ao;
    memset(&ao, 0, sizeof(ao));
    struct an_result *result = NULL;
    struct shp_site_rule rule = {0};
    struct shp_tl *tl = NULL;
    const struct shp_tl_ops *ops = &shp_tl_chrome;
    const char *outpath = NULL;
    FILE *out = NULL;
    int *ranks = NULL;
    size_t nranks = 0;
    uint64_t from = 0, to = UINT64_MAX;
    bool findings = true;
    char **aargs = calloc((size_t)argc * 2 + 1, sizeof(char *));
    int naargs = 0, c, rc, status = SHP_EXIT_USAGE;
    if (!aargs) {
        shp_err("export: out of memory");
        return SHP_EXIT_USAGE;
    }
    if (shp_cmd_site_env(&rule) < 0)
        goto out;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        if (c == 'f' && (!strcmp(optarg, "chrome") || !strcmp(optarg, "json"))) {
            ops = &shp_tl_chrome;
        } else if (c == 'f' && (!strcmp(optarg, "perfetto") || !strcmp(optarg, "proto"))) {
            ops = &shp_tl_perfetto;
        } else if (c == 'f') {
            shp_err("--format takes chrome or perfetto, not '%s'", optarg);
            goto out;
        } else if (c == 'r') {
            rc = parse_ranks(optarg, &ranks, &nranks);
            if (rc == -ENOMEM)
                shp_err("export: out of memory");
            else if (rc < 0)
                shp_err("--ranks takes a list like 0,2,4-7, not '%s'", optarg);
            if (rc < 0)
                goto out;
        } else if (c == 'F' || c == 'T') {
            if (parse_time(optarg, c == 'F' ? &from : &to) < 0) {
                shp_err("--%s takes seconds (or a number with ms, us, ns), not '%s'",
                        c == 'F' ? "from" : "to", optarg);
                goto out;
            }
        } else if (c == 'd' || c == 'e') {
            aargs[naargs++] = c == 'd' ? "--dim" : "--expect";
            aargs[naargs++] = optarg;
        } else if (c == 'n') {
            findings = false;
        } else if (c == 's') {
            ao.stats = true;
        } else if (c == 'S') {
            if (shp_cmd_site_skip(&rule, "export", optarg) < 0)
                goto out;
        } else if (c == 'o') {
            outpath = optarg;
        } else if (c == 'h') {
            export_usage(stdout);
            status = SHP_EXIT_OK;
            goto out;
        } else {
            shp_bad_option("export", argc, argv, "ho:", opts);
            goto out;
        }
    }
    if (optind >= argc) {
        shp_usage_error("export", "no trace given");
        goto out;
    }
    if (from > to) {
        shp_err("export: --from is after --to");
        goto out;
    }
    /* The analysis refuses a trace given twice (it would look like two ranks). */
    if (shp_session_open(&session, argv + optind, argc - optind, findings ? SHP_SESSION_UNIQUE : 0,
                         "the export") < 0)
        goto out;
    session.site = &rule;
    struct shp_tl_options to_open = {.ranks = nranks ? ranks : NULL,
                                     .nranks = nranks,
                                     .flows = true,
                                     .window = from != 0 || to != UINT64_MAX};
    rc = shp_tl_open(&session, &to_open, &tl);
    if (rc == -ENOENT) {
        shp_err("export: no trace %s", nranks ? "of the ranks given" : "in the paths given");
        goto out;
    } else if (rc < 0) {
        shp_err("export: out of memory");
        goto out;
    }
    /* As analyze --json would run on the same traces, every rank's (--ranks cuts only the
     * drawing), on a thread of its own while the walk scans them: both only read the traces. */
    struct analysis job = {.o = &ao, .s = &session};
    bool threaded = false;
    if (findings) {
        if (shp_cmd_analysis_args(&ao, aargs, naargs) < 0)
            goto out;
        ao.matches = true; /* the arrows from each send to its receive */
        threaded = pthread_create(&job.thread, NULL, analysis_run, &job) == 0;
        if (!threaded)
            analysis_run(&job);
    }
    double t_start = shp_cmd_seconds(CLOCK_MONOTONIC),
           c_start = shp_cmd_seconds(CLOCK_THREAD_CPUTIME_ID);
    rc = shp_tl_scan(tl);
    double t_scan = shp_cmd_seconds(CLOCK_MONOTONIC),
           c_scan = shp_cmd_seconds(CLOCK_THREAD_CPUTIME_ID);
    if (threaded)
        pthread_join(job.thread, NULL);
    result = job.res;
    double t_join = shp_cmd_seconds(CLOCK_MONOTONIC);
    if (rc < 0) {
        shp_err("export: out of memory");
        goto out;
    }
    if (findings && !result)
        goto out;
    if (!outpath)
        outpath = ops->path;
    out = !strcmp(outpath, "-") ? stdout : shp_sink_fopen(outpath);
    if (!out) {
        shp_err("%s: %s", outpath, strerror(errno));
        goto out;
    }
    uint64_t t0 = shp_tl_t0(tl);
    struct shp_tl_draw d = {.ops = ops,
                            .from = from == 0 ? 0 : t0 + from,
                            .to = to == UINT64_MAX ? UINT64_MAX : t0 + to,
                            .result = result,
                            .release = true};
    rc = shp_tl_draw(tl, &d, out);
    if (ao.stats) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double t_end = shp_cmd_seconds(CLOCK_MONOTONIC),
               c_end = shp_cmd_seconds(CLOCK_THREAD_CPUTIME_ID);
        fprintf(stderr,
                "shapetrace: export scan: wall %.3f s, CPU %.3f s; waited %.3f s for the "
                "analysis (wall %.3f s); drawing: wall %.3f s, CPU %.3f s (main thread)\n",
                t_scan - t_start, c_scan - c_start, t_join - t_scan, job.wall, t_end - t_join,
                c_end - c_scan);
        fprintf(stderr,
                "shapetrace: export took %.3f s, max RSS %ld MiB, CPU %.3f s user + %.3f s "
                "system\n",
                t_end - t_start, ru.ru_maxrss / 1024,
                (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
                (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
    }
    if (rc == -ENOMEM) {
        shp_err("export: out of memory");
        goto out;
    }
    if (fflush(out) || ferror(out) || rc < 0) {
        shp_err("%s: %s", outpath, rc < 0 ? strerror(-rc) : strerror(errno));
        goto out;
    }
    size_t nprocs;
    shp_tl_procs(tl, &nprocs);
    fprintf(stderr,
            "shapetrace: %s: %zu process%s, %" PRIu64 " slices, %" PRIu64 " flow ends, %" PRIu64
            " finding events (%s)\n",
            outpath, nprocs, nprocs == 1 ? "" : "es", d.slices, d.flows, d.instants, ops->name);
    status = SHP_EXIT_OK;
out:
    if (out && out != stdout)
        fclose(out);
    shp_tl_close(tl);
    an_result_free(result);
    an_options_free(&ao);
    shp_session_close(&session);
    shp_site_rule_free(&rule);
    free(ranks);
    free(aargs);
    return status;
}
