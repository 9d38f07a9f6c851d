/* shapetrace analyze, last passes: the causal order of the findings and the report, for a person
 * (first finding first, next to what the majority did, then the rest briefly, then one line)
 * or as DESIGN's JSON. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "cmd.h"
#include "ops.h"

const char *const an_kind_names[AN_KIND_COUNT] = {
    "op_mismatch",   "count_mismatch",     "dtype_mismatch",    "redop_mismatch",
    "root_mismatch", "missing_collective", "p2p_size_mismatch", "p2p_dtype_mismatch",
    "p2p_unmatched", "buffer_overrun",     "shape_mismatch",    "expectation_violation",
    "missing_rank",
};

struct an_finding *an_add_finding(struct an_ctx *ctx, enum an_kind kind, bool error)
{
    if (ctx->nfindings == ctx->findings_cap) {
        size_t ncap = ctx->findings_cap ? ctx->findings_cap * 2 : 16;
        struct an_finding *n = realloc(ctx->findings, ncap * sizeof(*n));
        if (!n)
            return NULL;
        ctx->findings = n;
        ctx->findings_cap = ncap;
    }
    struct an_finding *f = &ctx->findings[ctx->nfindings++];
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    f->error = error;
    f->seq = SHP_NONE;
    return f;
}

/* Collectives order the ranks: on one communicator a lower seq comes first whatever the clocks
 * say; across communicators and processes, time decides. */
static int before(const struct an_finding *a, const struct an_finding *b)
{
    if (a->comm && a->comm == b->comm && a->seq != SHP_NONE && b->seq != SHP_NONE &&
        a->seq != b->seq)
        return a->seq < b->seq;
    if (a->t_ns != b->t_ns)
        return a->t_ns && (a->t_ns < b->t_ns || !b->t_ns);
    return a < b;
}

void an_order(struct an_ctx *ctx)
{
    /* Insertion sort: findings are few, and the relation is not a total order for qsort. */
    size_t n = ctx->nfindings;
    size_t *idx = malloc((n ? n : 1) * sizeof(*idx));
    if (!idx)
        return;
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        while (k > 0 && before(&ctx->findings[i], &ctx->findings[idx[k - 1]])) {
            idx[k] = idx[k - 1];
            k--;
        }
        idx[k] = i;
    }
    for (size_t i = 0; i < n; i++)
        ctx->findings[idx[i]].order = i;
    free(idx);
}

static const struct an_finding *nth(const struct an_ctx *ctx, size_t order)
{
    for (size_t i = 0; i < ctx->nfindings; i++)
        if (ctx->findings[i].order == order)
            return &ctx->findings[i];
    return NULL;
}

void an_factor(const struct an_ctx *ctx, uint64_t count, uint64_t *best, char *name, size_t len)
{
    *best = 0;
    name[0] = 0;
    if (!count || count == SHP_NONE)
        return;
    /* Candidate extents: each dim, and products and quotients of two. The largest one that
     * divides the count explains most of it with one free number. */
    for (int i = 0; i < ctx->ndims; i++) {
        for (int k = -2; k < ctx->ndims; k++) {
            uint64_t v = ctx->dims[i].value, w = k >= 0 ? ctx->dims[k].value : 0;
            char n[80];
            if (k == -2) {
                snprintf(n, sizeof(n), "%s", ctx->dims[i].name);
            } else if (k == -1 || k == i) {
                continue;
            } else if (w && v % w == 0 && v / w > 1) {
                v /= w;
                snprintf(n, sizeof(n), "%s/%s", ctx->dims[i].name, ctx->dims[k].name);
            } else {
                continue;
            }
            if (v > 1 && count % v == 0 && v > *best) {
                *best = v;
                snprintf(name, len, "%s", n);
            }
        }
        for (int k = i + 1; k < ctx->ndims; k++) {
            uint64_t v = ctx->dims[i].value * ctx->dims[k].value;
            if (v > 1 && count % v == 0 && v > *best) {
                *best = v;
                snprintf(name, len, "%s*%s", ctx->dims[i].name, ctx->dims[k].name);
            }
        }
    }
}

void an_shape(const struct an_ctx *ctx, uint64_t count, char *out, size_t len)
{
    uint64_t best;
    char name[96];
    out[0] = 0;
    an_factor(ctx, count, &best, name, sizeof(name));
    if (!best)
        return;
    if (count == best)
        snprintf(out, len, "[%s]", name);
    else
        snprintf(out, len, "[%" PRIu64 ", %s]", count / best, name);
}

static struct shp_stacks *stacks_of(struct an_ctx *ctx, uint32_t proc)
{
    struct an_proc *p = &ctx->procs[proc];
    if (!p->stacks)
        p->stacks = shp_stacks_load(&p->t, true);
    return p->stacks;
}

static bool decode(struct an_ctx *ctx, const struct an_ref *r, struct shp_event *e);

void an_site(struct an_ctx *ctx, const struct an_ref *r, char *out, size_t len)
{
    struct shp_event e;
    out[0] = 0;
    /* The site a person wrote: the innermost Python frame when there is one. */
    if (decode(ctx, r, &e))
        shp_stacks_site(stacks_of(ctx, r->proc), e.stack, out, len);
    if (!out[0])
        snprintf(out, len, "an unknown site");
}

static bool decode(struct an_ctx *ctx, const struct an_ref *r, struct shp_event *e)
{
    if (!r->rec || !shp_event_decode(&ctx->procs[r->proc].t, r->rec, r->type, e))
        return false;
    e->index = r->index;
    return true;
}

static void print_call(struct an_ctx *ctx, const struct an_ref *r, const char *indent,
                       size_t max_frames)
{
    struct shp_event e;
    if (!decode(ctx, r, &e))
        return;
    struct an_proc *p = &ctx->procs[r->proc];
    char shape[96] = "";
    if (p->rank >= 0)
        printf("%srank %d (%s:%" PRIu64 ")  %s", indent, p->rank, p->t.hdr->host, p->t.hdr->pid,
               shp_op_name(e.op));
    else
        printf("%s%s:%" PRIu64 "  %s", indent, p->t.hdr->host, p->t.hdr->pid, shp_op_name(e.op));
    if (e.count != SHP_NONE) {
        an_shape(ctx, e.count, shape, sizeof(shape));
        printf(" count %" PRIu64 "%s%s", e.count, shape[0] ? " " : "", shape);
    }
    if (e.dtype >= 0)
        printf(" %s", shp_dtype_name((unsigned)e.dtype));
    if (e.redop >= 0)
        printf(" %s", shp_redop_name((unsigned)e.redop));
    if (e.root >= 0)
        printf(" root %d", e.root);
    if (e.peer >= 0)
        printf(" peer %d", e.peer);
    if (e.bytes != SHP_NONE)
        printf(", %" PRIu64 " bytes", e.bytes);
    if (e.comm && e.seq != SHP_NONE)
        printf(", comm %.8" PRIx64 " #%" PRIu64, e.comm >> 32, e.seq);
    if (e.type == SHP_REC_COPY && e.kind >= 0 && e.kind <= 4)
        printf(" %s 0x%" PRIx64 " -> 0x%" PRIx64, shp_kind_names[e.kind], e.src, e.dst);
    if (e.dur_ns == SHP_NONE)
        printf(" [in flight]");
    else if (e.result)
        printf(" [error %d]", e.result);
    printf("\n");
    size_t n;
    const char *const *fr = shp_stacks_frames(stacks_of(ctx, r->proc), e.stack, &n);
    /* In a Python program, start at the Python line that made the call: the native frames
     * below it are the framework's. */
    size_t from = 0;
    while (from < n && strncmp(fr[from], "py: ", 4) != 0)
        from++;
    if (from == n)
        from = 0;
    for (size_t i = from; i < n && i < from + max_frames; i++)
        printf("%s    %s %s\n", indent, i > from ? "<-" : "at", fr[i]);
}

void an_report_text(struct an_ctx *ctx, bool color)
{
    const char *bold = color ? "\033[1m" : "", *red = color ? "\033[1;31m" : "",
               *off = color ? "\033[0m" : "";
    size_t ncomm = an_comm_count(ctx);
    printf("shapetrace analyze: %zu process%s, %zu communicator%s, %" PRIu64
           " collectives aligned, %" PRIu64 " events\n",
           ctx->nprocs, ctx->nprocs == 1 ? "" : "es", ncomm, ncomm == 1 ? "" : "s",
           ctx->collectives, ctx->events);
    for (size_t i = 0; i < ctx->nprocs; i++) {
        struct an_proc *p = &ctx->procs[i];
        if (!shp_trace_complete(&p->t)) {
            printf("  note: rank %d (%s:%" PRIu64 ") did not exit normally; last call:", p->rank,
                   p->t.hdr->host, p->t.hdr->pid);
            struct shp_event e;
            if (decode(ctx, &p->last, &e))
                printf(" %s%s\n", shp_op_name(e.op), e.dur_ns == SHP_NONE ? " [in flight]" : "");
            else
                printf(" none\n");
        }
    }
    const struct an_finding *first = nth(ctx, 0);
    if (!first) {
        printf("\nno findings: the ranks agree on every collective and send/receive, and every "
               "read fits the shape its producer wrote.\n");
        return;
    }
    printf("\n%sFIRST FINDING%s  %s%s%s (%s)\n  %s\n", bold, off, red, an_kind_names[first->kind],
           off, first->error ? "error" : "warning", first->summary);
    if (first->nevents) {
        printf("  diverging call%s:\n", first->nevents > 1 ? "s" : "");
        for (int i = 0; i < first->nevents; i++)
            print_call(ctx, &first->events[i], "    ", 4);
    }
    if (first->has_expected) {
        printf("  what the others did:\n");
        print_call(ctx, &first->expected, "    ", 4);
    }
    if (first->nlineage) {
        printf("  where its bytes came from (producers, nearest first):\n");
        for (int i = 0; i < first->nlineage; i++)
            print_call(ctx, &first->lineage[i], "    ", 2);
    }
    if (first->consequences)
        printf("  %" PRIu64 " later call%s on this communicator disagree%s as a "
               "consequence (not reported separately).\n",
               first->consequences, first->consequences == 1 ? "" : "s",
               first->consequences == 1 ? "s" : "");
    if (ctx->nfindings > 1) {
        printf("\n%sOTHER FINDINGS%s\n", bold, off);
        for (size_t o = 1; o < ctx->nfindings; o++) {
            const struct an_finding *f = nth(ctx, o);
            printf("  %zu. %s: %s\n", o + 1, an_kind_names[f->kind], f->summary);
            if (f->nevents) {
                char site[512];
                an_site(ctx, &f->events[0], site, sizeof(site));
                printf("     at %s\n", site);
            }
        }
    }
    size_t errors = 0;
    for (size_t i = 0; i < ctx->nfindings; i++)
        errors += ctx->findings[i].error;
    char ranks[128];
    size_t off2 = 0;
    ranks[0] = 0;
    for (int i = 0; i < first->nranks && off2 < sizeof(ranks); i++)
        off2 += (size_t)snprintf(ranks + off2, sizeof(ranks) - off2, "%s%d", i ? "," : "",
                                 first->ranks[i]);
    printf("\n%zu finding%s (%zu error%s); first: %s", ctx->nfindings,
           ctx->nfindings == 1 ? "" : "s", errors, errors == 1 ? "" : "s",
           an_kind_names[first->kind]);
    if (first->comm)
        printf(" on communicator %.8" PRIx64, first->comm >> 32);
    if (first->seq != SHP_NONE)
        printf(" #%" PRIu64, first->seq);
    if (first->nranks)
        printf(", rank%s %s", first->nranks > 1 ? "s" : "", ranks);
    printf("\n");
}

static void json_ref(struct an_ctx *ctx, const struct an_ref *r)
{
    struct shp_event e;
    if (!decode(ctx, r, &e)) {
        fputs("null", stdout);
        return;
    }
    shp_event_json(stdout, &ctx->procs[r->proc].t, stacks_of(ctx, r->proc), &e);
}

void an_report_json(struct an_ctx *ctx)
{
    printf("{\"version\":1,\"processes\":[");
    for (size_t i = 0; i < ctx->nprocs; i++) {
        struct an_proc *p = &ctx->procs[i];
        printf("%s{\"file\":", i ? "," : "");
        shp_json_str(stdout, p->t.path);
        printf(",\"host\":");
        shp_json_str(stdout, p->t.hdr->host);
        printf(",\"pid\":%" PRIu64 ",\"rank\":", p->t.hdr->pid);
        if (p->rank >= 0)
            printf("%d", p->rank);
        else
            printf("null");
        printf(",\"events\":%" PRIu64 ",\"complete\":%s}", p->index,
               shp_trace_complete(&p->t) ? "true" : "false");
    }
    printf("],\"comms\":[");
    for (size_t i = 0; i < an_comm_count(ctx); i++) {
        uint64_t id, coll;
        int nranks, ranks[1024], nm;
        an_comm_info(ctx, i, &id, &nranks, &coll, ranks, 1024, &nm);
        printf("%s{\"id\":\"%016" PRIx64 "\",\"nranks\":%d,\"ranks\":[", i ? "," : "", id, nranks);
        for (int k = 0; k < nm; k++)
            printf("%s%d", k ? "," : "", ranks[k]);
        printf("],\"collectives\":%" PRIu64 "}", coll);
    }
    printf("],\"findings\":[");
    for (size_t o = 0; o < ctx->nfindings; o++) {
        const struct an_finding *f = nth(ctx, o);
        printf("%s{\"kind\":\"%s\",\"severity\":\"%s\",\"comm\":", o ? "," : "",
               an_kind_names[f->kind], f->error ? "error" : "warning");
        if (f->comm)
            printf("\"%016" PRIx64 "\"", f->comm);
        else
            printf("null");
        if (f->seq != SHP_NONE)
            printf(",\"seq\":%" PRIu64, f->seq);
        else
            printf(",\"seq\":null");
        printf(",\"ranks\":[");
        for (int i = 0; i < f->nranks; i++)
            printf("%s%d", i ? "," : "", f->ranks[i]);
        printf("],\"summary\":");
        shp_json_str(stdout, f->summary);
        printf(",\"events\":[");
        for (int i = 0; i < f->nevents; i++) {
            if (i)
                fputc(',', stdout);
            json_ref(ctx, &f->events[i]);
        }
        printf("],\"lineage\":[");
        for (int i = 0; i < f->nlineage; i++) {
            if (i)
                fputc(',', stdout);
            json_ref(ctx, &f->lineage[i]);
        }
        printf("],\"expected\":");
        if (f->has_expected)
            json_ref(ctx, &f->expected);
        else
            printf("null");
        printf(",\"consequences\":%" PRIu64 "}", f->consequences);
    }
    printf("],\"first\":");
    /* Findings are printed in causal order, so the first is at index 0. */
    if (ctx->nfindings)
        printf("0");
    else
        printf("null");
    printf("}\n");
}
