/* Test double of the static CUDA runtime (libcudart_static.a): linked into the program, so its
 * cudaMemcpy never reaches a shared object; it finds the driver the way the real one does
 * (dlopen libcuda.so.1, dlsym cuGetProcAddress_v2, then one lookup per entry point) and does all
 * its work through the driver. SHP_STATIC_PER_THREAD=1 asks for the per-thread-stream forms. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);

/* The entry points, in lookup order; a few are not traced and must come back unwrapped. */
#define ENTRIES(X)                                                                                 \
    X(cuInit, (unsigned))                                                                          \
    X(cuCtxGetDevice, (CUdevice *))                                                                \
    X(cuMemAlloc, (CUdeviceptr *, size_t))                                                         \
    X(cuMemFree, (CUdeviceptr))                                                                    \
    X(cuMemAllocHost, (void **, size_t))                                                           \
    X(cuMemFreeHost, (void *))                                                                     \
    X(cuMemcpy, (CUdeviceptr, CUdeviceptr, size_t))                                                \
    X(cuMemcpyHtoD, (CUdeviceptr, const void *, size_t))                                           \
    X(cuMemcpyDtoH, (void *, CUdeviceptr, size_t))                                                 \
    X(cuMemcpyDtoD, (CUdeviceptr, CUdeviceptr, size_t))                                            \
    X(cuMemcpyHtoDAsync, (CUdeviceptr, const void *, size_t, CUstream))                            \
    X(cuMemcpyDtoHAsync, (void *, CUdeviceptr, size_t, CUstream))                                  \
    X(cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                             \
    X(cuMemcpy2D, (const CUDA_MEMCPY2D *))                                                         \
    X(cuStreamCreate, (CUstream *, unsigned))                                                      \
    X(cuStreamSynchronize, (CUstream))                                                             \
    X(cuStreamBeginCapture, (CUstream, CUstreamCaptureMode))                                       \
    X(cuStreamEndCapture, (CUstream, CUgraph *))                                                   \
    X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))                   \
    X(cuGraphLaunch, (CUgraphExec, CUstream))

#define FIELD(name, params) CUresult(*name) params;
static struct {
    ENTRIES(FIELD)
} drv;
#undef FIELD

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cudaError_t init_error = cudaSuccess;

static void find_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    proc_fn proc = h ? (proc_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!proc) {
        init_error = cudaErrorInsufficientDriver;
        return;
    }
    const char *pt = getenv("SHP_STATIC_PER_THREAD");
    cuuint64_t flags = pt && !strcmp(pt, "1") ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                              : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    CUdriverProcAddressQueryResult st;
#define LOOKUP(name, params)                                                                       \
    if (proc(#name, (void **)&drv.name, CUDA_VERSION, flags, &st) != CUDA_SUCCESS ||               \
        st != CU_GET_PROC_ADDRESS_SUCCESS) {                                                       \
        fprintf(stderr, "static runtime double: no %s\n", #name);                                  \
        init_error = cudaErrorSymbolNotFound;                                                      \
        return;                                                                                    \
    }
    ENTRIES(LOOKUP)
#undef LOOKUP
    if (drv.cuInit(0) != CUDA_SUCCESS)
        init_error = cudaErrorInitializationError;
}

/* The driver's answer as the runtime's. */
static cudaError_t ready(void)
{
    pthread_once(&once, find_driver);
    return init_error;
}

static cudaError_t rt(CUresult r)
{
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

#define READY()                                                                                    \
    do {                                                                                           \
        cudaError_t e_ = ready();                                                                  \
        if (e_ != cudaSuccess)                                                                     \
            return e_;                                                                             \
    } while (0)

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    READY();
    return rt(drv.cuMemAlloc((CUdeviceptr *)devPtr, size));
}

cudaError_t cudaFree(void *devPtr)
{
    READY();
    return rt(drv.cuMemFree(DP(devPtr)));
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    READY();
    return rt(drv.cuMemAllocHost(ptr, size));
}

cudaError_t cudaFreeHost(void *ptr)
{
    READY();
    return rt(drv.cuMemFreeHost(ptr));
}

cudaError_t cudaGetDevice(int *device)
{
    READY();
    return rt(drv.cuCtxGetDevice(device));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    READY();
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return rt(drv.cuMemcpyHtoD(DP(dst), src, count));
    case cudaMemcpyDeviceToHost:
        return rt(drv.cuMemcpyDtoH(dst, DP(src), count));
    case cudaMemcpyDeviceToDevice:
        return rt(drv.cuMemcpyDtoD(DP(dst), DP(src), count));
    case cudaMemcpyDefault:
        return rt(drv.cuMemcpy(DP(dst), DP(src), count));
    default:
        return cudaErrorInvalidMemcpyDirection;
    }
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    READY();
    CUstream s = (CUstream)stream;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return rt(drv.cuMemcpyHtoDAsync(DP(dst), src, count, s));
    case cudaMemcpyDeviceToHost:
        return rt(drv.cuMemcpyDtoHAsync(dst, DP(src), count, s));
    case cudaMemcpyDeviceToDevice:
        return rt(drv.cuMemcpyDtoDAsync(DP(dst), DP(src), count, s));
    default:
        return cudaErrorInvalidMemcpyDirection;
    }
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind)
{
    READY();
    bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    CUDA_MEMCPY2D c = {
        .srcMemoryType = sd ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
        .srcHost = sd ? NULL : src,
        .srcDevice = sd ? DP(src) : 0,
        .srcPitch = spitch,
        .dstMemoryType = dd ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
        .dstHost = dd ? NULL : dst,
        .dstDevice = dd ? DP(dst) : 0,
        .dstPitch = dpitch,
        .WidthInBytes = width,
        .Height = height,
    };
    return rt(drv.cuMemcpy2D(&c));
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    READY();
    return rt(drv.cuStreamCreate((CUstream *)pStream, 0));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    READY();
    return rt(drv.cuStreamSynchronize((CUstream)stream));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    READY();
    return rt(drv.cuStreamBeginCapture((CUstream)stream, (CUstreamCaptureMode)mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    READY();
    return rt(drv.cuStreamEndCapture((CUstream)stream, (CUgraph *)pGraph));
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    READY();
    return rt(drv.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    READY();
    return rt(drv.cuGraphLaunch((CUgraphExec)graphExec, (CUstream)stream));
}
