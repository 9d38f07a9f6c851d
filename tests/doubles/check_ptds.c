/* Compile-only check: cudart_ptds.h must agree with cuda_runtime_api.h in per-thread default
 * stream mode, where the header itself declares the `_ptds`/`_ptsz` names. Produces no code. */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <cuda_runtime_api.h>

#include "tests/doubles/cudart_ptds.h"
