/* shapetrace analyze: line the ranks up and report where they first diverge. The command
 * line: options, usage and exit status; the analyzer is tools/analyze. */
#define _GNU_SOURCE
#include "tools/analyze/analyze.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"

static void analyze_usage(FILE *f)
{
    fputs("usage: shapetrace analyze [--json] [--dim NAME=VALUE]... [--expect FILE] PATH...\n"
          "\n"
          "Lines the ranks' collectives up by communicator and sequence number, matches sends\n"
          "with receives, checks buffers against their allocations, compares the fingerprints\n"
          "of values that must agree across ranks (traces of run --values), and reports the\n"
          "first place where ranks diverge. PATHs are trace files or run directories, from\n"
          "any number of hosts.\n"
          "  --json             the JSON report (docs/CONTRACTS.md)\n"
          "  --dim NAME=VALUE   a model dimension (hidden=7168, tp=8): counts that factor are\n"
          "                     shown as shapes ([512, hidden/tp]), and a region's rows are\n"
          "                     known, so that a consumer cutting them is reported\n"
          "  --expect FILE      shapes you believe in (JSON: see the README)\n"
          "Exit status: 0 no findings, 1 findings, 2 bad usage or unreadable input.\n",
          f);
}

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

int shp_cmd_analyze(int argc, char **argv)
{
    return shp_cmd_analyze_to(argc, argv, stdout);
}

int shp_cmd_analyze_to(int argc, char **argv, FILE *out)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},         {"dim", required_argument, 0, 'd'},
        {"expect", required_argument, 0, 'e'}, {"stats", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    struct an_options o;
    memset(&o, 0, sizeof(o));
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            o.json = true;
        } else if (c == 'd') {
            int dr = parse_dim(&o.dims, optarg);
            if (dr == -2) {
                shp_err("--dim %s: %.*s is already given another value", optarg,
                        (int)strcspn(optarg, "="), optarg);
                return SHP_EXIT_USAGE;
            }
            if (dr < 0) {
                shp_err("--dim takes NAME=VALUE with a positive integer VALUE, not '%s'", optarg);
                return SHP_EXIT_USAGE;
            }
        } else if (c == 's') {
            o.stats = true;
        } else if (c == 'e') {
            o.expect = optarg;
        } else if (c == 'h') {
            analyze_usage(stdout);
            return SHP_EXIT_OK;
        } else {
            return shp_bad_option("analyze", argc, argv, "h", opts);
        }
    }
    if (optind >= argc)
        return shp_usage_error("analyze", "no trace given");
    o.paths = argv + optind;
    o.npaths = argc - optind;
    o.out = out;
    o.color = !o.json && out == stdout && isatty(1) && !getenv("NO_COLOR");
    int rc = an_analyze(&o);
    return rc < 0 ? SHP_EXIT_USAGE : rc ? SHP_EXIT_FINDINGS : SHP_EXIT_OK;
}
