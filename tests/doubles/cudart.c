/* Test double of libcudart.so.13: device and pinned memory, checked copies, devices, streams,
 * events and graphs, without a GPU. Defined against the real cuda_runtime_api.h, so the compiler
 * holds every definition to CUDA's own prototype. See docs/testing.md for what it does not
 * simulate. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/doubles/arena.h"
#include "tests/doubles/cudart_ptds.h"
#include "tests/doubles/shp_double.h"

/* Everything not static is CUDA API; keep it exported even in a -fvisibility=hidden build. */
#pragma GCC visibility push(default)

static struct arena device_arena = {.hint = 0x7d0000000000, .want = 64 * GIB};
static struct arena pinned_arena = {.hint = 0x7c0000000000, .want = 16 * GIB};

/* Guards both arenas and the handle registry. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int device_count;
static int initial_device;

static _Thread_local cudaError_t last_error = cudaSuccess;
static _Thread_local int current_device = -1;

/* CUDA's handle types are pointers to these structs, which its headers leave incomplete. Every
 * live handle is on the registry list, so a stale or foreign handle is refused, not dereferenced.
 */
enum obj_kind { OBJ_STREAM = 1, OBJ_EVENT, OBJ_GRAPH, OBJ_EXEC };

struct obj {
    enum obj_kind kind;
    struct obj *next;
};

enum capture_state { CAPTURE_NONE, CAPTURE_ACTIVE, CAPTURE_INVALIDATED };

/* One piece of work captured into a graph: an async copy, or a host function
 * (cudaLaunchHostFunc, which is how the NCCL double captures its calls). */
struct node {
    cudaHostFn_t fn; /* NULL for a copy */
    void *data;
    void *dst;
    const void *src;
    size_t dpitch, spitch, width, height;
    enum cudaMemcpyKind kind;
};

struct nodes {
    struct node *v;
    size_t n, cap;
};

struct CUstream_st {
    struct obj obj;
    unsigned int flags;
    int device;
    bool legacy; /* the NULL stream: CUDA refuses to capture it */
    enum capture_state capture;
    enum cudaStreamCaptureMode mode;
    pthread_t capturer;
    struct nodes captured; /* the origin's: what the capture holds so far */
    /* Fork and join, as CUDA does them: a stream that waits on an event recorded on a capturing
     * stream joins that capture, and its work goes into the capture's graph (origin: the stream
     * that began it, itself for the origin; id: the capture's unique id). Each stream counts its
     * work in the capture (ops); a forked stream is joined back once a stream of the capture has
     * waited on an event recorded after its last work (joined == ops). Ending the capture with a
     * forked stream not joined back is cudaErrorStreamCaptureUnjoined. */
    struct CUstream_st *origin;
    unsigned long long id;
    unsigned long long ops, joined;
};

struct CUevent_st {
    struct obj obj;
    bool recorded;
    /* recorded on a capturing stream: which one, in which capture, after how much of its work */
    struct CUstream_st *from;
    unsigned long long capture, mark;
};

struct CUgraph_st {
    struct obj obj;
    unsigned long long id;
    struct nodes nodes;
};

struct CUgraphExec_st {
    struct obj obj;
    unsigned long long graph_id;
    struct nodes nodes; /* its own copy, as CUDA's executable is a snapshot of the graph */
};

static struct obj *registry;
static unsigned long long next_graph_id = 1;
static unsigned long long next_capture_id = 1;
static struct CUstream_st legacy_stream = {.legacy = true};
static _Thread_local struct CUstream_st thread_stream;

/* ---- errors ---------------------------------------------------------------------------------- */

/* Like the runtime, every failing call leaves its error for cudaGetLastError. */
static cudaError_t status(cudaError_t e)
{
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

#define CUDA_ERRORS(X)                                                                             \
    X(cudaSuccess, "no error")                                                                     \
    X(cudaErrorInvalidValue, "invalid argument")                                                   \
    X(cudaErrorMemoryAllocation, "out of memory")                                                  \
    X(cudaErrorInitializationError, "initialization error")                                        \
    X(cudaErrorCudartUnloading, "driver shutting down")                                            \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument")                             \
    X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                        \
    X(cudaErrorInvalidSymbol, "invalid device symbol")                                             \
    X(cudaErrorInvalidHostPointer, "invalid host pointer")                                         \
    X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                     \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                        \
    X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                     \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                            \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                   \
    X(cudaErrorIllegalState, "the operation cannot be performed in the present state")             \
    X(cudaErrorNotReady, "device not ready")                                                       \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                         \
    X(cudaErrorLaunchFailure, "unspecified launch failure")                                        \
    X(cudaErrorNotPermitted, "operation not permitted")                                            \
    X(cudaErrorNotSupported, "operation not supported")                                            \
    X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")       \
    X(cudaErrorStreamCaptureInvalidated,                                                           \
      "operation failed due to a previous error during capture")                                   \
    X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")     \
    X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                        \
    X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")  \
    X(cudaErrorStreamCaptureImplicit,                                                              \
      "operation would make the legacy stream depend on a capturing blocking stream")              \
    X(cudaErrorStreamCaptureWrongThread,                                                           \
      "attempt to terminate a thread-local capture sequence from another thread")                  \
    X(cudaErrorUnknown, "unknown error")

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
#define NAME_CASE(code, text)                                                                      \
    case code:                                                                                     \
        return #code;
        CUDA_ERRORS(NAME_CASE)
#undef NAME_CASE
    default:
        return "unrecognized error code";
    }
}

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
#define TEXT_CASE(code, text)                                                                      \
    case code:                                                                                     \
        return text;
        CUDA_ERRORS(TEXT_CASE)
#undef TEXT_CASE
    default:
        return "unrecognized error code";
    }
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;

    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

/* ---- devices --------------------------------------------------------------------------------- */

/* SHP_DOUBLE_RT_ERRNO=M: every copy that moves bytes returns with errno M, as a real runtime's
 * can (its driver's ioctls), for tests that a wrapper's caller sees errno as the copy left it. */
static int copy_errno;

static int env_int(const char *name, int fallback, int lo, int hi)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (!s || !*s)
        return fallback;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return fallback;
    return (int)v;
}

static void read_env(void)
{
    device_count = env_int("SHAPETRACE_DOUBLE_DEVICES", 8, 0, 4096);
    /* torchrun's LOCAL_RANK is what a real job passes to cudaSetDevice; starting there lets a
     * program that never calls it still spread its ranks over devices. */
    initial_device = env_int("LOCAL_RANK", 0, 0, device_count > 0 ? device_count - 1 : 0);
    copy_errno = env_int("SHP_DOUBLE_RT_ERRNO", 0, 0, 4095);
}

static int ndevices(void)
{
    pthread_once(&env_once, read_env);
    return device_count;
}

static int get_device(void)
{
    if (current_device < 0) {
        pthread_once(&env_once, read_env);
        current_device = initial_device;
    }
    return current_device;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return status(cudaErrorInvalidValue);
    *count = ndevices();
    return status(*count > 0 ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= ndevices())
        return status(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return status(cudaErrorInvalidValue);
    *device = get_device();
    return cudaSuccess;
}

/* Copies finish before they return, so there is never anything to wait for. */
cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return status(cudaErrorInvalidValue);
    *driverVersion = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return status(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------------- */

static cudaError_t alloc_in(struct arena *a, void **p, size_t size)
{
    int err;

    if (!p)
        return cudaErrorInvalidValue;
    *p = NULL;
    /* cudaMalloc(&p, 0) succeeds and gives NULL. */
    if (size == 0)
        return cudaSuccess;
    pthread_mutex_lock(&lock);
    err = arena_alloc(a, size, get_device(), p);
    pthread_mutex_unlock(&lock);
    return err < 0 ? cudaErrorMemoryAllocation : cudaSuccess;
}

static cudaError_t free_in(struct arena *a, void *p)
{
    int err;

    if (!p)
        return cudaSuccess;
    pthread_mutex_lock(&lock);
    err = arena_free(a, p);
    pthread_mutex_unlock(&lock);
    return err < 0 ? cudaErrorInvalidValue : cudaSuccess;
}

static bool live_obj(const void *p, enum obj_kind kind)
{
    const struct obj *o;

    for (o = registry; o; o = o->next)
        if (o == p && o->kind == kind)
            return true;
    return false;
}

/* The stream a handle names. 0 is the legacy stream, except for the _ptsz entry points, which
 * programs built with per-thread default streams call, where it is the calling thread's stream.
 * Returns NULL for a handle that is not a live stream. Caller holds lock. */
static struct CUstream_st *resolve_stream(cudaStream_t s, bool per_thread)
{
    if (s == cudaStreamPerThread || (!s && per_thread))
        return &thread_stream;
    if (!s || s == cudaStreamLegacy)
        return &legacy_stream;
    return live_obj(s, OBJ_STREAM) ? s : NULL;
}

static cudaError_t check_stream(cudaStream_t s, bool per_thread)
{
    struct CUstream_st *st;

    pthread_mutex_lock(&lock);
    st = resolve_stream(s, per_thread);
    pthread_mutex_unlock(&lock);
    return st ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    return status(alloc_in(&device_arena, devPtr, size));
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t hStream, bool per_thread)
{
    cudaError_t e = check_stream(hStream, per_thread);

    if (e == cudaSuccess)
        e = alloc_in(&device_arena, devPtr, size);
    return status(e);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, false);
}

cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, true);
}

cudaError_t cudaFree(void *devPtr)
{
    return status(free_in(&device_arena, devPtr));
}

static cudaError_t free_async(void *devPtr, cudaStream_t hStream, bool per_thread)
{
    cudaError_t e = check_stream(hStream, per_thread);

    if (e == cudaSuccess)
        e = free_in(&device_arena, devPtr);
    return status(e);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, false);
}

cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, true);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return status(alloc_in(&pinned_arena, ptr, size));
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    unsigned int known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;

    if (flags & ~known)
        return status(cudaErrorInvalidValue);
    return status(alloc_in(&pinned_arena, pHost, size));
}

cudaError_t cudaFreeHost(void *ptr)
{
    return status(free_in(&pinned_arena, ptr));
}

/* What [p, p + extent) is. MEM_BAD: it starts in one of our ranges but not in a live allocation,
 * or runs past the end of the allocation it starts in. */
enum mem { MEM_HOST, MEM_PINNED, MEM_DEVICE, MEM_BAD };

static enum mem classify(const void *p, size_t extent, int *device)
{
    struct arena *arenas[] = {&device_arena, &pinned_arena};
    enum mem kinds[] = {MEM_DEVICE, MEM_PINNED};
    enum mem m = MEM_HOST;

    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < 2; i++) {
        const struct block *b;

        if (!in_arena(arenas[i], (uintptr_t)p))
            continue;
        b = find_live(arenas[i], p);
        m = MEM_BAD;
        if (b && extent <= b->requested - ((uintptr_t)p - (uintptr_t)arenas[i]->base - b->off)) {
            m = kinds[i];
            if (device)
                *device = b->device;
        }
    }
    pthread_mutex_unlock(&lock);
    return m;
}

int shp_double_is_device(const void *p)
{
    int in;

    pthread_mutex_lock(&lock);
    in = in_arena(&device_arena, (uintptr_t)p);
    pthread_mutex_unlock(&lock);
    return in;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    int device = -2;
    enum mem m;

    if (!attributes)
        return status(cudaErrorInvalidValue);
    memset(attributes, 0, sizeof(*attributes));
    m = classify(ptr, 1, &device);
    switch (m) {
    case MEM_DEVICE:
        attributes->type = cudaMemoryTypeDevice;
        attributes->devicePointer = (void *)ptr;
        break;
    case MEM_PINNED:
        /* Pinned memory is mapped: the device sees it at the same address (UVA). */
        attributes->type = cudaMemoryTypeHost;
        attributes->devicePointer = (void *)ptr;
        attributes->hostPointer = (void *)ptr;
        break;
    case MEM_HOST:
        /* Since CUDA 11 an unregistered host pointer is a success, not an error. */
        attributes->type = cudaMemoryTypeUnregistered;
        break;
    case MEM_BAD:
        return status(cudaErrorInvalidValue);
    }
    attributes->device = device;
    return cudaSuccess;
}

static cudaError_t memset_checked(void *devPtr, int value, size_t count)
{
    if (count == 0)
        return cudaSuccess;
    if (!devPtr || classify(devPtr, count, NULL) != MEM_DEVICE)
        return cudaErrorInvalidValue;
    memset(devPtr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    return status(memset_checked(devPtr, value, count));
}

cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    return status(memset_checked(devPtr, value, count));
}

static cudaError_t memset_async(void *devPtr, int value, size_t count, cudaStream_t stream,
                                bool per_thread)
{
    cudaError_t e = check_stream(stream, per_thread);

    if (e == cudaSuccess)
        e = memset_checked(devPtr, value, count);
    return status(e);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return memset_async(devPtr, value, count, stream, false);
}

cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return memset_async(devPtr, value, count, stream, true);
}

/* ---- the driver underneath ------------------------------------------------------------------ */

/* With SHP_DOUBLE_VIA_DRIVER=1 the bytes of every checked copy are moved by the driver's
 * cuMemcpy, found the way the real runtime finds its driver (dlopen libcuda.so.1, dlsym
 * cuGetProcAddress_v2, one lookup): a shared runtime with a driver below it. */
typedef int (*driver_proc_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*driver_copy_fn)(uintptr_t, uintptr_t, size_t);

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static driver_copy_fn driver_memcpy;

static void *driver_copy_once(void *arg)
{
    uint64_t from = 1, to = 0;
    driver_memcpy((uintptr_t)&to, (uintptr_t)&from, sizeof(from));
    return arg;
}

static void find_driver(void)
{
    const char *v = getenv("SHP_DOUBLE_VIA_DRIVER");
    if (!v || strcmp(v, "1"))
        return;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    driver_proc_fn proc = h ? (driver_proc_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
    void *p = NULL;
    int st = -1;
    if (proc && proc("cuMemcpy", &p, CUDART_VERSION, 0, &st) == 0 && st == 0)
        driver_memcpy = (driver_copy_fn)p;
    /* And once from a thread of its own, outside any runtime call, as a runtime's internal work. */
    pthread_t t;
    if (driver_memcpy && !pthread_create(&t, NULL, driver_copy_once, NULL))
        pthread_join(t, NULL);
}

static driver_copy_fn driver_copy(void)
{
    pthread_once(&driver_once, find_driver);
    return driver_memcpy;
}

/* ---- copies ---------------------------------------------------------------------------------- */

/* Bytes a pitched region covers: every row but the last is a whole pitch. */
static bool pitched_extent(size_t pitch, size_t width, size_t height, size_t *out)
{
    if (height - 1 > 0 && pitch > (SIZE_MAX - width) / (height - 1))
        return false;
    *out = pitch * (height - 1) + width;
    return true;
}

/* Every copy comes here; a 1-D copy is one row. With an explicit kind each side must be the
 * memory the kind names (device = a live cudaMalloc allocation; host = anything else that is not
 * ours, or pinned memory), as the runtime checks under unified addressing; cudaMemcpyDefault
 * infers it. Neither side may run past the end of the allocation it starts in. */
static cudaError_t copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t height, enum cudaMemcpyKind kind, bool move)
{
    bool dst_dev = false, src_dev = false;
    size_t dext, sext;
    enum mem dm, sm;

    switch (kind) {
    case cudaMemcpyHostToHost:
        break;
    case cudaMemcpyHostToDevice:
        dst_dev = true;
        break;
    case cudaMemcpyDeviceToHost:
        src_dev = true;
        break;
    case cudaMemcpyDeviceToDevice:
        dst_dev = src_dev = true;
        break;
    case cudaMemcpyDefault:
        break;
    default:
        return cudaErrorInvalidMemcpyDirection;
    }
    if (dpitch < width || spitch < width)
        return cudaErrorInvalidPitchValue;
    if (width == 0 || height == 0)
        return cudaSuccess;
    if (!dst || !src)
        return cudaErrorInvalidValue;
    if (!pitched_extent(dpitch, width, height, &dext) ||
        !pitched_extent(spitch, width, height, &sext))
        return cudaErrorInvalidValue;
    dm = classify(dst, dext, NULL);
    sm = classify(src, sext, NULL);
    if (dm == MEM_BAD || sm == MEM_BAD)
        return cudaErrorInvalidValue;
    if (kind != cudaMemcpyDefault &&
        ((dm == MEM_DEVICE) != dst_dev || (sm == MEM_DEVICE) != src_dev))
        return cudaErrorInvalidValue;
    if (!move)
        return cudaSuccess;
    driver_copy_fn drv = driver_copy();
    for (size_t row = 0; row < height; row++) {
        char *d = (char *)dst + row * dpitch;
        const char *sr = (const char *)src + row * spitch;
        if (!drv)
            memmove(d, sr, width);
        else if (drv((uintptr_t)d, (uintptr_t)sr, width) != 0)
            return cudaErrorUnknown;
    }
    pthread_once(&env_once, read_env);
    if (copy_errno)
        errno = copy_errno;
    return cudaSuccess;
}

static cudaError_t copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t height, enum cudaMemcpyKind kind)
{
    return copy_rows(dst, dpitch, src, spitch, width, height, kind, true);
}

static bool capture_node(cudaStream_t stream, bool per_thread, const struct node *n,
                         cudaError_t *e);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return status(copy_2d(dst, count, src, count, count, 1, kind));
}

cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return status(copy_2d(dst, count, src, count, count, 1, kind));
}

static cudaError_t copy_async(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream, bool per_thread)
{
    cudaError_t e = check_stream(stream, per_thread);
    struct node n = {.dst = dst,
                     .src = src,
                     .dpitch = dpitch,
                     .spitch = spitch,
                     .width = width,
                     .height = height,
                     .kind = kind};

    /* Checked now, as CUDA checks a captured copy's arguments; moved at each launch. */
    if (e == cudaSuccess)
        e = copy_rows(dst, dpitch, src, spitch, width, height, kind, false);
    if (e == cudaSuccess && !capture_node(stream, per_thread, &n, &e))
        e = copy_2d(dst, dpitch, src, spitch, width, height, kind);
    return status(e);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    return copy_async(dst, count, src, count, count, 1, kind, stream, false);
}

cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream)
{
    return copy_async(dst, count, src, count, count, 1, kind, stream, true);
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind)
{
    return status(copy_2d(dst, dpitch, src, spitch, width, height, kind));
}

cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return status(copy_2d(dst, dpitch, src, spitch, width, height, kind));
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream)
{
    return copy_async(dst, dpitch, src, spitch, width, height, kind, stream, false);
}

cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind,
                                   cudaStream_t stream)
{
    return copy_async(dst, dpitch, src, spitch, width, height, kind, stream, true);
}

/* Both sides must be device memory; which device owns each allocation is not checked, since
 * with peer access enabled CUDA copies between any two. */
static cudaError_t copy_peer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
    int n = ndevices();

    if (dstDevice < 0 || dstDevice >= n || srcDevice < 0 || srcDevice >= n)
        return cudaErrorInvalidDevice;
    return copy_2d(dst, count, src, count, count, 1, cudaMemcpyDeviceToDevice);
}

cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
    return status(copy_peer(dst, dstDevice, src, srcDevice, count));
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                size_t count, cudaStream_t stream)
{
    cudaError_t e = check_stream(stream, false);

    if (e == cudaSuccess)
        e = copy_peer(dst, dstDevice, src, srcDevice, count);
    return status(e);
}

/* ---- streams and events ---------------------------------------------------------------------- */

static void register_obj(struct obj *o, enum obj_kind kind)
{
    o->kind = kind;
    o->next = registry;
    registry = o;
}

static bool unregister_obj(const void *p, enum obj_kind kind)
{
    struct obj **link;

    for (link = &registry; *link; link = &(*link)->next) {
        if (*link == p && (*link)->kind == kind) {
            *link = (*link)->next;
            return true;
        }
    }
    return false;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    struct CUstream_st *s;

    if (!pStream || (flags & ~(unsigned int)cudaStreamNonBlocking))
        return status(cudaErrorInvalidValue);
    s = calloc(1, sizeof(*s));
    if (!s)
        return status(cudaErrorMemoryAllocation);
    s->flags = flags;
    s->device = get_device();
    pthread_mutex_lock(&lock);
    register_obj(&s->obj, OBJ_STREAM);
    pthread_mutex_unlock(&lock);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    bool found;

    pthread_mutex_lock(&lock);
    found = stream && unregister_obj(stream, OBJ_STREAM);
    pthread_mutex_unlock(&lock);
    if (!found)
        return status(cudaErrorInvalidResourceHandle);
    free(stream);
    return cudaSuccess;
}

static void leave_capture(struct CUstream_st *o, bool invalid);

/* Nothing is ever pending, but waiting on a capturing stream is illegal and, as in CUDA, it
 * invalidates the capture. */
static cudaError_t stream_wait(cudaStream_t stream, bool per_thread)
{
    cudaError_t e = cudaSuccess;
    struct CUstream_st *s;

    pthread_mutex_lock(&lock);
    s = resolve_stream(stream, per_thread);
    if (!s) {
        e = cudaErrorInvalidResourceHandle;
    } else if (s->capture != CAPTURE_NONE) {
        if (s->origin && s->origin != s)
            leave_capture(s->origin, true); /* a forked stream's wait invalidates its capture */
        else
            s->capture = CAPTURE_INVALIDATED;
        e = cudaErrorStreamCaptureUnsupported;
    }
    pthread_mutex_unlock(&lock);
    return status(e);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    return stream_wait(stream, false);
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    return stream_wait(stream, true);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    return stream_wait(stream, false);
}

cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    return stream_wait(stream, true);
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    struct CUevent_st *ev;

    if (!event)
        return status(cudaErrorInvalidValue);
    ev = calloc(1, sizeof(*ev));
    if (!ev)
        return status(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&lock);
    register_obj(&ev->obj, OBJ_EVENT);
    pthread_mutex_unlock(&lock);
    *event = ev;
    return cudaSuccess;
}

static cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, bool per_thread)
{
    cudaError_t e = cudaSuccess;

    struct CUstream_st *s;

    pthread_mutex_lock(&lock);
    if (!event || !live_obj(event, OBJ_EVENT) || !(s = resolve_stream(stream, per_thread))) {
        e = cudaErrorInvalidResourceHandle;
    } else {
        event->recorded = true;
        bool captured = s->capture == CAPTURE_ACTIVE && s->origin;
        event->from = captured ? s : NULL;
        event->capture = captured ? s->origin->id : 0;
        event->mark = captured ? s->ops : 0;
    }
    pthread_mutex_unlock(&lock);
    return status(e);
}

/* Whether stream s belongs to the capture whose origin is o. Caller holds lock. */
static bool in_capture(const struct CUstream_st *s, const struct CUstream_st *o)
{
    return s->capture != CAPTURE_NONE && s->origin == o;
}

/* Every stream of the capture whose origin is o leaves it (o included); with `invalid`, the
 * capture is invalidated instead, o keeping it until its end reports it. Caller holds lock. */
static void leave_capture(struct CUstream_st *o, bool invalid)
{
    for (struct obj *ob = registry; ob; ob = ob->next) {
        struct CUstream_st *s = (struct CUstream_st *)ob;
        if (ob->kind != OBJ_STREAM || s == o || !in_capture(s, o))
            continue;
        s->capture = CAPTURE_NONE;
        s->origin = NULL;
    }
    if (invalid)
        o->capture = CAPTURE_INVALIDATED;
}

/* A wait on an event recorded in a capture: the waiting stream joins that capture (a fork), or,
 * already in it, takes on the recording stream's work up to the event (a join). A wait on an
 * event of another capture is cudaErrorStreamCaptureIsolation, and invalidates it. */
static cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
                                     bool per_thread)
{
    cudaError_t e = cudaSuccess;
    struct CUstream_st *s;

    if (flags & ~(unsigned int)cudaEventWaitExternal)
        return status(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    s = resolve_stream(stream, per_thread);
    if (!s || !event || !live_obj(event, OBJ_EVENT)) {
        e = cudaErrorInvalidResourceHandle;
    } else if (event->from && event->capture && event->from->origin &&
               event->from->origin->id == event->capture &&
               event->from->origin->capture == CAPTURE_ACTIVE) {
        struct CUstream_st *o = event->from->origin;
        if (s->legacy) {
            e = cudaErrorStreamCaptureImplicit;
            leave_capture(o, true);
        } else if (s->capture == CAPTURE_NONE) {
            s->capture = CAPTURE_ACTIVE;
            s->mode = o->mode;
            s->capturer = o->capturer;
            s->origin = o;
            s->ops = 0;
            s->joined = ~0ull; /* a fork, joined back only by a wait on its own work */
        } else if (s->origin != o) {
            e = cudaErrorStreamCaptureIsolation;
            leave_capture(o, true);
            if (s->origin)
                leave_capture(s->origin, true);
        }
        if (e == cudaSuccess && event->from != s && event->mark == event->from->ops)
            event->from->joined = event->mark;
    }
    pthread_mutex_unlock(&lock);
    return status(e);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    return stream_wait_event(stream, event, flags, false);
}

cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    return stream_wait_event(stream, event, flags, true);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    return event_record(event, stream, false);
}

cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    return event_record(event, stream, true);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    bool ok;

    pthread_mutex_lock(&lock);
    ok = event && live_obj(event, OBJ_EVENT);
    pthread_mutex_unlock(&lock);
    return status(ok ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    bool found;

    pthread_mutex_lock(&lock);
    found = event && unregister_obj(event, OBJ_EVENT);
    pthread_mutex_unlock(&lock);
    if (!found)
        return status(cudaErrorInvalidResourceHandle);
    free(event);
    return cudaSuccess;
}

/* ---- capture and graphs ---------------------------------------------------------------------- */

/* As in CUDA, an async copy or a host function issued on a capturing stream runs nothing then:
 * it becomes a node of the capture's graph, and runs at each launch of an exec of that graph,
 * in capture order. Synchronous copies still run at once (CUDA would refuse some of them). */

static void free_nodes(struct nodes *ns)
{
    free(ns->v);
    *ns = (struct nodes){0};
}

/* Under the lock. */
static bool add_node(struct nodes *ns, const struct node *n)
{
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 8;
        struct node *v = realloc(ns->v, cap * sizeof(*v));
        if (!v)
            return false;
        ns->v = v;
        ns->cap = cap;
    }
    ns->v[ns->n++] = *n;
    return true;
}

/* Whether stream is capturing; if it is, n joins its capture (*e: an error, or unchanged). */
static bool capture_node(cudaStream_t stream, bool per_thread, const struct node *n, cudaError_t *e)
{
    pthread_mutex_lock(&lock);
    struct CUstream_st *s = resolve_stream(stream, per_thread);
    bool capturing = s && s->capture == CAPTURE_ACTIVE;
    /* A forked stream's work goes into the graph of the capture it joined. */
    struct CUstream_st *o = capturing && s->origin ? s->origin : s;
    if (capturing && !add_node(&o->captured, n))
        *e = cudaErrorMemoryAllocation;
    else if (capturing)
        s->ops++;
    pthread_mutex_unlock(&lock);
    return capturing;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    cudaError_t e = check_stream(stream, false);
    struct node n = {.fn = fn, .data = userData};

    if (e == cudaSuccess && !fn)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess && !capture_node(stream, false, &n, &e))
        fn(userData); /* nothing is pending: the stream's work is done */
    return status(e);
}

static cudaError_t begin_capture(cudaStream_t stream, enum cudaStreamCaptureMode mode,
                                 bool per_thread)
{
    cudaError_t e = cudaSuccess;
    struct CUstream_st *s;

    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return status(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    s = resolve_stream(stream, per_thread);
    if (!s) {
        e = cudaErrorInvalidResourceHandle;
    } else if (s->legacy) {
        e = cudaErrorStreamCaptureUnsupported;
    } else if (s->capture != CAPTURE_NONE) {
        e = cudaErrorIllegalState;
    } else {
        s->capture = CAPTURE_ACTIVE;
        s->mode = mode;
        s->capturer = pthread_self();
        s->origin = s;
        s->id = next_capture_id++;
        s->ops = s->joined = 0;
        free_nodes(&s->captured);
    }
    pthread_mutex_unlock(&lock);
    return status(e);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    return begin_capture(stream, mode, false);
}

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    return begin_capture(stream, mode, true);
}

/* Whether a stream forked into the capture whose origin is o has work (or a fork) that no
 * stream of the capture has waited on. Caller holds lock. */
static bool unjoined(const struct CUstream_st *o)
{
    for (const struct obj *ob = registry; ob; ob = ob->next) {
        const struct CUstream_st *s = (const struct CUstream_st *)ob;
        if (ob->kind == OBJ_STREAM && s != o && in_capture(s, o) && s->joined != s->ops)
            return true;
    }
    return false;
}

static cudaError_t end_capture(cudaStream_t stream, cudaGraph_t *pGraph, bool per_thread)
{
    cudaError_t e = cudaSuccess;
    struct CUstream_st *s;
    struct CUgraph_st *g = NULL;

    if (!pGraph)
        return status(cudaErrorInvalidValue);
    *pGraph = NULL;
    pthread_mutex_lock(&lock);
    s = resolve_stream(stream, per_thread);
    if (!s) {
        e = cudaErrorInvalidResourceHandle;
    } else if (s->capture == CAPTURE_NONE) {
        e = cudaErrorIllegalState;
    } else if (s->origin != s) {
        e = cudaErrorStreamCaptureUnmatched; /* a forked stream cannot end the capture */
        leave_capture(s->origin, true);
    } else if (s->mode != cudaStreamCaptureModeRelaxed &&
               !pthread_equal(s->capturer, pthread_self())) {
        e = cudaErrorStreamCaptureWrongThread;
    } else if (s->capture == CAPTURE_INVALIDATED) {
        leave_capture(s, false);
        s->capture = CAPTURE_NONE;
        s->origin = NULL;
        free_nodes(&s->captured);
        e = cudaErrorStreamCaptureInvalidated;
    } else if (unjoined(s)) {
        leave_capture(s, false);
        s->capture = CAPTURE_NONE;
        s->origin = NULL;
        free_nodes(&s->captured);
        e = cudaErrorStreamCaptureUnjoined;
    } else if (!(g = calloc(1, sizeof(*g)))) {
        e = cudaErrorMemoryAllocation;
    } else {
        leave_capture(s, false);
        s->origin = NULL;
        s->capture = CAPTURE_NONE;
        g->nodes = s->captured;
        s->captured = (struct nodes){0};
        g->id = next_graph_id++;
        register_obj(&g->obj, OBJ_GRAPH);
        *pGraph = g;
    }
    pthread_mutex_unlock(&lock);
    return status(e);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return end_capture(stream, pGraph, false);
}

cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return end_capture(stream, pGraph, true);
}

static cudaError_t is_capturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus,
                                bool per_thread)
{
    cudaError_t e = cudaSuccess;
    struct CUstream_st *s;

    if (!pCaptureStatus)
        return status(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    s = resolve_stream(stream, per_thread);
    if (!s)
        e = cudaErrorInvalidResourceHandle;
    else if (s->capture == CAPTURE_ACTIVE)
        *pCaptureStatus = cudaStreamCaptureStatusActive;
    else if (s->capture == CAPTURE_INVALIDATED)
        *pCaptureStatus = cudaStreamCaptureStatusInvalidated;
    else
        *pCaptureStatus = cudaStreamCaptureStatusNone;
    pthread_mutex_unlock(&lock);
    return status(e);
}

/* The capture a stream is in, its own or one it joined: CUDA 13's seven arguments (a caller
 * built against CUDA 12 passes six; the last is then never read). No graph under construction
 * and no dependencies are given (NULL, 0). */
static cudaError_t capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus *status_out,
                                unsigned long long *id_out, cudaGraph_t *graph_out,
                                const cudaGraphNode_t **deps_out,
                                const cudaGraphEdgeData **edges_out, size_t *ndeps_out,
                                bool per_thread)
{
    cudaError_t e = cudaSuccess;
    struct CUstream_st *s;

    if (!status_out)
        return status(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    s = resolve_stream(stream, per_thread);
    if (!s) {
        e = cudaErrorInvalidResourceHandle;
    } else {
        *status_out = s->capture == CAPTURE_ACTIVE        ? cudaStreamCaptureStatusActive
                      : s->capture == CAPTURE_INVALIDATED ? cudaStreamCaptureStatusInvalidated
                                                          : cudaStreamCaptureStatusNone;
        if (id_out && s->capture != CAPTURE_NONE && s->origin)
            *id_out = s->origin->id;
        if (graph_out)
            *graph_out = NULL;
        if (deps_out)
            *deps_out = NULL;
        if (edges_out)
            *edges_out = NULL;
        if (ndeps_out)
            *ndeps_out = 0;
    }
    pthread_mutex_unlock(&lock);
    return status(e);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *st,
                                     unsigned long long *id, cudaGraph_t *graph,
                                     const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                     size_t *ndeps)
{
    return capture_info(stream, st, id, graph, deps, edges, ndeps, false);
}

cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *st,
                                          unsigned long long *id, cudaGraph_t *graph,
                                          const cudaGraphNode_t **deps,
                                          const cudaGraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(stream, st, id, graph, deps, edges, ndeps, true);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return is_capturing(stream, pCaptureStatus, false);
}

cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                       enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return is_capturing(stream, pCaptureStatus, true);
}

static cudaError_t instantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph)
{
    cudaError_t e = cudaSuccess;
    struct CUgraphExec_st *x;

    if (!pGraphExec || !graph)
        return status(cudaErrorInvalidValue);
    x = calloc(1, sizeof(*x));
    if (!x)
        return status(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&lock);
    if (!live_obj(graph, OBJ_GRAPH)) {
        e = cudaErrorInvalidValue;
    } else if (graph->nodes.n && !(x->nodes.v = malloc(graph->nodes.n * sizeof(struct node)))) {
        e = cudaErrorMemoryAllocation;
    } else {
        if (graph->nodes.n)
            memcpy(x->nodes.v, graph->nodes.v, graph->nodes.n * sizeof(struct node));
        x->nodes.n = x->nodes.cap = graph->nodes.n;
        x->graph_id = graph->id;
        register_obj(&x->obj, OBJ_EXEC);
        *pGraphExec = x;
    }
    pthread_mutex_unlock(&lock);
    if (e != cudaSuccess)
        free(x);
    return status(e);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    (void)flags;
    return instantiate(pGraphExec, graph);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags)
{
    (void)flags;
    return instantiate(pGraphExec, graph);
}

/* Runs the exec's nodes in capture order, outside the lock: a host function may call the
 * runtime. A copy that fails stops the launch with its error. */
static cudaError_t graph_launch(cudaGraphExec_t graphExec, cudaStream_t stream, bool per_thread)
{
    cudaError_t e = cudaSuccess;
    struct nodes ns = {0};

    if (!graphExec)
        return status(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    if (!live_obj(graphExec, OBJ_EXEC))
        e = cudaErrorInvalidValue;
    else if (!resolve_stream(stream, per_thread))
        e = cudaErrorInvalidResourceHandle;
    else
        ns = graphExec->nodes;
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; e == cudaSuccess && i < ns.n; i++) {
        const struct node *n = &ns.v[i];
        if (n->fn)
            n->fn(n->data);
        else
            e = copy_2d(n->dst, n->dpitch, n->src, n->spitch, n->width, n->height, n->kind);
    }
    return status(e);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return graph_launch(graphExec, stream, false);
}

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return graph_launch(graphExec, stream, true);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    bool found;

    pthread_mutex_lock(&lock);
    found = graphExec && unregister_obj(graphExec, OBJ_EXEC);
    pthread_mutex_unlock(&lock);
    if (!found)
        return status(cudaErrorInvalidValue);
    free_nodes(&graphExec->nodes);
    free(graphExec);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    bool found;

    pthread_mutex_lock(&lock);
    found = graph && unregister_obj(graph, OBJ_GRAPH);
    pthread_mutex_unlock(&lock);
    if (!found)
        return status(cudaErrorInvalidValue);
    free_nodes(&graph->nodes);
    free(graph);
    return cudaSuccess;
}

#pragma GCC visibility pop
