/* shapetrace example: pipeline stages exchange activations with send/recv; the receiver of
 * stage 2 expects one token fewer than stage 1 sends. On NCCL the sizes must match: the
 * transfer fails or hangs. Usage: pipeline [--clean] (one stage a rank). */
#include <nccl.h>

#include "common.h"

#define HIDDEN 2048
#define TOKENS 128

/* Not a tail call, so that the call site keeps this frame. */
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static ncclResult_t
send_activations(ncclComm_t comm, const void *buf, int next)
{
    return ncclSend(buf, (size_t)TOKENS * HIDDEN, ncclBfloat16, next, comm, 0);
}

__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static ncclResult_t
recv_activations(ncclComm_t comm, void *buf, size_t tokens, int prev)
{
    return ncclRecv(buf, tokens * HIDDEN, ncclBfloat16, prev, comm, 0);
}

int main(int argc, char **argv)
{
    int clean = argc > 1 && !strcmp(argv[1], "--clean");
    int rank = ex_rank(), stages = ex_world();
    ncclComm_t comm = ex_world_comm();
    void *act;
    EX_CHECK(cudaMalloc(&act, (size_t)TOKENS * HIDDEN * 2));
    ncclResult_t r = ncclSuccess;
    for (int micro = 0; micro < 3 && r == ncclSuccess; micro++) {
        if (rank > 0) {
            size_t tokens = !clean && rank == 2 ? TOKENS - 1 : TOKENS;
            r = recv_activations(comm, act, tokens, rank - 1);
        }
        if (r == ncclSuccess && rank + 1 < stages)
            r = send_activations(comm, act, rank + 1);
    }
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: pipeline transfer failed: %s\n", rank, ncclGetErrorString(r));
        return 1;
    }
    printf("rank %d: 3 micro-batches done\n", rank);
    EX_CHECK(ncclCommDestroy(comm));
    return 0;
}
