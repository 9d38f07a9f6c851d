/* shapetrace analyze, buffers pass: within one process, a collective or copy whose byte range
 * runs past the allocation that holds its buffer, or whose size cannot be a buffer's at all. Only
 * buffers inside a traced allocation are checked (torch's caching allocator hands out pieces of
 * large cudaMalloc segments: an overrun of a piece that stays inside its segment is not seen here).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"
#include "tools/lib/allocs.h"

struct buffers {
    struct shp_allocs *allocs; /* per process */
    size_t nprocs;
};

/* "rank 3", or "pid 4242" for a process without a rank; the process is the finding's culprit. */
static void culprit(struct an_finding *f, const struct an_proc *p, char *who, size_t len)
{
    if (p->sp->rank >= 0) {
        an_finding_rank(f, p->sp->rank);
        snprintf(who, len, "rank %d", p->sp->rank);
    } else {
        snprintf(who, len, "pid %" PRIu64, p->sp->t.hdr->pid);
    }
}

/* Whether the span runs past the end of the allocation that holds its start. Inline, and the
 * finding out of line (check): it is asked of nearly every call, and the answer is no. */
static inline bool overruns(const struct shp_allocs *allocs, const struct shp_span *span)
{
    uint64_t buf = span->start, len = span->len;
    if (buf == SHP_NONE || len == SHP_NONE || len == 0)
        return false;
    const struct shp_alloc *a = shp_allocs_find(allocs, buf);
    /* Both ends fit in 64 bits: the decoder marks a call whose ends do not (impossible). */
    return a && buf + len > a->ptr + a->size;
}

/* The finding of a span that overruns its allocation (overruns). */
static void __attribute__((noinline))
check(struct an_ctx *ctx, const struct shp_allocs *allocs, struct an_step *s,
      const struct shp_span *span, const char *what)
{
    const struct shp_event *e = s->e;
    uint64_t buf = span->start, len = span->len;
    if (!overruns(allocs, span))
        return;
    const struct shp_alloc *a = shp_allocs_find(allocs, buf);
    struct an_finding *f = an_finding_add(&ctx->findings, AN_BUFFER_OVERRUN);
    if (!f)
        return;
    f->comm = e->comm ? e->comm : 0;
    f->seq = e->seq;
    f->events[f->nevents++] = *s->ref;
    f->t_ns = e->t_ns;
    char who[64];
    culprit(f, s->proc, who, sizeof(who));
    snprintf(f->summary, sizeof(f->summary),
             "%s: %s %s %" PRIu64 " bytes at 0x%" PRIx64 ", %" PRIu64
             " bytes past the end of its %" PRIu64 "-byte allocation at 0x%" PRIx64,
             who, shp_op_name(e->op), what, len, buf, buf + len - (a->ptr + a->size), a->size,
             a->ptr);
}

/* A call whose byte count, or a buffer's end, does not fit in 64 bits: no buffer holds it. */
static void impossible(struct an_ctx *ctx, struct an_step *s)
{
    const struct shp_event *e = s->e;
    struct an_finding *f = an_finding_add(&ctx->findings, AN_IMPOSSIBLE_SIZE);
    if (!f)
        return;
    f->comm = e->comm;
    f->seq = e->seq;
    an_finding_event(f, s->ref, e->t_ns);
    char who[64], what[160];
    culprit(f, s->proc, who, sizeof(who));
    if (e->type == SHP_REC_COPY)
        snprintf(what, sizeof(what), "a copy of %" PRIu64 " rows of %" PRIu64 " bytes", e->height,
                 e->width);
    else
        snprintf(what, sizeof(what), "%" PRIu64 " %s elements", e->count,
                 e->dtype >= 0 ? shp_dtype_name((unsigned)e->dtype) : "?");
    snprintf(f->summary, sizeof(f->summary),
             "%s: %s of %s: its bytes, or the end of a buffer it names, do not fit in 64 bits, "
             "more than any buffer holds (a corrupt count or an overflowed size computation)",
             who, shp_op_name(e->op), what);
}

static void *buffers_init(struct an_ctx *ctx)
{
    struct buffers *B = calloc(1, sizeof(*B));
    if (!B)
        return NULL;
    B->nprocs = ctx->nprocs;
    if (!(B->allocs = calloc(B->nprocs ? B->nprocs : 1, sizeof(*B->allocs)))) {
        free(B);
        return NULL;
    }
    return B;
}

static void buffers_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct buffers *B = st;
    const struct shp_event *e = s->e;
    struct shp_allocs *allocs = &B->allocs[s->ref->proc];
    struct shp_span rd, wr;
    if (e->impossible &&
        (e->type == SHP_REC_COLL || e->type == SHP_REC_P2P || e->type == SHP_REC_COPY)) {
        impossible(ctx, s);
        return;
    }
    switch (e->type) {
    case SHP_REC_ALLOC:
        shp_allocs_event(allocs, e);
        break;
    case SHP_REC_COLL:
    case SHP_REC_P2P:
        an_step_spans(s, &rd, &wr);
        if (overruns(allocs, &rd))
            check(ctx, allocs, s, &rd, "reads");
        /* An in-place collective reads and writes one range: one finding. */
        if ((wr.start != rd.start || wr.len != rd.len) && overruns(allocs, &wr))
            check(ctx, allocs, s, &wr, "writes");
        break;
    case SHP_REC_COPY:
        an_step_spans(s, &rd, &wr);
        if (overruns(allocs, &rd))
            check(ctx, allocs, s, &rd, "reads");
        if (overruns(allocs, &wr))
            check(ctx, allocs, s, &wr, "writes");
        break;
    default:
        break;
    }
}

static void buffers_free(void *st)
{
    struct buffers *B = st;
    for (size_t i = 0; i < B->nprocs; i++)
        shp_allocs_free(&B->allocs[i]);
    free(B->allocs);
    free(B);
}

const struct an_pass an_pass_buffers = {
    .name = "buffers",
    .init = buffers_init,
    .event = buffers_event,
    .free = buffers_free,
};
