/* shapetrace export and report: the traces they draw, and the analyzer's findings through its
 * documented JSON report. */
#ifndef SHAPETRACE_ANALYSIS_H
#define SHAPETRACE_ANALYSIS_H

#include <jansson.h>
#include <stddef.h>

#include "tools/lib/reader.h"

/* One input trace, opened. */
struct shp_input {
    char *path; /* owned */
    struct shp_trace t;
    int rank; /* global rank, -1 if unknown */
};

/* Open every trace in paths (trace files or run directories searched as dump does) into a new
 * array *in of *n. Returns 0, or -1 after printing one line naming the input (nothing is left
 * open then). The caller closes each trace and frees each path, then the array. */
int shp_inputs_open(char **paths, int npaths, struct shp_input **in, size_t *n);

/* Run `shapetrace analyze --json ARGS...` in this process (ARGS: analyze's options, then the
 * paths) and parse what it prints: README's "What analyze says" object. Returns a new reference,
 * or NULL when analyze failed (bad usage, unreadable input: it has printed its one line) or its
 * output did not parse; *status gets analyze's exit status. stdout is borrowed while it runs, so
 * not thread-safe. */
json_t *shp_analysis_run(int nargs, char **args, int *status);

/* The integer at key, or dflt when it is absent, null or not an integer. */
long long shp_json_int(const json_t *obj, const char *key, long long dflt);
/* The string at key, or dflt. */
const char *shp_json_text(const json_t *obj, const char *key, const char *dflt);

#endif
