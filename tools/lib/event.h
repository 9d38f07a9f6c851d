/* shapetrace tools: one decoded event, the form every command works with. */
#ifndef SHAPETRACE_EVENT_H
#define SHAPETRACE_EVENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/lib/reader.h"

/* Unset integer fields are -1 (signed) or SHP_NONE (unsigned); has_* says which apply. */
#define SHP_NONE UINT64_MAX

struct shp_event {
    unsigned type;  /* SHP_REC_* */
    unsigned op;    /* enum shp_op; SHP_OP_NONE for a communicator seen unborn, marks */
    int cls;        /* SHP_CLS_*, 0 for marks */
    uint64_t index; /* position among the file's events */
    uint32_t tid;
    uint64_t t_ns;   /* wall clock */
    uint64_t dur_ns; /* SHP_NONE while the call had not returned */
    uint16_t flags;  /* SHP_EV_* */
    uint32_t stack;
    int32_t result;
    int32_t device;
    uint32_t group;
    /* collectives, p2p, communicators */
    uint64_t comm; /* id; 0 if none */
    int comm_rank, nranks;
    uint64_t seq;                           /* SHP_NONE if none */
    uint64_t count;                         /* SHP_NONE if none */
    int dtype;                              /* -1 if none */
    int redop;                              /* -1 if none */
    int root, peer;                         /* -1 if none */
    uint64_t bytes, send_bytes, recv_bytes; /* SHP_NONE if none */
    /* buffers and copies */
    uint64_t src, dst;                      /* SHP_NONE if none */
    int kind;                               /* SHP_KIND_*, -1 if none */
    uint64_t width, height, spitch, dpitch; /* SHP_NONE if none */
    uint64_t stream;                        /* SHP_NONE if none */
    uint64_t graph;                         /* capture id (calls) or graph handle (graph records) */
    /* communicator records */
    int comm_kind;
    uint64_t parent, handle;
    /* allocations and graphs */
    uint64_t ptr, size, exec, capture;
    /* a byte count of the call (count x element size, by the op's rule; a copy's extent) or the
     * end of one of its buffers does not fit in 64 bits: that size is SHP_NONE, the call has no
     * span, and the buffers pass reports it */
    bool impossible;
    const char *mark; /* points at mark_text for a mark, else NULL */
    char mark_text[sizeof(((struct shp_rec_mark *)0)->text) + 1]; /* NUL-terminated copy */
};

/* The most ranks a communicator may claim: a larger count read from a trace is damage and is
 * taken as unknown (-1), since readers size tables by it. */
#define SHP_MAX_NRANKS (1 << 20)

/* Decode a call or mark record; returns false for bookkeeping records (stacks, modules). */
bool shp_event_decode(const struct shp_trace *t, const struct shp_rec *r, unsigned type,
                      struct shp_event *e);
/* shp_event_decode without a collective's or p2p's sizes: its bytes, send_bytes, recv_bytes,
 * src and dst stay unknown (SHP_NONE) and `impossible` false, as if the record had none; every
 * other field is decoded. For a reader that decodes a record again and wants only what a call
 * is (the analyzer's merged stream: a third of its decoding was the sizes' checked products). */
bool shp_event_decode_brief(const struct shp_trace *t, const struct shp_rec *r, unsigned type,
                            struct shp_event *e);

/* A byte range of device or host memory that a call reads or writes: len bytes from start, as
 * rows of width bytes every pitch bytes when pitch is nonzero (a 2-D copy, an all-gather's
 * pieces side by side); len 0 when the call has no such range. */
struct shp_span {
    uint64_t start, len;
    uint64_t pitch, width;
    uint64_t rows; /* the rows a 2-D copy reads or writes; 1 otherwise */
};

/* The bytes the call e reads and writes, by its op's size rule: a collective's or p2p call's
 * send and receive buffers, a copy's source and destination. Both are len 0 for other events,
 * and for a call whose size is unknown. */
void shp_event_spans(const struct shp_event *e, struct shp_span *read, struct shp_span *write);

struct shp_stacks;
/* Print e as one JSON object with the dump keys of docs/CONTRACTS.md (no newline); its site is
 * the one under st's rule (shp_stacks_set_rule). */
void shp_event_json(FILE *f, const struct shp_trace *t, struct shp_stacks *st,
                    const struct shp_event *e);
struct shp_out;
/* The same through the writer o (out.h): what dump --json uses, a million events a second. */
void shp_event_json_out(struct shp_out *o, const struct shp_trace *t, struct shp_stacks *st,
                        const struct shp_event *e);

#endif
