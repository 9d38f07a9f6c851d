/* shapetrace: the record-writing protocol of include/shapetrace/trace.h, for every writer of a
 * trace (the preload, `shapetrace attach` marking a live trace, the synthetic trace generator):
 * reserve space at the header's tail, mark it, fill it, publish it; complete a call record. */
#ifndef SHAPETRACE_COMMON_REC_H
#define SHAPETRACE_COMMON_REC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/shapetrace/trace.h"

/* Inline: the preload writes a record on every traced call, and these are most of what it does
 * there (a call into another object for each was a tenth of a traced graph launch). */

/* The end offset that a record of `type` may reach in the trace with header h: the header's
 * cap for events; a sixteenth of the cap more for bookkeeping (SHP_ROLE_META). */
static inline uint64_t shp_rec_limit(const struct shp_file_header *h, unsigned type)
{
    uint64_t cap = __atomic_load_n(&h->cap, __ATOMIC_RELAXED);
    if (shp_rec_role(type) & SHP_ROLE_META)
        cap += (cap - SHP_HEADER_SIZE) / 16;
    return cap;
}

/* Reserves `size` bytes at h's tail for a record that must end by `limit`, by a CAS on the tail
 * (any number of writers, in any number of processes sharing the mapping, at once). Returns the
 * record's file offset, or 0 when it does not fit (nothing is reserved then). Does not grow
 * the file: the caller makes sure the bytes exist before it writes them. */
static inline uint64_t shp_rec_reserve(struct shp_file_header *h, uint64_t limit, size_t size)
{
    uint64_t off = __atomic_load_n(&h->tail, __ATOMIC_RELAXED), end;
    do {
        end = off + size;
        if (end > limit)
            return 0;
    } while (!__atomic_compare_exchange_n(&h->tail, &off, end, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return off;
}

/* Marks reserved space at rec as reserved, with its size, before it is filled: a reader steps
 * over it if the writer dies before publishing. */
static inline void shp_rec_mark_reserved(void *rec, size_t size)
{
    struct shp_rec *r = (struct shp_rec *)rec;
    __atomic_store_n(&r->word, SHP_REC_WORD(SHP_REC_RESERVED, size), __ATOMIC_RELAXED);
}

/* Publishes a filled record: computes its check, then stores its first word with release order,
 * so that a reader that sees the word sees the record. With a constant type and size (the
 * preload's call records) the check folds into a few adds. */
static inline void shp_rec_publish(void *rec, unsigned type, size_t size)
{
    struct shp_rec *r = (struct shp_rec *)rec;
    r->check = shp_rec_check(rec, type, size);
    __atomic_store_n(&r->word, SHP_REC_WORD(type, size), __ATOMIC_RELEASE);
}

/* Completes a published full call record when the call returns: the result fields first, dur
 * last with release order (a dur of SHP_DUR_PENDING is stored one lower: it means "not
 * returned"). */
void shp_rec_complete(struct shp_ev *ev, int result, int device, uint64_t out, int aux0, int aux1,
                      uint64_t dur);

/* Completes a published compact record: its whole completion in one 8-byte store, release. */
static inline void shp_rec_done(struct shp_head *hd, int result, uint64_t dur)
{
    __atomic_store_n(&hd->done, shp_done(result, dur), __ATOMIC_RELEASE);
}

#endif
