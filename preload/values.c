/* shapetrace preload: fingerprints of values that must agree across ranks (SHAPETRACE_VALUES).
 * After an all-reduce, all-gather or broadcast (every rank must hold the same bytes), and after a
 * copy whose call site matches SHAPETRACE_VALUES_SITE, a value record (trace.h) is written next to
 * the call's and a 64-bit fingerprint of the bytes (include/shapetrace/values.h) fills it in:
 *   - on the GPU, a kernel (preload/values_ptx.h) launched on the call's own stream right after
 *     it, which leaves its sums in pinned host memory, and an event recorded after the kernel.
 *     Nothing waits for it: the event is queried from later calls (and at exit, for a bounded
 *     time), so the application's streams are never synchronized;
 *   - on the host, for a synchronous copy whose host side holds the bytes when it returns.
 * A call captured into a CUDA graph runs nothing at capture: it is skipped, its record says so.
 * Per CUDA context, on first use: the module, a pinned buffer of SLOTS fingerprints and SLOTS
 * events. Any error of the driver switches fingerprints off with one warning. */
#define _GNU_SOURCE
#include "include/shapetrace/values.h"

#include <cuda.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/hash.h"
#include "include/shapetrace/env.h"
#include "preload/preload.h"
#include "preload/values.h"
#include "preload/values_ptx.h"

unsigned shp_values_mask;

/* ---- the driver: found at first use, never linked ---- */

/* X(name, symbol): every driver function used here. cuCtxGetId (CUDA 12.0) is optional: with it,
 * a context destroyed and made again at the same address (cudaDeviceReset) is told apart. */
#define DRIVER_CALLS(X)                                                                            \
    X(STREAM_CTX, "cuStreamGetCtx")                                                                \
    X(CTX_GET, "cuCtxGetCurrent")                                                                  \
    X(CTX_PUSH, "cuCtxPushCurrent_v2")                                                             \
    X(CTX_POP, "cuCtxPopCurrent_v2")                                                               \
    X(MODULE_LOAD, "cuModuleLoadData")                                                             \
    X(MODULE_FN, "cuModuleGetFunction")                                                            \
    X(HOST_ALLOC, "cuMemHostAlloc")                                                                \
    X(HOST_DEVPTR, "cuMemHostGetDevicePointer_v2")                                                 \
    X(EVENT_CREATE, "cuEventCreate")                                                               \
    X(EVENT_RECORD, "cuEventRecord")                                                               \
    X(EVENT_QUERY, "cuEventQuery")                                                                 \
    X(LAUNCH, "cuLaunchKernel")                                                                    \
    X(CAPTURING, "cuStreamIsCapturing")                                                            \
    X(CTX_ID, "cuCtxGetId")

enum {
#define X(e, name) DRV_##e,
    DRIVER_CALLS(X)
#undef X
        DRV_COUNT
};
static const char *const drv_names[DRV_COUNT] = {
#define X(e, name) [DRV_##e] = name,
    DRIVER_CALLS(X)
#undef X
};

typedef CUresult (*stream_ctx_fn)(CUstream, CUcontext *);
typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_push_fn)(CUcontext);
typedef CUresult (*ctx_pop_fn)(CUcontext *);
typedef CUresult (*module_load_fn)(CUmodule *, const void *);
typedef CUresult (*module_fn_fn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned);
typedef CUresult (*host_devptr_fn)(CUdeviceptr *, void *, unsigned);
typedef CUresult (*event_create_fn)(CUevent *, unsigned);
typedef CUresult (*event_record_fn)(CUevent, CUstream);
typedef CUresult (*event_query_fn)(CUevent);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*capturing_fn)(CUstream, CUstreamCaptureStatus *);
typedef CUresult (*ctx_id_fn)(CUcontext, unsigned long long *);

#define DRV(e, type) ((type)drv.fn[DRV_##e])

static struct {
    pthread_once_t once;
    bool ok;
    void *fn[DRV_COUNT];
} drv = {.once = PTHREAD_ONCE_INIT};

static void drv_resolve(void)
{
    drv.ok = true;
    for (int i = 0; i < DRV_COUNT; i++) {
        drv.fn[i] = shp_cu_real_lookup(drv_names[i]);
        if (!drv.fn[i] && i != DRV_CTX_ID) {
            drv.ok = false;
            SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE,
                    "fingerprints (" SHP_ENV_VALUES ") need the CUDA driver's %s, which no "
                    "loaded library has; fingerprints are off",
                    drv_names[i]);
            return;
        }
    }
}

/* ---- state ---- */

#define SLOTS 128                              /* fingerprints in flight, per context */
#define SLOT_WORDS (2 * SHP_VALUES_MAX_BLOCKS) /* one slot's sums in the pinned buffer */
#define MAX_CTXS 16
#define GROUP_MAX 32        /* fingerprints one thread defers to its outermost ncclGroupEnd */
#define SITE_IDS (1u << 17) /* stack ids whose site verdict is kept */
#define OCC_SLOTS 4096u     /* sites whose copies are counted */
#define EXIT_WAIT_NS 1000000000ull /* how long exit waits for fingerprints still on a GPU */

/* FREE -> CLAIMED (a launch is being made) -> READY (in flight) -> POLLING (a thread queries its
 * event) -> FREE, or back to READY; DEAD: the launch failed. */
enum { SLOT_FREE, SLOT_CLAIMED, SLOT_READY, SLOT_POLLING, SLOT_DEAD };

struct slot {
    _Atomic int state;
    unsigned blocks;
    uint64_t bytes;
    struct shp_rec_value *rec;
};

/* One CUDA context's module, pinned buffer and events: a slot each for SLOTS fingerprints in
 * flight, its sums' place in the buffer and its event. */
struct vctx {
    CUcontext ctx;
    unsigned long long id; /* cuCtxGetId's, 0 without it */
    CUfunction fn;
    uint64_t *host; /* SLOTS x SLOT_WORDS, pinned and mapped into the device's address space */
    CUdeviceptr dev;
    CUevent ev[SLOTS];
    struct slot slot[SLOTS];
    _Atomic uint32_t hint;    /* where the next claim looks first */
    _Atomic uint32_t poll_at; /* where the next read-back looks first */
};

/* A call's site: its verdict against the glob and its hash, computed once per stack id. */
enum { SITE_UNKNOWN, SITE_MATCH, SITE_OTHER };
struct site {
    _Atomic uint32_t state;
    uint32_t pad;
    _Atomic uint64_t hash;
};

struct occ {
    _Atomic uint64_t key; /* site hash, 0 for free */
    _Atomic uint64_t n;
};

static struct {
    unsigned every;
    char glob[SHP_VALUES_SITE_MAX];
    bool any_site;
    bool forked;
    _Atomic int failed;
    pthread_mutex_t mu; /* making a context's state */
    struct vctx *_Atomic ctx[MAX_CTXS];
    _Atomic int nctx;
    _Atomic int captures;
    _Atomic uint64_t pending;
    _Atomic uint64_t last_comm, last_seq; /* the last collective issued, for copies */
    _Atomic int exit_set;
    pthread_once_t tables_once;
    struct site *sites;
    struct occ *occ;
    uint8_t async[SHP_OP_COUNT], per_thread[SHP_OP_COUNT], peer[SHP_OP_COUNT];
} V = {.mu = PTHREAD_MUTEX_INITIALIZER, .tables_once = PTHREAD_ONCE_INIT};

/* The collectives whose receive buffer every rank must hold alike. */
static const unsigned char fingerprinted[SHP_OP_COUNT] = {
    [SHP_OP_ncclAllReduce] = 1,
    [SHP_OP_ncclAllGather] = 1,
    [SHP_OP_ncclBroadcast] = 1,
    [SHP_OP_ncclBcast] = 1,
};

/* One fingerprint to launch: now, or at the outermost ncclGroupEnd. */
struct req {
    void *stream;
    bool per_thread; /* stream 0 is the calling thread's default stream */
    uint64_t src, bytes;
    struct shp_rec_value *rec;
};
static SHP_TLS struct req group_q[GROUP_MAX];
static SHP_TLS int group_n;

static void values_fail(const char *what, int code)
{
    if (atomic_exchange(&V.failed, 1))
        return;
    __atomic_store_n(&shp_values_mask, 0, __ATOMIC_RELEASE);
    SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE,
            "fingerprints switched off: %s failed (%d); the application carries on, traced "
            "without them",
            what, code);
}

/* ---- configuration ---- */

void shp_values_config(void)
{
    const char *v = getenv(SHP_ENV_VALUES);
    unsigned mask = 0;
    if (!v || !*v || !strcmp(v, "none") || !strcmp(v, "0"))
        return;
    if (!strcmp(v, "collectives"))
        mask = SHP_VALUES_COLL;
    else if (!strcmp(v, "copies"))
        mask = SHP_VALUES_COPY;
    else if (!strcmp(v, "all") || !strcmp(v, "1"))
        mask = SHP_VALUES_COLL | SHP_VALUES_COPY;
    else {
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                SHP_ENV_VALUES "=%s is not one of collectives, copies, all; fingerprints are off",
                v);
        return;
    }
    V.every = SHP_DEFAULT_VALUES_EVERY;
    const char *e = getenv(SHP_ENV_VALUES_EVERY);
    if (e && *e) {
        char *end;
        long n = strtol(e, &end, 10);
        if (*end || n < 1 || n > SHP_MAX_VALUES_EVERY)
            SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                    SHP_ENV_VALUES_EVERY "=%s is not a number from 1 to %d; using 1", e,
                    SHP_MAX_VALUES_EVERY);
        else
            V.every = (unsigned)n;
    }
    const char *s = getenv(SHP_ENV_VALUES_SITE);
    if (s && strlen(s) >= sizeof(V.glob)) {
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                SHP_ENV_VALUES_SITE " is longer than %d bytes; using '" SHP_DEFAULT_VALUES_SITE "'",
                (int)sizeof(V.glob) - 1);
        s = NULL;
    }
    snprintf(V.glob, sizeof(V.glob), "%s", s && *s ? s : SHP_DEFAULT_VALUES_SITE);
    V.any_site = !strcmp(V.glob, "*");
    for (unsigned op = 1; op < SHP_OP_COUNT; op++) {
        const char *name = shp_op_name(op);
        V.async[op] = strstr(name, "Async") != NULL;
        V.per_thread[op] = strstr(name, "_ptds") || strstr(name, "_ptsz");
        V.peer[op] = strstr(name, "Peer") != NULL;
    }
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_INIT, "fingerprints of %s, every %u, copies at '%s'",
            mask == SHP_VALUES_COLL   ? "collectives"
            : mask == SHP_VALUES_COPY ? "copies"
                                      : "collectives and copies",
            V.every, V.glob);
    shp_values_mask = mask;
}

void shp_values_opened(void)
{
    struct shp_file_header *h = shp_writer_header();
    if (h && shp_values_mask)
        __atomic_store_n(&h->version, SHP_TRACE_VERSION_VALUES, __ATOMIC_RELEASE);
}

/* ---- records ---- */

static struct shp_rec_value *rec_new(const void *call, unsigned op, uint8_t what, uint8_t how,
                                     uint64_t comm, uint64_t seq, uint64_t occ, uint64_t bytes,
                                     uint64_t site, uint32_t stack)
{
    struct shp_file_header *h = shp_writer_header();
    if (!h)
        return NULL;
    struct shp_rec_value *r = shp_reserve(SHP_REC_VALUE, sizeof(*r));
    if (!r)
        return NULL;
    r->t = shp_clock_now();
    r->call = shp_writer_offset(call);
    r->comm = comm;
    r->seq = seq;
    r->occ = occ;
    r->bytes = bytes;
    r->site = site;
    r->stack = stack;
    r->op = (uint16_t)op;
    r->what = what;
    r->how = how;
    r->fp = 0;
    r->status = SHP_VALUE_PENDING;
    r->pad = 0;
    shp_rec_publish(r, SHP_REC_VALUE, sizeof(*r));
    return r;
}

static void rec_done(struct shp_rec_value *r, uint32_t status, uint64_t fp)
{
    if (!r)
        return;
    r->fp = fp;
    __atomic_store_n(&r->status, status, __ATOMIC_RELEASE);
}

/* What the call's own record says that the description does not: communicator id, seq and size,
 * a copy's resolved kind, the stack id, whether it was captured. */
struct call_info {
    const void *rec;
    uint64_t comm, seq;
    int nranks, kind;
    uint32_t stack;
    bool captured;
};

static bool comm_at(unsigned idx, uint64_t *id, int *nranks)
{
    const struct shp_rec_comm *r = shp_writer_comm_record(idx);
    if (!r)
        return false;
    *id = r->id;
    *nranks = shp_comm_rec_nranks(r);
    return true;
}

static bool call_info(const struct shp_call *c, struct call_info *ci)
{
    memset(ci, 0, sizeof(*ci));
    ci->seq = UINT64_MAX;
    ci->kind = -1;
    if (c->head) {
        const struct shp_head *hd = c->head;
        ci->rec = hd;
        unsigned type = SHP_REC_WORD_TYPE(hd->h.word);
        if (type == SHP_REC_COPY_C || type == SHP_REC_COPY2D_C) {
            const struct shp_rec_copy_c *r = (const void *)hd; /* a 2-D one starts with a row */
            ci->kind = (uint8_t)SHP_P48_TOP(r->src_kind);
            ci->stack = SHP_P48_TOP(r->stream_slo) | (uint32_t)SHP_P48_TOP(r->bytes_shi) << 16;
            return true;
        }
        if (type == SHP_REC_COLL_C) {
            const struct shp_rec_coll_c *r = (const void *)hd;
            ci->stack = SHP_P48_TOP(r->stream_slo) | (uint32_t)SHP_P48_TOP(r->seq_shi) << 16;
            ci->seq = SHP_P48_VAL(r->seq_shi);
            return comm_at(SHP_P48_TOP(r->send_comm), &ci->comm, &ci->nranks);
        }
        return false;
    }
    const struct shp_ev *ev = c->ev;
    ci->rec = ev;
    ci->stack = ev->stack;
    ci->captured = ev->flags & SHP_EV_CAPTURED;
    unsigned type = SHP_REC_WORD_TYPE(ev->h.word);
    if (type == SHP_REC_COLL) {
        const struct shp_rec_coll *r = (const void *)ev;
        ci->comm = r->comm;
        ci->seq = r->seq;
        ci->nranks = r->nranks;
        return true;
    }
    if (type == SHP_REC_COPY) {
        ci->kind = ((const struct shp_rec_copy *)ev)->kind;
        return true;
    }
    return false;
}

/* ---- contexts ---- */

/* Make ctx current on this thread if it is not; true if it was pushed (pop it after). */
static bool ctx_enter(CUcontext ctx, bool *failed)
{
    CUcontext cur = NULL;
    CUresult rc = DRV(CTX_GET, ctx_get_fn)(&cur);
    if (rc == CUDA_SUCCESS && cur == ctx)
        return false;
    rc = DRV(CTX_PUSH, ctx_push_fn)(ctx);
    if (rc != CUDA_SUCCESS) {
        values_fail("cuCtxPushCurrent", rc);
        *failed = true;
        return false;
    }
    return true;
}

static void ctx_leave(bool pushed)
{
    CUcontext dummy;
    if (pushed)
        DRV(CTX_POP, ctx_pop_fn)(&dummy);
}

static void lose_slots(struct vctx *v);

static void values_exit(void);

/* The module, pinned buffer and events of context ctx, made in it. NULL after an error. */
static struct vctx *vctx_make(CUcontext ctx, unsigned long long id)
{
    struct vctx *v = calloc(1, sizeof(*v));
    if (!v) {
        values_fail("allocating the fingerprints' state", -1);
        return NULL;
    }
    bool failed = false;
    bool pushed = ctx_enter(ctx, &failed);
    if (failed) {
        free(v);
        return NULL;
    }
    CUmodule mod;
    CUresult rc = DRV(MODULE_LOAD, module_load_fn)(&mod, shp_values_ptx);
    const char *what = "cuModuleLoadData (the fingerprint kernel)";
    if (rc == CUDA_SUCCESS) {
        rc = DRV(MODULE_FN, module_fn_fn)(&v->fn, mod, SHP_VALUES_ENTRY);
        what = "cuModuleGetFunction";
    }
    if (rc == CUDA_SUCCESS) {
        rc = DRV(HOST_ALLOC, host_alloc_fn)((void **)&v->host, SLOTS * SLOT_WORDS * 8,
                                            CU_MEMHOSTALLOC_DEVICEMAP);
        what = "cuMemHostAlloc";
    }
    if (rc == CUDA_SUCCESS) {
        rc = DRV(HOST_DEVPTR, host_devptr_fn)(&v->dev, v->host, 0);
        what = "cuMemHostGetDevicePointer";
    }
    for (int s = 0; s < SLOTS && rc == CUDA_SUCCESS; s++) {
        rc = DRV(EVENT_CREATE, event_create_fn)(&v->ev[s], CU_EVENT_DISABLE_TIMING);
        what = "cuEventCreate";
    }
    ctx_leave(pushed);
    if (rc != CUDA_SUCCESS) {
        /* What was made stays: freeing it could race the application's own teardown. */
        values_fail(what, rc);
        free(v);
        return NULL;
    }
    v->ctx = ctx;
    v->id = id;
    if (!atomic_exchange(&V.exit_set, 1))
        atexit(values_exit);
    return v;
}

static struct vctx *vctx_for(CUstream stream)
{
    CUcontext ctx = NULL;
    CUresult rc = DRV(STREAM_CTX, stream_ctx_fn)(stream, &ctx);
    if (rc != CUDA_SUCCESS) {
        values_fail("cuStreamGetCtx", rc);
        return NULL;
    }
    unsigned long long id = 0;
    if (drv.fn[DRV_CTX_ID] && DRV(CTX_ID, ctx_id_fn)(ctx, &id) != CUDA_SUCCESS)
        id = 0;
    int n = atomic_load_explicit(&V.nctx, memory_order_acquire);
    for (int i = n; i-- > 0;) {
        struct vctx *v = atomic_load_explicit(&V.ctx[i], memory_order_acquire);
        if (v && v->ctx == ctx && v->id == id)
            return v;
    }
    pthread_mutex_lock(&V.mu);
    struct vctx *v = NULL;
    n = atomic_load(&V.nctx);
    for (int i = n; i-- > 0 && !v;) {
        struct vctx *w = atomic_load(&V.ctx[i]);
        if (w->ctx == ctx && w->id == id)
            v = w;
    }
    if (!v && n == MAX_CTXS) {
        values_fail("another CUDA context (more than 16)", -1);
    } else if (!v && (v = vctx_make(ctx, id))) {
        atomic_store_explicit(&V.ctx[n], v, memory_order_release);
        atomic_store_explicit(&V.nctx, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&V.mu);
    return v;
}

/* ---- slots ---- */

/* Any free slot, looked for from a rotating start: a thread that took one and was preempted
 * before its launch holds only that one (a queue taken and given back in order filled up behind
 * it: seen with 4 threads on 2 cores). */
static int slot_claim(struct vctx *v)
{
    uint32_t h = atomic_fetch_add_explicit(&v->hint, 1, memory_order_relaxed);
    for (uint32_t k = 0; k < SLOTS; k++) {
        int i = (int)((h + k) % SLOTS), f = SLOT_FREE;
        if (atomic_load_explicit(&v->slot[i].state, memory_order_relaxed) == SLOT_FREE &&
            atomic_compare_exchange_strong(&v->slot[i].state, &f, SLOT_CLAIMED))
            return i;
    }
    return -1;
}

/* Read back the fingerprints whose kernels are done, from where the last look stopped (slots
 * are taken about in turn, so that is about the oldest), up to the first that is not done;
 * with a deadline (monotonic ns, 0: none), wait for each until then. Threads poll at once, each
 * slot by one of them (no lock that a preempted thread could hold while the slots fill). */
static void poll_ctx(struct vctx *v, uint64_t deadline)
{
    bool pushed = false, entered = false, failed = false;
    uint32_t start = atomic_load_explicit(&v->poll_at, memory_order_relaxed);
    for (uint32_t k = 0; k < SLOTS && atomic_load_explicit(&V.pending, memory_order_acquire); k++) {
        uint32_t i = (start + k) % SLOTS;
        struct slot *s = &v->slot[i];
        int st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == SLOT_DEAD) {
            atomic_compare_exchange_strong(&s->state, &st, SLOT_FREE);
            continue;
        }
        /* free, taken and its launch not made yet, or another thread's to query */
        if (st != SLOT_READY || !atomic_compare_exchange_strong(&s->state, &st, SLOT_POLLING))
            continue;
        if (!entered) {
            pushed = ctx_enter(v->ctx, &failed);
            entered = true;
            if (failed) {
                atomic_store_explicit(&s->state, SLOT_READY, memory_order_release);
                break;
            }
        }
        CUresult rc = DRV(EVENT_QUERY, event_query_fn)(v->ev[i]);
        if (rc == CUDA_ERROR_NOT_READY) {
            if (deadline && shp_now_ns() < deadline) {
                sched_yield();
                atomic_store_explicit(&s->state, SLOT_READY, memory_order_release);
                k--;
                continue;
            }
            atomic_store_explicit(&s->state, SLOT_READY, memory_order_release);
            atomic_store_explicit(&v->poll_at, i, memory_order_relaxed);
            break;
        }
        if (rc != CUDA_SUCCESS) {
            values_fail("cuEventQuery", rc);
            rec_done(s->rec, SHP_VALUE_LOST, 0);
        } else {
            const volatile uint64_t *p = v->host + (size_t)i * SLOT_WORDS;
            uint64_t a = 0, b = 0;
            for (unsigned w = 0; w < s->blocks; w++) {
                a += p[2 * w];
                b += p[2 * w + 1];
            }
            rec_done(s->rec, SHP_VALUE_DONE, shp_values_final(a, b, s->bytes));
        }
        s->rec = NULL;
        atomic_store_explicit(&s->state, SLOT_FREE, memory_order_release);
        atomic_store_explicit(&v->poll_at, (i + 1) % SLOTS, memory_order_relaxed);
        atomic_fetch_sub(&V.pending, 1);
    }
    if (entered)
        ctx_leave(pushed);
}

static void poll_all(uint64_t deadline)
{
    int n = atomic_load_explicit(&V.nctx, memory_order_acquire);
    for (int i = 0; i < n; i++)
        poll_ctx(atomic_load_explicit(&V.ctx[i], memory_order_acquire), deadline);
}

/* Fingerprints still in flight where none can be read back any more. */
static void lose_slots(struct vctx *v)
{
    for (int s = 0; s < SLOTS; s++)
        if (atomic_load(&v->slot[s].state) >= SLOT_READY && v->slot[s].rec) {
            rec_done(v->slot[s].rec, SHP_VALUE_LOST, 0);
            v->slot[s].rec = NULL;
        }
}

/* At exit, before the runtime tears the contexts down (atexit handlers run last-registered
 * first, and this one is registered after the runtime's): what is still on a GPU gets a bounded
 * wait (a stream stuck in a collective whose peer died must not hold the exit), the rest is
 * marked lost. */
static void values_exit(void)
{
    if (V.forked)
        return;
    int saved = shp_own_enter();
    bool can = drv.ok && !atomic_load(&V.failed) && !atomic_load(&V.captures);
    if (can && atomic_load(&V.pending))
        poll_all(shp_now_ns() + EXIT_WAIT_NS);
    int n = atomic_load(&V.nctx);
    for (int i = 0; i < n; i++)
        lose_slots(atomic_load(&V.ctx[i]));
    shp_own_leave(saved);
}

/* ---- launching ---- */

/* The kernel on the request's stream, then its event; or the record says why not. */
static void launch(const struct req *q)
{
    struct shp_rec_value *r = q->rec;
    if (q->bytes == 0) {
        rec_done(r, SHP_VALUE_DONE, shp_values_final(0, 0, 0));
        return;
    }
    if (atomic_load_explicit(&V.captures, memory_order_relaxed)) {
        rec_done(r, SHP_VALUE_CAPTURED, 0);
        return;
    }
    pthread_once(&drv.once, drv_resolve);
    if (!drv.ok) {
        values_fail("finding the CUDA driver", -1);
        rec_done(r, SHP_VALUE_LOST, 0);
        return;
    }
    CUstream st = q->stream ? (CUstream)q->stream : q->per_thread ? CU_STREAM_PER_THREAD : NULL;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = DRV(CAPTURING, capturing_fn)(st, &cs);
    if (rc != CUDA_SUCCESS) {
        values_fail("cuStreamIsCapturing", rc);
        rec_done(r, SHP_VALUE_LOST, 0);
        return;
    }
    if (cs != CU_STREAM_CAPTURE_STATUS_NONE) {
        rec_done(r, SHP_VALUE_CAPTURED, 0);
        return;
    }
    struct vctx *v = vctx_for(st);
    if (!v) {
        rec_done(r, SHP_VALUE_LOST, 0);
        return;
    }
    int s = slot_claim(v);
    if (s < 0) {
        rec_done(r, SHP_VALUE_BUSY, 0);
        return;
    }
    struct slot *sl = &v->slot[s];
    bool failed = false;
    bool pushed = ctx_enter(v->ctx, &failed);
    unsigned blocks = shp_values_blocks(q->bytes);
    uint64_t src = q->src, n = q->bytes, out = v->dev + (uint64_t)s * SLOT_WORDS * 8;
    void *params[] = {&src, &n, &out};
    if (!failed) {
        rc = DRV(LAUNCH, launch_fn)(v->fn, blocks, 1, 1, SHP_VALUES_THREADS, 1, 1, 0, st, params,
                                    NULL);
        if (rc == CUDA_SUCCESS)
            rc = DRV(EVENT_RECORD, event_record_fn)(v->ev[s], st);
        ctx_leave(pushed);
        if (rc != CUDA_SUCCESS)
            values_fail("cuLaunchKernel (the fingerprint kernel)", rc);
    }
    if (failed || rc != CUDA_SUCCESS) {
        rec_done(r, SHP_VALUE_LOST, 0);
        atomic_store_explicit(&sl->state, SLOT_DEAD, memory_order_release);
        return;
    }
    sl->rec = r;
    sl->blocks = blocks;
    sl->bytes = q->bytes;
    atomic_fetch_add(&V.pending, 1);
    atomic_store_explicit(&sl->state, SLOT_READY, memory_order_release);
}

/* The calling thread's outermost ncclGroupEnd returned: NCCL has enqueued the group's work (or
 * failed, and nothing of it runs). */
static void group_flush(bool ok)
{
    int n = group_n;
    group_n = 0;
    for (int i = 0; i < n; i++) {
        if (ok && __atomic_load_n(&shp_values_mask, __ATOMIC_ACQUIRE))
            launch(&group_q[i]);
        else
            rec_done(group_q[i].rec, SHP_VALUE_LOST, 0);
    }
}

/* ---- call sites ---- */

/* Whether pattern element p (not NUL) matches c; *len: the element's length. fnmatch's rules
 * without the locale (no allocation, no multibyte tables): ?, [set], [!set], [a-z], \x. */
static bool glob_one(const char *p, char c, size_t *len)
{
    if (*p == '?') {
        *len = 1;
        return true;
    }
    if (*p == '\\' && p[1]) {
        *len = 2;
        return p[1] == c;
    }
    if (*p == '[') {
        const char *q = p + 1;
        bool neg = *q == '!' || *q == '^', hit = false;
        if (neg)
            q++;
        const char *first = q;
        while (*q && (*q != ']' || q == first)) {
            if (q[1] == '-' && q[2] && q[2] != ']') {
                hit |= (unsigned char)c >= (unsigned char)q[0] &&
                       (unsigned char)c <= (unsigned char)q[2];
                q += 3;
            } else {
                hit |= *q == c;
                q++;
            }
        }
        if (*q == ']') {
            *len = (size_t)(q - p) + 1;
            return hit != neg;
        }
    }
    *len = 1;
    return *p == c;
}

static bool glob(const char *p, const char *s)
{
    const char *star = NULL, *back = NULL;
    while (*s) {
        size_t len;
        if (*p == '*') {
            star = ++p;
            back = s;
            continue;
        }
        if (*p && glob_one(p, *s, &len)) {
            p += len;
            s++;
            continue;
        }
        if (!star)
            return false;
        p = star;
        s = ++back;
    }
    while (*p == '*')
        p++;
    return !*p;
}

static void make_tables(void)
{
    void *s = mmap(NULL, sizeof(struct site) * SITE_IDS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *o = mmap(NULL, sizeof(struct occ) * OCC_SLOTS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    V.sites = s == MAP_FAILED ? NULL : s;
    V.occ = o == MAP_FAILED ? NULL : o;
}

struct site_walk {
    uint64_t hash;
    bool match;
    int npy;
};

static void site_py(void *arg, const struct shp_py_frame *f)
{
    struct site_walk *w = arg;
    w->hash = shp_hash_bytes(w->hash, f->file, strlen(f->file) + 1);
    w->hash = shp_hash_bytes(w->hash, f->name, strlen(f->name) + 1);
    w->hash = shp_hash_bytes(w->hash, f->qualname, strlen(f->qualname) + 1);
    w->hash = shp_hash_word(w->hash, (uint64_t)(uint32_t)f->firstlineno << 32 | f->lasti);
    w->npy++;
    w->match = w->match || glob(V.glob, f->name) || (f->qualname[0] && glob(V.glob, f->qualname));
}

/* The site of the calling thread's call: whether a frame's function matches the glob, and a hash
 * that every process running the same code computes alike. Python frames, where the thread runs
 * Python: their files, names and instruction offsets (the interpreter's native frames between
 * them vary with its specialization of the bytecode). Otherwise the native frames: each one's
 * module name and offset in it. Native names come from dladdr: exported symbols only (an
 * executable's own functions need -rdynamic), C++ names mangled. Once per distinct stack. */
static void site_compute(bool *match, uint64_t *hash)
{
    struct site_walk w = {.hash = SHP_FNV_OFFSET, .match = V.any_site};
    shp_py_frames(site_py, &w);
    if (!w.npy || !w.match) {
        void *buf[SHP_STACK_MAX_FRAMES + 16];
        int n = backtrace(buf, (int)(sizeof(buf) / sizeof(buf[0])));
        for (int i = 0; i < n; i++) {
            Dl_info di;
            if (shp_is_self(buf[i]) || !dladdr(buf[i], &di))
                continue;
            if (!w.match && di.dli_sname && glob(V.glob, di.dli_sname))
                w.match = true;
            if (!w.npy) {
                const char *name = di.dli_fname ? strrchr(di.dli_fname, '/') : NULL;
                name = name ? name + 1 : di.dli_fname ? di.dli_fname : "";
                w.hash = shp_hash_bytes(w.hash, name, strlen(name) + 1);
                w.hash =
                    shp_hash_word(w.hash, (uint64_t)((uintptr_t)buf[i] - (uintptr_t)di.dli_fbase));
            }
        }
    }
    *match = w.match;
    *hash = w.hash ? w.hash : 1;
}

/* The site of a call whose stack id is `stack`: computed on first sight of that id. */
static bool site_of(uint32_t stack, uint64_t *hash)
{
    pthread_once(&V.tables_once, make_tables);
    struct site tmp = {0}, *s = V.sites && stack < SITE_IDS ? &V.sites[stack] : &tmp;
    uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (st == SITE_UNKNOWN) {
        bool match;
        uint64_t h;
        site_compute(&match, &h);
        atomic_store_explicit(&s->hash, h, memory_order_relaxed);
        st = match ? SITE_MATCH : SITE_OTHER;
        atomic_store_explicit(&s->state, st, memory_order_release);
    }
    *hash = atomic_load_explicit(&s->hash, memory_order_relaxed);
    return st == SITE_MATCH;
}

/* How many copies from this site came before; UINT64_MAX when the table of sites is full. */
static uint64_t occ_next(uint64_t site)
{
    if (!V.occ)
        return UINT64_MAX;
    for (uint32_t i = 0; i < OCC_SLOTS; i++) {
        struct occ *o = &V.occ[(site + i) & (OCC_SLOTS - 1)];
        uint64_t k = atomic_load_explicit(&o->key, memory_order_acquire);
        if (k == 0 && atomic_compare_exchange_strong(&o->key, &k, site))
            k = site;
        if (k == site)
            return atomic_fetch_add(&o->n, 1);
    }
    return UINT64_MAX;
}

/* ---- calls ---- */

static void collective(const struct shp_call *c, const struct call_info *ci, unsigned group)
{
    atomic_store_explicit(&V.last_comm, ci->comm, memory_order_relaxed);
    atomic_store_explicit(&V.last_seq, ci->seq, memory_order_relaxed);
    if (!(shp_values_mask & SHP_VALUES_COLL) || !fingerprinted[c->op] || ci->seq == UINT64_MAX ||
        ci->seq % V.every)
        return;
    if (c->op == SHP_OP_ncclAllGather && ci->nranks <= 0)
        return; /* its output's size is unknown */
    uint64_t send, recv;
    shp_op_elems(c->op, c->count, ci->nranks, &send, &recv);
    unsigned es = shp_dtype_size((unsigned)c->dtype);
    if (!es || !c->b)
        return;
    struct shp_rec_value *r = rec_new(ci->rec, c->op, SHP_VALUE_OUTPUT, SHP_VALUE_DEVICE, ci->comm,
                                      ci->seq, 0, recv * es, 0, ci->stack);
    if (!r)
        return;
    if (ci->captured) {
        rec_done(r, SHP_VALUE_CAPTURED, 0);
        return;
    }
    struct req q = {.stream = c->stream,
                    .per_thread = V.per_thread[c->op],
                    .src = (uint64_t)(uintptr_t)c->b,
                    .bytes = recv * es,
                    .rec = r};
    if (group == 0)
        launch(&q);
    else if (group_n < GROUP_MAX)
        group_q[group_n++] = q;
    else
        rec_done(r, SHP_VALUE_BUSY, 0);
}

static void copy(const struct shp_call *c, const struct call_info *ci)
{
    if (shp_cfg.stacks == SHP_STACKS_NONE) {
        /* Said at the first copy, not at start-up: every process loads the preload, the
         * launcher's too, and only those that copy have anything to lose. */
        SHP_WARN_ONCE(&shp_log, SHP_SUB_TRACE,
                      "fingerprints of copies need call sites (" SHP_ENV_STACKS
                      "=none): only collectives are fingerprinted");
        return;
    }
    /* 1-D copies that touch a device: the bytes are contiguous on the side we read. */
    if (c->height != 1 || V.peer[c->op] || ci->kind < SHP_KIND_H2D || ci->kind > SHP_KIND_D2D ||
        !ci->stack)
        return;
    uint64_t site;
    if (!site_of(ci->stack, &site))
        return;
    uint64_t occ = occ_next(site);
    if (occ == UINT64_MAX || occ % V.every)
        return;
    bool host = !V.async[c->op] && ci->kind != SHP_KIND_D2D;
    uint64_t comm = atomic_load_explicit(&V.last_comm, memory_order_relaxed);
    uint64_t seq = atomic_load_explicit(&V.last_seq, memory_order_relaxed);
    struct shp_rec_value *r =
        rec_new(ci->rec, c->op, SHP_VALUE_COPIED, host ? SHP_VALUE_HOST : SHP_VALUE_DEVICE, comm,
                comm ? seq : UINT64_MAX, occ, c->width, site, ci->stack);
    if (!r)
        return;
    if (ci->captured) {
        rec_done(r, SHP_VALUE_CAPTURED, 0);
        return;
    }
    if (host) {
        /* A synchronous copy is over when it returns: its host side holds the bytes. */
        const void *p = ci->kind == SHP_KIND_H2D ? c->a : c->b;
        rec_done(r, SHP_VALUE_DONE, shp_values_hash(p, c->width));
        return;
    }
    const void *dev = ci->kind == SHP_KIND_D2H ? c->a : c->b;
    struct req q = {.stream = c->stream,
                    .per_thread = V.per_thread[c->op],
                    .src = (uint64_t)(uintptr_t)dev,
                    .bytes = c->width,
                    .rec = r};
    launch(&q);
}

void shp_values_before(int captures)
{
    if (!atomic_load_explicit(&V.pending, memory_order_acquire) || captures)
        return;
    int saved = shp_own_enter();
    poll_all(0);
    shp_own_leave(saved);
}

void shp_values_after(struct shp_call *c, int result, unsigned group, int captures)
{
    /* Stored only when it changed: every thread's calls come here. */
    if (atomic_load_explicit(&V.captures, memory_order_relaxed) != captures)
        atomic_store_explicit(&V.captures, captures, memory_order_relaxed);
    bool mine =
        c->cls == SHP_CLS_COLL || c->cls == SHP_CLS_COPY || (c->cls == SHP_CLS_GROUP && group_n);
    if (!mine && !atomic_load_explicit(&V.pending, memory_order_acquire))
        return;
    int saved = shp_own_enter();
    /* Earlier fingerprints first: this call's own kernel has only just been enqueued. */
    if (atomic_load_explicit(&V.pending, memory_order_acquire) && !captures)
        poll_all(0);
    if (c->cls == SHP_CLS_GROUP) {
        if (c->op == SHP_OP_ncclGroupEnd && group == 0 && group_n)
            group_flush(result == ncclSuccess);
    } else if (result == 0 && (c->ev || c->head) &&
               (c->cls == SHP_CLS_COLL || c->cls == SHP_CLS_COPY)) {
        struct call_info ci;
        /* Queued in a group whose end this thread made while dormant: never enqueued as seen. */
        if (c->cls == SHP_CLS_COLL && group == 0 && group_n)
            group_flush(false);
        if (call_info(c, &ci)) {
            if (c->cls == SHP_CLS_COLL)
                collective(c, &ci, group);
            else if (shp_values_mask & SHP_VALUES_COPY)
                copy(c, &ci);
        }
    }
    shp_own_leave(saved);
}

void shp_values_atfork_child(void)
{
    V.forked = true;
    shp_values_mask = 0;
    group_n = 0;
}
