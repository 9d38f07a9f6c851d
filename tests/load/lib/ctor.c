/* shapetrace tests: a library whose constructor calls the wrappers, before main and possibly
 * before the preload's own constructor has run. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

void *ctor_buffer;

__attribute__((constructor)) static void early(void)
{
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ncclUniqueId id;
    if (cudaMalloc(&ctor_buffer, sizeof(host)) != cudaSuccess ||
        cudaMemcpy(ctor_buffer, host, sizeof(host), cudaMemcpyHostToDevice) != cudaSuccess ||
        ncclGetUniqueId(&id) != ncclSuccess)
        fprintf(stderr, "ctor: calls failed\n");
}
