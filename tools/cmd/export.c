/* shapetrace export: the traces as a timeline for ui.perfetto.dev and chrome://tracing. The
 * command line: options, usage and exit status; the drawing is tools/render/timeline.h, its
 * backends Chrome's JSON and Perfetto's protobuf. */
#define _GNU_SOURCE
#include <errno.h>
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
#include "tools/cmd/options.h"
#include "tools/lib/out.h"
#include "tools/lib/outfile.h"
#include "tools/lib/session.h"
#include "tools/lib/site.h"
#include "tools/render/sink.h"
#include "tools/render/timeline.h"

/* export's options (tools/cmd/options.h). */
/* clang-format off */
#define EXPORT_OPTIONS(X) \
X(OPT_FORMAT, "format", 0, "FORMAT", \
  "the file's format:\n" \
  "  chrome    Chrome's JSON trace-event format (the default)\n" \
  "  perfetto  Perfetto's protobuf format: smaller, faster to load") \
X(OPT_RANKS, "ranks", 0, "LIST", "only these global ranks (0,2,4-7)") \
X(OPT_FROM, "from", 0, "T", \
  "only calls that end at T or later: T in seconds after the first\n" \
  "call, or a number with ms, us, ns") \
X(OPT_TO, "to", 0, "T", "only calls that start at T or earlier") \
SHP_ANALYSIS_OPTIONS(X) \
X(OPT_NO_FINDINGS, "no-findings", 0, NULL, \
  "do not run the analysis (no finding events, no lineage or\n" \
  "send/receive arrows)") \
SHP_SITE_SKIP_OPTION(X) \
X(OPT_STATS, "stats", 0, NULL, "where the time went, on stderr after the file is written") \
SHP_THREADS_OPTION(X) \
X(OPT_OUT, NULL, 'o', "FILE", "write FILE (default: trace.json or trace.perfetto-trace)")
/* clang-format on */
SHP_OPTS_ROWS(export_rows, EXPORT_OPTIONS);
static const struct shp_opts export_opts = {
    .cmd = "export",
    .synopsis =
        "usage: shapetrace export [--format chrome|perfetto] [--ranks LIST] [--from T --to T]\n"
        "                         [--dim NAME=VALUE]... [--expect FILE] [--no-findings]\n"
        "                         [--site-skip GLOB]... [--stats] [--threads N] [-o FILE]\n"
        "                         PATH...\n"
        "\n"
        "Writes the traces in PATH as one timeline that ui.perfetto.dev and chrome://tracing\n"
        "open: a process per rank, a thread track per thread, a slice per call, arrows between\n"
        "the calls of one collective across ranks (at each graph replay that executed it too),\n"
        "from each send to the receive it matched, and from each producer to its consumer\n"
        "where the analysis found lineage, and each finding as an instant event.\n",
    .epilogue = "Exit status: 0, or 2 on bad usage or a PATH that is not a readable trace.\n",
    .v = export_rows,
    .n = SHP_OPTS_N(export_rows),
};

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

/* What export's command line asks for. */
struct export_args {
    const struct shp_tl_ops *ops;
    const char *outpath;
    int *ranks;
    size_t nranks;
    uint64_t from, to;
    bool findings, stats;
    unsigned threads; /* --threads: the analysis's, the drawing's (at most 4); 0: the cores */
    char **aargs;     /* the analysis's options, as analyze takes them */
    int naargs;
    struct shp_site_rule rule;
};

/* One option of export's (id, its value v) into a. Returns 0, or -1 after one line. */
static int take(struct export_args *a, int id, const char *v)
{
    int rc;
    switch (id) {
    case OPT_FORMAT:
        if (!strcmp(v, "chrome") || !strcmp(v, "json")) {
            a->ops = &shp_tl_chrome;
        } else if (!strcmp(v, "perfetto") || !strcmp(v, "proto")) {
            a->ops = &shp_tl_perfetto;
        } else {
            shp_err("--format takes chrome or perfetto, not '%s'", v);
            return -1;
        }
        return 0;
    case OPT_RANKS:
        rc = parse_ranks(v, &a->ranks, &a->nranks);
        if (rc == -ENOMEM)
            shp_err("export: out of memory");
        else if (rc < 0)
            shp_err("--ranks takes a list like 0,2,4-7, not '%s'", v);
        return rc < 0 ? -1 : 0;
    case OPT_FROM:
    case OPT_TO:
        if (parse_time(v, id == OPT_FROM ? &a->from : &a->to) < 0) {
            shp_err("--%s takes seconds (or a number with ms, us, ns), not '%s'",
                    id == OPT_FROM ? "from" : "to", v);
            return -1;
        }
        return 0;
    case OPT_DIM:
    case OPT_EXPECT:
        a->aargs[a->naargs++] = id == OPT_DIM ? "--dim" : "--expect";
        a->aargs[a->naargs++] = (char *)v;
        return 0;
    case OPT_NO_FINDINGS:
        a->findings = false;
        return 0;
    case OPT_STATS:
        a->stats = true;
        return 0;
    case OPT_THREADS:
        return shp_cmd_threads(v, &a->threads);
    case OPT_SITE_SKIP:
        return shp_cmd_site_skip(&a->rule, "export", v);
    case OPT_OUT:
        a->outpath = v;
        return 0;
    }
    return 0;
}

/* export's command line into a (which then holds what export_args_free gives back). Returns
 * SHP_PARSED, or the exit status after one line (or the help). */
static int parse(struct export_args *a, int argc, char **argv)
{
    struct shp_optparse p;
    int c;
    memset(a, 0, sizeof(*a));
    a->ops = &shp_tl_chrome;
    a->to = UINT64_MAX;
    a->findings = true;
    if (!(a->aargs = calloc((size_t)argc * 2 + 1, sizeof(char *)))) {
        shp_err("export: out of memory");
        return SHP_EXIT_USAGE;
    }
    if (shp_cmd_site_env(&a->rule) < 0)
        return SHP_EXIT_USAGE;
    shp_opts_begin(&p, &export_opts);
    while ((c = shp_opts_next(&p, argc, argv)) >= 0)
        if (take(a, c, p.arg) < 0)
            return SHP_EXIT_USAGE;
    if (c == SHP_OPT_STOP)
        return p.status;
    if (optind >= argc)
        return shp_usage_error("export", "no trace given");
    if (a->from > a->to) {
        shp_err("export: --from is after --to");
        return SHP_EXIT_USAGE;
    }
    return SHP_PARSED;
}

static void export_args_free(struct export_args *a)
{
    shp_site_rule_free(&a->rule);
    free(a->ranks);
    free(a->aargs);
}

/* The drawing's threads: --threads (0: the cores), at most EXPORT_DRAW_MAX. Its parts reach the
 * file through one writer, so threads past a few only hold more bytes ahead: on 16 cores, with
 * the analysis on 16 threads, drawing 16 x 1,000,000 events to Perfetto took 3.8 to 4.3 s on 4
 * threads and 3.9 to 4.2 s on 16, and the export 430 MiB against 512 to 516 (bench/RESULTS.md).
 * The analysis still uses every thread. */
#define EXPORT_DRAW_MAX 4
static unsigned draw_threads(unsigned threads)
{
    unsigned n = threads ? threads : shp_cores_available();
    return n < EXPORT_DRAW_MAX ? n : EXPORT_DRAW_MAX;
}

int shp_cmd_export(int argc, char **argv)
{
    struct shp_session session;
    memset(&session, 0, sizeof(session));
    struct an_options ao;
    memset(&ao, 0, sizeof(ao));
    struct an_result *result = NULL;
    struct shp_tl *tl = NULL;
    FILE *out = NULL;
    struct shp_outfile of = {0};
    struct export_args a;
    int rc, status = parse(&a, argc, argv);
    if (status != SHP_PARSED)
        goto out;
    status = SHP_EXIT_USAGE;
    const struct shp_tl_ops *ops = a.ops;
    const char *outpath = a.outpath;
    uint64_t from = a.from, to = a.to;
    bool findings = a.findings;
    ao.stats = a.stats;
    ao.threads = a.threads;
    /* The analysis refuses a trace given twice (it would look like two ranks). */
    if (shp_session_open(&session, argv + optind, argc - optind, findings ? SHP_SESSION_UNIQUE : 0,
                         "the export") < 0)
        goto out;
    session.site = &a.rule;
    struct shp_tl_options to_open = {.ranks = a.nranks ? a.ranks : NULL,
                                     .nranks = a.nranks,
                                     .flows = true,
                                     .window = from != 0 || to != UINT64_MAX};
    rc = shp_tl_open(&session, &to_open, &tl);
    if (rc == -ENOENT) {
        shp_err("export: no trace %s", a.nranks ? "of the ranks given" : "in the paths given");
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
        if (shp_cmd_analysis_args(&ao, a.aargs, a.naargs) < 0)
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
    double t_join = shp_cmd_seconds(CLOCK_MONOTONIC),
           c_join = shp_cmd_seconds(CLOCK_PROCESS_CPUTIME_ID);
    if (rc < 0) {
        shp_err("export: out of memory");
        goto out;
    }
    if (findings && !result)
        goto out;
    if (!outpath)
        outpath = ops->path;
    out = !strcmp(outpath, "-") ? stdout : shp_sink_fdopen(shp_outfile_open(&of, outpath));
    if (!out) {
        shp_err("%s: %s", outpath, strerror(errno));
        goto out;
    }
    uint64_t t0 = shp_tl_t0(tl);
    struct shp_tl_draw d = {.ops = ops,
                            .from = from == 0 ? 0 : t0 + from,
                            .to = to == UINT64_MAX ? UINT64_MAX : t0 + to,
                            .result = result,
                            .release = true,
                            .threads = draw_threads(a.threads)};
    rc = shp_tl_draw(tl, &d, out);
    if (ao.stats) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double t_end = shp_cmd_seconds(CLOCK_MONOTONIC),
               c_end = shp_cmd_seconds(CLOCK_PROCESS_CPUTIME_ID);
        fprintf(stderr,
                "shapetrace: export scan: wall %.3f s, CPU %.3f s; waited %.3f s for the "
                "analysis (wall %.3f s); drawing on %u thread%s: wall %.3f s, CPU %.3f s (its "
                "threads and the file's writer)\n",
                t_scan - t_start, c_scan - c_start, t_join - t_scan, job.wall, d.threads_used,
                d.threads_used == 1 ? "" : "s", t_end - t_join, c_end - c_join);
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
    if (out != stdout) {
        FILE *written = out; /* only now does the file take the place of the one named */
        out = NULL;
        if (shp_outfile_close(&of, written)) {
            shp_err("%s: %s", outpath, strerror(errno));
            goto out;
        }
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
    shp_outfile_abort(&of);
    shp_tl_close(tl);
    an_result_free(result);
    an_options_free(&ao);
    shp_session_close(&session);
    export_args_free(&a);
    return status;
}
