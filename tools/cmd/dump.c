/* shapetrace dump: print traces, as a table for a person or as JSON Lines for programs (the keys
 * are a contract: see docs/CONTRACTS.md). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"
#include "tools/lib/event.h"
#include "tools/lib/out.h"
#include "tools/lib/reader.h"
#include "tools/lib/session.h"
#include "tools/lib/site.h"
#include "tools/lib/stacks.h"
#include "tools/lib/value.h"

/* dump's options (tools/cmd/options.h). */
/* clang-format off */
#define DUMP_OPTIONS(X) \
X(OPT_JSON, "json", 0, NULL, "JSON Lines, one event per line (keys in docs/CONTRACTS.md)") \
X(OPT_NO_STACKS, "no-stacks", 0, NULL, "leave call sites out (faster on large traces)") \
SHP_SITE_SKIP_OPTION(X)
/* clang-format on */
SHP_OPTS_ROWS(dump_rows, DUMP_OPTIONS);
static const struct shp_opts dump_opts = {
    .cmd = "dump",
    .synopsis =
        "usage: shapetrace dump [--json] [--no-stacks] [--site-skip GLOB]... PATH...\n"
        "\n"
        "Prints every event of the traces in PATH (trace files or run directories), each\n"
        "with its call site: the first frame of the application's or the model's own code.\n",
    .epilogue =
        "A file of a directory that is not a readable trace is named on stderr and skipped.\n"
        "Exit status: 0, or 2 when a PATH is not a readable trace (the others are still\n"
        "printed).\n",
    .v = dump_rows,
    .n = SHP_OPTS_N(dump_rows),
};

static void fmt_count(char *buf, size_t len, uint64_t v)
{
    if (v == SHP_NONE)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%" PRIu64, v);
}

static void print_row(FILE *f, struct shp_stacks *st, const struct shp_event *e, uint64_t t0)
{
    char when[32], what[96], count[32], bytes[32], bufs[80];
    snprintf(when, sizeof(when), "%.6f", (double)(e->t_ns - t0) / 1e9);
    what[0] = bufs[0] = 0;
    fmt_count(count, sizeof(count), e->count);
    fmt_count(bytes, sizeof(bytes), e->bytes);
    const char *op = e->mark ? "mark" : shp_op_name(e->op);
    switch (e->type) {
    case SHP_REC_COLL:
    case SHP_REC_P2P:
        /* A call made with a NULL communicator has no seq (and no communicator). */
        if (e->seq == SHP_NONE)
            snprintf(what, sizeof(what), "comm %.8" PRIx64 " r%d/%d seq -", e->comm >> 32,
                     e->comm_rank, e->nranks);
        else
            snprintf(what, sizeof(what), "comm %.8" PRIx64 " r%d/%d seq %" PRIu64, e->comm >> 32,
                     e->comm_rank, e->nranks, e->seq);
        if (e->peer >= 0)
            snprintf(what + strlen(what), sizeof(what) - strlen(what), " peer %d", e->peer);
        if (e->root >= 0)
            snprintf(what + strlen(what), sizeof(what) - strlen(what), " root %d", e->root);
        snprintf(bufs, sizeof(bufs), "%s %s", shp_dtype_name((unsigned)e->dtype),
                 e->redop >= 0 ? shp_redop_name((unsigned)e->redop) : "");
        break;
    case SHP_REC_COPY:
        snprintf(what, sizeof(what), "%s 0x%" PRIx64 " -> 0x%" PRIx64,
                 e->kind >= 0 && e->kind <= 4 ? shp_kind_names[e->kind] : "?", e->src, e->dst);
        if (e->height != 1)
            snprintf(bufs, sizeof(bufs), "2D %" PRIu64 "x%" PRIu64 " pitch %" PRIu64 "/%" PRIu64,
                     e->height, e->width, e->spitch, e->dpitch);
        break;
    case SHP_REC_COMM:
        snprintf(what, sizeof(what), "comm %.8" PRIx64 " %s r%d/%d", e->comm >> 32,
                 shp_comm_kind_names[e->comm_kind < 7 ? e->comm_kind : 0], e->comm_rank, e->nranks);
        if (e->parent != SHP_NONE)
            snprintf(bufs, sizeof(bufs), "parent %.8" PRIx64, e->parent >> 32);
        break;
    case SHP_REC_ALLOC:
        snprintf(what, sizeof(what), "ptr 0x%" PRIx64, e->ptr);
        break;
    case SHP_REC_GRAPH:
        /* What links a capture to its replays: capture -> graph -> exec -> launch. */
        if (e->cls == SHP_CLS_GRAPH)
            snprintf(what, sizeof(what), "graph 0x%" PRIx64 " -> exec 0x%" PRIx64, e->graph,
                     e->exec);
        else if (e->cls == SHP_CLS_LAUNCH)
            snprintf(what, sizeof(what), "exec 0x%" PRIx64 " stream 0x%" PRIx64, e->exec,
                     e->stream);
        else if (e->graph != SHP_NONE)
            snprintf(what, sizeof(what),
                     "stream 0x%" PRIx64 " capture %" PRIu64 " -> graph 0x%" PRIx64, e->stream,
                     e->capture, e->graph);
        else
            snprintf(what, sizeof(what), "stream 0x%" PRIx64 " capture %" PRId64, e->stream,
                     e->capture == SHP_NONE ? (int64_t)-1 : (int64_t)e->capture);
        break;
    case SHP_REC_MARK:
        snprintf(what, sizeof(what), "%s", e->mark);
        break;
    default:
        break;
    }
    char site[512];
    shp_stacks_site(st, e->stack, site, sizeof(site));
    char status[24] = "";
    if (e->dur_ns == SHP_NONE && !e->mark)
        snprintf(status, sizeof(status), " [in flight]");
    else if (e->result != 0)
        snprintf(status, sizeof(status), " [error %d]", e->result);
    fprintf(f, "%6" PRIu64 " %11s %7u %-24s %-40s %10s %-10s %11s %s%s%s%s\n", e->index, when,
            e->tid, op, what, count, bufs, bytes, e->flags & SHP_EV_CAPTURED ? "[captured] " : "",
            site, status, "");
}

/* A value record (--values), under the call it is the fingerprint of: no index of its own. */
static void print_value_row(FILE *f, struct shp_stacks *st, const struct shp_value *v, uint64_t of,
                            uint64_t t0)
{
    char when[32], what[96], site[512], ofs[24] = "?", occ[24] = "";
    snprintf(when, sizeof(when), "%.6f", (double)(v->t_ns - t0) / 1e9);
    if (of != SHP_NONE)
        snprintf(ofs, sizeof(ofs), "%" PRIu64, of);
    if (v->status == SHP_VALUE_DONE)
        snprintf(what, sizeof(what), "of #%s: 0x%016" PRIx64 " (%s)", ofs, v->fp,
                 v->how == SHP_VALUE_HOST ? "host" : "device");
    else
        snprintf(what, sizeof(what), "of #%s: %s", ofs, shp_value_status_name(v->status));
    if (v->what == SHP_VALUE_COPIED)
        snprintf(occ, sizeof(occ), "copy %" PRIu64, v->occ);
    shp_stacks_site(st, v->stack, site, sizeof(site));
    fprintf(f, "%6s %11s %7s %-24s %-40s %10s %-10s %11" PRIu64 " %s\n", "-", when, "", "value",
            what, "-", occ, v->bytes, site);
}

static void dump_one(struct shp_out *o, struct shp_session *s, size_t i, bool json)
{
    struct shp_proc *p = &s->procs[i];
    const struct shp_trace *t = &p->t;
    struct shp_stacks *st = shp_session_stacks(s, i);
    struct shp_cursor cur = {0};
    uint64_t index = 0, t0 = 0;
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    if (!json)
        fprintf(stdout,
                "== %s\n   host %s  pid %" PRIu64 "  rank %d  exe %s\n"
                "%6s %11s %7s %-24s %-40s %10s %-10s %11s %s\n",
                t->path, t->hdr->host, t->hdr->pid, p->rank, t->hdr->exe, "index", "t(s)", "tid",
                "op", "what", "count", "dtype", "bytes", "site");
    /* Value records name their call by its offset: the recent calls' indices, for them. */
    struct shp_value_recent *recent =
        shp_trace_version_values(t->hdr->version) ? calloc(1, sizeof(*recent)) : NULL;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e)) {
            struct shp_value v;
            if (!shp_value_decode(t, r, type, &v))
                continue;
            uint64_t of = recent ? shp_value_recent_find(recent, v.call) : SHP_NONE;
            if (json) {
                shp_value_json_out(o, t, &v, of);
                shp_out_char(o, '\n');
            } else {
                print_value_row(stdout, st, &v, of, t0);
            }
            continue;
        }
        e.index = index++;
        if (recent)
            shp_value_recent_note(recent, (uint64_t)((const unsigned char *)r - t->map), e.index);
        if (!t0)
            t0 = e.t_ns;
        shp_proc_saw(p, &e);
        if (json) {
            shp_event_json_out(o, t, st, &e);
            shp_out_char(o, '\n');
        } else {
            print_row(stdout, st, &e, t0);
        }
    }
    shp_out_flush(o);
    shp_proc_walked(p, &cur, index);
    bool complete = shp_proc_complete(p);
    const struct shp_file_header *h = t->hdr;
    if (!json) {
        fprintf(stdout, "   %" PRIu64 " events; %s", index, complete ? "complete" : "INCOMPLETE");
        if (!complete)
            fprintf(stdout, " (%s)", shp_proc_incomplete_why(p));
        if (p->torn)
            fprintf(stdout, "; %" PRIu64 " torn record%s skipped", p->torn,
                    p->torn == 1 ? "" : "s");
        if (h->dropped)
            fprintf(stdout, "; %" PRIu64 " records DROPPED%s", h->dropped,
                    h->flags & SHP_FILE_DISABLED ? "" : " at the cap");
        fputc('\n', stdout);
    }
    if (!complete)
        fprintf(stderr, "shapetrace: %s: incomplete trace: %s%s\n", t->path,
                shp_proc_incomplete_why(p), h->dropped ? "; records were dropped" : "");
    free(recent);
    /* Done with it: a dump of thousands of traces holds one at a time. */
    shp_session_release(s, i);
}

int shp_cmd_dump(int argc, char **argv)
{
    struct shp_optparse p;
    bool json = false, stacks = true;
    struct shp_site_rule rule = {0};
    struct shp_out *o = NULL;
    int c, status = SHP_EXIT_USAGE;
    if (shp_cmd_site_env(&rule) < 0)
        goto out;
    shp_opts_begin(&p, &dump_opts);
    while ((c = shp_opts_next(&p, argc, argv)) >= 0) {
        if (c == OPT_JSON) {
            json = true;
        } else if (c == OPT_NO_STACKS) {
            stacks = false;
        } else if (c == OPT_SITE_SKIP) {
            if (shp_cmd_site_skip(&rule, "dump", p.arg) < 0)
                goto out;
        }
    }
    if (c == SHP_OPT_STOP) {
        status = p.status;
        goto out;
    }
    if (optind >= argc) {
        status = shp_usage_error("dump", "no trace given");
        goto out;
    }
    /* One writer for every trace: JSON lines go through it, the table through printf. */
    o = malloc(sizeof(*o));
    if (!o) {
        shp_err("out of memory");
        goto out;
    }
    shp_out_init(o, stdout);
    /* A PATH that is not a readable trace is refused, but the others are still printed. The
     * traces of one run are mostly the same programs: the session symbolizes their modules
     * once. */
    struct shp_session s;
    int rc = shp_session_open(&s, argv + optind, argc - optind,
                              SHP_SESSION_PARTIAL | (stacks ? 0 : SHP_SESSION_RAW), "the dump");
    s.site = &rule;
    for (size_t i = 0; rc >= 0 && i < s.nprocs; i++)
        dump_one(o, &s, i, json);
    shp_session_close(&s);
    status = rc == 0 ? SHP_EXIT_OK : SHP_EXIT_USAGE;
out:
    free(o);
    shp_site_rule_free(&rule);
    return status;
}
