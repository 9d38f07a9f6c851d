/* shapetrace analyze, pass 3: within one process, a collective or copy whose byte range runs
 * past the allocation that holds its buffer. Only buffers inside a traced allocation are
 * checked (torch's caching allocator hands out pieces of large cudaMalloc segments: an overrun
 * of a piece that stays inside its segment is not seen here). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "ops.h"

/* Index of the last allocation starting at or below ptr, or -1. */
static long find(const struct an_proc *p, uint64_t ptr)
{
    size_t lo = 0, hi = p->nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->allocs[mid].ptr <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

static void add_alloc(struct an_proc *p, uint64_t ptr, uint64_t size)
{
    long i = find(p, ptr);
    if (i >= 0 && p->allocs[i].ptr == ptr) {
        p->allocs[i].size = size; /* the same address handed out again */
        return;
    }
    if (p->nallocs == p->allocs_cap) {
        size_t ncap = p->allocs_cap ? p->allocs_cap * 2 : 64;
        struct an_alloc *n = realloc(p->allocs, ncap * sizeof(*n));
        if (!n)
            return;
        p->allocs = n;
        p->allocs_cap = ncap;
    }
    size_t at = (size_t)(i + 1);
    memmove(p->allocs + at + 1, p->allocs + at, (p->nallocs - at) * sizeof(*p->allocs));
    p->allocs[at] = (struct an_alloc){ptr, size};
    p->nallocs++;
}

static void remove_alloc(struct an_proc *p, uint64_t ptr)
{
    long i = find(p, ptr);
    if (i < 0 || p->allocs[i].ptr != ptr)
        return;
    memmove(p->allocs + i, p->allocs + i + 1, (p->nallocs - (size_t)i - 1) * sizeof(*p->allocs));
    p->nallocs--;
}

static void check(struct an_ctx *ctx, struct an_proc *p, const struct shp_event *e,
                  const struct an_ref *ref, uint64_t buf, uint64_t len, const char *what)
{
    if (buf == SHP_NONE || len == SHP_NONE || len == 0)
        return;
    long i = find(p, buf);
    if (i < 0)
        return;
    const struct an_alloc *a = &p->allocs[i];
    if (buf >= a->ptr + a->size || buf + len <= a->ptr + a->size)
        return;
    struct an_finding *f = an_add_finding(ctx, AN_BUFFER_OVERRUN, true);
    if (!f)
        return;
    f->comm = e->comm ? e->comm : 0;
    f->seq = e->seq;
    if (p->rank >= 0)
        f->ranks[f->nranks++] = p->rank;
    f->events[f->nevents++] = *ref;
    f->t_ns = e->t_ns;
    char who[64];
    if (p->rank >= 0)
        snprintf(who, sizeof(who), "rank %d", p->rank);
    else
        snprintf(who, sizeof(who), "pid %" PRIu64, p->t.hdr->pid);
    snprintf(f->summary, sizeof(f->summary),
             "%s: %s %s %" PRIu64 " bytes at 0x%" PRIx64 ", %" PRIu64
             " bytes past the end of its %" PRIu64 "-byte allocation at 0x%" PRIx64,
             who, shp_op_name(e->op), what, len, buf, buf + len - (a->ptr + a->size), a->size,
             a->ptr);
}

void an_buffers_track(struct an_proc *p, const struct shp_event *e)
{
    if (e->type != SHP_REC_ALLOC)
        return;
    if (e->cls == SHP_CLS_ALLOC && e->result == 0 && e->ptr != SHP_NONE && e->ptr)
        add_alloc(p, e->ptr, e->size);
    else if (e->cls == SHP_CLS_FREE && e->ptr != SHP_NONE)
        remove_alloc(p, e->ptr);
}

void an_buffers_event(struct an_ctx *ctx, struct an_proc *p, const struct shp_event *e,
                      const struct an_ref *ref)
{
    switch (e->type) {
    case SHP_REC_ALLOC:
        an_buffers_track(p, e);
        break;
    case SHP_REC_COLL:
    case SHP_REC_P2P:
        check(ctx, p, e, ref, e->src, e->send_bytes, "reads");
        if (e->dst != e->src || e->recv_bytes != e->send_bytes)
            check(ctx, p, e, ref, e->dst, e->recv_bytes, "writes");
        break;
    case SHP_REC_COPY: {
        if (e->height == SHP_NONE || e->height == 0)
            break;
        uint64_t slen = (e->height - 1) * e->spitch + e->width;
        uint64_t dlen = (e->height - 1) * e->dpitch + e->width;
        check(ctx, p, e, ref, e->src, slen, "reads");
        check(ctx, p, e, ref, e->dst, dlen, "writes");
        break;
    }
    default:
        break;
    }
}
