/* shapetrace tests: multi-rank scenarios for the analyzer, one planted divergence each, on 4
 * ranks started by shp_launch (the multi-rank double) or a real launcher. The clean sequence:
 * world all-reduces, a split into {0} and {1, 2, 3} with collectives on the larger part, a
 * broadcast, a reduce, and a ring of sends and receives inside a group.
 * Usage: ranks clean|op|redop|root|split|group|p2pdtype|unmatched */
#include <nccl.h>

#include "examples/common.h"

static const char *mode;

static int is(const char *m)
{
    return !strcmp(mode, m);
}

/* Each planted call goes through its own function, so that tests can check the call site. */
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static ncclResult_t
world_step(ncclComm_t comm, void *buf, int step, int rank)
{
    if (is("op") && step == 1 && rank == 1)
        return ncclReduce(buf, buf, 1024, ncclFloat32, ncclSum, 0, comm, 0);
    ncclRedOp_t op = is("redop") && step == 2 && rank == 2 ? ncclMax : ncclSum;
    return ncclAllReduce(buf, buf, 1024, ncclFloat32, op, comm, 0);
}

__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static ncclResult_t
part_step(ncclComm_t part, void *buf, int step, int rank)
{
    size_t count = is("split") && step == 1 && rank == 2 ? 500 : 512;
    return ncclAllReduce(buf, buf, count, ncclBfloat16, ncclSum, part, 0);
}

__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static ncclResult_t
ring(ncclComm_t comm, void *sendbuf, void *recvbuf, int rank, int world)
{
    size_t scount = 100, rcount = is("group") && rank == 1 ? 99 : 100;
    ncclDataType_t rtype = is("p2pdtype") && rank == 1 ? ncclFloat32 : ncclInt32;
    EX_CHECK(ncclGroupStart());
    EX_CHECK(ncclSend(sendbuf, scount, ncclInt32, (rank + 1) % world, comm, 0));
    if (!(is("unmatched") && rank == 1))
        EX_CHECK(ncclRecv(recvbuf, rcount, rtype, (rank + world - 1) % world, comm, 0));
    return ncclGroupEnd();
}

int main(int argc, char **argv)
{
    mode = argc > 1 ? argv[1] : "clean";
    int rank = ex_rank(), world = ex_world();
    ncclComm_t comm = ex_world_comm(), part = NULL;
    void *buf, *buf2;
    EX_CHECK(cudaMalloc(&buf, 1 << 16));
    EX_CHECK(cudaMalloc(&buf2, 1 << 16));
    int failed = 0;
    for (int step = 0; step < 3 && !failed; step++)
        failed = world_step(comm, buf, step, rank) != ncclSuccess;
    if (!failed)
        failed = ncclCommSplit(comm, rank == 0 ? 0 : 1, rank, &part, NULL) != ncclSuccess;
    for (int step = 0; step < 3 && !failed && rank != 0; step++)
        failed = part_step(part, buf, step, rank) != ncclSuccess;
    if (!failed) {
        int root = is("root") && rank == 3 ? 1 : 0;
        failed = ncclBroadcast(buf, buf, 256, ncclInt32, root, comm, 0) != ncclSuccess;
    }
    if (!failed)
        failed = ncclReduce(buf, buf2, 256, ncclFloat32, ncclSum, 1, comm, 0) != ncclSuccess;
    if (!failed)
        failed = ring(comm, buf, buf2, rank, world) != ncclSuccess;
    printf("rank %d: %s %s\n", rank, mode, failed ? "failed" : "done");
    /* Leave without tearing down: after a planted divergence the others may be waiting. */
    return 0;
}
