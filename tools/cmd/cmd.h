/* shapetrace tools: the subcommands and what they share. */
#ifndef SHAPETRACE_CMD_H
#define SHAPETRACE_CMD_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* Exit statuses of the tools (docs/CONTRACTS.md lists them). */
#define SHP_EXIT_OK 0
#define SHP_EXIT_FINDINGS 1
#define SHP_EXIT_USAGE 2        /* bad usage, unreadable or foreign input */
#define SHP_EXIT_RUN_FAILED 125 /* `run` could not start the command's environment */

/* Prints "shapetrace CMD: WHAT; see shapetrace help CMD" (one line, WHAT from fmt) on stderr and
 * returns SHP_EXIT_USAGE. */
int shp_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int shp_cmd_run(int argc, char **argv);
int shp_cmd_dump(int argc, char **argv);
int shp_cmd_attach(int argc, char **argv);
int shp_cmd_status(int argc, char **argv);
int shp_cmd_analyze(int argc, char **argv);
int shp_cmd_export(int argc, char **argv);
int shp_cmd_report(int argc, char **argv);
int shp_cmd_symbols(int argc, char **argv);
int shp_cmd_snapshot(int argc, char **argv);

/* The analysis's options, rows of the option lists (tools/cmd/options.h) of analyze, export and
 * report: their ids are OPT_DIM and OPT_EXPECT in each. */
/* clang-format off */
#define SHP_ANALYSIS_OPTIONS(X) \
X(OPT_DIM, "dim", 0, "NAME=VALUE", \
  "a model dimension (hidden=7168, tp=8): counts that factor are\n" \
  "shown as shapes ([512, hidden/tp]), and a region's rows are\n" \
  "known, so that a consumer cutting them is reported") \
X(OPT_EXPECT, "expect", 0, "FILE", "shapes you believe in (JSON: docs/CONTRACTS.md)")
/* The call-site option of every command that shows sites (dump, analyze, export, report,
 * snapshot): its id is OPT_SITE_SKIP in each; its parsing is shp_cmd_site_skip's. */
#define SHP_SITE_SKIP_OPTION(X) \
X(OPT_SITE_SKIP, "site-skip", 0, "GLOB", \
  "frames that GLOB matches are framework code: a call site is the\n" \
  "first frame past them (repeatable; also SHAPETRACE_SITE_SKIP=G1,G2;\n" \
  "!GLOB keeps a frame; the rule and its list: docs/tracing.md, Call\n" \
  "sites)")
/* The threads option of analyze and export: its id is OPT_THREADS in each; its parsing is
 * shp_cmd_threads's. */
#define SHP_THREADS_OPTION(X) \
X(OPT_THREADS, "threads", 0, "N", \
  "threads it may use, 1 to 1024 (default: the cores it may run\n" \
  "on); the result is the same whatever N")
/* clang-format on */

struct an_dims;
struct an_options;
struct an_result;
struct shp_session;
/* Adds --dim NAME=VALUE (arg) to dims, as analyze, export and report take it. Returns 0, or -1
 * after one line (malformed, or NAME already given another value). */
int shp_cmd_dim(struct an_dims *dims, const char *arg);
/* The analysis options export and report pass on, kept as given ("--dim", VALUE, "--expect",
 * FILE, ...: nargs strings) and read into o once the traces are open, in that order. Returns 0,
 * or -1 after one line. */
int shp_cmd_analysis_args(struct an_options *o, char **args, int nargs);

/* --threads N into *n. Returns 0, or -1 after one line. */
int shp_cmd_threads(const char *arg, unsigned *n);
/* The time of clock (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID) in seconds, for --stats. */
double shp_cmd_seconds(clockid_t clock);
/* Runs the analysis of o over s into *res (analyze.h) for a command. Returns the exit status
 * analyze would give: SHP_EXIT_OK, SHP_EXIT_FINDINGS, or SHP_EXIT_USAGE after one line (then
 * *res is NULL). */
int shp_cmd_analysis(struct an_options *o, struct shp_session *s, struct an_result **res);

struct shp_site_rule;
/* The call-site options of every command that shows sites (tools/cmd/site.c). */
/* Adds the globs of SHAPETRACE_SITE_SKIP to r (call it first: the command line's come after, and
 * so decide). Returns 0, or -1 after one line (an item that is not a glob, out of memory). */
int shp_cmd_site_env(struct shp_site_rule *r);
/* Adds --site-skip GLOB to r for command cmd. Returns 0, or -1 after one line (a usage error). */
int shp_cmd_site_skip(struct shp_site_rule *r, const char *cmd, const char *glob);

/* What shp_symbols_write did: traces of this host read, frame lines written, modules that had
 * frames, the file's size, the wall time taken, and the files skipped. */
struct shp_symbols_stats {
    uint64_t traces, frames, modules, bytes;
    uint64_t unreadable; /* files of DIR that are not readable traces, skipped */
    double seconds;
    char path[4096]; /* the file written */
};

/* Writes this host's symbol file in DIR from this host's traces in DIR (tools/cmd/symbols.c),
 * replacing any older one whole. Returns 0, -ENOENT when DIR holds no trace, -ESRCH when none
 * of this host, or another negative errno. */
int shp_symbols_write(const char *dir, struct shp_symbols_stats *stats);

#endif
