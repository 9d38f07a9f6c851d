/* shapetrace preload: from an intercepted call to its record. Keeps what a record needs and a
 * call does not say: communicator identity and sequence numbers, group depth, which streams are
 * being captured into graphs. Per-op facts live in tables indexed by the op. */
#define _GNU_SOURCE
/* The record check (trace.h) is a loop over a record's words; with a compact record's constant
 * size it unrolls into a few adds only when peeled (44 instructions of a traced graph launch's
 * 270 were the loop's). */
#pragma GCC optimize("peel-loops")
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "include/shapetrace/env.h"
#include "preload/preload.h"
#include "preload/values.h"

/* The call path's own helpers are inlined into each class's entry point (shp_enter_*), so that
 * each is one straight function. */
#define HOT static inline __attribute__((always_inline))

/* ---- per-op tables ---- */

static const unsigned char rec_type_of_class[] = {
    [SHP_CLS_COLL] = SHP_REC_COLL,       [SHP_CLS_P2P] = SHP_REC_P2P,
    [SHP_CLS_GROUP] = SHP_REC_GROUP,     [SHP_CLS_COMM_INIT] = SHP_REC_COMM,
    [SHP_CLS_COMM_SPLIT] = SHP_REC_COMM, [SHP_CLS_COMM_END] = SHP_REC_COMM,
    [SHP_CLS_COPY] = SHP_REC_COPY,       [SHP_CLS_ALLOC] = SHP_REC_ALLOC,
    [SHP_CLS_FREE] = SHP_REC_ALLOC,      [SHP_CLS_CAPTURE] = SHP_REC_GRAPH,
    [SHP_CLS_GRAPH] = SHP_REC_GRAPH,     [SHP_CLS_LAUNCH] = SHP_REC_GRAPH,
};

/* The call list's root and redop facts, as tables here for the record's path. */
#define SHP_X_ROOT(num, lib, cls, name, facts, params, args, desc)                                 \
    [num] = SHP_NCCL_ROOT facts != SHP_ROOT_NONE,
static const unsigned char uses_root[SHP_OP_COUNT] = {SHP_NCCL_CALLS(SHP_X_ROOT)};
#undef SHP_X_ROOT

#define SHP_X_REDOP(num, lib, cls, name, facts, params, args, desc) [num] = SHP_NCCL_REDOP facts,
static const unsigned char uses_redop[SHP_OP_COUNT] = {SHP_NCCL_CALLS(SHP_X_REDOP)};
#undef SHP_X_REDOP

static const unsigned char comm_kind_of_op[SHP_OP_COUNT] = {
    [SHP_OP_ncclCommInitRank] = SHP_COMM_INIT,
    [SHP_OP_ncclCommInitRankConfig] = SHP_COMM_INIT,
    [SHP_OP_ncclCommInitAll] = SHP_COMM_INIT,
    [SHP_OP_ncclCommInitRankScalable] = SHP_COMM_INIT,
    [SHP_OP_ncclCommSplit] = SHP_COMM_SPLIT,
    [SHP_OP_ncclCommShrink] = SHP_COMM_SHRINK,
    [SHP_OP_ncclCommFinalize] = SHP_COMM_FINALIZE,
    [SHP_OP_ncclCommDestroy] = SHP_COMM_DESTROY,
    [SHP_OP_ncclCommAbort] = SHP_COMM_ABORT,
};

static const unsigned char is_capture_begin[SHP_OP_COUNT] = {
    [SHP_OP_cudaStreamBeginCapture] = 1,      [SHP_OP_cudaStreamBeginCapture_ptsz] = 1,
    [SHP_OP_cuStreamBeginCapture_v2] = 1,     [SHP_OP_cuStreamBeginCapture_v2_ptsz] = 1,
    [SHP_OP_cuStreamBeginCaptureToGraph] = 1, [SHP_OP_cuStreamBeginCaptureToGraph_ptsz] = 1,
};

/* The driver's calls (shp_op_lib's SHP_LIB_CUDA), as a table here for the copy's path. */
#define SHP_X_DRIVER(num, lib, cls, name, facts, params, args, desc) [num] = 1,
static const unsigned char is_driver_op[SHP_OP_COUNT] = {SHP_CUDA_CALLS(SHP_X_DRIVER)};
#undef SHP_X_DRIVER

static const unsigned char is_peer_copy[SHP_OP_COUNT] = {
    [SHP_OP_cudaMemcpyPeer] = 1,
    [SHP_OP_cudaMemcpyPeerAsync] = 1,
};

/* ---- the trace file ---- */

/* Open the trace if it is not; a trace that cannot be made switches tracing off. False if
 * there is none. (The objects a stack's frames lie in are written with the stack: stacks.c.) */
static bool trace_open(void)
{
    int rc = shp_writer_open();
    if (__builtin_expect(rc == 0, 1))
        return true;
    if (rc < 0) {
        shp_disable("the trace file could not be created");
        return false;
    }
    shp_values_opened();
    return true;
}

_Atomic bool shp_armed_tried;
static _Atomic int armed_tried_once;

bool shp_armed_slow(void)
{
    /* Dormant and no file yet: make it now, once, so that attach can find this process. */
    if (!shp_ctl_is_local() || atomic_exchange(&armed_tried_once, 1)) {
        atomic_store_explicit(&shp_armed_tried, true, memory_order_relaxed);
        return false;
    }
    int saved = shp_own_enter();
    trace_open();
    shp_own_leave(saved);
    atomic_store_explicit(&shp_armed_tried, true, memory_order_relaxed);
    return __atomic_load_n(&shp_ctl, __ATOMIC_ACQUIRE)[SHP_CTL_ARMED] != 0;
}

/* ---- communicators ---- */

struct comm_state {
    uint64_t id, parent;
    /* What NCCL says of it. A communicator made non-blocking (ncclInProgress) is `pending`
     * until NCCL can say them (comm_learn): -1 until then. */
    _Atomic int rank, nranks, dev;
    _Atomic bool pending;
    uint8_t kind; /* SHP_COMM_* of its creation */
    /* Index of the communicator's record in the header's table (compact records name it), -1
     * if none; valid only in the trace file of generation `gen` (a forked child's is new). */
    _Atomic int cidx;
    uint32_t gen;
    _Atomic uint64_t seq;
    _Atomic uint32_t nsplits;
    /* [2 * nranks]: sends to peer i, then receives from peer i; NULL until the size is known */
    _Atomic(_Atomic uint64_t *) p2p;
};

#define COMM_SLOTS 4096u
static struct {
    _Atomic(void *) key;
    _Atomic(struct comm_state *) st;
} comm_tab[COMM_SLOTS];
static pthread_mutex_t comm_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t local_comm_counter;

static struct comm_state *comm_lookup(const void *handle)
{
    uint64_t h = shp_mix64((uint64_t)(uintptr_t)handle);
    for (uint32_t i = 0; i < COMM_SLOTS; i++) {
        uint32_t s = (uint32_t)(h + i) & (COMM_SLOTS - 1);
        void *k = atomic_load_explicit(&comm_tab[s].key, memory_order_acquire);
        if (k == handle)
            return atomic_load_explicit(&comm_tab[s].st, memory_order_acquire);
        if (!k)
            return NULL;
    }
    return NULL;
}

_Atomic uint32_t shp_comm_gen;
SHP_TLS struct shp_comm_last shp_comm_last;
/* The seq counter the cache names for a communicator that cannot be kept (no state): counted
 * there and read by nobody, so that a cached handle always has a counter (shp_dormant_take). */
static SHP_TLS _Atomic uint64_t no_seq;

static void comm_insert(void *handle, struct comm_state *st)
{
    uint64_t h = shp_mix64((uint64_t)(uintptr_t)handle);
    pthread_mutex_lock(&comm_mu);
    for (uint32_t i = 0; i < COMM_SLOTS; i++) {
        uint32_t s = (uint32_t)(h + i) & (COMM_SLOTS - 1);
        void *k = atomic_load_explicit(&comm_tab[s].key, memory_order_acquire);
        if (k == handle || !k) {
            /* A handle reused after a destroy gets the new state. */
            atomic_store_explicit(&comm_tab[s].st, st, memory_order_release);
            atomic_store_explicit(&comm_tab[s].key, handle, memory_order_release);
            break;
        }
    }
    /* Every thread's cached communicator is looked up again: this handle may be the one. */
    atomic_fetch_add_explicit(&shp_comm_gen, 1, memory_order_release);
    pthread_mutex_unlock(&comm_mu);
}

typedef ncclResult_t (*comm_query_fn)(const ncclComm_t, int *);
typedef ncclResult_t (*async_error_fn)(ncclComm_t, ncclResult_t *);

/* Whether NCCL can tell the communicator's attributes: not while its creation is in progress
 * (ncclInProgress, a non-blocking communicator). ncclCommGetAsyncError only reads a state, where
 * ncclCommUserRank on a communicator in progress is refused with a warning of NCCL's own. */
static bool comm_ready(int slot, void *comm)
{
    async_error_fn f = (async_error_fn)shp_real_aux(slot, SHP_AUX_COMM_GET_ASYNC_ERROR);
    ncclResult_t state = ncclInProgress;
    return comm && (!f || (f((ncclComm_t)comm, &state) == ncclSuccess && state != ncclInProgress));
}

static int comm_query(int slot, enum shp_aux aux, void *comm)
{
    comm_query_fn f = (comm_query_fn)shp_real_aux(slot, aux);
    int v = -1;
    if (!f || !comm || f((const ncclComm_t)comm, &v) != ncclSuccess)
        return -1;
    return v;
}

static struct comm_state *comm_new(uint64_t id, int rank, int nranks, int dev)
{
    /* Communicator creation is rare and slow in NCCL itself; allocating here is fine. */
    struct comm_state *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->id = id;
    st->rank = rank;
    st->nranks = nranks;
    st->dev = dev;
    st->cidx = -1;
    st->kind = SHP_COMM_INIT;
    if (nranks > 0)
        st->p2p = calloc(2 * (size_t)nranks, sizeof(uint64_t));
    return st;
}

static void note_first_rank(int rank)
{
    struct shp_file_header *h = shp_writer_header();
    if (!h || rank < 0)
        return;
    int expect = -1;
    if (__atomic_compare_exchange_n(&h->first_comm_rank, &expect, rank, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED) &&
        shp_cfg.env_rank < 0)
        shp_log_prefix_update(rank);
}

static void fill_ev(struct shp_ev *ev, const struct shp_call *c, uint16_t flags);
SHP_TLS uint32_t shp_group_depth;

/* A communicator creation record's body, every field written (no block clear on this path). */
static void comm_body(struct shp_rec_comm *r, uint64_t id, int rank, int nranks)
{
    r->id = id;
    r->parent = 0;
    r->handle = 0;
    r->rank = rank;
    r->nranks = nranks;
    r->color = 0;
    r->key = 0;
    r->index = 0;
    r->kind = SHP_COMM_INIT;
    r->pad[0] = r->pad[1] = r->pad[2] = 0;
}

/* The communicator's record `rec` is published and completed: from now on its calls may name it
 * by index. */
static void comm_indexed(struct comm_state *st, const void *rec)
{
    if (!st || !rec)
        return;
    st->gen = shp_writer_gen();
    atomic_store_explicit(&st->cidx, shp_writer_comm_index(rec), memory_order_release);
}

/* st's index in the current trace file, -1 if it has none there. */
HOT int comm_index(const struct comm_state *st)
{
    int i = st ? atomic_load_explicit(&st->cidx, memory_order_acquire) : -1;
    return i >= 0 && st->gen == shp_writer_gen() ? i : -1;
}

/* A communicator used before we saw it created (made through a path we do not wrap): give it a
 * process-local identity and say so. */
static struct comm_state *comm_unknown(struct shp_call *c, void *comm)
{
    bool ready = comm_ready(c->slot, comm);
    int rank = ready ? comm_query(c->slot, SHP_AUX_COMM_USER_RANK, comm) : -1;
    int nranks = ready ? comm_query(c->slot, SHP_AUX_COMM_COUNT, comm) : -1;
    int dev = ready ? comm_query(c->slot, SHP_AUX_COMM_CU_DEVICE, comm) : -1;
    uint64_t id = shp_mix64(shp_hash_bytes((uint64_t)getpid(), &comm, sizeof(comm)) ^
                            shp_hash_bytes(0, shp_cfg.host, strlen(shp_cfg.host)));
    struct comm_state *st = comm_new(id, rank, nranks, dev);
    if (!st)
        return NULL;
    st->pending = !ready;
    comm_insert(comm, st);
    struct shp_rec_comm *r = shp_reserve(SHP_REC_COMM, sizeof(*r));
    if (r) {
        fill_ev(&r->ev, c, SHP_EV_COMM_UNKNOWN);
        r->ev.op = SHP_OP_NONE;
        comm_body(r, id, rank, nranks);
        shp_rec_publish(r, SHP_REC_COMM, sizeof(*r));
        shp_rec_complete(&r->ev, 0, dev, (uint64_t)(uintptr_t)comm, rank, nranks, 0);
        comm_indexed(st, r);
    }
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_COMM, "communicator %p was created unseen", comm);
    note_first_rank(rank);
    return st;
}

/* A communicator made non-blocking returned ncclInProgress at its creation, when NCCL could not
 * tell its rank and size yet. At each later call on it, until NCCL can: then a communicator
 * record with the same id says them (SHP_EV_COMM_LEARNED), and its calls name that record. */
static void comm_learn(struct shp_call *c, void *comm, struct comm_state *st)
{
    if (!comm_ready(c->slot, comm))
        return;
    int rank = comm_query(c->slot, SHP_AUX_COMM_USER_RANK, comm);
    int nranks = comm_query(c->slot, SHP_AUX_COMM_COUNT, comm);
    int dev = comm_query(c->slot, SHP_AUX_COMM_CU_DEVICE, comm);
    if (rank < 0 || nranks <= 0)
        return;
    _Atomic uint64_t *p2p = calloc(2 * (size_t)nranks, sizeof(uint64_t));
    pthread_mutex_lock(&comm_mu);
    bool first = atomic_load(&st->pending);
    if (first) {
        st->dev = dev;
        st->rank = rank;
        st->nranks = nranks;
        atomic_store(&st->p2p, p2p);
        atomic_store(&st->pending, false);
    }
    pthread_mutex_unlock(&comm_mu);
    if (!first) {
        free(p2p);
        return;
    }
    struct shp_rec_comm *r = shp_reserve(SHP_REC_COMM, sizeof(*r));
    if (r) {
        fill_ev(&r->ev, c, SHP_EV_COMM_LEARNED);
        r->ev.op = SHP_OP_NONE;
        comm_body(r, st->id, rank, nranks);
        r->parent = st->parent;
        r->kind = st->kind;
        shp_rec_publish(r, SHP_REC_COMM, sizeof(*r));
        shp_rec_complete(&r->ev, 0, dev, (uint64_t)(uintptr_t)comm, rank, nranks, 0);
        comm_indexed(st, r);
    }
    if (st->kind == SHP_COMM_INIT)
        note_first_rank(rank);
}

/* comm_get past the calling thread's cache: the table, else a communicator seen first now; one
 * still in progress is asked again (comm_learn). The cache then holds it as of generation `gen`,
 * unless it is still in progress: its calls look it up until NCCL can say what it is. */
static __attribute__((noinline)) struct comm_state *comm_find(struct shp_call *c, void *comm,
                                                              uint32_t gen)
{
    struct comm_state *st = comm_lookup(comm);
    if (!st || atomic_load_explicit(&st->pending, memory_order_relaxed)) {
        int saved = errno; /* NCCL is asked about it, and a record written */
        if (!st)
            st = comm_unknown(c, comm);
        else
            comm_learn(c, comm, st);
        errno = saved;
    }
    bool pending = st && atomic_load_explicit(&st->pending, memory_order_relaxed);
    shp_comm_last.handle = pending ? NULL : comm;
    shp_comm_last.st = st;
    shp_comm_last.seq = st ? &st->seq : &no_seq;
    shp_comm_last.gen = gen;
    return st;
}

/* The state of communicator handle `comm` (NULL for a NULL handle, or when it cannot be kept).
 * A thread calls one communicator over and over: the last one it named is kept in a
 * thread-local cache, good until any communicator is inserted (shp_comm_gen), which is when a
 * destroyed handle can come back as another communicator. */
static inline struct comm_state *comm_get(struct shp_call *c, void *comm)
{
    if (!comm)
        return NULL;
    uint32_t gen = atomic_load_explicit(&shp_comm_gen, memory_order_acquire);
    if (__builtin_expect(shp_comm_last.handle == comm && shp_comm_last.gen == gen, 1))
        return shp_comm_last.st;
    return comm_find(c, comm, gen);
}

/* The counter of a p2p call's seq: sends to `peer`, or receives from it; NULL for a peer out of
 * the communicator's range, or while its size is not known. */
HOT _Atomic uint64_t *p2p_counter(struct comm_state *st, unsigned op, int peer)
{
    _Atomic uint64_t *p2p = atomic_load_explicit(&st->p2p, memory_order_acquire);
    int n = atomic_load_explicit(&st->nranks, memory_order_relaxed);
    if (!p2p || peer < 0 || peer >= n)
        return NULL;
    return &p2p[(size_t)peer + (op == SHP_OP_ncclRecv ? (size_t)n : 0)];
}

/* The counter a collective's or p2p call's seq comes from: the communicator's, or the one of its
 * peer and direction; NULL when there is none. */
HOT _Atomic uint64_t *seq_counter(struct comm_state *st, unsigned cls, unsigned op, int peer)
{
    if (!st)
        return NULL;
    return cls == SHP_CLS_COLL ? &st->seq : p2p_counter(st, op, peer);
}

/* ---- captures ---- */

/* The captures in progress that this process began, by the stream that began each, with our id
 * (a counter, from 1) and CUDA's (0 when CUDA could not say). */
#define MAX_CAPTURES 256
static struct {
    pthread_mutex_t mu;
    _Atomic int n;
    void *stream[MAX_CAPTURES];
    uint64_t id[MAX_CAPTURES];
    unsigned long long cuda_id[MAX_CAPTURES];
} cap = {.mu = PTHREAD_MUTEX_INITIALIZER};
static _Atomic uint64_t capture_counter;

/* The id of a capture that CUDA says a stream is in but that this process did not begin where
 * the preload saw it: marked, so that it names no graph of ours (its calls execute nothing). */
#define FOREIGN_CAPTURE (1ull << 63)

typedef cudaError_t (*rt_capture_info_fn)(cudaStream_t, enum cudaStreamCaptureStatus *,
                                          unsigned long long *, cudaGraph_t *,
                                          const cudaGraphNode_t **, const cudaGraphEdgeData **,
                                          size_t *);
typedef CUresult (*cu_capture_info_fn)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
                                       const CUgraphNode **, size_t *);
typedef cudaError_t (*error_fn)(void);

/* Whether the op is a per-thread-default-stream form, for which stream 0 is the calling thread's
 * stream rather than the legacy one. */
static bool per_thread_op(unsigned op)
{
    const char *n = shp_op_name(op);
    return strstr(n, "_ptsz") || strstr(n, "_ptds");
}

/* CUDA's id of the capture that the call's stream is in, its own or one it joined by waiting on
 * an event recorded in it (cudaStreamGetCaptureInfo, else the driver's cuStreamGetCaptureInfo;
 * CUDA 13's runtime takes seven arguments and CUDA 12's six, all after the id passed NULL).
 * False when it is in none, or CUDA cannot say. CUDA's last error and errno are left as they
 * were (a call record's path does not keep errno: see enter). */
static bool cuda_capture_id(const struct shp_call *c, void *stream, unsigned long long *id)
{
    bool ptsz = per_thread_op(c->op);
    /* The legacy stream cannot be captured, nor join a capture. */
    if ((!stream && !ptsz) || stream == (void *)cudaStreamLegacy)
        return false;
    int saved = errno;
    bool in = false;
    if (shp_op_lib(c->op) != SHP_LIB_CUDA) {
        rt_capture_info_fn f = (rt_capture_info_fn)shp_real_aux(
            c->slot, ptsz ? SHP_AUX_STREAM_CAPTURE_INFO_PTSZ : SHP_AUX_STREAM_CAPTURE_INFO);
        if (f) {
            error_fn peek = (error_fn)shp_real_aux(c->slot, SHP_AUX_PEEK_ERROR);
            cudaError_t before = peek ? peek() : cudaSuccess;
            enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
            cudaError_t e = f((cudaStream_t)stream, &st, id, NULL, NULL, NULL, NULL);
            if (e != cudaSuccess) {
                error_fn get = (error_fn)shp_real_aux(c->slot, SHP_AUX_GET_ERROR);
                if (get && before == cudaSuccess)
                    get();
            }
            in = e == cudaSuccess && st == cudaStreamCaptureStatusActive;
            goto out;
        }
    }
    cu_capture_info_fn f = (cu_capture_info_fn)shp_real_aux(0, SHP_AUX_CU_STREAM_CAPTURE_INFO);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    CUstream s = stream ? (CUstream)stream : CU_STREAM_PER_THREAD;
    if (f && f(s, &st, &cid, NULL, NULL, NULL) == CUDA_SUCCESS &&
        st == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        *id = cid;
        in = true;
    }
out:
    errno = saved;
    return in;
}

/* capture_of while this process has a capture in progress: first whether the stream began one
 * (a table of our own), then CUDA, for a stream that joined one through an event (torch and vLLM
 * put NCCL on a side stream inside a graph that way). */
static __attribute__((noinline)) uint64_t capture_find(const struct shp_call *c)
{
    uint64_t id = 0;
    pthread_mutex_lock(&cap.mu);
    for (int i = 0; i < cap.n; i++)
        if (cap.stream[i] == c->stream)
            id = cap.id[i];
    pthread_mutex_unlock(&cap.mu);
    unsigned long long cid;
    if (id || !cuda_capture_id(c, c->stream, &cid))
        return id;
    pthread_mutex_lock(&cap.mu);
    for (int i = 0; i < cap.n; i++)
        if (cap.cuda_id[i] && cap.cuda_id[i] == cid)
            id = cap.id[i];
    pthread_mutex_unlock(&cap.mu);
    return id ? id : FOREIGN_CAPTURE | cid;
}

/* The capture id of the call's stream, 0 when it is not captured. Only while this process has a
 * capture in progress is anything asked (capture_find). */
HOT uint64_t capture_of(const struct shp_call *c)
{
    if (__builtin_expect(atomic_load_explicit(&cap.n, memory_order_acquire) == 0, 1))
        return 0;
    return capture_find(c);
}

/* stream began capture `id` (id 0: its capture ended). */
static void capture_set(const struct shp_call *c, void *stream, uint64_t id)
{
    unsigned long long cid = 0;
    if (id && !cuda_capture_id(c, stream, &cid))
        cid = 0;
    pthread_mutex_lock(&cap.mu);
    int n = atomic_load(&cap.n);
    for (int i = 0; i < n; i++) {
        if (cap.stream[i] != stream)
            continue;
        if (id) {
            cap.id[i] = id;
            cap.cuda_id[i] = cid;
        } else {
            cap.stream[i] = cap.stream[n - 1];
            cap.id[i] = cap.id[n - 1];
            cap.cuda_id[i] = cap.cuda_id[n - 1];
            atomic_store(&cap.n, n - 1);
        }
        pthread_mutex_unlock(&cap.mu);
        return;
    }
    if (id && n < MAX_CAPTURES) {
        cap.stream[n] = stream;
        cap.id[n] = id;
        cap.cuda_id[n] = cid;
        atomic_store(&cap.n, n + 1);
    }
    pthread_mutex_unlock(&cap.mu);
}

/* ---- copies ---- */

typedef cudaError_t (*attrs_fn)(struct cudaPointerAttributes *, const void *);
typedef cudaError_t (*get_device_fn)(int *);

static bool is_device_ptr(int slot, const void *p)
{
    attrs_fn attrs = (attrs_fn)shp_real_aux(slot, SHP_AUX_POINTER_ATTRIBUTES);
    if (!attrs)
        return false;
    error_fn peek = (error_fn)shp_real_aux(slot, SHP_AUX_PEEK_ERROR);
    cudaError_t before = peek ? peek() : cudaSuccess;
    struct cudaPointerAttributes a;
    a.type = cudaMemoryTypeUnregistered; /* the one field read; a success fills it */
    cudaError_t e = attrs(&a, p);
    if (e != cudaSuccess) {
        /* Leave CUDA's last error as the application had it. */
        error_fn get = (error_fn)shp_real_aux(slot, SHP_AUX_GET_ERROR);
        if (get && before == cudaSuccess)
            get();
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

typedef CUresult (*cu_attr_fn)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*cu_ctx_device_fn)(CUdevice *);

/* The driver's answer, for copies seen at the driver level (a static runtime has no cudart for
 * us to ask). Host memory the driver does not know is an error: host. */
static bool cu_is_device_ptr(const void *p)
{
    cu_attr_fn attr = (cu_attr_fn)shp_real_aux(0, SHP_AUX_CU_POINTER_ATTRIBUTE);
    unsigned type = 0;
    if (!attr || attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p))
        return false;
    return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

static int resolve_kind(const struct shp_call *c, const void *dst, const void *src)
{
    bool drv = shp_op_lib(c->op) == SHP_LIB_CUDA;
    bool d = drv ? cu_is_device_ptr(dst) : is_device_ptr(c->slot, dst);
    bool s = drv ? cu_is_device_ptr(src) : is_device_ptr(c->slot, src);
    return s ? (d ? SHP_KIND_D2D : SHP_KIND_D2H) : (d ? SHP_KIND_H2D : SHP_KIND_H2H);
}

/* The current device; rt: c is known to be a runtime call (no test of the driver's table). */
HOT int device_of(const struct shp_call *c, bool rt)
{
    int slot = c->slot;
    if (!rt && is_driver_op[c->op]) {
        cu_ctx_device_fn g = (cu_ctx_device_fn)shp_real_aux(0, SHP_AUX_CU_CTX_GET_DEVICE);
        CUdevice d = -1;
        return g && g(&d) == CUDA_SUCCESS ? (int)d : -1;
    }
    get_device_fn f = (get_device_fn)shp_real_aux(slot, SHP_AUX_GET_DEVICE);
    int dev = -1;
    if (!f || f(&dev) != cudaSuccess)
        return -1;
    return dev;
}

/* ---- records ---- */

static void fill_ev(struct shp_ev *ev, const struct shp_call *c, uint16_t flags)
{
    ev->t = c->t0;
    ev->tid = shp_tid();
    ev->op = (uint16_t)c->op;
    ev->flags = flags;
    ev->stack = shp_stack_here();
    if (shp_cfg.stacks != SHP_STACKS_NONE && !ev->stack)
        ev->flags |= SHP_EV_DROPPED_STACK;
    ev->group = shp_group_depth;
    ev->result = 0;
    ev->device = -1;
    ev->dur = SHP_DUR_PENDING;
    ev->out = 0;
    ev->aux[0] = ev->aux[1] = -1;
}

/* What a call's record says before the record type is chosen: compact or full depends on it. */
struct pre {
    uint32_t stack;
    uint16_t flags;
    uint64_t graph;        /* capture id of the stream, 0 if none */
    struct comm_state *st; /* collectives, p2p */
    uint64_t seq;          /* collectives, p2p */
    int kind, device;      /* copies */
};

HOT void pre_common(struct pre *p, const struct shp_call *c)
{
    p->stack = shp_cfg.stacks != SHP_STACKS_NONE ? shp_stack_here() : 0;
    p->flags = shp_cfg.stacks != SHP_STACKS_NONE && !p->stack ? SHP_EV_DROPPED_STACK : 0;
    p->graph = capture_of(c);
    if (p->graph)
        p->flags |= SHP_EV_CAPTURED;
}

/* A compact record is built as its words (w[0], its first, left to the publication): the check
 * is computed from them where they are, in registers, and each is stored once, whole. Filled
 * field by field, the check read back the word that holds tid, op, flags and group, which three
 * narrower stores had just made: such a load waits until those stores reach the cache. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "head_words builds the head's bytes");
_Static_assert(offsetof(struct shp_head, tid) == 16 && offsetof(struct shp_head, op) == 20 &&
                   offsetof(struct shp_head, flags) == 21 && offsetof(struct shp_head, group) == 22,
               "head_words' layout");

/* The words of struct shp_head after its record header: t, (tid, op, flags, group), done. */
HOT void head_words(uint64_t *w, const struct shp_call *c, const struct pre *p, uint32_t group)
{
    w[1] = c->t0;
    w[2] = (uint64_t)shp_tid() | (uint64_t)(uint8_t)c->op << 32 |
           (uint64_t)(uint8_t)p->flags << 40 | (uint64_t)(uint16_t)group << 48;
    w[3] = SHP_DONE_PENDING;
}

/* Stores the record of `size` bytes whose words are w at rec (8-byte aligned), and publishes it
 * (as shp_rec_publish). Each word is one 8-byte store: copied as memory, the words went through
 * the stack and back in 16-byte loads that again spanned two stores. */
HOT void publish_words(void *rec, const uint64_t *w, unsigned type, size_t size)
{
    struct shp_rec *r = (struct shp_rec *)rec;
    uint32_t check = shp_rec_check(w, type, size);
#pragma GCC unroll 16
    for (size_t i = 1; i < size / 8; i++)
        __atomic_store_n((uint64_t *)rec + i, w[i], __ATOMIC_RELAXED);
    r->check = check;
    __atomic_store_n(&r->word, SHP_REC_WORD(type, size), __ATOMIC_RELEASE);
}

/* True if every one of n values fits the 48 bits of a compact record's word. */
HOT bool fit48(const uint64_t *v, int n)
{
    uint64_t any = 0;
    for (int i = 0; i < n; i++)
        any |= v[i];
    return any < SHP_P48_LIMIT;
}

HOT bool fit16(int v)
{
    return v >= INT16_MIN && v <= INT16_MAX;
}

static uint64_t comm_id_of_uids(const void *uid, int nuid)
{
    uint64_t h = SHP_FNV_OFFSET;
    if (uid && nuid > 0)
        h = shp_hash_bytes(h, uid, (size_t)nuid * sizeof(ncclUniqueId));
    return shp_mix64(h);
}

static void fill_comm(struct shp_rec_comm *r, struct shp_call *c)
{
    r->kind = comm_kind_of_op[c->op];
    r->rank = -1;
    r->nranks = -1;
    r->color = 0;
    r->key = 0;
    if (c->cls == SHP_CLS_COMM_INIT) {
        c->id = c->op == SHP_OP_ncclCommInitAll
                    ? shp_mix64(atomic_fetch_add(&local_comm_counter, 1) ^ (uint64_t)getpid() ^
                                shp_hash_bytes(0, shp_cfg.host, strlen(shp_cfg.host)))
                    : comm_id_of_uids(c->uid, c->nuid);
        r->rank = c->rank;
        r->nranks = c->nranks;
    } else if (c->cls == SHP_CLS_COMM_SPLIT) {
        struct comm_state *parent = comm_get(c, c->comm);
        uint64_t pid = parent ? parent->id : 0;
        c->index = parent ? atomic_fetch_add(&parent->nsplits, 1) : 0;
        c->id = shp_comm_child_id(pid, c->index, c->color);
        r->parent = pid;
        r->color = c->color;
        r->key = c->key;
        r->index = c->index;
    } else {
        struct comm_state *st = c->comm ? comm_lookup(c->comm) : NULL;
        if (st && atomic_load_explicit(&st->pending, memory_order_relaxed))
            comm_learn(c, c->comm, st);
        c->id = st ? st->id : 0;
        r->handle = (uint64_t)(uintptr_t)c->comm;
        if (st) {
            r->rank = st->rank;
            r->nranks = st->nranks;
        }
    }
    r->id = c->id;
}

HOT void pre_coll(struct pre *p, struct shp_call *c, unsigned cls)
{
    struct comm_state *st = comm_get(c, c->comm);
    c->cstate = st;
    p->st = st;
    /* Counted whether or not the record can be written: ranks keep lining up after a drop. */
    _Atomic uint64_t *n = seq_counter(st, cls, c->op, c->peer);
    p->seq = n ? shp_seq_next(n) : UINT64_MAX;
    c->seq = p->seq;
}

/* NCCL refused the call before enqueuing it (an argument or the communicator's state): it took
 * no place among the calls NCCL matches, so its seq goes back, and the rank's next call has it
 * (unless another thread took the next one meanwhile, which NCCL forbids on one communicator). */
static void give_back_seq(struct shp_call *c)
{
    _Atomic uint64_t *n =
        c->cstate && c->seq != UINT64_MAX ? seq_counter(c->cstate, c->cls, c->op, c->peer) : NULL;
    uint64_t next = c->seq + 1;
    if (n)
        atomic_compare_exchange_strong_explicit(n, &next, c->seq, memory_order_relaxed,
                                                memory_order_relaxed);
}

static bool refused(int result)
{
    return result == ncclInvalidArgument || result == ncclInvalidUsage;
}

static void fill_coll(struct shp_rec_coll *r, const struct shp_call *c, const struct pre *p)
{
    struct comm_state *st = p->st;
    r->comm = st ? st->id : 0;
    r->seq = p->seq;
    r->count = c->count;
    r->sendbuf = (uint64_t)(uintptr_t)c->a;
    r->recvbuf = (uint64_t)(uintptr_t)c->b;
    r->stream = (uint64_t)(uintptr_t)c->stream;
    r->graph = p->graph;
    r->root = uses_root[c->op] ? c->root : -1;
    r->peer = c->cls == SHP_CLS_P2P ? c->peer : -1;
    r->comm_rank = st ? st->rank : -1;
    r->nranks = st ? st->nranks : -1;
    r->dtype = (uint8_t)c->dtype;
    r->redop = uses_redop[c->op] ? (uint8_t)c->redop : SHP_REDOP_NONE;
}

/* The compact record of a collective or p2p call, if it can take one; false: write the full. */
HOT bool coll_compact(struct shp_call *c, const struct pre *p, unsigned cls)
{
    int idx = comm_index(p->st);
    int rp = cls == SHP_CLS_P2P ? c->peer : uses_root[c->op] ? c->root : -1;
    uint64_t v[] = {c->count, (uint64_t)(uintptr_t)c->a, (uint64_t)(uintptr_t)c->b,
                    (uint64_t)(uintptr_t)c->stream, p->seq};
    uint32_t group = shp_group_depth;
    if (idx < 0 || p->graph || group > UINT16_MAX || !fit16(rp) || !fit48(v, 5))
        return false;
    unsigned type = cls == SHP_CLS_P2P ? SHP_REC_P2P_C : SHP_REC_COLL_C;
    struct shp_rec_coll_c *r = shp_reserve_call(type, sizeof(*r));
    if (r) {
        unsigned redop = uses_redop[c->op] ? (uint8_t)c->redop : SHP_REDOP_NONE;
        uint64_t w[sizeof(*r) / 8];
        head_words(w, c, p, group);
        w[4] = v[0] | (uint64_t)(uint8_t)c->dtype << 48 | (uint64_t)redop << 56; /* count_dt */
        w[5] = SHP_P48(v[1], idx);                                               /* send_comm */
        w[6] = SHP_P48(v[2], rp);                                                /* recv_rp */
        w[7] = SHP_P48(v[3], p->stack);                                          /* stream_slo */
        w[8] = SHP_P48(v[4], p->stack >> 16);                                    /* seq_shi */
        /* Each type a constant, so that the check folds into a few adds. */
        if (type == SHP_REC_P2P_C)
            publish_words(r, w, SHP_REC_P2P_C, sizeof(*r));
        else
            publish_words(r, w, SHP_REC_COLL_C, sizeof(*r));
        c->head = &r->h;
    }
    return true;
}

HOT void pre_copy(struct pre *p, const struct shp_call *c)
{
    p->kind = c->kind;
    if (p->kind == cudaMemcpyDefault) {
        int saved = errno; /* the library is asked */
        p->kind = resolve_kind(c, c->b, c->a);
        errno = saved;
        p->flags |= SHP_EV_KIND_DEFAULT;
    }
}

static void fill_copy(struct shp_rec_copy *r, const struct shp_call *c, const struct pre *p)
{
    r->dst = (uint64_t)(uintptr_t)c->b;
    r->src = (uint64_t)(uintptr_t)c->a;
    r->width = c->width;
    r->height = c->height;
    r->spitch = c->spitch;
    r->dpitch = c->dpitch;
    r->stream = (uint64_t)(uintptr_t)c->stream;
    r->graph = p->graph;
    r->src_dev = is_peer_copy[c->op] ? c->src_dev : -1;
    r->dst_dev = is_peer_copy[c->op] ? c->dst_dev : -1;
    r->kind = (uint8_t)p->kind;
}

/* The device at entry, for a compact copy record: a copy does not change it, and so the
 * completion stays one store. */
HOT bool entry_device(const struct shp_call *c, int *dev, bool rt)
{
    int saved = errno; /* the library is asked */
    *dev = device_of(c, rt);
    errno = saved;
    return fit16(*dev);
}

/* What a compact copy record holds of a row: v is copy_compact's, dev the device at entry. */
HOT void row_words(uint64_t *w, const struct shp_call *c, const struct pre *p, uint32_t group,
                   const uint64_t *v, int dev)
{
    head_words(w, c, p, group);
    w[4] = SHP_P48(v[0], dev);              /* dst_dev */
    w[5] = SHP_P48(v[1], (uint8_t)p->kind); /* src_kind */
    w[6] = SHP_P48(v[2], p->stack);         /* stream_slo */
    w[7] = SHP_P48(v[3], p->stack >> 16);   /* bytes_shi */
}

/* The compact record of a 2-D copy, for a copy that copy_compact left (more than one row, or
 * pitches of their own): tried only then, off the path of the 1-D copies; false for any other
 * copy, which gets its full record. */
static __attribute__((noinline)) bool copy2d_compact(struct shp_call *c, const struct pre *p)
{
    uint64_t v[] = {(uint64_t)(uintptr_t)c->b, (uint64_t)(uintptr_t)c->a,
                    (uint64_t)(uintptr_t)c->stream, c->width};
    uint64_t pitches[] = {c->spitch, c->dpitch};
    int dev;
    uint32_t group = shp_group_depth;
    if (is_peer_copy[c->op] || p->graph || group > UINT16_MAX || !fit48(v, 4) ||
        c->height > UINT32_MAX || !fit48(pitches, 2) ||
        (c->height == 1 && c->spitch == c->width && c->dpitch == c->width) ||
        !entry_device(c, &dev, false))
        return false;
    struct shp_rec_copy2d_c *r = shp_reserve_call(SHP_REC_COPY2D_C, sizeof(*r));
    if (r) {
        uint64_t w[sizeof(*r) / 8];
        row_words(w, c, p, group, v, dev);
        w[8] = SHP_P48(pitches[0], c->height);       /* spitch_hlo */
        w[9] = SHP_P48(pitches[1], c->height >> 16); /* dpitch_hhi */
        publish_words(r, w, SHP_REC_COPY2D_C, sizeof(*r));
        c->head = &r->row.h;
    }
    return true;
}

HOT bool copy_compact(struct shp_call *c, const struct pre *p, bool rt)
{
    if (is_peer_copy[c->op] || c->height != 1 || c->spitch != c->width || c->dpitch != c->width ||
        p->graph || shp_group_depth > UINT16_MAX ||
        !fit48((const uint64_t[]){(uint64_t)(uintptr_t)c->b, (uint64_t)(uintptr_t)c->a,
                                  (uint64_t)(uintptr_t)c->stream, c->width},
               4))
        return false;
    int dev;
    if (!entry_device(c, &dev, rt))
        return false;
    /* Read again after the device's call (the runtime's, which changes none of them): kept in
     * registers across it, they were saved and restored around it and around errno's. */
    uint64_t v[] = {(uint64_t)(uintptr_t)c->b, (uint64_t)(uintptr_t)c->a,
                    (uint64_t)(uintptr_t)c->stream, c->width};
    uint32_t group = shp_group_depth;
    struct shp_rec_copy_c *r = shp_reserve_call(SHP_REC_COPY_C, sizeof(*r));
    if (r) {
        uint64_t w[sizeof(*r) / 8];
        row_words(w, c, p, group, v, dev);
        publish_words(r, w, SHP_REC_COPY_C, sizeof(*r));
        c->head = &r->h;
    }
    return true;
}

HOT bool launch_compact(struct shp_call *c, const struct pre *p)
{
    /* A launch's description names its exec and stream only (calls.h). */
    uint64_t v[] = {(uint64_t)(uintptr_t)c->stream, (uint64_t)(uintptr_t)c->exec};
    uint32_t group = shp_group_depth;
    if (group > UINT16_MAX || !fit48(v, 2))
        return false;
    struct shp_rec_launch_c *r = shp_reserve_call(SHP_REC_LAUNCH_C, sizeof(*r));
    if (r) {
        uint64_t w[sizeof(*r) / 8];
        head_words(w, c, p, group);
        w[4] = SHP_P48(v[0], p->stack);       /* stream_slo */
        w[5] = SHP_P48(v[1], p->stack >> 16); /* exec_shi */
        publish_words(r, w, SHP_REC_LAUNCH_C, sizeof(*r));
        c->head = &r->h;
    }
    return true;
}

_Static_assert(SHP_OP_COUNT <= 256, "compact records store the op in 8 bits");

/* The compact record of a call of the frequent kinds (copies, collectives, p2p, launches), with
 * what its record says before the type is chosen left in *p. False when the call needs its full
 * record (a capture, a value that does not fit, a communicator without an index), which the
 * caller then writes with *p. cls is c->cls, a constant in each entry point (no load, and the
 * tests on it folded). */
HOT bool enter_compact(struct shp_call *c, unsigned cls, unsigned type, struct pre *p, bool rt)
{
    pre_common(p, c);
    if (type == SHP_REC_COPY) {
        pre_copy(p, c);
        return copy_compact(c, p, rt);
    }
    if (type != SHP_REC_GRAPH) {
        pre_coll(p, c, cls);
        return coll_compact(c, p, cls);
    }
    return launch_compact(c, p);
}

/* The full record of the call (or a 2-D copy's compact one): p is enter_compact's for a call of
 * the frequent kinds (`call`), zero otherwise. */
static void enter_full(struct shp_call *c, unsigned type, const struct pre *p, bool call)
{
    if (type == SHP_REC_COPY && call && copy2d_compact(c, p))
        return;
    size_t size = shp_rec_min_size(type);
    struct shp_ev *ev = shp_reserve(type, size);
    if (!ev)
        return;
    /* The head is filled below; the body's fields are too, but not its padding. */
    memset(ev + 1, 0, size - sizeof(*ev));
    if (call) {
        ev->t = c->t0;
        ev->tid = shp_tid();
        ev->op = (uint16_t)c->op;
        ev->flags = p->flags;
        ev->stack = p->stack;
        ev->group = shp_group_depth;
        ev->result = 0;
        ev->device = -1;
        ev->dur = SHP_DUR_PENDING;
        ev->out = 0;
        ev->aux[0] = ev->aux[1] = -1;
    } else {
        fill_ev(ev, c, 0);
    }
    switch (type) {
    case SHP_REC_COMM:
        fill_comm((struct shp_rec_comm *)ev, c);
        break;
    case SHP_REC_COLL:
    case SHP_REC_P2P:
        fill_coll((struct shp_rec_coll *)ev, c, p);
        break;
    case SHP_REC_COPY:
        fill_copy((struct shp_rec_copy *)ev, c, p);
        break;
    case SHP_REC_ALLOC: {
        struct shp_rec_alloc *r = (struct shp_rec_alloc *)ev;
        r->ptr = (uint64_t)(uintptr_t)c->a;
        r->size = c->size;
        r->stream = (uint64_t)(uintptr_t)c->stream;
        r->flags = c->flags;
        r->kind = (uint8_t)c->kind;
        break;
    }
    case SHP_REC_GRAPH: {
        struct shp_rec_graph *r = (struct shp_rec_graph *)ev;
        r->stream = (uint64_t)(uintptr_t)c->stream;
        r->graph = (uint64_t)(uintptr_t)c->graph;
        r->exec = (uint64_t)(uintptr_t)c->exec;
        r->flags = c->flags;
        if (c->cls == SHP_CLS_CAPTURE) {
            c->id =
                is_capture_begin[c->op] ? atomic_fetch_add(&capture_counter, 1) + 1 : capture_of(c);
            r->capture = c->id;
        }
        break;
    }
    default:
        break;
    }
    shp_rec_publish(ev, type, size);
    c->ev = ev;
}

/* Whether communicator record r says this id, handle, rank and size, as a reader takes them. */
static bool comm_record_says(const struct shp_rec_comm *r, uint64_t id, const void *handle,
                             int rank, int nranks)
{
    return r->id == id && shp_comm_rec_handle(r) == (uint64_t)(uintptr_t)handle &&
           shp_comm_rec_rank(r) == rank && shp_comm_rec_nranks(r) == nranks;
}

/* The compact record of a communicator's end, when the record its index names says what the
 * full end record would (its id, handle, rank and size, as fill_comm takes them); false for the
 * full record. A communicator still in progress is asked first, as fill_comm does. */
static bool comm_end_compact(struct shp_call *c, uint32_t stack, uint16_t flags)
{
    struct comm_state *st = comm_lookup(c->comm);
    if (!st || shp_group_depth > UINT16_MAX)
        return false;
    if (atomic_load_explicit(&st->pending, memory_order_relaxed))
        comm_learn(c, c->comm, st);
    int idx = comm_index(st);
    const struct shp_rec_comm *cr = idx >= 0 ? shp_writer_comm_record((unsigned)idx) : NULL;
    if (!cr || !comm_record_says(cr, st->id, c->comm, st->rank, st->nranks))
        return false;
    c->id = st->id;
    struct shp_rec_comm_end_c *r = shp_reserve(SHP_REC_COMM_END_C, sizeof(*r));
    if (r) {
        uint64_t w[sizeof(*r) / 8];
        head_words(w, c, &(struct pre){.flags = flags}, shp_group_depth);
        w[4] = stack | (uint64_t)(uint16_t)idx << 32 | (uint64_t)comm_kind_of_op[c->op] << 48;
        publish_words(r, w, SHP_REC_COMM_END_C, sizeof(*r));
        c->head = &r->h;
    }
    return true;
}

/* The compact record of an allocation or a free with no stream and no flags (SHP_REC_ALLOC_C);
 * false for the full record. A free's is completed as every compact record is; an
 * allocation's by shp_leave_full, which stores its pointer before `done`. */
static bool alloc_compact(struct shp_call *c, uint32_t stack, uint16_t flags)
{
    bool is_free = c->cls == SHP_CLS_FREE;
    uint64_t size = is_free ? 0 : c->size;
    int dev = -1;
    if (c->stream || c->flags || shp_group_depth > UINT16_MAX || !fit48(&size, 1) ||
        (!is_free && c->kind == SHP_ALLOC_DEVICE && !entry_device(c, &dev, false)))
        return false;
    struct shp_rec_alloc_c *r = shp_reserve(SHP_REC_ALLOC_C, sizeof(*r));
    if (r) {
        uint64_t w[sizeof(*r) / 8];
        head_words(w, c, &(struct pre){.flags = flags}, shp_group_depth);
        w[4] = is_free ? (uint64_t)(uintptr_t)c->a : 0;  /* ptr */
        w[5] = SHP_P48(size, dev);                       /* size_dev */
        w[6] = stack | (uint64_t)(uint8_t)c->kind << 32; /* stack, kind */
        publish_words(r, w, SHP_REC_ALLOC_C, sizeof(*r));
        if (is_free)
            c->head = &r->h;
        else
            c->late = &r->h;
    }
    return true;
}

/* The compact record of a call of the rarer kinds that has one (a communicator's end, an
 * allocation, a free); false when it needs its full record. */
static bool enter_rare_compact(struct shp_call *c, unsigned type)
{
    if (!(type == SHP_REC_ALLOC || (c->cls == SHP_CLS_COMM_END && c->comm)))
        return false;
    uint32_t stack = shp_stack_here();
    uint16_t flags = shp_cfg.stacks != SHP_STACKS_NONE && !stack ? SHP_EV_DROPPED_STACK : 0;
    return type == SHP_REC_ALLOC ? alloc_compact(c, stack, flags)
                                 : comm_end_compact(c, stack, flags);
}

/* What enter leaves to the rarer records: a rare call's, or the full record of a frequent one
 * that took no compact record. Out of line, with p (enter_compact's, or zero) by value: p's
 * address taken on enter's path kept it in memory there, written field by field and read
 * back. */
static __attribute__((noinline)) void enter_rest(struct shp_call *c, unsigned type, struct pre p,
                                                 bool call)
{
    int saved = errno;
    if (call || !enter_rare_compact(c, type))
        enter_full(c, type, &p, call);
    errno = saved;
}

/* shp_enter for a call of class `cls` (a constant in each entry point below, so that each is
 * its own straight path); rt: a call of the CUDA runtime's (a constant too). */
HOT void enter(struct shp_call *c, unsigned cls, bool rt)
{
    shp_guard++;
    /* It keeps errno itself, as the path below requires. */
    if (__builtin_expect(shp_values_mask != 0, 0))
        shp_values_before(atomic_load_explicit(&cap.n, memory_order_relaxed));
    c->t0 = shp_clock_now();
    c->ev = NULL;
    c->head = NULL;
    c->cstate = NULL;
    unsigned type = rec_type_of_class[cls];
    bool call = type == SHP_REC_COLL || type == SHP_REC_P2P || type == SHP_REC_COPY ||
                cls == SHP_CLS_LAUNCH;
    struct pre p; /* enter_compact's: each field its record type reads (zero for the others) */
    if (__builtin_expect(!call || !atomic_load_explicit(&shp_wh.fast_end, memory_order_relaxed),
                         0)) {
        c->late = NULL; /* read by shp_leave_full for allocations, which always come here */
        int saved = errno;
        /* ncclCommInitAll makes several communicators: its records are written when it
         * returns. */
        bool open = c->op != SHP_OP_ncclCommInitAll && trace_open();
        errno = saved;
        if (!open)
            goto out;
    }
    /* A call of the frequent kinds: errno is not saved and restored around its compact record,
     * because whatever may set it on this path keeps it itself (the stack walk, a communicator
     * seen first, a copy's device and kind, the capture CUDA is asked about, the file's growth,
     * the values hooks), and the record touches it nowhere else. A hook added to this path keeps
     * errno the same way. */
    if (call && enter_compact(c, cls, type, &p, rt))
        goto out;
    enter_rest(c, type, call ? p : (struct pre){0}, call);
out:; /* the guard stays held: the wrapper calls the real function under it (shp_enter) */
}

void shp_enter(struct shp_call *c)
{
    enter(c, c->cls, false);
}

void shp_enter_launch(struct shp_call *c)
{
    enter(c, SHP_CLS_LAUNCH, false);
}

void shp_enter_copy(struct shp_call *c)
{
    enter(c, SHP_CLS_COPY, false);
}

void shp_enter_copy_rt(struct shp_call *c)
{
    enter(c, SHP_CLS_COPY, true);
}

void shp_enter_coll(struct shp_call *c)
{
    enter(c, SHP_CLS_COLL, false);
}

void shp_enter_p2p(struct shp_call *c)
{
    enter(c, SHP_CLS_P2P, false);
}

static void init_all_done(struct shp_call *c, int result)
{
    if (result != ncclSuccess || !c->out || !trace_open())
        return;
    uint64_t id = shp_mix64(atomic_fetch_add(&local_comm_counter, 1) ^ ((uint64_t)getpid() << 20) ^
                            shp_hash_bytes(0, shp_cfg.host, strlen(shp_cfg.host)));
    for (int i = 0; i < c->nranks; i++) {
        void *comm = c->out[i];
        int dev = c->devlist ? c->devlist[i] : i;
        struct comm_state *st = comm_new(id, i, c->nranks, dev);
        if (st)
            comm_insert(comm, st);
        struct shp_rec_comm *r = shp_reserve(SHP_REC_COMM, sizeof(*r));
        if (!r)
            continue;
        fill_ev(&r->ev, c, 0);
        comm_body(r, id, i, c->nranks);
        shp_rec_publish(r, SHP_REC_COMM, sizeof(*r));
        shp_rec_complete(&r->ev, result, dev, (uint64_t)(uintptr_t)comm, i, c->nranks,
                         shp_clock_now() - c->t0);
        comm_indexed(st, r);
    }
    note_first_rank(0);
}

void shp_leave_full(struct shp_call *c, int result)
{
    int saved = shp_own_enter();
    uint64_t dur = shp_clock_now() - c->t0;
    int device = -1;
    uint64_t out = 0;
    int aux0 = -1, aux1 = -1;
    bool ok = result == 0;

    switch (c->cls) {
    case SHP_CLS_GROUP:
        if (c->op == SHP_OP_ncclGroupStart && ok)
            shp_group_depth++;
        else if (c->op == SHP_OP_ncclGroupEnd && shp_group_depth > 0)
            shp_group_depth--;
        break;
    case SHP_CLS_COLL:
    case SHP_CLS_P2P:
        if (c->cstate)
            device = ((struct comm_state *)c->cstate)->dev;
        if (refused(result))
            give_back_seq(c);
        break;
    case SHP_CLS_COPY:
        if (c->ev)
            device = device_of(c, false);
        break;
    case SHP_CLS_ALLOC:
        if (ok && c->out)
            out = (uint64_t)(uintptr_t)*c->out;
        /* (a compact record took it at entry) */
        device = c->kind == SHP_ALLOC_DEVICE && !c->late ? device_of(c, false) : -1;
        break;
    case SHP_CLS_COMM_INIT:
    case SHP_CLS_COMM_SPLIT: {
        if (c->op == SHP_OP_ncclCommInitAll) {
            init_all_done(c, result);
            break;
        }
        /* ncclInProgress: a non-blocking communicator, usable once it finishes. */
        if ((result != ncclSuccess && result != ncclInProgress) || !c->out || !*c->out)
            break;
        void *comm = *c->out;
        out = (uint64_t)(uintptr_t)comm;
        /* Still being made (ncclInProgress): NCCL cannot tell its rank and size yet, and asking
         * would only get a warning of NCCL's; they are learned at a later call (comm_learn). */
        bool pending = result == ncclInProgress || !comm_ready(c->slot, comm);
        if (!pending) {
            aux0 = comm_query(c->slot, SHP_AUX_COMM_USER_RANK, comm);
            aux1 = comm_query(c->slot, SHP_AUX_COMM_COUNT, comm);
            device = comm_query(c->slot, SHP_AUX_COMM_CU_DEVICE, comm);
        }
        int rank = aux0 >= 0 ? aux0 : c->cls == SHP_CLS_COMM_INIT ? c->rank : -1;
        int nranks = aux1 > 0 ? aux1 : c->cls == SHP_CLS_COMM_INIT ? c->nranks : -1;
        struct comm_state *st = comm_new(c->id, rank, nranks, device);
        if (st) {
            st->kind = comm_kind_of_op[c->op];
            struct comm_state *parent =
                c->cls == SHP_CLS_COMM_SPLIT && c->comm ? comm_lookup(c->comm) : NULL;
            st->parent = parent ? parent->id : 0;
            st->pending = pending;
            comm_insert(comm, st);
        }
        c->cstate = st;
        if (c->cls == SHP_CLS_COMM_INIT)
            note_first_rank(rank);
        break;
    }
    case SHP_CLS_CAPTURE:
        if (is_capture_begin[c->op]) {
            if (ok)
                capture_set(c, c->stream, c->id);
        } else {
            capture_set(c, c->stream, 0);
            if (ok && c->out)
                out = (uint64_t)(uintptr_t)*c->out;
        }
        break;
    case SHP_CLS_GRAPH:
    case SHP_CLS_LAUNCH:
        if (ok && c->out)
            out = (uint64_t)(uintptr_t)*c->out;
        break;
    default:
        break;
    }
    if (c->ev) {
        shp_rec_complete(c->ev, result, device, out, aux0, aux1, dur);
    } else if (c->cls == SHP_CLS_ALLOC && c->late) {
        /* A compact allocation (SHP_REC_ALLOC_C): its pointer first, then `done` with release
         * order. */
        __atomic_store_n(&((struct shp_rec_alloc_c *)(void *)c->late)->ptr, out, __ATOMIC_RELAXED);
        shp_rec_done(c->late, result, dur);
    }
    if (c->cls == SHP_CLS_COMM_INIT || c->cls == SHP_CLS_COMM_SPLIT)
        comm_indexed(c->cstate, c->ev);
    if (__builtin_expect(shp_values_mask != 0, 0))
        shp_values_after(c, result, shp_group_depth,
                         atomic_load_explicit(&cap.n, memory_order_relaxed));
    shp_own_leave(saved);
}

void shp_leave_more(struct shp_call *c, int result)
{
    /* Nothing here may change errno unkept: the compact path saves none (see enter). The seq's
     * return is a compare-and-swap; the values hook keeps errno itself. */
    if ((c->cls == SHP_CLS_COLL || c->cls == SHP_CLS_P2P) && refused(result))
        give_back_seq(c);
    if (shp_values_mask != 0)
        shp_values_after(c, result, shp_group_depth,
                         atomic_load_explicit(&cap.n, memory_order_relaxed));
}

void shp_dormant_seq(unsigned op, unsigned cls, int slot, void *comm, int peer, int result)
{
    if (refused(result))
        return; /* it took no place among the calls NCCL matches, and takes no seq */
    struct shp_call c = {.op = (uint8_t)op,
                         .cls = (uint8_t)cls,
                         .slot = (uint8_t)slot,
                         .comm = comm,
                         .t0 = shp_clock_now()};
    shp_guard++;
    _Atomic uint64_t *n = seq_counter(comm_get(&c, comm), cls, op, peer);
    if (n)
        shp_seq_next(n);
    shp_guard--;
}

void shp_dormant_refused(int result)
{
    if (refused(result) && shp_comm_last.seq) {
        uint64_t v = atomic_load_explicit(shp_comm_last.seq, memory_order_relaxed);
        atomic_store_explicit(shp_comm_last.seq, v - 1, memory_order_relaxed);
    }
}

void shp_record_atfork_child(void)
{
    /* A dormant child makes its own trace at its first call, as its parent did. */
    atomic_store(&armed_tried_once, 0);
    atomic_store(&shp_armed_tried, false);
    pthread_mutex_init(&comm_mu, NULL);
    pthread_mutex_init(&cap.mu, NULL);
}
