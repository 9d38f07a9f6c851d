/* shapetrace preload: the CUDA runtime wrappers, generated from the call list. Built against the
 * real cuda_runtime_api.h (13.0), never linked with libcudart. torch references
 * cudaMemcpyAsync@libcudart.so.13; these unversioned definitions still interpose it. */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "preload/wrap.h"

/* Declared by cuda_runtime_api.h only in per-thread-default-stream mode; check_ptds.c compares
 * them with the header in that mode. */
SHP_CUDART_CALLS(SHP_DECLARE)
SHP_CUDART_CALLS(SHP_DEFINE)

void *const shp_cudart_variants[SHP_SLOTS][SHP_OP_COUNT] = SHP_VARIANTS(SHP_CUDART_CALLS);
