/* shapetrace tests: multi-rank patterns of real inference stacks (vLLM, torch ProcessGroupNCCL,
 * FSDP, Megatron, MoE), each clean or with one planted divergence, on ranks started by
 * shp_launch. Usage: stacks PATTERN clean|planted (the patterns: see `patterns` below). */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdbool.h>
#include <unistd.h>

#include "examples/common.h"

static bool planted;
static int rank, world;

#define NOINLINE __attribute__((noinline, optimize("no-optimize-sibling-calls")))

/* ---- vLLM: a graph per batch-size bucket, replayed at each decode step ---- */

static const size_t buckets[] = {1, 2, 4, 8};

/* The end of each capture below: the graph, instantiated. */
static void instantiate_capture(cudaStream_t s, cudaGraphExec_t *exec)
{
    cudaGraph_t g;
    EX_CHECK(cudaStreamEndCapture(s, &g));
    EX_CHECK(cudaGraphInstantiate(exec, g, 0));
}

NOINLINE static void capture_bucket(ncclComm_t comm, cudaStream_t s, void *buf, size_t tokens,
                                    cudaGraphExec_t *exec)
{
    EX_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EX_CHECK(ncclAllReduce(buf, buf, tokens * 256, ncclBfloat16, ncclSum, comm, s));
    instantiate_capture(s, exec);
}

NOINLINE static void decode_step(cudaGraphExec_t exec, cudaStream_t s)
{
    EX_CHECK(cudaGraphLaunch(exec, s));
}

/* Capture one graph per bucket with `capture`, then replay one a step; the culprit rank of a
 * planted run replays bucket 1 at step 3. With `stamp`, rank 0 writes the step's number into
 * buf before each launch and, on a clean run, every other rank checks that the replays carried
 * it to its buf: on the doubles too, a launch moves what its graph captured. */
static void replay_buckets(ncclComm_t comm, void *buf,
                           void (*capture)(ncclComm_t, cudaStream_t, void *, size_t,
                                           cudaGraphExec_t *),
                           int culprit, bool stamp)
{
    cudaStream_t s;
    cudaGraphExec_t exec[4];
    EX_CHECK(cudaStreamCreate(&s));
    for (int b = 0; b < 4; b++)
        capture(comm, s, buf, buckets[b], &exec[b]);
    for (int step = 0; step < 6; step++) {
        int b = step % 4;
        if (planted && step == 2 && rank == culprit)
            b = 1; /* this rank's batch fell into another bucket */
        int mark = step + 1, got = 0;
        if (stamp && rank == 0)
            EX_CHECK(cudaMemcpy(buf, &mark, sizeof(mark), cudaMemcpyHostToDevice));
        decode_step(exec[b], s);
        if (stamp && rank > 0 && !planted) {
            EX_CHECK(cudaMemcpy(&got, buf, sizeof(got), cudaMemcpyDeviceToHost));
            if (got != mark) {
                fprintf(stderr, "rank %d: step %d received %d, not %d\n", rank, mark, got, mark);
                exit(1);
            }
        }
    }
    if (stamp && rank > 0 && !planted)
        printf("rank %d: the replays carried every step's data\n", rank);
}

static void graph_buckets(ncclComm_t comm, void *buf)
{
    replay_buckets(comm, buf, capture_bucket, 2, false);
}

/* The same as torch's ProcessGroupNCCL and vLLM do it inside a graph: NCCL runs on a side
 * stream that joins the capture through an event (a fork) and is joined back into it (a join);
 * the all-reduce is never issued on the capturing stream itself. */
NOINLINE static void capture_bucket_side(ncclComm_t comm, cudaStream_t s, void *buf, size_t tokens,
                                         cudaGraphExec_t *exec)
{
    static cudaStream_t side;
    static cudaEvent_t fork, join;
    if (!side) {
        EX_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        EX_CHECK(cudaEventCreate(&fork));
        EX_CHECK(cudaEventCreate(&join));
    }
    EX_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EX_CHECK(cudaEventRecord(fork, s));
    EX_CHECK(cudaStreamWaitEvent(side, fork, 0));
    EX_CHECK(ncclAllReduce(buf, buf, tokens * 256, ncclBfloat16, ncclSum, comm, side));
    EX_CHECK(cudaEventRecord(join, side));
    EX_CHECK(cudaStreamWaitEvent(s, join, 0));
    instantiate_capture(s, exec);
}

static void graph_side_stream(ncclComm_t comm, void *buf)
{
    replay_buckets(comm, buf, capture_bucket_side, 2, false);
}

/* vLLM data parallel: the ranks agree on the padded token count, then run the graph of its
 * bucket; the planted rank picks the graph by its own unpadded count (vLLM pull request
 * 25906). */
NOINLINE static void capture_dp_graph(ncclComm_t comm, cudaStream_t s, void *buf, size_t tokens,
                                      cudaGraphExec_t *exec)
{
    EX_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EX_CHECK(ncclAllGather(buf, (char *)buf + 4096, tokens * 64, ncclBfloat16, comm, s));
    instantiate_capture(s, exec);
}

static void dp_padding(ncclComm_t comm, void *buf)
{
    cudaStream_t s;
    cudaGraphExec_t exec[2];
    EX_CHECK(cudaStreamCreate(&s));
    capture_dp_graph(comm, s, buf, 4, &exec[0]);
    capture_dp_graph(comm, s, buf, 8, &exec[1]);
    for (int step = 0; step < 3; step++) {
        int tokens = step == 1 ? (rank == 3 ? 3 : 6) : 4, *t = (int *)((char *)buf + 60000);
        EX_CHECK(cudaMemcpy(t, &tokens, sizeof(tokens), cudaMemcpyHostToDevice));
        EX_CHECK(ncclAllReduce(t, t, 1, ncclInt32, ncclMax, comm, s));
        int padded = step == 1 ? 6 : 4, mine = planted && rank == 3 ? tokens : padded;
        decode_step(exec[mine > 4], s);
    }
}

/* vLLM pipeline parallel in graph mode: each stage's decode graph (one per bucket) receives
 * the activations from the previous stage and sends its own to the next, captured; only
 * cudaGraphLaunch is called at each step. The planted last stage replays another bucket. */
NOINLINE static void capture_stage(ncclComm_t comm, cudaStream_t s, void *buf, size_t tokens,
                                   cudaGraphExec_t *exec)
{
    EX_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (rank > 0)
        EX_CHECK(ncclRecv(buf, tokens * 256, ncclBfloat16, rank - 1, comm, s));
    if (rank < world - 1)
        EX_CHECK(ncclSend(buf, tokens * 256, ncclBfloat16, rank + 1, comm, s));
    instantiate_capture(s, exec);
}

static void pp_graph(ncclComm_t comm, void *buf)
{
    replay_buckets(comm, buf, capture_stage, world - 1, true);
}

/* vLLM decode graphs write the batch's hidden states into a static output buffer, as many
 * rows as the bucket has; the host then takes the batch's rows (.cpu() of output[:n]). Rows of
 * 256 bf16 (--dim hidden=256). */
#define ROW (256 * 2)
static const int batch[] = {3, 8, 2, 5, 1, 6}; /* tokens per step */

NOINLINE static void capture_output(cudaStream_t s, char *out, const char *states, size_t rows,
                                    size_t short_by, cudaGraphExec_t *exec)
{
    EX_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EX_CHECK(cudaMemcpyAsync(out, states, rows * ROW - short_by, cudaMemcpyDeviceToDevice, s));
    instantiate_capture(s, exec);
}

NOINLINE static void take_rows(char *host, const char *out, int n, cudaStream_t s)
{
    EX_CHECK(cudaMemcpyAsync(host, out, (size_t)n * ROW, cudaMemcpyDeviceToHost, s));
    EX_CHECK(cudaStreamSynchronize(s));
}

/* rounded_down: pick the bucket below the token count (the planted bug), else the one above. */
static void decode_outputs(void *buf, bool rounded_down, size_t short_by_2)
{
    static char host[8 * ROW];
    char *out = buf, *states = (char *)buf + 8 * ROW;
    cudaStream_t s;
    cudaGraphExec_t exec[4];
    EX_CHECK(cudaStreamCreate(&s));
    EX_CHECK(cudaMemcpy(states, host, sizeof(host), cudaMemcpyHostToDevice));
    for (int b = 0; b < 4; b++)
        capture_output(s, out, states, buckets[b], buckets[b] == 2 ? short_by_2 : 0, &exec[b]);
    for (int step = 0; step < 6; step++) {
        int b = 0;
        while (b < 3 && buckets[b] < (size_t)batch[step])
            b++;
        if (rounded_down && step == 3 && b > 0)
            b--;
        decode_step(exec[b], s);
        take_rows(host, out, batch[step], s);
    }
}

/* Planted: rank 1 picks the graph of 4 rows for its 5 tokens at step 4; its .cpu() takes a
 * fifth row that step 2's graph of 8 left there. */
static void replay_output(ncclComm_t comm, void *buf)
{
    (void)comm;
    decode_outputs(buf, planted && rank == 1, 0);
}

/* Planted: rank 2's graph of bucket 2 copies one element less than two whole rows; it first
 * runs at step 3, the third replay (checked with an expectation of whole hidden rows). */
static void replay_shapes(ncclComm_t comm, void *buf)
{
    (void)comm;
    decode_outputs(buf, false, planted && rank == 2 ? 2 : 0);
}

/* Both at once, on one rank's decode graphs: planted, rank 1 replays the bucket of 2 at step 3
 * (a count mismatch inside a replay, found by the analyzer's merge thread) and takes a stale row
 * of the output buffer at step 4 (found by a lineage worker), each with call sites to name. */
static void decode_graphs(ncclComm_t comm, void *buf)
{
    replay_buckets(comm, buf, capture_bucket, 1, false);
    decode_outputs((char *)buf + (1 << 16), planted && rank == 1, 0);
}

/* vLLM pynccl: its own communicator from a unique id, all-reduces on a stream. */
NOINLINE static void pynccl_all_reduce(ncclComm_t comm, void *buf, int step)
{
    ncclDataType_t t = planted && rank == 1 && step == 2 ? ncclFloat16 : ncclBfloat16;
    EX_CHECK(ncclAllReduce(buf, buf, 512, t, ncclSum, comm, 0));
}

static void pynccl(ncclComm_t world_comm, void *buf)
{
    (void)world_comm;
    ncclComm_t comm;
    ncclUniqueId id;
    /* A call before the communicator exists fails; its record has no seq. */
    (void)ncclAllReduce(buf, buf, 512, ncclBfloat16, ncclSum, NULL, 0);
    EX_CHECK(shp_uid_exchange(&id, rank));
    EX_CHECK(ncclCommInitRank(&comm, world, id, rank));
    for (int step = 0; step < 4; step++)
        pynccl_all_reduce(comm, buf, step);
}

/* ---- torch ProcessGroupNCCL ---- */

/* A coalesced all-reduce: one group of three. */
NOINLINE static void coalesced(ncclComm_t comm, void *buf, int step)
{
    EX_CHECK(ncclGroupStart());
    for (int i = 0; i < 3; i++) {
        size_t n = 100 * (size_t)(i + 1) + (planted && rank == 0 && step == 1 && i == 1);
        EX_CHECK(ncclAllReduce((char *)buf + 4096 * i, (char *)buf + 4096 * i, n, ncclFloat32,
                               ncclSum, comm, 0));
    }
    EX_CHECK(ncclGroupEnd());
}

static void coalesced_groups(ncclComm_t comm, void *buf)
{
    for (int step = 0; step < 3; step++)
        coalesced(comm, buf, step);
}

/* all_to_all_single with uneven splits: a group of sends and receives of split sizes. */
static size_t split(int from, int to)
{
    return 16 + (size_t)from + 2 * (size_t)to;
}

NOINLINE static void a2a_single(ncclComm_t comm, char *sb, char *rb)
{
    EX_CHECK(ncclGroupStart());
    for (int p = 0; p < world; p++) {
        size_t in = split(p, rank) + (planted && rank == 2 && p == 0); /* a stale split */
        EX_CHECK(ncclSend(sb + 1024 * p, split(rank, p), ncclFloat32, p, comm, 0));
        EX_CHECK(ncclRecv(rb + 1024 * p, in, ncclFloat32, p, comm, 0));
    }
    EX_CHECK(ncclGroupEnd());
}

static void a2a_uneven(ncclComm_t comm, void *buf)
{
    for (int i = 0; i < 2; i++)
        a2a_single(comm, buf, (char *)buf + 16384);
}

/* new_group(ranks=[0, 1, 2]): a split; rank 3 gets a group of its own. */
NOINLINE static void group_bcast(ncclComm_t part, void *buf, int step)
{
    int root = planted && rank == 2 && step == 1 ? 1 : 0;
    EX_CHECK(ncclBroadcast(buf, buf, 128, ncclInt32, root, part, 0));
}

static void new_group(ncclComm_t comm, void *buf)
{
    ncclComm_t part;
    EX_CHECK(ncclCommSplit(comm, rank < 3 ? 0 : 1, rank, &part, NULL));
    EX_CHECK(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, 0));
    for (int step = 0; step < 3 && rank < 3; step++)
        group_bcast(part, buf, step);
}

/* Abort and re-initialize: the old communicator is aborted, a new one made from a new id. */
NOINLINE static void after_reinit(ncclComm_t comm, void *buf)
{
    if (planted && rank == 3)
        EX_CHECK(ncclAllGather(buf, (char *)buf + 4096, 64, ncclFloat32, comm, 0));
    else
        EX_CHECK(ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, 0));
}

static void abort_reinit(ncclComm_t comm, void *buf)
{
    for (int i = 0; i < 2; i++)
        EX_CHECK(ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, 0));
    EX_CHECK(ncclCommAbort(comm));
    ncclComm_t fresh;
    ncclUniqueId id;
    EX_CHECK(shp_uid_exchange(&id, rank));
    EX_CHECK(ncclCommInitRank(&fresh, world, id, rank));
    after_reinit(fresh, buf);
    EX_CHECK(ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, fresh, 0));
}

/* ---- FSDP / ZeRO: gradients reduce-scattered, parameters all-gathered in place ---- */

NOINLINE static void all_gather_params(ncclComm_t comm, char *full, size_t shard)
{
    size_t n = planted && rank == 1 ? shard - 8 : shard; /* the unpadded shard */
    EX_CHECK(ncclAllGather(full + (size_t)rank * shard * 2, full, n, ncclBfloat16, comm, 0));
}

static void fsdp(ncclComm_t comm, void *buf)
{
    size_t shard = 1024;
    char *grad = buf, *full = (char *)buf + 32768;
    for (int layer = 0; layer < 2; layer++) {
        EX_CHECK(ncclReduceScatter(grad, grad + (size_t)rank * shard * 2, shard, ncclBfloat16,
                                   ncclSum, comm, 0));
        all_gather_params(comm, full, shard);
    }
}

/* ---- Megatron: TP 2 x DP 2 x PP 2 on 8 ranks; rank = pp * 4 + dp * 2 + tp ---- */

/* On the pipeline group of two: stage 0 (global ranks 0-3) is rank 0 there, stage 1 rank 1. */
NOINLINE static void pp_exchange(ncclComm_t pp, void *buf)
{
    if (rank < 4)
        EX_CHECK(ncclSend(buf, 2048, ncclBfloat16, 1, pp, 0));
    else
        EX_CHECK(ncclRecv(buf, planted && rank == 5 ? 2047 : 2048, ncclBfloat16, 0, pp, 0));
}

static void megatron(ncclComm_t comm, void *buf)
{
    ncclComm_t tp, dp, pp;
    EX_CHECK(ncclCommSplit(comm, rank / 2, rank, &tp, NULL));
    EX_CHECK(ncclCommSplit(comm, (rank / 4) * 2 + rank % 2, rank, &dp, NULL));
    EX_CHECK(ncclCommSplit(comm, rank % 4, rank, &pp, NULL));
    for (int step = 0; step < 2; step++) {
        EX_CHECK(ncclAllReduce(buf, buf, 2048, ncclBfloat16, ncclSum, tp, 0));
        pp_exchange(pp, buf);
        EX_CHECK(ncclAllReduce((char *)buf + 8192, (char *)buf + 8192, 4096, ncclFloat32, ncclSum,
                               dp, 0));
    }
}

/* ---- MoE dispatch: token counts by all-to-all, then the tokens by grouped send/receive ---- */

static size_t tokens(int from, int to)
{
    return 1 + (size_t)((from * 3 + to) % 4);
}

NOINLINE static void dispatch(ncclComm_t comm, char *sb, char *rb)
{
    EX_CHECK(ncclGroupStart());
    for (int p = 0; p < world; p++) {
        size_t out = tokens(rank, p) + (planted && rank == 1 && p == 3); /* one token more */
        EX_CHECK(ncclSend(sb + 2048 * p, out * 64, ncclBfloat16, p, comm, 0));
        EX_CHECK(ncclRecv(rb + 2048 * p, tokens(p, rank) * 64, ncclBfloat16, p, comm, 0));
    }
    EX_CHECK(ncclGroupEnd());
}

static void moe(ncclComm_t comm, void *buf)
{
    EX_CHECK(ncclAlltoAll(buf, (char *)buf + 1024, 1, ncclInt32, comm, 0));
    dispatch(comm, (char *)buf + 4096, (char *)buf + 16384);
}

/* ---- NCCL itself: ncclBcast is ncclBroadcast in place ---- */

NOINLINE static void bcast(ncclComm_t comm, void *buf)
{
    if (rank == 0)
        EX_CHECK(ncclBcast(buf, 256, ncclInt32, 0, comm, 0));
    else
        EX_CHECK(ncclBroadcast(buf, buf, planted && rank == 2 ? 255 : 256, ncclInt32, 0, comm, 0));
}

/* Root-only buffers: non-roots pass a scratch buffer far smaller than the data. */
NOINLINE static void root_only(ncclComm_t comm, void *buf)
{
    void *scratch;
    EX_CHECK(cudaMalloc(&scratch, 512));
    size_t n = 8192;
    char *big = (char *)buf + 4096;
    EX_CHECK(ncclReduce(big, rank == 0 ? big : scratch, n, ncclFloat32, ncclSum, 0, comm, 0));
    EX_CHECK(ncclBroadcast(rank == 1 ? big : scratch, big, n, ncclFloat32, 1, comm, 0));
    EX_CHECK(
        ncclGather(big, rank == 0 ? (char *)buf + 65536 : scratch, 1024, ncclFloat32, 0, comm, 0));
    if (planted && rank == 0)
        EX_CHECK(ncclReduce(big, scratch, n, ncclFloat32, ncclSum, 0, comm, 0));
    else
        EX_CHECK(ncclReduce(big, rank == 0 ? big : scratch, n, ncclFloat32, ncclSum, 0, comm, 0));
}

/* ---- a stage that stops: the torch pipeline seen on the GPU ---- */

NOINLINE static void stage_recv(ncclComm_t comm, void *buf)
{
    EX_CHECK(ncclRecv(buf, planted && rank == 2 ? 1000 : 1024, ncclFloat32, rank - 1, comm, 0));
}

NOINLINE static void stage_send(ncclComm_t comm, void *buf)
{
    EX_CHECK(ncclSend(buf, 1024, ncclFloat32, rank + 1, comm, 0));
}

static void pipeline(ncclComm_t comm, void *buf)
{
    /* The last stage posts its receive before the first stage has sent. */
    if (rank == 3)
        stage_recv(comm, buf);
    if (rank == 0)
        usleep(200000);
    if (rank > 0 && rank < 3)
        stage_recv(comm, buf);
    if (planted && rank == 2)
        return; /* real NCCL may hang in the short receive: it never sends to rank 3 */
    if (rank < 3)
        stage_send(comm, buf);
}

/* A rank that stops (a stalled DP worker): the others enter the collective it never reaches,
 * then send to it; the unanswered send is a consequence. */
NOINLINE static void worker_step(ncclComm_t comm, void *buf)
{
    EX_CHECK(ncclAllReduce(buf, buf, 512, ncclFloat32, ncclSum, comm, 0));
}

static void stall(ncclComm_t comm, void *buf)
{
    ncclComm_t pair;
    EX_CHECK(ncclCommSplit(comm, 0, rank, &pair, NULL));
    for (int step = 0; step < 3; step++) {
        if (planted && rank == 3 && step == 2)
            return; /* stuck in its host code */
        worker_step(comm, buf);
        EX_CHECK(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, pair, 0));
    }
    if (rank == 0)
        EX_CHECK(ncclSend(buf, 64, ncclFloat32, 3, comm, 0));
    if (rank == 3)
        EX_CHECK(ncclRecv(buf, 64, ncclFloat32, 0, comm, 0));
}

/* Hidden states gathered by NCCL (instead of copied), then cut per row on the host, with
 * --dim hidden=512: 4 tokens of each rank, 16 rows in all. The planted consumer reads half of
 * each row, the other axis. */
NOINLINE static void cut_rows(char *gathered, char *host, int rows)
{
    size_t row = 512 * 2, piece = planted ? row / 2 : row;
    for (int r = 0; r < rows; r++)
        EX_CHECK(cudaMemcpy(host + r * piece, gathered + r * row, piece, cudaMemcpyDeviceToHost));
}

static void gathered(ncclComm_t comm, void *buf)
{
    static char host[16 * 1024];
    char *out = (char *)buf + 8192;
    EX_CHECK(ncclAllGather(buf, out, 4 * 512, ncclBfloat16, comm, 0));
    if (rank == 0)
        cut_rows(out, host, 4 * world);
}

/* The same in graph mode: the decode graph all-gathers the hidden states; after each of its two
 * replays rank 0 cuts them per row (the planted consumer, half rows: found in replay 1). */
NOINLINE static void capture_gather(cudaStream_t s, ncclComm_t comm, void *buf, char *out,
                                    cudaGraphExec_t *exec)
{
    EX_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EX_CHECK(ncclAllGather(buf, out, 4 * 512, ncclBfloat16, comm, s));
    instantiate_capture(s, exec);
}

static void graph_gathered(ncclComm_t comm, void *buf)
{
    static char host[16 * 1024];
    char *out = (char *)buf + 8192;
    cudaStream_t s;
    cudaGraphExec_t exec;
    EX_CHECK(cudaStreamCreate(&s));
    capture_gather(s, comm, buf, out, &exec);
    for (int step = 0; step < 2; step++) {
        decode_step(exec, s);
        if (rank == 0)
            cut_rows(out, host, 4 * world);
    }
}

/* ---- a rarely taken branch: one extra all-reduce, identical to its neighbours ---- */

NOINLINE static void layer_all_reduce(ncclComm_t comm, void *buf)
{
    EX_CHECK(ncclAllReduce(buf, buf, 1024, ncclBfloat16, ncclSum, comm, 0));
}

NOINLINE static void rare_branch(ncclComm_t comm, void *buf)
{
    EX_CHECK(ncclAllReduce(buf, buf, 1024, ncclBfloat16, ncclSum, comm, 0));
}

static void extra_branch(ncclComm_t comm, void *buf)
{
    for (int step = 0; step < 4; step++) {
        layer_all_reduce(comm, buf);
        if (planted && rank == 1 && step == 1)
            rare_branch(comm, buf);
        EX_CHECK(ncclAllGather(buf, (char *)buf + 8192, 256, ncclBfloat16, comm, 0));
    }
}

/* ---- torch serving traced dormant (run --dormant), each rank armed with attach --on at its
 * own point: ranks 0 to 3 at their collectives #0, #16, #22 and #26 ---- */

/* Arms this process as a user would (shapetrace attach PID --on, $SHP_TOOL): recording starts
 * at its next call. */
static void arm_self(void)
{
    const char *tool = getenv("SHP_TOOL");
    char cmd[4096];
    if (!tool ||
        snprintf(cmd, sizeof(cmd), "'%s' attach %d --on >/dev/null 2>&1", tool, (int)getpid()) >=
            (int)sizeof(cmd) ||
        system(cmd) != 0) {
        fprintf(stderr, "rank %d: could not arm itself (SHP_TOOL=%s)\n", rank, tool ? tool : "");
        exit(1);
    }
}

NOINLINE static void serve_step(ncclComm_t comm, void *buf, int step)
{
    size_t n = planted && rank == 2 && step == 69 ? 4095 : 4096;
    EX_CHECK(ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, comm, 0));
}

/* Every tenth step also passes a token count around the ring (a group of a send and a
 * receive), numbered per peer and direction as NCCL numbers them. */
NOINLINE static void ring_exchange(ncclComm_t comm, char *buf)
{
    EX_CHECK(ncclGroupStart());
    EX_CHECK(ncclSend(buf + 16384, 64, ncclInt32, (rank + 1) % world, comm, 0));
    EX_CHECK(ncclRecv(buf + 32768, 64, ncclInt32, (rank + world - 1) % world, comm, 0));
    EX_CHECK(ncclGroupEnd());
}

static void dormant(ncclComm_t comm, void *buf)
{
    static const int armed_at[] = {0, 16, 22, 26};
    for (int step = 0; step < 80; step++) {
        if (step == armed_at[rank % 4])
            arm_self();
        serve_step(comm, buf, step);
        if (step % 10 == 5)
            ring_exchange(comm, buf);
    }
}

/* ---- a data-parallel worker whose trace reaches its cap (run --max-mb 1): rank 1 also copies
 * its metrics to the host at every step, so its trace fills first and drops the rest ---- */

NOINLINE static void dp_step(ncclComm_t comm, void *buf, int step)
{
    size_t n = planted && rank == 3 && step == 4000 ? 1023 : 1024;
    EX_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, 0));
}

static void capped(ncclComm_t comm, void *buf)
{
    static char metrics[64];
    for (int step = 0; step < 5000; step++) {
        dp_step(comm, buf, step);
        for (int k = 0; rank == 1 && k < 4; k++)
            EX_CHECK(cudaMemcpy(metrics, (char *)buf + 64 * k, 64, cudaMemcpyDeviceToHost));
    }
}

/* ---- calls NCCL refuses (ncclInvalidArgument: nothing enqueued, no seq taken) ---- */

/* FSDP: each layer's parameters are all-gathered into an unsharded buffer that is freed after
 * use (its storage resized to 0, data_ptr() NULL) and allocated again before the next gather.
 * The planted rank forgets to allocate it again for layer 2: NCCL refuses the gather, and torch
 * raises (the rank exits). */
NOINLINE static void gather_layer(ncclComm_t comm, const char *shard, char *unsharded)
{
    EX_CHECK(ncclAllGather(shard, unsharded, 512, ncclBfloat16, comm, 0));
}

static void fsdp_freed(ncclComm_t comm, void *buf)
{
    char *shard = buf, *full = (char *)buf + 8192;
    for (int layer = 0; layer < 4; layer++) {
        char *unsharded = planted && rank == 2 && layer == 2 ? NULL : full;
        gather_layer(comm, shard, unsharded);
        EX_CHECK(ncclReduceScatter(full, shard, 512, ncclBfloat16, ncclSum, comm, 0));
    }
}

/* vLLM's pynccl on a tensor-parallel group of two: the planted rank broadcasts from the global
 * rank of the group's first member instead of its rank in the group (an invalid root), and its
 * wrapper drops NCCL's return code: it goes on with the next call. */
NOINLINE static void tp_broadcast(ncclComm_t tp, void *buf, int root)
{
    (void)ncclBroadcast(buf, buf, 256, ncclInt32, root, tp, 0); /* the code is not checked */
}

static void pynccl_root(ncclComm_t comm, void *buf)
{
    ncclComm_t tp;
    EX_CHECK(ncclCommSplit(comm, rank / 2, rank, &tp, NULL));
    for (int step = 0; step < 4; step++) {
        tp_broadcast(tp, buf, planted && rank == 3 && step == 1 ? 2 : 0);
        EX_CHECK(ncclAllReduce(buf, buf, 1024, ncclBfloat16, ncclSum, tp, 0));
        EX_CHECK(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, 0));
    }
}

/* ---- SGLang speculative decoding (EAGLE) with DP attention: the target model all-reduces on
 * the tensor-parallel group, the draft model all-gathers on a sub-communicator of its own. The
 * planted rank, idle at step 3 (an empty batch in DP attention), runs the draft's collective
 * before the target's, as the hang reported for EAGLE with DP attention does: every rank waits
 * for another. ---- */

NOINLINE static void target_forward(ncclComm_t tp, void *buf)
{
    EX_CHECK(ncclAllReduce(buf, buf, 2048, ncclBfloat16, ncclSum, tp, 0));
}

NOINLINE static void draft_forward(ncclComm_t draft, void *buf)
{
    EX_CHECK(ncclAllGather(buf, (char *)buf + 16384, 256, ncclBfloat16, draft, 0));
}

static void eagle_dp(ncclComm_t comm, void *buf)
{
    ncclComm_t draft;
    EX_CHECK(ncclCommSplit(comm, 0, rank, &draft, NULL));
    for (int step = 0; step < 5; step++) {
        if (planted && rank == 2 && step == 3) {
            draft_forward(draft, buf); /* the idle rank's dummy draft pass comes first */
            target_forward(comm, buf);
            continue;
        }
        target_forward(comm, buf);
        draft_forward(draft, buf);
    }
}

/* ---- torch with non-blocking communicators (TORCH_NCCL_USE_COMM_NONBLOCKING=1), 8 ranks: the
 * tensor-parallel groups are split with config.blocking = 0 and a data-parallel communicator is
 * initialized the same way; both return ncclInProgress and are polled until ready, as
 * ProcessGroupNCCL's waitUntilInitialized does ---- */

static void wait_ready(ncclComm_t comm)
{
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
        EX_CHECK(ncclCommGetAsyncError(comm, &state));
        if (state == ncclInProgress)
            usleep(1000);
    }
    EX_CHECK(state);
}

NOINLINE static void tp_reduce(ncclComm_t tp, void *buf, int step)
{
    size_t n = planted && rank == 5 && step == 3 ? 2047 : 2048;
    EX_CHECK(ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, tp, 0));
}

static void nonblocking_comms(ncclComm_t comm, void *buf)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t tp, dp;
    ncclResult_t r = ncclCommSplit(comm, rank / 4, rank, &tp, &config);
    if (r != ncclInProgress && r != ncclSuccess)
        EX_CHECK(r);
    wait_ready(tp);
    ncclUniqueId id;
    EX_CHECK(shp_uid_exchange(&id, rank));
    r = ncclCommInitRankConfig(&dp, world, id, rank, &config);
    if (r != ncclInProgress && r != ncclSuccess)
        EX_CHECK(r);
    wait_ready(dp);
    for (int step = 0; step < 5; step++) {
        tp_reduce(tp, buf, step);
        EX_CHECK(ncclAllReduce((char *)buf + 8192, (char *)buf + 8192, 256, ncclFloat32, ncclSum,
                               dp, 0));
    }
}

struct pattern {
    const char *name;
    void (*run)(ncclComm_t comm, void *buf);
};

static const struct pattern patterns[] = {
    {"graph_buckets", graph_buckets},
    {"graph_side_stream", graph_side_stream},
    {"dp_padding", dp_padding},
    {"pynccl", pynccl},
    {"coalesced", coalesced_groups},
    {"a2a_uneven", a2a_uneven},
    {"new_group", new_group},
    {"abort_reinit", abort_reinit},
    {"fsdp", fsdp},
    {"megatron", megatron},
    {"moe", moe},
    {"bcast", bcast},
    {"root_only", root_only},
    {"pipeline", pipeline},
    {"stall", stall},
    {"gathered", gathered},
    {"pp_graph", pp_graph},
    {"replay_output", replay_output},
    {"replay_shapes", replay_shapes},
    {"graph_gathered", graph_gathered},
    {"extra_branch", extra_branch},
    {"dormant", dormant},
    {"capped", capped},
    {"fsdp_freed", fsdp_freed},
    {"pynccl_root", pynccl_root},
    {"eagle_dp", eagle_dp},
    {"nonblocking", nonblocking_comms},
    {"decode_graphs", decode_graphs},
};

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: stacks PATTERN clean|planted\n");
        return 2;
    }
    planted = !strcmp(argv[2], "planted");
    rank = ex_rank();
    world = ex_world();
    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
        if (strcmp(argv[1], patterns[i].name))
            continue;
        ncclComm_t comm = ex_world_comm();
        void *buf;
        EX_CHECK(cudaMalloc(&buf, 1 << 17));
        patterns[i].run(comm, buf);
        printf("rank %d: %s %s done\n", rank, argv[1], argv[2]);
        /* Leave without tearing down: after a planted divergence the others may be waiting. */
        return 0;
    }
    fprintf(stderr, "stacks: unknown pattern %s\n", argv[1]);
    return 2;
}
