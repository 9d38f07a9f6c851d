/* shapetrace tools: live allocations of one process (see allocs.h). */
#include "tools/lib/allocs.h"

#include <stdlib.h>
#include <string.h>

#include "common/ops.h"

static void add(struct shp_allocs *a, uint64_t ptr, uint64_t size)
{
    long i = shp_allocs_below(a, ptr);
    if (i >= 0 && a->v[i].ptr == ptr) {
        a->v[i].size = size; /* the same address handed out again */
        return;
    }
    if (!a->cap) {
        a->v = a->inl;
        a->cap = sizeof(a->inl) / sizeof(a->inl[0]);
    }
    if (a->n == a->cap) {
        size_t ncap = a->cap * 2 < 64 ? 64 : a->cap * 2;
        struct shp_alloc *n = malloc(ncap * sizeof(*n));
        if (!n)
            return;
        memcpy(n, a->v, a->n * sizeof(*n));
        if (a->v != a->inl)
            free(a->v);
        a->v = n;
        a->cap = ncap;
    }
    size_t at = (size_t)(i + 1);
    memmove(a->v + at + 1, a->v + at, (a->n - at) * sizeof(*a->v));
    a->v[at] = (struct shp_alloc){ptr, size};
    a->n++;
}

static void remove_at(struct shp_allocs *a, uint64_t ptr)
{
    long i = shp_allocs_below(a, ptr);
    if (i < 0 || a->v[i].ptr != ptr)
        return;
    memmove(a->v + i, a->v + i + 1, (a->n - (size_t)i - 1) * sizeof(*a->v));
    a->n--;
}

void shp_allocs_event(struct shp_allocs *a, const struct shp_event *e)
{
    if (e->type != SHP_REC_ALLOC)
        return;
    if (e->cls == SHP_CLS_ALLOC && e->result == 0 && e->ptr != SHP_NONE && e->ptr)
        add(a, e->ptr, e->size);
    else if (e->cls == SHP_CLS_FREE && e->ptr != SHP_NONE)
        remove_at(a, e->ptr);
}

const struct shp_alloc *shp_allocs_at(const struct shp_allocs *a, uint64_t ptr)
{
    long i = shp_allocs_below(a, ptr);
    return i >= 0 && a->v[i].ptr == ptr ? &a->v[i] : NULL;
}

void shp_allocs_clear(struct shp_allocs *a)
{
    a->n = 0;
}

void shp_allocs_free(struct shp_allocs *a)
{
    if (a->v != a->inl)
        free(a->v);
    memset(a, 0, sizeof(*a));
}
