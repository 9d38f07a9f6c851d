/* shapetrace unit test: the contract's numbers. Op numbers and record type numbers are stored in
 * traces on disk, so they are pinned here as they were when those traces were written; the
 * tables generated from the call list agree with the list (library, class, name lookup); and the
 * facts of every row are what the hand-written tables said before they became columns of the
 * list (size rules, roots, reductions, aliases, the driver's cuGetProcAddress rows). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/ops.h"
#include "include/shapetrace/calls.h"
#include "include/shapetrace/env.h"
#include "include/shapetrace/trace.h"
#include "tests/unit/harness.h"

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

/* The NCCL facts as common/ops.c's elem_rule, preload/record.c's uses_root and uses_redop,
 * tools/lib/event.c's root-only rule and tools/analyze/align.c's Bcast rule had them: elements
 * sent and received for a count of 10 on 4 ranks, which buffer only the root touches, whether a
 * reduction is taken, and the op the call is one operation with. Ops not listed: none of them. */
static const struct {
    unsigned op;
    uint64_t send, recv;
    int root;
    bool redop;
    unsigned same;
} golden_facts[] = {
    {SHP_OP_ncclAllReduce, 10, 10, SHP_ROOT_NONE, true, SHP_OP_ncclAllReduce},
    {SHP_OP_ncclBroadcast, 10, 10, SHP_ROOT_SENDS, false, SHP_OP_ncclBroadcast},
    {SHP_OP_ncclBcast, 10, 10, SHP_ROOT_SENDS, false, SHP_OP_ncclBroadcast},
    {SHP_OP_ncclReduce, 10, 10, SHP_ROOT_RECVS, true, SHP_OP_ncclReduce},
    {SHP_OP_ncclAllGather, 10, 40, SHP_ROOT_NONE, false, SHP_OP_ncclAllGather},
    {SHP_OP_ncclReduceScatter, 40, 10, SHP_ROOT_NONE, true, SHP_OP_ncclReduceScatter},
    {SHP_OP_ncclAlltoAll, 40, 40, SHP_ROOT_NONE, false, SHP_OP_ncclAlltoAll},
    {SHP_OP_ncclGather, 10, 40, SHP_ROOT_RECVS, false, SHP_OP_ncclGather},
    {SHP_OP_ncclScatter, 40, 10, SHP_ROOT_SENDS, false, SHP_OP_ncclScatter},
    {SHP_OP_ncclSend, 10, 0, SHP_ROOT_NONE, false, SHP_OP_ncclSend},
    {SHP_OP_ncclRecv, 0, 10, SHP_ROOT_NONE, false, SHP_OP_ncclRecv},
};

/* preload/cuda.c's proc_rows as they were: a base name cuGetProcAddress is asked for, the
 * version from which it is answered with ours, our op in the legacy stream mode and in the
 * per-thread one (0: the same as the legacy one). */
static const struct {
    const char *name;
    int since;
    unsigned legacy, per_thread;
} golden_proc[] = {
    {"cuMemcpy", 4000, SHP_OP_cuMemcpy, SHP_OP_cuMemcpy_ptds},
    {"cuMemcpyAsync", 4000, SHP_OP_cuMemcpyAsync, SHP_OP_cuMemcpyAsync_ptsz},
    {"cuMemcpyHtoD", 3020, SHP_OP_cuMemcpyHtoD_v2, SHP_OP_cuMemcpyHtoD_v2_ptds},
    {"cuMemcpyDtoH", 3020, SHP_OP_cuMemcpyDtoH_v2, SHP_OP_cuMemcpyDtoH_v2_ptds},
    {"cuMemcpyDtoD", 3020, SHP_OP_cuMemcpyDtoD_v2, SHP_OP_cuMemcpyDtoD_v2_ptds},
    {"cuMemcpyHtoDAsync", 3020, SHP_OP_cuMemcpyHtoDAsync_v2, SHP_OP_cuMemcpyHtoDAsync_v2_ptsz},
    {"cuMemcpyDtoHAsync", 3020, SHP_OP_cuMemcpyDtoHAsync_v2, SHP_OP_cuMemcpyDtoHAsync_v2_ptsz},
    {"cuMemcpyDtoDAsync", 3020, SHP_OP_cuMemcpyDtoDAsync_v2, SHP_OP_cuMemcpyDtoDAsync_v2_ptsz},
    {"cuMemcpy2D", 3020, SHP_OP_cuMemcpy2D_v2, SHP_OP_cuMemcpy2D_v2_ptds},
    {"cuMemcpy2DUnaligned", 3020, SHP_OP_cuMemcpy2DUnaligned_v2,
     SHP_OP_cuMemcpy2DUnaligned_v2_ptds},
    {"cuMemcpy2DAsync", 3020, SHP_OP_cuMemcpy2DAsync_v2, SHP_OP_cuMemcpy2DAsync_v2_ptsz},
    {"cuMemcpyPeer", 4000, SHP_OP_cuMemcpyPeer, SHP_OP_cuMemcpyPeer_ptds},
    {"cuMemcpyPeerAsync", 4000, SHP_OP_cuMemcpyPeerAsync, SHP_OP_cuMemcpyPeerAsync_ptsz},
    {"cuMemAlloc", 3020, SHP_OP_cuMemAlloc_v2, 0},
    {"cuMemAllocManaged", 6000, SHP_OP_cuMemAllocManaged, 0},
    {"cuMemAllocAsync", 11020, SHP_OP_cuMemAllocAsync, SHP_OP_cuMemAllocAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 11020, SHP_OP_cuMemAllocFromPoolAsync,
     SHP_OP_cuMemAllocFromPoolAsync_ptsz},
    {"cuMemFree", 3020, SHP_OP_cuMemFree_v2, 0},
    {"cuMemFreeAsync", 11020, SHP_OP_cuMemFreeAsync, SHP_OP_cuMemFreeAsync_ptsz},
    {"cuMemAllocHost", 3020, SHP_OP_cuMemAllocHost_v2, 0},
    {"cuMemHostAlloc", 2020, SHP_OP_cuMemHostAlloc, 0},
    {"cuMemFreeHost", 2000, SHP_OP_cuMemFreeHost, 0},
    {"cuStreamBeginCapture", 10010, SHP_OP_cuStreamBeginCapture_v2,
     SHP_OP_cuStreamBeginCapture_v2_ptsz},
    {"cuStreamBeginCaptureToGraph", 12030, SHP_OP_cuStreamBeginCaptureToGraph,
     SHP_OP_cuStreamBeginCaptureToGraph_ptsz},
    {"cuStreamEndCapture", 10000, SHP_OP_cuStreamEndCapture, SHP_OP_cuStreamEndCapture_ptsz},
    {"cuGraphInstantiateWithFlags", 11040, SHP_OP_cuGraphInstantiateWithFlags, 0},
    {"cuGraphInstantiateWithParams", 12000, SHP_OP_cuGraphInstantiateWithParams,
     SHP_OP_cuGraphInstantiateWithParams_ptsz},
    {"cuGraphLaunch", 10000, SHP_OP_cuGraphLaunch, SHP_OP_cuGraphLaunch_ptsz},
};

static void check_facts(void)
{
    size_t nfacts = sizeof(golden_facts) / sizeof(golden_facts[0]);
    for (unsigned op = 0; op <= SHP_OP_COUNT; op++) {
        uint64_t want_send = 0, want_recv = 0;
        int want_root = SHP_ROOT_NONE;
        bool want_redop = false;
        unsigned want_same = op;
        for (size_t i = 0; i < nfacts; i++)
            if (golden_facts[i].op == op) {
                want_send = golden_facts[i].send;
                want_recv = golden_facts[i].recv;
                want_root = golden_facts[i].root;
                want_redop = golden_facts[i].redop;
                want_same = golden_facts[i].same;
            }
        uint64_t send = 99, recv = 99;
        shp_op_elems(op, 10, 4, &send, &recv);
        test_condf(send == want_send && recv == want_recv,
                   "%s: sends %llu and receives %llu of 10 on 4", shp_op_name(op),
                   (unsigned long long)send, (unsigned long long)recv);
        test_condf(shp_op_root(op) == want_root, "%s: root fact %d", shp_op_name(op),
                   shp_op_root(op));
        test_condf(shp_op_redop(op) == want_redop, "%s: redop fact", shp_op_name(op));
        test_condf(shp_op_same(op) == want_same, "%s: one operation with %s", shp_op_name(op),
                   shp_op_name(shp_op_same(op)));
    }
    uint64_t send = 99, recv = 99;
    shp_op_elems(SHP_OP_ncclAllGather, 10, 0, &send, &recv);
    test_condf(send == 10 && recv == 10, "an unknown communicator size counts as one rank");
    test_condf(shp_op_root(1000) == SHP_ROOT_NONE && !shp_op_redop(1000) &&
                   shp_op_same(1000) == 1000,
               "an unknown op has no facts");

    size_t nproc = sizeof(golden_proc) / sizeof(golden_proc[0]);
    for (size_t i = 0; i < nproc; i++) {
        const char *n = golden_proc[i].name;
        int since = golden_proc[i].since;
        unsigned leg = golden_proc[i].legacy,
                 pt = golden_proc[i].per_thread ? golden_proc[i].per_thread : leg;
        test_condf(shp_op_proc(n, since, false) == leg && shp_op_proc(n, 13000, false) == leg,
                   "%s: legacy lookup answers %s", n, shp_op_name(shp_op_proc(n, since, false)));
        test_condf(shp_op_proc(n, since, true) == pt && shp_op_proc(n, 13000, true) == pt,
                   "%s: per-thread lookup answers %s", n, shp_op_name(shp_op_proc(n, since, true)));
        test_condf(shp_op_proc(n, since - 1, false) == SHP_OP_NONE &&
                       shp_op_proc(n, since - 1, true) == SHP_OP_NONE,
                   "%s: not answered below %d", n, since);
    }
    /* Every driver op is reached by one of those rows, and no other op is. */
    unsigned reached = 0;
    for (unsigned op = 1; op < SHP_OP_COUNT; op++) {
        int since = -1, mode = -1;
        const char *base = shp_op_proc_base(op, &since, &mode);
        bool found = false;
        for (size_t i = 0; base && i < nproc; i++)
            found = found || (!strcmp(golden_proc[i].name, base) && golden_proc[i].since == since &&
                              (golden_proc[i].legacy == op || golden_proc[i].per_thread == op));
        test_condf(!base == (shp_op_lib(op) != SHP_LIB_CUDA) && (!base || found),
                   "%s: base %s since %d mode %d", shp_op_name(op), base ? base : "(none)", since,
                   mode);
        reached += base != NULL;
    }
    test_condf(reached == 49, "%u driver entry points", reached);
    test_condf(shp_op_proc("cuGraphInstantiate", 13000, false) == SHP_OP_NONE &&
                   shp_op_proc("cuMemcpyHtoD_v2", 13000, false) == SHP_OP_NONE &&
                   shp_op_proc("cudaMemcpy", 13000, false) == SHP_OP_NONE &&
                   shp_op_proc("", 13000, true) == SHP_OP_NONE,
               "names that are no base of ours are not answered");
}

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
    {"VALUE", 18, 88, SHP_ROLE_LATE},                     /* format version 3 */
    {"COPY2D_C", 19, 80, SHP_ROLE_COMPACT},               /* format version 4 */
    {"STACK_TAIL", 20, 24, SHP_ROLE_META | SHP_ROLE_VAR}, /* format version 4 */
    {"COMM_END_C", 21, 40, SHP_ROLE_COMPACT},             /* format version 6 */
    {"ALLOC_C", 22, 56, SHP_ROLE_COMPACT | SHP_ROLE_OUT}, /* format version 6 */
    {"MODULE_C", 23, 28, SHP_ROLE_META | SHP_ROLE_VAR},   /* format version 6 */
};

int main(void)
{
    size_t nops = sizeof(golden_ops) / sizeof(golden_ops[0]);
    test_condf(SHP_OP_COUNT == nops + 1, "SHP_OP_COUNT %d, golden list %zu", (int)SHP_OP_COUNT,
               nops);
    for (size_t i = 0; i < nops; i++) {
        unsigned op = shp_op_lookup(golden_ops[i].name);
        test_condf(op == golden_ops[i].op, "%s is op %u, traces on disk say %u", golden_ops[i].name,
                   op, golden_ops[i].op);
        test_condf(!strcmp(shp_op_name(golden_ops[i].op), golden_ops[i].name), "op %u is named %s",
                   golden_ops[i].op, shp_op_name(golden_ops[i].op));
        const char *n = golden_ops[i].name;
        int lib = !strncmp(n, "nccl", 4)   ? SHP_LIB_NCCL
                  : !strncmp(n, "cuda", 4) ? SHP_LIB_CUDART
                                           : SHP_LIB_CUDA;
        test_condf(shp_op_lib(op) == lib, "%s: library %d", golden_ops[i].name, shp_op_lib(op));
        test_condf(shp_op_class(op) != 0, "%s has no class", golden_ops[i].name);
    }
    test_condf(SHP_OP_ncclAllReduce == 1 && SHP_OP_ncclCommAbort == 22 && SHP_OP_cudaMemcpy == 23 &&
                   SHP_OP_cudaGraphLaunch_ptsz == 49 && SHP_OP_cuMemcpy == 50 &&
                   SHP_OP_cuGraphLaunch_ptsz == 98,
               "enum constants");
    test_condf(shp_op_lookup("ncclNoSuchCall") == SHP_OP_NONE && shp_op_lib(0) == -1 &&
                   shp_op_lib(SHP_OP_COUNT) == -1 && !strcmp(shp_op_name(SHP_OP_COUNT), "?"),
               "unknown ops");

    check_facts();

    size_t nrecs = sizeof(golden_recs) / sizeof(golden_recs[0]);
    test_condf(SHP_REC_TYPE_COUNT == nrecs + 1, "SHP_REC_TYPE_COUNT %d", (int)SHP_REC_TYPE_COUNT);
    for (size_t i = 0; i < nrecs; i++) {
        unsigned t = golden_recs[i].type;
        test_condf(shp_rec_min_size(t) == golden_recs[i].min_size, "%s: min size %zu",
                   golden_recs[i].name, shp_rec_min_size(t));
        test_condf(shp_rec_role(t) == golden_recs[i].role, "%s: role %#x", golden_recs[i].name,
                   shp_rec_role(t));
        test_condf(shp_rec_is_call(t) == !!(golden_recs[i].role & SHP_ROLE_CALL), "%s: is_call",
                   golden_recs[i].name);
    }
    test_condf(SHP_REC_COMM == 1 && SHP_REC_PYSTACK == 13 &&
                   shp_rec_min_size(SHP_REC_RESERVED) == 8 &&
                   shp_rec_min_size(SHP_REC_TYPE_COUNT) == 0 && shp_rec_role(99) == 0,
               "record type constants");
    /* A compact allocation's pointer is completed with `done`: both are left out of its check. */
    test_condf(shp_rec_info(SHP_REC_ALLOC_C).skip_lo == 24 &&
                   shp_rec_info(SHP_REC_ALLOC_C).skip_hi == 40 &&
                   shp_rec_info(SHP_REC_COMM_END_C).skip_hi == 32,
               "compact allocation's late bytes");

    /* The split child id: a value computed with the formula of format version 1. */
    test_condf(shp_comm_child_id(0x1234, 0, 3) ==
                   shp_mix64(0x1234 ^ shp_mix64(((uint64_t)0 << 32) ^ (uint32_t)3)),
               "child id");
    test_condf(shp_comm_child_id(0x1234, 1, -2) != shp_comm_child_id(0x1234, 0, -2), "child index");
    test_condf(shp_mix64(1) == 0xb456bcfc34c2cb2cull, "mixer %#llx",
               (unsigned long long)shp_mix64(1));

    char buf[32];
    shp_control_format(buf, sizeof(buf), 1);
    test_condf(!strcmp(buf, "armed 1\n") && shp_control_armed(buf, 0) == 1, "control armed 1");
    shp_control_format(buf, sizeof(buf), 0);
    test_condf(!strcmp(buf, "armed 0\n") && shp_control_armed(buf, 1) == 0, "control armed 0");
    test_condf(shp_control_armed("junk", 7) == 7, "control default");
    test_condf(!strcmp(shp_kind_names[SHP_KIND_D2H], "D2H") &&
                   !strcmp(shp_comm_kind_names[SHP_COMM_SPLIT], "split"),
               "kind names");

    return test_report();
}
