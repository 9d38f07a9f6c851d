/* shapetrace: the command. Dispatches to run, dump and the commands that read traces. */
#include <stdio.h>
#include <string.h>

#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

static void usage(FILE *f)
{
    fputs("usage: shapetrace COMMAND [ARGS]\n"
          "\n"
          "  run [OPTIONS] -- CMD ARGS...   run CMD with every process traced\n"
          "  dump [--json] PATH...          print traces (files or run directories)\n"
          "  analyze [--json] [--dim N=V]... PATH...\n"
          "                                 line the ranks up, report the first divergence\n"
          "  status [--json] [--watch] DIR  which rank is where, while the job runs\n"
          "  attach DIR|PID [--on|--off|--mark TEXT]\n"
          "                                 switch recording, or mark the timeline, live\n"
          "\n"
          "  shapetrace COMMAND --help      options of one command\n"
          "  shapetrace --version\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return SHP_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return SHP_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("shapetrace %s\n", SHP_VERSION);
        return SHP_EXIT_OK;
    }
    if (!strcmp(cmd, "run"))
        return shp_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "dump"))
        return shp_cmd_dump(argc - 1, argv + 1);
    if (!strcmp(cmd, "analyze"))
        return shp_cmd_analyze(argc - 1, argv + 1);
    if (!strcmp(cmd, "status"))
        return shp_cmd_status(argc - 1, argv + 1);
    if (!strcmp(cmd, "attach"))
        return shp_cmd_attach(argc - 1, argv + 1);
    shp_err("unknown command '%s' (shapetrace --help lists them)", cmd);
    return SHP_EXIT_USAGE;
}
