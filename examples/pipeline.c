/* shapetrace example: pipeline stages exchange activations with send/recv; the receiver of
 * stage 2 expects one token fewer than stage 1 sends. On NCCL the sizes must match: the
 * transfer fails or hangs. Usage: pipeline [--clean] (one stage a rank). */
#include <nccl.h>

#include "examples/common.h"

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
    size_t n = (size_t)TOKENS * HIDDEN, wrong = 0;
    uint16_t *host = malloc(n * 2);
    EX_CHECK(cudaMalloc(&act, n * 2));
    ncclResult_t r = ncclSuccess;
    for (int micro = 0; micro < 3 && r == ncclSuccess; micro++) {
        if (rank > 0) {
            size_t tokens = !clean && rank == 2 ? TOKENS - 1 : TOKENS;
            r = recv_activations(comm, act, tokens, rank - 1);
            /* Stage k-1 sent activations holding micro * 10 + k - 1. */
            EX_CHECK(cudaMemcpy(host, act, n * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; r == ncclSuccess && i < tokens * HIDDEN; i += 53)
                wrong += ex_float(host[i]) != (float)(micro * 10 + rank - 1);
        }
        /* This stage's work: its output holds micro * 10 + rank. */
        for (size_t i = 0; i < n; i++)
            host[i] = ex_bf16((float)(micro * 10 + rank));
        EX_CHECK(cudaMemcpy(act, host, n * 2, cudaMemcpyHostToDevice));
        if (r == ncclSuccess && rank + 1 < stages)
            r = send_activations(comm, act, rank + 1);
    }
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: pipeline transfer failed: %s\n", rank, ncclGetErrorString(r));
        return 1;
    }
    printf("rank %d: 3 micro-batches done, received data %s\n", rank, wrong ? "WRONG" : "checked");
    EX_CHECK(ncclCommDestroy(comm));
    return 0;
}
