/* shapetrace tools: value records (SHAPETRACE_VALUES; trace.h SHP_REC_VALUE), decoded. They are
 * not events: they carry no index of their own and every event walk skips them; `dump` shows
 * them beside their calls and the analyzer's values pass reads them with a cursor of its own. */
#ifndef SHAPETRACE_VALUE_H
#define SHAPETRACE_VALUE_H

#include <stdbool.h>
#include <stdint.h>

#include "tools/lib/reader.h"

struct shp_value {
    uint64_t t_ns;   /* when the fingerprint was asked for, wall clock */
    uint64_t call;   /* file offset of the call's record */
    unsigned op;     /* the call's op */
    uint64_t comm;   /* collectives: their communicator; copies: the one of the last collective
                        issued before; 0 if none */
    uint64_t seq;    /* that collective's seq, SHP_NONE if none */
    uint64_t occ;    /* copies: copies from this site before this one */
    uint64_t bytes;  /* bytes fingerprinted */
    uint64_t site;   /* copies: the site's hash (the same in every process); 0 for collectives */
    uint32_t stack;  /* the call's stack id */
    unsigned what;   /* SHP_VALUE_OUTPUT, SHP_VALUE_COPIED */
    unsigned how;    /* SHP_VALUE_DEVICE, SHP_VALUE_HOST */
    unsigned status; /* SHP_VALUE_*; a status this reader does not know reads as lost */
    uint64_t fp;     /* the fingerprint when status is SHP_VALUE_DONE */
};

/* Decode the record r of type `type` (as shp_trace_next reports it) if it is a value record. */
bool shp_value_decode(const struct shp_trace *t, const struct shp_rec *r, unsigned type,
                      struct shp_value *v);

/* The status as a word: "done", "pending", "captured", "busy" or "lost". */
const char *shp_value_status_name(unsigned status);

/* The call record at file offset `off` of t, as shp_trace_next would give it: NULL unless a
 * whole, published record whose check holds starts there; *type as readers report it. */
const struct shp_rec *shp_value_call_at(const struct shp_trace *t, uint64_t off, unsigned *type);

/* Recent events of one trace by file offset, for finding the call a value record names: value
 * records follow their calls closely (the calling thread writes one right after its call). */
#define SHP_VALUE_RECENT 1024
struct shp_value_recent {
    uint64_t off[SHP_VALUE_RECENT], index[SHP_VALUE_RECENT];
    uint64_t n; /* noted so far */
};
void shp_value_recent_note(struct shp_value_recent *r, uint64_t off, uint64_t index);
/* The index noted for off, or SHP_NONE when it is not among the recent ones. */
uint64_t shp_value_recent_find(const struct shp_value_recent *r, uint64_t off);

struct shp_out;
/* v as one JSON object (no newline), with `of`: the index of its call (SHP_NONE: unknown, null);
 * keys in docs/CONTRACTS.md. */
void shp_value_json_out(struct shp_out *o, const struct shp_trace *t, const struct shp_value *v,
                        uint64_t of);

#endif
