/* shapetrace export: the traces as a timeline for ui.perfetto.dev and chrome://tracing: a process
 * track per rank, a slice per call, flow arrows between the calls of one collective and from
 * producers to consumers, the findings as instant events. Chrome's JSON or Perfetto's protobuf. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/analyze.h"
#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"
#include "tools/lib/event.h"
#include "tools/lib/out.h"
#include "tools/lib/perfetto.h"
#include "tools/lib/reader.h"
#include "tools/lib/session.h"
#include "tools/lib/stacks.h"

/* export's options (tools/cmd/options.h). */
/* clang-format off */
#define EXPORT_OPTIONS(X) \
X(OPT_FORMAT, "format", 0, "FORMAT", \
  "the file's format:\n" \
  "  chrome    Chrome's JSON trace-event format (the default)\n" \
  "  perfetto  Perfetto's protobuf format: smaller, faster to load") \
X(OPT_RANKS, "ranks", 0, "LIST", "only these global ranks (0,2,4-7)") \
X(OPT_FROM, "from", 0, "T", \
  "only calls that end at T or later: T in seconds after the first\n" \
  "call, or a number with ms, us, ns") \
X(OPT_TO, "to", 0, "T", "only calls that start at T or earlier") \
SHP_ANALYSIS_OPTIONS(X) \
X(OPT_NO_FINDINGS, "no-findings", 0, NULL, \
  "do not run the analysis (no finding events, no lineage arrows)") \
X(OPT_OUT, NULL, 'o', "FILE", "write FILE (default: trace.json or trace.perfetto-trace)")
/* clang-format on */
SHP_OPTS_ROWS(export_rows, EXPORT_OPTIONS);
static const struct shp_opts export_opts = {
    .cmd = "export",
    .synopsis =
        "usage: shapetrace export [--format chrome|perfetto] [--ranks LIST] [--from T --to T]\n"
        "                         [--dim NAME=VALUE]... [--expect FILE] [--no-findings]\n"
        "                         [-o FILE] PATH...\n"
        "\n"
        "Writes the traces in PATH as one timeline that ui.perfetto.dev and chrome://tracing\n"
        "open: a process per rank, a thread track per thread, a slice per call, arrows between\n"
        "the calls of one collective across ranks and from each producer to its consumer\n"
        "where the analysis found lineage, and each finding as an instant event.\n",
    .epilogue = "Exit status: 0, or 2 on bad usage or a PATH that is not a readable trace.\n",
    .v = export_rows,
    .n = SHP_OPTS_N(export_rows),
};

/* ---- what the first pass learns ---- */

struct coll_at {
    uint64_t seq, t0, t1; /* seq first: the key of lower_bound */
};

struct proc_comm { /* one process's collectives on one communicator, by seq */
    uint64_t comm;
    int comm_rank;
    struct coll_at *c;
    size_t n, cap;
};

struct lflow {          /* one end of a lineage arrow */
    uint64_t index, id; /* index first: the key of lower_bound */
    bool out;
};

/* One process of the timeline: the session's description, and what the drawing keeps of it. */
struct proc {
    struct shp_proc *sp; /* the session's: trace, rank, time span, completeness */
    size_t si;           /* its index in the session */
    uint32_t pid;        /* in the timeline: 1.. in rank order */
    uint32_t *tids;
    size_t ntids;
    struct proc_comm *pc;
    size_t npc;
    struct lflow *lf;
    size_t nlf;
    /* call sites by stack id, filled as they are met */
    char **sites;
    size_t nsites;
};

struct member {
    struct proc *p;
    struct proc_comm *pc;
};

struct comm {
    uint64_t id;
    struct member *m; /* by comm_rank */
    size_t n;
};

struct xp {
    struct shp_session *session;
    struct proc *procs;
    size_t nprocs;
    struct proc **of_session; /* by session index: its process here, NULL if left out */
    struct comm *comms;
    size_t ncomms, hint; /* hint: the communicator looked up last */
    uint64_t t0, tend, from, to;
    bool perfetto;
    FILE *out;
    const struct an_result *report; /* the analysis, or NULL (--no-findings) */
    uint64_t slices, flows, instants;
};

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap * 2 : 8;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * size);
    if (!q) {
        shp_err("export: out of memory");
        exit(SHP_EXIT_USAGE);
    }
    *cap = c;
    return q;
}

static struct proc_comm *proc_comm(struct proc *p, uint64_t comm, int comm_rank, size_t *cap)
{
    for (size_t i = p->npc; i-- > 0;)
        if (p->pc[i].comm == comm)
            return &p->pc[i];
    p->pc = grow(p->pc, cap, p->npc + 1, sizeof(*p->pc));
    struct proc_comm *c = &p->pc[p->npc++];
    memset(c, 0, sizeof(*c));
    c->comm = comm;
    c->comm_rank = comm_rank;
    return c;
}

static uint64_t end_of(const struct xp *x, const struct shp_event *e)
{
    return e->dur_ns == SHP_NONE ? x->tend : e->t_ns + e->dur_ns;
}

static bool in_window(const struct xp *x, uint64_t t0, uint64_t t1)
{
    return t1 >= x->from && t0 <= x->to;
}

static int by_seq(const void *a, const void *b)
{
    const struct coll_at *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Pass 1: threads, time span, and every collective's (communicator, seq) with its times. The
 * end times of in-flight calls are only known once every trace is read: fixed up afterwards. */
static void scan(struct proc *p)
{
    struct shp_cursor cur = {0};
    unsigned type;
    size_t size, tcap = 0, pccap = 0;
    const struct shp_rec *r;
    struct proc_comm *last = NULL;
    const struct shp_trace *t = &p->sp->t;
    uint64_t events = 0;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e))
            continue;
        events++;
        shp_proc_saw(p->sp, &e);
        uint64_t end = e.dur_ns == SHP_NONE ? e.t_ns : e.t_ns + e.dur_ns;
        size_t k = 0;
        while (k < p->ntids && p->tids[k] != e.tid)
            k++;
        if (k == p->ntids) {
            p->tids = grow(p->tids, &tcap, p->ntids + 1, sizeof(*p->tids));
            p->tids[p->ntids++] = e.tid;
        }
        if (type == SHP_REC_COLL && e.comm && e.seq != SHP_NONE) {
            if (!last || last->comm != e.comm)
                last = proc_comm(p, e.comm, e.comm_rank, &pccap);
            last->c = grow(last->c, &last->cap, last->n + 1, sizeof(*last->c));
            last->c[last->n++] = (struct coll_at){e.seq, e.t_ns, e.dur_ns == SHP_NONE ? 0 : end};
        }
    }
    shp_proc_walked(p->sp, &cur, events);
    for (size_t i = 0; i < p->npc; i++) {
        struct proc_comm *c = &p->pc[i];
        bool sorted = true;
        for (size_t k = 1; k < c->n && sorted; k++)
            sorted = c->c[k - 1].seq <= c->c[k].seq;
        if (!sorted)
            qsort(c->c, c->n, sizeof(*c->c), by_seq);
    }
}

/* The first of n elements of `size` bytes, sorted by a uint64_t key at their start, whose key is
 * not below `key` (n if none). */
static size_t lower_bound(const void *base, size_t n, size_t size, uint64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint64_t k;
        memcpy(&k, (const char *)base + mid * size, sizeof(k));
        if (k < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const struct coll_at *find_seq(const struct proc_comm *c, uint64_t seq)
{
    size_t lo = lower_bound(c->c, c->n, sizeof(*c->c), seq);
    return lo < c->n && c->c[lo].seq == seq ? &c->c[lo] : NULL;
}

static int by_comm_rank(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    return x->pc->comm_rank - y->pc->comm_rank;
}

static void build_comms(struct xp *x)
{
    size_t cap = 0;
    for (size_t i = 0; i < x->nprocs; i++) {
        struct proc *p = &x->procs[i];
        for (size_t k = 0; k < p->npc; k++) {
            struct proc_comm *pc = &p->pc[k];
            for (size_t n = 0; n < pc->n; n++)
                if (!pc->c[n].t1)
                    pc->c[n].t1 = x->tend;
            size_t j = 0;
            while (j < x->ncomms && x->comms[j].id != pc->comm)
                j++;
            if (j == x->ncomms) {
                x->comms = grow(x->comms, &cap, x->ncomms + 1, sizeof(*x->comms));
                x->comms[x->ncomms++] = (struct comm){pc->comm, NULL, 0};
            }
            struct comm *c = &x->comms[j];
            c->m = realloc(c->m, (c->n + 1) * sizeof(*c->m));
            if (!c->m) {
                shp_err("export: out of memory");
                exit(SHP_EXIT_USAGE);
            }
            c->m[c->n++] = (struct member){p, pc};
        }
    }
    for (size_t j = 0; j < x->ncomms; j++)
        qsort(x->comms[j].m, x->comms[j].n, sizeof(*x->comms[j].m), by_comm_rank);
}

static const struct comm *comm_of(struct xp *x, uint64_t id)
{
    if (x->hint < x->ncomms && x->comms[x->hint].id == id)
        return &x->comms[x->hint];
    for (size_t j = 0; j < x->ncomms; j++)
        if (x->comms[j].id == id)
            return &x->comms[x->hint = j];
    return NULL;
}

/* A flow id both ends compute on their own: the arrow from member a to member b of a collective.
 * The top bit stays clear; lineage arrows use ids with it set. */
static uint64_t coll_flow_id(uint64_t comm, uint64_t seq, int a, int b)
{
    uint64_t h = comm ^ 0x9e3779b97f4a7c15ull;
    uint64_t parts[3] = {seq, (uint64_t)(uint32_t)a, (uint64_t)(uint32_t)b};
    for (int i = 0; i < 3; i++) {
        h ^= parts[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h >> 1;
}

/* ---- arguments of a slice ---- */

enum { ARG_U, ARG_I, ARG_S, ARG_B };
struct arg {
    const char *key;
    int type;
    uint64_t u;
    const char *s;
};
#define MAX_ARGS 20
#define CHAIN_MAX 16 /* producers and consumer of one finding's arrows */
#define MAX_FLOWS 8

struct flow {
    uint64_t id;
    bool out; /* the arrow starts at this slice */
    const char *cat;
};

struct slice {
    uint32_t pid;
    uint32_t tid, tord;
    uint64_t ts, dur;
    const char *name, *cat;
    struct arg a[MAX_ARGS];
    int na;
    struct flow f[MAX_FLOWS];
    int nf;
    char comm[20]; /* the text the comm argument points to */
};

static void arg_u(struct slice *s, const char *key, uint64_t v)
{
    if (v != SHP_NONE && s->na < MAX_ARGS)
        s->a[s->na++] = (struct arg){key, ARG_U, v, NULL};
}

static void arg_i(struct slice *s, const char *key, int v)
{
    if (v >= 0 && s->na < MAX_ARGS)
        s->a[s->na++] = (struct arg){key, ARG_I, (uint64_t)v, NULL};
}

static void arg_s(struct slice *s, const char *key, const char *v)
{
    if (v && *v && s->na < MAX_ARGS)
        s->a[s->na++] = (struct arg){key, ARG_S, 0, v};
}

/* ---- Chrome JSON ---- */

struct jbuf {
    char *p;
    size_t len, cap;
};

static void jraw(struct jbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->p = grow(b->p, &b->cap, b->len + n + 1, 1);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void jlit(struct jbuf *b, const char *s)
{
    jraw(b, s, strlen(s));
}

static void juint(struct jbuf *b, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do
        tmp[sizeof(tmp) - 1 - n++] = (char)('0' + v % 10);
    while ((v /= 10));
    jraw(b, tmp + sizeof(tmp) - n, (size_t)n);
}

/* Microseconds with three decimals, from nanoseconds. */
static void jus(struct jbuf *b, uint64_t ns)
{
    juint(b, ns / 1000);
    char frac[4] = {'.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10),
                    (char)('0' + ns % 10)};
    jraw(b, frac, 4);
}

static void jstr(struct jbuf *b, const char *s)
{
    jraw(b, "\"", 1);
    const char *run = s;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c >= 0x20 && *c != '"' && *c != '\\' && *c != '<')
            continue;
        jraw(b, run, (size_t)((const char *)c - run));
        char esc[8];
        /* '<' escaped too, so that no trace text can close a script element around this. */
        snprintf(esc, sizeof(esc), "\\u%04x", *c);
        jraw(b, esc, 6);
        run = (const char *)c + 1;
    }
    jlit(b, run);
    jraw(b, "\"", 1);
}

static void jflush(struct xp *x, struct jbuf *b)
{
    if (b->len > (1u << 20)) {
        fwrite(b->p, 1, b->len, x->out);
        b->len = 0;
    }
}

static struct jbuf jb;
static bool jfirst = true;

static void jsep(void)
{
    jlit(&jb, jfirst ? "\n" : ",\n");
    jfirst = false;
}

static void jargs(const struct arg *a, int na)
{
    jlit(&jb, "\"args\":{");
    for (int i = 0; i < na; i++) {
        if (i)
            jraw(&jb, ",", 1);
        jstr(&jb, a[i].key);
        jraw(&jb, ":", 1);
        if (a[i].type == ARG_S)
            jstr(&jb, a[i].s);
        else if (a[i].type == ARG_B)
            jlit(&jb, a[i].u ? "true" : "false");
        else
            juint(&jb, a[i].u);
    }
    jraw(&jb, "}", 1);
}

static void jhead(const char *ph, uint32_t pid, uint32_t tid)
{
    jsep();
    jlit(&jb, "{\"ph\":\"");
    jlit(&jb, ph);
    jlit(&jb, "\",\"pid\":");
    juint(&jb, pid);
    jlit(&jb, ",\"tid\":");
    juint(&jb, tid);
}

static void json_begin(struct xp *x)
{
    jlit(&jb, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"shapetrace export\","
              "\"t0_unix_ns\":");
    juint(&jb, x->t0);
    jlit(&jb, ",\"note\":\"ts are microseconds after t0_unix_ns, the first call\"},"
              "\"traceEvents\":[");
}

static void json_meta(uint32_t pid, uint32_t tid, const char *what, const char *name, int sort)
{
    jhead("M", pid, tid);
    jlit(&jb, ",\"name\":");
    jstr(&jb, what);
    jlit(&jb, ",\"args\":{\"name\":");
    jstr(&jb, name);
    jlit(&jb, "}}");
    if (sort >= 0) {
        jhead("M", pid, tid);
        jlit(&jb, ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
        juint(&jb, (uint64_t)sort);
        jlit(&jb, "}}");
    }
}

static void json_slice(struct xp *x, const struct slice *s)
{
    jhead("X", s->pid, s->tid);
    jlit(&jb, ",\"ts\":");
    jus(&jb, s->ts - x->t0);
    jlit(&jb, ",\"dur\":");
    jus(&jb, s->dur);
    jlit(&jb, ",\"name\":");
    jstr(&jb, s->name);
    jlit(&jb, ",\"cat\":\"");
    jlit(&jb, s->cat);
    jlit(&jb, "\",");
    jargs(s->a, s->na);
    jraw(&jb, "}", 1);
    /* Flow events bind to the slice that encloses them: put them in its middle, where no
     * neighbour on the same thread can be mistaken for it. */
    for (int i = 0; i < s->nf; i++) {
        jhead(s->f[i].out ? "s" : "f", s->pid, s->tid);
        jlit(&jb, ",\"ts\":");
        jus(&jb, s->ts - x->t0 + s->dur / 2);
        char id[32];
        snprintf(id, sizeof(id), "\"0x%" PRIx64 "\"", s->f[i].id);
        jlit(&jb, ",\"id\":");
        jlit(&jb, id);
        jlit(&jb, ",\"name\":\"");
        jlit(&jb, s->f[i].cat);
        jlit(&jb, "\",\"cat\":\"");
        jlit(&jb, s->f[i].cat);
        jlit(&jb, s->f[i].out ? "\"}" : "\",\"bp\":\"e\"}");
    }
    jflush(x, &jb);
}

static void json_instant(struct xp *x, uint32_t pid, uint32_t tid, bool process, uint64_t ts,
                         const char *name, const struct arg *a, int na)
{
    jhead("i", pid, tid);
    jlit(&jb, process ? ",\"s\":\"p\",\"ts\":" : ",\"s\":\"t\",\"ts\":");
    jus(&jb, ts - x->t0);
    jlit(&jb, ",\"name\":");
    jstr(&jb, name);
    jlit(&jb, process ? ",\"cat\":\"finding\"," : ",\"cat\":\"mark\",");
    jargs(a, na);
    jraw(&jb, "}", 1);
}

static void json_end(struct xp *x)
{
    jlit(&jb, "\n]}\n");
    fwrite(jb.p, 1, jb.len, x->out);
    free(jb.p);
    memset(&jb, 0, sizeof(jb));
    jfirst = true;
}

/* ---- Perfetto protobuf ---- */

/* Field numbers of perfetto.protos (trace_packet.proto, track_event.proto, ...). */
#define TRACE_PACKET 1
#define PKT_TIMESTAMP 8
#define PKT_SEQ_ID 10
#define PKT_TRACK_EVENT 11
#define PKT_INTERNED 12
#define PKT_SEQ_FLAGS 13
#define PKT_TRACK_DESC 60
#define SEQ_CLEARED 1
#define SEQ_NEEDS_STATE 2
#define TD_UUID 1
#define TD_NAME 2
#define TD_PROCESS 3
#define TD_THREAD 4
#define TD_PARENT 5
#define PD_PID 1
#define PD_NAME 6
#define THD_PID 1
#define THD_TID 2
#define THD_NAME 5
#define TE_ANNOT 4
#define TE_TYPE 9
#define TE_NAME_IID 10
#define TE_TRACK 11
#define TE_CATEGORIES 22
#define TE_FLOW_IDS 47
#define TE_SLICE_BEGIN 1
#define TE_SLICE_END 2
#define TE_INSTANT 3
#define DA_NAME_IID 1
#define DA_BOOL 2
#define DA_UINT 3
#define DA_INT 4
#define DA_STRING 6
#define DA_STRING_IID 17
#define ID_EVENT_NAMES 2
#define ID_ANNOT_NAMES 3
#define ID_STRINGS 29
#define SEQ 1 /* the one packet sequence this writer uses */

/* Interned strings: names of events, of annotations, and annotation values. */
struct itab {
    char **s;
    uint64_t *h;
    size_t n, cap; /* open addressing; iid = slot's insertion number */
    uint64_t *iid;
    uint64_t next;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The iid of s; *fresh true when it was just added (the caller emits its definition). */
static uint64_t intern(struct itab *t, const char *s, bool *fresh)
{
    *fresh = false;
    if (t->n * 2 >= t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct itab nt = {
            calloc(cap, sizeof(char *)), calloc(cap, 8), 0, cap, calloc(cap, 8), t->next};
        if (!nt.s || !nt.h || !nt.iid) {
            shp_err("export: out of memory");
            exit(SHP_EXIT_USAGE);
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->s[i])
                continue;
            size_t k = t->h[i] & (cap - 1);
            while (nt.s[k])
                k = (k + 1) & (cap - 1);
            nt.s[k] = t->s[i], nt.h[k] = t->h[i], nt.iid[k] = t->iid[i];
            nt.n++;
        }
        free(t->s), free(t->h), free(t->iid);
        *t = nt;
    }
    uint64_t h = hash_str(s);
    size_t k = h & (t->cap - 1);
    while (t->s[k]) {
        if (t->h[k] == h && !strcmp(t->s[k], s))
            return t->iid[k];
        k = (k + 1) & (t->cap - 1);
    }
    t->s[k] = strdup(s);
    if (!t->s[k]) {
        shp_err("export: out of memory");
        exit(SHP_EXIT_USAGE);
    }
    t->h[k] = h;
    t->iid[k] = ++t->next;
    t->n++;
    *fresh = true;
    return t->iid[k];
}

static void itab_free(struct itab *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->s[i]);
    free(t->s), free(t->h), free(t->iid);
    memset(t, 0, sizeof(*t));
}

static struct {
    struct itab names, keys, values;
    struct shp_pb pkt, ev, sub, interned, item, out;
    bool cleared;
} pf;

static void pf_write(struct xp *x, bool flush)
{
    if (pf.out.len > (1u << 20) || (flush && pf.out.len)) {
        fwrite(pf.out.p, 1, pf.out.len, x->out);
        shp_pb_reset(&pf.out);
    }
}

/* Append one packet made of pf.pkt (without sequence fields) to the output. */
static void pf_packet(struct xp *x, bool needs_state)
{
    shp_pb_uint(&pf.pkt, PKT_SEQ_ID, SEQ);
    if (!pf.cleared) {
        shp_pb_uint(&pf.pkt, PKT_SEQ_FLAGS, SEQ_CLEARED | SEQ_NEEDS_STATE);
        pf.cleared = true;
    } else if (needs_state) {
        shp_pb_uint(&pf.pkt, PKT_SEQ_FLAGS, SEQ_NEEDS_STATE);
    }
    shp_pb_msg(&pf.out, TRACE_PACKET, &pf.pkt);
    shp_pb_reset(&pf.pkt);
    pf_write(x, false);
}

static uint64_t pf_intern(struct itab *t, unsigned field, const char *s)
{
    bool fresh;
    uint64_t iid = intern(t, s, &fresh);
    if (fresh) {
        shp_pb_reset(&pf.item);
        shp_pb_uint(&pf.item, 1, iid);
        shp_pb_str(&pf.item, 2, s);
        shp_pb_msg(&pf.interned, field, &pf.item);
    }
    return iid;
}

static void pf_annots(const struct arg *a, int na)
{
    for (int i = 0; i < na; i++) {
        shp_pb_reset(&pf.sub);
        shp_pb_uint(&pf.sub, DA_NAME_IID, pf_intern(&pf.keys, ID_ANNOT_NAMES, a[i].key));
        if (a[i].type == ARG_S)
            shp_pb_uint(&pf.sub, DA_STRING_IID, pf_intern(&pf.values, ID_STRINGS, a[i].s));
        else if (a[i].type == ARG_B)
            shp_pb_uint(&pf.sub, DA_BOOL, a[i].u);
        else
            shp_pb_uint(&pf.sub, a[i].type == ARG_I ? DA_INT : DA_UINT, a[i].u);
        shp_pb_msg(&pf.ev, TE_ANNOT, &pf.sub);
    }
}

static uint64_t proc_uuid(uint32_t pid)
{
    return (uint64_t)pid << 32;
}

static uint64_t thread_uuid(uint32_t pid, uint32_t tord)
{
    return (uint64_t)pid << 32 | (tord + 1);
}

static void pf_track(struct xp *x, uint32_t pid, int tord, const char *name, uint32_t tid)
{
    shp_pb_reset(&pf.ev);
    shp_pb_reset(&pf.sub);
    if (tord < 0) {
        shp_pb_uint(&pf.ev, TD_UUID, proc_uuid(pid));
        shp_pb_uint(&pf.sub, PD_PID, pid);
        shp_pb_str(&pf.sub, PD_NAME, name);
        shp_pb_msg(&pf.ev, TD_PROCESS, &pf.sub);
    } else {
        shp_pb_uint(&pf.ev, TD_UUID, thread_uuid(pid, (uint32_t)tord));
        shp_pb_uint(&pf.ev, TD_PARENT, proc_uuid(pid));
        shp_pb_uint(&pf.sub, THD_PID, pid);
        /* Real tids of different hosts may collide; the viewer keys threads by tid alone. */
        shp_pb_uint(&pf.sub, THD_TID, (uint64_t)pid * 65536 + (uint32_t)tord + 1);
        char tname[96];
        snprintf(tname, sizeof(tname), "%s %u", name, tid);
        shp_pb_str(&pf.sub, THD_NAME, tname);
        shp_pb_msg(&pf.ev, TD_THREAD, &pf.sub);
    }
    shp_pb_msg(&pf.pkt, PKT_TRACK_DESC, &pf.ev);
    pf_packet(x, false);
}

static void pf_event(struct xp *x, uint64_t ts, unsigned type, uint64_t track, const char *name,
                     const char *cat, const struct arg *a, int na, const struct flow *f, int nf)
{
    shp_pb_reset(&pf.ev);
    shp_pb_reset(&pf.interned);
    shp_pb_uint(&pf.ev, TE_TYPE, type);
    shp_pb_uint(&pf.ev, TE_TRACK, track);
    if (name) {
        shp_pb_uint(&pf.ev, TE_NAME_IID, pf_intern(&pf.names, ID_EVENT_NAMES, name));
        shp_pb_str(&pf.ev, TE_CATEGORIES, cat);
    }
    pf_annots(a, na);
    for (int i = 0; i < nf; i++)
        shp_pb_fixed64(&pf.ev, TE_FLOW_IDS, f[i].id);
    shp_pb_uint(&pf.pkt, PKT_TIMESTAMP, ts - x->t0);
    if (pf.interned.len)
        shp_pb_msg(&pf.pkt, PKT_INTERNED, &pf.interned);
    shp_pb_msg(&pf.pkt, PKT_TRACK_EVENT, &pf.ev);
    pf_packet(x, name != NULL);
}

static void pf_slice(struct xp *x, const struct slice *s)
{
    uint64_t track = thread_uuid(s->pid, s->tord);
    pf_event(x, s->ts, TE_SLICE_BEGIN, track, s->name, s->cat, s->a, s->na, s->f, s->nf);
    pf_event(x, s->ts + s->dur, TE_SLICE_END, track, NULL, NULL, NULL, 0, NULL, 0);
}

static int pf_end(struct xp *x)
{
    pf_write(x, true);
    bool oom = pf.pkt.oom || pf.ev.oom || pf.sub.oom || pf.interned.oom || pf.out.oom;
    itab_free(&pf.names), itab_free(&pf.keys), itab_free(&pf.values);
    shp_pb_free(&pf.pkt), shp_pb_free(&pf.ev), shp_pb_free(&pf.sub);
    shp_pb_free(&pf.interned), shp_pb_free(&pf.item), shp_pb_free(&pf.out);
    pf.cleared = false;
    return oom ? -ENOMEM : 0;
}

/* ---- the timeline ---- */

static const char *site_of(struct xp *x, struct proc *p, uint32_t stack)
{
    struct shp_stacks *st = stack ? shp_session_stacks(x->session, p->si) : NULL;
    if (!st)
        return NULL;
    if (stack >= p->nsites) {
        size_t n = p->nsites ? p->nsites : 64;
        while (n <= stack)
            n *= 2;
        char **s = realloc(p->sites, n * sizeof(*s));
        if (!s)
            return NULL;
        memset(s + p->nsites, 0, (n - p->nsites) * sizeof(*s));
        p->sites = s;
        p->nsites = n;
    }
    if (!p->sites[stack]) {
        char buf[512];
        shp_stacks_site(st, stack, buf, sizeof(buf));
        p->sites[stack] = strdup(buf);
    }
    return p->sites[stack];
}

static const char *cat_of(const struct shp_event *e)
{
    switch (e->cls) {
    case SHP_CLS_COLL:
        return "collective";
    case SHP_CLS_P2P:
        return "p2p";
    case SHP_CLS_COPY:
        return "copy";
    case SHP_CLS_ALLOC:
    case SHP_CLS_FREE:
        return "memory";
    case SHP_CLS_GROUP:
        return "group";
    case 0:
        return "mark";
    default:
        return e->type == SHP_REC_GRAPH ? "graph" : "communicator";
    }
}

/* The flows of a collective call: from the previous member that made the same collective, and
 * to the next one, in communicator rank order (only members whose call is exported). */
static void coll_flows(struct xp *x, const struct shp_event *e, struct slice *s)
{
    const struct comm *c = comm_of(x, e->comm);
    if (!c)
        return;
    size_t me = e->comm_rank >= 0 && (size_t)e->comm_rank < c->n ? (size_t)e->comm_rank : 0;
    if (c->m[me].pc->comm_rank != e->comm_rank)
        for (me = 0; me < c->n && c->m[me].pc->comm_rank != e->comm_rank;)
            me++;
    if (me == c->n)
        return;
    for (size_t k = me; k-- > 0;) {
        const struct coll_at *a = find_seq(c->m[k].pc, e->seq);
        if (a && in_window(x, a->t0, a->t1)) {
            s->f[s->nf++] =
                (struct flow){coll_flow_id(e->comm, e->seq, c->m[k].pc->comm_rank, e->comm_rank),
                              false, "collective"};
            break;
        }
    }
    for (size_t k = me + 1; k < c->n; k++) {
        const struct coll_at *a = find_seq(c->m[k].pc, e->seq);
        if (a && in_window(x, a->t0, a->t1)) {
            s->f[s->nf++] =
                (struct flow){coll_flow_id(e->comm, e->seq, e->comm_rank, c->m[k].pc->comm_rank),
                              true, "collective"};
            break;
        }
    }
}

static void lineage_flows(const struct proc *p, uint64_t index, struct slice *s)
{
    size_t lo = lower_bound(p->lf, p->nlf, sizeof(*p->lf), index);
    for (; lo < p->nlf && p->lf[lo].index == index && s->nf < MAX_FLOWS; lo++)
        s->f[s->nf++] = (struct flow){p->lf[lo].id, p->lf[lo].out, "lineage"};
}

static void fill_args(struct xp *x, struct proc *p, const struct shp_event *e, uint64_t index,
                      struct slice *s)
{
    s->na = 0;
    arg_s(s, "op", e->mark ? "mark" : shp_op_name(e->op));
    if (e->comm) {
        snprintf(s->comm, sizeof(s->comm), "%016" PRIx64, e->comm);
        arg_s(s, "comm", s->comm);
        arg_i(s, "comm_rank", e->comm_rank);
        arg_i(s, "nranks", e->nranks);
    }
    arg_u(s, "seq", e->seq);
    arg_u(s, "count", e->count);
    if (e->dtype >= 0)
        arg_s(s, "dtype", shp_dtype_name((unsigned)e->dtype));
    if (e->redop >= 0)
        arg_s(s, "redop", shp_redop_name((unsigned)e->redop));
    arg_u(s, "bytes", e->bytes);
    if (e->kind >= 0 && e->kind <= 4)
        arg_s(s, "kind", shp_kind_names[e->kind]);
    arg_i(s, "peer", e->peer);
    arg_i(s, "root", e->root);
    if (e->type == SHP_REC_COPY && e->height != SHP_NONE && e->height != 1) {
        arg_u(s, "width", e->width);
        arg_u(s, "height", e->height);
    }
    arg_u(s, "size", e->size);
    arg_s(s, "site", site_of(x, p, e->stack));
    arg_s(s, "mark", e->mark);
    if (e->flags & SHP_EV_CAPTURED && s->na < MAX_ARGS)
        s->a[s->na++] = (struct arg){"captured", ARG_B, 1, NULL};
    if (e->dur_ns == SHP_NONE && !e->mark && s->na < MAX_ARGS)
        s->a[s->na++] = (struct arg){"in_flight", ARG_B, 1, NULL};
    if (e->result && s->na < MAX_ARGS)
        s->a[s->na++] = (struct arg){"result", ARG_I, (uint64_t)(int64_t)e->result, NULL};
    arg_u(s, "index", index);
}

static uint32_t tord_of(const struct proc *p, uint32_t tid)
{
    for (uint32_t k = 0; k < p->ntids; k++)
        if (p->tids[k] == tid)
            return k;
    return 0;
}

static void proc_name(const struct proc *p, char *out, size_t len)
{
    const struct shp_file_header *h = p->sp->t.hdr;
    const char *incomplete = shp_proc_complete(p->sp) ? "" : " INCOMPLETE";
    if (p->sp->rank >= 0)
        snprintf(out, len, "rank %d (%s:%" PRIu64 ")%s", p->sp->rank, h->host, h->pid, incomplete);
    else
        snprintf(out, len, "rank ? (%s:%" PRIu64 ")%s", h->host, h->pid, incomplete);
}

static void write_tracks(struct xp *x, struct proc *p)
{
    char name[160];
    proc_name(p, name, sizeof(name));
    if (x->perfetto)
        pf_track(x, p->pid, -1, name, 0);
    else
        json_meta(p->pid, 0, "process_name", name, (int)p->pid);
    for (uint32_t k = 0; k < p->ntids; k++) {
        const char *what = p->tids[k] == p->sp->t.hdr->pid ? "main thread" : "thread";
        if (x->perfetto) {
            pf_track(x, p->pid, (int)k, what, p->tids[k]);
        } else {
            snprintf(name, sizeof(name), "%s %u", what, p->tids[k]);
            json_meta(p->pid, p->tids[k], "thread_name", name, -1);
        }
    }
}

/* Pass 2: one slice per call in the window. */
static void write_proc(struct xp *x, struct proc *p)
{
    write_tracks(x, p);
    struct shp_cursor cur = {0};
    uint64_t index = 0;
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    struct slice s;
    const struct shp_trace *t = &p->sp->t;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e))
            continue;
        uint64_t i = index++;
        uint64_t end = e.mark ? e.t_ns : end_of(x, &e);
        if (!in_window(x, e.t_ns, end))
            continue;
        s.pid = p->pid;
        s.tid = e.tid;
        s.tord = tord_of(p, e.tid);
        s.ts = e.t_ns;
        s.dur = end - e.t_ns;
        s.name = e.mark ? "mark" : shp_op_name(e.op);
        s.cat = cat_of(&e);
        s.nf = 0;
        fill_args(x, p, &e, i, &s);
        if (type == SHP_REC_COLL && e.comm && e.seq != SHP_NONE)
            coll_flows(x, &e, &s);
        if (p->nlf)
            lineage_flows(p, i, &s);
        x->slices++;
        x->flows += (uint64_t)s.nf;
        if (e.mark) {
            if (x->perfetto)
                pf_event(x, s.ts, TE_INSTANT, thread_uuid(p->pid, s.tord), e.mark, "mark", s.a,
                         s.na, NULL, 0);
            else
                json_instant(x, p->pid, e.tid, false, s.ts, e.mark, s.a, s.na);
        } else if (x->perfetto) {
            pf_slice(x, &s);
        } else {
            json_slice(x, &s);
        }
    }
}

/* ---- findings and lineage, from the analysis's result ---- */

/* The process of a call a finding names, NULL when it is left out (or the call is none). */
static struct proc *proc_of(struct xp *x, const struct an_call *c)
{
    return c->ok ? x->of_session[c->proc] : NULL;
}

static struct proc *proc_by_rank(struct xp *x, long long rank)
{
    for (size_t i = 0; i < x->nprocs; i++)
        if (x->procs[i].sp->rank == rank)
            return &x->procs[i];
    return NULL;
}

static void add_lf(struct proc *p, uint64_t index, uint64_t id, bool out)
{
    for (size_t i = 0; i < p->nlf; i++)
        if (p->lf[i].index == index && p->lf[i].id == id)
            return;
    struct lflow *lf = realloc(p->lf, (p->nlf + 1) * sizeof(*lf));
    if (!lf)
        return;
    p->lf = lf;
    p->lf[p->nlf++] = (struct lflow){index, id, out};
}

static int by_index(const void *a, const void *b)
{
    const struct lflow *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Lineage arrows: each finding's producers, farthest first, then the consumer (its first
 * event). The same pair met in two findings gets one arrow. */
static void plan_lineage(struct xp *x)
{
    uint64_t next_id = 1ull << 63;
    for (size_t i = 0; i < x->report->nfindings; i++) {
        const struct an_result_finding *f = &x->report->findings[i];
        size_t n = (size_t)f->f.nlineage;
        if (!n || !f->f.nevents)
            continue;
        const struct an_call *chain[CHAIN_MAX];
        size_t m = 0;
        for (size_t k = n; k-- > 0 && m < CHAIN_MAX - 1;)
            chain[m++] = &f->lineage[k];
        chain[m++] = &f->events[0];
        for (size_t k = 0; k + 1 < m; k++) {
            struct proc *a = proc_of(x, chain[k]), *b = proc_of(x, chain[k + 1]);
            if (!a || !b)
                continue;
            uint64_t ia = chain[k]->e.index, ib = chain[k + 1]->e.index;
            bool seen = false;
            for (size_t q = 0; q < a->nlf && !seen; q++)
                if (a->lf[q].index == ia && a->lf[q].out)
                    for (size_t w = 0; w < b->nlf && !seen; w++)
                        seen = b->lf[w].index == ib && b->lf[w].id == a->lf[q].id;
            if (seen)
                continue;
            add_lf(a, ia, next_id, true);
            add_lf(b, ib, next_id, false);
            next_id++;
        }
    }
    for (size_t p = 0; p < x->nprocs; p++)
        if (x->procs[p].nlf)
            qsort(x->procs[p].lf, x->procs[p].nlf, sizeof(*x->procs[p].lf), by_index);
}

/* Each finding as an instant event on every rank it names, at that rank's call, else where
 * that rank's trace ends (a rank that stopped). */
static void write_findings(struct xp *x)
{
    for (size_t i = 0; i < x->report->nfindings; i++) {
        const struct an_result_finding *f = &x->report->findings[i];
        const char *kind = an_kind_names[f->f.kind];
        char comm[24] = "";
        if (f->f.comm)
            snprintf(comm, sizeof(comm), "%016" PRIx64, f->f.comm);
        for (int k = 0; k < f->f.nranks; k++) {
            struct proc *p = proc_by_rank(x, f->f.ranks[k]);
            if (!p)
                continue;
            uint64_t ts = p->sp->last_ns;
            for (int j = 0; j < f->f.nevents; j++) {
                const struct an_call *ev = &f->events[j];
                /* A process without a rank names none. */
                if (ev->ok && p->sp->rank >= 0 && x->session->procs[ev->proc].rank == p->sp->rank) {
                    ts = ev->e.t_ns;
                    break;
                }
            }
            if (!in_window(x, ts, ts))
                continue;
            struct slice s = {.na = 0};
            arg_s(&s, "summary", f->f.summary);
            arg_s(&s, "severity", f->f.error ? "error" : "warning");
            arg_s(&s, "comm", comm);
            arg_u(&s, "seq", f->f.seq);
            arg_u(&s, "finding", i);
            x->instants++;
            if (x->perfetto)
                pf_event(x, ts, TE_INSTANT, proc_uuid(p->pid), kind, "finding", s.a, s.na, NULL, 0);
            else
                json_instant(x, p->pid, p->ntids ? p->tids[0] : 0, true, ts, kind, s.a, s.na);
        }
    }
}

/* ---- options ---- */

static int parse_ranks(const char *s, int **out, size_t *n)
{
    size_t cap = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0)
            return -1;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a)
                return -1;
        }
        for (long r = a; r <= b; r++) {
            *out = grow(*out, &cap, *n + 1, sizeof(**out));
            (*out)[(*n)++] = (int)r;
        }
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return *n ? 0 : -1;
}

/* Seconds, or a number with s, ms, us or ns. */
static int parse_time(const char *s, uint64_t *ns)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    double scale = 1e9;
    if (!strcmp(end, "ms"))
        scale = 1e6;
    else if (!strcmp(end, "us"))
        scale = 1e3;
    else if (!strcmp(end, "ns"))
        scale = 1;
    else if (*end && strcmp(end, "s"))
        return -1;
    *ns = (uint64_t)(v * scale);
    return 0;
}

static void free_procs(struct xp *x)
{
    for (size_t i = 0; i < x->nprocs; i++) {
        struct proc *p = &x->procs[i];
        for (size_t k = 0; k < p->npc; k++)
            free(p->pc[k].c);
        for (size_t k = 0; k < p->nsites; k++)
            free(p->sites[k]);
        free(p->sites);
        free(p->pc);
        free(p->tids);
        free(p->lf);
    }
    free(x->procs);
    free(x->of_session);
    for (size_t j = 0; j < x->ncomms; j++)
        free(x->comms[j].m);
    free(x->comms);
}

static int by_rank(const void *a, const void *b)
{
    const struct proc *x = a, *y = b;
    /* Known ranks in order, then the processes without one. */
    unsigned rx = (unsigned)x->sp->rank, ry = (unsigned)y->sp->rank;
    if (rx != ry)
        return rx < ry ? -1 : 1;
    return strcmp(x->sp->t.path, y->sp->t.path);
}

/* The session's processes of the ranks given (all without --ranks), in rank order. */
static int load(struct xp *x, const int *ranks, size_t nranks)
{
    struct shp_session *s = x->session;
    x->procs = calloc(s->nprocs ? s->nprocs : 1, sizeof(*x->procs));
    x->of_session = calloc(s->nprocs ? s->nprocs : 1, sizeof(*x->of_session));
    if (!x->procs || !x->of_session) {
        shp_err("export: out of memory");
        return -1;
    }
    for (size_t k = 0; k < s->nprocs; k++) {
        bool wanted = !nranks;
        for (size_t q = 0; q < nranks && !wanted; q++)
            wanted = ranks[q] == s->procs[k].rank;
        if (wanted)
            x->procs[x->nprocs++] = (struct proc){.sp = &s->procs[k], .si = k};
    }
    if (!x->nprocs) {
        shp_err("export: no trace %s", nranks ? "of the ranks given" : "in the paths given");
        return -1;
    }
    qsort(x->procs, x->nprocs, sizeof(*x->procs), by_rank);
    x->t0 = UINT64_MAX;
    for (size_t i = 0; i < x->nprocs; i++) {
        struct proc *p = &x->procs[i];
        x->of_session[p->si] = p;
        p->pid = (uint32_t)i + 1;
        scan(p);
        if (p->sp->events && p->sp->first_ns < x->t0)
            x->t0 = p->sp->first_ns;
        if (p->sp->last_ns > x->tend)
            x->tend = p->sp->last_ns;
    }
    if (x->t0 == UINT64_MAX)
        x->t0 = 0;
    return 0;
}

/* What the command line asks for. */
struct export_args {
    bool perfetto, findings;
    int *ranks; /* --ranks, nranks of them; NULL: all */
    size_t nranks;
    uint64_t from, to; /* ns after the first call */
    const char *outpath;
    char **aargs; /* the analysis options, as shp_cmd_analysis_args takes them */
    int naargs;
    char **paths;
    int npaths;
};

/* One option of the command line into a, checked. Returns 0, or SHP_EXIT_USAGE after one line. */
static int take(struct export_args *a, int id, char *v)
{
    if (id == OPT_FORMAT && (!strcmp(v, "chrome") || !strcmp(v, "json"))) {
        a->perfetto = false;
    } else if (id == OPT_FORMAT && (!strcmp(v, "perfetto") || !strcmp(v, "proto"))) {
        a->perfetto = true;
    } else if (id == OPT_FORMAT) {
        shp_err("--format takes chrome or perfetto, not '%s'", v);
        return SHP_EXIT_USAGE;
    } else if (id == OPT_RANKS) {
        if (parse_ranks(v, &a->ranks, &a->nranks) < 0) {
            shp_err("--ranks takes a list like 0,2,4-7, not '%s'", v);
            return SHP_EXIT_USAGE;
        }
    } else if (id == OPT_FROM || id == OPT_TO) {
        if (parse_time(v, id == OPT_FROM ? &a->from : &a->to) < 0) {
            shp_err("--%s takes seconds (or a number with ms, us, ns), not '%s'",
                    id == OPT_FROM ? "from" : "to", v);
            return SHP_EXIT_USAGE;
        }
    } else if (id == OPT_DIM || id == OPT_EXPECT) {
        a->aargs[a->naargs++] = id == OPT_DIM ? "--dim" : "--expect";
        a->aargs[a->naargs++] = v;
    } else if (id == OPT_NO_FINDINGS) {
        a->findings = false;
    } else if (id == OPT_OUT) {
        a->outpath = v;
    }
    return 0;
}

static int parse(struct export_args *a, int argc, char **argv)
{
    struct shp_optparse p;
    int c, rc;
    memset(a, 0, sizeof(*a));
    a->to = UINT64_MAX;
    a->findings = true;
    a->aargs = calloc((size_t)argc * 2 + 1, sizeof(char *));
    if (!a->aargs)
        return SHP_EXIT_USAGE;
    shp_opts_begin(&p, &export_opts);
    while ((c = shp_opts_next(&p, argc, argv)) >= 0)
        if ((rc = take(a, c, p.arg)) != 0)
            return rc;
    if (c == SHP_OPT_STOP)
        return p.status;
    if (optind >= argc)
        return shp_usage_error("export", "no trace given");
    if (a->from > a->to) {
        shp_err("export: --from is after --to");
        return SHP_EXIT_USAGE;
    }
    a->paths = argv + optind;
    a->npaths = argc - optind;
    return SHP_PARSED;
}

int shp_cmd_export(int argc, char **argv)
{
    struct export_args a;
    struct xp x;
    memset(&x, 0, sizeof(x));
    struct shp_session session;
    memset(&session, 0, sizeof(session));
    struct an_options ao;
    memset(&ao, 0, sizeof(ao));
    struct an_result *result = NULL;
    int status = parse(&a, argc, argv);
    if (status != SHP_PARSED)
        goto out;
    status = SHP_EXIT_USAGE;
    x.perfetto = a.perfetto;
    /* The analysis refuses a trace given twice (it would look like two ranks). */
    if (shp_session_open(&session, a.paths, a.npaths, a.findings ? SHP_SESSION_UNIQUE : 0,
                         "the export") < 0)
        goto out;
    x.session = &session;
    if (load(&x, a.ranks, a.nranks) < 0)
        goto out;
    x.from = a.from == 0 ? 0 : x.t0 + a.from;
    x.to = a.to == UINT64_MAX ? UINT64_MAX : x.t0 + a.to;
    build_comms(&x);
    if (a.findings) {
        /* As analyze --json would run on the same traces, every rank's: --ranks cuts only the
         * drawing. */
        if (shp_cmd_analysis_args(&ao, a.aargs, a.naargs) < 0)
            goto out;
        shp_cmd_analysis(&ao, &session, &result);
        if (!result)
            goto out;
        x.report = result;
        plan_lineage(&x);
    }
    const char *outpath = a.outpath    ? a.outpath
                          : x.perfetto ? "trace.perfetto-trace"
                                       : "trace.json";
    x.out = !strcmp(outpath, "-") ? stdout : fopen(outpath, "w");
    if (!x.out) {
        shp_err("%s: %s", outpath, strerror(errno));
        goto out;
    }
    if (!x.perfetto)
        json_begin(&x);
    for (size_t i = 0; i < x.nprocs; i++) {
        write_proc(&x, &x.procs[i]);
        /* Its call sites are drawn: thousands of traces are held one at a time. */
        shp_session_release(&session, x.procs[i].si);
    }
    if (x.report)
        write_findings(&x);
    int rc = 0;
    if (x.perfetto)
        rc = pf_end(&x);
    else
        json_end(&x);
    if (fflush(x.out) || ferror(x.out) || rc < 0) {
        shp_err("%s: %s", outpath, rc < 0 ? strerror(-rc) : strerror(errno));
        goto out;
    }
    fprintf(stderr,
            "shapetrace: %s: %zu process%s, %" PRIu64 " slices, %" PRIu64 " flow ends, %" PRIu64
            " finding events (%s)\n",
            outpath, x.nprocs, x.nprocs == 1 ? "" : "es", x.slices, x.flows, x.instants,
            x.perfetto ? "Perfetto protobuf" : "Chrome JSON");
    status = SHP_EXIT_OK;
out:
    if (x.out && x.out != stdout)
        fclose(x.out);
    an_result_free(result);
    an_options_free(&ao);
    free_procs(&x);
    shp_session_close(&session);
    free(a.ranks);
    free(a.aargs);
    return status;
}
