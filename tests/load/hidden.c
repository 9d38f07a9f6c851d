/* shapetrace tests: the motivating failure in one process (tensor parallelism of 1), on the test
 * doubles or real CUDA and NCCL. Hidden states [771, 7168] bf16 are all-gathered per layer,
 * captured with device-to-device copies, travel to a driver through pinned host memory (the
 * driver's host-to-device copy is the "receive"), and generate() cuts them per sample (512 and
 * 259 tokens). --buggy indexes the returned list wrongly: it slices tokens of layer 0's rows,
 * 771 pieces of [512] and 771 of [259]. --fixed copies [512, 7168] and [259, 7168] per layer.
 * The other modes are correct code that must stay silent: rows (whole rows one at a time),
 * rows2d (a 2-D copy of full rows), paged (blocks of a paged cache in any order), inplace
 * (collectives reading their own outputs), reuse (a block freed and reused with another shape). */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIDDEN 7168
#define TOKENS 771
#define LAYERS 4
#define ROW ((size_t)HIDDEN * 2) /* bytes of one bf16 row */

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);                         \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

static const size_t samples[2][2] = {{0, 512}, {512, 259}}; /* offset, tokens */

static void *dev_alloc(size_t n)
{
    void *p;
    CHECK(cudaMalloc(&p, n));
    return p;
}

__attribute__((noinline)) static void capture_layer(void *dst, const void *src)
{
    CHECK(cudaMemcpy(dst, src, TOKENS * ROW, cudaMemcpyDeviceToDevice));
}

__attribute__((noinline)) static void receive_states(void *dev, const void *host)
{
    CHECK(cudaMemcpy(dev, host, TOKENS * ROW, cudaMemcpyHostToDevice));
}

/* The consumer: one tensor per sample and layer, or, buggy, per token of layer 0. */
__attribute__((noinline)) static size_t generate(void *const *states, int buggy, char *out)
{
    size_t n = 0;
    for (int s = 0; s < 2; s++) {
        size_t off = samples[s][0], len = samples[s][1];
        if (!buggy) {
            for (int l = 0; l < LAYERS; l++, n++)
                CHECK(cudaMemcpy(out, (char *)states[l] + off * ROW, len * ROW,
                                 cudaMemcpyDeviceToHost));
            continue;
        }
        /* states[0] is layer 0's [771, 7168] tensor, not the list of 4 layers: h[off:off+len]
         * of each of its rows. */
        for (size_t t = 0; t < TOKENS; t++, n++)
            CHECK(cudaMemcpy(out, (char *)states[0] + t * ROW + off * 2, len * 2,
                             cudaMemcpyDeviceToHost));
    }
    return n;
}

static int hidden_states(int buggy)
{
    ncclUniqueId id;
    ncclComm_t comm;
    CHECK(ncclGetUniqueId(&id));
    CHECK(ncclCommInitRank(&comm, 1, id, 0));
    void *shard = dev_alloc(TOKENS * ROW), *full[LAYERS], *cap[LAYERS], *recv[LAYERS];
    void *pinned[LAYERS];
    char *out = malloc(TOKENS * ROW);
    for (int l = 0; l < LAYERS; l++) {
        full[l] = dev_alloc(TOKENS * ROW);
        cap[l] = dev_alloc(TOKENS * ROW);
        recv[l] = dev_alloc(TOKENS * ROW);
        CHECK(cudaMallocHost(&pinned[l], TOKENS * ROW));
        CHECK(ncclAllGather(shard, full[l], (size_t)TOKENS * HIDDEN, ncclBfloat16, comm, 0));
        capture_layer(cap[l], full[l]);
    }
    for (int l = 0; l < LAYERS; l++) {
        CHECK(cudaMemcpy(pinned[l], cap[l], TOKENS * ROW, cudaMemcpyDeviceToHost));
        receive_states(recv[l], pinned[l]);
    }
    size_t n = generate(recv, buggy, out);
    printf("%zu tensors\n", n);
    CHECK(ncclCommDestroy(comm));
    return 0;
}

/* Correct consumers of the same kind of region. */
static int silent(const char *mode)
{
    ncclUniqueId id;
    ncclComm_t comm;
    CHECK(ncclGetUniqueId(&id));
    CHECK(ncclCommInitRank(&comm, 1, id, 0));
    void *shard = dev_alloc(TOKENS * ROW), *full = dev_alloc(TOKENS * ROW);
    char *out = malloc(TOKENS * ROW);
    CHECK(ncclAllGather(shard, full, (size_t)TOKENS * HIDDEN, ncclBfloat16, comm, 0));
    if (!strcmp(mode, "rows")) {
        for (size_t t = 0; t < TOKENS; t++)
            CHECK(cudaMemcpy(out, (char *)full + t * ROW, ROW, cudaMemcpyDeviceToHost));
    } else if (!strcmp(mode, "rows2d")) {
        CHECK(cudaMemcpy2D(out, ROW, full, ROW, ROW, TOKENS, cudaMemcpyDeviceToHost));
        CHECK(
            cudaMemcpy2D(out, ROW, (char *)full + 10 * ROW, ROW, ROW, 100, cudaMemcpyDeviceToHost));
    } else if (!strcmp(mode, "paged")) {
        /* A cache of 48 blocks of 16 tokens, read block by block in a scattered order. */
        static const int order[] = {7, 3, 40, 41, 12, 0, 33, 9, 18, 2};
        for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
            CHECK(cudaMemcpy(out, (char *)full + (size_t)order[i] * 16 * ROW, 16 * ROW,
                             cudaMemcpyDeviceToHost));
    } else if (!strcmp(mode, "inplace")) {
        for (int i = 0; i < 8; i++)
            CHECK(
                ncclAllReduce(full, full, (size_t)TOKENS * HIDDEN, ncclBfloat16, ncclSum, comm, 0));
        CHECK(cudaMemcpy(out, full, TOKENS * ROW, cudaMemcpyDeviceToHost));
    } else if (!strcmp(mode, "reuse")) {
        /* The block is freed and handed out again holding [1024, 512] bf16 rows: reads of
         * 1,024-byte rows are whole rows of the new tensor, not partial rows of the old. */
        CHECK(cudaFree(full));
        void *again = dev_alloc(TOKENS * ROW);
        CHECK(cudaMemcpy(again, out, 1024 * 1024, cudaMemcpyHostToDevice));
        for (size_t t = 0; t < 64; t++)
            CHECK(cudaMemcpy(out, (char *)again + t * 1024, 1024, cudaMemcpyDeviceToHost));
    } else {
        fprintf(stderr, "hidden: unknown mode %s\n", mode);
        return 2;
    }
    printf("%s ok\n", mode);
    CHECK(ncclCommDestroy(comm));
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "--fixed";
    if (!strcmp(mode, "--buggy"))
        return hidden_states(1);
    if (!strcmp(mode, "--fixed"))
        return hidden_states(0);
    return silent(mode);
}
