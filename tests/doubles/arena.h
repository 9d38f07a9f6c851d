/* shapetrace test doubles: the "memory" that the cudart and the driver doubles hand out: an
 * arena per kind of memory at a fixed address, with live blocks to check copies against. Included
 * by each double (static functions: each library keeps its own arenas). Callers hold their lock. */
#ifndef SHP_DOUBLES_ARENA_H
#define SHP_DOUBLES_ARENA_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GIB ((size_t)1 << 30)
#define ALLOC_ALIGN 256 /* what cudaMalloc guarantees */
#define COMMIT_CHUNK ((size_t)64 << 20)
#define RELEASE_MIN ((size_t)1 << 20) /* free spans at least this big give their pages back */

/* A span of an arena: handed out (used) or free. The spans of an arena are kept sorted and tile
 * [0, top) exactly, so a lookup is a binary search and a free merges with its neighbours. */
struct block {
    size_t off;
    size_t span;      /* bytes the allocator set aside: the request rounded up to ALLOC_ALIGN */
    size_t requested; /* bytes asked for: copies are checked against this, not the span */
    int device;
    bool used;
};

/* One reserved address range. Reserved PROT_NONE and made writable only as far as it has been
 * used, so a large reservation costs nothing under strict overcommit and a stray access beyond the
 * high-water mark faults instead of reading zeroes. The fixed hints make device pointers look the
 * same in every run and every process, which keeps golden outputs stable. */
struct arena {
    uintptr_t hint;
    size_t want;
    char *base;
    size_t cap;
    size_t top;
    size_t committed;
    struct block *blocks;
    size_t nblocks;
    size_t blocks_cap;
};

/* ---- arenas (caller holds lock) -------------------------------------------------------------- */

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

static int reserve(struct arena *a)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    size_t len;

    /* A ulimit -v can refuse the full reservation; a smaller arena still serves most tests. */
    for (len = a->want; len >= GIB / 4; len /= 2) {
        void *p = mmap((void *)a->hint, len, PROT_NONE, flags, -1, 0);

        if (p != MAP_FAILED) {
            a->base = p;
            a->cap = len;
            return 0;
        }
    }
    return -ENOMEM;
}

static bool in_arena(const struct arena *a, uintptr_t p)
{
    return a->base && p >= (uintptr_t)a->base && p - (uintptr_t)a->base < a->cap;
}

/* Index of the block that holds offset off; off must be below top. */
static size_t find_block(const struct arena *a, size_t off)
{
    size_t lo = 0, hi = a->nblocks;

    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;

        if (a->blocks[mid].off <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static const struct block *find_live(const struct arena *a, const void *p)
{
    const struct block *b;
    size_t off;

    if (!in_arena(a, (uintptr_t)p))
        return NULL;
    off = (uintptr_t)p - (uintptr_t)a->base;
    if (off >= a->top)
        return NULL;
    b = &a->blocks[find_block(a, off)];
    if (!b->used || off - b->off >= b->requested)
        return NULL;
    return b;
}

static int insert_block(struct arena *a, size_t i, struct block b)
{
    if (a->nblocks == a->blocks_cap) {
        size_t cap = a->blocks_cap ? 2 * a->blocks_cap : 64;
        struct block *nb = realloc(a->blocks, cap * sizeof(*nb));

        if (!nb)
            return -ENOMEM;
        a->blocks = nb;
        a->blocks_cap = cap;
    }
    memmove(&a->blocks[i + 1], &a->blocks[i], (a->nblocks - i) * sizeof(*a->blocks));
    a->blocks[i] = b;
    a->nblocks++;
    return 0;
}

static void remove_block(struct arena *a, size_t i)
{
    memmove(&a->blocks[i], &a->blocks[i + 1], (a->nblocks - i - 1) * sizeof(*a->blocks));
    a->nblocks--;
}

static int commit(struct arena *a, size_t end)
{
    size_t to;

    if (end <= a->committed)
        return 0;
    to = round_up(end, COMMIT_CHUNK);
    if (to > a->cap)
        to = a->cap;
    if (mprotect(a->base + a->committed, to - a->committed, PROT_READ | PROT_WRITE))
        return -errno;
    a->committed = to;
    return 0;
}

/* First fit over the free blocks, else a new block at the top. */
static int arena_alloc(struct arena *a, size_t size, int device, void **out)
{
    size_t need, i;
    int err;

    if (size > SIZE_MAX - ALLOC_ALIGN)
        return -ENOMEM;
    need = round_up(size, ALLOC_ALIGN);
    if (!a->base && (err = reserve(a)) < 0)
        return err;
    for (i = 0; i < a->nblocks; i++) {
        struct block *b = &a->blocks[i];

        if (b->used || b->span < need)
            continue;
        if (b->span > need) {
            struct block rest = {.off = b->off + need, .span = b->span - need, .device = -1};

            if ((err = insert_block(a, i + 1, rest)) < 0)
                return err;
            b = &a->blocks[i];
        }
        b->span = need;
        b->requested = size;
        b->device = device;
        b->used = true;
        *out = a->base + b->off;
        return 0;
    }
    if (need > a->cap - a->top)
        return -ENOMEM;
    if ((err = commit(a, a->top + need)) < 0)
        return err;
    err = insert_block(
        a, a->nblocks,
        (struct block){
            .off = a->top, .span = need, .requested = size, .device = device, .used = true});
    if (err < 0)
        return err;
    *out = a->base + a->top;
    a->top += need;
    return 0;
}

/* Hands back the pages wholly inside a free span, so long tests do not grow without bound. */
static void release_pages(struct arena *a, size_t off, size_t span)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t start = round_up(off, page);
    size_t end = (off + span) / page * page;

    if (end > start && end - start >= RELEASE_MIN)
        madvise(a->base + start, end - start, MADV_DONTNEED);
}

static int arena_free(struct arena *a, const void *p)
{
    size_t off, i;
    struct block *b;

    if (!in_arena(a, (uintptr_t)p))
        return -EINVAL;
    off = (uintptr_t)p - (uintptr_t)a->base;
    if (off >= a->top)
        return -EINVAL;
    i = find_block(a, off);
    b = &a->blocks[i];
    if (b->off != off || !b->used)
        return -EINVAL;
    b->used = false;
    b->device = -1;
    if (i + 1 < a->nblocks && !a->blocks[i + 1].used) {
        b->span += a->blocks[i + 1].span;
        remove_block(a, i + 1);
    }
    if (i > 0 && !a->blocks[i - 1].used) {
        a->blocks[i - 1].span += a->blocks[i].span;
        remove_block(a, i);
        i--;
    }
    b = &a->blocks[i];
    release_pages(a, b->off, b->span);
    if (i == a->nblocks - 1) {
        a->top = b->off;
        remove_block(a, i);
    }
    return 0;
}

#endif
