/* shapetrace tools: the live device allocations of one process, from its alloc and free
 * events, kept sorted so the one holding an address is found by binary search. */
#ifndef SHAPETRACE_ALLOCS_H
#define SHAPETRACE_ALLOCS_H

#include <stddef.h>
#include <stdint.h>

#include "tools/lib/event.h"

struct shp_alloc {
    uint64_t ptr, size;
};

struct shp_allocs {
    struct shp_alloc *v; /* sorted by ptr, not overlapping; inl while it fits */
    size_t n, cap;
    /* A process holds a few blocks (torch's caching allocator, a few large segments): kept
     * beside the count, they take no cache miss of their own. Never copy the struct. */
    struct shp_alloc inl[4];
};

/* Apply an event: a successful allocation adds its block (the same address handed out again
 * replaces the old size), a free removes the block it names. Other events change nothing. An
 * allocation that does not fit in memory is not tracked. */
void shp_allocs_event(struct shp_allocs *a, const struct shp_event *e);
/* Index of the last block starting at or below ptr, or -1. Branch-free, as the range map's
 * search (ranges.c); inline: the buffers pass looks up every copy's and collective's buffers,
 * and the call was most of the look-up. */
static inline long shp_allocs_below(const struct shp_allocs *a, uint64_t ptr)
{
    size_t n = a->n;
    if (!n)
        return -1;
    const struct shp_alloc *base = a->v;
    while (n > 1) {
        size_t half = n / 2;
        base = base[half].ptr <= ptr ? base + half : base;
        n -= half;
    }
    return (long)(base - a->v) - (base->ptr > ptr);
}

/* The live block containing address ptr, or NULL. */
static inline const struct shp_alloc *shp_allocs_find(const struct shp_allocs *a, uint64_t ptr)
{
    long i = shp_allocs_below(a, ptr);
    if (i < 0 || ptr >= a->v[i].ptr + a->v[i].size)
        return NULL;
    return &a->v[i];
}
/* The live block starting exactly at ptr, or NULL. */
const struct shp_alloc *shp_allocs_at(const struct shp_allocs *a, uint64_t ptr);
/* Forget every block (keeps the memory for reuse). */
void shp_allocs_clear(struct shp_allocs *a);
void shp_allocs_free(struct shp_allocs *a);

#endif
