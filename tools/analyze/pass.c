/* shapetrace analyze: the containers that passes share (see pass.h): a queue of open calls and
 * a table indexed by 64-bit keys. */
#include "tools/analyze/pass.h"

#include <stdlib.h>

struct an_entry an_entry_of(const struct shp_event *e, const struct an_ref *ref)
{
    return (struct an_entry){.ref = *ref,
                             .t_ns = e->t_ns,
                             .seq = e->seq,
                             .count = e->count,
                             .root = e->root,
                             .redop = e->redop,
                             .dtype = e->dtype,
                             .op = e->op};
}

struct an_entry *an_queue_at(struct an_queue *q, size_t i)
{
    return &q->v[(q->head + i) % q->cap];
}

int an_queue_push(struct an_queue *q, const struct an_entry *e)
{
    if (q->n == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 8;
        struct an_entry *nv = malloc(ncap * sizeof(*nv));
        if (!nv)
            return -1;
        for (size_t i = 0; i < q->n; i++)
            nv[i] = *an_queue_at(q, i);
        free(q->v);
        q->v = nv;
        q->head = 0;
        q->cap = ncap;
    }
    q->v[(q->head + q->n) % q->cap] = *e;
    q->n++;
    return 0;
}

void an_queue_pop(struct an_queue *q)
{
    q->head = (q->head + 1) % q->cap;
    q->n--;
}

uint64_t an_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static size_t *slot_of(size_t *slots, size_t nslots, void *const *v, uint64_t (*key)(const void *),
                       uint64_t k)
{
    for (size_t i = an_mix(k) & (nslots - 1);; i = (i + 1) & (nslots - 1))
        if (!slots[i] || key(v[slots[i] - 1]) == k)
            return &slots[i];
}

void *an_table_get(const struct an_table *t, uint64_t k)
{
    if (!t->nslots)
        return NULL;
    size_t s = *slot_of(t->slots, t->nslots, t->v, t->key, k);
    return s ? t->v[s - 1] : NULL;
}

/* Keep the index at most half full. */
static int regrow(struct an_table *t)
{
    if (t->nslots && t->n * 2 < t->nslots)
        return 0;
    size_t ns = t->nslots ? t->nslots * 2 : 64;
    size_t *s = calloc(ns, sizeof(*s));
    if (!s)
        return -1;
    for (size_t i = 0; i < t->n; i++)
        *slot_of(s, ns, t->v, t->key, t->key(t->v[i])) = i + 1;
    free(t->slots);
    t->slots = s;
    t->nslots = ns;
    return 0;
}

int an_table_add(struct an_table *t, void *item)
{
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        void **nv = realloc(t->v, ncap * sizeof(*nv));
        if (!nv)
            return -1;
        t->v = nv;
        t->cap = ncap;
    }
    t->v[t->n++] = item;
    if (regrow(t) == 0)
        *slot_of(t->slots, t->nslots, t->v, t->key, t->key(item)) = t->n;
    return 0;
}

void an_table_free(struct an_table *t)
{
    free(t->v);
    free(t->slots);
    t->v = NULL;
    t->slots = NULL;
    t->n = t->cap = t->nslots = 0;
}
