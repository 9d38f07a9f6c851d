/* Test double of the CUDA driver, libcuda.so.1: cuGetProcAddress and the driver functions that
 * shapetrace traces (copies, allocations, capture and graphs), on device and pinned arenas of its
 * own, without a GPU; and what shapetrace's fingerprint kernel needs (contexts, modules, kernel
 * launches, events), the kernel run in C on host memory. Defined against the real cuda.h. Test
 * equipment: see docs/testing.md. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "include/shapetrace/values.h"
#include "tests/doubles/arena.h"

/* Everything not static is driver API; keep it exported even in a -fvisibility=hidden build. */
#pragma GCC visibility push(default)

static struct arena device_arena = {.hint = 0x7b0000000000, .want = 16 * GIB};
static struct arena pinned_arena = {.hint = 0x7a0000000000, .want = 4 * GIB};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- memory ---- */

static CUresult alloc_in(struct arena *a, void **p, size_t size)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    *p = NULL;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE; /* unlike cudaMalloc, cuMemAlloc refuses 0 bytes */
    pthread_mutex_lock(&lock);
    int err = arena_alloc(a, size, 0, p);
    pthread_mutex_unlock(&lock);
    return err < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static CUresult free_in(struct arena *a, const void *p)
{
    pthread_mutex_lock(&lock);
    int err = arena_free(a, p);
    pthread_mutex_unlock(&lock);
    return err < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return alloc_in(&device_arena, (void **)dptr, bytesize);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    (void)flags;
    return alloc_in(&device_arena, (void **)dptr, bytesize);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    (void)hStream;
    return alloc_in(&device_arena, (void **)dptr, bytesize);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return dptr ? free_in(&device_arena, (void *)(uintptr_t)dptr) : CUDA_SUCCESS;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    (void)hStream;
    return cuMemFree_v2(dptr);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return alloc_in(&pinned_arena, pp, bytesize);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    return alloc_in(&pinned_arena, pp, bytesize);
}

CUresult cuMemFreeHost(void *p)
{
    return free_in(&pinned_arena, p);
}

/* Where [p, p+n) lies: 1 in one live device block, 0 outside the device arena, -1 when it starts
 * or ends outside a live block of the arena. */
static int device_extent(const void *p, size_t n)
{
    pthread_mutex_lock(&lock);
    int r = 0;
    if (in_arena(&device_arena, (uintptr_t)p)) {
        const struct block *b = find_live(&device_arena, p);
        size_t off = (size_t)((uintptr_t)p - (uintptr_t)device_arena.base);
        r = b && off + n <= b->off + b->requested ? 1 : -1;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (!data || attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
        return CUDA_ERROR_INVALID_VALUE;
    const void *p = (const void *)(uintptr_t)ptr;
    if (device_extent(p, 1) == 1) {
        *(unsigned *)data = CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&lock);
    bool pinned = in_arena(&pinned_arena, (uintptr_t)p) && find_live(&pinned_arena, p);
    pthread_mutex_unlock(&lock);
    if (!pinned)
        return CUDA_ERROR_INVALID_VALUE; /* pageable host memory the driver never saw */
    *(unsigned *)data = CU_MEMORYTYPE_HOST;
    return CUDA_SUCCESS;
}

/* ---- devices and contexts ---- */

CUresult cuInit(unsigned int Flags)
{
    return Flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

/* ---- streams, capture and graphs ---- */

/* A captured copy, replayed at each launch. */
struct node {
    void *dst;
    const void *src;
    size_t n;
};

struct CUgraph_st {
    struct node nodes[64];
    int n;
};

struct CUgraphExec_st {
    struct CUgraph_st *graph;
};

/* A stream, and the capture it is in: its own (origin itself) or one it joined by waiting on an
 * event recorded in it, as the runtime double does it (cudart.c): each counts its work in the
 * capture (ops), and a forked stream is joined back once a stream of the capture has waited on
 * an event recorded after its last work (joined == ops). */
struct CUstream_st {
    struct CUgraph_st *capturing;
    /* next: every stream made, for the end of a capture and so that another library's handle
     * is never read */
    struct CUstream_st *origin, *next;
    unsigned long long id, ops, joined;
};

/* An event: where it was recorded in a capture (fork and join), and the kernels launched on its
 * stream before it (they run when it is queried). */
struct CUevent_st {
    struct CUstream_st *from; /* recorded on a capturing stream: which one, after how much */
    unsigned long long capture, mark;
    CUstream stream;
    uint64_t upto; /* the launches recorded before it; 0: never recorded */
};

static struct CUstream_st *streams;
static unsigned long long next_capture = 1;
static uint64_t launch_ids; /* kernels launched so far (below) */

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    (void)Flags;
    if (!phStream)
        return CUDA_ERROR_INVALID_VALUE;
    *phStream = calloc(1, sizeof(**phStream));
    if (!*phStream)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    (*phStream)->next = streams;
    streams = *phStream;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    (void)Flags;
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    *phEvent = calloc(1, sizeof(**phEvent));
    return *phEvent ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    if (!hEvent)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    bool captured = hStream && hStream->capturing && hStream->origin;
    hEvent->from = captured ? hStream : NULL;
    hEvent->capture = captured ? hStream->origin->id : 0;
    hEvent->mark = captured ? hStream->ops : 0;
    hEvent->stream = hStream;
    hEvent->upto = launch_ids;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* A wait on an event recorded in a capture forks the waiting stream into it, or joins the
 * recording stream's work back; the legacy stream cannot take part. */
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    (void)Flags;
    if (!hEvent)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *o = hEvent->from ? hEvent->from->origin : NULL;
    if (o && o->capturing && o->id == hEvent->capture) {
        if (!hStream) {
            r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else if (!hStream->capturing) {
            hStream->capturing = o->capturing;
            hStream->origin = o;
            hStream->ops = 0;
            hStream->joined = ~0ull;
        } else if (hStream->origin != o) {
            r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
        if (r == CUDA_SUCCESS && hEvent->from != hStream && hEvent->mark == hEvent->from->ops)
            hEvent->from->joined = hEvent->mark;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* The capture a stream is in (CUDA 11.3's form: no edge data); no graph, no dependencies.
 * cuda.h 13 declares this exported form only for the driver's own build. */
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out)
{
    if (!captureStatus_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    bool on = hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD &&
              hStream->capturing;
    *captureStatus_out = on ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (on && id_out)
        *id_out = hStream->origin->id;
    pthread_mutex_unlock(&lock);
    if (graph_out)
        *graph_out = NULL;
    if (dependencies_out)
        *dependencies_out = NULL;
    if (numDependencies_out)
        *numDependencies_out = 0;
    return CUDA_SUCCESS;
}

/* h if it is one of the double's streams, else NULL: a runtime's stream (the runtime double's),
 * the legacy or per-thread stream, which a real driver knows too and this one only by handle. */
static struct CUstream_st *own_stream(CUstream h)
{
    pthread_mutex_lock(&lock);
    struct CUstream_st *s = streams;
    while (s && s != h)
        s = s->next;
    pthread_mutex_unlock(&lock);
    return s;
}

static void run_launches(CUstream stream, uint64_t upto);

CUresult cuStreamSynchronize(CUstream hStream)
{
    struct CUstream_st *s = own_stream(hStream);
    if (s && s->capturing)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    run_launches(hStream, UINT64_MAX);
    return CUDA_SUCCESS;
}

/* A runtime's stream is capturing as the loaded runtime says (the runtime double's own
 * streams); the double's own as its own record says. */
typedef int (*rt_capturing_fn)(void *, int *);

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    if (!captureStatus)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = own_stream(hStream);
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    if (s) {
        if (s->capturing)
            *captureStatus = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        return CUDA_SUCCESS;
    }
    static _Atomic(rt_capturing_fn) rt_cached;
    rt_capturing_fn rt = atomic_load(&rt_cached);
    if (!rt) {
        rt = (rt_capturing_fn)dlsym(RTLD_DEFAULT, "cudaStreamIsCapturing");
        atomic_store(&rt_cached, rt);
    }
    int st = 0;
    if (rt && rt(hStream, &st) == 0)
        *captureStatus = (CUstreamCaptureStatus)st; /* the runtime's numbers are the driver's */
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    (void)mode;
    if (!hStream)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    if (hStream->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    hStream->capturing = calloc(1, sizeof(*hStream->capturing));
    if (!hStream->capturing)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    hStream->origin = hStream;
    hStream->id = next_capture++;
    hStream->ops = hStream->joined = 0;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* Only the origin ends a capture; every stream forked into it must have been joined back
 * (CUDA_ERROR_STREAM_CAPTURE_UNJOINED otherwise, and the capture is gone). */
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    if (!hStream || !hStream->capturing || !phGraph)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (hStream->origin != hStream)
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    pthread_mutex_lock(&lock);
    bool unjoined = false;
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s != hStream && s->origin == hStream && s->capturing) {
            unjoined |= s->joined != s->ops;
            s->capturing = NULL;
            s->origin = NULL;
        }
    pthread_mutex_unlock(&lock);
    *phGraph = unjoined ? NULL : hStream->capturing;
    if (unjoined)
        free(hStream->capturing);
    hStream->capturing = NULL;
    hStream->origin = NULL;
    return unjoined ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED : CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags)
{
    (void)flags;
    if (!phGraphExec || !hGraph)
        return CUDA_ERROR_INVALID_VALUE;
    *phGraphExec = calloc(1, sizeof(**phGraphExec));
    if (!*phGraphExec)
        return CUDA_ERROR_OUT_OF_MEMORY;
    (*phGraphExec)->graph = hGraph;
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    struct CUstream_st *own = own_stream(hStream);
    if (!hGraphExec || (own && own->capturing))
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < hGraphExec->graph->n; i++) {
        const struct node *nd = &hGraphExec->graph->nodes[i];
        memcpy(nd->dst, nd->src, nd->n);
    }
    return CUDA_SUCCESS;
}

/* ---- copies ---- */

/* Check a copy's device sides (dst_dev, src_dev: the call says they are device memory; -1: the
 * driver infers it) and move the bytes, now or, on a capturing stream, at each launch. */
static CUresult copy(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                     CUstream stream)
{
    if (n == 0)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    int d = device_extent(dst, n), s = device_extent(src, n);
    if (d < 0 || s < 0 || (dst_dev == 1 && d != 1) || (dst_dev == 0 && d != 0) ||
        (src_dev == 1 && s != 1) || (src_dev == 0 && s != 0))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *own = stream ? own_stream(stream) : NULL;
    if (own && own->capturing) {
        struct CUgraph_st *g = own->capturing;
        if (g->n == (int)(sizeof(g->nodes) / sizeof(g->nodes[0])))
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes[g->n++] = (struct node){dst, src, n};
        stream->ops++;
        return CUDA_SUCCESS;
    }
    memmove(dst, src, n);
    return CUDA_SUCCESS;
}

#define DEV(p) ((void *)(uintptr_t)(p))

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(DEV(dst), -1, DEV(src), -1, ByteCount, NULL);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(DEV(dst), -1, DEV(src), -1, ByteCount, hStream);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(DEV(dstDevice), 1, srcHost, 0, ByteCount, NULL);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(dstHost, 0, DEV(srcDevice), 1, ByteCount, NULL);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(DEV(dstDevice), 1, DEV(srcDevice), 1, ByteCount, NULL);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream)
{
    return copy(DEV(dstDevice), 1, srcHost, 0, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream)
{
    return copy(dstHost, 0, DEV(srcDevice), 1, ByteCount, hStream);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream)
{
    return copy(DEV(dstDevice), 1, DEV(srcDevice), 1, ByteCount, hStream);
}

CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                      CUcontext srcContext, size_t ByteCount)
{
    (void)dstContext, (void)srcContext;
    return copy(DEV(dstDevice), 1, DEV(srcDevice), 1, ByteCount, NULL);
}

/* A 2-D copy row by row; arrays are not simulated. */
static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream stream)
{
    if (!p || p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY ||
        p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch)
        return CUDA_ERROR_INVALID_VALUE;
    int sd = p->srcMemoryType == CU_MEMORYTYPE_DEVICE ? 1
             : p->srcMemoryType == CU_MEMORYTYPE_HOST ? 0
                                                      : -1;
    int dd = p->dstMemoryType == CU_MEMORYTYPE_DEVICE ? 1
             : p->dstMemoryType == CU_MEMORYTYPE_HOST ? 0
                                                      : -1;
    const char *s = p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost : DEV(p->srcDevice);
    char *d = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost : DEV(p->dstDevice);
    s += p->srcY * p->srcPitch + p->srcXInBytes;
    d += p->dstY * p->dstPitch + p->dstXInBytes;
    for (size_t row = 0; row < p->Height; row++) {
        CUresult r =
            copy(d + row * p->dstPitch, dd, s + row * p->srcPitch, sd, p->WidthInBytes, stream);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy_2d(pCopy, NULL);
}

CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy_2d(pCopy, hStream);
}

/* The per-thread-stream forms: the double has one stream semantics for both. */
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

/* ---- contexts, modules, kernels, events: shapetrace's fingerprint kernel ---- */

/* SHP_DOUBLE_CU_FAIL=NAME makes the function NAME of this section fail (CUDA_ERROR_UNKNOWN), for
 * tests of what a caller does when the driver refuses. SHP_DOUBLE_CU_ERRNO=N: each function that
 * asks fails() returns with errno N, as the real driver's can (its ioctls, its reads of /proc),
 * for tests that a caller of the driver keeps the application's errno. */
static const char *fail_name;
static int fail_errno;
static pthread_once_t fail_once = PTHREAD_ONCE_INIT;

static void read_fail(void)
{
    fail_name = getenv("SHP_DOUBLE_CU_FAIL");
    const char *e = getenv("SHP_DOUBLE_CU_ERRNO");
    fail_errno = e ? atoi(e) : 0;
}

static bool fails(const char *name)
{
    pthread_once(&fail_once, read_fail);
    if (fail_errno)
        errno = fail_errno;
    return fail_name && !strcmp(fail_name, name);
}

/* One context, current on every thread unless another is pushed. */
struct CUctx_st {
    int device;
};
static struct CUctx_st the_ctx;
static _Thread_local CUcontext ctx_stack[8];
static _Thread_local int ctx_depth;

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = ctx_depth ? ctx_stack[ctx_depth - 1] : &the_ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (!ctx || ctx_depth == (int)(sizeof(ctx_stack) / sizeof(ctx_stack[0])))
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    if (!ctx_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    if (!ctx || !ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    *ctxId = 1;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    (void)hStream;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = &the_ctx;
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    if (!pdptr || !p || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    bool pinned = in_arena(&pinned_arena, (uintptr_t)p) && find_live(&pinned_arena, p);
    pthread_mutex_unlock(&lock);
    if (!pinned)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
    return CUDA_SUCCESS;
}

/* A module is PTX text; the one kernel it can hold is the fingerprint. */
struct CUmod_st {
    bool fingerprint;
};
struct CUfunc_st {
    int unused;
};
static struct CUfunc_st fingerprint_fn;

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (fails("cuModuleLoadData"))
        return CUDA_ERROR_UNKNOWN;
    const char *ptx = image;
    if (strncmp(ptx, ".version ", 9) && !strstr(ptx, "\n.version "))
        return CUDA_ERROR_INVALID_IMAGE;
    *module = calloc(1, sizeof(**module));
    if (!*module)
        return CUDA_ERROR_OUT_OF_MEMORY;
    (*module)->fingerprint = strstr(ptx, ".entry " SHP_VALUES_ENTRY "(") != NULL;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    if (!hfunc || !hmod || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!hmod->fingerprint || strcmp(name, SHP_VALUES_ENTRY))
        return CUDA_ERROR_NOT_FOUND;
    *hfunc = &fingerprint_fn;
    return CUDA_SUCCESS;
}

/* A launched kernel runs later, as on a GPU: when an event recorded after it on its stream is
 * queried or synchronized, or its stream is synchronized. So what happens to its bytes between
 * the launch and then (another stream's kernel, in a test a plain write) is what it reads. */
struct launch {
    CUstream stream;
    uint64_t id;
    uint64_t src, n, out;
    unsigned blocks, threads;
    struct launch *next;
};
static struct launch *launches, **launches_tail = &launches;

/* The fingerprint kernel, as the PTX computes it: block b's threads take the words b * threads
 * + t, t + blocks * threads, ... and block 0 the tail; each block stores its two sums. */
static void run_fingerprint(const struct launch *l)
{
    const unsigned char *p = (const void *)(uintptr_t)l->src;
    uint64_t *out = (uint64_t *)(uintptr_t)l->out, stride = (uint64_t)l->blocks * l->threads;
    uint64_t a[SHP_VALUES_MAX_BLOCKS] = {0}, s[SHP_VALUES_MAX_BLOCKS] = {0};
    for (uint64_t i = 0; i < l->n / 8; i++) {
        uint64_t w, b = i % stride / l->threads; /* the block whose thread takes word i */
        memcpy(&w, p + 8 * i, 8);
        a[b] += shp_values_lane_a(w, i);
        s[b] += shp_values_lane_b(w, i);
    }
    shp_values_tail_sums(p, l->n, &a[0], &s[0]);
    for (unsigned b = 0; b < l->blocks; b++) {
        out[2 * b] = a[b];
        out[2 * b + 1] = s[b];
    }
}

/* Run the launches on `stream` up to id `upto`, in order. Under the lock: a query that finds
 * nothing left to run must not return while another thread's query still runs its kernel. */
static void run_launches(CUstream stream, uint64_t upto)
{
    pthread_mutex_lock(&lock);
    for (;;) {
        struct launch **pp = &launches, *l;
        while (*pp && !((*pp)->stream == stream && (*pp)->id <= upto))
            pp = &(*pp)->next;
        if (!(l = *pp))
            break;
        *pp = l->next;
        if (launches_tail == &l->next)
            launches_tail = pp;
        run_fingerprint(l);
        free(l);
    }
    pthread_mutex_unlock(&lock);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    (void)sharedMemBytes;
    if (f != &fingerprint_fn || !kernelParams || extra || !gridDimX || !blockDimX ||
        gridDimY != 1 || gridDimZ != 1 || blockDimY != 1 || blockDimZ != 1 ||
        gridDimX > SHP_VALUES_MAX_BLOCKS || blockDimX > SHP_VALUES_THREADS)
        return CUDA_ERROR_INVALID_VALUE;
    if (fails("cuLaunchKernel"))
        return CUDA_ERROR_UNKNOWN;
    struct CUstream_st *own = own_stream(hStream);
    if (own && own->capturing)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* kernels are not nodes here */
    struct launch *l = calloc(1, sizeof(*l));
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    l->stream = hStream;
    memcpy(&l->src, kernelParams[0], 8);
    memcpy(&l->n, kernelParams[1], 8);
    memcpy(&l->out, kernelParams[2], 8);
    l->blocks = gridDimX;
    l->threads = blockDimX;
    pthread_mutex_lock(&lock);
    l->id = ++launch_ids;
    *launches_tail = l;
    launches_tail = &l->next;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent hEvent)
{
    if (!hEvent)
        return CUDA_ERROR_INVALID_HANDLE;
    if (fails("cuEventQuery"))
        return CUDA_ERROR_UNKNOWN;
    if (hEvent->upto)
        run_launches(hEvent->stream, hEvent->upto);
    return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    return cuEventQuery(hEvent);
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
    free(hEvent);
    return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress ---- */

/* What the double answers: base name, the version it appeared in, and the entry points. */
static const struct {
    const char *name;
    int since;
    void *legacy, *per_thread;
} procs[] = {
    {"cuInit", 2000, (void *)cuInit, NULL},
    {"cuDriverGetVersion", 2020, (void *)cuDriverGetVersion, NULL},
    {"cuCtxGetDevice", 2000, (void *)cuCtxGetDevice, NULL},
    {"cuPointerGetAttribute", 4000, (void *)cuPointerGetAttribute, NULL},
    {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2, NULL},
    {"cuMemAllocManaged", 6000, (void *)cuMemAllocManaged, NULL},
    {"cuMemAllocAsync", 11020, (void *)cuMemAllocAsync, NULL},
    {"cuMemFree", 3020, (void *)cuMemFree_v2, NULL},
    {"cuMemFreeAsync", 11020, (void *)cuMemFreeAsync, NULL},
    {"cuMemAllocHost", 3020, (void *)cuMemAllocHost_v2, NULL},
    {"cuMemHostAlloc", 2020, (void *)cuMemHostAlloc, NULL},
    {"cuMemFreeHost", 2000, (void *)cuMemFreeHost, NULL},
    {"cuMemcpy", 4000, (void *)cuMemcpy, NULL},
    {"cuMemcpyAsync", 4000, (void *)cuMemcpyAsync, NULL},
    {"cuMemcpyHtoD", 3020, (void *)cuMemcpyHtoD_v2, (void *)cuMemcpyHtoD_v2_ptds},
    {"cuMemcpyDtoH", 3020, (void *)cuMemcpyDtoH_v2, (void *)cuMemcpyDtoH_v2_ptds},
    {"cuMemcpyDtoD", 3020, (void *)cuMemcpyDtoD_v2, NULL},
    {"cuMemcpyHtoDAsync", 3020, (void *)cuMemcpyHtoDAsync_v2, NULL},
    {"cuMemcpyDtoHAsync", 3020, (void *)cuMemcpyDtoHAsync_v2, NULL},
    {"cuMemcpyDtoDAsync", 3020, (void *)cuMemcpyDtoDAsync_v2, NULL},
    {"cuMemcpy2D", 3020, (void *)cuMemcpy2D_v2, NULL},
    {"cuMemcpy2DAsync", 3020, (void *)cuMemcpy2DAsync_v2, NULL},
    {"cuMemcpyPeer", 4000, (void *)cuMemcpyPeer, NULL},
    {"cuStreamCreate", 2000, (void *)cuStreamCreate, NULL},
    {"cuStreamSynchronize", 2000, (void *)cuStreamSynchronize, NULL},
    {"cuStreamBeginCapture", 10010, (void *)cuStreamBeginCapture_v2, NULL},
    {"cuStreamEndCapture", 10000, (void *)cuStreamEndCapture, NULL},
    {"cuEventCreate", 2000, (void *)cuEventCreate, NULL},
    {"cuEventRecord", 2000, (void *)cuEventRecord, NULL},
    {"cuStreamWaitEvent", 3020, (void *)cuStreamWaitEvent, NULL},
    {"cuStreamGetCaptureInfo", 11030, (void *)cuStreamGetCaptureInfo_v2, NULL},
    {"cuGraphInstantiateWithFlags", 11040, (void *)cuGraphInstantiateWithFlags, NULL},
    {"cuGraphLaunch", 10000, (void *)cuGraphLaunch, NULL},
    {"cuGetProcAddress", 12000, NULL, NULL}, /* filled in below: itself */
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        if (strcmp(procs[i].name, symbol))
            continue;
        if (cudaVersion < procs[i].since) {
            if (symbolStatus)
                *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_ERROR_NOT_FOUND;
        }
        bool pt = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        *pfn = pt && procs[i].per_thread ? procs[i].per_thread : procs[i].legacy;
        if (!*pfn)
            *pfn = (void *)cuGetProcAddress_v2;
        if (symbolStatus)
            *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus)
        *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

#pragma GCC visibility pop
