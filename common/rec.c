/* shapetrace: the record-writing protocol (see rec.h and include/shapetrace/trace.h). */
#include "common/rec.h"

#include <stdbool.h>

uint64_t shp_rec_limit(const struct shp_file_header *h, unsigned type)
{
    uint64_t cap = h->cap;
    if (shp_rec_role(type) & SHP_ROLE_META)
        cap += (cap - SHP_HEADER_SIZE) / 16;
    return cap;
}

uint64_t shp_rec_reserve(struct shp_file_header *h, uint64_t limit, size_t size)
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

void shp_rec_mark_reserved(void *rec, size_t size)
{
    struct shp_rec *r = rec;
    __atomic_store_n(&r->word, SHP_REC_WORD(SHP_REC_RESERVED, size), __ATOMIC_RELAXED);
}

void shp_rec_publish(void *rec, unsigned type, size_t size)
{
    struct shp_rec *r = rec;
    r->check = shp_rec_check(rec, type, size);
    __atomic_store_n(&r->word, SHP_REC_WORD(type, size), __ATOMIC_RELEASE);
}

void shp_rec_complete(struct shp_ev *ev, int result, int device, uint64_t out, int aux0, int aux1,
                      uint64_t dur)
{
    ev->result = result;
    ev->device = device;
    ev->out = out;
    ev->aux[0] = aux0;
    ev->aux[1] = aux1;
    if (dur == SHP_DUR_PENDING)
        dur--;
    __atomic_store_n(&ev->dur, dur, __ATOMIC_RELEASE);
}
