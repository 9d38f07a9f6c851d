/* The NCCL double's ranks in other processes: the shared-memory segment where a communicator's
 * processes meet, and the progress of their calls, each a task that advances without blocking. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tests/doubles/nccl_double.h"

/* ---- ranks in other processes ---------------------------------------------------------------- */

/* A communicator whose ranks are processes meets in one POSIX shared-memory segment, named from its
 * unique id (a split's or shrink's child: from the parent's name, the child's index on the parent
 * and its color or exclude list), so that a later run, with a fresh id, never meets a stale
 * segment. The name is unlinked as soon as every rank has mapped the segment: a process killed
 * after that leaves nothing behind.
 *
 * Collectives go in rounds that every rank counts alike: a rank waits until every rank has left
 * the previous round, copies its part into its slot, arrives, waits until every rank has arrived,
 * computes its own output from the slots and leaves. A call larger than a slot takes several
 * rounds. As in NCCL, nothing checks that the ranks agree: a rank takes what the others put in
 * their slots, truncated or padded with zeros to what it expects, and ranks that make different
 * numbers of rounds leave someone waiting until SHAPETRACE_DOUBLE_TIMEOUT. Sends and receives go
 * through one byte ring per (sender, receiver), so the k-th send from a to b meets the k-th receive
 * b posts from a, whatever the sizes say. */

#define SHM_MAGIC 0x73687064736d656dULL /* "shpdsmem" */
#define SHM_HDR_BYTES ((size_t)4096)
#define SHM_SLOT_BYTES ((size_t)4 << 20) /* one rank's part of one round */
#define MSG_HDR_BYTES 8                  /* a message on a ring: its payload length, then payload */
#define SPLIT_MAGIC 0x73706c74           /* "splt": marks a split's vote in a slot */

struct shm_rank {
    _Atomic uint32_t present;  /* this rank has joined */
    _Atomic uint32_t arrived;  /* rounds it has entered; read only to say who is missing */
    _Atomic uint32_t departed; /* rounds it has left; likewise */
    uint32_t pad0;
    uint64_t slot_len; /* bytes in its slot for its latest round */
    char pad1[40];
};

struct shm_chan {
    _Atomic uint32_t head; /* bytes the sender has written, mod 2^32 */
    char pad0[60];
    _Atomic uint32_t tail; /* bytes the receiver has consumed, mod 2^32 */
    char pad1[60];
};

struct shm_seg {
    _Atomic uint64_t magic; /* stored last by the creator */
    int32_t nranks;
    uint32_t chan_bytes; /* one ring's capacity, a power of two */
    uint64_t slot_bytes;
    uint64_t size;
    char pad0[32];
    _Atomic uint32_t joined; /* ranks that have mapped the segment */
    char pad1[60];
    _Atomic uint32_t arrive; /* rounds entered, summed over the ranks, mod 2^32 */
    char pad2[60];
    _Atomic uint32_t depart; /* rounds left, likewise */
    char pad3[60];
};

_Static_assert(sizeof(struct shm_rank) == 64, "one cache line per rank");
_Static_assert(sizeof(struct shm_chan) == 128, "one cache line per end of a ring");
_Static_assert(sizeof(struct shm_seg) <= SHM_HDR_BYTES, "the header fits its page");

/* Offsets in the segment: header, ranks, rings' ends, slots, rings' data. */
struct shm_layout {
    size_t chans;
    size_t slots;
    size_t data;
    size_t size;
};

static size_t page_up(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

/* 1 MiB rings while n^2 of them fit in 64 MiB, smaller ones (down to 64 KiB) beyond: the segment
 * is sparse, but a ring used once stays resident. */
static uint32_t ring_bytes(int n)
{
    size_t cap = (size_t)1 << 20;

    while (cap > ((size_t)64 << 10) && (size_t)n * (size_t)n * cap > ((size_t)64 << 20))
        cap /= 2;
    return (uint32_t)cap;
}

static struct shm_layout layout(int n, size_t slot_bytes, size_t chan_bytes)
{
    struct shm_layout l;
    size_t nn = (size_t)n * (size_t)n;

    l.chans = SHM_HDR_BYTES + page_up((size_t)n * sizeof(struct shm_rank));
    l.slots = l.chans + page_up(nn * sizeof(struct shm_chan));
    l.data = l.slots + (size_t)n * slot_bytes;
    l.size = l.data + nn * chan_bytes;
    return l;
}

static struct shm_rank *seg_rank(ncclComm_t c, int r)
{
    return (struct shm_rank *)((char *)c->shm + SHM_HDR_BYTES) + r;
}

static unsigned char *seg_slot(ncclComm_t c, int r)
{
    struct shm_layout l = layout(c->nranks, c->shm->slot_bytes, c->shm->chan_bytes);

    return (unsigned char *)c->shm + l.slots + (size_t)r * c->shm->slot_bytes;
}

static struct shm_chan *seg_chan(ncclComm_t c, int src, int dst)
{
    struct shm_layout l = layout(c->nranks, c->shm->slot_bytes, c->shm->chan_bytes);

    return (struct shm_chan *)((char *)c->shm + l.chans) + (size_t)src * c->nranks + dst;
}

static unsigned char *seg_ring(ncclComm_t c, int src, int dst)
{
    struct shm_layout l = layout(c->nranks, c->shm->slot_bytes, c->shm->chan_bytes);

    return (unsigned char *)c->shm + l.data + ((size_t)src * c->nranks + dst) * c->shm->chan_bytes;
}

/* What rank r left in its slot, as far as the slot goes. */
static size_t slot_have(ncclComm_t c, int r)
{
    uint64_t n = seg_rank(c, r)->slot_len;

    return n < c->shm->slot_bytes ? (size_t)n : (size_t)c->shm->slot_bytes;
}

uint64_t shp_nd_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* SHAPETRACE_DOUBLE_TIMEOUT: seconds (fractions allowed) without progress after which a rank gives
 * up where NCCL would wait forever; read at every wait, so a test may change it. */
static double timeout_s(void)
{
    const char *s = getenv("SHAPETRACE_DOUBLE_TIMEOUT");
    char *end;
    double v;

    if (!s || !*s)
        return 10;
    v = strtod(s, &end);
    return *end || !(v > 0) || v > 1e6 ? 10 : v;
}

/* Shared futexes, not FUTEX_PRIVATE: the words live in a segment that other processes map. */
static void futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};

    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Two 64-bit FNV-1a hashes with different seeds over the same bytes name the segment. */
static void name_seg(char *out, size_t len, const uint64_t h[2])
{
    snprintf(out, len, "/shp-nccl-%016llx%016llx", (unsigned long long)h[0],
             (unsigned long long)h[1]);
}

void shp_nd_name_from_id(ncclComm_t c, const ncclUniqueId *id)
{
    uint64_t h[2] = {fnv1a(0xcbf29ce484222325ULL, id->internal, sizeof(id->internal)),
                     fnv1a(0x6c62272e07bb0142ULL, id->internal, sizeof(id->internal))};

    name_seg(c->shm_name, sizeof(c->shm_name), h);
}

/* Every member computes the same name: the parent's, the child's index among the parent's splits
 * and shrinks, and what chose the members (a color, or the excluded ranks). */
static void name_child(ncclComm_t child, ncclComm_t parent, enum op_kind kind, const int *vals,
                       int nvals)
{
    int head[3] = {(int)kind, (int)parent->nchildren++, nvals};
    uint64_t h[2] = {0xcbf29ce484222325ULL, 0x6c62272e07bb0142ULL};

    for (int k = 0; k < 2; k++) {
        h[k] = fnv1a(h[k], parent->shm_name, strlen(parent->shm_name));
        h[k] = fnv1a(h[k], head, sizeof(head));
        h[k] = fnv1a(h[k], vals, (size_t)nvals * sizeof(*vals));
    }
    name_seg(child->shm_name, sizeof(child->shm_name), h);
}

static ncclResult_t sys_fail(const char *fn, const char *what)
{
    return fail(ncclSystemError, "%s : %s failed: %s", fn, what, strerror(errno));
}

static ncclResult_t enter(ncclComm_t c, const char *fn)
{
    if (atomic_exchange(&seg_rank(c, c->rank)->present, 1))
        return fail(ncclInvalidUsage,
                    "%s : rank %d of %d has already joined this communicator in another call (the "
                    "same unique id used twice?)",
                    fn, c->rank, c->nranks);
    c->entered = true;
    atomic_fetch_add_explicit(&c->shm->joined, 1, memory_order_release);
    futex_wake(&c->shm->joined);
    return ncclSuccess;
}

static ncclResult_t create_seg(ncclComm_t c, int fd, const char *fn)
{
    struct shm_layout l = layout(c->nranks, SHM_SLOT_BYTES, ring_bytes(c->nranks));
    struct shm_seg *s;

    if (ftruncate(fd, (off_t)l.size) != 0) {
        ncclResult_t r = sys_fail(fn, "ftruncate of the shared segment");

        close(fd);
        shm_unlink(c->shm_name);
        return r;
    }
    s = mmap(NULL, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED) {
        shm_unlink(c->shm_name);
        return sys_fail(fn, "mmap of the shared segment");
    }
    s->nranks = c->nranks;
    s->chan_bytes = ring_bytes(c->nranks);
    s->slot_bytes = SHM_SLOT_BYTES;
    s->size = l.size;
    atomic_store_explicit(&s->magic, SHM_MAGIC, memory_order_release);
    c->shm = s;
    c->shm_size = l.size;
    return enter(c, fn);
}

/* It waits only for a creator between creating the segment and filling in its header. */
ncclResult_t shp_nd_attach(ncclComm_t c, const char *fn)
{
    double limit = timeout_s();
    uint64_t deadline = shp_nd_now_ns() + (uint64_t)(limit * 1e9);
    struct shm_layout l;
    struct shm_seg *s;
    struct stat st;
    int fd;

    for (;;) {
        fd = shm_open(c->shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0)
            return create_seg(c, fd, fn);
        if (errno != EEXIST)
            return sys_fail(fn, "shm_open");
        fd = shm_open(c->shm_name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0 && errno != ENOENT) /* ENOENT: unlinked since; the next round creates it */
            return sys_fail(fn, "shm_open");
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= SHM_HDR_BYTES)
            break;
        if (fd >= 0)
            close(fd);
        if (shp_nd_now_ns() > deadline)
            goto late;
        usleep(1000);
    }
    s = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED)
        return sys_fail(fn, "mmap of the shared segment");
    c->shm = s;
    c->shm_size = (size_t)st.st_size;
    while (atomic_load_explicit(&s->magic, memory_order_acquire) != SHM_MAGIC) {
        if (shp_nd_now_ns() > deadline)
            goto late;
        usleep(1000);
    }
    /* NCCL's bootstrap root refuses this too ("mismatch in rank count"). */
    if (s->nranks != c->nranks)
        return fail(ncclInvalidUsage,
                    "%s : rank %d was given nranks %d, but the rank that created the "
                    "communicator gave %d",
                    fn, c->rank, c->nranks, s->nranks);
    l = layout(s->nranks, s->slot_bytes, s->chan_bytes);
    if (l.size != s->size || l.size != c->shm_size || !s->chan_bytes ||
        (s->chan_bytes & (s->chan_bytes - 1)))
        return fail(ncclInternalError, "%s : shared segment %s is not the double's", fn,
                    c->shm_name);
    return enter(c, fn);
late:
    return fail_loud(ncclSystemError,
                     "%s : rank %d of %d timed out after %g s waiting for the rank that created "
                     "shared segment %s to initialise it (SHAPETRACE_DOUBLE_TIMEOUT)",
                     fn, c->rank, c->nranks, limit, c->shm_name);
}

/* ---- progress: every call on a shared-memory comm is a task that advances without blocking ----
 */

enum step { STEP_BLOCKED, STEP_MOVED, STEP_DONE, STEP_FAILED };

struct task {
    struct op op; /* owns op.exclude */
    const char *name;
    bool finished;
    int phase;              /* rounds: 0 before arriving, 1 arrived */
    unsigned long long seq; /* collectives: index among this rank's on the comm */
    size_t chunk, nchunks;  /* rounds: the current one and how many the call takes */
    size_t per;             /* elements per round */
    uint64_t done, total;   /* p2p: message bytes moved, and the send's message size */
    uint64_t msg_len;       /* recv: the payload size the sender announced */
    unsigned char hdr[MSG_HDR_BYTES];
    int new_rank, new_size; /* split: this rank's place in its color */
    ncclComm_t child;       /* split and shrink: the comm being made */
    bool joining;           /* split, shrink: attached, waiting for the other members */
    const void **in;        /* reductions: one input per rank */
    void **pad;             /* zero-padded copies of inputs shorter than expected */
    _Atomic uint32_t *word; /* a blocked step waits for this word to leave word_val */
    uint32_t word_val;
};

static bool blocked_layout(enum op_kind k)
{
    return k == OP_REDUCE_SCATTER || k == OP_ALLTOALL || k == OP_SCATTER;
}

static bool contributes(const struct op *op, int rank)
{
    return (op->kind != OP_BROADCAST && op->kind != OP_SCATTER) || rank == op->root;
}

static bool reads(const struct op *op, int rank)
{
    return (op->kind != OP_REDUCE && op->kind != OP_GATHER) || rank == op->root;
}

static bool uses_rounds(enum op_kind k)
{
    return shp_nd_ops[k].family == FAM_COLL || k == OP_SPLIT;
}

/* Takes ownership of op->exclude. */
static void init_task(struct task *t, const struct op *op)
{
    ncclComm_t c = op->comm;

    memset(t, 0, sizeof(*t));
    t->op = *op;
    t->name = op->fn ? op->fn : shp_nd_ops[op->kind].name;
    if (shp_nd_ops[op->kind].family == FAM_COLL) {
        size_t es = elem_size(op);

        /* Blocked calls put one block per rank in a slot. */
        t->per = c->shm->slot_bytes / (blocked_layout(op->kind) ? (size_t)c->nranks * es : es);
        t->nchunks = (op->count + t->per - 1) / t->per;
        t->seq = c->ncoll++;
    } else if (op->kind == OP_SPLIT) {
        t->nchunks = 1;
    } else if (op->kind == OP_SEND) {
        uint64_t len = op->count * elem_size(op);

        memcpy(t->hdr, &len, sizeof(len));
        t->total = MSG_HDR_BYTES + len;
    }
}

static void free_task(struct task *t)
{
    if (t->pad)
        for (int i = 0; i < t->op.comm->nranks; i++)
            free(t->pad[i]);
    free(t->pad);
    free(t->in);
    free(t->op.exclude);
}

static enum step block(struct task *t, _Atomic uint32_t *word, uint32_t val)
{
    t->word = word;
    t->word_val = val;
    return STEP_BLOCKED;
}

/* Copies bytes [at, at + bytes) of rank i's slot to dst: what is there, then zeros. */
static void fetch(ncclComm_t c, int i, size_t at, size_t bytes, void *dst)
{
    size_t have = slot_have(c, i), got = at < have ? have - at : 0;

    if (got > bytes)
        got = bytes;
    if (got)
        memcpy(dst, seg_slot(c, i) + at, got);
    if (got < bytes)
        memset((char *)dst + got, 0, bytes - got);
}

/* Rank i's input to a reduction: in its slot when it is all there, else a zero-padded copy. */
static const void *input(struct task *t, int i, size_t at, size_t bytes)
{
    ncclComm_t c = t->op.comm;

    if (at + bytes <= slot_have(c, i))
        return seg_slot(c, i) + at;
    if (!t->pad[i] && !(t->pad[i] = malloc(t->per * elem_size(&t->op))))
        return NULL;
    fetch(c, i, at, bytes, t->pad[i]);
    return t->pad[i];
}

static void put_part(struct task *t)
{
    const struct op *op = &t->op;
    ncclComm_t c = op->comm;
    unsigned char *slot = seg_slot(c, c->rank);
    const unsigned char *send = op->sendbuff;
    size_t es = elem_size(op), off = t->chunk * t->per, bytes = 0, len, piece;

    len = op->count - off < t->per ? op->count - off : t->per;
    piece = len * es;
    if (op->kind == OP_SPLIT) {
        int32_t vote[4] = {SPLIT_MAGIC, op->color, op->key, 0};

        memcpy(slot, vote, sizeof(vote));
        bytes = sizeof(vote);
    } else if (contributes(op, c->rank) && blocked_layout(op->kind)) {
        for (int j = 0; j < c->nranks; j++)
            memcpy(slot + (size_t)j * piece, send + ((size_t)j * op->count + off) * es, piece);
        bytes = (size_t)c->nranks * piece;
    } else if (contributes(op, c->rank)) {
        memcpy(slot, send + off * es, piece);
        bytes = piece;
    }
    seg_rank(c, c->rank)->slot_len = bytes;
}

/* A split's members by color; ranks ordered by key, then by parent rank, as in NCCL. */
static void count_votes(struct task *t)
{
    ncclComm_t c = t->op.comm;

    t->new_rank = 0;
    t->new_size = 0;
    for (int i = 0; i < c->nranks; i++) {
        int32_t v[4];

        if (slot_have(c, i) < sizeof(v))
            continue;
        memcpy(v, seg_slot(c, i), sizeof(v));
        if (v[0] != SPLIT_MAGIC || v[1] != t->op.color)
            continue;
        t->new_size++;
        if (v[2] < t->op.key || (v[2] == t->op.key && i < c->rank))
            t->new_rank++;
    }
}

static bool take_part(struct task *t)
{
    const struct op *op = &t->op;
    ncclComm_t c = op->comm;
    int n = c->nranks, me = c->rank;
    unsigned char *recv = op->recvbuff;
    size_t es = elem_size(op), off = t->chunk * t->per, len, piece, at;

    len = op->count - off < t->per ? op->count - off : t->per;
    piece = len * es;
    switch (op->kind) {
    case OP_ALL_REDUCE:
    case OP_REDUCE:
    case OP_REDUCE_SCATTER:
        if (!t->in && !(t->in = calloc((size_t)n, sizeof(*t->in))))
            return false;
        if (!t->pad && !(t->pad = calloc((size_t)n, sizeof(*t->pad))))
            return false;
        at = op->kind == OP_REDUCE_SCATTER ? (size_t)me * piece : 0;
        for (int i = 0; i < n; i++)
            if (!(t->in[i] = input(t, i, at, piece)))
                return false;
        shp_nd_reduce(recv + off * es, t->in, n, len, op->dtype, op->redop);
        break;
    case OP_BROADCAST:
        fetch(c, op->root, 0, piece, recv + off * es);
        break;
    case OP_SCATTER:
        fetch(c, op->root, (size_t)me * piece, piece, recv + off * es);
        break;
    case OP_ALL_GATHER:
    case OP_GATHER:
    case OP_ALLTOALL:
        at = op->kind == OP_ALLTOALL ? (size_t)me * piece : 0;
        for (int i = 0; i < n; i++)
            fetch(c, i, at, piece, recv + ((size_t)i * op->count + off) * es);
        break;
    case OP_SPLIT:
        count_votes(t);
        break;
    default:
        break;
    }
    return true;
}

static enum step leave(struct task *t)
{
    ncclComm_t c = t->op.comm;

    atomic_store_explicit(&seg_rank(c, c->rank)->departed, c->round + 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->shm->depart, 1, memory_order_release);
    futex_wake(&c->shm->depart);
    c->round++;
    t->chunk++;
    t->phase = 0;
    return t->chunk == t->nchunks ? STEP_DONE : STEP_MOVED;
}

/* One round: wait for every rank to leave the previous one, fill the slot, arrive, wait for every
 * rank to arrive, read, leave. A rank that reads nothing (a non-root of reduce or gather) leaves
 * as soon as it arrives. The counters wrap; differences are taken as signed. */
static enum step step_round(struct task *t, ncclResult_t *err)
{
    ncclComm_t c = t->op.comm;
    struct shm_seg *s = c->shm;
    uint32_t n = (uint32_t)c->nranks, v;

    if (t->chunk == t->nchunks)
        return STEP_DONE;
    if (t->phase == 0) {
        v = atomic_load_explicit(&s->depart, memory_order_acquire);
        if ((int32_t)(v - c->round * n) < 0)
            return block(t, &s->depart, v);
        put_part(t);
        atomic_store_explicit(&seg_rank(c, c->rank)->arrived, c->round + 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->arrive, 1, memory_order_release);
        futex_wake(&s->arrive);
        t->phase = 1;
        if (!reads(&t->op, c->rank))
            return leave(t);
    }
    v = atomic_load_explicit(&s->arrive, memory_order_acquire);
    if ((int32_t)(v - (c->round + 1) * n) < 0)
        return block(t, &s->arrive, v);
    if (!take_part(t)) {
        *err = no_memory(t->name);
        return STEP_FAILED;
    }
    return leave(t);
}

/* Copies bytes [from, from + len) of the message (length header, then payload) into the ring. */
static void ring_put(unsigned char *ring, uint32_t cap, uint32_t pos, const unsigned char *hdr,
                     const unsigned char *payload, uint64_t from, size_t len)
{
    while (len > 0) {
        uint32_t at = pos & (cap - 1);
        size_t k = len < cap - at ? len : cap - at;
        const unsigned char *src;

        if (from < MSG_HDR_BYTES) {
            src = hdr + from;
            if (k > MSG_HDR_BYTES - from)
                k = MSG_HDR_BYTES - from;
        } else {
            src = payload + (from - MSG_HDR_BYTES);
        }
        memcpy(ring + at, src, k);
        pos += (uint32_t)k;
        from += k;
        len -= k;
    }
}

/* The reverse; payload beyond room (the receiver's own size) is dropped. */
static void ring_get(const unsigned char *ring, uint32_t cap, uint32_t pos, unsigned char *hdr,
                     unsigned char *payload, size_t room, uint64_t from, size_t len)
{
    while (len > 0) {
        uint32_t at = pos & (cap - 1);
        size_t k = len < cap - at ? len : cap - at;

        if (from < MSG_HDR_BYTES) {
            if (k > MSG_HDR_BYTES - from)
                k = MSG_HDR_BYTES - from;
            memcpy(hdr + from, ring + at, k);
        } else if (from - MSG_HDR_BYTES < room) {
            size_t p = (size_t)(from - MSG_HDR_BYTES), keep = k < room - p ? k : room - p;

            memcpy(payload + p, ring + at, keep);
        }
        pos += (uint32_t)k;
        from += k;
        len -= k;
    }
}

/* A send completes once its message is in the ring: at once when it fits, as NCCL's small sends
 * do, else as the receiver drains it. */
static enum step step_send(struct task *t)
{
    ncclComm_t c = t->op.comm;
    struct shm_chan *ch = seg_chan(c, c->rank, t->op.root);
    uint32_t cap = c->shm->chan_bytes;
    uint32_t head = atomic_load_explicit(&ch->head, memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(&ch->tail, memory_order_acquire);
    uint32_t space = cap - (head - tail);
    uint64_t left = t->total - t->done;
    size_t k = left < space ? (size_t)left : space;

    if (k == 0)
        return block(t, &ch->tail, tail);
    ring_put(seg_ring(c, c->rank, t->op.root), cap, head, t->hdr, t->op.sendbuff, t->done, k);
    atomic_store_explicit(&ch->head, head + (uint32_t)k, memory_order_release);
    futex_wake(&ch->head);
    t->done += k;
    return t->done == t->total ? STEP_DONE : STEP_MOVED;
}

/* A receive takes the next message from its peer whatever its size: the first bytes that fit,
 * zeros after a shorter one. */
static enum step step_recv(struct task *t)
{
    ncclComm_t c = t->op.comm;
    struct shm_chan *ch = seg_chan(c, t->op.root, c->rank);
    uint32_t cap = c->shm->chan_bytes;
    uint32_t tail = atomic_load_explicit(&ch->tail, memory_order_relaxed);
    uint32_t head = atomic_load_explicit(&ch->head, memory_order_acquire);
    size_t room = t->op.count * elem_size(&t->op);
    uint64_t want =
        t->done < MSG_HDR_BYTES ? MSG_HDR_BYTES - t->done : MSG_HDR_BYTES + t->msg_len - t->done;
    size_t k = want < head - tail ? (size_t)want : head - tail;

    if (want > 0 && k == 0)
        return block(t, &ch->head, head);
    ring_get(seg_ring(c, t->op.root, c->rank), cap, tail, t->hdr, t->op.recvbuff, room, t->done, k);
    if (k) {
        atomic_store_explicit(&ch->tail, tail + (uint32_t)k, memory_order_release);
        futex_wake(&ch->tail);
    }
    t->done += k;
    if (t->done < MSG_HDR_BYTES)
        return STEP_MOVED;
    if (t->done == MSG_HDR_BYTES && k)
        memcpy(&t->msg_len, t->hdr, sizeof(t->msg_len));
    if (t->done < MSG_HDR_BYTES + t->msg_len)
        return STEP_MOVED;
    if (t->msg_len < room)
        memset((unsigned char *)t->op.recvbuff + t->msg_len, 0, room - (size_t)t->msg_len);
    return STEP_DONE;
}

static enum step step_join(struct task *t, ncclComm_t c)
{
    uint32_t j = atomic_load_explicit(&c->shm->joined, memory_order_acquire);

    if (j < (uint32_t)c->nranks)
        return block(t, &c->shm->joined, j);
    /* Everyone has it mapped: the name is no longer needed, and nothing can leak it now. */
    shm_unlink(c->shm_name);
    c->joined = true;
    c->pending = false;
    return STEP_DONE;
}

/* The comm a split or shrink makes: the one handed out at the call, inside a group, or a new
 * one. */
static ncclComm_t make_child(struct task *t, int nranks, int rank)
{
    ncclComm_t child = t->op.child;

    if (!child)
        return shp_nd_new_shm_comm(nranks, rank, t->op.comm->device);
    child->nranks = nranks;
    child->rank = rank;
    return child;
}

/* The new comm is the caller's once every member has joined. */
static enum step finish_child(struct task *t)
{
    enum step s = step_join(t, t->child);

    if (s == STEP_DONE) {
        *t->op.newcomm = t->child;
        t->child = NULL;
    }
    return s;
}

/* A vote in the parent's rounds, then the join of this color's comm. */
static enum step step_split(struct task *t, ncclResult_t *err)
{
    ncclComm_t c = t->op.comm;
    enum step s;

    if (t->chunk < t->nchunks) {
        if ((s = step_round(t, err)) != STEP_DONE)
            return s;
        if (t->op.color == NCCL_SPLIT_NOCOLOR) {
            c->nchildren++;
            return STEP_DONE;
        }
        if (!(t->child = make_child(t, t->new_size, t->new_rank))) {
            *err = no_memory(t->name);
            return STEP_FAILED;
        }
        name_child(t->child, c, OP_SPLIT, &t->op.color, 1);
        if ((*err = shp_nd_attach(t->child, t->name)) != ncclSuccess)
            return STEP_FAILED;
        t->joining = true;
        return STEP_MOVED;
    }
    return finish_child(t);
}

/* The excluded ranks do not call (they may be dead), so the survivors agree without meeting:
 * they keep their order, and the name comes from what they all know. */
static enum step step_shrink(struct task *t, ncclResult_t *err)
{
    ncclComm_t c = t->op.comm;

    if (!t->joining) {
        int k = 0;

        for (int r = 0; r < c->rank; r++)
            k += !shp_nd_excludes(&t->op, r);
        if (!(t->child = make_child(t, c->nranks - t->op.nexclude, k))) {
            *err = no_memory(t->name);
            return STEP_FAILED;
        }
        name_child(t->child, c, OP_SHRINK, t->op.exclude, t->op.nexclude);
        if ((*err = shp_nd_attach(t->child, t->name)) != ncclSuccess)
            return STEP_FAILED;
        t->joining = true;
        return STEP_MOVED;
    }
    return finish_child(t);
}

static enum step step(struct task *t, ncclResult_t *err)
{
    switch (t->op.kind) {
    case OP_SEND:
        return step_send(t);
    case OP_RECV:
        return step_recv(t);
    case OP_SPLIT:
        return step_split(t, err);
    case OP_SHRINK:
        return step_shrink(t, err);
    case OP_INIT:
        return step_join(t, t->op.comm);
    default:
        return step_round(t, err);
    }
}

/* Calls on one comm that share a sequence wait for the earlier ones: collectives and splits for
 * the rounds, sends to (receives from) one peer for the ring. Nothing runs on a comm whose join
 * is still pending in this group. */
static bool eligible(const struct task *t, size_t i)
{
    const struct op *a = &t[i].op;

    if (a->kind != OP_INIT && !a->comm->joined)
        return false;
    for (size_t j = 0; j < i; j++) {
        const struct op *b = &t[j].op;

        if (t[j].finished || b->comm != a->comm)
            continue;
        if (uses_rounds(a->kind) && uses_rounds(b->kind))
            return false;
        if ((a->kind == OP_SEND || a->kind == OP_RECV) && b->kind == a->kind && b->root == a->root)
            return false;
    }
    return true;
}

enum missing { MISSING_JOIN, MISSING_ARRIVAL, MISSING_DEPARTURE };

/* "ranks 1, 3 (2 of 4)": who has not joined, or not reached round target. */
static void missing_ranks(char *buf, size_t len, ncclComm_t c, enum missing what, uint32_t target)
{
    char list[96] = "";
    int k = 0, at = 0;

    for (int r = 0; r < c->nranks; r++) {
        struct shm_rank *sr = seg_rank(c, r);
        bool miss;

        if (what == MISSING_JOIN)
            miss = !atomic_load(&sr->present);
        else
            miss = (int32_t)(atomic_load(what == MISSING_ARRIVAL ? &sr->arrived : &sr->departed) -
                             target) < 0;
        if (!miss)
            continue;
        if (k < 8 && at >= 0 && (size_t)at < sizeof(list))
            at += snprintf(list + at, sizeof(list) - (size_t)at, "%s%d", k ? ", " : "", r);
        k++;
    }
    if (k == 0)
        snprintf(buf, len, "the other ranks");
    else
        snprintf(buf, len, "%s %s%s (%d of %d)", k == 1 ? "rank" : "ranks", list,
                 k > 8 ? ", ..." : "", k, c->nranks);
}

/* The one message a rank prints when it gives up: the call, the rank, and whom it waited for. */
static ncclResult_t timed_out(const struct task *t, double limit)
{
    const struct op *op = &t->op;
    ncclComm_t c = op->comm;
    char what[160], who[128], why[256], seq[48] = "";

    if (shp_nd_ops[op->kind].family == FAM_COLL || shp_nd_ops[op->kind].family == FAM_P2P)
        shp_nd_describe(what, sizeof(what), op);
    else
        snprintf(what, sizeof(what), "%s", t->name);
    if (shp_nd_ops[op->kind].family == FAM_COLL)
        snprintf(seq, sizeof(seq), " (collective %llu on this comm)", t->seq);
    if (op->kind == OP_SEND) {
        snprintf(why, sizeof(why),
                 "rank %d to receive (%llu of the message's %llu bytes do not fit in the ring "
                 "yet)",
                 op->root, (unsigned long long)(t->total - t->done), (unsigned long long)t->total);
    } else if (op->kind == OP_RECV) {
        if (t->done < MSG_HDR_BYTES)
            snprintf(why, sizeof(why), "rank %d to send (no message from it yet)", op->root);
        else
            snprintf(why, sizeof(why), "rank %d to send the rest (%llu of %llu bytes arrived)",
                     op->root, (unsigned long long)(t->done - MSG_HDR_BYTES),
                     (unsigned long long)t->msg_len);
    } else if (op->kind == OP_INIT || t->joining) {
        ncclComm_t j = t->joining ? t->child : c;

        missing_ranks(who, sizeof(who), j, MISSING_JOIN, 0);
        snprintf(why, sizeof(why), "%s of the new %d-rank communicator to join", who, j->nranks);
    } else if (t->phase == 0) {
        missing_ranks(who, sizeof(who), c, MISSING_DEPARTURE, c->round);
        snprintf(why, sizeof(why), "%s to finish the previous collective", who);
    } else {
        missing_ranks(who, sizeof(who), c, MISSING_ARRIVAL, c->round + 1);
        snprintf(why, sizeof(why), "%s to make this call", who);
    }
    return fail_loud(ncclSystemError,
                     "%s : rank %d of %d%s timed out after %g s waiting for %s; NCCL would hang "
                     "here (SHAPETRACE_DOUBLE_TIMEOUT)",
                     what, c->rank, c->nranks, seq, limit, why);
}

/* After a failure the comms of the unfinished calls are out of step with their peers: they take
 * NCCL's asynchronous error, and so do children already handed out; the others go. */
static void abandon(struct task *t, size_t n, ncclResult_t err)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i].finished)
            continue;
        if (t[i].op.child) { /* handed out at the call: it stays the caller's, in error */
            t[i].op.child->async_error = err;
            t[i].op.child->pending = false;
        } else if (t[i].child) {
            shp_nd_free_comm(t[i].child);
        }
        t[i].child = NULL;
        if (t[i].op.comm->async_error == ncclSuccess)
            t[i].op.comm->async_error = err;
    }
}

/* Advances every task until all are done, sleeping on a futex when none can move. A task that
 * cannot move for SHAPETRACE_DOUBLE_TIMEOUT seconds fails them all. */
static ncclResult_t run_tasks(struct task *t, size_t n)
{
    double limit = timeout_s();
    uint64_t limit_ns = (uint64_t)(limit * 1e9), last = shp_nd_now_ns();
    size_t left = n;

    while (left > 0) {
        struct task *stuck = NULL;
        ncclResult_t err = ncclSuccess;
        bool moved = false;
        size_t nstuck = 0;
        uint64_t now, wait;

        for (size_t i = 0; i < n; i++) {
            if (t[i].finished || !eligible(t, i))
                continue;
            switch (step(&t[i], &err)) {
            case STEP_DONE:
                t[i].finished = true;
                left--;
                moved = true;
                break;
            case STEP_MOVED:
                moved = true;
                break;
            case STEP_BLOCKED:
                stuck = stuck ? stuck : &t[i];
                nstuck++;
                break;
            case STEP_FAILED:
                abandon(t, n, err);
                return err;
            }
        }
        if (moved) {
            last = shp_nd_now_ns();
            continue;
        }
        if (!stuck) {
            err = fail(ncclInternalError, "%s : nothing can run", t[0].name);
            abandon(t, n, err);
            return err;
        }
        now = shp_nd_now_ns();
        if (now - last >= limit_ns) {
            err = timed_out(stuck, limit);
            abandon(t, n, err);
            return err;
        }
        /* With several waits, the other words are polled every millisecond. */
        wait = last + limit_ns - now;
        if (wait > (nstuck > 1 ? 1000000u : 100000000u))
            wait = nstuck > 1 ? 1000000u : 100000000u;
        futex_wait(stuck->word, stuck->word_val, wait);
    }
    return ncclSuccess;
}

ncclResult_t shp_nd_shm_run_one(const struct op *op)
{
    struct task t;
    ncclResult_t r;

    init_task(&t, op);
    r = run_tasks(&t, 1);
    free_task(&t);
    return r;
}

ncclResult_t shp_nd_shm_run(const struct op *calls, size_t n)
{
    struct task *t = calloc(n, sizeof(*t));
    ncclResult_t r;

    if (!t) {
        shp_nd_shm_drop(calls, n, ncclSystemError);
        return no_memory("ncclGroupEnd");
    }
    for (size_t i = 0; i < n; i++)
        init_task(&t[i], &calls[i]);
    r = run_tasks(t, n);
    for (size_t i = 0; i < n; i++)
        free_task(&t[i]);
    free(t);
    return r;
}

void shp_nd_shm_drop(const struct op *calls, size_t n, ncclResult_t why)
{
    for (size_t i = 0; i < n; i++) {
        ncclComm_t made = calls[i].kind == OP_INIT ? calls[i].comm : calls[i].child;

        if (made && made->async_error == ncclSuccess) {
            made->async_error = why != ncclSuccess ? why : ncclInvalidUsage;
            made->pending = false;
        }
        free(calls[i].exclude);
    }
}
