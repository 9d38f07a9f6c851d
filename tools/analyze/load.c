/* shapetrace analyze, loading: hand out the events of the session's traces merged by time, so
 * that the ranks' collectives arrive roughly together and little has to be held open. Each
 * process's trace is read in order into its feed, a ring of items (an event's time and where
 * it is) that one filler writes and the merge reads: a reader thread, or the merging thread
 * itself when there are none. The filler decodes each event and runs the driver's work on it;
 * the merge decodes again only what its passes look at. Handing the whole decoded event from
 * one core to another cost more than decoding it twice (about 330 bytes an event, against the
 * 48 to 72 of its record). */
#define _GNU_SOURCE
#include "tools/analyze/load.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "include/shapetrace/calls.h"
#include "tools/lib/out.h"

/* What the merge needs of an event. */
struct an_item {
    uint64_t t_ns;
    struct an_ref ref;
    void *note; /* what the feed's ops returned for it */
};

/* What the brief decoding of a collective or a send/receive sets (shp_event_decode_brief: every
 * field of the event that its record gives, less the sizes), as its reader decoded it, for an
 * item whose type the merge wants: the merge rebuilds the event from it instead of decoding the
 * record again (that decoding was a fifth of the merge's instructions, its loads of the record
 * a line the reader had in its cache). Every other field of such an event is the same for all
 * of them (unknown), so an event built from it is the one the decoding gives. */
struct an_brief {
    uint64_t dur_ns, comm, seq, count, stream, graph;
    uint32_t tid, stack, group;
    int32_t result, device, comm_rank, nranks, root, peer;
    int16_t dtype, redop; /* a record's uint8_t, or -1 */
    uint16_t flags, op;   /* a call's op, checked for its class, is below SHP_OP_COUNT */
    uint8_t cls;          /* SHP_CLS_COLL or SHP_CLS_P2P, as the decoding checked */
};
_Static_assert(SHP_OP_COUNT <= UINT16_MAX, "an op fits an_brief's op");

#define NO_FEED UINT32_MAX
#define NO_READER UINT32_MAX
/* A filler publishes its items every PUBLISH of them, so that a merge that waits can go on. */
#define PUBLISH 16
/* How many times the merge looks at an empty feed before it sleeps (a pause each). */
#define SPIN 64
/* Items of a feed the merge fills itself, and keeps decoded (a slot for the event handed out,
 * one for the next, the rest filled a batch at a time): with up to 64 processes 32 (10 KiB of
 * events a process), beyond 4, so that what it decoded is still in its cache when it is
 * handed out. */
#define INLINE_CAP(n) ((n) <= 64 ? 32 : 4)
/* Beyond this many processes the merge fetches the next event's feed, item and record ahead
 * (an_next), and keeps where they are for that (an_tree's next_item and next_ev). */
#define PREFETCH_FEEDS 16

/* One process's items, from its filler to the merge. head and tail only grow: the filler
 * publishes the items before head (release) after writing them, the merge gives an item back
 * by advancing tail once the passes are done with it. What each side writes has a cache line
 * of its own: shared, the two lines cost more than the decoding. */
struct an_feed {
    /* set up once */
    struct an_item *v;
    struct shp_event *ev; /* a feed the merge fills: each item's event, decoded once */
    struct an_brief *br;  /* a feed a reader fills: each wanted call's brief, by item */
    uint64_t mask;        /* capacity - 1, a power of two */
    uint64_t batch;       /* items filled at a time: half the capacity */
    uint32_t proc;
    uint32_t reader; /* the reader thread that fills it; NO_READER: the merge */
    /* the filler's */
    _Alignas(64) _Atomic uint64_t head;
    _Atomic bool ended; /* set after the last head: no item will follow */
    struct shp_cursor cur;
    uint64_t index;    /* events decoded */
    uint64_t released; /* bytes of the mapping given back */
    bool done;
    /* the merge's: tail, and its own copy of it (the item at mtail is the one handed out
     * last) */
    _Alignas(64) _Atomic uint64_t tail;
    uint64_t mtail;
};

/* A reader thread, with its own feeds: first, first + nreaders, ... (one filler per feed keeps
 * a streamed run's per-process state on one thread, and hot in its cache). */
struct reader {
    struct an_load *L;
    pthread_t thread;
    bool started;
    uint32_t first;
    _Alignas(64) pthread_mutex_t lock;
    pthread_cond_t cv;
    _Atomic bool sleeping;
    /* for an_load_stats */
    uint64_t events, feeds;
    double wall, cpu;
};

/* The processes with events left, as a tournament (loser) tree on the time of their next
 * event, ties to the lower process: one comparison a level for the process that just handed
 * out an event, where a binary heap took two and moved the slots (a seventh of the merge's
 * instructions on 512 traces). Leaves are the processes, padded to a power of two. */
struct an_tree {
    /* by leaf: its next event's time, all ones when it has none (a padding leaf, or a process
     * that ended); and what breaks a tie, so that no two leaves are equal: its own number, or
     * size + it when it has none (after every leaf that has one, whatever its time). As one
     * 128-bit key, shifting, storing and comparing it was a tenth of the merge's instructions. */
    uint64_t *key;
    uint32_t *tie;
    /* by leaf: where its next event is (its item, and its decoded event when its feed keeps
     * them), to be fetched as soon as it is known to come next */
    const void **next_item, **next_ev;
    /* node[1 .. size): the loser of the match there; node[0]: the winner. Each with its key
     * and tie, whose leaf is tie & (size - 1): a match reads the node alone, where a node of
     * the leaf's number alone sent it to key[] and tie[] as well (a third of the replay's
     * instructions, and a line each on hundreds of traces). */
    struct an_node {
        uint64_t key;
        uint32_t tie;
    } * node;
    size_t size; /* leaves: a power of two */
};
#define OUT UINT64_MAX

struct an_load {
    struct an_ctx *ctx;
    struct an_tree tree;
    size_t live; /* processes with events left */
    struct an_feed *feeds;
    size_t nfeeds;
    unsigned types; /* what an_next decodes */
    uint64_t release_step;
    struct an_feed_ops ops;
    struct reader *readers;
    unsigned nreaders;
    bool joined;
    uint32_t held;      /* the feed whose item the caller holds, NO_FEED for none */
    struct shp_event e; /* the merge's decoding of it, for a feed without events */
    /* The same for a collective or a send/receive, rebuilt from its brief: the fields that no
     * brief holds are those that the first decoding of one into it left (unknown), once ce_ok. */
    struct shp_event ce;
    bool ce_ok;
    _Atomic bool stop;
    _Atomic uint64_t bytes_done;
    /* The feed the merge sleeps on (-1: none; -2: its reader has woken it), and its wake-up. */
    _Alignas(64) _Atomic int64_t waiting;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool sync; /* lock and cv initialized */
};

static double clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Whether leaf a's next event comes before leaf b's. */
static inline bool before(const struct an_tree *T, uint32_t a, uint32_t b)
{
    return T->key[a] < T->key[b] || (T->key[a] == T->key[b] && T->tie[a] < T->tie[b]);
}

/* Leaf j's next event is at t_ns (its tie set once, by tree_in). */
static inline void tree_set(struct an_tree *T, uint32_t j, uint64_t t_ns)
{
    T->key[j] = t_ns;
}

/* Leaf j's first event is at t_ns. */
static inline void tree_in(struct an_tree *T, uint32_t j, uint64_t t_ns)
{
    T->key[j] = t_ns;
    T->tie[j] = j;
}

/* Leaf j has no next event. */
static inline void tree_out(struct an_tree *T, uint32_t j)
{
    T->key[j] = OUT;
    T->tie[j] = (uint32_t)T->size + j;
}

/* Leaf j's key changed: it plays its way up again; the winner lands in node[0]. (A winner
 * chosen without a branch took three times the instructions, for the same time on 512
 * traces.) */
static void tree_replay(struct an_tree *T, uint32_t j)
{
    uint64_t kx = T->key[j];
    uint32_t tx = T->tie[j];
    for (size_t n = (T->size + j) / 2; n > 0; n /= 2) {
        struct an_node *d = &T->node[n];
        uint64_t kl = d->key;
        uint32_t tl = d->tie;
        if (kl < kx || (kl == kx && tl < tx)) {
            d->key = kx;
            d->tie = tx;
            kx = kl;
            tx = tl;
        }
    }
    T->node[0] = (struct an_node){kx, tx};
}

/* The leaf whose next event comes first. */
static inline uint32_t tree_winner(const struct an_tree *T)
{
    return T->node[0].tie & (uint32_t)(T->size - 1);
}

/* Every leaf's key is set: play all the matches, bottom up (win[n]: who won below node n).
 * false when out of memory. */
static bool tree_build(struct an_tree *T)
{
    uint32_t *win = malloc(2 * T->size * sizeof(*win));
    if (!win)
        return false;
    for (size_t j = 0; j < T->size; j++)
        win[T->size + j] = (uint32_t)j;
    for (size_t n = T->size - 1; n > 0; n--) {
        uint32_t a = win[2 * n], b = win[2 * n + 1];
        bool a_first = before(T, a, b);
        uint32_t l = a_first ? b : a;
        win[n] = a_first ? a : b;
        T->node[n] = (struct an_node){T->key[l], T->tie[l]};
    }
    uint32_t w = T->size > 1 ? win[1] : 0;
    T->node[0] = (struct an_node){T->key[w], T->tie[w]};
    free(win);
    return true;
}

/* Pages already read are dropped from this process's mapping in steps that keep all the traces
 * together under about 64 MiB (8 MiB a trace at most, 64 KiB at least): they stay in the page
 * cache and are read back if a report needs one of their records, so memory follows what is
 * open, not the size of the traces. The merge decodes the records of the items its feed holds
 * (a few KiB), well inside a step. */
static void release_behind(const struct an_load *L, struct an_feed *f)
{
    const uint64_t step = L->release_step;
    if (f->cur.off < f->released + 2 * step)
        return;
    uint64_t upto = (f->cur.off - step) & ~(step - 1);
    if (upto > f->released) {
        const struct shp_trace *t = &L->ctx->procs[f->proc].sp->t;
        madvise((void *)(t->map + f->released), upto - f->released, MADV_DONTNEED);
        f->released = upto;
    }
}

/* Wake the merge if it sleeps on f; one wake-up per sleep. */
static void wake_merge(struct an_load *L, const struct an_feed *f)
{
    int64_t w = (int64_t)f->proc;
    if (atomic_load(&L->waiting) != w || !atomic_compare_exchange_strong(&L->waiting, &w, -2))
        return;
    pthread_mutex_lock(&L->lock);
    pthread_cond_signal(&L->cv);
    pthread_mutex_unlock(&L->lock);
}

static void publish(struct an_load *L, struct an_feed *f, uint64_t head)
{
    atomic_store_explicit(&f->head, head, memory_order_seq_cst);
    if (f->reader != NO_READER)
        wake_merge(L, f);
}

static bool is_call(unsigned type)
{
    return type == SHP_REC_COLL || type == SHP_REC_P2P;
}

static inline void brief_put(struct an_brief *b, const struct shp_event *e)
{
    b->dur_ns = e->dur_ns;
    b->comm = e->comm;
    b->seq = e->seq;
    b->count = e->count;
    b->stream = e->stream;
    b->graph = e->graph;
    b->tid = e->tid;
    b->stack = e->stack;
    b->group = e->group;
    b->result = e->result;
    b->device = e->device;
    b->comm_rank = e->comm_rank;
    b->nranks = e->nranks;
    b->root = e->root;
    b->peer = e->peer;
    b->dtype = (int16_t)e->dtype;
    b->redop = (int16_t)e->redop;
    b->flags = e->flags;
    b->op = (uint16_t)e->op;
    b->cls = (uint8_t)e->cls;
}

/* The brief decoding of the call whose brief is b, into e, which holds one already (ce_ok). */
static inline void brief_get(struct shp_event *e, const struct an_brief *b, unsigned type,
                             uint64_t t_ns, uint64_t index)
{
    e->type = type;
    e->op = b->op;
    e->cls = b->cls;
    e->index = index;
    e->tid = b->tid;
    e->t_ns = t_ns;
    e->dur_ns = b->dur_ns;
    e->flags = b->flags;
    e->stack = b->stack;
    e->result = b->result;
    e->device = b->device;
    e->group = b->group;
    e->comm = b->comm;
    e->comm_rank = b->comm_rank;
    e->nranks = b->nranks;
    e->seq = b->seq;
    e->count = b->count;
    e->dtype = b->dtype;
    e->redop = b->redop;
    e->root = b->root;
    e->peer = b->peer;
    e->stream = b->stream;
    e->graph = b->graph;
}

/* Read up to a batch more events of f into its ring (fewer when the ring is full or the trace
 * ends), running the feed's ops on each; on the feed's filler only. Returns how many. */
static uint64_t fill(struct an_load *L, struct an_feed *f)
{
    if (f->done)
        return 0;
    struct an_proc *p = &L->ctx->procs[f->proc];
    const struct shp_trace *t = &p->sp->t;
    uint64_t head = atomic_load_explicit(&f->head, memory_order_relaxed);
    uint64_t room = f->mask + 1 - (head - atomic_load_explicit(&f->tail, memory_order_acquire));
    uint64_t n = 0, max = f->batch < room ? f->batch : room, before = f->cur.off;
    while (n < max) {
        unsigned type;
        size_t size;
        const struct shp_rec *r = shp_trace_next(t, &f->cur, &type, &size);
        if (!r) {
            f->done = true;
            break;
        }
        struct shp_event local, *e = f->ev ? &f->ev[head & f->mask] : &local;
        if (!shp_event_decode(t, r, type, e))
            continue; /* bookkeeping: stacks, modules */
        e->index = f->index++;
        struct an_item *it = &f->v[head & f->mask];
        it->t_ns = e->t_ns;
        it->ref = (struct an_ref){.proc = f->proc, .index = e->index, .rec = r, .type = type};
        it->note = L->ops.event ? L->ops.event(L->ops.arg, p, e, &it->ref) : NULL;
        if (f->br && is_call(type) && (L->types & (1u << type)))
            brief_put(&f->br[head & f->mask], e);
        head++;
        if (++n % PUBLISH == 0)
            publish(L, f, head);
    }
    if (n % PUBLISH)
        publish(L, f, head);
    /* This trace's next record is read only after the merge has served the others: with
     * hundreds of traces its lines are long out of the cache by then, and no hardware
     * prefetcher follows that many streams (on 512 traces this took a quarter off the merge's
     * CPU time). */
    if (f->cur.off + 128 <= t->end) {
        __builtin_prefetch(t->map + f->cur.off);
        __builtin_prefetch(t->map + f->cur.off + 64);
    }
    atomic_fetch_add_explicit(&L->bytes_done, f->cur.off - before, memory_order_relaxed);
    release_behind(L, f);
    if (f->done) {
        /* The walk is at the end: the session's description learns what it found, and so does
         * the driver. */
        shp_proc_walked(p->sp, &f->cur, f->index);
        if (L->ops.end)
            L->ops.end(L->ops.arg, p);
        atomic_store_explicit(&f->ended, true, memory_order_seq_cst);
        if (f->reader != NO_READER)
            wake_merge(L, f);
    }
    return n;
}

/* Room in f for a batch. */
static bool has_room(const struct an_feed *f)
{
    uint64_t used = atomic_load_explicit(&f->head, memory_order_relaxed) - atomic_load(&f->tail);
    return f->mask + 1 - used >= f->batch;
}

/* Whether one of r's feeds wants it: room for a batch, or the merge sleeps on it. live: some
 * feed of r has not ended. */
static bool reader_has_work(struct reader *r, bool *live)
{
    struct an_load *L = r->L;
    int64_t w = atomic_load(&L->waiting);
    *live = false;
    for (size_t i = r->first; i < L->nfeeds; i += L->nreaders) {
        const struct an_feed *f = &L->feeds[i];
        if (f->done)
            continue;
        *live = true;
        if (w == (int64_t)i || has_room(f))
            return true;
    }
    return false;
}

/* A reader thread: fill its feeds, a batch at a time, each when it has room for one, the one
 * the merge sleeps on first; sleep when none has room; end when all of them have ended. */
static void *read_feeds(void *arg)
{
    struct reader *r = arg;
    struct an_load *L = r->L;
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    while (!atomic_load(&L->stop)) {
        uint64_t did = 0;
        bool live = false;
        int64_t w = atomic_load(&L->waiting);
        if (w >= 0 && (size_t)w % L->nreaders == r->first)
            did += fill(L, &L->feeds[w]);
        for (size_t i = r->first; i < L->nfeeds; i += L->nreaders) {
            struct an_feed *f = &L->feeds[i];
            if (f->done)
                continue;
            live = true;
            if (has_room(f))
                did += fill(L, f);
        }
        r->events += did;
        if (!live)
            break;
        if (did)
            continue;
        pthread_mutex_lock(&r->lock);
        atomic_store(&r->sleeping, true);
        /* Checked again once sleeping is set: a merge that gave an item back (or began to
         * wait) before it saw the flag has done what this check sees. */
        if (!reader_has_work(r, &live) && live && !atomic_load(&L->stop))
            pthread_cond_wait(&r->cv, &r->lock);
        atomic_store(&r->sleeping, false);
        pthread_mutex_unlock(&r->lock);
    }
    r->wall = clock_s(CLOCK_MONOTONIC) - t0;
    r->cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

static void wake_reader(struct reader *r)
{
    if (!atomic_load(&r->sleeping))
        return;
    pthread_mutex_lock(&r->lock);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->lock);
}

/* Whether f has an item at index need - 1 (filling it here when the merge fills it, else
 * waiting for its reader: a moment's look, then sleep), false when it ended before. */
static bool wait_for(struct an_load *L, struct an_feed *f, uint64_t need)
{
    for (unsigned spin = 0;; spin++) {
        if (atomic_load_explicit(&f->head, memory_order_acquire) >= need)
            return true;
        if (atomic_load_explicit(&f->ended, memory_order_acquire))
            return atomic_load_explicit(&f->head, memory_order_acquire) >= need;
        if (f->reader == NO_READER) {
            fill(L, f);
            continue;
        }
        if (spin < SPIN) {
            __builtin_ia32_pause();
            continue;
        }
        atomic_store(&L->waiting, (int64_t)f->proc);
        wake_reader(&L->readers[f->reader]);
        pthread_mutex_lock(&L->lock);
        while (atomic_load(&f->head) < need && !atomic_load(&f->ended) &&
               atomic_load(&L->waiting) == (int64_t)f->proc)
            pthread_cond_wait(&L->cv, &L->lock);
        pthread_mutex_unlock(&L->lock);
        atomic_store(&L->waiting, -1);
    }
}

/* The merge is done with the item it handed out of f last. */
static void give_back(struct an_load *L, struct an_feed *f)
{
    uint64_t tail = ++f->mtail;
    if (f->reader == NO_READER) {
        atomic_store_explicit(&f->tail, tail, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&f->tail, tail, memory_order_release);
    /* A reader sleeps when none of its feeds has room for a batch: this one has one now. A
     * locked read-modify-write of tail orders the store before the look at the reader's flag,
     * as the reader's flag is before its look at tail, so that one of the two sees the other;
     * only here, since a full barrier for every event was the merge's costliest instruction.
     * (An RMW rather than atomic_thread_fence, which ThreadSanitizer does not model.) */
    if (f->mask + 1 - (atomic_load_explicit(&f->head, memory_order_acquire) - tail) == f->batch) {
        atomic_fetch_add_explicit(&f->tail, 0, memory_order_seq_cst);
        wake_reader(&L->readers[f->reader]);
    }
}

/* The capacity of a reader's feed: a power of two, 4096 items at most and 16 at least, about
 * 32 MiB in all. A reader fills half of it at a time: the longer it stays with one process,
 * the more of that process's lineage state stays in its cache. */
static uint64_t feed_capacity(size_t n)
{
    uint64_t per = (32ull << 20) / ((n ? n : 1) * sizeof(struct an_item)), cap = 16;
    while (cap * 2 <= per && cap < 4096)
        cap *= 2;
    return cap;
}

int an_load(struct an_ctx *ctx, struct shp_session *s, unsigned readers,
            const struct an_feed_ops *ops)
{
    size_t n = s->nprocs;
    ctx->session = s;
    ctx->procs = calloc(n ? n : 1, sizeof(*ctx->procs));
    struct an_load *L = ctx->load = calloc(1, sizeof(*ctx->load));
    if (!ctx->procs || !L) {
        shp_err("out of memory");
        return -1;
    }
    L->ctx = ctx;
    L->held = NO_FEED;
    atomic_store(&L->waiting, -1);
    if (ops)
        L->ops = *ops;
    if (readers > n)
        readers = (unsigned)n;
    for (L->tree.size = 1; L->tree.size < n; L->tree.size *= 2)
        ;
    L->tree.key = malloc(L->tree.size * sizeof(*L->tree.key));
    L->tree.tie = malloc(L->tree.size * sizeof(*L->tree.tie));
    L->tree.next_item = calloc(L->tree.size, sizeof(*L->tree.next_item));
    L->tree.next_ev = calloc(L->tree.size, sizeof(*L->tree.next_ev));
    L->tree.node = calloc(L->tree.size, sizeof(*L->tree.node));
    L->feeds = calloc(n ? n : 1, sizeof(*L->feeds));
    if (L->feeds)
        L->nfeeds = n;
    uint64_t cap = readers ? feed_capacity(n) : INLINE_CAP(n);
    bool ok = L->tree.key && L->tree.tie && L->tree.next_item && L->tree.next_ev && L->tree.node &&
              L->feeds;
    for (size_t j = 0; ok && j < L->tree.size; j++)
        tree_out(&L->tree, (uint32_t)j);
    for (size_t i = 0; ok && i < n; i++) {
        struct an_feed *f = &L->feeds[i];
        f->v = malloc(cap * sizeof(*f->v));
        if (!readers)
            f->ev = malloc(cap * sizeof(*f->ev));
        else
            f->br = malloc(cap * sizeof(*f->br));
        ok = f->v && (readers ? f->br != NULL : f->ev != NULL);
        f->mask = cap - 1;
        f->batch = cap / 2;
        f->proc = (uint32_t)i;
        f->reader = NO_READER;
        ctx->procs[i].sp = &s->procs[i];
        ctx->bytes_total += s->procs[i].t.end;
    }
    if (!ok) {
        shp_err("out of memory");
        return -1;
    }
    ctx->nprocs = n;
    uint64_t step = n ? (64ull << 20) / n : 8ull << 20;
    L->release_step = step > (8ull << 20)    ? (8ull << 20)
                      : step < (64ull << 10) ? (64ull << 10)
                                             : step & ~((64ull << 10) - 1);
    if (readers) {
        L->readers = calloc(readers, sizeof(*L->readers));
        if (!L->readers || pthread_mutex_init(&L->lock, NULL) != 0) {
            shp_err("out of memory");
            return -1;
        }
        pthread_cond_init(&L->cv, NULL);
        L->sync = true;
        L->nreaders = readers;
        for (unsigned k = 0; k < readers; k++) {
            struct reader *r = &L->readers[k];
            r->L = L;
            r->first = k;
            pthread_mutex_init(&r->lock, NULL);
            pthread_cond_init(&r->cv, NULL);
            for (size_t i = k; i < n; i += readers)
                r->feeds++;
        }
    }
    return 0;
}

void an_load_start(struct an_ctx *ctx, unsigned types)
{
    struct an_load *L = ctx->load;
    L->types = types;
    /* A reader that cannot be started leaves its feeds to the merge (which then decodes their
     * events again: they have no room for the decoded ones). */
    for (unsigned k = 0; k < L->nreaders; k++) {
        struct reader *r = &L->readers[k];
        for (size_t i = k; i < L->nfeeds; i += L->nreaders)
            L->feeds[i].reader = k;
        r->started = pthread_create(&r->thread, NULL, read_feeds, r) == 0;
        for (size_t i = k; !r->started && i < L->nfeeds; i += L->nreaders)
            L->feeds[i].reader = NO_READER;
    }
    for (size_t i = 0; i < L->nfeeds; i++) {
        struct an_feed *f = &L->feeds[i];
        if (wait_for(L, f, 1)) {
            tree_in(&L->tree, (uint32_t)i, f->v[0].t_ns);
            L->tree.next_item[i] = &f->v[0];
            L->tree.next_ev[i] = f->ev ? (const void *)&f->ev[0] : f->v[0].ref.rec;
            L->live++;
        } else {
            ctx->procs[i].ended = true;
        }
    }
    if (!tree_build(&L->tree)) {
        shp_err("out of memory");
        L->live = 0;
    }
}

bool an_next(struct an_ctx *ctx, struct an_proc **proc, const struct shp_event **e,
             struct an_ref *ref, void **note)
{
    struct an_load *L = ctx->load;
    if (!L)
        return false;
    for (;;) {
        if (L->held != NO_FEED) {
            give_back(L, &L->feeds[L->held]);
            L->held = NO_FEED;
        }
        if (!L->live)
            return false;
        uint32_t i = tree_winner(&L->tree);
        struct an_proc *p = &ctx->procs[i];
        struct an_feed *f = &L->feeds[i];
        uint64_t slot = f->mtail & f->mask;
        const struct an_item *it = &f->v[slot];
        bool wanted = L->types & (1u << it->ref.type);
        p->index++;
        L->held = i;
        if (atomic_load_explicit(&f->head, memory_order_acquire) >= f->mtail + 2 ||
            wait_for(L, f, f->mtail + 2)) {
            uint64_t ns = (f->mtail + 1) & f->mask;
            tree_set(&L->tree, i, f->v[ns].t_ns);
            if (L->nfeeds > PREFETCH_FEEDS) {
                /* What the merge will read of it: its decoded event, its brief (a call), or its
                 * record (another type it decodes), or nothing (a type it skips). */
                unsigned nt = f->v[ns].ref.type;
                L->tree.next_item[i] = &f->v[ns];
                L->tree.next_ev[i] = f->ev                      ? (const void *)&f->ev[ns]
                                     : !(L->types & (1u << nt)) ? NULL
                                     : is_call(nt)              ? (const void *)&f->br[ns]
                                                                : (const void *)f->v[ns].ref.rec;
            }
            tree_replay(&L->tree, i);
        } else {
            tree_out(&L->tree, i);
            L->live--;
            tree_replay(&L->tree, i);
            /* The caller learns that p ended with its last event: flagged here, acted on by the
             * driver after it has handed this event on. */
            p->ended = true;
        }
        /* The next event's process is known now, and its feed is long out of the cache with
         * hundreds of traces: fetched while the passes work on this one. */
        if (L->live && L->nfeeds > PREFETCH_FEEDS) {
            uint32_t w = tree_winner(&L->tree);
            const struct an_feed *nf = &L->feeds[w];
            const char *ev = L->tree.next_ev[w];
            __builtin_prefetch(nf);
            __builtin_prefetch((const char *)nf + 128);
            __builtin_prefetch(&ctx->procs[w]);
            __builtin_prefetch(L->tree.next_item[w]);
            for (int k = 0; ev && k < 5; k++)
                __builtin_prefetch(ev + 64 * k);
        }
        /* An event that no merged pass looks at, with nothing found at it, and not its
         * process's last: all the caller would do with it is count it and keep it as the
         * process's last call, done here at the same place in the merged order (copies are a
         * third of the events; handing each out cost the caller's loop and this call). */
        if (!wanted && !it->note && !p->ended) {
            ctx->events++;
            p->last = it->ref;
            continue;
        }
        *proc = p;
        *ref = it->ref;
        *note = it->note;
        *e = NULL;
        if (wanted) {
            bool call = is_call(it->ref.type);
            struct shp_event *d = call ? &L->ce : &L->e;
            if (f->ev) {
                *e = &f->ev[slot];
            } else if (call && L->ce_ok) {
                brief_get(d, &f->br[slot], it->ref.type, it->t_ns, it->ref.index);
                *e = d;
            } else if (shp_event_decode_brief(&p->sp->t, it->ref.rec, it->ref.type, d)) {
                d->index = it->ref.index;
                L->ce_ok = L->ce_ok || call;
                *e = d;
            }
        }
        return true;
    }
}

void an_load_progress(const struct an_ctx *ctx, uint64_t *done, uint64_t *total)
{
    *done = ctx->load ? atomic_load_explicit(&ctx->load->bytes_done, memory_order_relaxed) : 0;
    *total = ctx->bytes_total;
}

void an_load_stats(const struct an_ctx *ctx, FILE *f, const char *what)
{
    const struct an_load *L = ctx->load;
    for (unsigned k = 0; L && k < L->nreaders; k++) {
        const struct reader *r = &L->readers[k];
        fprintf(f,
                "shapetrace: reader %u (%s): wall %.3f s, CPU %.3f s, %" PRIu64
                " processes, %" PRIu64 " events%s\n",
                k + 1, what, r->wall, r->cpu, r->feeds, r->events,
                r->started ? "" : " (no thread: the merge read them)");
    }
}

void an_load_join(struct an_ctx *ctx)
{
    struct an_load *L = ctx->load;
    if (!L || L->joined)
        return;
    L->joined = true;
    atomic_store(&L->stop, true);
    for (unsigned k = 0; k < L->nreaders; k++) {
        struct reader *r = &L->readers[k];
        if (!r->started)
            continue;
        pthread_mutex_lock(&r->lock);
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->lock);
        pthread_join(r->thread, NULL);
    }
}

void an_unload(struct an_ctx *ctx)
{
    struct an_load *L = ctx->load;
    an_load_join(ctx);
    if (L) {
        if (L->sync) {
            pthread_mutex_destroy(&L->lock);
            pthread_cond_destroy(&L->cv);
        }
        for (unsigned k = 0; k < L->nreaders; k++) {
            pthread_mutex_destroy(&L->readers[k].lock);
            pthread_cond_destroy(&L->readers[k].cv);
        }
        for (size_t i = 0; L->feeds && i < L->nfeeds; i++) {
            free(L->feeds[i].v);
            free(L->feeds[i].ev);
            free(L->feeds[i].br);
        }
        free(L->feeds);
        free(L->readers);
        free(L->tree.key);
        free(L->tree.tie);
        free(L->tree.next_item);
        free(L->tree.next_ev);
        free(L->tree.node);
        free(L);
    }
    ctx->load = NULL;
    free(ctx->procs);
    ctx->procs = NULL;
    ctx->nprocs = 0;
}
