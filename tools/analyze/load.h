/* shapetrace analyze: the merged event stream, for the driver. */
#ifndef SHAPETRACE_LOAD_H
#define SHAPETRACE_LOAD_H

#include <stdbool.h>

#include "tools/analyze/pass.h"

/* The session's traces as ctx->procs, each read up to its first event for the merge; 0, or -1
 * after printing one line (call an_unload either way). */
int an_load(struct an_ctx *ctx, struct shp_session *s);
/* The next event in time order across all processes; false at the end. *e points into the
 * process's read-ahead buffers and holds until the next call. After the last event of a
 * process, that process's `ended` is set. */
bool an_next(struct an_ctx *ctx, struct an_proc **proc, const struct shp_event **e,
             struct an_ref *ref);
void an_unload(struct an_ctx *ctx);

#endif
