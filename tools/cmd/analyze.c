/* shapetrace analyze: line the ranks up and report where they first diverge. The command
 * line: options, usage and exit status; the session (tools/lib/session.h) opens the traces and
 * the analyzer is tools/analyze. */
#define _GNU_SOURCE
#include "tools/analyze/analyze.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"
#include "tools/lib/out.h"
#include "tools/lib/session.h"
#include "tools/lib/site.h"

/* analyze's options (tools/cmd/options.h). */
/* clang-format off */
#define ANALYZE_OPTIONS(X) \
X(OPT_JSON, "json", 0, NULL, "the JSON report (docs/CONTRACTS.md)") \
SHP_ANALYSIS_OPTIONS(X) \
SHP_SITE_SKIP_OPTION(X) \
X(OPT_STATS, "stats", 0, NULL, \
  "where the time went, on stderr after the report: wall and CPU\n" \
  "time of each thread, peak memory, events read") \
SHP_THREADS_OPTION(X)
/* clang-format on */
SHP_OPTS_ROWS(analyze_rows, ANALYZE_OPTIONS);
static const struct shp_opts analyze_opts = {
    .cmd = "analyze",
    .synopsis =
        "usage: shapetrace analyze [--json] [--dim NAME=VALUE]... [--expect FILE]\n"
        "                          [--site-skip GLOB]... [--stats] [--threads N] PATH...\n"
        "\n"
        "Lines the ranks' collectives up by communicator and sequence number, matches sends\n"
        "with receives, checks buffers against their allocations, compares the fingerprints\n"
        "of values that must agree across ranks (traces of run --values), and reports the\n"
        "first place where ranks diverge. PATHs are trace files or run directories, from\n"
        "any number of hosts.\n",
    .epilogue = "Exit status: 0 no findings, 1 findings, 2 bad usage or unreadable input.\n",
    .v = analyze_rows,
    .n = SHP_OPTS_N(analyze_rows),
};

/* Adds NAME=VALUE to dims. -1 when malformed, -2 when NAME already has another value (which of
 * two hidden sizes would the shapes use?); the same value twice is harmless. */
static int parse_dim(struct an_dims *dims, const char *arg)
{
    const char *eq = strchr(arg, '=');
    char *end;
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(dims->v[0].name))
        return -1;
    unsigned long long v = strtoull(eq + 1, &end, 10);
    if (*end || !eq[1] || v == 0)
        return -1;
    for (const char *c = arg; c < eq; c++)
        if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (c > arg && *c >= '0' && *c <= '9')))
            return -1;
    for (int i = 0; i < dims->n; i++)
        if (strlen(dims->v[i].name) == (size_t)(eq - arg) &&
            !strncmp(dims->v[i].name, arg, (size_t)(eq - arg)))
            return dims->v[i].value == v ? 0 : -2;
    if (dims->n == (int)(sizeof(dims->v) / sizeof(dims->v[0])))
        return -1;
    snprintf(dims->v[dims->n].name, sizeof(dims->v[0].name), "%.*s", (int)(eq - arg), arg);
    dims->v[dims->n++].value = v;
    return 0;
}

int shp_cmd_dim(struct an_dims *dims, const char *arg)
{
    int dr = parse_dim(dims, arg);
    if (dr == -2)
        shp_err("--dim %s: %.*s is already given another value", arg, (int)strcspn(arg, "="), arg);
    else if (dr < 0)
        shp_err("--dim takes NAME=VALUE with a positive integer VALUE, not '%s'", arg);
    return dr < 0 ? -1 : 0;
}

int shp_cmd_analysis_args(struct an_options *o, char **args, int nargs)
{
    for (int i = 0; i + 1 < nargs; i += 2) {
        if (!strcmp(args[i], "--expect"))
            o->expect = args[i + 1];
        else if (shp_cmd_dim(&o->dims, args[i + 1]) < 0)
            return -1;
    }
    return 0;
}

int shp_cmd_threads(const char *arg, unsigned *n)
{
    char *end;
    unsigned long v = strtoul(arg, &end, 10);
    if (!*arg || *end || *arg == '-' || v < 1 || v > 1024) {
        shp_err("--threads takes a number of threads from 1 to 1024, not '%s'", arg);
        return -1;
    }
    *n = (unsigned)v;
    return 0;
}

int shp_cmd_analysis(struct an_options *o, struct shp_session *s, struct an_result **res)
{
    int rc = an_run(o, s, res);
    return rc < 0 ? SHP_EXIT_USAGE : (*res)->nfindings ? SHP_EXIT_FINDINGS : SHP_EXIT_OK;
}

double shp_cmd_seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int shp_cmd_analyze(int argc, char **argv)
{
    struct shp_optparse p;
    struct an_options o;
    memset(&o, 0, sizeof(o));
    struct shp_site_rule rule = {0};
    struct shp_session s;
    memset(&s, 0, sizeof(s));
    struct an_result *res = NULL;
    bool json = false;
    int c, status = SHP_EXIT_USAGE;
    if (shp_cmd_site_env(&rule) < 0)
        goto out;
    shp_opts_begin(&p, &analyze_opts);
    while ((c = shp_opts_next(&p, argc, argv)) >= 0) {
        if (c == OPT_JSON) {
            json = true;
        } else if (c == OPT_DIM) {
            if (shp_cmd_dim(&o.dims, p.arg) < 0)
                goto out;
        } else if (c == OPT_STATS) {
            o.stats = true;
        } else if (c == OPT_EXPECT) {
            o.expect = p.arg;
        } else if (c == OPT_SITE_SKIP) {
            if (shp_cmd_site_skip(&rule, "analyze", p.arg) < 0)
                goto out;
        } else if (c == OPT_THREADS) {
            if (shp_cmd_threads(p.arg, &o.threads) < 0)
                goto out;
        }
    }
    if (c == SHP_OPT_STOP) {
        status = p.status;
        goto out;
    }
    if (optind >= argc) {
        status = shp_usage_error("analyze", "no trace given");
        goto out;
    }
    bool color = !json && isatty(1) && !getenv("NO_COLOR");
    double t0 = shp_cmd_seconds(CLOCK_MONOTONIC), c0 = shp_cmd_seconds(CLOCK_THREAD_CPUTIME_ID);
    /* The expectation file first: a malformed one is the error to see, whatever the traces. */
    if (an_options_expect(&o) < 0)
        goto out;
    if (shp_session_open(&s, argv + optind, argc - optind, SHP_SESSION_UNIQUE, "the analysis") < 0)
        goto out;
    s.site = &rule;
    status = shp_cmd_analysis(&o, &s, &res);
    if (!res)
        goto out;
    if (json)
        an_print_json(res, stdout);
    else
        an_print_text(res, stdout, color);
    if (o.stats) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double t = shp_cmd_seconds(CLOCK_MONOTONIC) - t0;
        fprintf(stderr, "shapetrace: main thread, all: wall %.3f s, CPU %.3f s\n", t,
                shp_cmd_seconds(CLOCK_THREAD_CPUTIME_ID) - c0);
        fprintf(stderr, "shapetrace: analyze took %.3f s, max RSS %ld MiB, %" PRIu64 " events\n", t,
                ru.ru_maxrss / 1024, res->events);
    }
out:
    an_result_free(res);
    shp_session_close(&s);
    an_options_free(&o);
    shp_site_rule_free(&rule);
    return status;
}
