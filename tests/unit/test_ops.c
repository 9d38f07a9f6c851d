/* shapetrace unit test: the contract's numbers. Op numbers and record type numbers are stored in
 * traces on disk, so they are pinned here as they were when those traces were written; and the
 * tables generated from the call list agree with the list (library, class, name lookup). */
#include <stdio.h>
#include <string.h>

#include "common/ops.h"
#include "include/shapetrace/calls.h"
#include "include/shapetrace/env.h"
#include "include/shapetrace/trace.h"

static int passed, failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            putchar('\n');                                                                         \
        }                                                                                          \
    } while (0)

/* The op numbers of format version 1, as traces on disk hold them. Never edit a line; a new
 * function adds one. */
static const struct {
    const char *name;
    unsigned op;
} golden_ops[] = {
    {"ncclAllReduce", 1},
    {"ncclBroadcast", 2},
    {"ncclBcast", 3},
    {"ncclReduce", 4},
    {"ncclAllGather", 5},
    {"ncclReduceScatter", 6},
    {"ncclAlltoAll", 7},
    {"ncclGather", 8},
    {"ncclScatter", 9},
    {"ncclSend", 10},
    {"ncclRecv", 11},
    {"ncclGroupStart", 12},
    {"ncclGroupEnd", 13},
    {"ncclCommInitRank", 14},
    {"ncclCommInitRankConfig", 15},
    {"ncclCommInitAll", 16},
    {"ncclCommInitRankScalable", 17},
    {"ncclCommSplit", 18},
    {"ncclCommShrink", 19},
    {"ncclCommFinalize", 20},
    {"ncclCommDestroy", 21},
    {"ncclCommAbort", 22},
    {"cudaMemcpy", 23},
    {"cudaMemcpyAsync", 24},
    {"cudaMemcpy2D", 25},
    {"cudaMemcpy2DAsync", 26},
    {"cudaMemcpyPeer", 27},
    {"cudaMemcpyPeerAsync", 28},
    {"cudaMemcpy_ptds", 29},
    {"cudaMemcpyAsync_ptsz", 30},
    {"cudaMemcpy2D_ptds", 31},
    {"cudaMemcpy2DAsync_ptsz", 32},
    {"cudaMalloc", 33},
    {"cudaMallocAsync", 34},
    {"cudaMallocAsync_ptsz", 35},
    {"cudaMallocHost", 36},
    {"cudaHostAlloc", 37},
    {"cudaFree", 38},
    {"cudaFreeAsync", 39},
    {"cudaFreeAsync_ptsz", 40},
    {"cudaFreeHost", 41},
    {"cudaStreamBeginCapture", 42},
    {"cudaStreamBeginCapture_ptsz", 43},
    {"cudaStreamEndCapture", 44},
    {"cudaStreamEndCapture_ptsz", 45},
    {"cudaGraphInstantiate", 46},
    {"cudaGraphInstantiateWithFlags", 47},
    {"cudaGraphLaunch", 48},
    {"cudaGraphLaunch_ptsz", 49},
    {"cuMemcpy", 50},
    {"cuMemcpyAsync", 51},
    {"cuMemcpyHtoD_v2", 52},
    {"cuMemcpyDtoH_v2", 53},
    {"cuMemcpyDtoD_v2", 54},
    {"cuMemcpyHtoDAsync_v2", 55},
    {"cuMemcpyDtoHAsync_v2", 56},
    {"cuMemcpyDtoDAsync_v2", 57},
    {"cuMemcpy2D_v2", 58},
    {"cuMemcpy2DUnaligned_v2", 59},
    {"cuMemcpy2DAsync_v2", 60},
    {"cuMemcpyPeer", 61},
    {"cuMemcpyPeerAsync", 62},
    {"cuMemAlloc_v2", 63},
    {"cuMemAllocManaged", 64},
    {"cuMemAllocAsync", 65},
    {"cuMemAllocFromPoolAsync", 66},
    {"cuMemFree_v2", 67},
    {"cuMemFreeAsync", 68},
    {"cuMemAllocHost_v2", 69},
    {"cuMemHostAlloc", 70},
    {"cuMemFreeHost", 71},
    {"cuStreamBeginCapture_v2", 72},
    {"cuStreamBeginCaptureToGraph", 73},
    {"cuStreamEndCapture", 74},
    {"cuGraphInstantiateWithFlags", 75},
    {"cuGraphInstantiateWithParams", 76},
    {"cuGraphLaunch", 77},
    {"cuMemcpy_ptds", 78},
    {"cuMemcpyAsync_ptsz", 79},
    {"cuMemcpyHtoD_v2_ptds", 80},
    {"cuMemcpyDtoH_v2_ptds", 81},
    {"cuMemcpyDtoD_v2_ptds", 82},
    {"cuMemcpyHtoDAsync_v2_ptsz", 83},
    {"cuMemcpyDtoHAsync_v2_ptsz", 84},
    {"cuMemcpyDtoDAsync_v2_ptsz", 85},
    {"cuMemcpy2D_v2_ptds", 86},
    {"cuMemcpy2DUnaligned_v2_ptds", 87},
    {"cuMemcpy2DAsync_v2_ptsz", 88},
    {"cuMemcpyPeer_ptds", 89},
    {"cuMemcpyPeerAsync_ptsz", 90},
    {"cuMemAllocAsync_ptsz", 91},
    {"cuMemAllocFromPoolAsync_ptsz", 92},
    {"cuMemFreeAsync_ptsz", 93},
    {"cuStreamBeginCapture_v2_ptsz", 94},
    {"cuStreamBeginCaptureToGraph_ptsz", 95},
    {"cuStreamEndCapture_ptsz", 96},
    {"cuGraphInstantiateWithParams_ptsz", 97},
    {"cuGraphLaunch_ptsz", 98},
};

static const struct {
    const char *name;
    unsigned type, min_size, role;
} golden_recs[] = {
    {"COMM", 1, 112, SHP_ROLE_CALL | SHP_ROLE_META},
    {"COLL", 2, 144, SHP_ROLE_CALL},
    {"P2P", 3, 144, SHP_ROLE_CALL},
    {"GROUP", 4, 64, SHP_ROLE_CALL},
    {"COPY", 5, 144, SHP_ROLE_CALL},
    {"ALLOC", 6, 96, SHP_ROLE_CALL},
    {"GRAPH", 7, 104, SHP_ROLE_CALL},
    {"STACK", 8, 16, SHP_ROLE_META | SHP_ROLE_VAR},
    {"MODULE", 9, 72, SHP_ROLE_META | SHP_ROLE_VAR},
    {"MARK", 10, 144, SHP_ROLE_META},
    {"PYINFO", 11, 48, SHP_ROLE_META},
    {"PYCODE", 12, 32, SHP_ROLE_META | SHP_ROLE_VAR},
    {"PYSTACK", 13, 24, SHP_ROLE_META | SHP_ROLE_VAR},
    {"COPY_C", 14, 64, SHP_ROLE_COMPACT},
    {"COLL_C", 15, 72, SHP_ROLE_COMPACT},
    {"P2P_C", 16, 72, SHP_ROLE_COMPACT},
    {"LAUNCH_C", 17, 48, SHP_ROLE_COMPACT},
    {"VALUE", 18, 88, SHP_ROLE_LATE}, /* format version 3 */
};

int main(void)
{
    size_t nops = sizeof(golden_ops) / sizeof(golden_ops[0]);
    CHECK(SHP_OP_COUNT == nops + 1, "SHP_OP_COUNT %d, golden list %zu", (int)SHP_OP_COUNT, nops);
    for (size_t i = 0; i < nops; i++) {
        unsigned op = shp_op_lookup(golden_ops[i].name);
        CHECK(op == golden_ops[i].op, "%s is op %u, traces on disk say %u", golden_ops[i].name, op,
              golden_ops[i].op);
        CHECK(!strcmp(shp_op_name(golden_ops[i].op), golden_ops[i].name), "op %u is named %s",
              golden_ops[i].op, shp_op_name(golden_ops[i].op));
        const char *n = golden_ops[i].name;
        int lib = !strncmp(n, "nccl", 4)   ? SHP_LIB_NCCL
                  : !strncmp(n, "cuda", 4) ? SHP_LIB_CUDART
                                           : SHP_LIB_CUDA;
        CHECK(shp_op_lib(op) == lib, "%s: library %d", golden_ops[i].name, shp_op_lib(op));
        CHECK(shp_op_class(op) != 0, "%s has no class", golden_ops[i].name);
    }
    CHECK(SHP_OP_ncclAllReduce == 1 && SHP_OP_ncclCommAbort == 22 && SHP_OP_cudaMemcpy == 23 &&
              SHP_OP_cudaGraphLaunch_ptsz == 49 && SHP_OP_cuMemcpy == 50 &&
              SHP_OP_cuGraphLaunch_ptsz == 98,
          "enum constants");
    CHECK(shp_op_lookup("ncclNoSuchCall") == SHP_OP_NONE && shp_op_lib(0) == -1 &&
              shp_op_lib(SHP_OP_COUNT) == -1 && !strcmp(shp_op_name(SHP_OP_COUNT), "?"),
          "unknown ops");

    size_t nrecs = sizeof(golden_recs) / sizeof(golden_recs[0]);
    CHECK(SHP_REC_TYPE_COUNT == nrecs + 1, "SHP_REC_TYPE_COUNT %d", (int)SHP_REC_TYPE_COUNT);
    for (size_t i = 0; i < nrecs; i++) {
        unsigned t = golden_recs[i].type;
        CHECK(shp_rec_min_size(t) == golden_recs[i].min_size, "%s: min size %zu",
              golden_recs[i].name, shp_rec_min_size(t));
        CHECK(shp_rec_role(t) == golden_recs[i].role, "%s: role %#x", golden_recs[i].name,
              shp_rec_role(t));
        CHECK(shp_rec_is_call(t) == !!(golden_recs[i].role & SHP_ROLE_CALL), "%s: is_call",
              golden_recs[i].name);
    }
    CHECK(SHP_REC_COMM == 1 && SHP_REC_PYSTACK == 13 && shp_rec_min_size(SHP_REC_RESERVED) == 8 &&
              shp_rec_min_size(SHP_REC_TYPE_COUNT) == 0 && shp_rec_role(99) == 0,
          "record type constants");

    /* The split child id: a value computed with the formula of format version 1. */
    CHECK(shp_comm_child_id(0x1234, 0, 3) ==
              shp_mix64(0x1234 ^ shp_mix64(((uint64_t)0 << 32) ^ (uint32_t)3)),
          "child id");
    CHECK(shp_comm_child_id(0x1234, 1, -2) != shp_comm_child_id(0x1234, 0, -2), "child index");
    CHECK(shp_mix64(1) == 0xb456bcfc34c2cb2cull, "mixer %#llx", (unsigned long long)shp_mix64(1));

    char buf[32];
    shp_control_format(buf, sizeof(buf), 1);
    CHECK(!strcmp(buf, "armed 1\n") && shp_control_armed(buf, 0) == 1, "control armed 1");
    shp_control_format(buf, sizeof(buf), 0);
    CHECK(!strcmp(buf, "armed 0\n") && shp_control_armed(buf, 1) == 0, "control armed 0");
    CHECK(shp_control_armed("junk", 7) == 7, "control default");
    CHECK(!strcmp(shp_kind_names[SHP_KIND_D2H], "D2H") &&
              !strcmp(shp_comm_kind_names[SHP_COMM_SPLIT], "split"),
          "kind names");

    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
