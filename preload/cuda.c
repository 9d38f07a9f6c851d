/* shapetrace preload: the driver (libcuda) wrappers, generated from the call list, and the
 * wrapper of cuGetProcAddress through which a static CUDA runtime finds every driver function.
 * Built against the real cuda.h (13.0), never linked with libcuda. */
#include <cuda.h>
#include <string.h>

#include "preload/wrap.h"

/* ---- what the CUDA_MEMCPY2D descriptions read (desc.h SHP_CU_2D_DESC) ---- */

static const void *cu2d_addr(unsigned type, const void *host, CUdeviceptr dev, size_t x, size_t y,
                             size_t pitch)
{
    /* An array has no address we could check ranges against. */
    if (type == CU_MEMORYTYPE_ARRAY)
        return NULL;
    uintptr_t base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
    return (const void *)(base + y * pitch + x);
}

static inline const void *shp_cu2d_src(const CUDA_MEMCPY2D *p)
{
    return p ? cu2d_addr(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                         p->srcPitch)
             : NULL;
}

static inline const void *shp_cu2d_dst(const CUDA_MEMCPY2D *p)
{
    return p ? cu2d_addr(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                         p->dstPitch)
             : NULL;
}

/* The direction of a 2-D copy from its memory types; unified memory is resolved like Default. */
static inline int shp_cu2d_kind(const CUDA_MEMCPY2D *p)
{
    if (!p || p->srcMemoryType == CU_MEMORYTYPE_UNIFIED ||
        p->dstMemoryType == CU_MEMORYTYPE_UNIFIED)
        return SHP_KIND_DEFAULT;
    bool s = p->srcMemoryType != CU_MEMORYTYPE_HOST, d = p->dstMemoryType != CU_MEMORYTYPE_HOST;
    return s ? (d ? SHP_KIND_D2D : SHP_KIND_D2H) : (d ? SHP_KIND_H2D : SHP_KIND_H2H);
}

SHP_CUDA_CALLS(SHP_DECLARE)
SHP_CUDA_CALLS(SHP_DEFINE)

void *const shp_cuda_variants[SHP_SLOTS][SHP_OP_COUNT] = SHP_VARIANTS(SHP_CUDA_CALLS);

/* ---- cuGetProcAddress ---- */

typedef CUresult (*proc_v2_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
typedef CUresult (*proc_v1_fn)(const char *, void **, int, cuuint64_t);

static _Atomic(proc_v2_fn) real_proc_v2;
static _Atomic(proc_v1_fn) real_proc_v1;

/* cuGetProcAddress answers base names ("cuMemcpyHtoD") for a cudaVersion and a stream mode with
 * one of the driver's versioned entry points; the call list's driver facts say which of ours that
 * is. Versions below a base's `since` meant an older signature: those get the real answer, as do
 * the names not listed (cuGraphInstantiate is the five-argument form at every version). */
static unsigned proc_op(const char *symbol, int cuda_version, unsigned long long flags)
{
    if (!symbol || strncmp(symbol, "cu", 2))
        return SHP_OP_NONE;
    return shp_op_proc(symbol, cuda_version, flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
}

/* What a lookup answered, replaced by our wrapper when it is one of the traced entry points (the
 * real pointer is kept for the wrapper to call). "cuGetProcAddress" itself is answered with ours,
 * so that entry points looked up through a looked-up cuGetProcAddress are wrapped as well. */
static void answer(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
    if (!pfn || !*pfn || shp_is_self(*pfn))
        return;
    if (symbol && !strcmp(symbol, "cuGetProcAddress")) {
        void *ours = shp_cu_proc_wrapper(*pfn, cuda_version >= 12000);
        if (ours)
            *pfn = ours;
        return;
    }
    unsigned op = proc_op(symbol, cuda_version, flags);
    if (op == SHP_OP_NONE)
        return;
    void *real = *pfn;
    atomic_store_explicit(&shp_real_tab[0][op], real, memory_order_release);
    *pfn = shp_cuda_variants[0][op];
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_RESOLVE,
            "cuGetProcAddress %s (%d, flags %llu): %s at %p", symbol, cuda_version,
            (unsigned long long)flags, shp_op_name(op), real);
}

/* Both forms are exported (programs linked with -lcuda bind to them) and handed out by the dlsym
 * hook. Every argument reaches the real function; symbolStatus is the real one's. */
__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    proc_v2_fn real = atomic_load_explicit(&real_proc_v2, memory_order_acquire);
    if (!real) {
        int saved = shp_own_enter();
        void *p = shp_cu_real_lookup("cuGetProcAddress_v2");
        shp_own_leave(saved);
        if (!p)
            return CUDA_ERROR_NOT_FOUND;
        real = (proc_v2_fn)p;
        atomic_store_explicit(&real_proc_v2, real, memory_order_release);
    }
    CUresult r;
    SHP_CALL_REAL(r, real, (symbol, pfn, cudaVersion, flags, symbolStatus));
    if (r == CUDA_SUCCESS && (!symbolStatus || *symbolStatus == CU_GET_PROC_ADDRESS_SUCCESS)) {
        int saved = shp_own_enter();
        answer(symbol, pfn, cudaVersion, flags);
        shp_own_leave(saved);
    }
    return r;
}

#undef cuGetProcAddress
__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char *symbol, void **pfn,
                                                                 int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    proc_v1_fn real = atomic_load_explicit(&real_proc_v1, memory_order_acquire);
    if (!real) {
        int saved = shp_own_enter();
        void *p = shp_cu_real_lookup("cuGetProcAddress");
        shp_own_leave(saved);
        if (!p)
            return CUDA_ERROR_NOT_FOUND;
        real = (proc_v1_fn)p;
        atomic_store_explicit(&real_proc_v1, real, memory_order_release);
    }
    CUresult r;
    SHP_CALL_REAL(r, real, (symbol, pfn, cudaVersion, flags));
    if (r == CUDA_SUCCESS) {
        int saved = shp_own_enter();
        answer(symbol, pfn, cudaVersion, flags);
        shp_own_leave(saved);
    }
    return r;
}

void *shp_cu_proc_wrapper(void *real, bool v2)
{
    if (!real || shp_is_self(real))
        return NULL;
    if (v2) {
        atomic_store_explicit(&real_proc_v2, (proc_v2_fn)real, memory_order_release);
        return (void *)cuGetProcAddress_v2;
    }
    atomic_store_explicit(&real_proc_v1, (proc_v1_fn)real, memory_order_release);
    return (void *)cuGetProcAddress;
}
