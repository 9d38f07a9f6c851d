/* shapetrace: every intercepted function, listed once, with what must be known of it.
 *
 * SHP_CALLS(X) expands X(num, lib, cls, name, facts, params, args, desc) for each function:
 *   num     the op number stored in traces (enum shp_op): pinned, never reused or changed;
 *           a new function takes the next free number, wherever it sits in the list
 *   lib     NCCL, CUDART or CUDA (the driver, libcuda): the library the real function is looked
 *           up in, and whose error code a wrapper returns when the real symbol is missing
 *   cls     what the call does (SHP_CLS_*): decides the record type and the bookkeeping
 *   name    the exact exported name
 *   facts   what the recorder and the analyzer must know of the call beyond its class: a tuple
 *           whose shape is its list's (below). A row that leaves an element out does not
 *           compile, and the compiler checks the elements against each other and against the
 *           library's header (common/ops.c, preload/check_facts.c, preload/check_ptds.c)
 *   params  the parameter list as the library's header declares it
 *   args    the same names, for forwarding
 *   desc    designated initializers of struct shp_desc (preload/preload.h) that describe the
 *           call to the recorder, written with the helpers of preload/desc.h; only the preload
 *           expands it
 *
 * The NCCL list's facts are (send, recv, root, redop, alias):
 *   send, recv  the elements a rank sends and receives, from the count argument: ONE (count),
 *               ALL (count x nranks) or NONE (no such buffer). They are the dump's send_bytes
 *               and recv_bytes, the bytes lineage and buffer_overrun follow. Every collective
 *               has both; a send or a receive has its one; anything else has neither.
 *   root        RECVS: the call takes `int root`, and only the root's receive buffer is written
 *               (reduce, gather); SENDS: it takes `int root`, and only the root's send buffer is
 *               read (broadcast, scatter); NONE: no root. On other ranks that buffer is 0 bytes.
 *   redop       REDUCES if the call takes `ncclRedOp_t op`, else NONE. root and redop are what
 *               the recorder stores and the analyzer compares (root_mismatch, redop_mismatch).
 *   alias       NONE, or the op that this one is for its peers (ncclBcast is ncclBroadcast in
 *               place): the analyzer lines the two up as one operation. Two collectives with the
 *               same size rule, root and redop are one operation, so one of them must name the
 *               other here.
 * The parameters are named as nccl.h names them (root, op): preload/check_facts.c finds them
 * by name, and fails a row whose root or redop fact does not say what its params take.
 *
 * The driver list's facts are (base, since, mode): what cuGetProcAddress answers with this entry
 * point. base is the name it is asked for (cuMemcpyHtoD for cuMemcpyHtoD_v2 and
 * cuMemcpyHtoD_v2_ptds); since the lowest cudaVersion at which base means this signature (below
 * it, an older one: cuMemcpyHtoD with 32-bit sizes before 3.2, cuStreamBeginCapture without a
 * mode before 10.1); mode the stream mode it answers in: LEGACY, PER_THREAD or BOTH (the same
 * entry point in both). Each base has one entry point for each mode, at one `since`.
 *
 * The runtime list's facts are () for now.
 *
 * The preload expands the list into the op enum, the name table, function-pointer types,
 * prototypes (so the compiler checks them against nccl.h and cuda_runtime_api.h) and the wrappers;
 * the tools expand the names and the facts. tests/unit/test_ops.c holds the numbers of the traces
 * on disk and every row's facts, and fails if one changes.
 *
 * The `_ptds`/`_ptsz` entries are what programs built with per-thread default streams call;
 * preload/check_ptds.c checks their prototypes against the header in that mode.
 *
 * The driver entries (lib CUDA) are the driver's exported names, whose parameter lists name the
 * driver's types: only the preload expands their params, so the tools compile without cuda.h. A
 * static runtime reaches them through cuGetProcAddress (the base, since and mode above);
 * programs calling the driver directly, through dlsym or symbol binding.
 */
#ifndef SHAPETRACE_CALLS_H
#define SHAPETRACE_CALLS_H

/* Classes of call. Stored in nothing; used to pick the record and the bookkeeping. */
#define SHP_CLS_COLL 1       /* NCCL collective: seq per communicator */
#define SHP_CLS_P2P 2        /* ncclSend/ncclRecv: seq per (communicator, peer, direction) */
#define SHP_CLS_GROUP 3      /* ncclGroupStart/End */
#define SHP_CLS_COMM_INIT 4  /* creates communicators from unique ids */
#define SHP_CLS_COMM_SPLIT 5 /* derives a child from a parent communicator */
#define SHP_CLS_COMM_END 6   /* finalize, destroy, abort */
#define SHP_CLS_COPY 7       /* cudaMemcpy family */
#define SHP_CLS_ALLOC 8      /* cudaMalloc family */
#define SHP_CLS_FREE 9       /* cudaFree family */
#define SHP_CLS_CAPTURE 10   /* stream capture begin/end */
#define SHP_CLS_GRAPH 11     /* graph instantiate */
#define SHP_CLS_LAUNCH 12    /* graph launch: one per replay, not kept while dormant */

/* The values of the NCCL facts: SHP_SIZE_ for send and recv, SHP_ROOT_, SHP_RED_. */
#define SHP_SIZE_NONE 0
#define SHP_SIZE_ONE 1
#define SHP_SIZE_ALL 2
#define SHP_ROOT_NONE 0
#define SHP_ROOT_SENDS 1
#define SHP_ROOT_RECVS 2
#define SHP_RED_NONE 0
#define SHP_RED_REDUCES 1
/* Each element of an NCCL row's facts, applied to the tuple: SHP_NCCL_SEND facts. */
#define SHP_NCCL_SEND(send, recv, root, redop, alias) SHP_SIZE_##send
#define SHP_NCCL_RECV(send, recv, root, redop, alias) SHP_SIZE_##recv
#define SHP_NCCL_ROOT(send, recv, root, redop, alias) SHP_ROOT_##root
#define SHP_NCCL_REDOP(send, recv, root, redop, alias) SHP_RED_##redop
#define SHP_NCCL_ALIAS(send, recv, root, redop, alias) SHP_OP_##alias

/* The driver facts' modes, as bits: a lookup in one mode takes the entry point with its bit. */
#define SHP_PROC_LEGACY 1
#define SHP_PROC_PER_THREAD 2
#define SHP_PROC_BOTH 3
#define SHP_CU_BASE(base, since, mode) #base
#define SHP_CU_SINCE(base, since, mode) since
#define SHP_CU_MODE(base, since, mode) SHP_PROC_##mode

/* clang-format off */
#define SHP_NCCL_CALLS(X) \
X(1, NCCL, SHP_CLS_COLL, ncclAllReduce, (ONE, ONE, NONE, REDUCES, NONE), \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, op, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .redop = op, .comm = comm, .stream = stream)) \
X(2, NCCL, SHP_CLS_COLL, ncclBroadcast, (ONE, ONE, SENDS, NONE, NONE), \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(3, NCCL, SHP_CLS_COLL, ncclBcast, (ONE, ONE, SENDS, NONE, ncclBroadcast), \
  (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (buff, count, datatype, root, comm, stream), \
  (.a = buff, .b = buff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(4, NCCL, SHP_CLS_COLL, ncclReduce, (ONE, ONE, RECVS, REDUCES, NONE), \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, op, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .redop = op, .root = root, .comm = comm, .stream = stream)) \
X(5, NCCL, SHP_CLS_COLL, ncclAllGather, (ONE, ALL, NONE, NONE, NONE), \
  (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, sendcount, datatype, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = sendcount, .dtype = datatype, .comm = comm, .stream = stream)) \
X(6, NCCL, SHP_CLS_COLL, ncclReduceScatter, (ALL, ONE, NONE, REDUCES, NONE), \
  (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, recvcount, datatype, op, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = recvcount, .dtype = datatype, .redop = op, .comm = comm, .stream = stream)) \
X(7, NCCL, SHP_CLS_COLL, ncclAlltoAll, (ALL, ALL, NONE, NONE, NONE), \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .comm = comm, .stream = stream)) \
X(8, NCCL, SHP_CLS_COLL, ncclGather, (ONE, ALL, RECVS, NONE, NONE), \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(9, NCCL, SHP_CLS_COLL, ncclScatter, (ALL, ONE, SENDS, NONE, NONE), \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(10, NCCL, SHP_CLS_P2P, ncclSend, (ONE, NONE, NONE, NONE, NONE), \
  (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, count, datatype, peer, comm, stream), \
  (.a = sendbuff, .count = count, .dtype = datatype, .peer = peer, .comm = comm, .stream = stream)) \
X(11, NCCL, SHP_CLS_P2P, ncclRecv, (NONE, ONE, NONE, NONE, NONE), \
  (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
  (recvbuff, count, datatype, peer, comm, stream), \
  (.b = recvbuff, .count = count, .dtype = datatype, .peer = peer, .comm = comm, .stream = stream)) \
X(12, NCCL, SHP_CLS_GROUP, ncclGroupStart, (NONE, NONE, NONE, NONE, NONE), (void), (), (.count = 0)) \
X(13, NCCL, SHP_CLS_GROUP, ncclGroupEnd, (NONE, NONE, NONE, NONE, NONE), (void), (), (.count = 0)) \
X(14, NCCL, SHP_CLS_COMM_INIT, ncclCommInitRank, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank), \
  (comm, nranks, commId, rank), \
  (.out = (void **)comm, .nranks = nranks, .uid = &commId, .nuid = 1, .rank = rank)) \
X(15, NCCL, SHP_CLS_COMM_INIT, ncclCommInitRankConfig, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config), \
  (comm, nranks, commId, rank, config), \
  (.out = (void **)comm, .nranks = nranks, .uid = &commId, .nuid = 1, .rank = rank)) \
X(16, NCCL, SHP_CLS_COMM_INIT, ncclCommInitAll, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t *comm, int ndev, const int *devlist), \
  (comm, ndev, devlist), \
  (.out = (void **)comm, .nranks = ndev, .devlist = devlist, .rank = -1)) \
X(17, NCCL, SHP_CLS_COMM_INIT, ncclCommInitRankScalable, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config), \
  (newcomm, nranks, myrank, nId, commIds, config), \
  (.out = (void **)newcomm, .nranks = nranks, .uid = commIds, .nuid = nId, .rank = myrank)) \
X(18, NCCL, SHP_CLS_COMM_SPLIT, ncclCommSplit, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config), \
  (comm, color, key, newcomm, config), \
  (.comm = comm, .color = color, .key = key, .out = (void **)newcomm)) \
X(19, NCCL, SHP_CLS_COMM_SPLIT, ncclCommShrink, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags), \
  (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags), \
  (.comm = comm, .color = -2, .key = excludeRanksCount, .out = (void **)newcomm)) \
X(20, NCCL, SHP_CLS_COMM_END, ncclCommFinalize, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t comm), (comm), (.comm = comm)) \
X(21, NCCL, SHP_CLS_COMM_END, ncclCommDestroy, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t comm), (comm), (.comm = comm)) \
X(22, NCCL, SHP_CLS_COMM_END, ncclCommAbort, (NONE, NONE, NONE, NONE, NONE), \
  (ncclComm_t comm), (comm), (.comm = comm))

#define SHP_CUDART_CALLS(X) \
X(23, CUDART, SHP_CLS_COPY, cudaMemcpy, (), \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind), \
  (dst, src, count, kind), (SHP_COPY_DESC(dst, src, count, kind, 0))) \
X(24, CUDART, SHP_CLS_COPY, cudaMemcpyAsync, (), \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, src, count, kind, stream), (SHP_COPY_DESC(dst, src, count, kind, stream))) \
X(25, CUDART, SHP_CLS_COPY, cudaMemcpy2D, (), \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind), \
  (dst, dpitch, src, spitch, width, height, kind), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, 0))) \
X(26, CUDART, SHP_CLS_COPY, cudaMemcpy2DAsync, (), \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, dpitch, src, spitch, width, height, kind, stream), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, stream))) \
X(27, CUDART, SHP_CLS_COPY, cudaMemcpyPeer, (), \
  (void *dst, int dstDevice, const void *src, int srcDevice, size_t count), \
  (dst, dstDevice, src, srcDevice, count), (SHP_PEER_DESC(dst, dstDevice, src, srcDevice, count, 0))) \
X(28, CUDART, SHP_CLS_COPY, cudaMemcpyPeerAsync, (), \
  (void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream), \
  (dst, dstDevice, src, srcDevice, count, stream), \
  (SHP_PEER_DESC(dst, dstDevice, src, srcDevice, count, stream))) \
X(29, CUDART, SHP_CLS_COPY, cudaMemcpy_ptds, (), \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind), \
  (dst, src, count, kind), (SHP_COPY_DESC(dst, src, count, kind, 0))) \
X(30, CUDART, SHP_CLS_COPY, cudaMemcpyAsync_ptsz, (), \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, src, count, kind, stream), (SHP_COPY_DESC(dst, src, count, kind, stream))) \
X(31, CUDART, SHP_CLS_COPY, cudaMemcpy2D_ptds, (), \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind), \
  (dst, dpitch, src, spitch, width, height, kind), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, 0))) \
X(32, CUDART, SHP_CLS_COPY, cudaMemcpy2DAsync_ptsz, (), \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, dpitch, src, spitch, width, height, kind, stream), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, stream))) \
X(33, CUDART, SHP_CLS_ALLOC, cudaMalloc, (), (void **devPtr, size_t size), (devPtr, size), \
  (.out = devPtr, .size = size, .kind = SHP_ALLOC_DEVICE)) \
X(34, CUDART, SHP_CLS_ALLOC, cudaMallocAsync, (), (void **devPtr, size_t size, cudaStream_t hStream), \
  (devPtr, size, hStream), (.out = devPtr, .size = size, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(35, CUDART, SHP_CLS_ALLOC, cudaMallocAsync_ptsz, (), (void **devPtr, size_t size, cudaStream_t hStream), \
  (devPtr, size, hStream), (.out = devPtr, .size = size, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(36, CUDART, SHP_CLS_ALLOC, cudaMallocHost, (), (void **ptr, size_t size), (ptr, size), \
  (.out = ptr, .size = size, .kind = SHP_ALLOC_PINNED)) \
X(37, CUDART, SHP_CLS_ALLOC, cudaHostAlloc, (), (void **pHost, size_t size, unsigned int flags), \
  (pHost, size, flags), (.out = pHost, .size = size, .flags = flags, .kind = SHP_ALLOC_PINNED)) \
X(38, CUDART, SHP_CLS_FREE, cudaFree, (), (void *devPtr), (devPtr), (.a = devPtr, .kind = SHP_ALLOC_DEVICE)) \
X(39, CUDART, SHP_CLS_FREE, cudaFreeAsync, (), (void *devPtr, cudaStream_t hStream), (devPtr, hStream), \
  (.a = devPtr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(40, CUDART, SHP_CLS_FREE, cudaFreeAsync_ptsz, (), (void *devPtr, cudaStream_t hStream), (devPtr, hStream), \
  (.a = devPtr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(41, CUDART, SHP_CLS_FREE, cudaFreeHost, (), (void *ptr), (ptr), (.a = ptr, .kind = SHP_ALLOC_PINNED)) \
X(42, CUDART, SHP_CLS_CAPTURE, cudaStreamBeginCapture, (), \
  (cudaStream_t stream, enum cudaStreamCaptureMode mode), (stream, mode), \
  (.stream = stream, .flags = (unsigned)mode)) \
X(43, CUDART, SHP_CLS_CAPTURE, cudaStreamBeginCapture_ptsz, (), \
  (cudaStream_t stream, enum cudaStreamCaptureMode mode), (stream, mode), \
  (.stream = stream, .flags = (unsigned)mode)) \
X(44, CUDART, SHP_CLS_CAPTURE, cudaStreamEndCapture, (), (cudaStream_t stream, cudaGraph_t *pGraph), \
  (stream, pGraph), (.stream = stream, .out = (void **)pGraph)) \
X(45, CUDART, SHP_CLS_CAPTURE, cudaStreamEndCapture_ptsz, (), (cudaStream_t stream, cudaGraph_t *pGraph), \
  (stream, pGraph), (.stream = stream, .out = (void **)pGraph)) \
X(46, CUDART, SHP_CLS_GRAPH, cudaGraphInstantiate, (), \
  (cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags), (pGraphExec, graph, flags), \
  (.out = (void **)pGraphExec, .graph = graph, .flags = (unsigned)flags)) \
X(47, CUDART, SHP_CLS_GRAPH, cudaGraphInstantiateWithFlags, (), \
  (cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags), (pGraphExec, graph, flags), \
  (.out = (void **)pGraphExec, .graph = graph, .flags = (unsigned)flags)) \
X(48, CUDART, SHP_CLS_LAUNCH, cudaGraphLaunch, (), (cudaGraphExec_t graphExec, cudaStream_t stream), \
  (graphExec, stream), (.exec = graphExec, .stream = stream)) \
X(49, CUDART, SHP_CLS_LAUNCH, cudaGraphLaunch_ptsz, (), (cudaGraphExec_t graphExec, cudaStream_t stream), \
  (graphExec, stream), (.exec = graphExec, .stream = stream))
#define SHP_CUDA_CALLS(X) \
X(50, CUDA, SHP_CLS_COPY, cuMemcpy, (cuMemcpy, 4000, LEGACY), \
  (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), \
  (dst, src, ByteCount), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, 0))) \
X(51, CUDA, SHP_CLS_COPY, cuMemcpyAsync, (cuMemcpyAsync, 4000, LEGACY), \
  (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), \
  (dst, src, ByteCount, hStream), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, hStream))) \
X(52, CUDA, SHP_CLS_COPY, cuMemcpyHtoD_v2, (cuMemcpyHtoD, 3020, LEGACY), \
  (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), \
  (dstDevice, srcHost, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, 0))) \
X(53, CUDA, SHP_CLS_COPY, cuMemcpyDtoH_v2, (cuMemcpyDtoH, 3020, LEGACY), \
  (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstHost, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, 0))) \
X(54, CUDA, SHP_CLS_COPY, cuMemcpyDtoD_v2, (cuMemcpyDtoD, 3020, LEGACY), \
  (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstDevice, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, 0))) \
X(55, CUDA, SHP_CLS_COPY, cuMemcpyHtoDAsync_v2, (cuMemcpyHtoDAsync, 3020, LEGACY), \
  (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcHost, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, hStream))) \
X(56, CUDA, SHP_CLS_COPY, cuMemcpyDtoHAsync_v2, (cuMemcpyDtoHAsync, 3020, LEGACY), \
  (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstHost, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, hStream))) \
X(57, CUDA, SHP_CLS_COPY, cuMemcpyDtoDAsync_v2, (cuMemcpyDtoDAsync, 3020, LEGACY), \
  (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, hStream))) \
X(58, CUDA, SHP_CLS_COPY, cuMemcpy2D_v2, (cuMemcpy2D, 3020, LEGACY), \
  (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(59, CUDA, SHP_CLS_COPY, cuMemcpy2DUnaligned_v2, (cuMemcpy2DUnaligned, 3020, LEGACY), \
  (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(60, CUDA, SHP_CLS_COPY, cuMemcpy2DAsync_v2, (cuMemcpy2DAsync, 3020, LEGACY), \
  (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream), \
  (SHP_CU_2D_DESC(pCopy, hStream))) \
X(61, CUDA, SHP_CLS_COPY, cuMemcpyPeer, (cuMemcpyPeer, 4000, LEGACY), \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount), (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, 0))) \
X(62, CUDA, SHP_CLS_COPY, cuMemcpyPeerAsync, (cuMemcpyPeerAsync, 4000, LEGACY), \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream), \
  (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, hStream))) \
X(63, CUDA, SHP_CLS_ALLOC, cuMemAlloc_v2, (cuMemAlloc, 3020, BOTH), \
  (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize), \
  (.out = (void **)dptr, .size = bytesize, .kind = SHP_ALLOC_DEVICE)) \
X(64, CUDA, SHP_CLS_ALLOC, cuMemAllocManaged, (cuMemAllocManaged, 6000, BOTH), \
  (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), \
  (dptr, bytesize, flags), (.out = (void **)dptr, .size = bytesize, .flags = flags, .kind = SHP_ALLOC_DEVICE)) \
X(65, CUDA, SHP_CLS_ALLOC, cuMemAllocAsync, (cuMemAllocAsync, 11020, LEGACY), \
  (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), \
  (dptr, bytesize, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(66, CUDA, SHP_CLS_ALLOC, cuMemAllocFromPoolAsync, (cuMemAllocFromPoolAsync, 11020, LEGACY), \
  (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), \
  (dptr, bytesize, pool, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(67, CUDA, SHP_CLS_FREE, cuMemFree_v2, (cuMemFree, 3020, BOTH), (CUdeviceptr dptr), (dptr), \
  (.a = (const void *)(uintptr_t)dptr, .kind = SHP_ALLOC_DEVICE)) \
X(68, CUDA, SHP_CLS_FREE, cuMemFreeAsync, (cuMemFreeAsync, 11020, LEGACY), \
  (CUdeviceptr dptr, CUstream hStream), (dptr, hStream), \
  (.a = (const void *)(uintptr_t)dptr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(69, CUDA, SHP_CLS_ALLOC, cuMemAllocHost_v2, (cuMemAllocHost, 3020, BOTH), \
  (void **pp, size_t bytesize), (pp, bytesize), \
  (.out = pp, .size = bytesize, .kind = SHP_ALLOC_PINNED)) \
X(70, CUDA, SHP_CLS_ALLOC, cuMemHostAlloc, (cuMemHostAlloc, 2020, BOTH), \
  (void **pp, size_t bytesize, unsigned int Flags), (pp, bytesize, Flags), \
  (.out = pp, .size = bytesize, .flags = Flags, .kind = SHP_ALLOC_PINNED)) \
X(71, CUDA, SHP_CLS_FREE, cuMemFreeHost, (cuMemFreeHost, 2000, BOTH), \
  (void *p), (p), (.a = p, .kind = SHP_ALLOC_PINNED)) \
X(72, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCapture_v2, (cuStreamBeginCapture, 10010, LEGACY), \
  (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode), \
  (.stream = hStream, .flags = (unsigned)mode)) \
X(73, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCaptureToGraph, (cuStreamBeginCaptureToGraph, 12030, LEGACY), \
  (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode), \
  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode), \
  (.stream = hStream, .graph = hGraph, .flags = (unsigned)mode)) \
X(74, CUDA, SHP_CLS_CAPTURE, cuStreamEndCapture, (cuStreamEndCapture, 10000, LEGACY), \
  (CUstream hStream, CUgraph *phGraph), (hStream, phGraph), \
  (.stream = hStream, .out = (void **)phGraph)) \
X(75, CUDA, SHP_CLS_GRAPH, cuGraphInstantiateWithFlags, (cuGraphInstantiateWithFlags, 11040, BOTH), \
  (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags), (phGraphExec, hGraph, flags), \
  (.out = (void **)phGraphExec, .graph = hGraph, .flags = (unsigned)flags)) \
X(76, CUDA, SHP_CLS_GRAPH, cuGraphInstantiateWithParams, (cuGraphInstantiateWithParams, 12000, LEGACY), \
  (CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams), \
  (phGraphExec, hGraph, instantiateParams), \
  (.out = (void **)phGraphExec, .graph = hGraph, .flags = instantiateParams ? (unsigned)instantiateParams->flags : 0)) \
X(77, CUDA, SHP_CLS_LAUNCH, cuGraphLaunch, (cuGraphLaunch, 10000, LEGACY), \
  (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream), \
  (.exec = hGraphExec, .stream = hStream)) \
X(78, CUDA, SHP_CLS_COPY, cuMemcpy_ptds, (cuMemcpy, 4000, PER_THREAD), \
  (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), \
  (dst, src, ByteCount), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, 0))) \
X(79, CUDA, SHP_CLS_COPY, cuMemcpyAsync_ptsz, (cuMemcpyAsync, 4000, PER_THREAD), \
  (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), \
  (dst, src, ByteCount, hStream), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, hStream))) \
X(80, CUDA, SHP_CLS_COPY, cuMemcpyHtoD_v2_ptds, (cuMemcpyHtoD, 3020, PER_THREAD), \
  (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), \
  (dstDevice, srcHost, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, 0))) \
X(81, CUDA, SHP_CLS_COPY, cuMemcpyDtoH_v2_ptds, (cuMemcpyDtoH, 3020, PER_THREAD), \
  (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstHost, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, 0))) \
X(82, CUDA, SHP_CLS_COPY, cuMemcpyDtoD_v2_ptds, (cuMemcpyDtoD, 3020, PER_THREAD), \
  (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstDevice, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, 0))) \
X(83, CUDA, SHP_CLS_COPY, cuMemcpyHtoDAsync_v2_ptsz, (cuMemcpyHtoDAsync, 3020, PER_THREAD), \
  (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcHost, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, hStream))) \
X(84, CUDA, SHP_CLS_COPY, cuMemcpyDtoHAsync_v2_ptsz, (cuMemcpyDtoHAsync, 3020, PER_THREAD), \
  (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstHost, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, hStream))) \
X(85, CUDA, SHP_CLS_COPY, cuMemcpyDtoDAsync_v2_ptsz, (cuMemcpyDtoDAsync, 3020, PER_THREAD), \
  (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, hStream))) \
X(86, CUDA, SHP_CLS_COPY, cuMemcpy2D_v2_ptds, (cuMemcpy2D, 3020, PER_THREAD), \
  (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(87, CUDA, SHP_CLS_COPY, cuMemcpy2DUnaligned_v2_ptds, (cuMemcpy2DUnaligned, 3020, PER_THREAD), \
  (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(88, CUDA, SHP_CLS_COPY, cuMemcpy2DAsync_v2_ptsz, (cuMemcpy2DAsync, 3020, PER_THREAD), \
  (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream), \
  (SHP_CU_2D_DESC(pCopy, hStream))) \
X(89, CUDA, SHP_CLS_COPY, cuMemcpyPeer_ptds, (cuMemcpyPeer, 4000, PER_THREAD), \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount), (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, 0))) \
X(90, CUDA, SHP_CLS_COPY, cuMemcpyPeerAsync_ptsz, (cuMemcpyPeerAsync, 4000, PER_THREAD), \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream), \
  (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, hStream))) \
X(91, CUDA, SHP_CLS_ALLOC, cuMemAllocAsync_ptsz, (cuMemAllocAsync, 11020, PER_THREAD), \
  (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), \
  (dptr, bytesize, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(92, CUDA, SHP_CLS_ALLOC, cuMemAllocFromPoolAsync_ptsz, (cuMemAllocFromPoolAsync, 11020, PER_THREAD), \
  (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), \
  (dptr, bytesize, pool, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(93, CUDA, SHP_CLS_FREE, cuMemFreeAsync_ptsz, (cuMemFreeAsync, 11020, PER_THREAD), \
  (CUdeviceptr dptr, CUstream hStream), (dptr, hStream), \
  (.a = (const void *)(uintptr_t)dptr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(94, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCapture_v2_ptsz, (cuStreamBeginCapture, 10010, PER_THREAD), \
  (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode), \
  (.stream = hStream, .flags = (unsigned)mode)) \
X(95, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCaptureToGraph_ptsz, (cuStreamBeginCaptureToGraph, 12030, PER_THREAD), \
  (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode), \
  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode), \
  (.stream = hStream, .graph = hGraph, .flags = (unsigned)mode)) \
X(96, CUDA, SHP_CLS_CAPTURE, cuStreamEndCapture_ptsz, (cuStreamEndCapture, 10000, PER_THREAD), \
  (CUstream hStream, CUgraph *phGraph), (hStream, phGraph), \
  (.stream = hStream, .out = (void **)phGraph)) \
X(97, CUDA, SHP_CLS_GRAPH, cuGraphInstantiateWithParams_ptsz, (cuGraphInstantiateWithParams, 12000, PER_THREAD), \
  (CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams), \
  (phGraphExec, hGraph, instantiateParams), \
  (.out = (void **)phGraphExec, .graph = hGraph, .flags = instantiateParams ? (unsigned)instantiateParams->flags : 0)) \
X(98, CUDA, SHP_CLS_LAUNCH, cuGraphLaunch_ptsz, (cuGraphLaunch, 10000, PER_THREAD), \
  (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream), \
  (.exec = hGraphExec, .stream = hStream))
/* clang-format on */

#define SHP_CALLS(X) SHP_NCCL_CALLS(X) SHP_CUDART_CALLS(X) SHP_CUDA_CALLS(X)

/* The lib column's values. */
#define SHP_LIB_NCCL 0
#define SHP_LIB_CUDART 1
#define SHP_LIB_CUDA 2

#ifndef SHP_CALLS_LIST_ONLY
/* The op numbers stored in traces. 0 is "no call" (stack, module and other bookkeeping records). */
enum shp_op {
    SHP_OP_NONE = 0,
#define SHP_X_ENUM(num, lib, cls, name, facts, params, args, desc) SHP_OP_##name = num,
    SHP_CALLS(SHP_X_ENUM)
#undef SHP_X_ENUM
};
/* One more than the highest number, if the numbers are 1..N with none twice: common/ops.c fails
 * to compile on a number used twice (its case labels) or out of range (its tables), and the sum
 * here catches a gap. */
#define SHP_X_ONE(num, lib, cls, name, facts, params, args, desc) +1
#define SHP_X_SUM(num, lib, cls, name, facts, params, args, desc) +(num)
enum { SHP_OP_COUNT = 1 SHP_CALLS(SHP_X_ONE) };
_Static_assert(0 SHP_CALLS(SHP_X_SUM) == (SHP_OP_COUNT - 1) * SHP_OP_COUNT / 2,
               "op numbers are 1..N, each once");
#undef SHP_X_ONE
#undef SHP_X_SUM
#endif

#endif
