/* shapetrace tests: a module that uses NCCL and is opened RTLD_LOCAL, the way torch's extension
 * modules bring libnccl in: dlsym(RTLD_NEXT, ...) from the preload cannot see it. */
#include <cuda_runtime_api.h>
#include <nccl.h>

int mod_run(int n);
int mod_run(int n)
{
    ncclUniqueId id;
    ncclComm_t comm;
    void *buf;
    if (cudaMalloc(&buf, 4096) != cudaSuccess)
        return 1;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRankConfig(&comm, 1, id, 0, NULL))
        return 2;
    for (int i = 0; i < n; i++)
        if (ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, 0) != ncclSuccess)
            return 3;
    return ncclCommDestroy(comm) == ncclSuccess ? 0 : 4;
}
