/* shapetrace example: one rank stops before a collective that the others enter; they wait for
 * it (on the doubles until SHAPETRACE_DOUBLE_TIMEOUT, on NCCL forever: run it with a timeout).
 * Usage: stall [--clean] (the last rank stops before step 5's all-reduce). */
#include <nccl.h>

#include "examples/common.h"

/* Not a tail call, so that the call site keeps this frame. */
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static ncclResult_t
step_allreduce(ncclComm_t comm, void *buf)
{
    return ncclAllReduce(buf, buf, 1 << 16, ncclFloat32, ncclSum, comm, 0);
}

int main(int argc, char **argv)
{
    int clean = argc > 1 && !strcmp(argv[1], "--clean");
    int rank = ex_rank(), world = ex_world();
    ncclComm_t comm = ex_world_comm();
    void *buf;
    float *host = malloc(4 << 16);
    size_t wrong = 0;
    EX_CHECK(cudaMalloc(&buf, 4 << 16));
    for (int step = 0; step < 8; step++) {
        for (int i = 0; i < 1 << 16; i++)
            host[i] = 1.0f;
        EX_CHECK(cudaMemcpy(buf, host, 4 << 16, cudaMemcpyHostToDevice));
        if (!clean && step == 5 && rank == world - 1) {
            printf("rank %d: stopping before step %d\n", rank, step);
            return 0; /* leaves without a word: the others wait */
        }
        ncclResult_t r = step_allreduce(comm, buf);
        if (r != ncclSuccess) {
            fprintf(stderr, "rank %d: step %d all-reduce failed: %s\n", rank, step,
                    ncclGetErrorString(r));
            return 1;
        }
        EX_CHECK(cudaMemcpy(host, buf, 4 << 16, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 1 << 16; i += 97)
            wrong += host[i] != (float)world;
    }
    printf("rank %d: 8 steps done, sums %s\n", rank, wrong ? "WRONG" : "checked");
    EX_CHECK(ncclCommDestroy(comm));
    return 0;
}
