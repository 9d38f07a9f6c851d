/* shapetrace analyze: the merged event stream, for the driver. Each process's trace is read in
 * order into a feed: a ring of what the merge needs of each event (its time and where it is),
 * filled by reader threads, or by the merging thread itself when there are none. The filler
 * decodes every event and runs the driver's per-process work on it (ops below); the merge
 * decodes again only the events that its passes look at. */
#ifndef SHAPETRACE_LOAD_H
#define SHAPETRACE_LOAD_H

#include <stdbool.h>
#include <stdio.h>

#include "tools/analyze/pass.h"

/* The driver's work on each event as its feed decodes it, on the thread that fills the
 * process's feed: one thread per process at a time, in the process's order. What event returns
 * (NULL: nothing) is handed back by an_next with the event, in merge order. end is called once
 * the process's last event is decoded, on the same thread. */
struct an_feed_ops {
    void *(*event)(void *arg, struct an_proc *p, const struct shp_event *e,
                   const struct an_ref *ref);
    void (*end)(void *arg, struct an_proc *p);
    void *arg;
};

/* The session's traces as ctx->procs, with `readers` threads to fill their feeds (0: the
 * calling thread fills them as it merges). Nothing is read yet. 0, or -1 after printing one
 * line (call an_unload either way). */
int an_load(struct an_ctx *ctx, struct shp_session *s, unsigned readers,
            const struct an_feed_ops *ops);
/* Starts the readers and waits until every process's first event is read; `types` (a mask of
 * 1u << SHP_REC_*) are the record types an_next decodes (known once the passes that will see
 * them have their states). */
void an_load_start(struct an_ctx *ctx, unsigned types);
/* The next event in time order across all processes; false at the end. *e is the event decoded
 * when its type is among the types of an_load_start, else NULL (ref->type says what it is); it
 * holds until the next call. Where a reader thread fills the process's feed, the event is the
 * brief decoding of its record (shp_event_decode_brief: bytes, send_bytes, recv_bytes, src and
 * dst unknown), which the merged passes do not read: for a collective or a send/receive, rebuilt
 * from what its reader kept of its own decoding; for another type, decoded again here. *note is
 * what the feed's ops returned for it. After the last event of a process, that process's `ended` is
 * set. An event of a type not among `types`, with no note, that is not its process's last, is not
 * handed out: it is counted in ctx->events and becomes its process's `last` here, where it comes in
 * the merged order. Call from the thread that called an_load. */
bool an_next(struct an_ctx *ctx, struct an_proc **proc, const struct shp_event **e,
             struct an_ref *ref, void **note);
/* Bytes of the traces read so far, and in all (for a progress line). */
void an_load_progress(const struct an_ctx *ctx, uint64_t *done, uint64_t *total);
/* One line per reader thread on f: its processes, events, wall and CPU time. `what` names its
 * work. */
void an_load_stats(const struct an_ctx *ctx, FILE *f, const char *what);
/* Waits for the reader threads; after an_next returned false, every process's `end` has run.
 * ctx->procs stays. */
void an_load_join(struct an_ctx *ctx);
/* an_load_join, then frees the feeds and ctx->procs. */
void an_unload(struct an_ctx *ctx);

#endif
