/* shapetrace tools: the range map (see ranges.h), in chunks of up to CHUNK sorted entries: two
 * binary searches find a place and a change moves one chunk's entries at most, where a treap's
 * pointer chasing and rebalancing were half of the lineage pass's time. */
#include "tools/lib/ranges.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK SHP_RCHUNK

/* A place between entries: entry j of chunk ci (j may be c[ci]->n: after its last). */
struct pos {
    size_t ci, j;
};

static struct shp_rchunk *new_chunk(struct shp_ranges *m)
{
    struct shp_rchunk *c = m->spare;
    if (c)
        m->spare = c->next_spare;
    else if (!(c = malloc(sizeof(*c))))
        return NULL;
    c->n = 0;
    return c;
}

static void drop_chunk(struct shp_ranges *m, size_t ci)
{
    struct shp_rchunk *c = m->c[ci];
    c->next_spare = m->spare;
    m->spare = c;
    memmove(m->c + ci, m->c + ci + 1, (m->n - ci - 1) * sizeof(*m->c));
    memmove(m->first + ci, m->first + ci + 1, (m->n - ci - 1) * sizeof(*m->first));
    m->n--;
}

/* Room for c at ci (chunks from ci on move up one). */
static bool add_chunk(struct shp_ranges *m, size_t ci, struct shp_rchunk *c)
{
    if (m->n == m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 16;
        struct shp_rchunk **nc = realloc(m->c, ncap * sizeof(*nc));
        if (!nc)
            return false;
        m->c = nc;
        uint64_t *nf = realloc(m->first, ncap * sizeof(*nf));
        if (!nf)
            return false;
        m->first = nf;
        m->cap = ncap;
    }
    memmove(m->c + ci + 1, m->c + ci, (m->n - ci) * sizeof(*m->c));
    memmove(m->first + ci + 1, m->first + ci, (m->n - ci) * sizeof(*m->first));
    m->c[ci] = c;
    m->first[ci] = c->n ? c->v[0].start : 0;
    m->n++;
    return true;
}

/* How many of the n sorted values a[0], a[stride], ... are below s (below or equal with
 * `equal`). Branch-free: the comparisons of a binary search over addresses that the pattern
 * of writes makes unpredictable cost a mispredicted branch each, and were most of the time of
 * the lineage pass's lookups. */
static inline size_t count_below(const uint64_t *a, size_t stride, size_t n, uint64_t s, bool equal)
{
    if (!n)
        return 0;
    const uint64_t *base = a;
    while (n > 1) {
        size_t half = n / 2;
        const uint64_t *mid = base + half * stride;
        base = (equal ? *mid <= s : *mid < s) ? mid : base;
        n -= half;
    }
    return (size_t)(base - a) / stride + (equal ? *base <= s : *base < s);
}

_Static_assert(sizeof(((struct shp_ranges *)0)->starts) /
                       sizeof(((struct shp_ranges *)0)->starts[0]) ==
                   1024,
               "shp_ranges_slot takes the hash's top 8 bits");

/* Note that a range starting at s is at p. */
static inline void note_start(struct shp_ranges *m, uint64_t s, struct pos p)
{
    size_t k = shp_ranges_slot(s);
    m->starts[k].s = s;
    m->starts[k].ci = (uint32_t)p.ci;
    m->starts[k].j = (uint32_t)p.j;
}

/* The place of the first range starting at or after s. */
static struct pos find(struct shp_ranges *m, uint64_t s)
{
    if (m->hint.s == s && m->hint.version == m->version && m->version)
        return (struct pos){m->hint.ci, m->hint.j};
    /* A range that begins at s is the first at or after it: where one was found, if it is
     * still there. */
    size_t k = shp_ranges_slot(s);
    struct pos p = {m->starts[k].ci, m->starts[k].j};
    if (m->starts[k].s == s && p.ci < m->n) {
        const struct shp_rchunk *c = m->c[p.ci];
        if (p.j < c->n && c->v[p.j].start == s)
            goto found;
        /* Moved by changes before it in its chunk (fragments of other buffers that a shorter
         * write left, a third of the look-ups of a serving loop's): still in that chunk while
         * the chunk spans s, which one search of the chunk finds. */
        if (c->v[0].start <= s && s <= c->v[c->n - 1].start) {
            p.j = count_below(&c->v[0].start, sizeof(c->v[0]) / sizeof(uint64_t), c->n, s, false);
            if (c->v[p.j].start == s)
                note_start(m, s, p);
            goto found;
        }
    }
    size_t lo = count_below(m->first, 1, m->n, s, true);
    p = (struct pos){lo ? lo - 1 : 0, 0};
    if (!m->n)
        return p;
    const struct shp_rchunk *c = m->c[p.ci];
    _Static_assert(sizeof(c->v[0]) % sizeof(uint64_t) == 0, "ranges are whole words");
    p.j = count_below(&c->v[0].start, sizeof(c->v[0]) / sizeof(uint64_t), c->n, s, false);
    if (p.j < c->n && c->v[p.j].start == s)
        note_start(m, s, p);
found:
    m->hint.s = s;
    m->hint.version = m->version;
    m->hint.ci = p.ci;
    m->hint.j = p.j;
    return p;
}

/* The range at p, or NULL past the last. */
static struct shp_range *at(const struct shp_ranges *m, struct pos p)
{
    if (p.ci >= m->n)
        return NULL;
    if (p.j < m->c[p.ci]->n)
        return &m->c[p.ci]->v[p.j];
    return p.ci + 1 < m->n ? &m->c[p.ci + 1]->v[0] : NULL;
}

/* The range just before p, or NULL. */
static struct shp_range *before(const struct shp_ranges *m, struct pos p)
{
    if (p.ci >= m->n)
        return NULL;
    if (p.j > 0)
        return &m->c[p.ci]->v[p.j - 1];
    return p.ci > 0 ? &m->c[p.ci - 1]->v[m->c[p.ci - 1]->n - 1] : NULL;
}

/* Insert r at *pp, and set *pp to where it went (a full chunk is split); false when out of
 * memory (m unchanged). */
static bool insert(struct shp_ranges *m, struct pos *pp, const struct shp_range *r)
{
    struct pos p = *pp;
    if (!m->n) {
        struct shp_rchunk *c = new_chunk(m);
        if (!c || !add_chunk(m, 0, c)) {
            if (c) {
                c->next_spare = m->spare;
                m->spare = c;
            }
            return false;
        }
        p = (struct pos){0, 0};
    }
    struct shp_rchunk *c = m->c[p.ci];
    if (c->n == CHUNK) {
        struct shp_rchunk *h = new_chunk(m);
        if (!h)
            return false;
        h->n = CHUNK / 2;
        memcpy(h->v, c->v + CHUNK / 2, (CHUNK / 2) * sizeof(*h->v));
        if (!add_chunk(m, p.ci + 1, h)) {
            h->next_spare = m->spare;
            m->spare = h;
            return false;
        }
        c->n = CHUNK / 2;
        if (p.j > CHUNK / 2) {
            p.ci++;
            p.j -= CHUNK / 2;
            c = h;
        }
    }
    memmove(c->v + p.j + 1, c->v + p.j, (c->n - p.j) * sizeof(*c->v));
    c->v[p.j] = *r;
    c->n++;
    m->first[p.ci] = c->v[0].start;
    *pp = p;
    return true;
}

/* [s, e) written with value over the range at chunk ci, place j, which begins at s: cut or grown
 * inside its chunk, without a search. That is the lineage pass's other common case, about half
 * of a serving loop's writes: a step's buffer written again from its start with another token
 * count. Returns false, m unchanged, where the general path must do it: a full chunk for a
 * shorter range, or a longer one that reaches the next chunk. */
static bool assign_from_start(struct shp_ranges *m, size_t ci, size_t j, uint64_t s, uint64_t e,
                              uint32_t value, shp_ranges_ref_fn ref, void *arg)
{
    struct shp_rchunk *c = m->c[ci];
    struct shp_range *r = &c->v[j];
    if (e < r->end) {
        /* Shorter: the old range keeps its tail, after the new one. */
        if (c->n == CHUNK)
            return false;
        memmove(c->v + j + 1, c->v + j, (c->n - j) * sizeof(*c->v));
        c->v[j + 1].start = e;
        c->v[j] = (struct shp_range){s, e, value};
        c->n++;
        note_start(m, s, (struct pos){ci, j});
        ref(arg, value, 1);
        return true;
    }
    /* Longer or the same: the ranges that end by e go, the next one loses its head below e.
     * The ranges are sorted and do not overlap, so the first that ends past e is the only one
     * that can be cut. */
    size_t k = j + 1;
    while (k < c->n && c->v[k].end <= e)
        k++;
    if (k == c->n && ci + 1 < m->n && m->first[ci + 1] < e)
        return false;
    /* In address order, as the general path tells them. */
    for (size_t i = j; i < k; i++)
        ref(arg, c->v[i].value, -1);
    if (k < c->n && c->v[k].start < e)
        c->v[k].start = e;
    *r = (struct shp_range){s, e, value};
    if (k > j + 1) {
        memmove(c->v + j + 1, c->v + k, (c->n - k) * sizeof(*c->v));
        c->n -= k - j - 1;
    }
    note_start(m, s, (struct pos){ci, j});
    ref(arg, value, 1);
    return true;
}

static int assign(struct shp_ranges *m, uint64_t s, uint64_t e, uint32_t value,
                  shp_ranges_ref_fn ref, void *arg)
{
    if (s >= e)
        return 0;
    struct pos p = find(m, s);
    m->version++; /* what follows changes m */
    struct shp_range *r = at(m, p);
    if (r && r->start == s && value) {
        /* The common case: a buffer written again whole (a caching allocator's block, an
         * in-place collective) replaces one range exactly. */
        if (r->end == e) {
            uint32_t old = r->value;
            r->value = value;
            ref(arg, value, 1);
            ref(arg, old, -1);
            return 0;
        }
        struct pos q = p.j < m->c[p.ci]->n ? p : (struct pos){p.ci + 1, 0};
        if (assign_from_start(m, q.ci, q.j, s, e, value, ref, arg))
            return 0;
    }
    struct shp_range *b = before(m, p);
    if (b && b->end > s) {
        if (b->end > e) {
            /* [s, e) lies inside one range: keep its head and its tail, nothing else moves. */
            struct shp_range tail = {e, b->end, b->value};
            uint64_t old_end = b->end;
            b->end = s;
            if (!insert(m, &p, &tail)) {
                b->end = old_end;
                return -1;
            }
            ref(arg, tail.value, 1);
            if (value) {
                struct shp_range n = {s, e, value};
                /* Before the tail, which is where p is now. */
                if (!insert(m, &p, &n))
                    return -1;
                note_start(m, s, p);
                ref(arg, value, 1);
            }
            return 0;
        }
        b->end = s;
    }
    /* The ranges starting in [s, e) go, but for the tail of the last one past e. The new range
     * takes the place of the first that goes: one move of the entries after it, not two (a
     * buffer written again longer than before, from the same start). */
    size_t ci = p.ci, j = p.j;
    bool more = true, placed = false;
    struct pos np = p;
    while (more && ci < m->n) {
        struct shp_rchunk *c = m->c[ci];
        size_t k = j;
        while (k < c->n && c->v[k].start < e) {
            if (c->v[k].end > e) {
                c->v[k].start = e;
                break;
            }
            ref(arg, c->v[k].value, -1);
            k++;
        }
        more = k == c->n;
        size_t kept = j;
        if (value && !placed && k > j) {
            c->v[j] = (struct shp_range){s, e, value};
            np = (struct pos){ci, j};
            placed = true;
            kept = j + 1;
        }
        memmove(c->v + kept, c->v + k, (c->n - k) * sizeof(*c->v));
        c->n -= k - kept;
        if (!c->n) {
            drop_chunk(m, ci);
        } else {
            m->first[ci] = c->v[0].start;
            ci++;
        }
        j = 0;
    }
    if (!value)
        return 0;
    if (!placed) {
        /* Where the removed ranges began is where the new one goes: a chunk that went had them
         * from its head (p.j 0), so p is the head of the next, or past the last chunk. */
        if (p.ci >= m->n && m->n)
            p = (struct pos){m->n - 1, m->c[m->n - 1]->n};
        struct shp_range n = {s, e, value};
        if (!insert(m, &p, &n))
            return -1;
        np = p;
    }
    note_start(m, s, np);
    ref(arg, value, 1);
    return 0;
}

int shp_ranges_assign(struct shp_ranges *m, uint64_t s, uint64_t e, uint32_t value,
                      shp_ranges_ref_fn ref, void *arg)
{
    int rc = assign(m, s, e, value, ref, arg);
    /* The places found inside are the changed map's no more. */
    m->version++;
    return rc;
}

void shp_ranges_visit(struct shp_ranges *m, uint64_t s, uint64_t e,
                      void (*fn)(void *arg, const struct shp_range *r), void *arg)
{
    if (s >= e || !m->n)
        return;
    struct pos p = find(m, s);
    const struct shp_range *b = before(m, p);
    if (b && b->end > s)
        fn(arg, b);
    for (size_t ci = p.ci, j = p.j; ci < m->n; ci++, j = 0) {
        const struct shp_rchunk *c = m->c[ci];
        for (; j < c->n; j++) {
            if (c->v[j].start >= e)
                return;
            fn(arg, &c->v[j]);
        }
    }
}

void shp_ranges_clear(struct shp_ranges *m, shp_ranges_ref_fn ref, void *arg)
{
    m->version++;
    for (size_t ci = 0; ci < m->n; ci++) {
        struct shp_rchunk *c = m->c[ci];
        for (size_t j = 0; ref && j < c->n; j++)
            ref(arg, c->v[j].value, -1);
        c->next_spare = m->spare;
        m->spare = c;
    }
    m->n = 0;
}

size_t shp_ranges_count(const struct shp_ranges *m)
{
    size_t n = 0;
    for (size_t ci = 0; ci < m->n; ci++)
        n += m->c[ci]->n;
    return n;
}

const struct shp_range *shp_ranges_nth(const struct shp_ranges *m, size_t i)
{
    for (size_t ci = 0; ci < m->n; ci++) {
        if (i < m->c[ci]->n)
            return &m->c[ci]->v[i];
        i -= m->c[ci]->n;
    }
    return NULL;
}

void shp_ranges_free(struct shp_ranges *m)
{
    shp_ranges_clear(m, NULL, NULL);
    while (m->spare) {
        struct shp_rchunk *c = m->spare;
        m->spare = c->next_spare;
        free(c);
    }
    free(m->c);
    free(m->first);
    memset(m, 0, sizeof(*m));
}
