/* shapetrace preload: the NCCL wrappers, generated from the call list. Built against the real
 * nccl.h (2.28), never linked with libnccl: the real functions are found at run time. */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "preload/wrap.h"

SHP_NCCL_CALLS(SHP_DECLARE)
SHP_NCCL_CALLS(SHP_DEFINE)

void *const shp_nccl_variants[SHP_SLOTS][SHP_OP_COUNT] = SHP_VARIANTS(SHP_NCCL_CALLS);
