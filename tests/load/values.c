/* shapetrace tests: values that must agree across ranks (SHAPETRACE_VALUES), in the pattern of
 * examples/torch_tp.py, on ranks started by shp_launch. Each step: rank 0 broadcasts the step
 * number; every rank embeds the same batch (a host-to-device copy: replicated), computes its
 * column-parallel shard and its row-parallel partial sum (copied up: each rank's own), all-reduces
 * the partial sums; then it fetches the hidden state, computes the logits from it (replicated, as
 * a model whose head is not sharded does), uploads them and copies them back to sample; and
 * all-gathers vocabulary-parallel logits too, copied back as well.
 * Usage: values clean | race | input | capture | group
 *   race     rank 2 (the last if fewer) overwrites its all-reduce output at step 3 right after
 *            the call, from another stream, before the fingerprint ran
 *   input    rank 1 (the last if fewer) computes its logits at step 3 from its own partial sum,
 *            not from the all-reduce's output
 *   capture  every step's all-reduce is captured into a CUDA graph once and replayed
 *   group    every all-reduce is issued inside ncclGroupStart/ncclGroupEnd (clean)
 * Built with -rdynamic: the site glob of copies (SHAPETRACE_VALUES_SITE) sees these functions. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdbool.h>
#include <string.h>

#include "examples/common.h"

#define TOKENS 8
#define HIDDEN 16
#define FFN 32
#define VOCAB 64
#define STEPS 6
#define PLANT_STEP 3

#define NOINLINE __attribute__((noinline, optimize("no-optimize-sibling-calls")))

/* The call sites, exported (-rdynamic) so that dladdr names them. */
int broadcast_step(ncclComm_t comm, int step, int *meta_dev);
void embed(float *x_dev, const float *x);
void row_partial(float *y_dev, float y[TOKENS][HIDDEN], const float x[TOKENS][HIDDEN]);
void row_parallel(ncclComm_t comm, float *y_dev, int step);
void fetch_hidden(float y[TOKENS][HIDDEN], const float *y_dev);
void upload_logits(float *logits_dev, const float logits[TOKENS][VOCAB]);
int sample_logits(float logits[TOKENS][VOCAB], const float *logits_dev);
void shard_logits(float *shard_dev, float shard[TOKENS][VOCAB], const float y[TOKENS][HIDDEN]);
void gather_logits(ncclComm_t comm, const float *shard_dev, float *gathered_dev);
void sample_gathered(float *out, const float *gathered_dev);
void capture_row_parallel(ncclComm_t comm, float *y_dev, cudaGraphExec_t *exec);

static int rank, world;
static const char *mode = "clean";
static cudaStream_t stream, other;

static float w1[HIDDEN][FFN], w2[FFN][HIDDEN], wv[HIDDEN][VOCAB];

/* Weights from one seed: the same on every rank. */
static void weights(void)
{
    unsigned x = 1234;
    for (int i = 0; i < HIDDEN * FFN; i++)
        w1[i / FFN][i % FFN] = (float)((x = x * 1103515245u + 12345u) >> 16 & 0xff) / 256.0f - 0.5f;
    for (int i = 0; i < FFN * HIDDEN; i++)
        w2[i / HIDDEN][i % HIDDEN] =
            (float)((x = x * 1103515245u + 12345u) >> 16 & 0xff) / 256.0f - 0.5f;
    for (int i = 0; i < HIDDEN * VOCAB; i++)
        wv[i / VOCAB][i % VOCAB] =
            (float)((x = x * 1103515245u + 12345u) >> 16 & 0xff) / 256.0f - 0.5f;
}

NOINLINE int broadcast_step(ncclComm_t comm, int step, int *meta_dev)
{
    int meta = rank == 0 ? step : -1;
    EX_CHECK(cudaMemcpy(meta_dev, &meta, sizeof(meta), cudaMemcpyHostToDevice));
    EX_CHECK(ncclBroadcast(meta_dev, meta_dev, 1, ncclInt32, 0, comm, stream));
    EX_CHECK(cudaMemcpy(&meta, meta_dev, sizeof(meta), cudaMemcpyDeviceToHost));
    return meta;
}

NOINLINE void embed(float *x_dev, const float *x)
{
    EX_CHECK(
        cudaMemcpyAsync(x_dev, x, sizeof(float) * TOKENS * HIDDEN, cudaMemcpyHostToDevice, stream));
}

/* h = relu(x @ w1[:, shard]), y = h @ w2[shard, :]: this rank's partial sum, copied up. */
NOINLINE void row_partial(float *y_dev, float y[TOKENS][HIDDEN], const float x[TOKENS][HIDDEN])
{
    int f = FFN / world;
    float h[TOKENS][FFN];
    for (int t = 0; t < TOKENS; t++)
        for (int j = 0; j < f; j++) {
            float s = 0;
            for (int k = 0; k < HIDDEN; k++)
                s += x[t][k] * w1[k][rank * f + j];
            h[t][j] = s > 0 ? s : 0;
        }
    for (int t = 0; t < TOKENS; t++)
        for (int k = 0; k < HIDDEN; k++) {
            float s = 0;
            for (int j = 0; j < f; j++)
                s += h[t][j] * w2[rank * f + j][k];
            y[t][k] = s;
        }
    EX_CHECK(
        cudaMemcpyAsync(y_dev, y, sizeof(float) * TOKENS * HIDDEN, cudaMemcpyHostToDevice, stream));
}

NOINLINE void row_parallel(ncclComm_t comm, float *y_dev, int step)
{
    bool group = !strcmp(mode, "group");
    if (group)
        EX_CHECK(ncclGroupStart());
    EX_CHECK(ncclAllReduce(y_dev, y_dev, TOKENS * HIDDEN, ncclFloat32, ncclSum, comm, stream));
    if (group)
        EX_CHECK(ncclGroupEnd());
    if (!strcmp(mode, "race") && rank == (world > 2 ? 2 : world - 1) && step == PLANT_STEP)
        /* Another stream writes the output before the all-reduce's consumers (and the
         * fingerprint) read it: nothing orders it after the collective. */
        EX_CHECK(cudaMemsetAsync(y_dev, 0, sizeof(float) * HIDDEN, other));
}

NOINLINE void fetch_hidden(float y[TOKENS][HIDDEN], const float *y_dev)
{
    EX_CHECK(
        cudaMemcpyAsync(y, y_dev, sizeof(float) * TOKENS * HIDDEN, cudaMemcpyDeviceToHost, stream));
    EX_CHECK(cudaStreamSynchronize(stream));
}

NOINLINE void upload_logits(float *logits_dev, const float logits[TOKENS][VOCAB])
{
    EX_CHECK(cudaMemcpyAsync(logits_dev, logits, sizeof(float) * TOKENS * VOCAB,
                             cudaMemcpyHostToDevice, stream));
}

/* The logits back on the host for sampling (torch's .cpu()): replicated on every rank. */
NOINLINE int sample_logits(float logits[TOKENS][VOCAB], const float *logits_dev)
{
    EX_CHECK(
        cudaMemcpy(logits, logits_dev, sizeof(float) * TOKENS * VOCAB, cudaMemcpyDeviceToHost));
    int best = 0;
    for (int v = 1; v < VOCAB; v++)
        if (logits[0][v] > logits[0][best])
            best = v;
    return best;
}

NOINLINE void shard_logits(float *shard_dev, float shard[TOKENS][VOCAB],
                           const float y[TOKENS][HIDDEN])
{
    int v = VOCAB / world;
    for (int t = 0; t < TOKENS; t++)
        for (int j = 0; j < v; j++) {
            float s = 0;
            for (int k = 0; k < HIDDEN; k++)
                s += y[t][k] * wv[k][rank * v + j];
            shard[t][j] = s;
        }
    EX_CHECK(cudaMemcpyAsync(shard_dev, shard, sizeof(float) * TOKENS * v, cudaMemcpyHostToDevice,
                             stream));
}

NOINLINE void gather_logits(ncclComm_t comm, const float *shard_dev, float *gathered_dev)
{
    EX_CHECK(ncclAllGather(shard_dev, gathered_dev, TOKENS * (VOCAB / world), ncclFloat32, comm,
                           stream));
}

NOINLINE void sample_gathered(float *out, const float *gathered_dev)
{
    EX_CHECK(cudaMemcpyAsync(out, gathered_dev, sizeof(float) * TOKENS * VOCAB,
                             cudaMemcpyDeviceToHost, stream));
    EX_CHECK(cudaStreamSynchronize(stream));
}

/* capture: the all-reduce of every step as one graph, captured once and replayed. */
NOINLINE void capture_row_parallel(ncclComm_t comm, float *y_dev, cudaGraphExec_t *exec)
{
    cudaGraph_t g;
    EX_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    EX_CHECK(ncclAllReduce(y_dev, y_dev, TOKENS * HIDDEN, ncclFloat32, ncclSum, comm, stream));
    EX_CHECK(cudaStreamEndCapture(stream, &g));
    EX_CHECK(cudaGraphInstantiate(exec, g, 0));
}

int main(int argc, char **argv)
{
    if (argc > 1)
        mode = argv[1];
    rank = ex_rank();
    world = ex_world();
    if (FFN % world || VOCAB % world) {
        fprintf(stderr, "values: %d ranks do not divide %d and %d\n", world, FFN, VOCAB);
        return 2;
    }
    weights();
    ncclComm_t comm = ex_world_comm();
    EX_CHECK(cudaStreamCreate(&stream));
    EX_CHECK(cudaStreamCreate(&other));
    int *meta_dev;
    float *x_dev, *y_dev, *logits_dev, *shard_dev, *gathered_dev;
    EX_CHECK(cudaMalloc((void **)&meta_dev, sizeof(int)));
    EX_CHECK(cudaMalloc((void **)&x_dev, sizeof(float) * TOKENS * HIDDEN));
    EX_CHECK(cudaMalloc((void **)&y_dev, sizeof(float) * TOKENS * HIDDEN));
    EX_CHECK(cudaMalloc((void **)&logits_dev, sizeof(float) * TOKENS * VOCAB));
    EX_CHECK(cudaMalloc((void **)&shard_dev, sizeof(float) * TOKENS * VOCAB));
    EX_CHECK(cudaMalloc((void **)&gathered_dev, sizeof(float) * TOKENS * VOCAB));
    cudaGraphExec_t exec = NULL;
    bool graphs = !strcmp(mode, "capture");
    if (graphs)
        capture_row_parallel(comm, y_dev, &exec);
    int odd = world > 1 ? 1 : 0, tokens[STEPS];
    for (int s = 0; s < STEPS; s++) {
        int step = broadcast_step(comm, s, meta_dev);
        float x[TOKENS][HIDDEN], y[TOKENS][HIDDEN], hidden[TOKENS][HIDDEN];
        float logits[TOKENS][VOCAB], shard[TOKENS][VOCAB], gathered[TOKENS * VOCAB];
        for (int i = 0; i < TOKENS * HIDDEN; i++)
            x[i / HIDDEN][i % HIDDEN] = (float)((i * 7 + step * 13) % 17) / 8.0f - 1.0f;
        embed(x_dev, &x[0][0]);
        row_partial(y_dev, y, x);
        if (graphs)
            EX_CHECK(cudaGraphLaunch(exec, stream));
        else
            row_parallel(comm, y_dev, step);
        fetch_hidden(hidden, y_dev);
        /* The planted rank takes its own partial sum for the all-reduce's output. */
        bool wrong = !strcmp(mode, "input") && rank == odd && step == PLANT_STEP;
        for (int t = 0; t < TOKENS; t++)
            for (int v = 0; v < VOCAB; v++) {
                float acc = 0;
                for (int k = 0; k < HIDDEN; k++)
                    acc += (wrong ? y : hidden)[t][k] * wv[k][v];
                logits[t][v] = acc;
            }
        upload_logits(logits_dev, logits);
        tokens[s] = sample_logits(logits, logits_dev);
        shard_logits(shard_dev, shard, hidden);
        gather_logits(comm, shard_dev, gathered_dev);
        sample_gathered(gathered, gathered_dev);
    }
    printf("rank %d: %d steps, tokens", rank, STEPS);
    for (int s = 0; s < STEPS; s++)
        printf(" %d", tokens[s]);
    printf("\n");
    EX_CHECK(ncclCommDestroy(comm));
    return 0;
}
