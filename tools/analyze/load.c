/* shapetrace analyze, loading: open every trace and hand out their events merged by time, so that
 * the ranks' collectives arrive roughly together and little has to be held open. */
#include "tools/analyze/load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tools/analyze/pass.h"
#include "tools/lib/out.h"
#include "tools/lib/stacks.h"

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
    struct shp_event *into = p->next == &p->ahead[0] ? &p->ahead[1] : &p->ahead[0];
    p->has_next = false;
    while ((r = shp_trace_next(&p->t, &p->cur, &type, &size))) {
        if (!shp_event_decode(&p->t, r, type, into))
            continue;
        into->index = p->index++;
        p->next = into;
        /* This trace's next record is read only after the heap has served the others: with
         * hundreds of traces its lines are long out of the cache by then, and no hardware
         * prefetcher follows that many streams: on 512 traces this took a quarter off the main
         * thread's CPU time. */
        if (p->cur.off + 128 <= p->t.end) {
            __builtin_prefetch(p->t.map + p->cur.off);
            __builtin_prefetch(p->t.map + p->cur.off + 64);
        }
        p->next_ref = (struct an_ref){.proc = idx, .index = into->index, .rec = r, .type = type};
        p->has_next = true;
        return;
    }
}

/* True if file was given as it is on the command line, not found in a directory. */
static bool named(char **paths, int npaths, const char *file)
{
    for (int i = 0; i < npaths; i++)
        if (!strcmp(paths[i], file))
            return true;
    return false;
}

/* A file of a run directory that is no readable trace (a process killed before its header was
 * written, another format version): named once on stderr, kept for the report. */
static int skip_unreadable(struct an_ctx *ctx, const char *file, const char *why)
{
    struct an_unreadable *u =
        realloc(ctx->unreadable, (ctx->nunreadable + 1) * sizeof(*ctx->unreadable));
    if (!u)
        return -ENOMEM;
    ctx->unreadable = u;
    u += ctx->nunreadable;
    if (!(u->file = strdup(file)) || !(u->why = strdup(why))) {
        free(u->file);
        return -ENOMEM;
    }
    ctx->nunreadable++;
    shp_err("%s: %s; skipped: the analysis covers the other traces only", file, why);
    return 0;
}

static void free_files(char **files, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(files[i]);
    free(files);
}

int an_load(struct an_ctx *ctx, char **paths, int npaths)
{
    char **files = NULL;
    size_t n = 0;
    for (int i = 0; i < npaths; i++) {
        int rc = shp_trace_collect(paths[i], &files, &n);
        if (rc < 0) {
            shp_err("%s: %s", paths[i],
                    rc == -ENOENT ? "no such file, or no traces in it" : strerror(-rc));
            goto fail;
        }
    }
    ctx->procs = calloc(n ? n : 1, sizeof(*ctx->procs));
    struct an_load *L = ctx->load = calloc(1, sizeof(*ctx->load));
    if (L)
        L->heap = calloc(n ? n : 1, sizeof(*L->heap));
    if (!ctx->procs || !L || !L->heap) {
        shp_err("out of memory");
        goto fail;
    }
    uint64_t step = n ? (128ull << 20) / n : 8ull << 20;
    L->release_step = step > (8ull << 20)    ? (8ull << 20)
                      : step < (64ull << 10) ? (64ull << 10)
                                             : step & ~((64ull << 10) - 1);
    for (size_t i = 0; i < n; i++) {
        size_t np = ctx->nprocs;
        struct an_proc *p = &ctx->procs[np];
        char err[256];
        if (shp_trace_open(&p->t, files[i], err, sizeof(err)) < 0) {
            if (named(paths, npaths, files[i]) || skip_unreadable(ctx, files[i], err) < 0) {
                shp_err("%s: %s", files[i], err);
                goto fail;
            }
            continue;
        }
        ctx->nprocs = np + 1;
        p->rank = shp_trace_rank(&p->t);
        ctx->bytes_total += p->t.end;
        read_ahead(p, (uint32_t)np);
        if (p->has_next) {
            L->heap[L->heap_n++] = (struct an_slot){p->next->t_ns, (uint32_t)np};
            heap_up(L, L->heap_n - 1);
        } else {
            p->ended = true;
        }
    }
    if (n && !ctx->nprocs) {
        shp_err("no readable trace in %s", npaths == 1 ? paths[0] : "the paths given");
        goto fail;
    }
    /* The same trace given twice (a file and its directory) would look like two ranks. */
    for (size_t i = 0; i < ctx->nprocs; i++)
        for (size_t k = i + 1; k < ctx->nprocs; k++)
            if (ctx->procs[i].t.hdr->pid == ctx->procs[k].t.hdr->pid &&
                !strcmp(ctx->procs[i].t.hdr->host, ctx->procs[k].t.hdr->host) &&
                ctx->procs[i].t.hdr->realtime_ns == ctx->procs[k].t.hdr->realtime_ns) {
                shp_err("%s and %s are the same trace given twice", ctx->procs[i].t.path,
                        ctx->procs[k].t.path);
                goto fail;
            }
    free_files(files, n);
    return 0;
fail:
    free_files(files, n);
    return -1;
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
        madvise((void *)(p->t.map + p->released), upto - p->released, MADV_DONTNEED);
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
    for (size_t i = 0; i < ctx->nprocs; i++) {
        shp_stacks_free(ctx->procs[i].stacks);
        shp_trace_close(&ctx->procs[i].t);
    }
    for (size_t i = 0; i < ctx->nunreadable; i++) {
        free(ctx->unreadable[i].file);
        free(ctx->unreadable[i].why);
    }
    free(ctx->unreadable);
    ctx->unreadable = NULL;
    ctx->nunreadable = 0;
    free(ctx->procs);
    ctx->procs = NULL;
    ctx->nprocs = 0;
    if (ctx->load)
        free(ctx->load->heap);
    free(ctx->load);
    ctx->load = NULL;
}
