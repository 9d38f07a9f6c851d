/* shapetrace: what the preload and the tools agree on outside the trace file: the environment
 * (every SHAPETRACE_* name and its default), the run directory's control file, and how a split
 * or shrink child's communicator id follows from its parent's. */
#ifndef SHAPETRACE_ENV_H
#define SHAPETRACE_ENV_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "include/shapetrace/trace.h"

/* Read once by the preload at start-up; `shapetrace run` sets them from its options. */
#define SHP_ENV_DIR "SHAPETRACE_DIR"         /* run directory; %h host, %p pid, %r rank */
#define SHP_ENV_STACKS "SHAPETRACE_STACKS"   /* none, native, python */
#define SHP_ENV_MAX_MB "SHAPETRACE_MAX_MB"   /* MiB of event records per process */
#define SHP_ENV_DORMANT "SHAPETRACE_DORMANT" /* set and not "0": start with recording off */
#define SHP_ENV_DEBUG "SHAPETRACE_DEBUG"     /* WARN, INFO, TRACE (NONE: silent) */
#define SHP_ENV_DEBUG_SUBSYS "SHAPETRACE_DEBUG_SUBSYS" /* INIT,RESOLVE,...; ^X for all but X */
#define SHP_ENV_DEBUG_FILE "SHAPETRACE_DEBUG_FILE"     /* log file instead of stderr; %h %p %r */
#define SHP_ENV_LIBUNWIND "SHAPETRACE_LIBUNWIND"       /* the libunwind to load for native stacks */
#define SHP_ENV_CLOCK "SHAPETRACE_CLOCK" /* tsc (where usable, the default) or monotonic */
#define SHP_ENV_FILE_GROWTH                                                                        \
    "SHAPETRACE_FILE_GROWTH" /* chunk, populate, large or full (bench/RESULTS.md) */
#define SHP_ENV_PREFAULT "SHAPETRACE_PREFAULT" /* 0: no helper thread faults the pages in */

/* Fingerprints of values that must agree across ranks (preload/values.c). */
#define SHP_ENV_VALUES "SHAPETRACE_VALUES" /* collectives, copies or all; unset or none: off */
#define SHP_ENV_VALUES_EVERY "SHAPETRACE_VALUES_EVERY" /* fingerprint every Nth call (1) */
#define SHP_ENV_VALUES_SITE "SHAPETRACE_VALUES_SITE"   /* copies: a glob on a frame's function */
/* Read by the tools: globs (comma-separated) of frames that are framework code, added to the site
 * rule's built-in list (tools/lib/site.h), as --site-skip does. */
#define SHP_ENV_SITE_SKIP "SHAPETRACE_SITE_SKIP"
/* Read by `shapetrace snapshot`: milliseconds to hold each process stopped after its copy, so
 * that a test can kill the command while a target is stopped under it. */
#define SHP_ENV_SNAPSHOT_HOLD_MS "SHAPETRACE_SNAPSHOT_HOLD_MS"

#define SHP_DEFAULT_DIR "shapetrace-trace"
#define SHP_DEFAULT_VALUES_EVERY 1
#define SHP_MAX_VALUES_EVERY 1000000000
#define SHP_DEFAULT_VALUES_SITE "*"
#define SHP_VALUES_SITE_MAX 256 /* bytes of a site glob, its NUL included */
#define SHP_DEFAULT_STACKS "python"
#define SHP_DEFAULT_MAX_MB 1024
#define SHP_MIN_MAX_MB 1 /* a smaller SHAPETRACE_MAX_MB is raised to this */
#define SHP_DEFAULT_DEBUG "WARN"

/* The control file: RUN_DIR/control, written (atomically, by rename) by `shapetrace attach
 * RUN_DIR` for the processes whose traces do not exist yet; a process reads it when it creates
 * its trace. Its text is one line, "armed 0" or "armed 1". */
#define SHP_CONTROL_FILE "control"
#define SHP_CONTROL_ARMED "armed "

/* Writes the control file's text for `armed` (0 or 1) into buf; returns its length, as snprintf. */
static inline int shp_control_format(char *buf, size_t len, int armed)
{
    return snprintf(buf, len, SHP_CONTROL_ARMED "%d\n", armed ? 1 : 0);
}

/* The armed value (0 or 1) that control-file text `text` (NUL-terminated) asks for; `dflt` when
 * it asks for none. */
static inline uint64_t shp_control_armed(const char *text, uint64_t dflt)
{
    const char *a = strstr(text, SHP_CONTROL_ARMED);
    return a ? (uint64_t)(a[sizeof(SHP_CONTROL_ARMED) - 1] == '1') : dflt;
}

/* The id of a communicator made by ncclCommSplit or ncclCommShrink: from the parent's id, the
 * index of this split or shrink among the parent's (0 for the first), and the color (-2 for a
 * shrink), so that every member computes the same id without talking to the others. */
static inline uint64_t shp_comm_child_id(uint64_t parent, uint32_t index, int color)
{
    return shp_mix64(parent ^ shp_mix64(((uint64_t)index << 32) ^ (uint32_t)color));
}

#endif
