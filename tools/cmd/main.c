/* shapetrace: the command. Dispatches to run, dump and the commands that read traces. */
#include <stdio.h>
#include <string.h>

#include "include/shapetrace/trace.h"
#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"
#include "tools/lib/version.h"

static void usage(FILE *f)
{
    fputs(
        "usage: shapetrace COMMAND [ARGS]\n"
        "\n"
        "  run [OPTIONS] -- CMD ARGS...   run CMD with every process traced\n"
        "  dump [--json] PATH...          print traces (files or run directories)\n"
        "  analyze [--json] [--dim N=V]... PATH...\n"
        "                                 line the ranks up, report the first divergence\n"
        "  export [--format chrome|perfetto] [-o FILE] PATH...\n"
        "                                 a timeline for ui.perfetto.dev or chrome://tracing\n"
        "  report [--html FILE] PATH...   the analysis as one self-contained HTML page\n"
        "  status [--json] [--watch] DIR  which rank is where, while the job runs\n"
        "  attach DIR|PID [--on|--off|--mark TEXT]\n"
        "                                 switch recording, or mark the timeline, live\n"
        "  symbols RUN_DIR                store the run's native frame names (run does it)\n"
        "  snapshot [--json] PID... | --all\n"
        "                                 where each rank of a live (hung) job is, now\n"
        "\n"
        "  shapetrace help COMMAND        options of one command (also COMMAND --help)\n"
        "  shapetrace --version           the version, and the trace format it reads and writes\n",
        f);
}

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"run", shp_cmd_run},       {"dump", shp_cmd_dump},       {"analyze", shp_cmd_analyze},
    {"export", shp_cmd_export}, {"report", shp_cmd_report},   {"status", shp_cmd_status},
    {"attach", shp_cmd_attach}, {"symbols", shp_cmd_symbols}, {"snapshot", shp_cmd_snapshot},
};

static int (*lookup(const char *name))(int, char **)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(commands[i].name, name))
            return commands[i].fn;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        shp_err("no command given; see shapetrace --help");
        return SHP_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") && argc > 2) {
        int (*fn)(int, char **) = lookup(argv[2]);
        if (!fn) {
            shp_err("unknown command '%s'; see shapetrace --help", argv[2]);
            return SHP_EXIT_USAGE;
        }
        char *args[] = {argv[2], "--help", NULL};
        return fn(2, args);
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return SHP_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("shapetrace %s (trace format version %u, read and written; version %u, with "
               "value records, when run with --values; versions %u to %u read)\n",
               SHP_VERSION, SHP_TRACE_VERSION, SHP_TRACE_VERSION_VALUES, SHP_TRACE_VERSION_OLDEST,
               SHP_TRACE_VERSION - 1);
        return SHP_EXIT_OK;
    }
    int (*fn)(int, char **) = lookup(cmd);
    if (fn)
        return fn(argc - 1, argv + 1);
    shp_err("unknown command '%s'; see shapetrace --help", cmd);
    return SHP_EXIT_USAGE;
}
