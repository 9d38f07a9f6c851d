/* shapetrace preload: fingerprints of values that must agree across ranks (SHAPETRACE_VALUES):
 * what record.c and init.c call. Everything here is off, and costs one load and a branch in the
 * wrappers, unless SHAPETRACE_VALUES is set. */
#ifndef SHAPETRACE_PRELOAD_VALUES_H
#define SHAPETRACE_PRELOAD_VALUES_H

#include <stdbool.h>

#include "preload/preload.h"

#define SHP_VALUES_COLL 0x1u /* all-reduce, all-gather, broadcast outputs */
#define SHP_VALUES_COPY 0x2u /* copies whose call site matches SHAPETRACE_VALUES_SITE */

/* shp_values_mask (preload.h): what is fingerprinted, SHP_VALUES_*; 0 when off. */

/* Read SHAPETRACE_VALUES, _EVERY and _SITE (once, from shp_init, after shp_config_load). */
void shp_values_config(void);

/* The trace was just created: stamp it with the format version that value records need. */
void shp_values_opened(void);

/* Before the real call: fingerprints in flight whose kernels are done are read back (their
 * records completed). `captures`: stream captures in progress in the process (record.c), during
 * which nothing is asked of the driver. Thread-safe; saves and restores errno. */
void shp_values_before(int captures);

/* After the real call of c returned `result`, its record (c->ev or c->head) published: a
 * fingerprint of what it produced, if it is one of those fingerprinted, and the read-back of
 * finished ones. `group`: the calling thread's NCCL group depth after the call (a collective
 * inside a group is fingerprinted after the outermost ncclGroupEnd, when NCCL has enqueued it).
 * Never synchronizes the application's streams; an error of the driver switches fingerprints
 * off with one warning. Thread-safe; saves and restores errno. */
void shp_values_after(struct shp_call *c, int result, unsigned group, int captures);

/* A forked child's fingerprints are off: its parent's contexts are not its own. */
void shp_values_atfork_child(void);

#endif
