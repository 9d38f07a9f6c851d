/* shapetrace render: the analysis as one self-contained HTML page (inline CSS, JavaScript and
 * SVG; nothing fetched when it is opened), the thing a user attaches to a bug report (page.h).
 * Every text that comes from a trace goes through html_text(), and none is placed inside the
 * script. The traces are read through the timeline's walk: its scan fills the grid, and its
 * drawing, through the SVG backend below, the timeline's rows. */
#define _GNU_SOURCE
#include "tools/render/page.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "tools/analyze/analyze.h"
#include "tools/lib/event.h"
#include "tools/lib/out.h"
#include "tools/lib/session.h"
#include "tools/lib/stacks.h"
#include "tools/lib/version.h"
#include "tools/render/timeline.h"

#define GRID_HALF 6   /* collectives shown on each side of the focus */
#define NEAR_RANKS 4  /* ranks shown on each side of a culprit when there are many */
#define MANY_RANKS 32 /* above this many, far ranks start folded */
#define TL_WIDTH 1000 /* timeline drawing width, px */
#define TL_LABEL 150

struct cell {
    bool has;
    unsigned op;
    uint64_t count, t0, t1, index;
    int dtype;
    uint32_t stack;
    bool in_flight;
};

/* One process of the page: the session's description, and what the drawing keeps of it. */
struct rproc {
    struct shp_proc *sp; /* the session's: trace, rank, events, time span, completeness */
    size_t si;           /* its index in the session */
    struct shp_event last;
    bool has_last;
    struct cell *cells; /* grid columns, when this process is a member of the focus comm */
    bool member;
    bool culprit, near;
};

struct shp_page {
    struct shp_session *session;
    const struct shp_page_options *o;
    struct shp_tl *tl;
    struct shp_tl_options to;
    const struct shp_tl_proc *base; /* the walk's processes, in rank order */
    struct rproc *procs;            /* beside them */
    size_t nprocs;
    const struct an_result *report;
    const struct an_result_finding *first; /* the finding the page is drawn around */
    size_t focus_index;                    /* its index in the result's findings */
    /* the grid */
    uint64_t comm, seq;
    bool has_focus;
    bool own_focus;      /* the focus is the finding's own collective (else one of its chain) */
    uint64_t s_lo, s_hi; /* columns: [s_lo, s_hi] */
    uint64_t seq_max;    /* the highest seq any member made on the focus communicator */
    size_t ncol;
    /* the timeline */
    uint64_t w0, w1, t0, tend;
    FILE *f;
    bool oom;
};

/* ---- HTML text ---- */

static void html_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t')
                fputc('?', f);
            else
                fputc(*s, f);
        }
    }
}

/* A text the analysis made of the traces' texts (a summary, a frame), as analyze --json shows
 * it: a byte that starts no valid UTF-8 sequence is U+FFFD. */
static void html_utf8(FILE *f, const char *s)
{
    char *clean = s ? shp_utf8_dup(s) : NULL;
    html_text(f, clean ? clean : s);
    free(clean);
}

static void html_fmt(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void html_fmt(FILE *f, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    html_text(f, buf);
}

/* 11053056 -> "11,053,056" */
static void thousands(char *out, size_t len, uint64_t v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v), o = 0;
    for (int i = 0; i < n && (size_t)o + 2 < len; i++) {
        if (i && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = tmp[i];
    }
    out[o] = 0;
}

static const char *short_op(unsigned op)
{
    const char *n = shp_op_name(op);
    return strncmp(n, "nccl", 4) ? n : n + 4;
}

/* ---- reading the traces ---- */

static struct rproc *proc_by_rank(struct shp_page *r, long long rank)
{
    for (size_t i = 0; i < r->nprocs; i++)
        if (r->procs[i].sp->rank == rank)
            return &r->procs[i];
    return NULL;
}

/* The scan's share of the page: each process's last call and the grid's cells. */
static void page_scan(void *arg, const struct shp_tl_proc *tp, const struct shp_event *e)
{
    struct shp_page *r = arg;
    struct rproc *p = &r->procs[tp - r->base];
    uint64_t end = e->dur_ns == SHP_NONE ? e->t_ns : e->t_ns + e->dur_ns;
    if (!e->mark) {
        p->last = *e;
        p->has_last = true;
    }
    if (p->cells && e->type == SHP_REC_COLL && e->comm == r->comm && e->seq != SHP_NONE &&
        e->seq > r->seq_max)
        r->seq_max = e->seq;
    if (p->cells && e->type == SHP_REC_COLL && e->comm == r->comm && e->seq >= r->s_lo &&
        e->seq <= r->s_hi) {
        struct cell *c = &p->cells[e->seq - r->s_lo];
        *c = (struct cell){true,     e->op,    e->count,
                           e->t_ns,  end,      e->index,
                           e->dtype, e->stack, e->dur_ns == SHP_NONE};
    }
}

/* The global rank of the process of a call the analysis named, -1 when there is none. */
static int call_rank(const struct shp_page *r, const struct an_call *c)
{
    return c->ok ? r->session->procs[c->proc].rank : -1;
}

/* ---- the focus: which communicator and collective the grid is drawn around ---- */

static bool event_focus(const struct an_call *ev, uint64_t *comm, uint64_t *seq)
{
    const char *op = ev->ok ? (ev->e.mark ? "mark" : shp_op_name(ev->e.op)) : "";
    if (!ev->ok || !ev->e.comm || ev->e.seq == SHP_NONE || !strncmp(op, "ncclSend", 8) ||
        !strncmp(op, "ncclRecv", 8))
        return false;
    *comm = ev->e.comm;
    *seq = ev->e.seq;
    return true;
}

static void pick_focus(struct shp_page *r)
{
    const struct an_result_finding *f = r->first;
    if (!f)
        return;
    for (int k = 0; k < f->f.nranks; k++) {
        struct rproc *p = proc_by_rank(r, f->f.ranks[k]);
        if (p)
            p->culprit = true;
    }
    if (f->f.comm && f->f.seq != SHP_NONE && strncmp(an_kind_names[f->f.kind], "p2p", 3)) {
        r->comm = f->f.comm;
        r->seq = f->f.seq;
        r->has_focus = r->own_focus = true;
    } else {
        /* A lineage finding: around the collective that its bytes went through. */
        for (int i = 0; i < f->f.nlineage && !r->has_focus; i++)
            r->has_focus = event_focus(&f->lineage[i], &r->comm, &r->seq);
        for (int i = 0; i < f->f.nevents && !r->has_focus; i++)
            r->has_focus = event_focus(&f->events[i], &r->comm, &r->seq);
    }
    if (!r->has_focus)
        return;
    r->s_lo = r->seq > GRID_HALF ? r->seq - GRID_HALF : 0;
    r->s_hi = r->seq + GRID_HALF;
    /* Members: the analysis's list of the communicator's global ranks. */
    for (size_t i = 0; i < r->report->ncomms; i++) {
        const struct an_comm_summary *cm = &r->report->comms[i];
        if (cm->id != r->comm)
            continue;
        for (int k = 0; k < cm->nmembers; k++) {
            struct rproc *p = proc_by_rank(r, cm->ranks[k]);
            if (p)
                p->member = true;
        }
    }
}

/* Ranks near a culprit (or near any finding event's rank) stay unfolded. */
static void mark_near(struct shp_page *r)
{
    for (size_t i = 0; i < r->nprocs; i++) {
        struct rproc *p = &r->procs[i];
        if (!p->culprit)
            continue;
        for (size_t k = i > NEAR_RANKS ? i - NEAR_RANKS : 0; k < r->nprocs && k <= i + NEAR_RANKS;
             k++)
            r->procs[k].near = true;
    }
    for (int j = 0; r->first && j < r->first->f.nevents; j++) {
        struct rproc *p = proc_by_rank(r, call_rank(r, &r->first->events[j]));
        if (p)
            p->near = true;
    }
    if (r->nprocs <= MANY_RANKS)
        for (size_t i = 0; i < r->nprocs; i++)
            r->procs[i].near = true;
}

/* ---- the page ---- */

static const char *css =
    "body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1240px;padding:0 16px 40px;"
    "color:#1d232b;background:#fbfbfc}"
    "h1{font-size:22px;margin:18px 0 2px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px "
    "solid #d8dde3;padding-bottom:3px}.sub{color:#5b6570;margin:0 0 10px}"
    "code,pre,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}"
    ".finding{border-left:5px solid #c62828;background:#fff;padding:10px 14px;"
    "box-shadow:0 1px 2px #0002}.finding.warning{border-color:#e69500}"
    ".kind{font-weight:700;color:#c62828}.warning .kind{color:#a66b00}"
    ".summary{font-size:16px;margin:6px 0}"
    "table{border-collapse:collapse;background:#fff}td,th{border:1px solid #dde2e7;padding:2px "
    "6px;text-align:left;vertical-align:top}th{background:#eef1f4;font-weight:600}"
    ".frames{margin:2px 0 6px 14px;padding:0;list-style:none}.frames li.py{color:#0b5394}"
    "#grid td{font-family:ui-monospace,monospace;font-size:11.5px;white-space:nowrap;"
    "text-align:center}#grid td.ok{background:#eef7ee}#grid td.diverge{background:#ffd9d3;"
    "font-weight:700}#grid td.culprit{background:#e53935;color:#fff;font-weight:700;outline:2px "
    "solid #7f0000}#grid td.missing{background:#ffeec2;color:#8a5a00}#grid td.none{color:#aaa}"
    "#grid td.culprit.missing{background:#e53935;color:#fff}#grid "
    "th.focus{background:#ffe0b2}#grid td.chain{outline:2px solid #1565c0}"
    "tr.far.folded{display:none}button{font:inherit;margin:6px 0;padding:2px 10px}"
    ".scroll{overflow-x:auto}svg text{font:11px system-ui,sans-serif}"
    ".c-collective{fill:#5c8fd6}.c-p2p{fill:#8e6bc9}.c-copy{fill:#55a868}.c-memory{fill:#c0c4c9}"
    ".c-other{fill:#d1a35c}.hit{stroke:#b71c1c;stroke-width:2.5}.inflight{fill-opacity:.45;"
    "stroke:#333;stroke-dasharray:3 2}.box{fill:#fff;stroke:#6b7785}.box.consumer{stroke:#c62828;"
    "stroke-width:2.5}.box.origin{stroke:#1565c0}.arrow{stroke:#444;stroke-width:1.6;"
    "marker-end:url(#ah)}svg text.mono{font:11px ui-monospace,monospace}.legend "
    "span{display:inline-block;width:11px;height:11px;margin:0 4px "
    "0 12px;vertical-align:-1px}#js-errors{color:#b71c1c;white-space:pre-wrap}"
    "#detail{position:fixed;right:12px;bottom:12px;max-width:420px;background:#fff;border:1px "
    "solid #99a;padding:6px 10px;box-shadow:0 2px 8px #0003;display:none}"
    ".incomplete{color:#b71c1c;font-weight:700}";

/* Runs before anything else, so that an error anywhere later is caught and shown. */
static const char *js_head =
    "window.shpErrors=0;window.onerror=function(m,s,l,c){var x=document.getElementById("
    "'js-errors');window.shpErrors++;if(x){x.hidden=false;x.textContent+='JavaScript error: '+m+"
    "' (line '+l+':'+c+')\\n';}};";

static const char *js_body =
    "(function(){var t0=performance.now();"
    "var b=document.getElementById('unfold');if(b){b.onclick=function(){var rs=document."
    "querySelectorAll('tr.far');var f=rs.length&&rs[0].classList.contains('folded');"
    "for(var i=0;i<rs.length;i++)rs[i].classList.toggle('folded',!f);b.textContent=f?"
    "'fold the other ranks':b.getAttribute('data-label');};}"
    "var q=document.getElementById('proc-filter');if(q){q.oninput=function(){var v=q.value."
    "toLowerCase(),rs=document.querySelectorAll('#procs tbody tr');for(var i=0;i<rs.length;i++)"
    "rs[i].hidden=v&&rs[i].textContent.toLowerCase().indexOf(v)<0;};}"
    "var d=document.getElementById('detail');document.addEventListener('click',function(ev){"
    "var e=ev.target.closest?ev.target.closest('[data-d]'):null;if(!e){d.style.display='none';"
    "return;}d.textContent=e.getAttribute('data-d');d.style.display='block';});"
    "document.body.setAttribute('data-js','ran');document.body.setAttribute('data-setup-ms',"
    "String(Math.round(performance.now()-t0)));"
    "window.addEventListener('load',function(){document.body.setAttribute('data-load-ms',"
    "String(Math.round(performance.now())));});})();";

#define SHOWN_FRAMES 3

static void frame_item(FILE *f, const char *s, bool first)
{
    fprintf(f, "<li%s>%s ", strncmp(s, "py: ", 4) ? "" : " class=\"py\"", first ? "at" : "&larr;");
    html_utf8(f, s);
    fputs("</li>", f);
}

/* The frames of a call the analysis named; *n 0 when it has none. */
static const char *const *call_frames(const struct shp_page *r, const struct an_call *ev, size_t *n)
{
    *n = 0;
    return ev->ok ? shp_session_frames(r->session, ev->proc, ev->e.stack, n) : NULL;
}

/* A call's frames: its site first (the first frame of the user's or the model's code), then the
 * frames that called it, the first few shown and the rest folded; the framework frames inside the
 * site folded apart, with their number. */
static void frames_list(const struct shp_page *r, FILE *f, const struct an_call *ev)
{
    size_t n;
    const char *const *stack = call_frames(r, ev, &n);
    if (!n)
        return;
    size_t site = shp_session_site_index(r->session, ev->proc, ev->e.stack);
    fputs("<ul class=\"frames mono\">", f);
    for (size_t i = site, shown = 0; i < n; i++, shown++) {
        if (shown == SHOWN_FRAMES)
            fputs("</ul><details><summary>more frames</summary><ul class=\"frames mono\">", f);
        frame_item(f, stack[i], i == site);
    }
    fputs(n - site > SHOWN_FRAMES ? "</ul></details>" : "</ul>", f);
    if (!site)
        return;
    fprintf(f,
            "<details class=\"framework\"><summary>past %zu framework frame%s</summary>"
            "<ul class=\"frames mono\">",
            site, site == 1 ? "" : "s");
    for (size_t i = 0; i < site; i++)
        frame_item(f, stack[i], i == 0);
    fputs("</ul></details>", f);
}

static void call_line(const struct shp_page *r, FILE *f, const struct an_call *ev)
{
    const struct shp_event *e = &ev->e;
    char bytes[32] = "";
    if (ev->ok && e->bytes != SHP_NONE)
        thousands(bytes, sizeof(bytes), e->bytes);
    fputs("<div class=\"mono\"><b>", f);
    html_fmt(f, "rank %d", call_rank(r, ev));
    fputs("</b> ", f);
    if (!ev->ok) {
        fputs("?</div>", f);
        return;
    }
    html_text(f, e->mark ? "mark" : shp_op_name(e->op));
    if (e->count != SHP_NONE)
        html_fmt(f, " count %" PRIu64, e->count);
    if (e->dtype >= 0)
        html_fmt(f, " %s", shp_dtype_name((unsigned)e->dtype));
    if (*bytes)
        html_fmt(f, ", %s bytes", bytes);
    if (e->kind >= 0 && e->kind <= 4)
        html_fmt(f, " %s", shp_kind_names[e->kind]);
    if (e->comm && e->seq != SHP_NONE)
        html_fmt(f, ", comm %.8" PRIx64 " #%" PRIu64, e->comm >> 32, e->seq);
    if (e->peer >= 0)
        html_fmt(f, " peer %d", e->peer);
    if (e->dur_ns == SHP_NONE)
        fputs(" <span class=\"incomplete\">[in flight]</span>", f);
    else if (e->result != 0)
        fprintf(f, " <span class=\"incomplete\">[error %d]</span>", e->result);
    fputs("</div>", f);
}

static void ranks_text(char *out, size_t len, const struct an_finding *f)
{
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < f->nranks; i++) {
        if (o + 16 >= len)
            break;
        o += (size_t)snprintf(out + o, len - o, "%s%d", i ? ", " : "", f->ranks[i]);
    }
}

static void section_first(struct shp_page *r)
{
    FILE *f = r->f;
    const struct an_result_finding *rf = r->first;
    if (r->focus_index)
        fprintf(f, "<h2>Finding %zu</h2>", r->focus_index + 1);
    else
        fputs("<h2>First finding</h2>", f);
    if (!rf) {
        fputs("<div class=\"finding ok\" id=\"first-finding\"><p class=\"summary\">No findings: "
              "the ranks agree on every collective and send/receive, and every read fits the "
              "shape its producer wrote.</p></div>",
              f);
        return;
    }
    const struct an_finding *first = &rf->f;
    const char *sev = first->error ? "error" : "warning";
    char ranks[256];
    ranks_text(ranks, sizeof(ranks), first);
    fprintf(f, "<div class=\"finding %s\" id=\"first-finding\"><div><span class=\"kind\">", sev);
    html_text(f, an_kind_names[first->kind]);
    fputs("</span> (", f);
    html_text(f, sev);
    fputs(")", f);
    if (*ranks)
        html_fmt(f, " on rank%s %s", strchr(ranks, ',') ? "s" : "", ranks);
    if (first->comm)
        html_fmt(f, ", communicator %.8" PRIx64, first->comm >> 32);
    if (first->seq != SHP_NONE)
        html_fmt(f, ", collective #%" PRIu64, first->seq);
    fputs("</div><p class=\"summary\" id=\"first-summary\">", f);
    html_utf8(f, first->summary);
    fputs("</p>", f);
    if (first->nevents) {
        fprintf(f, "<h3>The diverging call%s</h3>", first->nevents > 1 ? "s" : "");
        for (int i = 0; i < first->nevents; i++) {
            /* What the call is to the finding ("the call NCCL refused"), as the text says. */
            if (rf->events[i].label) {
                fputs("<div class=\"sub\">", f);
                html_text(f, rf->events[i].label);
                fputs(":</div>", f);
            }
            call_line(r, f, &rf->events[i]);
            frames_list(r, f, &rf->events[i]);
        }
    }
    if (first->has_expected && rf->expected.ok) {
        fputs("<h3>What the peers did</h3>", f);
        call_line(r, f, &rf->expected);
        frames_list(r, f, &rf->expected);
    }
    uint64_t cons = first->consequences;
    if (cons > 0)
        html_fmt(f, "%" PRIu64 " later call%s on this communicator disagree%s as a consequence.",
                 cons, cons == 1 ? "" : "s", cons == 1 ? "s" : "");
    fputs("</div>", f);
}

static void cell_detail(const struct shp_page *r, char *out, size_t len, const struct rproc *p,
                        const struct cell *c, uint64_t seq)
{
    char site[300];
    shp_stacks_site(shp_session_stacks(r->session, p->si), c->stack, site, sizeof(site));
    snprintf(out, len, "rank %d #%" PRIu64 ": %s count %" PRIu64 " %s%s, index %" PRIu64 "%s%s",
             p->sp->rank, seq, shp_op_name(c->op), c->count,
             c->dtype >= 0 ? shp_dtype_name((unsigned)c->dtype) : "",
             c->in_flight ? " [in flight]" : "", c->index, *site ? " at " : "", site);
}

/* Whether the call at `index` of p's trace is one of the first finding's own calls (lineage
 * false) or of its producers (lineage true). */
static bool listed(const struct shp_page *r, bool lineage, const struct rproc *p, uint64_t index)
{
    const struct an_result_finding *f = r->first;
    int n = !f ? 0 : lineage ? f->f.nlineage : f->f.nevents;
    for (int i = 0; i < n; i++) {
        const struct an_call *c = lineage ? &f->lineage[i] : &f->events[i];
        if (c->ok && c->proc == p->si && c->e.index == index)
            return true;
    }
    return false;
}

static void section_grid(struct shp_page *r)
{
    FILE *f = r->f;
    fputs("<h2>Ranks &times; collectives</h2>", f);
    if (!r->has_focus) {
        fputs("<p id=\"grid-none\">This finding involves no collective, so there is no grid of "
              "ranks &times; collectives.</p>",
              f);
        return;
    }
    /* Columns past the last collective anyone made stay out, but the focus stays in. */
    uint64_t last = r->seq_max > r->seq ? r->seq_max : r->seq;
    size_t ncol = (size_t)((last < r->s_hi ? last : r->s_hi) - r->s_lo + 1);
    size_t members = 0, folded = 0;
    for (size_t i = 0; i < r->nprocs; i++) {
        members += r->procs[i].member;
        folded += r->procs[i].member && !r->procs[i].near;
    }
    /* The majority call of each column: the cells that differ from it are marked. */
    struct cell *maj = calloc(ncol, sizeof(*maj));
    size_t *last_col = calloc(ncol, sizeof(size_t));
    if (!maj || !last_col) {
        free(maj), free(last_col);
        return;
    }
    bool any_col = false;
    for (size_t c = 0; c < ncol; c++) {
        size_t best = 0;
        for (size_t i = 0; i < r->nprocs; i++) {
            const struct rproc *p = &r->procs[i];
            if (!p->cells || !p->cells[c].has)
                continue;
            size_t votes = 0;
            /* Boyer-Moore would do, but columns are short and this is exact. */
            for (size_t k = 0; k < r->nprocs && votes <= members / 2; k++) {
                const struct rproc *q = &r->procs[k];
                votes += q->cells && q->cells[c].has && q->cells[c].op == p->cells[c].op &&
                         q->cells[c].count == p->cells[c].count &&
                         q->cells[c].dtype == p->cells[c].dtype;
            }
            if (votes > best) {
                best = votes;
                maj[c] = p->cells[c];
            }
            if (votes > members / 2)
                break;
        }
        last_col[c] = best;
        any_col |= best > 0;
    }
    html_fmt(
        f, "Communicator %016" PRIx64 ", %zu member%s, collectives #%" PRIu64 " to #%" PRIu64 ". ",
        r->comm, members, members == 1 ? "" : "s", r->s_lo, r->s_lo + ncol - 1);
    fputs("Red: the rank the finding names; pink: a call that differs from the majority; "
          "yellow: no such call; blue outline: a collective in the lineage chain. Click a cell "
          "for its call.",
          f);
    if (folded)
        fprintf(f,
                "<br><button id=\"unfold\" data-label=\"show all %zu ranks\">show all %zu "
                "ranks</button> (%zu far from the finding are folded)",
                members, members, folded);
    fputs("<div class=\"scroll\"><table id=\"grid\"><thead><tr><th>rank</th>", f);
    for (size_t c = 0; c < ncol; c++)
        fprintf(f, "<th%s>#%" PRIu64 "</th>", r->s_lo + c == r->seq ? " class=\"focus\"" : "",
                r->s_lo + c);
    fputs("</tr></thead><tbody>", f);
    for (size_t i = 0; i < r->nprocs; i++) {
        const struct rproc *p = &r->procs[i];
        if (!p->member)
            continue;
        fprintf(f, "<tr class=\"%s\" data-rank=\"%d\"><th>%d</th>", p->near ? "near" : "far folded",
                p->sp->rank, p->sp->rank);
        for (size_t c = 0; c < ncol; c++) {
            const struct cell *x = &p->cells[c];
            uint64_t seq = r->s_lo + c;
            bool culprit = p->culprit && seq == r->seq && r->own_focus;
            if (!x->has) {
                /* Missing only where others made the call. */
                fprintf(f, "<td class=\"%s\">&mdash;</td>",
                        culprit       ? "culprit missing"
                        : last_col[c] ? "missing"
                                      : "none");
                continue;
            }
            bool diverge =
                x->op != maj[c].op || x->count != maj[c].count || x->dtype != maj[c].dtype;
            char detail[600];
            cell_detail(r, detail, sizeof(detail), p, x, seq);
            fprintf(f, "<td class=\"%s%s\" data-d=\"",
                    culprit   ? "culprit"
                    : diverge ? "diverge"
                              : "ok",
                    listed(r, true, p, x->index) ? " chain" : "");
            html_text(f, detail);
            fprintf(f, "\">%s %" PRIu64 "%s</td>", short_op(x->op), x->count,
                    x->in_flight ? "&hellip;" : "");
        }
        fputs("</tr>", f);
    }
    fputs("</tbody></table></div>", f);
    if (!any_col)
        fputs("<p>No member's trace has these collectives.</p>", f);
    free(maj);
    free(last_col);
}

/* The timeline's window: the grid's calls and the finding's own calls, padded. */
static void pick_window(struct shp_page *r)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < r->nprocs && r->has_focus; i++) {
        const struct rproc *p = &r->procs[i];
        for (size_t c = 0; p->cells && c <= r->s_hi - r->s_lo; c++) {
            if (!p->cells[c].has)
                continue;
            lo = p->cells[c].t0 < lo ? p->cells[c].t0 : lo;
            uint64_t t1 = p->cells[c].in_flight ? p->cells[c].t0 : p->cells[c].t1;
            hi = t1 > hi ? t1 : hi;
        }
    }
    for (int l = 0; l < 2 && r->first; l++) {
        const struct an_result_finding *f = r->first;
        int n = l ? f->f.nlineage : f->f.nevents;
        for (int i = 0; i < n; i++) {
            const struct an_call *c = l ? &f->lineage[i] : &f->events[i];
            if (!c->ok)
                continue;
            uint64_t t = c->e.t_ns, d = c->e.dur_ns == SHP_NONE ? 0 : c->e.dur_ns;
            lo = t < lo ? t : lo;
            hi = t + d > hi ? t + d : hi;
        }
    }
    if (lo == UINT64_MAX) { /* nothing to centre on: the last second of the traces */
        hi = r->tend;
        lo = hi > r->t0 + 1000000000ull ? hi - 1000000000ull : r->t0;
    }
    if (hi <= lo)
        hi = lo + 1000000;
    uint64_t pad = (hi - lo) / 20 + 1000;
    r->w0 = lo > r->t0 + pad ? lo - pad : r->t0;
    r->w1 = hi + pad;
}

static const char *cat_class(int cls)
{
    switch (cls) {
    case SHP_CLS_COLL:
        return "c-collective";
    case SHP_CLS_P2P:
        return "c-p2p";
    case SHP_CLS_COPY:
        return "c-copy";
    case SHP_CLS_ALLOC:
    case SHP_CLS_FREE:
        return "c-memory";
    default:
        return "c-other";
    }
}

/* The timeline's rows are a backend of the walk (timeline.h): one row per process drawn, a bar
 * per call in the window. */
struct svg {
    struct shp_page *r;
    const struct rproc *p; /* the row being drawn */
    int y;
    double drawn_to;
};

static void *svg_open(FILE *out, uint64_t t0, void *arg)
{
    (void)out, (void)t0;
    struct svg *g = calloc(1, sizeof(*g));
    if (g) {
        g->r = arg;
        g->y = 4 - 18;
    }
    return g;
}

static void svg_process(void *b, const struct shp_tl_proc *tp, const char *name)
{
    (void)name;
    struct svg *g = b;
    g->p = &g->r->procs[tp - g->r->base];
    g->y += 18;
    g->drawn_to = -1;
    fprintf(g->r->f, "<text x=\"4\" y=\"%d\">", g->y + 12);
    html_fmt(g->r->f, "rank %d", tp->sp->rank);
    fputs("</text>", g->r->f);
}

static void svg_thread(void *b, const struct shp_tl_proc *p, uint32_t tord, const char *what)
{
    (void)b, (void)p, (void)tord, (void)what;
}

static void svg_slice(void *b, const struct shp_tl_slice *s)
{
    struct svg *g = b;
    struct shp_page *r = g->r;
    FILE *f = r->f;
    const struct shp_event *e = s->e;
    double scale = (double)TL_WIDTH / (double)(r->w1 - r->w0);
    /* A call that never returned lasts past anything the window shows. */
    uint64_t end = e->dur_ns == SHP_NONE ? r->w1 : e->t_ns + e->dur_ns;
    uint64_t lo = e->t_ns < r->w0 ? r->w0 : e->t_ns, hi = end > r->w1 ? r->w1 : end;
    double x = (double)(lo - r->w0) * scale, w = (double)(hi - lo) * scale;
    bool hit = listed(r, false, g->p, e->index);
    /* Calls narrower than a pixel that land where one was just drawn add nothing. */
    if (!hit && e->dur_ns != SHP_NONE && w < 1 && x < g->drawn_to)
        return;
    if (w < 1)
        w = 1;
    g->drawn_to = x + w + 1;
    char bytes[32] = "";
    if (e->bytes != SHP_NONE)
        thousands(bytes, sizeof(bytes), e->bytes);
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"14\" class=\"%s%s%s\" "
            "data-d=\"",
            TL_LABEL + x, g->y + 1, w, cat_class(e->cls), hit ? " hit" : "",
            e->dur_ns == SHP_NONE ? " inflight" : "");
    html_fmt(f, "rank %d %s", g->p->sp->rank, shp_op_name(e->op));
    if (e->seq != SHP_NONE)
        html_fmt(f, " #%" PRIu64, e->seq);
    if (*bytes)
        html_fmt(f, ", %s bytes", bytes);
    html_fmt(f, ", at %.6f s", (double)(e->t_ns - r->t0) / 1e9);
    if (e->dur_ns == SHP_NONE)
        html_text(f, " [in flight]");
    if (s->site && *s->site)
        html_fmt(f, " at %s", s->site);
    fputs("\"/>", f);
}

static void svg_instant(void *b, const struct shp_tl_instant *in)
{
    (void)b, (void)in; /* marks and findings are drawn elsewhere on the page */
}

static int svg_close(void *b)
{
    free(b);
    return 0;
}

static const struct shp_tl_ops svg_ops = {
    .name = "SVG",
    .open = svg_open,
    .process = svg_process,
    .thread = svg_thread,
    .slice = svg_slice,
    .instant = svg_instant,
    .close = svg_close,
};

static void section_timeline(struct shp_page *r)
{
    FILE *f = r->f;
    pick_window(r);
    size_t rows = 0, hidden = 0;
    for (size_t i = 0; i < r->nprocs; i++) {
        rows += r->procs[i].near;
        hidden += !r->procs[i].near;
    }
    int h = (int)rows * 18 + 30;
    fputs("<h2>Timeline around the finding</h2><p>", f);
    html_fmt(f, "%.6f s to %.6f s after the first call. ", (double)(r->w0 - r->t0) / 1e9,
             (double)(r->w1 - r->t0) / 1e9);
    fputs("Red outline: the finding's calls; dashed: a call that never returned. Click a call "
          "for details.",
          f);
    if (hidden)
        fprintf(f,
                " %zu ranks far from the finding are left out (shapetrace export draws them "
                "all).",
                hidden);
    fputs("<span class=\"legend\"><span class=\"c-collective\" style=\"background:#5c8fd6\">"
          "</span>collective<span style=\"background:#8e6bc9\"></span>send/recv<span "
          "style=\"background:#55a868\"></span>copy<span style=\"background:#c0c4c9\"></span>"
          "memory<span style=\"background:#d1a35c\"></span>other</span></p>",
          f);
    fprintf(f,
            "<div class=\"scroll\"><svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" "
            "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">",
            TL_LABEL + TL_WIDTH + 10, h, TL_LABEL + TL_WIDTH + 10, h);
    bool *only = calloc(r->nprocs ? r->nprocs : 1, sizeof(*only));
    for (size_t i = 0; only && i < r->nprocs; i++)
        only[i] = r->procs[i].near;
    struct shp_tl_draw d = {.ops = &svg_ops, .arg = r, .from = r->w0, .to = r->w1, .only = only};
    r->oom |= !only || shp_tl_draw(r->tl, &d, f) < 0;
    free(only);
    int y = 4 + (int)rows * 18;
    for (int k = 0; k <= 4; k++) {
        double x = TL_LABEL + TL_WIDTH * k / 4.0;
        uint64_t t = r->w0 + (r->w1 - r->w0) * (uint64_t)k / 4;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"0\" y2=\"%d\" stroke=\"#0002\"/>", x, x, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\">%.6f s</text>", x, y + 14,
                k == 0   ? "start"
                : k == 4 ? "end"
                         : "middle",
                (double)(t - r->t0) / 1e9);
    }
    fputs("</svg></div>", f);
}

/* A shape named in the summary after `lead` ("reads [771, 512]"), if the analysis gave one. */
static void summary_shape(const char *summary, const char *lead, char *out, size_t len)
{
    out[0] = 0;
    const char *p = summary ? strstr(summary, lead) : NULL;
    if (!p)
        return;
    p += strlen(lead);
    const char *e = strchr(p, ']');
    if (*p == '[' && e)
        snprintf(out, len, "%.*s", (int)(e - p + 1), p);
}

#define BOX_W 196
#define BOX_H 104
#define BOX_STEP 236 /* box and arrow */
#define ROW_STEP 150
#define PER_ROW 5 /* boxes a row: the page's width */

static void chain_box(const struct shp_page *r, FILE *f, const struct an_call *ev, int x, int y,
                      const char *role, const char *shape, const char *cls)
{
    const struct shp_event *e = &ev->e;
    char bytes[32] = "", site_line[64], l1[120], l2[64], l3[160], l4[64];
    if (ev->ok && e->bytes != SHP_NONE)
        thousands(bytes, sizeof(bytes), e->bytes);
    /* The site, as analyze --json gives it (cut below at 25 bytes of that text). */
    size_t n;
    const char *const *stack = call_frames(r, ev, &n);
    const char *raw = n ? stack[shp_session_site_index(r->session, ev->proc, ev->e.stack)] : "";
    char *clean = shp_utf8_dup(raw);
    const char *site = clean ? clean : raw;
    fprintf(f,
            "<g class=\"link\"><rect class=\"box %s\" x=\"%d\" y=\"%d\" width=\"%d\" "
            "height=\"%d\" rx=\"6\" data-d=\"",
            cls, x, y, BOX_W, BOX_H);
    html_text(f, site);
    fputs("\"/>", f);
    const char *kind = ev->ok && e->kind >= 0 && e->kind <= 4 ? shp_kind_names[e->kind] : NULL;
    snprintf(l1, sizeof(l1), "%s%s%s", ev->ok ? (e->mark ? "mark" : shp_op_name(e->op)) : "?",
             kind ? " " : "", kind ? kind : "");
    snprintf(l2, sizeof(l2), "%s bytes", *bytes ? bytes : "?");
    uint64_t h = ev->ok && e->height != SHP_NONE ? e->height : 1;
    uint64_t w = ev->ok ? e->width : SHP_NONE;
    if (*shape)
        snprintf(l3, sizeof(l3), "%s", shape);
    else if (ev->ok && e->count != SHP_NONE)
        snprintf(l3, sizeof(l3), "count %" PRIu64 " %s", e->count,
                 e->dtype >= 0 ? shp_dtype_name((unsigned)e->dtype) : "");
    else if (h > 1 && w != SHP_NONE && w > 0)
        snprintf(l3, sizeof(l3), "%" PRIu64 " rows x %" PRIu64 " B, pitch %" PRIu64, h, w,
                 e->dpitch != SHP_NONE ? e->dpitch : 0);
    else
        snprintf(l3, sizeof(l3), "contiguous");
    snprintf(l4, sizeof(l4), "rank %d, call %lld", call_rank(r, ev),
             ev->ok ? (long long)e->index : -1ll);
    snprintf(site_line, sizeof(site_line), "%.25s%s", site, strlen(site) > 25 ? "..." : "");
    free(clean);
    const char *lines[] = {role, l1, l2, l3, site_line, l4};
    for (int k = 0; k < 6; k++) {
        fprintf(f, "<text x=\"%d\" y=\"%d\"%s>", x + 8, y + 16 + 16 * k,
                k == 0   ? " font-weight=\"700\""
                : k == 4 ? " class=\"mono\""
                         : "");
        html_text(f, lines[k]);
        fputs("</text>", f);
    }
    fputs("</g>", f);
}

static void section_chain(struct shp_page *r)
{
    FILE *f = r->f;
    const struct an_result_finding *first = r->first;
    size_t n = first ? (size_t)first->f.nlineage : 0;
    fputs("<h2>Where the bytes came from</h2>", f);
    if (!n || !first->f.nevents) {
        fputs("<p id=\"chain-none\">The first finding has no producer chain (it is not a "
              "lineage finding).</p>",
              f);
        return;
    }
    size_t boxes = n + 1, rows = (boxes + PER_ROW - 1) / PER_ROW;
    int width = (int)(boxes < PER_ROW ? boxes : PER_ROW) * BOX_STEP, height = (int)rows * ROW_STEP;
    fputs("<p>From the origin of the bytes to the call that read them the wrong way. Click a "
          "box for its call site.</p>",
          f);
    fprintf(f,
            "<div class=\"scroll\"><svg id=\"chain\" xmlns=\"http://www.w3.org/2000/svg\" "
            "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\"><defs><marker id=\"ah\" "
            "viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
            "orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"#444\"/></marker></defs>",
            width, height, width, height);
    const char *summary = first->f.summary;
    char shape[120];
    for (size_t k = 0; k < boxes; k++) {
        int x = 10 + (int)(k % PER_ROW) * BOX_STEP, y = 10 + (int)(k / PER_ROW) * ROW_STEP;
        const struct an_call *ev = k < n ? &first->lineage[n - 1 - k] : &first->events[0];
        bool consumer = k == n;
        /* The shapes the analysis named: what the consumer read, and the region its nearest
         * producer wrote. */
        shape[0] = 0;
        if (consumer || k == n - 1)
            summary_shape(summary, consumer ? "reads " : " of a ", shape, sizeof(shape));
        if (*shape)
            strncat(shape, consumer ? " read" : " region", sizeof(shape) - strlen(shape) - 1);
        chain_box(r, f, ev, x, y,
                  consumer ? "consumer"
                  : k == 0 ? "origin"
                           : "producer",
                  shape,
                  consumer ? "consumer"
                  : k == 0 ? "origin"
                           : "");
        if (consumer)
            break;
        if ((k + 1) % PER_ROW)
            fprintf(f, "<line class=\"arrow\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>",
                    x + BOX_W + 2, y + BOX_H / 2, x + BOX_STEP - 4, y + BOX_H / 2);
        else /* down to the next row's first box */
            fprintf(f,
                    "<polyline class=\"arrow\" fill=\"none\" points=\"%d,%d %d,%d %d,%d %d,%d\"/>",
                    x + BOX_W / 2, y + BOX_H + 2, x + BOX_W / 2, y + BOX_H + 22, 10 + BOX_W / 2,
                    y + BOX_H + 22, 10 + BOX_W / 2, y + ROW_STEP - 4);
    }
    fputs("</svg></div>", f);
}

static void section_others(struct shp_page *r)
{
    FILE *f = r->f;
    fputs("<h2>Other findings</h2>", f);
    if (r->report->nfindings < 2) {
        fputs("<p id=\"others-none\">None.</p>", f);
        return;
    }
    fputs("<table id=\"others\"><thead><tr><th>#</th><th>kind</th><th>ranks</th><th>where</th>"
          "<th>summary</th></tr></thead><tbody>",
          f);
    for (size_t i = 0; i < r->report->nfindings; i++) {
        const struct an_finding *x = &r->report->findings[i].f;
        if (i == r->focus_index)
            continue;
        char ranks[256];
        ranks_text(ranks, sizeof(ranks), x);
        fprintf(f, "<tr><td>%zu</td><td>", i + 1);
        html_text(f, an_kind_names[x->kind]);
        fputs("</td><td>", f);
        html_text(f, ranks);
        fputs("</td><td class=\"mono\">", f);
        if (x->comm)
            html_fmt(f, "%.8" PRIx64 " #%lld", x->comm >> 32,
                     x->seq != SHP_NONE ? (long long)x->seq : -1ll);
        fputs("</td><td>", f);
        html_utf8(f, x->summary);
        fputs("</td></tr>", f);
    }
    fputs("</tbody></table>", f);
}

static void section_procs(struct shp_page *r)
{
    FILE *f = r->f;
    size_t incomplete = 0;
    for (size_t i = 0; i < r->nprocs; i++)
        incomplete += !shp_proc_complete(r->procs[i].sp);
    fprintf(f,
            "<h2>Processes</h2><p>%zu process%s, %zu of them incomplete (did not exit "
            "normally). Filter: <input id=\"proc-filter\" placeholder=\"rank, host, "
            "op...\"></p>",
            r->nprocs, r->nprocs == 1 ? "" : "es", incomplete);
    fputs("<div class=\"scroll\"><table id=\"procs\"><thead><tr><th>rank</th><th>host</th>"
          "<th>pid</th><th>events</th><th>complete</th><th>last call</th><th>trace</th></tr>"
          "</thead><tbody>",
          f);
    for (size_t i = 0; i < r->nprocs; i++) {
        const struct rproc *p = &r->procs[i];
        bool complete = shp_proc_complete(p->sp);
        fprintf(f, "<tr><td>%d</td><td>", p->sp->rank);
        html_text(f, p->sp->t.hdr->host);
        fprintf(f, "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td%s>%s</td><td class=\"mono\">",
                p->sp->t.hdr->pid, p->sp->events, complete ? "" : " class=\"incomplete\"",
                complete ? "yes" : "NO");
        if (p->has_last) {
            html_text(f, shp_op_name(p->last.op));
            if (p->last.seq != SHP_NONE)
                html_fmt(f, " #%" PRIu64, p->last.seq);
            if (p->last.dur_ns == SHP_NONE)
                fputs(" <span class=\"incomplete\">[in flight]</span>", f);
        }
        fputs("</td><td class=\"mono\">", f);
        html_text(f, p->sp->t.path);
        fputs("</td></tr>", f);
    }
    fputs("</tbody></table></div>", f);
    /* Files of the run directories that are not readable traces: the page is partial. */
    const struct shp_session *s = r->session;
    if (!s->nunreadable)
        return;
    fprintf(f,
            "<p id=\"unreadable\" class=\"incomplete\">%zu file%s could not be read, so the page "
            "covers the other traces only:</p><ul class=\"mono\">",
            s->nunreadable, s->nunreadable == 1 ? "" : "s");
    for (size_t i = 0; i < s->nunreadable; i++) {
        fputs("<li>", f);
        html_text(f, s->unreadable[i].file);
        fputs(": ", f);
        html_text(f, s->unreadable[i].why);
        fputs("</li>", f);
    }
    fputs("</ul>", f);
}

static void section_command(struct shp_page *r)
{
    FILE *f = r->f;
    fputs("<h2>Command line</h2><pre id=\"cmdline\">shapetrace", f);
    for (int i = 0; i < r->o->argc; i++) {
        const char *a = r->o->argv[i];
        fputc(' ', f);
        bool quote = strpbrk(a, " \t'\"$`\\") != NULL;
        if (quote)
            fputc('\'', f);
        html_text(f, a);
        if (quote)
            fputc('\'', f);
    }
    char cwd[1024];
    fputs("\n(in ", f);
    html_text(f, getcwd(cwd, sizeof(cwd)) ? cwd : "?");
    fputs(")</pre>", f);
}

int shp_page_write(struct shp_page *r, FILE *f)
{
    r->f = f;
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    size_t nf = r->report->nfindings;
    fprintf(f,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
            "<title>shapetrace report</title><script>%s</script><style>%s</style></head>"
            "<body><pre id=\"js-errors\" hidden></pre><h1>shapetrace report</h1>",
            js_head, css);
    fputs("<p class=\"sub\">", f);
    if (r->o->title) {
        html_text(f, r->o->title);
        fputs("<br>", f);
    }
    html_fmt(f, "%zu process%s, %zu finding%s. Written %s by shapetrace %s.", r->nprocs,
             r->nprocs == 1 ? "" : "es", nf, nf == 1 ? "" : "s", when, SHP_VERSION);
    fputs("</p>", f);
    /* For a lineage finding the chain explains it best: right under it. */
    bool lineage = r->first && r->first->f.nlineage > 0;
    section_first(r);
    if (lineage)
        section_chain(r);
    section_grid(r);
    section_timeline(r);
    if (!lineage)
        section_chain(r);
    section_others(r);
    section_procs(r);
    section_command(r);
    fprintf(f, "<div id=\"detail\"></div><script>%s</script></body></html>\n", js_body);
    return r->oom ? -ENOMEM : 0;
}

int shp_page_open(struct shp_session *s, const struct an_result *res,
                  const struct shp_page_options *o, struct shp_page **out)
{
    *out = NULL;
    if (o->finding && o->finding >= res->nfindings)
        return -ERANGE;
    struct shp_page *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->session = s;
    r->o = o;
    r->report = res;
    r->focus_index = o->finding;
    r->first = res->nfindings ? &res->findings[o->finding] : NULL;
    r->to = (struct shp_tl_options){.scan = page_scan, .arg = r};
    int rc = shp_tl_open(s, &r->to, &r->tl);
    if (rc < 0)
        goto out;
    r->base = shp_tl_procs(r->tl, &r->nprocs);
    r->procs = calloc(r->nprocs ? r->nprocs : 1, sizeof(*r->procs));
    rc = -ENOMEM;
    if (!r->procs)
        goto out;
    for (size_t i = 0; i < r->nprocs; i++)
        r->procs[i] = (struct rproc){.sp = r->base[i].sp, .si = r->base[i].si};
    pick_focus(r);
    r->ncol = r->has_focus ? (size_t)(r->s_hi - r->s_lo + 1) : 0;
    for (size_t i = 0; r->ncol && i < r->nprocs; i++)
        if (r->procs[i].member && !(r->procs[i].cells = calloc(r->ncol, sizeof(struct cell))))
            goto out;
    rc = shp_tl_scan(r->tl);
    if (rc < 0)
        goto out;
    r->t0 = shp_tl_t0(r->tl);
    r->tend = shp_tl_tend(r->tl);
    mark_near(r);
    *out = r;
    return 0;
out:
    shp_page_close(r);
    return rc;
}

void shp_page_close(struct shp_page *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->procs && i < r->nprocs; i++)
        free(r->procs[i].cells);
    free(r->procs);
    shp_tl_close(r->tl);
    free(r);
}
