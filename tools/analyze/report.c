/* shapetrace analyze, the reporters: a result's findings in causal order, for a person (first
 * finding first, next to what the majority did, then the rest briefly, then one line) or as the
 * JSON object of docs/CONTRACTS.md. They read the result (analyze.h) and the session's traces,
 * never the passes' store. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/analyze.h"
#include "tools/lib/out.h"
#include "tools/lib/session.h"
#include "tools/lib/stacks.h"

/* One call, indented, with its site first (the first frame of the user's or the model's code:
 * the frames inside it, the frameworks' and the runtimes', are counted, not shown), then the
 * frames that called it, max_frames in all. */
static void print_call(FILE *out, const struct an_result *r, const struct an_call *c,
                       const char *indent, size_t max_frames)
{
    if (!c->ok)
        return;
    const struct shp_event *e = &c->e;
    const struct shp_proc *p = &r->session->procs[c->proc];
    if (p->rank >= 0)
        fprintf(out, "%srank %d (%s:%" PRIu64 ")  %s", indent, p->rank, p->t.hdr->host,
                p->t.hdr->pid, shp_op_name(e->op));
    else
        fprintf(out, "%s%s:%" PRIu64 "  %s", indent, p->t.hdr->host, p->t.hdr->pid,
                shp_op_name(e->op));
    if (e->count != SHP_NONE)
        fprintf(out, " count %" PRIu64 "%s%s", e->count, c->shape[0] ? " " : "", c->shape);
    if (e->dtype >= 0)
        fprintf(out, " %s", shp_dtype_name((unsigned)e->dtype));
    if (e->redop >= 0)
        fprintf(out, " %s", shp_redop_name((unsigned)e->redop));
    if (e->root >= 0)
        fprintf(out, " root %d", e->root);
    if (e->peer >= 0)
        fprintf(out, " peer %d", e->peer);
    if (e->bytes != SHP_NONE)
        fprintf(out, ", %" PRIu64 " bytes", e->bytes);
    if (e->comm && e->seq != SHP_NONE)
        fprintf(out, ", comm %.8" PRIx64 " #%" PRIu64, e->comm >> 32, e->seq);
    if (e->type == SHP_REC_COPY && e->kind >= 0 && e->kind <= 4)
        fprintf(out, " %s 0x%" PRIx64 " -> 0x%" PRIx64, shp_kind_names[e->kind], e->src, e->dst);
    if (e->dur_ns == SHP_NONE)
        fprintf(out, " [in flight]");
    else if (e->result)
        fprintf(out, " [error %d]", e->result);
    fprintf(out, "\n");
    size_t n;
    const char *const *fr = shp_session_frames(r->session, c->proc, e->stack, &n);
    size_t from = n ? shp_session_site_index(r->session, c->proc, e->stack) : 0;
    for (size_t i = from; i < n && i < from + max_frames; i++) {
        fprintf(out, "%s    %s %s", indent, i > from ? "<-" : "at", fr[i]);
        if (i == from && from)
            fprintf(out, ", past %zu framework frame%s", from, from == 1 ? "" : "s");
        fputc('\n', out);
    }
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

void an_print_text(const struct an_result *r, FILE *out, bool color)
{
    const char *bold = color ? "\033[1m" : "", *red = color ? "\033[1;31m" : "",
               *off = color ? "\033[0m" : "";
    const struct shp_session *s = r->session;
    size_t ncomm = r->ncomms;
    fprintf(out,
            "shapetrace analyze: %zu process%s, %zu communicator%s, %" PRIu64
            " collectives aligned, %" PRIu64 " events\n",
            s->nprocs, s->nprocs == 1 ? "" : "es", ncomm, ncomm == 1 ? "" : "s", r->collectives,
            r->events);
    /* Holes first: a finding-free report over missing traces or dropped calls would read as
     * clean. */
    for (size_t i = 0; i < s->nunreadable; i++)
        fprintf(out, "  %sINCOMPLETE%s: %s could not be read: %s; that process is not checked\n",
                bold, off, s->unreadable[i].file, s->unreadable[i].why);
    for (size_t i = 0; i < s->nprocs; i++) {
        const struct shp_proc *p = &s->procs[i];
        const struct an_call *last = &r->last[i];
        char where[96] = "the first drop";
        /* From where: its last recorded call (the calls dropped at a cap are the last ones). */
        if (last->ok && last->e.t_ns >= p->t.hdr->realtime_ns)
            snprintf(where, sizeof(where), "its event %" PRIu64 " (%.3f s into the trace)",
                     last->e.index, (double)(last->e.t_ns - p->t.hdr->realtime_ns) / 1e9);
        if (p->t.hdr->dropped)
            fprintf(out,
                    "  %sINCOMPLETE%s: rank %d (%s:%" PRIu64 ") dropped %" PRIu64
                    " call%s: %s; its calls after %s are not checked\n",
                    bold, off, p->rank, p->t.hdr->host, p->t.hdr->pid, p->t.hdr->dropped,
                    p->t.hdr->dropped == 1 ? "" : "s", shp_proc_incomplete_why(p), where);
    }
    for (size_t i = 0; i < s->nprocs; i++) {
        const struct shp_proc *p = &s->procs[i];
        if (!shp_proc_complete(p) && !p->t.hdr->dropped) {
            fprintf(out, "  note: rank %d (%s:%" PRIu64 "): %s; last call:", p->rank,
                    p->t.hdr->host, p->t.hdr->pid, shp_proc_incomplete_why(p));
            const struct an_call *last = &r->last[i];
            if (last->ok)
                fprintf(out, " %s%s\n", shp_op_name(last->e.op),
                        last->e.dur_ns == SHP_NONE ? " [in flight]" : "");
            else
                fprintf(out, " none\n");
        }
    }
    const struct an_values_counts *v = &r->values;
    if (v->records) {
        uint64_t skipped = v->captured + v->busy + v->lost + v->pending;
        fprintf(out,
                "  fingerprints (--values): %" PRIu64 " compared across ranks, %" PRIu64
                " of them differ",
                v->compared, v->differ);
        if (skipped)
            fprintf(out,
                    "; %" PRIu64 " not taken (%" PRIu64 " captured into a CUDA graph, %" PRIu64
                    " with every slot in flight, %" PRIu64 " lost to an error, %" PRIu64
                    " never read back)",
                    skipped, v->captured, v->busy, v->lost, v->pending);
        fputc('\n', out);
    }
    if (!r->nfindings) {
        fprintf(out,
                "\nno findings: the ranks agree on every collective and send/receive, and every "
                "read fits the shape its producer wrote.\n");
        return;
    }
    const struct an_result_finding *rf = &r->findings[0];
    const struct an_finding *first = &rf->f;
    fprintf(out, "\n%sFIRST FINDING%s  %s%s%s (%s)\n  %s\n", bold, off, red,
            an_kind_names[first->kind], off, first->error ? "error" : "warning", first->summary);
    print_comm_ranks(out, first);
    if (first->nevents) {
        fprintf(out, "  diverging call%s:\n", first->nevents > 1 ? "s" : "");
        for (int i = 0; i < first->nevents; i++) {
            if (rf->events[i].label)
                fprintf(out, "    %s:\n", rf->events[i].label);
            print_call(out, r, &rf->events[i], "    ", 4);
        }
    }
    if (first->has_expected) {
        fprintf(out, "  what the others did:\n");
        print_call(out, r, &rf->expected, "    ", 4);
    }
    if (first->nlineage) {
        fprintf(out, "  where its bytes came from (producers, nearest first):\n");
        for (int i = 0; i < first->nlineage; i++)
            print_call(out, r, &rf->lineage[i], "    ", 2);
    }
    if (first->consequences)
        fprintf(out,
                "  %" PRIu64 " later call%s on this communicator disagree%s as a "
                "consequence (not reported separately).\n",
                first->consequences, first->consequences == 1 ? "" : "s",
                first->consequences == 1 ? "s" : "");
    if (r->nfindings > 1) {
        fprintf(out, "\n%sOTHER FINDINGS%s\n", bold, off);
        for (size_t o = 1; o < r->nfindings; o++) {
            const struct an_result_finding *x = &r->findings[o];
            fprintf(out, "  %zu. %s: %s\n", o + 1, an_kind_names[x->f.kind], x->f.summary);
            if (x->f.nevents) {
                char site[512] = "";
                if (x->events[0].ok)
                    shp_session_site(r->session, x->events[0].proc, x->events[0].e.stack, site,
                                     sizeof(site));
                fprintf(out, "     at %s\n", site[0] ? site : "an unknown site");
            }
        }
    }
    size_t errors = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        errors += r->findings[i].f.error;
    char ranks[128];
    size_t off2 = 0;
    ranks[0] = 0;
    for (int i = 0; i < first->nranks && off2 < sizeof(ranks); i++)
        off2 += (size_t)snprintf(ranks + off2, sizeof(ranks) - off2, "%s%d", i ? "," : "",
                                 first->ranks[i]);
    fprintf(out, "\n%zu finding%s (%zu error%s); first: %s", r->nfindings,
            r->nfindings == 1 ? "" : "s", errors, errors == 1 ? "" : "s",
            an_kind_names[first->kind]);
    if (first->comm)
        fprintf(out, " on communicator %.8" PRIx64, first->comm >> 32);
    if (first->seq != SHP_NONE)
        fprintf(out, " #%" PRIu64, first->seq);
    if (first->nranks)
        fprintf(out, ", rank%s %s", first->nranks > 1 ? "s" : "", ranks);
    fprintf(out, "\n");
}

/* The call c as dump --json prints it, plus "shape": its count as the text report shows it,
 * null when the dims do not factor it; and, with label, "label": what the event is to the
 * finding (null for a plain diverging call). null for a reference that holds no call. */
static void json_call(FILE *out, const struct an_result *r, const struct an_call *c, bool label)
{
    if (!c->ok) {
        fputs("null", out);
        return;
    }
    struct shp_proc *p = &r->session->procs[c->proc];
    struct shp_stacks *st = shp_session_stacks(r->session, c->proc);
    struct shp_out *o = malloc(sizeof(*o));
    if (!o) {
        shp_event_json(out, &p->t, st, &c->e);
        return;
    }
    /* The event's object, with the finding's keys before its closing brace. */
    shp_out_init(o, out);
    shp_event_json_out(o, &p->t, st, &c->e);
    o->len--;
    shp_out_mem(o, ",\"shape\":", 9);
    shp_out_json_str(o, c->shape[0] ? c->shape : NULL);
    if (label) {
        shp_out_mem(o, ",\"label\":", 9);
        shp_out_json_str(o, c->label);
    }
    shp_out_char(o, '}');
    shp_out_flush(o);
    free(o);
}

/* What set the trace's cap: SHAPETRACE_MAX_MB or a resource limit of the process. */
static void json_cap(FILE *out, const struct shp_trace *t)
{
#define SHP_REASON_KEY(name, num, key, phrase) [num] = key,
    static const char *const keys[SHP_CAP_COUNT] = {SHP_CAP_REASONS(SHP_REASON_KEY)};
#undef SHP_REASON_KEY
    uint32_t r = t->hdr->cap_why < SHP_CAP_COUNT ? t->hdr->cap_why : SHP_CAP_MAX_MB;
    fprintf(out, ",\"capped_by\":\"%s\"", keys[r]);
}

/* What became of the process, and when and why tracing switched itself off. */
static void json_fate(FILE *out, const struct shp_proc *p)
{
    static const char *const fates[] = {[SHP_FATE_EXITED] = "exited",
                                        [SHP_FATE_RUNNING] = "running",
                                        [SHP_FATE_EXECD] = "exec",
                                        [SHP_FATE_KILLED] = "killed"};
#define SHP_REASON_KEY(name, num, key, phrase) [num] = key,
    static const char *const reasons[SHP_OFF_COUNT] = {SHP_OFF_REASONS(SHP_REASON_KEY)};
#undef SHP_REASON_KEY
    const struct shp_file_header *h = p->t.hdr;
    fprintf(out, ",\"ended\":\"%s\",\"switched_off\":", fates[shp_proc_fate(p)]);
    if (!shp_trace_off_why(&p->t)) {
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

void an_print_json(const struct an_result *r, FILE *out)
{
    const struct shp_session *s = r->session;
    fprintf(out, "{\"version\":1,\"processes\":[");
    for (size_t i = 0; i < s->nprocs; i++) {
        const struct shp_proc *p = &s->procs[i];
        fprintf(out, "%s{\"file\":", i ? "," : "");
        shp_json_str(out, p->t.path);
        fprintf(out, ",\"host\":");
        shp_json_str(out, p->t.hdr->host);
        fprintf(out, ",\"pid\":%" PRIu64 ",\"rank\":", p->t.hdr->pid);
        if (p->rank >= 0)
            fprintf(out, "%d", p->rank);
        else
            fprintf(out, "null");
        fprintf(out, ",\"events\":%" PRIu64 ",\"complete\":%s,\"dropped\":%" PRIu64, p->events,
                shp_proc_complete(p) ? "true" : "false", p->t.hdr->dropped);
        json_cap(out, &p->t);
        json_fate(out, p);
        fputc('}', out);
    }
    fprintf(out, "],\"comms\":[");
    for (size_t i = 0; i < r->ncomms; i++) {
        const struct an_comm_summary *c = &r->comms[i];
        fprintf(out, "%s{\"id\":\"%016" PRIx64 "\",\"nranks\":%d,\"ranks\":[", i ? "," : "", c->id,
                c->nranks);
        for (int k = 0; k < c->nmembers; k++)
            fprintf(out, "%s%d", k ? "," : "", c->ranks[k]);
        fprintf(out, "],\"collectives\":%" PRIu64 "}", c->collectives);
    }
    fprintf(out, "],\"findings\":[");
    for (size_t o = 0; o < r->nfindings; o++) {
        const struct an_result_finding *rf = &r->findings[o];
        const struct an_finding *f = &rf->f;
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
            json_call(out, r, &rf->events[i], true);
        }
        fprintf(out, "],\"lineage\":[");
        for (int i = 0; i < f->nlineage; i++) {
            if (i)
                fputc(',', out);
            json_call(out, r, &rf->lineage[i], false);
        }
        fprintf(out, "],\"expected\":");
        if (f->has_expected)
            json_call(out, r, &rf->expected, false);
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
    for (size_t i = 0; i < s->nunreadable; i++) {
        fprintf(out, "%s{\"file\":", i ? "," : "");
        shp_json_str(out, s->unreadable[i].file);
        fprintf(out, ",\"error\":");
        shp_json_str(out, s->unreadable[i].why);
        fputc('}', out);
    }
    fprintf(out, "],");
    const struct an_values_counts *v = &r->values;
    if (v->records)
        fprintf(out,
                "\"values\":{\"records\":%" PRIu64 ",\"compared\":%" PRIu64 ",\"differ\":%" PRIu64
                ",\"captured\":%" PRIu64 ",\"busy\":%" PRIu64 ",\"lost\":%" PRIu64
                ",\"pending\":%" PRIu64 "},",
                v->records, v->compared, v->differ, v->captured, v->busy, v->lost, v->pending);
    /* The findings are in causal order, so the first is at index 0. */
    fprintf(out, "\"first\":%s}\n", r->nfindings ? "0" : "null");
}
