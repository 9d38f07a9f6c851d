/* shapetrace render: the walk of the timeline (timeline.h). The scan learns each process's
 * threads and time span and where each of its collectives ran; the drawing turns every call into
 * a slice with its arguments and flows and hands it to the backend, then the findings. Nothing
 * here knows what a backend writes. */
#define _GNU_SOURCE
#include "tools/render/timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/analyze.h"
#include "tools/lib/out.h"
#include "tools/lib/session.h"
#include "tools/lib/stacks.h"
#include "tools/render/sink.h"

#define CHAIN_MAX 16 /* producers and consumer of one finding's arrows */

/* The collectives of a process, each drawn where it executed: an eager call where it was
 * issued, a captured one at each graph launch that replayed it, both keyed by their position
 * among what the process executed on the communicator (kind 0); and a captured call at its
 * capture, keyed by its seq (kind 1), where it executed nothing. A key is at << 1 | kind. */
struct span {
    uint64_t t0, t1; /* t1 0 while in flight, until the end of the traces is known */
};

struct proc_comm { /* one process's collectives on one communicator, sorted by key */
    uint64_t comm;
    int comm_rank;
    uint64_t *key;
    struct span *tm; /* beside key, for a window (shp_tl_options.window) only */
    size_t n, cap, tmcap;
    /* the position of the next execution, counted as walk_* below do */
    int64_t offset;
    uint64_t next;
};

struct proc;

struct lflow {          /* one end of an arrow the analysis gave: at the call of this index */
    uint64_t index, id; /* index first: the key of lower_bound */
    bool out;
    const char *cat;
    const struct proc *other; /* the process of the other end, and that call's times */
    uint64_t other_t0, other_t1;
};

/* What the walk keeps of a process beside its public description (same position). */
struct proc {
    struct shp_tl_proc *pub;
    size_t tcap;
    struct proc_comm *pc;
    size_t npc, pccap, pc_hint;
    struct lflow *lf;
    size_t nlf, lfcap;
    const char **sites; /* call sites by stack id (the walk's texts); UNSITED: one the scan met */
    size_t nsites;
};

/* A stack id the scan met, whose call site the drawing makes before its threads start. */
static const char UNSITED[] = "";

struct member {
    struct proc *p;
    struct proc_comm *pc;
};

struct comm {
    uint64_t id;
    struct member *m; /* by comm_rank */
    size_t n;
    size_t base; /* its members' first slot among a pen's cursors */
};

/* The texts the walk hands to the backends, kept for its lifetime, one copy of each (an
 * argument's address is stable, timeline.h): call sites, marks. */
struct pool {
    char **s;
    uint64_t *h;
    size_t n, cap; /* open addressing, at most half full */
};

/* The text of a communicator id, kept for the walk's lifetime. */
struct comm_text {
    uint64_t id;
    char text[20];
};

/* What CUDA graphs execute, followed through the records as the analyzer follows them: capture
 * id -> the graph cudaStreamEndCapture returned -> the executable cudaGraphInstantiate* made from
 * it -> each cudaGraphLaunch of that executable, which replays the collectives captured. */
struct captured {
    uint64_t comm, seq;
    int comm_rank;
};
struct capture {
    uint64_t capture, graph;
    struct captured *c;
    size_t n, cap;
};
struct graphs {
    struct capture *v;
    size_t n, cap;
    struct exec {
        uint64_t exec;
        size_t capture;
    } * x;
    size_t nx, capx;
};

struct shp_tl {
    struct shp_session *session;
    const struct shp_tl_options *o;
    struct shp_tl_proc *pub; /* in rank order */
    struct proc *procs;      /* beside pub */
    size_t nprocs;
    struct proc **of_session; /* by session index: its process here, NULL if left out */
    struct comm *comms;
    size_t ncomms, comms_cap, nmembers;
    /* The texts, shared by the drawing's threads under the lock. */
    pthread_mutex_t lock;
    struct comm_text **texts;
    size_t ntexts, texts_cap;
    struct pool pool;
    uint64_t t0, tend;
    bool oom;
    struct graphs graphs; /* the scan's, of the process being scanned */
    /* the drawing's (read only while it runs) */
    uint64_t from, to;
    const bool *only;
};

/* What one thread of the drawing holds (a pen): the backend's state it draws with, the arrows
 * and executions of the call it draws, the graphs of the process it walks, where its lookups
 * ended, what it drew. */
struct pen {
    struct shp_tl *tl;
    void *b;
    const struct shp_tl_ops *ops;
    struct shp_tl_flow *flows;
    size_t flows_cap;
    struct graphs graphs;
    struct execution { /* what the call being drawn executed */
        uint64_t comm, at, kind;
        int comm_rank;
    } * ex;
    size_t ex_cap;
    size_t *cursor; /* by member slot (comm.base + its position): where made() last ended */
    size_t hint;    /* the communicator looked up last */
    const struct comm_text *text; /* the communicator text made last */
    uint64_t slices, flows_drawn, instants;
    bool oom;
};

static bool grow(void **arr, size_t *cap, size_t n, size_t size, bool *oom)
{
    if (shp_grow(arr, cap, n, size))
        return true;
    *oom = true;
    return false;
}

static uint64_t end_of(const struct shp_tl *tl, const struct shp_event *e)
{
    return e->dur_ns == SHP_NONE ? tl->tend : e->t_ns + e->dur_ns;
}

static bool in_window(const struct shp_tl *tl, uint64_t t0, uint64_t t1)
{
    return t1 >= tl->from && t0 <= tl->to;
}

static int by_key(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

struct keyed {
    uint64_t key;
    struct span tm;
};

static int by_keyed(const void *a, const void *b)
{
    return by_key(&((const struct keyed *)a)->key, &((const struct keyed *)b)->key);
}

/* Positions on a communicator: how many collectives the process executed there before, counted
 * so that ranks armed at different points (attach) agree: an eager call's seq (which counts
 * every collective issued, recorded or not), less the captured calls issued before it (they
 * execute only when replayed), plus the replays before it; a replay takes the position after
 * the last one. On a trace without captures, the position is the seq. */
static uint64_t walk_call(struct proc_comm *pc, const struct shp_event *e, uint64_t *kind)
{
    if (e->flags & SHP_EV_CAPTURED) {
        pc->offset--;
        *kind = 1;
        return e->seq;
    }
    *kind = 0;
    uint64_t at = e->seq + (uint64_t)pc->offset;
    pc->next = at + 1;
    return at;
}

static uint64_t walk_replay(struct proc_comm *pc)
{
    pc->offset++;
    return pc->next++;
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

/* ---- the walk's texts ---- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The walk's copy of s; NULL when out of memory. The caller holds the walk's lock. */
static const char *pooled_locked(struct shp_tl *tl, const char *s)
{
    struct pool *p = &tl->pool;
    if (p->n * 2 >= p->cap) {
        struct pool np = {.cap = p->cap ? p->cap * 2 : 1024};
        np.s = calloc(np.cap, sizeof(*np.s));
        np.h = calloc(np.cap, sizeof(*np.h));
        if (!np.s || !np.h) {
            free(np.s), free(np.h);
            tl->oom = true;
            return NULL;
        }
        for (size_t i = 0; i < p->cap; i++) {
            if (!p->s[i])
                continue;
            size_t k = p->h[i] & (np.cap - 1);
            while (np.s[k])
                k = (k + 1) & (np.cap - 1);
            np.s[k] = p->s[i], np.h[k] = p->h[i];
        }
        np.n = p->n;
        free(p->s), free(p->h);
        *p = np;
    }
    uint64_t h = hash_str(s);
    size_t k = h & (p->cap - 1);
    for (; p->s[k]; k = (k + 1) & (p->cap - 1))
        if (p->h[k] == h && !strcmp(p->s[k], s))
            return p->s[k];
    if (!(p->s[k] = strdup(s))) {
        tl->oom = true;
        return NULL;
    }
    p->h[k] = h;
    p->n++;
    return p->s[k];
}

/* The same, from any thread of the drawing. */
static const char *pooled(struct shp_tl *tl, const char *s)
{
    pthread_mutex_lock(&tl->lock);
    const char *c = pooled_locked(tl, s);
    pthread_mutex_unlock(&tl->lock);
    return c;
}

/* ---- graphs ---- */

static void graphs_reset(struct graphs *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->v[i].c);
    free(g->v);
    free(g->x);
    memset(g, 0, sizeof(*g));
}

/* Newest first: a handle the driver reuses after a destroy names the latest graph. */
static struct capture *capture_by(struct graphs *g, uint64_t capture, uint64_t graph)
{
    for (size_t i = g->n; i-- > 0;)
        if (capture ? g->v[i].capture == capture : graph && g->v[i].graph == graph)
            return &g->v[i];
    return NULL;
}

static struct capture *capture_new(struct graphs *g, bool *oom, uint64_t capture)
{
    if (!grow((void **)&g->v, &g->cap, g->n, sizeof(*g->v), oom))
        return NULL;
    g->v[g->n] = (struct capture){.capture = capture};
    return &g->v[g->n++];
}

/* Follows e's graph records. Returns the capture a launch replays (NULL for anything else, or
 * an executable the trace does not show made). */
static struct capture *graphs_event(struct graphs *g, bool *oom, const struct shp_event *e)
{
    if (e->type == SHP_REC_COLL && (e->flags & SHP_EV_CAPTURED) && e->graph != SHP_NONE &&
        e->comm && e->seq != SHP_NONE) {
        struct capture *c = capture_by(g, e->graph, 0);
        if (!c)
            c = capture_new(g, oom, e->graph);
        if (c && grow((void **)&c->c, &c->cap, c->n, sizeof(*c->c), oom))
            c->c[c->n++] = (struct captured){e->comm, e->seq, e->comm_rank};
        return NULL;
    }
    if (e->type != SHP_REC_GRAPH)
        return NULL;
    if (e->cls == SHP_CLS_LAUNCH) {
        if (e->exec == SHP_NONE || (e->result != 0 && e->dur_ns != SHP_NONE))
            return NULL;
        for (size_t i = g->nx; i-- > 0;)
            if (g->x[i].exec == e->exec)
                return &g->v[g->x[i].capture];
        return NULL;
    }
    if (e->result != 0)
        return NULL;
    if (e->cls == SHP_CLS_CAPTURE && e->capture != SHP_NONE && e->graph != SHP_NONE) {
        struct capture *c = capture_by(g, e->capture, 0);
        if (!c)
            c = capture_new(g, oom, e->capture);
        if (c)
            c->graph = e->graph;
    } else if (e->cls == SHP_CLS_GRAPH && e->graph != SHP_NONE && e->exec != SHP_NONE) {
        struct capture *c = capture_by(g, 0, e->graph);
        if (c && grow((void **)&g->x, &g->capx, g->nx, sizeof(*g->x), oom))
            g->x[g->nx++] = (struct exec){e->exec, (size_t)(c - g->v)};
    }
    return NULL;
}

/* ---- the scan ---- */

/* Keeps collective (at, kind) of pc, made from t0 to t1. */
static void keep(struct shp_tl *tl, struct proc_comm *pc, uint64_t at, uint64_t kind, uint64_t t0,
                 uint64_t t1)
{
    if (!grow((void **)&pc->key, &pc->cap, pc->n, sizeof(*pc->key), &tl->oom))
        return;
    if (tl->o->window) {
        if (!grow((void **)&pc->tm, &pc->tmcap, pc->n, sizeof(*pc->tm), &tl->oom))
            return;
        pc->tm[pc->n] = (struct span){t0, t1};
    }
    pc->key[pc->n++] = at << 1 | kind;
}

/* Sorts pc's keys, which come nearly sorted (calls of several threads interleave). */
static void sort_keys(struct shp_tl *tl, struct proc_comm *pc)
{
    bool sorted = true;
    for (size_t k = 1; k < pc->n && sorted; k++)
        sorted = pc->key[k - 1] <= pc->key[k];
    if (sorted)
        return;
    if (!pc->tm) {
        qsort(pc->key, pc->n, sizeof(*pc->key), by_key);
        return;
    }
    struct keyed *v = malloc(pc->n * sizeof(*v));
    if (!v) {
        tl->oom = true;
        return;
    }
    for (size_t k = 0; k < pc->n; k++)
        v[k] = (struct keyed){pc->key[k], pc->tm[k]};
    qsort(v, pc->n, sizeof(*v), by_keyed);
    for (size_t k = 0; k < pc->n; k++)
        pc->key[k] = v[k].key, pc->tm[k] = v[k].tm;
    free(v);
}

/* p's collectives on comm as the scan found them, or NULL. */
static struct proc_comm *pc_of(struct proc *p, uint64_t comm)
{
    if (p->pc_hint < p->npc && p->pc[p->pc_hint].comm == comm)
        return &p->pc[p->pc_hint];
    for (size_t i = 0; i < p->npc; i++)
        if (p->pc[i].comm == comm)
            return &p->pc[p->pc_hint = i];
    return NULL;
}

static struct proc_comm *proc_comm(struct shp_tl *tl, struct proc *p, uint64_t comm, int comm_rank)
{
    for (size_t i = p->npc; i-- > 0;)
        if (p->pc[i].comm == comm)
            return &p->pc[i];
    if (!grow((void **)&p->pc, &p->pccap, p->npc, sizeof(*p->pc), &tl->oom))
        return NULL;
    struct proc_comm *c = &p->pc[p->npc++];
    memset(c, 0, sizeof(*c));
    c->comm = comm;
    c->comm_rank = comm_rank;
    return c;
}

/* Room in p->sites for stack id; false when out of memory. */
static bool sites_room(struct proc *p, uint32_t stack, bool *oom)
{
    if (stack < p->nsites)
        return true;
    size_t n = p->nsites ? p->nsites : 64;
    while (n <= stack)
        n *= 2;
    const char **s = realloc(p->sites, n * sizeof(*s));
    if (!s) {
        *oom = true;
        return false;
    }
    memset(s + p->nsites, 0, (n - p->nsites) * sizeof(*s));
    p->sites = s;
    p->nsites = n;
    return true;
}

/* Threads, time span, and with flows every collective's (communicator, seq) with its times.
 * The end times of in-flight calls are only known once every trace is read: fixed up after. */
static void scan(struct shp_tl *tl, struct proc *p)
{
    const struct shp_tl_options *o = tl->o;
    struct shp_cursor cur = {0};
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    struct proc_comm *last = NULL;
    struct shp_tl_proc *pub = p->pub;
    const struct shp_trace *t = &pub->sp->t;
    uint64_t events = 0;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e))
            continue;
        e.index = events++;
        uint64_t until = e.dur_ns == SHP_NONE ? e.t_ns : e.t_ns + e.dur_ns;
        if (!pub->first_ns || e.t_ns < pub->first_ns)
            pub->first_ns = e.t_ns;
        if (until > pub->last_ns)
            pub->last_ns = until;
        if (o->scan)
            o->scan(o->arg, pub, &e);
        if (e.stack && sites_room(p, e.stack, &tl->oom) && !p->sites[e.stack])
            p->sites[e.stack] = UNSITED;
        size_t k = 0;
        while (k < pub->ntids && pub->tids[k] != e.tid)
            k++;
        if (k == pub->ntids &&
            grow((void **)&pub->tids, &p->tcap, pub->ntids, sizeof(*pub->tids), &tl->oom))
            pub->tids[pub->ntids++] = e.tid;
        if (!o->flows)
            continue;
        uint64_t end = e.dur_ns == SHP_NONE ? 0 : e.t_ns + e.dur_ns;
        if (type == SHP_REC_COLL && e.comm && e.seq != SHP_NONE) {
            if (!last || last->comm != e.comm)
                last = proc_comm(tl, p, e.comm, e.comm_rank);
            uint64_t kind, at = last ? walk_call(last, &e, &kind) : 0;
            if (last)
                keep(tl, last, at, kind, e.t_ns, end);
        }
        /* A replay executes its captured collectives where it is launched. */
        struct capture *g = graphs_event(&tl->graphs, &tl->oom, &e);
        for (size_t i = 0; g && i < g->n; i++) {
            struct captured *c = &g->c[i];
            /* made when the captured call was met: no new one that could move `last` */
            struct proc_comm *pc = pc_of(p, c->comm);
            if (pc)
                keep(tl, pc, walk_replay(pc), 0, e.t_ns, end);
        }
    }
    graphs_reset(&tl->graphs);
    pub->events = events;
    pub->torn = cur.torn;
    for (size_t i = 0; i < p->npc; i++)
        sort_keys(tl, &p->pc[i]);
}

/* Whether c holds collective (at, kind), made in the drawing's window. The lookups of one
 * drawing mostly go forward, one key at a time: from where the last one ended, a few steps, else
 * a binary search. */
static bool made(struct pen *pn, const struct comm *cm, size_t member, uint64_t at, uint64_t kind)
{
    const struct shp_tl *tl = pn->tl;
    const struct proc_comm *c = cm->m[member].pc;
    size_t *cursor = &pn->cursor[cm->base + member];
    uint64_t key = at << 1 | kind;
    size_t i = *cursor < c->n ? *cursor : 0;
    for (int step = 0; step < 4 && i < c->n && c->key[i] < key; step++)
        i++;
    if (i >= c->n || c->key[i] != key) {
        size_t lo = 0, hi = c->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (c->key[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        i = lo;
    }
    *cursor = i;
    if (i >= c->n || c->key[i] != key)
        return false;
    return !c->tm || in_window(tl, c->tm[i].t0, c->tm[i].t1 ? c->tm[i].t1 : tl->tend);
}

static int by_comm_rank(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    return x->pc->comm_rank - y->pc->comm_rank;
}

static void build_comms(struct shp_tl *tl)
{
    for (size_t i = 0; i < tl->nprocs; i++) {
        struct proc *p = &tl->procs[i];
        for (size_t k = 0; k < p->npc; k++) {
            struct proc_comm *pc = &p->pc[k];
            size_t j = 0;
            while (j < tl->ncomms && tl->comms[j].id != pc->comm)
                j++;
            if (j == tl->ncomms) {
                if (!grow((void **)&tl->comms, &tl->comms_cap, tl->ncomms, sizeof(*tl->comms),
                          &tl->oom))
                    return;
                tl->comms[tl->ncomms++] = (struct comm){pc->comm, NULL, 0, 0};
            }
            struct comm *c = &tl->comms[j];
            struct member *m = realloc(c->m, (c->n + 1) * sizeof(*c->m));
            if (!m) {
                tl->oom = true;
                return;
            }
            c->m = m;
            c->m[c->n++] = (struct member){p, pc};
        }
    }
    for (size_t j = 0; j < tl->ncomms; j++) {
        qsort(tl->comms[j].m, tl->comms[j].n, sizeof(*tl->comms[j].m), by_comm_rank);
        tl->comms[j].base = tl->nmembers;
        tl->nmembers += tl->comms[j].n;
    }
}

static int by_rank(const void *a, const void *b)
{
    const struct shp_tl_proc *x = a, *y = b;
    /* Known ranks in order, then the processes without one. */
    unsigned rx = (unsigned)x->sp->rank, ry = (unsigned)y->sp->rank;
    if (rx != ry)
        return rx < ry ? -1 : 1;
    return strcmp(x->sp->t.path, y->sp->t.path);
}

int shp_tl_open(struct shp_session *s, const struct shp_tl_options *o, struct shp_tl **out)
{
    *out = NULL;
    struct shp_tl *tl = calloc(1, sizeof(*tl));
    size_t cap = s->nprocs ? s->nprocs : 1;
    if (!tl)
        return -ENOMEM;
    tl->session = s;
    tl->o = o;
    pthread_mutex_init(&tl->lock, NULL);
    tl->pub = calloc(cap, sizeof(*tl->pub));
    tl->procs = calloc(cap, sizeof(*tl->procs));
    tl->of_session = calloc(cap, sizeof(*tl->of_session));
    if (!tl->pub || !tl->procs || !tl->of_session) {
        shp_tl_close(tl);
        return -ENOMEM;
    }
    for (size_t k = 0; k < s->nprocs; k++) {
        bool wanted = !o->ranks;
        for (size_t q = 0; q < o->nranks && !wanted; q++)
            wanted = o->ranks[q] == s->procs[k].rank;
        if (wanted)
            tl->pub[tl->nprocs++] = (struct shp_tl_proc){.sp = &s->procs[k], .si = k};
    }
    if (!tl->nprocs) {
        shp_tl_close(tl);
        return -ENOENT;
    }
    qsort(tl->pub, tl->nprocs, sizeof(*tl->pub), by_rank);
    for (size_t i = 0; i < tl->nprocs; i++) {
        tl->procs[i].pub = &tl->pub[i];
        tl->of_session[tl->pub[i].si] = &tl->procs[i];
        tl->pub[i].pid = (uint32_t)i + 1;
    }
    *out = tl;
    return 0;
}

int shp_tl_scan(struct shp_tl *tl)
{
    tl->t0 = UINT64_MAX;
    for (size_t i = 0; i < tl->nprocs; i++) {
        struct shp_tl_proc *pub = &tl->pub[i];
        scan(tl, &tl->procs[i]);
        /* Scanned: the drawing reads it again from the page cache, one trace at a time. */
        shp_session_forget_pages(tl->session, pub->si);
        if (pub->events && pub->first_ns < tl->t0)
            tl->t0 = pub->first_ns;
        if (pub->last_ns > tl->tend)
            tl->tend = pub->last_ns;
    }
    if (tl->t0 == UINT64_MAX)
        tl->t0 = 0;
    build_comms(tl);
    return tl->oom ? -ENOMEM : 0;
}

const struct shp_tl_proc *shp_tl_procs(const struct shp_tl *tl, size_t *n)
{
    *n = tl->nprocs;
    return tl->pub;
}

uint64_t shp_tl_t0(const struct shp_tl *tl)
{
    return tl->t0;
}

uint64_t shp_tl_tend(const struct shp_tl *tl)
{
    return tl->tend;
}

/* ---- flows ---- */

static const struct comm *comm_of(struct pen *pn, uint64_t id)
{
    const struct shp_tl *tl = pn->tl;
    if (pn->hint < tl->ncomms && tl->comms[pn->hint].id == id)
        return &tl->comms[pn->hint];
    for (size_t j = 0; j < tl->ncomms; j++)
        if (tl->comms[j].id == id)
            return &tl->comms[pn->hint = j];
    return NULL;
}

/* A flow id both ends compute on their own: the arrow from member a to member b of collective
 * (at, kind) on comm. The top bit stays clear. */
static uint64_t coll_flow_id(uint64_t comm, uint64_t at, uint64_t kind, int a, int b)
{
    uint64_t h = comm ^ 0x9e3779b97f4a7c15ull;
    uint64_t parts[4] = {at, (uint64_t)(uint32_t)a, (uint64_t)(uint32_t)b, kind};
    for (int i = 0; i < (kind ? 4 : 3); i++) {
        h ^= parts[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h >> 1;
}

static void add_flow(struct pen *pn, struct shp_tl_slice *s, uint64_t id, bool out, const char *cat)
{
    if (!grow((void **)&pn->flows, &pn->flows_cap, s->nf, sizeof(*pn->flows), &pn->oom))
        return;
    pn->flows[s->nf++] = (struct shp_tl_flow){id, out, cat};
    s->f = pn->flows;
}

/* Whether the walk draws process p. */
static bool drawn(const struct shp_tl *tl, const struct proc *p)
{
    return !tl->only || tl->only[p->pub - tl->pub];
}

/* The flows of collective (at, kind) on comm, by the member of rank comm_rank: from the previous
 * member that made the same, and to the next one, in communicator rank order (only members
 * whose call is drawn). */
static void coll_flows(struct pen *pn, uint64_t comm, uint64_t at, uint64_t kind, int comm_rank,
                       struct shp_tl_slice *s)
{
    const struct shp_tl *tl = pn->tl;
    const struct comm *c = comm_of(pn, comm);
    if (!c)
        return;
    size_t me = comm_rank >= 0 && (size_t)comm_rank < c->n ? (size_t)comm_rank : 0;
    if (c->m[me].pc->comm_rank != comm_rank)
        for (me = 0; me < c->n && c->m[me].pc->comm_rank != comm_rank;)
            me++;
    if (me == c->n)
        return;
    for (size_t j = me; j-- > 0;) {
        if (drawn(tl, c->m[j].p) && made(pn, c, j, at, kind)) {
            add_flow(pn, s, coll_flow_id(comm, at, kind, c->m[j].pc->comm_rank, comm_rank), false,
                     "collective");
            break;
        }
    }
    for (size_t j = me + 1; j < c->n; j++) {
        if (drawn(tl, c->m[j].p) && made(pn, c, j, at, kind)) {
            add_flow(pn, s, coll_flow_id(comm, at, kind, comm_rank, c->m[j].pc->comm_rank), true,
                     "collective");
            break;
        }
    }
}

static void given_flows(struct pen *pn, const struct proc *p, uint64_t index,
                        struct shp_tl_slice *s)
{
    const struct shp_tl *tl = pn->tl;
    size_t lo = lower_bound(p->lf, p->nlf, sizeof(*p->lf), index);
    for (; lo < p->nlf && p->lf[lo].index == index; lo++) {
        const struct lflow *f = &p->lf[lo];
        /* An arrow whose other end is left out is left out too. */
        if (drawn(tl, f->other) && in_window(tl, f->other_t0, f->other_t1))
            add_flow(pn, s, f->id, f->out, f->cat);
    }
}

/* The process of a call the analysis names, NULL when it is left out (or the call is none). */
static struct proc *proc_of(struct shp_tl *tl, const struct an_call *c)
{
    return c->ok ? tl->of_session[c->proc] : NULL;
}

/* One arrow, between call ia of a and call ib of b, whose times are given. */
static void add_arrow(struct shp_tl *tl, struct proc *a, uint64_t ia, uint64_t ta0, uint64_t ta1,
                      struct proc *b, uint64_t ib, uint64_t tb0, uint64_t tb1, uint64_t id,
                      const char *cat)
{
    if (!grow((void **)&a->lf, &a->lfcap, a->nlf, sizeof(*a->lf), &tl->oom) ||
        !grow((void **)&b->lf, &b->lfcap, b->nlf, sizeof(*b->lf), &tl->oom))
        return;
    a->lf[a->nlf++] = (struct lflow){ia, id, true, cat, b, tb0, tb1};
    b->lf[b->nlf++] = (struct lflow){ib, id, false, cat, a, ta0, ta1};
}

static uint64_t end_ns(const struct shp_tl *tl, uint64_t t, uint64_t dur)
{
    return dur == SHP_NONE ? tl->tend : t + dur;
}

static int by_index(const void *a, const void *b)
{
    const struct lflow *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The analysis's arrows. Lineage: each finding's producers, farthest first, then the consumer
 * (its first event); the same pair met in two findings gets one arrow. Sends and receives: each
 * send to the receive the analysis matched it with. */
static void plan_given(struct shp_tl *tl, const struct an_result *res)
{
    uint64_t next_id = 1ull << 63;
    for (size_t i = 0; i < res->nfindings; i++) {
        const struct an_result_finding *f = &res->findings[i];
        size_t n = (size_t)f->f.nlineage;
        if (!n || !f->f.nevents)
            continue;
        const struct an_call *chain[CHAIN_MAX];
        size_t m = 0;
        for (size_t k = n; k-- > 0 && m < CHAIN_MAX - 1;)
            chain[m++] = &f->lineage[k];
        chain[m++] = &f->events[0];
        for (size_t k = 0; k + 1 < m; k++) {
            struct proc *a = proc_of(tl, chain[k]), *b = proc_of(tl, chain[k + 1]);
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
            const struct shp_event *ea = &chain[k]->e, *eb = &chain[k + 1]->e;
            add_arrow(tl, a, ia, ea->t_ns, end_ns(tl, ea->t_ns, ea->dur_ns), b, ib, eb->t_ns,
                      end_ns(tl, eb->t_ns, eb->dur_ns), next_id++, "lineage");
        }
    }
    for (size_t i = 0; i < res->nmatches; i++) {
        const struct an_match_end *x = &res->matches[i].send, *y = &res->matches[i].recv;
        struct proc *a = tl->of_session[x->proc], *b = tl->of_session[y->proc];
        if (a && b)
            add_arrow(tl, a, x->index, x->t_ns, end_ns(tl, x->t_ns, x->dur_ns), b, y->index,
                      y->t_ns, end_ns(tl, y->t_ns, y->dur_ns), next_id++, "p2p");
    }
    for (size_t p = 0; p < tl->nprocs; p++)
        if (tl->procs[p].nlf > 1)
            qsort(tl->procs[p].lf, tl->procs[p].nlf, sizeof(*tl->procs[p].lf), by_index);
}

/* ---- arguments ---- */

static void arg_u(struct shp_tl_slice *s, const char *key, uint64_t v)
{
    if (v != SHP_NONE && s->na < SHP_TL_MAX_ARGS)
        s->a[s->na++] = (struct shp_tl_arg){key, SHP_TL_U, v, NULL};
}

static void arg_i(struct shp_tl_slice *s, const char *key, int v)
{
    if (v >= 0 && s->na < SHP_TL_MAX_ARGS)
        s->a[s->na++] = (struct shp_tl_arg){key, SHP_TL_I, (uint64_t)v, NULL};
}

static void arg_s(struct shp_tl_slice *s, const char *key, const char *v)
{
    if (v && *v && s->na < SHP_TL_MAX_ARGS)
        s->a[s->na++] = (struct shp_tl_arg){key, SHP_TL_S, 0, v};
}

static void arg_b(struct shp_tl_slice *s, const char *key)
{
    if (s->na < SHP_TL_MAX_ARGS)
        s->a[s->na++] = (struct shp_tl_arg){key, SHP_TL_B, 1, NULL};
}

/* The communicator id as 16 hex digits, made once per communicator. */
static const char *comm_text(struct pen *pn, uint64_t id)
{
    if (pn->text && pn->text->id == id)
        return pn->text->text;
    struct shp_tl *tl = pn->tl;
    const char *text = NULL;
    pthread_mutex_lock(&tl->lock);
    for (size_t i = 0; i < tl->ntexts && !text; i++)
        if (tl->texts[i]->id == id)
            text = (pn->text = tl->texts[i])->text;
    struct comm_text *c = text ? NULL : malloc(sizeof(*c));
    if (c && grow((void **)&tl->texts, &tl->texts_cap, tl->ntexts, sizeof(*tl->texts), &pn->oom)) {
        c->id = id;
        snprintf(c->text, sizeof(c->text), "%016" PRIx64, id);
        tl->texts[tl->ntexts++] = c;
        pn->text = c;
        text = c->text;
    } else if (!text) {
        pn->oom = true;
        free(c);
    }
    pthread_mutex_unlock(&tl->lock);
    return text;
}

/* The call site of stack id of p, made once (the session's lock). */
static const char *site_of(struct pen *pn, struct proc *p, uint32_t stack)
{
    if (!stack)
        return NULL;
    if (stack < p->nsites && p->sites[stack] && p->sites[stack] != UNSITED)
        return p->sites[stack];
    if (!sites_room(p, stack, &pn->oom))
        return NULL;
    char buf[512];
    shp_session_site(pn->tl->session, p->pub->si, stack, buf, sizeof(buf));
    if (!(p->sites[stack] = pooled(pn->tl, buf)))
        pn->oom = true;
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

static void fill_args(struct pen *pn, struct proc *p, const struct shp_event *e,
                      struct shp_tl_slice *s)
{
    s->na = 0;
    arg_s(s, "op", e->mark ? "mark" : shp_op_name(e->op));
    if (e->comm) {
        arg_s(s, "comm", comm_text(pn, e->comm));
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
    s->site = site_of(pn, p, e->stack);
    arg_s(s, "site", s->site);
    arg_s(s, "mark", e->mark ? pooled(pn->tl, e->mark) : NULL);
    if (e->flags & SHP_EV_CAPTURED)
        arg_b(s, "captured");
    if (e->dur_ns == SHP_NONE && !e->mark)
        arg_b(s, "in_flight");
    if (e->result && s->na < SHP_TL_MAX_ARGS)
        s->a[s->na++] = (struct shp_tl_arg){"result", SHP_TL_I, (uint64_t)(int64_t)e->result, NULL};
    arg_u(s, "index", e->index);
}

/* ---- the drawing ---- */

static uint32_t tord_of(const struct shp_tl_proc *p, uint32_t tid)
{
    for (uint32_t k = 0; k < p->ntids; k++)
        if (p->tids[k] == tid)
            return k;
    return 0;
}

static void proc_name(const struct shp_tl_proc *p, char *out, size_t len)
{
    const struct shp_file_header *h = p->sp->t.hdr;
    struct shp_cursor walked = {.torn = p->torn};
    const char *incomplete = shp_trace_complete(&p->sp->t, &walked) ? "" : " INCOMPLETE";
    if (p->sp->rank >= 0)
        snprintf(out, len, "rank %d (%s:%" PRIu64 ")%s", p->sp->rank, h->host, h->pid, incomplete);
    else
        snprintf(out, len, "rank ? (%s:%" PRIu64 ")%s", h->host, h->pid, incomplete);
}

static void draw_tracks(const struct shp_tl_ops *ops, void *b, const struct shp_tl_proc *p)
{
    char name[160];
    proc_name(p, name, sizeof(name));
    ops->process(b, p, name);
    for (uint32_t k = 0; k < p->ntids; k++)
        ops->thread(b, p, k, p->tids[k] == p->sp->t.hdr->pid ? "main thread" : "thread");
}

/* What the call executed on its communicators, counted on every call, drawn or not: its own
 * collective, and a launch's replays. Returns how many executions went into pn->ex. */
static size_t executions(struct pen *pn, struct proc *p, const struct shp_event *e)
{
    size_t n = 0;
    struct proc_comm *pc;
    if (e->type == SHP_REC_COLL && e->comm && e->seq != SHP_NONE && (pc = pc_of(p, e->comm)) &&
        grow((void **)&pn->ex, &pn->ex_cap, n, sizeof(*pn->ex), &pn->oom)) {
        uint64_t kind, at = walk_call(pc, e, &kind);
        pn->ex[n++] = (struct execution){e->comm, at, kind, e->comm_rank};
    }
    struct capture *g = graphs_event(&pn->graphs, &pn->oom, e);
    for (size_t i = 0; g && i < g->n; i++)
        if ((pc = pc_of(p, g->c[i].comm)) &&
            grow((void **)&pn->ex, &pn->ex_cap, n, sizeof(*pn->ex), &pn->oom))
            pn->ex[n++] = (struct execution){g->c[i].comm, walk_replay(pc), 0, g->c[i].comm_rank};
    return n;
}

/* One slice per call in the window, through pn's backend state. */
static void draw_proc(struct pen *pn, struct proc *p)
{
    struct shp_tl *tl = pn->tl;
    const struct shp_tl_ops *ops = pn->ops;
    void *b = pn->b;
    const struct shp_tl_proc *pub = p->pub;
    draw_tracks(ops, b, pub);
    struct shp_cursor cur = {0};
    uint64_t index = 0;
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    struct shp_tl_slice s;
    const struct shp_trace *t = &pub->sp->t;
    for (size_t i = 0; i < p->npc; i++)
        p->pc[i].offset = 0, p->pc[i].next = 0;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e))
            continue;
        e.index = index++;
        size_t nex = p->npc ? executions(pn, p, &e) : 0;
        uint64_t end = e.mark ? e.t_ns : end_of(tl, &e);
        if (!in_window(tl, e.t_ns, end))
            continue;
        s.proc = pub;
        s.e = &e;
        s.tid = e.tid;
        s.tord = tord_of(pub, e.tid);
        s.ts = e.t_ns;
        s.dur = end - e.t_ns;
        s.name = e.mark ? "mark" : shp_op_name(e.op);
        s.cat = cat_of(&e);
        s.f = NULL;
        s.nf = 0;
        fill_args(pn, p, &e, &s);
        /* A replay executes its captured collectives: their arrows meet at its launch. */
        for (size_t i = 0; i < nex; i++)
            coll_flows(pn, pn->ex[i].comm, pn->ex[i].at, pn->ex[i].kind, pn->ex[i].comm_rank, &s);
        if (p->nlf)
            given_flows(pn, p, e.index, &s);
        pn->slices++;
        pn->flows_drawn += (uint64_t)s.nf;
        if (e.mark) {
            struct shp_tl_instant in = {.proc = pub,
                                        .tid = s.tid,
                                        .tord = s.tord,
                                        .ts = s.ts,
                                        .name = pooled(tl, e.mark),
                                        .cat = "mark",
                                        .a = s.a,
                                        .na = s.na};
            ops->instant(b, &in);
        } else {
            ops->slice(b, &s);
        }
    }
    graphs_reset(&pn->graphs);
}

static struct proc *proc_by_rank(struct shp_tl *tl, long long rank)
{
    for (size_t i = 0; i < tl->nprocs; i++)
        if (tl->pub[i].sp->rank == rank)
            return &tl->procs[i];
    return NULL;
}

/* Each finding as an instant event on every rank it names, at that rank's call, else where
 * that rank's trace ends (a rank that stopped); with the site of that call, as its slice has. */
static void draw_findings(struct pen *pn, const struct an_result *res)
{
    struct shp_tl *tl = pn->tl;
    for (size_t i = 0; i < res->nfindings; i++) {
        const struct an_result_finding *f = &res->findings[i];
        const char *kind = an_kind_names[f->f.kind];
        const char *comm = f->f.comm ? comm_text(pn, f->f.comm) : NULL;
        for (int k = 0; k < f->f.nranks; k++) {
            struct proc *p = proc_by_rank(tl, f->f.ranks[k]);
            if (!p || !drawn(tl, p))
                continue;
            const struct shp_tl_proc *pub = p->pub;
            uint64_t ts = pub->last_ns;
            const struct an_call *at = NULL;
            for (int j = 0; j < f->f.nevents && !at; j++) {
                const struct an_call *ev = &f->events[j];
                /* A process without a rank names none. */
                if (ev->ok && pub->sp->rank >= 0 &&
                    tl->session->procs[ev->proc].rank == pub->sp->rank)
                    at = ev;
            }
            if (at)
                ts = at->e.t_ns;
            if (!in_window(tl, ts, ts))
                continue;
            /* Its process was drawn and may be released: the session reads its stacks again,
             * for the few calls that findings name. */
            char site[512] = "";
            if (at && at->e.stack)
                shp_session_site(tl->session, at->proc, at->e.stack, site, sizeof(site));
            struct shp_tl_slice s = {.na = 0};
            arg_s(&s, "summary", f->f.summary);
            arg_s(&s, "site", site[0] ? pooled(tl, site) : NULL);
            arg_s(&s, "severity", f->f.error ? "error" : "warning");
            arg_s(&s, "comm", comm);
            arg_u(&s, "seq", f->f.seq);
            arg_u(&s, "finding", i);
            struct shp_tl_instant in = {.proc = pub,
                                        .tid = pub->ntids ? pub->tids[0] : 0,
                                        .process = true,
                                        .ts = ts,
                                        .name = kind,
                                        .cat = "finding",
                                        .a = s.a,
                                        .na = s.na};
            pn->instants++;
            pn->ops->instant(pn->b, &in);
        }
    }
}

/* ---- the drawing on several threads ---- */

/* The bytes of a part that may not go to the file yet, in order. */
struct chunk {
    struct chunk *next;
    char *p;
    size_t len, cap;
};

struct part {
    struct chunk *head, *tail;
    bool started, done; /* its first bytes went to the file; its process is drawn */
};

/* The bytes the parts ahead of the one being written may hold by default (shp_tl_draw.held_max).
 * A Perfetto part of a million calls is about 110 MiB: on 2 cores, the second thread draws a
 * whole part ahead without waiting. */
#define HELD_MAX ((size_t)128 << 20)

/* The drawing's parts (one per process drawn, in rank order) and who writes the file: the
 * thread that emits the bytes of the current part writes them; a part ahead of it waits. */
struct press {
    struct shp_tl *tl;
    struct shp_tl_draw *d;
    void *root; /* the backend's state for the file */
    pthread_mutex_t lock;
    pthread_cond_t moved; /* cur moved on */
    size_t *order;        /* the parts' processes (indexes in tl->procs) */
    struct part *parts;
    size_t n, next, cur; /* parts; the next to take; the one whose bytes go to the file now */
    size_t held;         /* bytes the parts' chunks hold */
    /* Buffers written, to fill again: a fresh one faults its pages in (a part held whole, 110
     * MiB, took 28,000 page faults each time). As many as the parts ahead may hold. */
    struct chunk spare[HELD_MAX / SHP_SINK_CHUNK];
    size_t nspare;
    bool oom;
};

/* Part k's bytes into the file; the caller holds the lock and k is current. */
static void press_write(struct press *pr, size_t k, const char *p, size_t n)
{
    pr->d->ops->raw(pr->root, p, n, !pr->parts[k].started);
    pr->parts[k].started = true;
}

/* The held bytes of the current part into the file, and of the next ones that are done. */
static void press_advance(struct press *pr)
{
    while (pr->cur < pr->n) {
        struct part *pt = &pr->parts[pr->cur];
        for (struct chunk *c; (c = pt->head);) {
            pt->head = c->next;
            press_write(pr, pr->cur, c->p, c->len);
            pr->held -= c->len;
            if (pr->nspare < sizeof(pr->spare) / sizeof(*pr->spare))
                pr->spare[pr->nspare++] = *c;
            else
                free(c->p);
            free(c);
        }
        pt->tail = NULL;
        if (!pt->done)
            break;
        pr->cur++;
        pthread_cond_broadcast(&pr->moved);
    }
}

/* A part being drawn, as its backend state's emit knows it. */
struct emitter {
    struct press *pr;
    size_t k;
};

static int press_emit(void *arg, char **buf, size_t *len, size_t *cap)
{
    struct emitter *em = arg;
    struct press *pr = em->pr;
    struct part *pt = &pr->parts[em->k];
    int rc = 0;
    pthread_mutex_lock(&pr->lock);
    if (em->k == pr->cur) {
        press_advance(pr);
        press_write(pr, em->k, *buf, *len);
        *len = 0;
    } else if (*len) {
        struct chunk *c = malloc(sizeof(*c));
        if (c) {
            *c = (struct chunk){NULL, *buf, *len, *cap};
            if (pt->tail)
                pt->tail->next = c;
            else
                pt->head = c;
            pt->tail = c;
            pr->held += *len;
            *len = 0;
            /* A buffer written, if there is one (else the backend grows its own: a part's last
             * bytes need none). */
            *buf = NULL;
            *cap = 0;
            if (pr->nspare) {
                pr->nspare--;
                *buf = pr->spare[pr->nspare].p;
                *cap = pr->spare[pr->nspare].cap;
            }
        } else {
            rc = -ENOMEM;
            *len = 0;
        }
        while (em->k != pr->cur && pr->held >= (pr->d->held_max ? pr->d->held_max : HELD_MAX))
            pthread_cond_wait(&pr->moved, &pr->lock);
        if (em->k == pr->cur)
            press_advance(pr);
    }
    pthread_mutex_unlock(&pr->lock);
    return rc;
}

static void pen_free(struct pen *pn)
{
    free(pn->flows);
    free(pn->ex);
    free(pn->cursor);
    graphs_reset(&pn->graphs);
}

/* A thread of the drawing (pn->b is the press until it starts): takes the next part until none
 * is left. */
static void *press_run(void *arg)
{
    struct pen *pn = arg;
    struct press *pr = pn->b;
    struct shp_tl *tl = pr->tl;
    for (;;) {
        pthread_mutex_lock(&pr->lock);
        size_t k = pr->next < pr->n ? pr->next++ : pr->n;
        pthread_mutex_unlock(&pr->lock);
        if (k == pr->n)
            break;
        struct proc *p = &tl->procs[pr->order[k]];
        struct emitter em = {pr, k};
        void *b = pr->d->ops->part(tl->t0, p->pub->pid + 1, press_emit, &em);
        if (b) {
            pn->b = b;
            draw_proc(pn, p);
            pn->b = NULL;
            if (pr->d->ops->close(b) < 0)
                pn->oom = true;
        } else {
            pn->oom = true;
        }
        if (pr->d->release)
            shp_session_release(tl->session, p->pub->si);
        pthread_mutex_lock(&pr->lock);
        pr->parts[k].done = true;
        if (k == pr->cur)
            press_advance(pr);
        pthread_mutex_unlock(&pr->lock);
    }
    return NULL;
}

/* The threads a drawing of that many parts uses. */
static unsigned threads_for(const struct shp_tl_draw *d, size_t parts)
{
    unsigned n = d->threads ? d->threads : shp_cores_available();
    return parts < n ? (unsigned)parts : n;
}

/* Every process drawn through parts, on up to d->threads threads (this one among them). */
static void draw_parts(struct pen *root, struct shp_tl_draw *d)
{
    struct shp_tl *tl = root->tl;
    struct press pr = {.tl = tl, .d = d, .root = root->b};
    pthread_mutex_init(&pr.lock, NULL);
    pthread_cond_init(&pr.moved, NULL);
    pr.order = malloc((tl->nprocs ? tl->nprocs : 1) * sizeof(*pr.order));
    pr.parts = calloc(tl->nprocs ? tl->nprocs : 1, sizeof(*pr.parts));
    unsigned nt = 0;
    struct pen *pens = NULL;
    pthread_t *th = NULL;
    bool *running = NULL;
    if (!pr.order || !pr.parts) {
        root->oom = true;
        goto out;
    }
    for (size_t i = 0; i < tl->nprocs; i++)
        if (drawn(tl, &tl->procs[i]))
            pr.order[pr.n++] = i;
    nt = threads_for(d, pr.n);
    d->threads_used = nt ? nt : 1;
    pens = calloc(nt ? nt : 1, sizeof(*pens));
    th = calloc(nt ? nt : 1, sizeof(*th));
    running = calloc(nt ? nt : 1, sizeof(*running));
    if (!pens || !th || !running) {
        root->oom = true;
        goto out;
    }
    for (unsigned t = 0; t < nt; t++) {
        pens[t] = (struct pen){.tl = tl, .b = &pr, .ops = d->ops};
        if (!(pens[t].cursor = calloc(tl->nmembers ? tl->nmembers : 1, sizeof(size_t)))) {
            root->oom = true;
            nt = t;
            break;
        }
    }
    /* Thread 0 is this one; a thread that cannot be made leaves its parts to the others. */
    for (unsigned t = 1; t < nt; t++)
        running[t] = pthread_create(&th[t], NULL, press_run, &pens[t]) == 0;
    if (nt)
        press_run(&pens[0]);
    for (unsigned t = 1; t < nt; t++)
        if (running[t])
            pthread_join(th[t], NULL);
    for (unsigned t = 0; t < nt; t++) {
        root->slices += pens[t].slices;
        root->flows_drawn += pens[t].flows_drawn;
        root->oom |= pens[t].oom;
    }
out:
    for (unsigned t = 0; pens && t < nt; t++)
        pen_free(&pens[t]);
    free(pens);
    free(th);
    free(running);
    /* Parts never taken (no thread at all) are drawn by none: out of memory was said. */
    for (size_t k = 0; pr.parts && k < pr.n; k++)
        for (struct chunk *c = pr.parts[k].head, *next; c; c = next) {
            next = c->next;
            free(c->p);
            free(c);
        }
    while (pr.nspare)
        free(pr.spare[--pr.nspare].p);
    root->oom |= pr.oom || (pr.parts && pr.cur < pr.n);
    free(pr.parts);
    free(pr.order);
    pthread_cond_destroy(&pr.moved);
    pthread_mutex_destroy(&pr.lock);
}

int shp_tl_draw(struct shp_tl *tl, struct shp_tl_draw *d, FILE *out)
{
    tl->from = d->from;
    tl->to = d->to;
    tl->only = d->only;
    for (size_t i = 0; i < tl->nprocs; i++)
        tl->procs[i].nlf = 0;
    if (d->result)
        plan_given(tl, d->result);
    struct pen root = {.tl = tl, .ops = d->ops};
    if (!(root.cursor = calloc(tl->nmembers ? tl->nmembers : 1, sizeof(size_t))))
        return -ENOMEM;
    if (!(root.b = d->ops->open(out, tl->t0, d->arg))) {
        pen_free(&root);
        return -ENOMEM;
    }
    /* Every call site the scan met, made here, process after process: symbolizing is behind one
     * lock, and a module is opened once for the command when one thread makes them all. */
    for (size_t i = 0; i < tl->nprocs; i++) {
        struct proc *p = &tl->procs[i];
        if (!drawn(tl, p))
            continue;
        bool made_here = false;
        for (size_t id = 1; id < p->nsites; id++) {
            if (p->sites[id] == UNSITED) {
                site_of(&root, p, (uint32_t)id);
                made_here = true;
            }
        }
        if (made_here && d->release)
            shp_session_release(tl->session, tl->pub[i].si);
    }
    d->threads_used = 1;
    if (d->ops->part) {
        draw_parts(&root, d);
    } else {
        for (size_t i = 0; i < tl->nprocs; i++) {
            if (!drawn(tl, &tl->procs[i]))
                continue;
            draw_proc(&root, &tl->procs[i]);
            /* Its call sites are drawn: thousands of traces are held one at a time. */
            if (d->release)
                shp_session_release(tl->session, tl->pub[i].si);
        }
    }
    if (d->result)
        draw_findings(&root, d->result);
    d->slices = root.slices;
    d->flows = root.flows_drawn;
    d->instants = root.instants;
    int rc = d->ops->close(root.b);
    bool oom = root.oom || tl->oom;
    pen_free(&root);
    return rc < 0 ? rc : oom ? -ENOMEM : 0;
}

void shp_tl_close(struct shp_tl *tl)
{
    if (!tl)
        return;
    for (size_t i = 0; tl->procs && i < tl->nprocs; i++) {
        struct proc *p = &tl->procs[i];
        for (size_t k = 0; k < p->npc; k++)
            free(p->pc[k].key), free(p->pc[k].tm);
        free(p->sites);
        free(p->pc);
        free(p->lf);
        free(tl->pub[i].tids);
    }
    free(tl->pub);
    free(tl->procs);
    free(tl->of_session);
    for (size_t j = 0; j < tl->ncomms; j++)
        free(tl->comms[j].m);
    free(tl->comms);
    for (size_t i = 0; i < tl->ntexts; i++)
        free(tl->texts[i]);
    for (size_t i = 0; i < tl->pool.cap; i++)
        free(tl->pool.s[i]);
    free(tl->pool.s);
    free(tl->pool.h);
    free(tl->texts);
    graphs_reset(&tl->graphs);
    pthread_mutex_destroy(&tl->lock);
    free(tl);
}
