/* shapetrace report: the analysis as one self-contained HTML page. The command line: options,
 * usage and exit status; the page is tools/render/page.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/analyze/analyze.h"
#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"
#include "tools/lib/out.h"
#include "tools/lib/outfile.h"
#include "tools/lib/session.h"
#include "tools/lib/site.h"
#include "tools/render/page.h"

/* report's options (tools/cmd/options.h). */
/* clang-format off */
#define REPORT_OPTIONS(X) \
X(OPT_HTML, "html", 0, "FILE", "write FILE (default: report.html)") \
X(OPT_TITLE, "title", 0, "TEXT", "a line under the heading (e.g. what was run)") \
X(OPT_FINDING, "finding", 0, "N", "draw the page around finding N (1 is the first, the default)") \
SHP_ANALYSIS_OPTIONS(X) \
SHP_SITE_SKIP_OPTION(X)
/* clang-format on */
SHP_OPTS_ROWS(report_rows, REPORT_OPTIONS);
static const struct shp_opts report_opts = {
    .cmd = "report",
    .synopsis =
        "usage: shapetrace report [--html FILE] [--title TEXT] [--finding N]\n"
        "                         [--dim NAME=VALUE]... [--expect FILE] [--site-skip GLOB]...\n"
        "                         PATH...\n"
        "\n"
        "Runs the analysis on the traces in PATH and writes one self-contained HTML page:\n"
        "the first finding in words with its calls and what the peers did, a grid of ranks x\n"
        "collectives around it, a per-rank timeline, the producer -> consumer chain of a\n"
        "lineage finding, the other findings, the processes and the command line.\n",
    .epilogue = "Exit status: 0 when the page was written, 2 on bad usage or unreadable input.\n",
    .v = report_rows,
    .n = SHP_OPTS_N(report_rows),
};

int shp_cmd_report(int argc, char **argv)
{
    struct shp_optparse p;
    struct shp_session session;
    memset(&session, 0, sizeof(session));
    struct an_options ao;
    memset(&ao, 0, sizeof(ao));
    struct an_result *result = NULL;
    struct shp_page *page = NULL;
    struct shp_site_rule rule = {0};
    struct shp_page_options po = {.argc = argc, .argv = argv};
    const char *out = "report.html";
    FILE *f = NULL;
    struct shp_outfile of = {0};
    char **aargs = calloc((size_t)argc * 2 + 1, sizeof(char *));
    int naargs = 0, c, rc, status = SHP_EXIT_USAGE;
    if (!aargs) {
        shp_err("report: out of memory");
        return SHP_EXIT_USAGE;
    }
    if (shp_cmd_site_env(&rule) < 0)
        goto done;
    shp_opts_begin(&p, &report_opts);
    while ((c = shp_opts_next(&p, argc, argv)) >= 0) {
        if (c == OPT_HTML) {
            out = p.arg;
        } else if (c == OPT_TITLE) {
            po.title = p.arg;
        } else if (c == OPT_FINDING) {
            char *end;
            unsigned long v = strtoul(p.arg, &end, 10);
            if (*end || !*p.arg || v == 0) {
                shp_err("--finding takes a finding's number (1 is the first), not '%s'", p.arg);
                goto done;
            }
            po.finding = v - 1;
        } else if (c == OPT_SITE_SKIP) {
            if (shp_cmd_site_skip(&rule, "report", p.arg) < 0)
                goto done;
        } else if (c == OPT_DIM || c == OPT_EXPECT) {
            aargs[naargs++] = c == OPT_DIM ? "--dim" : "--expect";
            aargs[naargs++] = p.arg;
        }
    }
    if (c == SHP_OPT_STOP) {
        status = p.status;
        goto done;
    }
    if (optind >= argc) {
        status = shp_usage_error("report", "no trace given");
        goto done;
    }
    /* The analysis refuses a trace given twice (it would look like two ranks). */
    if (shp_session_open(&session, argv + optind, argc - optind, SHP_SESSION_UNIQUE, "the report") <
        0)
        goto done;
    session.site = &rule;
    if (shp_cmd_analysis_args(&ao, aargs, naargs) < 0)
        goto done;
    shp_cmd_analysis(&ao, &session, &result);
    if (!result)
        goto done;
    size_t nf = result->nfindings;
    rc = shp_page_open(&session, result, &po, &page);
    if (rc == -ERANGE) {
        shp_err("report: --finding %zu, but the analysis has %zu finding%s", po.finding + 1, nf,
                nf == 1 ? "" : "s");
        goto done;
    } else if (rc < 0) {
        shp_err("report: out of memory");
        goto done;
    }
    f = !strcmp(out, "-") ? stdout : shp_outfile_fopen(&of, out);
    if (!f) {
        shp_err("%s: %s", out, strerror(errno));
        goto done;
    }
    rc = shp_page_write(page, f);
    if (rc < 0) {
        shp_err("report: out of memory");
        goto done;
    }
    if (fflush(f) || ferror(f)) {
        shp_err("%s: %s", out, strerror(errno));
        goto done;
    }
    FILE *written = f; /* only now does the page take the place of the file named */
    f = NULL;
    if (written != stdout && shp_outfile_close(&of, written)) {
        shp_err("%s: %s", out, strerror(errno));
        goto done;
    }
    size_t np = session.nprocs;
    fprintf(stderr, "shapetrace: %s: report of %zu process%s, %zu finding%s\n", out, np,
            np == 1 ? "" : "es", nf, nf == 1 ? "" : "s");
    status = SHP_EXIT_OK;
done:
    if (f && f != stdout)
        fclose(f);
    shp_outfile_abort(&of);
    shp_page_close(page);
    an_result_free(result);
    an_options_free(&ao);
    shp_session_close(&session);
    shp_site_rule_free(&rule);
    free(aargs);
    return status;
}
