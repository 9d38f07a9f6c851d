/* shapetrace tools: reading a trace file, complete, torn or still being written. */
#ifndef SHAPETRACE_TRACE_READ_H
#define SHAPETRACE_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/shapetrace/trace.h"

/* A communicator that compact records name by index, as its record says (see trace.h). */
struct shp_trace_comm {
    uint64_t id;
    uint64_t handle;              /* the ncclComm_t, 0 unknown */
    int32_t rank, nranks, device; /* what the library reported, else the arguments; -1 unknown */
    bool ok;                      /* false: the index names no valid communicator record */
};

/* One mapped trace. Immutable once open, so any number of threads may read it at once, each
 * with its own cursor. */
struct shp_trace {
    char *path;
    const unsigned char *map;
    size_t size;                       /* bytes mapped (the file's size at open) */
    const struct shp_file_header *hdr; /* points into map */
    uint64_t end;                      /* end of records: min(tail, file size) */
    bool truncated;                    /* the file is shorter than its header says */
    /* The clock conversion (shp_trace_mono_ns): ns = base_ns + (t - base_t) * mult / 2^40. */
    uint64_t base_t, base_ns, mult;
    /* The header's clocks at creation (shp_trace_wall_ns), kept beside the conversion: read
     * from the header page for every event, they were a sixth of the merge's time on 2,048
     * traces (a page, and its TLB entry, per trace). */
    uint64_t realtime_ns, monotonic_ns;
    bool clock_guessed;           /* TSC trace without a pair to trust: 1 tick taken as 1 ns */
    struct shp_trace_comm *comms; /* the header's communicator table at open */
    uint32_t ncomms;
};

/* One walk over a trace's records: start from {0}. */
struct shp_cursor {
    uint64_t off;  /* where the next record is looked for */
    uint64_t torn; /* records this walk stepped over */
    bool live;     /* set by the caller: the writer may still be running */
};

/* Map and validate the trace at `path`. On error returns a negative errno and writes a one-line
 * reason (without the path) into err. The trace keeps its own copy of path. */
int shp_trace_open(struct shp_trace *t, const char *path, char *err, size_t errlen);
void shp_trace_close(struct shp_trace *t);

/* The next whole record at or after c->off, stepping over records whose writer died before
 * publishing them (counted in c->torn). Returns NULL at the end. Sets *type (as the reader
 * reports it: a compact record's full type, shp_rec_as) and *size; advances
 * c->off past the record. With c->live set, an unpublished record is one still being written:
 * the walk stops before it (NULL, c->off left there) so a later call can resume. */
const struct shp_rec *shp_trace_next(const struct shp_trace *t, struct shp_cursor *c,
                                     unsigned *type, size_t *size);

/* True when the writer closed the trace and nothing was dropped, torn (by the walk c, which went
 * to the end) or cut. */
bool shp_trace_complete(const struct shp_trace *t, const struct shp_cursor *c);

/* Why the trace is incomplete, as one phrase for a report: when and why tracing switched itself
 * off and how many calls were lost after it, or calls dropped at the cap; what became of the
 * process (shp_trace_fate); torn records; a cut file. NULL when it is complete. The text is the
 * calling thread's, valid until its next call. */
const char *shp_trace_incomplete_why(const struct shp_trace *t, const struct shp_cursor *c);

/* What became of the traced process, as far as its trace and this host can tell. */
enum shp_fate {
    SHP_FATE_EXITED,  /* it closed the trace at a normal exit */
    SHP_FATE_RUNNING, /* still running: on this host, its pid is alive and started before the
                         trace was created (another host's processes are never taken as live) */
    SHP_FATE_EXECD,   /* it exec'd: beside its trace is a later one of the same host, pid and
                         parent, the new image's */
    SHP_FATE_KILLED,  /* none of these: killed or crashed */
};
/* The fate of t's process; for SHP_FATE_EXECD, the new image's trace file is written into next
 * (when next is not NULL). Looks into t's directory and, on the trace's host, into /proc. */
enum shp_fate shp_trace_fate(const struct shp_trace *t, char *next, size_t len);

/* Why tracing switched itself off (SHP_OFF_*) as a phrase; NULL when it did not. */
const char *shp_trace_off_why(const struct shp_trace *t);
/* What set the trace's cap (SHP_CAP_*: SHAPETRACE_MAX_MB, or a resource limit), as a phrase. */
const char *shp_trace_cap_why(const struct shp_trace *t);

/* The process's global rank: the environment's, else its rank in the first communicator. */
int shp_trace_rank(const struct shp_trace *t);

/* The conversion that clock pairs give (see trace.h): fills t's base_t, base_ns, mult and
 * clock_guessed from the header's clock and the latest pair whose check holds, and t's copy of
 * the header's creation clocks (realtime_ns, monotonic_ns). */
void shp_trace_clock_setup(struct shp_trace *t, const struct shp_file_header *h);

/* The conversions are inline: every event of every walk takes two of them. */
#define SHP_CLOCK_FRAC 40

/* CLOCK_MONOTONIC nanoseconds for a time in the trace's clock (a record's `t`). */
static inline uint64_t shp_trace_mono_ns(const struct shp_trace *t, uint64_t clock_t)
{
    /* Signed: a call's entry is read before the trace (and its first pair) exists. */
    __int128 d = (__int128)(int64_t)(clock_t - t->base_t) * t->mult;
    return t->base_ns + (uint64_t)(int64_t)(d >> SHP_CLOCK_FRAC);
}

/* Nanoseconds for a duration in the trace's clock. */
static inline uint64_t shp_trace_dur_ns(const struct shp_trace *t, uint64_t clock_dur)
{
    return (uint64_t)(((unsigned __int128)clock_dur * t->mult) >> SHP_CLOCK_FRAC);
}

/* Wall-clock nanoseconds for a CLOCK_MONOTONIC time of the trace's process. */
static inline uint64_t shp_trace_wall_ns(const struct shp_trace *t, uint64_t mono_ns)
{
    return t->realtime_ns + (mono_ns - t->monotonic_ns);
}

/* The communicator that a compact record names by index `idx`: looked up in the table read at
 * open, else (a live trace's newer communicator) in the header now. Returns a struct with ok
 * false when the index names no valid communicator record. */
struct shp_trace_comm shp_trace_comm_at(const struct shp_trace *t, unsigned idx);

/* Collect the trace files in `path` (a file, or a directory searched one level deep for
 * *.shptrace) into a growing array. Returns 0 or a negative errno. */
int shp_trace_collect(const char *path, char ***files, size_t *n);

#endif
