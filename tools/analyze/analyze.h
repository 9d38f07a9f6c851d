/* shapetrace analyze: the analyzer as the command line calls it. */
#ifndef SHAPETRACE_ANALYZE_H
#define SHAPETRACE_ANALYZE_H

#include <stdbool.h>
#include <stdio.h>

#include "tools/analyze/findings.h"

struct an_options {
    char **paths; /* trace files or run directories */
    int npaths;
    struct an_dims dims; /* --dim values */
    const char *expect;  /* --expect FILE, or NULL */
    bool json;           /* the JSON report, else the text one */
    bool color;          /* the text report in ANSI colours */
    bool stats;          /* time, memory and events on stderr */
    FILE *out;           /* where the report goes; NULL: stdout */
};

/* Read the traces, run every pass, print the report on o->out. Returns 0 when nothing was
 * found, 1 with findings, -1 after printing one line for unreadable input. */
int an_analyze(const struct an_options *o);

#endif
