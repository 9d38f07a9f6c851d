/* shapetrace tools: the subcommands and what they share. */
#ifndef SHAPETRACE_CMD_H
#define SHAPETRACE_CMD_H

#include <stdint.h>
#include <stdio.h>

/* Exit statuses of the tools (the README lists them). */
#define SHP_EXIT_OK 0
#define SHP_EXIT_FINDINGS 1
#define SHP_EXIT_USAGE 2        /* bad usage, unreadable or foreign input */
#define SHP_EXIT_RUN_FAILED 125 /* `run` could not start the command's environment */

struct option;

/* Prints "shapetrace CMD: WHAT; see shapetrace help CMD" (one line, WHAT from fmt) on stderr and
 * returns SHP_EXIT_USAGE. */
int shp_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same, for the option getopt_long just refused with '?' (call it with opterr 0): unknown,
 * missing its value, or given one it does not take. shorts and longs as given to getopt_long. */
int shp_bad_option(const char *cmd, int argc, char **argv, const char *shorts,
                   const struct option *longs);

int shp_cmd_run(int argc, char **argv);
int shp_cmd_dump(int argc, char **argv);
int shp_cmd_attach(int argc, char **argv);
int shp_cmd_status(int argc, char **argv);
int shp_cmd_analyze(int argc, char **argv);
/* shp_cmd_analyze with the report printed on out (export and report read it from memory). */
int shp_cmd_analyze_to(int argc, char **argv, FILE *out);
int shp_cmd_export(int argc, char **argv);
int shp_cmd_report(int argc, char **argv);
int shp_cmd_symbols(int argc, char **argv);
int shp_cmd_snapshot(int argc, char **argv);

/* What shp_symbols_write did: traces of this host read, frame lines written, modules that had
 * frames, the file's size and the wall time taken. */
struct shp_symbols_stats {
    uint64_t traces, frames, modules, bytes;
    double seconds;
    char path[4096]; /* the file written */
};

/* Writes this host's symbol file in DIR from this host's traces in DIR (tools/cmd/symbols.c),
 * replacing any older one whole. Returns 0, -ENOENT when DIR holds no trace, -ESRCH when none
 * of this host, or another negative errno. */
int shp_symbols_write(const char *dir, struct shp_symbols_stats *stats);

#endif
