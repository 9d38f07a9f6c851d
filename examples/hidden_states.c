/* shapetrace example: the motivating failure (README, make demo). Tensor-parallel ranks produce
 * per-layer hidden states: [tokens, hidden/tp] bf16 shards are all-gathered and rearranged into
 * [tokens, hidden] with 2-D copies; rank 0 captures 4 layers with device-to-device copies; the
 * states travel to the driver through host memory (the driver's host-to-device copy is the
 * receive); generate() cuts them per sample (512 and 259 tokens).
 *   --fixed  generate() returns 4 tensors of [512, 7168] and 4 of [259, 7168], data checked
 *   --buggy  the returned list is indexed wrongly: layer 0's [771, 7168] tensor is taken for
 *            the list of layers, and slicing each "layer" cuts its rows: 771 tensors of [512]
 *            and 771 of [259]. Nothing fails; the shapes are simply wrong.
 * Run with shp_launch -n 4 (test doubles) or torchrun-like launchers (real NCCL). */
#include <nccl.h>

#include "examples/common.h"

#define HIDDEN 7168
#define TOKENS 771
#define LAYERS 4
#define ROW ((size_t)HIDDEN * 2)

static const size_t samples[2][2] = {{0, 512}, {512, 259}}; /* first token, tokens */

/* The value of layer l, token t, hidden column c: small integers, exact in bf16. */
static uint16_t value(int l, size_t t, size_t c)
{
    return ex_bf16((float)((t % 4) * 64 + (c % 16) * 4 + (size_t)l));
}

__attribute__((noinline)) static void capture_layer(void *dst, const void *src)
{
    EX_CHECK(cudaMemcpy(dst, src, TOKENS * ROW, cudaMemcpyDeviceToDevice));
}

__attribute__((noinline)) static void receive_states(void *dev, const void *host)
{
    EX_CHECK(cudaMemcpy(dev, host, TOKENS * ROW, cudaMemcpyHostToDevice));
}

/* One tensor per sample and layer; or, buggy, one per token of layer 0. Returns how many, and
 * checks the data of the correct ones. */
__attribute__((noinline)) static size_t generate(void *const *states, int buggy, size_t *bad)
{
    size_t n = 0;
    uint16_t *out = malloc(TOKENS * ROW);
    for (int s = 0; s < 2; s++) {
        size_t off = samples[s][0], len = samples[s][1];
        if (buggy) {
            /* `layers = result[0]` took layer 0's tensor; `layer[off:off + len]` for each of
             * its 771 "layers" slices a row. */
            for (size_t t = 0; t < TOKENS; t++, n++)
                EX_CHECK(cudaMemcpy(out, (char *)states[0] + t * ROW + off * 2, len * 2,
                                    cudaMemcpyDeviceToHost));
            continue;
        }
        for (int l = 0; l < LAYERS; l++, n++) {
            EX_CHECK(
                cudaMemcpy(out, (char *)states[l] + off * ROW, len * ROW, cudaMemcpyDeviceToHost));
            for (size_t t = 0; t < len; t++)
                for (size_t c = 0; c < HIDDEN; c += 97)
                    *bad += out[t * HIDDEN + c] != value(l, off + t, c);
        }
    }
    free(out);
    return n;
}

int main(int argc, char **argv)
{
    int buggy = argc > 1 && !strcmp(argv[1], "--buggy");
    int rank = ex_rank(), tp = ex_world();
    if (HIDDEN % tp) {
        fprintf(stderr, "hidden_states: %d ranks do not divide hidden %d\n", tp, HIDDEN);
        return 2;
    }
    size_t hc = HIDDEN / tp; /* columns of a shard */
    ncclComm_t comm = ex_world_comm();
    uint16_t *host = malloc(TOKENS * hc * 2);
    void *shard, *gathered, *full, *cap[LAYERS];
    EX_CHECK(cudaMalloc(&shard, TOKENS * hc * 2));
    EX_CHECK(cudaMalloc(&gathered, TOKENS * ROW));
    EX_CHECK(cudaMalloc(&full, TOKENS * ROW));
    for (int l = 0; l < LAYERS; l++) {
        for (size_t t = 0; t < TOKENS; t++)
            for (size_t c = 0; c < hc; c++)
                host[t * hc + c] = value(l, t, (size_t)rank * hc + c);
        EX_CHECK(cudaMemcpy(shard, host, TOKENS * hc * 2, cudaMemcpyHostToDevice));
        /* [tp][tokens][hidden/tp] ... */
        EX_CHECK(ncclAllGather(shard, gathered, TOKENS * hc, ncclBfloat16, comm, 0));
        /* ... rearranged into [tokens][hidden], one column block per rank. */
        for (int r = 0; r < tp; r++)
            EX_CHECK(cudaMemcpy2D((char *)full + (size_t)r * hc * 2, ROW,
                                  (char *)gathered + (size_t)r * TOKENS * hc * 2, hc * 2, hc * 2,
                                  TOKENS, cudaMemcpyDeviceToDevice));
        if (rank == 0) {
            EX_CHECK(cudaMalloc(&cap[l], TOKENS * ROW));
            capture_layer(cap[l], full);
        }
    }
    int rc = 0;
    if (rank == 0) {
        /* To the driver, through host memory. */
        void *pinned[LAYERS], *states[LAYERS];
        for (int l = 0; l < LAYERS; l++) {
            EX_CHECK(cudaMallocHost(&pinned[l], TOKENS * ROW));
            EX_CHECK(cudaMemcpy(pinned[l], cap[l], TOKENS * ROW, cudaMemcpyDeviceToHost));
            EX_CHECK(cudaMalloc(&states[l], TOKENS * ROW));
            receive_states(states[l], pinned[l]);
        }
        size_t bad = 0, n = generate(states, buggy, &bad);
        if (buggy)
            printf("generate() returned %zu tensors: %d of [%zu] and %d of [%zu]\n", n, TOKENS,
                   samples[0][1], TOKENS, samples[1][1]);
        else
            printf("generate() returned %zu tensors: %d of [%zu, %d] and %d of [%zu, %d]; "
                   "%s\n",
                   n, LAYERS, samples[0][1], HIDDEN, LAYERS, samples[1][1], HIDDEN,
                   bad ? "DATA WRONG" : "data checked");
        rc = bad ? 1 : 0;
    }
    EX_CHECK(ncclCommDestroy(comm));
    return rc;
}
