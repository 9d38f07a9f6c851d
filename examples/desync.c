/* shapetrace example: one rank's sequence length differs at one step, so its all-gather count
 * differs from the others'. NCCL checks none of this across ranks: the job goes on with wrong
 * data (or hangs). Usage: desync [--clean] [STEPS] (rank 2, or the last rank if fewer, uses 511
 * tokens instead of 512 at step 3). */
#include <nccl.h>

#include "examples/common.h"

#define HIDDEN 1024
#define TOKENS 512

/* Gathers each rank's [tokens, hidden/tp] piece of the step's activations. */
__attribute__((noinline)) static void gather_activations(ncclComm_t comm, const void *in, void *out,
                                                         size_t tokens, int tp)
{
    EX_CHECK(ncclAllGather(in, out, tokens * (HIDDEN / (size_t)tp), ncclBfloat16, comm, 0));
}

__attribute__((noinline)) static void reduce_logits(ncclComm_t comm, void *buf)
{
    EX_CHECK(ncclAllReduce(buf, buf, 4096, ncclFloat32, ncclSum, comm, 0));
}

int main(int argc, char **argv)
{
    int clean = argc > 1 && !strcmp(argv[1], "--clean");
    int steps = argc > 1 + clean ? atoi(argv[1 + clean]) : 6;
    int rank = ex_rank(), tp = ex_world(), odd = tp > 2 ? 2 : tp - 1;
    ncclComm_t comm = ex_world_comm();
    void *in, *out, *logits;
    EX_CHECK(cudaMalloc(&in, (size_t)TOKENS * HIDDEN * 2));
    EX_CHECK(cudaMalloc(&out, (size_t)TOKENS * HIDDEN * 2 * (size_t)tp));
    EX_CHECK(cudaMalloc(&logits, 4096 * 4));
    /* Each rank's piece holds its rank number, so the gathered blocks can be checked. */
    size_t piece = (size_t)TOKENS * (HIDDEN / (size_t)tp);
    uint16_t *host = malloc(piece * 2 * (size_t)tp);
    for (size_t i = 0; i < piece; i++)
        host[i] = ex_bf16((float)rank);
    EX_CHECK(cudaMemcpy(in, host, piece * 2, cudaMemcpyHostToDevice));
    size_t wrong = 0;
    for (int step = 0; step < steps; step++) {
        size_t tokens = !clean && step == 3 && rank == odd ? TOKENS - 1 : TOKENS;
        gather_activations(comm, in, out, tokens, tp);
        reduce_logits(comm, logits);
        EX_CHECK(cudaMemcpy(host, out, piece * 2 * (size_t)tp, cudaMemcpyDeviceToHost));
        for (int r = 0; r < tp; r++)
            for (size_t i = 0; i < piece; i += 61)
                wrong += ex_float(host[(size_t)r * piece + i]) != (float)r;
    }
    printf("rank %d: %d steps done, gathered data %s\n", rank, steps, wrong ? "WRONG" : "checked");
    EX_CHECK(ncclCommDestroy(comm));
    return 0;
}
