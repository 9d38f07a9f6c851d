/* shapetrace analyze, loading: hand out the events of the session's traces merged by time, so
 * that the ranks' collectives arrive roughly together and little has to be held open. */
#include "tools/analyze/load.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tools/analyze/pass.h"
#include "tools/lib/out.h"

/* The processes with events left, as a heap on the time of their next event. The time sits in
 * the heap beside the process, so that sifting reads one array, not every process's event. */
struct an_slot {
    uint64_t t_ns;
    uint32_t proc;
};

struct an_load {
    struct an_slot *heap;
    size_t heap_n;
    uint64_t release_step;
};

static void heap_down(struct an_load *L, size_t i)
{
    struct an_slot *heap = L->heap;
    size_t heap_n = L->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < heap_n && heap[l].t_ns < heap[m].t_ns)
            m = l;
        if (r < heap_n && heap[r].t_ns < heap[m].t_ns)
            m = r;
        if (m == i)
            return;
        struct an_slot tmp = heap[i];
        heap[i] = heap[m];
        heap[m] = tmp;
        i = m;
    }
}

static void heap_up(struct an_load *L, size_t i)
{
    struct an_slot *heap = L->heap;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (heap[parent].t_ns <= heap[i].t_ns)
            return;
        struct an_slot tmp = heap[i];
        heap[i] = heap[parent];
        heap[parent] = tmp;
        i = parent;
    }
}

/* Read p's next call event (bookkeeping records are skipped; marks are events too). */
static void read_ahead(struct an_proc *p, uint32_t idx)
{
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    const struct shp_trace *t = &p->sp->t;
    struct shp_event *into = p->next == &p->ahead[0] ? &p->ahead[1] : &p->ahead[0];
    p->has_next = false;
    while ((r = shp_trace_next(t, &p->cur, &type, &size))) {
        if (!shp_event_decode(t, r, type, into))
            continue;
        into->index = p->index++;
        p->next = into;
        /* This trace's next record is read only after the heap has served the others: with
         * hundreds of traces its lines are long out of the cache by then, and no hardware
         * prefetcher follows that many streams: on 512 traces this took a quarter off the main
         * thread's CPU time. */
        if (p->cur.off + 128 <= t->end) {
            __builtin_prefetch(t->map + p->cur.off);
            __builtin_prefetch(t->map + p->cur.off + 64);
        }
        p->next_ref = (struct an_ref){.proc = idx, .index = into->index, .rec = r, .type = type};
        p->has_next = true;
        return;
    }
    /* The walk is at the end: the session's description learns what it found. */
    shp_proc_walked(p->sp, &p->cur, p->index);
}

int an_load(struct an_ctx *ctx, struct shp_session *s)
{
    size_t n = s->nprocs;
    ctx->session = s;
    ctx->procs = calloc(n ? n : 1, sizeof(*ctx->procs));
    struct an_load *L = ctx->load = calloc(1, sizeof(*ctx->load));
    if (L)
        L->heap = calloc(n ? n : 1, sizeof(*L->heap));
    if (!ctx->procs || !L || !L->heap) {
        shp_err("out of memory");
        return -1;
    }
    uint64_t step = n ? (128ull << 20) / n : 8ull << 20;
    L->release_step = step > (8ull << 20)    ? (8ull << 20)
                      : step < (64ull << 10) ? (64ull << 10)
                                             : step & ~((64ull << 10) - 1);
    ctx->nprocs = n;
    for (size_t i = 0; i < n; i++) {
        struct an_proc *p = &ctx->procs[i];
        p->sp = &s->procs[i];
        ctx->bytes_total += p->sp->t.end;
        read_ahead(p, (uint32_t)i);
        if (p->has_next) {
            L->heap[L->heap_n++] = (struct an_slot){p->next->t_ns, (uint32_t)i};
            heap_up(L, L->heap_n - 1);
        } else {
            p->ended = true;
        }
    }
    return 0;
}

/* Pages already read are dropped from this process's mapping in steps that keep all the traces
 * together under about 128 MiB (8 MiB a trace at most, 64 KiB at least): they stay in the page
 * cache and are read back if a report needs one of their records, so memory follows what is
 * open, not the size of the traces. */
static void release_behind(const struct an_load *L, struct an_proc *p)
{
    const uint64_t step = L->release_step;
    if (p->cur.off < p->released + 2 * step)
        return;
    uint64_t upto = (p->cur.off - step) & ~(step - 1);
    if (upto > p->released) {
        madvise((void *)(p->sp->t.map + p->released), upto - p->released, MADV_DONTNEED);
        p->released = upto;
    }
}

bool an_next(struct an_ctx *ctx, struct an_proc **proc, const struct shp_event **e,
             struct an_ref *ref)
{
    struct an_load *L = ctx->load;
    if (!L || !L->heap_n)
        return false;
    uint32_t i = L->heap[0].proc;
    struct an_proc *p = &ctx->procs[i];
    *proc = p;
    *e = p->next;
    *ref = p->next_ref;
    uint64_t before = p->cur.off;
    read_ahead(p, i);
    ctx->bytes_done += p->cur.off - before;
    release_behind(L, p);
    if (p->has_next) {
        L->heap[0].t_ns = p->next->t_ns;
        heap_down(L, 0);
    } else {
        L->heap[0] = L->heap[--L->heap_n];
        heap_down(L, 0);
        /* The caller learns that p ended with its last event: flagged here, acted on by the
         * driver after it has handed this event on. */
        p->ended = true;
    }
    return true;
}

void an_unload(struct an_ctx *ctx)
{
    free(ctx->procs);
    ctx->procs = NULL;
    ctx->nprocs = 0;
    if (ctx->load)
        free(ctx->load->heap);
    free(ctx->load);
    ctx->load = NULL;
}
