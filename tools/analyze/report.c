/* shapetrace analyze, the report: the findings in causal order, for a person (first finding
 * first, next to what the majority did, then the rest briefly, then one line) or as the JSON
 * object of docs/CONTRACTS.md. */
#include "tools/analyze/report.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"
#include "tools/lib/out.h"
#include "tools/lib/stacks.h"

/* The element count of the call at r, or 0 when it has none. */
static uint64_t count_of(struct an_ctx *ctx, const struct an_ref *r)
{
    struct shp_event e;
    return an_decode(ctx, r, &e) && e.count != SHP_NONE ? e.count : 0;
}

/* other: the count the call is compared with (0: none), so both sides read in one factoring. */
static void print_call(FILE *out, struct an_ctx *ctx, const struct an_ref *r, const char *indent,
                       size_t max_frames, uint64_t other)
{
    struct shp_event e;
    if (!an_decode(ctx, r, &e))
        return;
    struct an_proc *p = &ctx->procs[r->proc];
    char shape[96] = "";
    if (p->rank >= 0)
        fprintf(out, "%srank %d (%s:%" PRIu64 ")  %s", indent, p->rank, p->t.hdr->host,
                p->t.hdr->pid, shp_op_name(e.op));
    else
        fprintf(out, "%s%s:%" PRIu64 "  %s", indent, p->t.hdr->host, p->t.hdr->pid,
                shp_op_name(e.op));
    if (e.count != SHP_NONE) {
        an_shape_as(&ctx->dims, e.count, other, shape, sizeof(shape));
        fprintf(out, " count %" PRIu64 "%s%s", e.count, shape[0] ? " " : "", shape);
    }
    if (e.dtype >= 0)
        fprintf(out, " %s", shp_dtype_name((unsigned)e.dtype));
    if (e.redop >= 0)
        fprintf(out, " %s", shp_redop_name((unsigned)e.redop));
    if (e.root >= 0)
        fprintf(out, " root %d", e.root);
    if (e.peer >= 0)
        fprintf(out, " peer %d", e.peer);
    if (e.bytes != SHP_NONE)
        fprintf(out, ", %" PRIu64 " bytes", e.bytes);
    if (e.comm && e.seq != SHP_NONE)
        fprintf(out, ", comm %.8" PRIx64 " #%" PRIu64, e.comm >> 32, e.seq);
    if (e.type == SHP_REC_COPY && e.kind >= 0 && e.kind <= 4)
        fprintf(out, " %s 0x%" PRIx64 " -> 0x%" PRIx64, shp_kind_names[e.kind], e.src, e.dst);
    if (e.dur_ns == SHP_NONE)
        fprintf(out, " [in flight]");
    else if (e.result)
        fprintf(out, " [error %d]", e.result);
    fprintf(out, "\n");
    size_t n;
    const char *const *fr = shp_stacks_frames(an_stacks(ctx, r->proc), e.stack, &n);
    /* In a Python program, start at the Python line that made the call: the native frames
     * below it are the framework's. */
    size_t from = 0;
    while (from < n && strncmp(fr[from], "py: ", 4) != 0)
        from++;
    if (from == n)
        from = 0;
    for (size_t i = from; i < n && i < from + max_frames; i++)
        fprintf(out, "%s    %s %s\n", indent, i > from ? "<-" : "at", fr[i]);
}

/* Every culprit's rank in the finding's communicator, where its calls say it. */
static void fill_comm_ranks(struct an_ctx *ctx)
{
    for (size_t i = 0; i < ctx->findings.n; i++)
        an_finding_comm_ranks(ctx, &ctx->findings.v[i]);
}

/* "rank 5 is rank 1 of communicator 1234abcd, ..." for the culprits whose two ranks differ;
 * nothing when none does. */
static void print_comm_ranks(FILE *out, const struct an_finding *f)
{
    bool any = false;
    for (int i = 0; i < f->nranks; i++) {
        if (f->comm_ranks[i] < 0 || f->comm_ranks[i] == f->ranks[i])
            continue;
        fprintf(out, "%s%d is rank %d", any ? ", " : "  (global rank ", f->ranks[i],
                f->comm_ranks[i]);
        any = true;
    }
    if (any)
        fprintf(out, " of communicator %.8" PRIx64 ")\n", f->comm >> 32);
}

void an_report_text(struct an_ctx *ctx, FILE *out, bool color)
{
    const char *bold = color ? "\033[1m" : "", *red = color ? "\033[1;31m" : "",
               *off = color ? "\033[0m" : "";
    size_t ncomm = ctx->ncomms;
    fprintf(out,
            "shapetrace analyze: %zu process%s, %zu communicator%s, %" PRIu64
            " collectives aligned, %" PRIu64 " events\n",
            ctx->nprocs, ctx->nprocs == 1 ? "" : "es", ncomm, ncomm == 1 ? "" : "s",
            ctx->collectives, ctx->events);
    /* Holes first: a finding-free report over missing traces or dropped calls would read as
     * clean. */
    for (size_t i = 0; i < ctx->nunreadable; i++)
        fprintf(out, "  %sINCOMPLETE%s: %s could not be read: %s; that process is not checked\n",
                bold, off, ctx->unreadable[i].file, ctx->unreadable[i].why);
    for (size_t i = 0; i < ctx->nprocs; i++) {
        struct an_proc *p = &ctx->procs[i];
        struct shp_event last;
        char where[96] = "the first drop";
        /* From where: its last recorded call (the calls dropped at a cap are the last ones). */
        if (an_decode(ctx, &p->last, &last) && last.t_ns >= p->t.hdr->realtime_ns)
            snprintf(where, sizeof(where), "its event %" PRIu64 " (%.3f s into the trace)",
                     last.index, (double)(last.t_ns - p->t.hdr->realtime_ns) / 1e9);
        if (p->t.hdr->dropped)
            fprintf(out,
                    "  %sINCOMPLETE%s: rank %d (%s:%" PRIu64 ") dropped %" PRIu64
                    " call%s: %s; its calls after %s are not checked\n",
                    bold, off, p->rank, p->t.hdr->host, p->t.hdr->pid, p->t.hdr->dropped,
                    p->t.hdr->dropped == 1 ? "" : "s", shp_trace_incomplete_why(&p->t, &p->cur),
                    where);
    }
    for (size_t i = 0; i < ctx->nprocs; i++) {
        struct an_proc *p = &ctx->procs[i];
        if (!shp_trace_complete(&p->t, &p->cur) && !p->t.hdr->dropped) {
            fprintf(out, "  note: rank %d (%s:%" PRIu64 "): %s; last call:", p->rank,
                    p->t.hdr->host, p->t.hdr->pid, shp_trace_incomplete_why(&p->t, &p->cur));
            struct shp_event e;
            if (an_decode(ctx, &p->last, &e))
                fprintf(out, " %s%s\n", shp_op_name(e.op),
                        e.dur_ns == SHP_NONE ? " [in flight]" : "");
            else
                fprintf(out, " none\n");
        }
    }
    fill_comm_ranks(ctx);
    const struct an_finding *first = an_findings_nth(&ctx->findings, 0);
    if (!first) {
        fprintf(out,
                "\nno findings: the ranks agree on every collective and send/receive, and every "
                "read fits the shape its producer wrote.\n");
        return;
    }
    fprintf(out, "\n%sFIRST FINDING%s  %s%s%s (%s)\n  %s\n", bold, off, red,
            an_kind_names[first->kind], off, first->error ? "error" : "warning", first->summary);
    print_comm_ranks(out, first);
    if (first->nevents) {
        fprintf(out, "  diverging call%s:\n", first->nevents > 1 ? "s" : "");
        for (int i = 0; i < first->nevents; i++) {
            if (first->labels[i])
                fprintf(out, "    %s:\n", first->labels[i]);
            print_call(out, ctx, &first->events[i], "    ", 4,
                       first->has_expected ? count_of(ctx, &first->expected) : 0);
        }
    }
    if (first->has_expected) {
        fprintf(out, "  what the others did:\n");
        print_call(out, ctx, &first->expected, "    ", 4,
                   first->nevents ? count_of(ctx, &first->events[0]) : 0);
    }
    if (first->nlineage) {
        fprintf(out, "  where its bytes came from (producers, nearest first):\n");
        for (int i = 0; i < first->nlineage; i++)
            print_call(out, ctx, &first->lineage[i], "    ", 2, 0);
    }
    if (first->consequences)
        fprintf(out,
                "  %" PRIu64 " later call%s on this communicator disagree%s as a "
                "consequence (not reported separately).\n",
                first->consequences, first->consequences == 1 ? "" : "s",
                first->consequences == 1 ? "s" : "");
    if (ctx->findings.n > 1) {
        fprintf(out, "\n%sOTHER FINDINGS%s\n", bold, off);
        for (size_t o = 1; o < ctx->findings.n; o++) {
            const struct an_finding *f = an_findings_nth(&ctx->findings, o);
            fprintf(out, "  %zu. %s: %s\n", o + 1, an_kind_names[f->kind], f->summary);
            if (f->nevents) {
                char site[512];
                an_site(ctx, &f->events[0], site, sizeof(site));
                fprintf(out, "     at %s\n", site);
            }
        }
    }
    size_t errors = 0;
    for (size_t i = 0; i < ctx->findings.n; i++)
        errors += ctx->findings.v[i].error;
    char ranks[128];
    size_t off2 = 0;
    ranks[0] = 0;
    for (int i = 0; i < first->nranks && off2 < sizeof(ranks); i++)
        off2 += (size_t)snprintf(ranks + off2, sizeof(ranks) - off2, "%s%d", i ? "," : "",
                                 first->ranks[i]);
    fprintf(out, "\n%zu finding%s (%zu error%s); first: %s", ctx->findings.n,
            ctx->findings.n == 1 ? "" : "s", errors, errors == 1 ? "" : "s",
            an_kind_names[first->kind]);
    if (first->comm)
        fprintf(out, " on communicator %.8" PRIx64, first->comm >> 32);
    if (first->seq != SHP_NONE)
        fprintf(out, " #%" PRIu64, first->seq);
    if (first->nranks)
        fprintf(out, ", rank%s %s", first->nranks > 1 ? "s" : "", ranks);
    fprintf(out, "\n");
}

/* The call at r as dump --json prints it, plus "shape": its count as the text report shows it,
 * in the factoring it shares with other (the count it is compared with, 0: none), null when
 * the dims do not factor it; and, when label is not NULL, "label": what the event is to the
 * finding (*label, null for a plain diverging call). */
static void json_ref(FILE *out, struct an_ctx *ctx, const struct an_ref *r, uint64_t other,
                     const char *const *label)
{
    struct shp_event e;
    if (!an_decode(ctx, r, &e)) {
        fputs("null", out);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) {
        shp_event_json(out, &ctx->procs[r->proc].t, an_stacks(ctx, r->proc), &e);
        return;
    }
    shp_event_json(mem, &ctx->procs[r->proc].t, an_stacks(ctx, r->proc), &e);
    fclose(mem);
    char shape[96] = "";
    if (e.count != SHP_NONE)
        an_shape_as(&ctx->dims, e.count, other, shape, sizeof(shape));
    if (len && buf[len - 1] == '}') {
        fprintf(out, "%.*s,\"shape\":", (int)(len - 1), buf);
        if (shape[0])
            shp_json_str(out, shape);
        else
            fputs("null", out);
        if (label) {
            fputs(",\"label\":", out);
            if (*label)
                shp_json_str(out, *label);
            else
                fputs("null", out);
        }
        fputc('}', out);
    } else {
        fwrite(buf, 1, len, out);
    }
    free(buf);
}

/* What became of the process, and when and why tracing switched itself off. */
static void json_fate(FILE *out, const struct shp_trace *t)
{
    static const char *const fates[] = {[SHP_FATE_EXITED] = "exited",
                                        [SHP_FATE_RUNNING] = "running",
                                        [SHP_FATE_EXECD] = "exec",
                                        [SHP_FATE_KILLED] = "killed"};
    static const char *const reasons[] = {[SHP_OFF_NO_SPACE] = "no_space",
                                          [SHP_OFF_FD_CLOSED] = "fd_closed",
                                          [SHP_OFF_GROW] = "cannot_grow"};
    const struct shp_file_header *h = t->hdr;
    fprintf(out, ",\"ended\":\"%s\",\"switched_off\":", fates[shp_trace_fate(t, NULL, 0)]);
    if (!shp_trace_off_why(t)) {
        fprintf(out, "null");
        return;
    }
    fprintf(out, "{\"reason\":\"%s\",\"at_s\":",
            h->off_reason < sizeof(reasons) / sizeof(reasons[0]) && reasons[h->off_reason]
                ? reasons[h->off_reason]
                : "unknown");
    if (h->off_ns && h->off_ns >= h->monotonic_ns)
        fprintf(out, "%.6f", (double)(h->off_ns - h->monotonic_ns) / 1e9);
    else
        fprintf(out, "null");
    fprintf(out, ",\"calls_lost\":%" PRIu64 "}", h->calls_lost);
}

void an_report_json(struct an_ctx *ctx, FILE *out)
{
    fill_comm_ranks(ctx);
    fprintf(out, "{\"version\":1,\"processes\":[");
    for (size_t i = 0; i < ctx->nprocs; i++) {
        struct an_proc *p = &ctx->procs[i];
        fprintf(out, "%s{\"file\":", i ? "," : "");
        shp_json_str(out, p->t.path);
        fprintf(out, ",\"host\":");
        shp_json_str(out, p->t.hdr->host);
        fprintf(out, ",\"pid\":%" PRIu64 ",\"rank\":", p->t.hdr->pid);
        if (p->rank >= 0)
            fprintf(out, "%d", p->rank);
        else
            fprintf(out, "null");
        fprintf(out, ",\"events\":%" PRIu64 ",\"complete\":%s,\"dropped\":%" PRIu64, p->index,
                shp_trace_complete(&p->t, &p->cur) ? "true" : "false", p->t.hdr->dropped);
        json_fate(out, &p->t);
        fputc('}', out);
    }
    fprintf(out, "],\"comms\":[");
    for (size_t i = 0; i < ctx->ncomms; i++) {
        const struct an_comm_summary *c = &ctx->comms[i];
        fprintf(out, "%s{\"id\":\"%016" PRIx64 "\",\"nranks\":%d,\"ranks\":[", i ? "," : "", c->id,
                c->nranks);
        for (int k = 0; k < c->nmembers; k++)
            fprintf(out, "%s%d", k ? "," : "", c->ranks[k]);
        fprintf(out, "],\"collectives\":%" PRIu64 "}", c->collectives);
    }
    fprintf(out, "],\"findings\":[");
    for (size_t o = 0; o < ctx->findings.n; o++) {
        const struct an_finding *f = an_findings_nth(&ctx->findings, o);
        fprintf(out, "%s{\"kind\":\"%s\",\"severity\":\"%s\",\"comm\":", o ? "," : "",
                an_kind_names[f->kind], f->error ? "error" : "warning");
        if (f->comm)
            fprintf(out, "\"%016" PRIx64 "\"", f->comm);
        else
            fprintf(out, "null");
        if (f->seq != SHP_NONE)
            fprintf(out, ",\"seq\":%" PRIu64, f->seq);
        else
            fprintf(out, ",\"seq\":null");
        fprintf(out, ",\"ranks\":[");
        for (int i = 0; i < f->nranks; i++)
            fprintf(out, "%s%d", i ? "," : "", f->ranks[i]);
        fprintf(out, "],\"summary\":");
        shp_json_str(out, f->summary);
        fprintf(out, ",\"events\":[");
        for (int i = 0; i < f->nevents; i++) {
            if (i)
                fputc(',', out);
            json_ref(out, ctx, &f->events[i], f->has_expected ? count_of(ctx, &f->expected) : 0,
                     &f->labels[i]);
        }
        fprintf(out, "],\"lineage\":[");
        for (int i = 0; i < f->nlineage; i++) {
            if (i)
                fputc(',', out);
            json_ref(out, ctx, &f->lineage[i], 0, NULL);
        }
        fprintf(out, "],\"expected\":");
        if (f->has_expected)
            json_ref(out, ctx, &f->expected, f->nevents ? count_of(ctx, &f->events[0]) : 0, NULL);
        else
            fprintf(out, "null");
        fprintf(out, ",\"consequences\":%" PRIu64 ",\"comm_ranks\":[", f->consequences);
        for (int i = 0; i < f->nranks; i++)
            if (f->comm_ranks[i] >= 0)
                fprintf(out, "%s%d", i ? "," : "", f->comm_ranks[i]);
            else
                fprintf(out, "%snull", i ? "," : "");
        fprintf(out, "]}");
    }
    fprintf(out, "],\"unreadable\":[");
    for (size_t i = 0; i < ctx->nunreadable; i++) {
        fprintf(out, "%s{\"file\":", i ? "," : "");
        shp_json_str(out, ctx->unreadable[i].file);
        fprintf(out, ",\"error\":");
        shp_json_str(out, ctx->unreadable[i].why);
        fputc('}', out);
    }
    fprintf(out, "],\"first\":");
    /* Findings are printed in causal order, so the first is at index 0. */
    if (ctx->findings.n)
        fprintf(out, "0");
    else
        fprintf(out, "null");
    fprintf(out, "}\n");
}
