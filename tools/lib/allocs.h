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
/* The live block containing address ptr, or NULL. */
const struct shp_alloc *shp_allocs_find(const struct shp_allocs *a, uint64_t ptr);
/* The live block starting exactly at ptr, or NULL. */
const struct shp_alloc *shp_allocs_at(const struct shp_allocs *a, uint64_t ptr);
/* Forget every block (keeps the memory for reuse). */
void shp_allocs_clear(struct shp_allocs *a);
void shp_allocs_free(struct shp_allocs *a);

#endif
