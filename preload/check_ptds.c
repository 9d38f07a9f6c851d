/* shapetrace preload: compile-time check that the per-thread-stream entries of the call list
 * (`_ptds`, `_ptsz`) match cuda_runtime_api.h and cuda.h as they read in that mode. Produces no
 * code. */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "include/shapetrace/calls.h"

/* In this mode the header's cudaMemcpy is cudaMemcpy_ptds, and so on. */
#define SHP_CHECK(num, lib, cls, name, params, args, desc)                                         \
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
#define SHP_CHECK(num, lib, cls, name, params, args, desc)                                         \
    typedef CUresult(check_##name##_t) params;
SHP_CUDA_CALLS(SHP_CHECK)
#undef SHP_CHECK
SHP_SAME(cuMemcpy, cuMemcpy_ptds);
SHP_SAME(cuMemcpyAsync, cuMemcpyAsync_ptsz);
SHP_SAME(cuMemcpyHtoD, cuMemcpyHtoD_v2_ptds);
SHP_SAME(cuMemcpyDtoH, cuMemcpyDtoH_v2_ptds);
SHP_SAME(cuMemcpyDtoD, cuMemcpyDtoD_v2_ptds);
SHP_SAME(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2_ptsz);
SHP_SAME(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2_ptsz);
SHP_SAME(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2_ptsz);
SHP_SAME(cuMemcpy2D, cuMemcpy2D_v2_ptds);
SHP_SAME(cuMemcpy2DUnaligned, cuMemcpy2DUnaligned_v2_ptds);
SHP_SAME(cuMemcpy2DAsync, cuMemcpy2DAsync_v2_ptsz);
SHP_SAME(cuMemcpyPeer, cuMemcpyPeer_ptds);
SHP_SAME(cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz);
SHP_SAME(cuMemAllocAsync, cuMemAllocAsync_ptsz);
SHP_SAME(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz);
SHP_SAME(cuMemFreeAsync, cuMemFreeAsync_ptsz);
SHP_SAME(cuStreamBeginCapture, cuStreamBeginCapture_v2_ptsz);
SHP_SAME(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz);
SHP_SAME(cuStreamEndCapture, cuStreamEndCapture_ptsz);
SHP_SAME(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz);
SHP_SAME(cuGraphLaunch, cuGraphLaunch_ptsz);
