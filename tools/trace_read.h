/* shapetrace tools: reading a trace file, complete, torn or still being written. */
#ifndef SHAPETRACE_TRACE_READ_H
#define SHAPETRACE_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shapetrace/trace.h"

struct shp_trace {
    char *path;
    const unsigned char *map;
    size_t size;                       /* bytes mapped (the file's size at open) */
    const struct shp_file_header *hdr; /* points into map */
    uint64_t end;                      /* end of records: min(tail, file size) */
    uint64_t torn;                     /* records skipped by shp_trace_next so far */
    bool truncated;                    /* the file is shorter than its header says */
    bool live;                         /* set by the caller: the writer may still be running */
};

/* Map and validate the trace at `path`. On error returns a negative errno and writes a one-line
 * reason (without the path) into err. The trace keeps its own copy of path. */
int shp_trace_open(struct shp_trace *t, const char *path, char *err, size_t errlen);
void shp_trace_close(struct shp_trace *t);

/* The next whole record at or after *off (start with *off = 0), stepping over records whose
 * writer died before publishing them (counted in t->torn). Returns NULL at the end. Sets *type
 * and *size; advances *off past the record. With t->live set, an unpublished record is one still
 * being written: the walk stops before it (NULL, *off left there) so a later call can resume. */
const struct shp_rec *shp_trace_next(struct shp_trace *t, uint64_t *off, unsigned *type,
                                     size_t *size);

/* True when the writer closed the trace and nothing was torn or cut. Call after iterating. */
bool shp_trace_complete(const struct shp_trace *t);

/* The process's global rank: the environment's, else its rank in the first communicator. */
int shp_trace_rank(const struct shp_trace *t);

/* Wall-clock nanoseconds for a record's monotonic t_ns. */
uint64_t shp_trace_wall_ns(const struct shp_trace *t, uint64_t t_ns);

/* Collect the trace files in `path` (a file, or a directory searched one level deep for
 * *.shptrace) into a growing array. Returns 0 or a negative errno. */
int shp_trace_collect(const char *path, char ***files, size_t *n);

#endif
