/* shapetrace preload: compile-time check that the per-thread-stream entries of the call list
 * (`_ptds`, `_ptsz`) match cuda_runtime_api.h and cuda.h as they read in that mode. Produces no
 * code. */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "include/shapetrace/calls.h"

/* In this mode the header's cudaMemcpy is cudaMemcpy_ptds, and so on. */
#define SHP_CHECK(num, lib, cls, name, facts, params, args, desc)                                  \
    typedef cudaError_t(check_##name##_t) params;
SHP_CUDART_CALLS(SHP_CHECK)
#undef SHP_CHECK

#define SHP_SAME(a, b)                                                                             \
    _Static_assert(__builtin_types_compatible_p(__typeof__(a), check_##b##_t), #b)
SHP_SAME(cudaMemcpy, cudaMemcpy_ptds);
SHP_SAME(cudaMemcpyAsync, cudaMemcpyAsync_ptsz);
SHP_SAME(cudaMemcpy2D, cudaMemcpy2D_ptds);
SHP_SAME(cudaMemcpy2DAsync, cudaMemcpy2DAsync_ptsz);
SHP_SAME(cudaMallocAsync, cudaMallocAsync_ptsz);
SHP_SAME(cudaFreeAsync, cudaFreeAsync_ptsz);
SHP_SAME(cudaStreamBeginCapture, cudaStreamBeginCapture_ptsz);
SHP_SAME(cudaStreamEndCapture, cudaStreamEndCapture_ptsz);
SHP_SAME(cudaGraphLaunch, cudaGraphLaunch_ptsz);

/* The driver's: in this mode cuda.h's cuMemcpyHtoD is cuMemcpyHtoD_v2_ptds, and so on. */
#define SHP_CHECK(num, lib, cls, name, facts, params, args, desc)                                  \
    typedef CUresult(check_##name##_t) params;
SHP_CUDA_CALLS(SHP_CHECK)
#undef SHP_CHECK

/* Each entry point that a per-thread lookup answers (driver facts PER_THREAD and BOTH) is what
 * its base name means in this mode. */
#define SHP_UNPAREN(...) __VA_ARGS__
#define SHP_PT_ROW(...) SHP_PT_ROW_(__VA_ARGS__)
#define SHP_PT_ROW_(name, base, since, mode) SHP_PT_##mode(base, name)
#define SHP_PT_LEGACY(base, name)
#define SHP_PT_PER_THREAD(base, name) SHP_SAME(base, name);
#define SHP_PT_BOTH(base, name) SHP_SAME(base, name);
#define SHP_CHECK(num, lib, cls, name, facts, params, args, desc)                                  \
    SHP_PT_ROW(name, SHP_UNPAREN facts)
SHP_CUDA_CALLS(SHP_CHECK)
#undef SHP_CHECK
