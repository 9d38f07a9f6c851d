/* shapetrace tools: a map from non-overlapping byte ranges to 32-bit values, in chunked sorted
 * arrays, so that it stays fast with very many live ranges (the lineage pass's memory map). */
#ifndef SHAPETRACE_RANGES_H
#define SHAPETRACE_RANGES_H

#include <stddef.h>
#include <stdint.h>

/* [start, end) holds value (never 0). */
struct shp_range {
    uint64_t start, end;
    uint32_t value;
};

/* Up to this many ranges a chunk, sorted. In the header for shp_ranges_exact, inline. 16: a
 * buffer written again shorter or longer from its start (half of a serving loop's writes) moves
 * the entries after it in its chunk, and the places noted in the hash of starts go stale behind
 * it; 16 cost 34 fewer instructions an event than 64 on 8 x 100k synthetic events (32: 23). */
#define SHP_RCHUNK 16
struct shp_rchunk {
    size_t n;
    struct shp_range v[SHP_RCHUNK];
    struct shp_rchunk *next_spare;
};

struct shp_ranges {
    struct shp_rchunk **c; /* in address order; none empty */
    uint64_t *first;       /* c[i]'s first start, searched before any chunk is touched */
    size_t n, cap;
    struct shp_rchunk *spare; /* emptied chunks, kept for reuse */
    /* The place the last search found, while nothing changed since (version): the lineage pass
     * visits what a call reads, then assigns what it writes, from the same start for an
     * in-place collective. */
    uint64_t version;
    struct {
        uint64_t s, version;
        size_t ci, j;
    } hint;
    /* Where ranges that searches found or assignments made begin, by a hash of the start: a
     * buffer is read and written again from its start (a caching allocator's block, a step's
     * activations), and a place that still holds a range of that start is the place a search
     * would find. A change moves the entries after it in its chunk by one place: a place that
     * no longer holds its start is looked for one place either side, then in its chunk. 1024:
     * a serving loop's buffers of a few hundred starts stay in it (64 lost a third of them to
     * collisions; 256 cost 11 more instructions an event than 1024 on 8 x 100k synthetic
     * events). */
    struct {
        uint64_t s;
        uint32_t ci, j;
    } starts[1024];
};

/* The slot of start s in m->starts. */
static inline size_t shp_ranges_slot(uint64_t s)
{
    return (size_t)((s * 0x9e3779b97f4a7c15ull) >> 54);
}

/* The range that begins at s, where the hash of starts finds it; NULL when it does not (when no
 * range begins there, and sometimes when one does). Valid until m next changes. */
static inline struct shp_range *shp_ranges_starting(struct shp_ranges *m, uint64_t s)
{
    size_t k = shp_ranges_slot(s);
    uint32_t ci = m->starts[k].ci, j = m->starts[k].j;
    if (m->starts[k].s != s || ci >= m->n)
        return NULL;
    struct shp_rchunk *c = m->c[ci];
    /* Its place, or one either side (an insertion or a removal before it in its chunk). */
    for (uint32_t d = 0; d < 3; d++) {
        uint32_t at = d == 0 ? j : d == 1 ? j + 1 : j - 1;
        if (at < c->n && c->v[at].start == s) {
            m->starts[k].j = at;
            return &c->v[at];
        }
    }
    return NULL;
}

/* The range exactly [s, e), where the hash of starts finds it; NULL when it does not (when no
 * such range is there, and sometimes when one is: the caller then takes its general path, which
 * finds it). Its value may be changed through the pointer, to another nonzero value, until m
 * next changes (shp_ranges_assign, shp_ranges_clear): the map counts no values, so the caller
 * does what ref would have been told. This is the lineage pass's common case, a buffer written
 * or read again with the same bounds, without a search. */
static inline struct shp_range *shp_ranges_exact(struct shp_ranges *m, uint64_t s, uint64_t e)
{
    struct shp_range *r = shp_ranges_starting(m, s);
    return r && r->end == e ? r : NULL;
}

/* Told each time a range holding value appears (delta +1) or goes (-1). Within one call, the
 * +1 of a piece that survives a trim comes before the -1 of what it was cut from, so a count
 * kept from these never passes through 0 while the value still has ranges. */
typedef void (*shp_ranges_ref_fn)(void *arg, uint32_t value, int delta);

/* Make [s, e) hold value, trimming or removing what it overlaps; value 0 only clears [s, e).
 * An exact range [s, e) already there changes value in place. Returns 0, or -1 when out of
 * memory: then a new piece may be missing (what it overlapped is still cleared, and ref is
 * told exactly what happened). s >= e changes nothing. */
int shp_ranges_assign(struct shp_ranges *m, uint64_t s, uint64_t e, uint32_t value,
                      shp_ranges_ref_fn ref, void *arg);
/* fn for each range overlapping [s, e), in address order; fn must not change m (the visit
 * itself only notes where it looked). */
void shp_ranges_visit(struct shp_ranges *m, uint64_t s, uint64_t e,
                      void (*fn)(void *arg, const struct shp_range *r), void *arg);
/* Remove every range, in address order, telling ref (NULL: nobody); keeps the memory. */
void shp_ranges_clear(struct shp_ranges *m, shp_ranges_ref_fn ref, void *arg);
/* How many ranges m holds. */
size_t shp_ranges_count(const struct shp_ranges *m);
/* The i-th range in address order (i < shp_ranges_count), for tests and debugging. */
const struct shp_range *shp_ranges_nth(const struct shp_ranges *m, size_t i);
void shp_ranges_free(struct shp_ranges *m);

#endif
