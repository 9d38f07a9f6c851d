/* Unit tests of the range map (tools/lib/ranges.c), the lineage pass's memory map: each case and
 * then random assignments, clears and visits checked against a brute-force model (a plain list
 * of ranges trimmed by hand), with the per-value counts ref reports. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "tools/lib/ranges.h"

#define NVALUES 64

/* The counts ref keeps, as the lineage pass keeps them, and whether one fell to 0 and rose
 * again in one call (a region retired while it still had bytes). The value being written is
 * left out of that check: the lineage pass holds it for the call. */
struct counts {
    long n[NVALUES + 1];
    uint32_t writing;
    int zero_then_up, negative, bad_value;
    unsigned char hit_zero[NVALUES + 1];
};

static void ref(void *arg, uint32_t v, int delta)
{
    struct counts *c = arg;
    if (v == 0 || v > NVALUES) {
        c->bad_value++;
        return;
    }
    if (delta > 0 && c->hit_zero[v] && v != c->writing)
        c->zero_then_up++;
    c->n[v] += delta;
    if (c->n[v] < 0)
        c->negative++;
    if (c->n[v] == 0)
        c->hit_zero[v] = 1;
}

/* ---- the model: ranges in an array, sorted, rebuilt by hand ---- */

struct model {
    struct shp_range v[1 << 16];
    size_t n;
};

static void model_assign(struct model *m, uint64_t s, uint64_t e, uint32_t value)
{
    static struct shp_range out[(1 << 16) + 2];
    size_t k = 0;
    bool placed = false;
    for (size_t i = 0; i < m->n; i++) {
        struct shp_range r = m->v[i];
        if (!placed && value && r.start >= s) {
            out[k++] = (struct shp_range){s, e, value};
            placed = true;
        }
        if (r.end <= s || r.start >= e) {
            out[k++] = r;
            continue;
        }
        if (r.start < s)
            out[k++] = (struct shp_range){r.start, s, r.value};
        if (r.start < s && !placed && value) {
            out[k++] = (struct shp_range){s, e, value};
            placed = true;
        }
        if (r.end > e)
            out[k++] = (struct shp_range){e, r.end, r.value};
    }
    if (!placed && value)
        out[k++] = (struct shp_range){s, e, value};
    memcpy(m->v, out, k * sizeof(*out));
    m->n = k;
}

static bool same(const struct shp_ranges *r, const struct model *m)
{
    if (shp_ranges_count(r) != m->n)
        return false;
    for (size_t i = 0; i < m->n; i++) {
        const struct shp_range *x = shp_ranges_nth(r, i);
        if (!x || x->start != m->v[i].start || x->end != m->v[i].end || x->value != m->v[i].value)
            return false;
    }
    return true;
}

static bool counts_match(const struct counts *c, const struct model *m)
{
    long want[NVALUES + 1] = {0};
    for (size_t i = 0; i < m->n; i++)
        want[m->v[i].value]++;
    for (int v = 1; v <= NVALUES; v++)
        if (want[v] != c->n[v])
            return false;
    return !c->negative && !c->bad_value;
}

struct seen {
    struct shp_range v[1 << 16];
    size_t n;
};

static void collect(void *arg, const struct shp_range *r)
{
    struct seen *s = arg;
    s->v[s->n++] = *r;
}

static bool visit_matches(struct shp_ranges *r, const struct model *m, uint64_t s, uint64_t e)
{
    static struct seen got;
    got.n = 0;
    shp_ranges_visit(r, s, e, collect, &got);
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (m->v[i].end <= s || m->v[i].start >= e)
            continue;
        if (k >= got.n || got.v[k].start != m->v[i].start || got.v[k].end != m->v[i].end ||
            got.v[k].value != m->v[i].value)
            return false;
        k++;
    }
    return k == got.n;
}

static struct shp_range nth(const struct shp_ranges *r, size_t i)
{
    const struct shp_range *x = shp_ranges_nth(r, i);
    return x ? *x : (struct shp_range){0, 0, 0};
}

static void test_cases(void)
{
    test_group("cases");
    struct shp_ranges r = {0};
    struct counts c = {0};
    shp_ranges_assign(&r, 100, 200, 1, ref, &c);
    test_cond("one range", shp_ranges_count(&r) == 1 && nth(&r, 0).end == 200 && c.n[1] == 1);
    shp_ranges_assign(&r, 100, 200, 2, ref, &c);
    test_cond("the same range again changes its value in place",
              shp_ranges_count(&r) == 1 && nth(&r, 0).value == 2 && c.n[1] == 0 && c.n[2] == 1);
    shp_ranges_assign(&r, 120, 150, 3, ref, &c);
    test_cond("a write inside a range splits it in three",
              shp_ranges_count(&r) == 3 && nth(&r, 0).end == 120 && nth(&r, 1).value == 3 &&
                  nth(&r, 2).start == 150 && nth(&r, 2).value == 2 && c.n[2] == 2);
    test_cond("and the count never fell to 0 on the way", !c.zero_then_up && !c.hit_zero[2]);
    shp_ranges_assign(&r, 110, 160, 0, ref, &c);
    test_cond("clearing across three ranges trims two and removes one",
              shp_ranges_count(&r) == 2 && nth(&r, 0).end == 110 && nth(&r, 1).start == 160 &&
                  c.n[3] == 0 && c.n[2] == 2);
    shp_ranges_assign(&r, 50, 60, 0, ref, &c);
    shp_ranges_assign(&r, 300, 300, 4, ref, &c);
    test_cond("clearing nothing and an empty write change nothing",
              shp_ranges_count(&r) == 2 && c.n[4] == 0);
    shp_ranges_assign(&r, 0, 1000, 5, ref, &c);
    test_cond("a write over everything leaves one range",
              shp_ranges_count(&r) == 1 && nth(&r, 0).start == 0 && c.n[2] == 0 && c.n[5] == 1);
    shp_ranges_clear(&r, ref, &c);
    test_cond("clear empties the map and tells ref", shp_ranges_count(&r) == 0 && c.n[5] == 0);
    /* A chunk and one more range: two chunks, the second from the middle one's on (h: half a
     * chunk); then a write from the second's first start past everything empties it, and the
     * new range goes after the first. */
    const uint64_t h = SHP_RCHUNK / 2;
    for (uint64_t i = 0; i < SHP_RCHUNK + 1; i++)
        shp_ranges_assign(&r, 10 * i, 10 * i + 5, 6, ref, &c);
    shp_ranges_assign(&r, 10 * h, 10000, 7, ref, &c);
    test_cond("a write that empties the last chunk from its head lands after the first",
              shp_ranges_count(&r) == h + 1 && nth(&r, h - 1).start == 10 * (h - 1) &&
                  nth(&r, h).start == 10 * h && nth(&r, h).end == 10000 && c.n[6] == h &&
                  c.n[7] == 1);
    shp_ranges_assign(&r, 0, 5, 0, ref, &c);
    shp_ranges_assign(&r, 0, 10 * h - 5, 8, ref, &c);
    test_cond("and one that empties the first chunk from its head lands before the second",
              shp_ranges_count(&r) == 2 && nth(&r, 0).start == 0 && nth(&r, 0).value == 8 &&
                  nth(&r, 1).start == 10 * h && c.n[6] == 0);
    shp_ranges_clear(&r, ref, &c);
    /* A serving loop's buffers: 128 of them, 8 MiB apart, written again and again with the
     * same bounds, and each step read by a copy after it; once each has been written again
     * (the chunks split as the first step added them, moving half of their entries away from
     * the places noted), an exact look-up finds most of them (the rest collide in the hash)
     * and never a wrong one. */
    int hits = 0, wrong = 0;
    for (int step = 0; step < 4; step++)
        for (uint64_t i = 0; i < 128; i++) {
            uint64_t s = 0x7f0000000000ull + (i << 23), e = s + 4096 + i;
            struct shp_range *x = shp_ranges_exact(&r, s, e);
            if (step > 0) {
                hits += step > 1 && x != NULL;
                wrong += x && (x->start != s || x->end != e || x->value != 9);
            }
            shp_ranges_assign(&r, s, e, 9, ref, &c);
            wrong += shp_ranges_exact(&r, s, e + 1) != NULL;
        }
    test_cond("exact look-ups find a loop's buffers written again", hits > 2 * 128 * 3 / 4);
    test_cond("and only the exact range", wrong == 0);
    shp_ranges_clear(&r, ref, &c);
    shp_ranges_free(&r);
}

/* Many small ranges: the map holds thousands, across hundreds of chunks, while it is written,
 * cleared and read at random. */
static void test_random(unsigned seed, uint64_t space, uint64_t maxlen, int ops, size_t live)
{
    static struct model m;
    static struct counts c;
    struct shp_ranges r = {0};
    m.n = 0;
    memset(&c, 0, sizeof(c));
    srand(seed);
    int bad_shape = 0, bad_counts = 0, bad_visit = 0, zero_up = 0, bad_exact = 0;
    int exact_tries = 0, exact_hits = 0;
    size_t most = 0;
    uint64_t last_visit = 0; /* where the last visit began */
    for (int i = 0; i < ops; i++) {
        uint64_t s = (uint64_t)rand() % space, len = 1 + (uint64_t)rand() % maxlen;
        int what = rand() % 16;
        uint32_t v = 1 + (uint32_t)(rand() % NVALUES);
        memset(c.hit_zero, 0, sizeof(c.hit_zero));
        c.writing = v;
        if (what == 0) {
            c.writing = 0;
            shp_ranges_assign(&r, s, s + len * 20, 0, ref, &c); /* a free */
            model_assign(&m, s, s + len * 20, 0);
        } else if (what == 1 && m.n) {
            /* the same range written again, whole */
            struct shp_range x = m.v[(size_t)rand() % m.n];
            shp_ranges_assign(&r, x.start, x.end, v, ref, &c);
            model_assign(&m, x.start, x.end, v);
        } else if (what == 3) {
            /* written from where the last visit began, as an in-place collective writes what it
             * read: the map's remembered place is used, and must still be right */
            shp_ranges_assign(&r, last_visit, last_visit + len, v, ref, &c);
            model_assign(&m, last_visit, last_visit + len, v);
        } else if (what == 4 && m.n) {
            /* a range looked up exactly and its value changed through the pointer, as the
             * lineage pass does for a buffer written again whole; counted by hand */
            struct shp_range x = m.v[(size_t)rand() % m.n];
            struct shp_range *got = shp_ranges_exact(&r, x.start, x.end);
            exact_tries++;
            if (got) {
                exact_hits++;
                bad_exact += got->start != x.start || got->end != x.end || got->value != x.value;
                ref(&c, v, 1);
                ref(&c, got->value, -1);
                got->value = v;
                model_assign(&m, x.start, x.end, v);
            }
            /* and a range that is not there: one end moved */
            bad_exact += shp_ranges_exact(&r, x.start, x.end + 1) != NULL;
            bad_exact += x.start + 1 < x.end && shp_ranges_exact(&r, x.start + 1, x.end) != NULL;
        } else if (what == 5) {
            /* a range just written is found exactly */
            shp_ranges_assign(&r, s, s + len, v, ref, &c);
            model_assign(&m, s, s + len, v);
            struct shp_range *got = shp_ranges_exact(&r, s, s + len);
            bad_exact += !got || got->start != s || got->end != s + len || got->value != v;
        } else if ((what == 6 || what == 7) && m.n) {
            /* written again from a range's start to another end, shorter or longer (a step's
             * buffer with another token count): cut or grown in place where the map finds the
             * start, across what follows where it is longer */
            struct shp_range x = m.v[(size_t)rand() % m.n];
            uint64_t len2 = what == 6 && x.end - x.start > 1
                                ? 1 + (uint64_t)rand() % (x.end - x.start - 1)
                                : x.end - x.start + 1 + (uint64_t)rand() % (maxlen * 3);
            shp_ranges_assign(&r, x.start, x.start + len2, v, ref, &c);
            model_assign(&m, x.start, x.start + len2, v);
            struct shp_range *got = shp_ranges_starting(&r, x.start);
            bad_exact += got && (got->end != x.start + len2 || got->value != v);
        } else if (what == 2 && i % 500 == 0) {
            shp_ranges_clear(&r, ref, &c);
            m.n = 0;
        } else {
            shp_ranges_assign(&r, s, s + len, v, ref, &c);
            model_assign(&m, s, s + len, v);
        }
        zero_up += c.zero_then_up;
        c.zero_then_up = 0;
        if (m.n > most)
            most = m.n;
        if (i % 97 == 0 || i == ops - 1) {
            bad_shape += !same(&r, &m);
            bad_counts += !counts_match(&c, &m);
        }
        uint64_t vs = (uint64_t)rand() % space, vl = 1 + (uint64_t)rand() % (maxlen * 4);
        if (i % 3 == 0)
            vs = s; /* a read from where this write began: the place the write found */
        bad_visit += !visit_matches(&r, &m, vs, vs + vl);
        last_visit = vs;
    }
    char what[128];
    snprintf(what, sizeof(what), "%d random operations (seed %u, up to %zu ranges live)", ops, seed,
             most);
    test_group(what);
    test_cond("the ranges are the model's", bad_shape == 0);
    test_cond("ref's counts are the model's", bad_counts == 0);
    test_cond("visits see the model's overlapping ranges, in order", bad_visit == 0);
    test_cond("no count fell to 0 and rose again in one call", zero_up == 0);
    test_cond("exact look-ups find only the exact range, and one just written", bad_exact == 0);
    test_cond("exact look-ups were tried and some found", exact_tries > 100 && exact_hits > 0);
    test_cond("the test reached as many ranges as it meant to", most >= live);
    shp_ranges_free(&r);
}

int main(void)
{
    test_cases();
    test_random(1, 40000, 40, 60000, 1000);
    test_random(2, 4000, 200, 30000, 50); /* long overlapping writes: trims across chunks */
    test_random(3, 200000, 8, 60000, 64 * 100);
    return test_report();
}
