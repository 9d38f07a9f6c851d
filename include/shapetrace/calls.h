/* shapetrace: every intercepted function, listed once.
 *
 * SHP_CALLS(X) expands X(num, lib, cls, name, params, args, desc) for each function:
 *   num     the op number stored in traces (enum shp_op): pinned, never reused or changed;
 *           a new function takes the next free number, wherever it sits in the list
 *   lib     NCCL, CUDART or CUDA (the driver, libcuda): the library the real function is looked
 *           up in, and whose error code a wrapper returns when the real symbol is missing
 *   cls     what the call does (SHP_CLS_*): decides the record type and the bookkeeping
 *   name    the exact exported name
 *   params  the parameter list as the library's header declares it
 *   args    the same names, for forwarding
 *   desc    designated initializers that describe the call to the recorder (preload/record.h)
 *
 * The preload expands the list into the op enum, the name table, function-pointer types,
 * prototypes (so the compiler checks them against nccl.h and cuda_runtime_api.h) and the wrappers;
 * the tools expand only the names. tests/unit/test_ops.c holds the numbers of the traces on disk
 * and fails if one changes.
 *
 * The `_ptds`/`_ptsz` entries are what programs built with per-thread default streams call;
 * preload/check_ptds.c checks their prototypes against the header in that mode.
 *
 * The driver entries (lib CUDA) are the driver's exported names, whose parameter lists name the
 * driver's types: only the preload expands them, so the tools compile without cuda.h. A static
 * runtime reaches them through cuGetProcAddress (preload/cuda.c maps its base names and
 * versions onto these); programs calling the driver directly, through dlsym or symbol binding.
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

#define SHP_COPY_DESC(d, s, n, k, st)                                                              \
    .a = (s), .b = (d), .width = (n), .height = 1, .spitch = (n), .dpitch = (n), .kind = (k),      \
    .stream = (st)
#define SHP_COPY2D_DESC(d, dp, s, sp, w, h, k, st)                                                 \
    .a = (s), .b = (d), .width = (w), .height = (h), .spitch = (sp), .dpitch = (dp), .kind = (k),  \
    .stream = (st)
#define SHP_PEER_DESC(d, dd, s, sd, n, st)                                                         \
    .a = (s), .b = (d), .width = (n), .height = 1, .spitch = (n), .dpitch = (n),                   \
    .kind = cudaMemcpyDeviceToDevice, .src_dev = (sd), .dst_dev = (dd), .stream = (st)

/* clang-format off */
#define SHP_NCCL_CALLS(X) \
X(1, NCCL, SHP_CLS_COLL, ncclAllReduce, \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, op, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .redop = op, .comm = comm, .stream = stream)) \
X(2, NCCL, SHP_CLS_COLL, ncclBroadcast, \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(3, NCCL, SHP_CLS_COLL, ncclBcast, \
  (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (buff, count, datatype, root, comm, stream), \
  (.a = buff, .b = buff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(4, NCCL, SHP_CLS_COLL, ncclReduce, \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, op, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .redop = op, .root = root, .comm = comm, .stream = stream)) \
X(5, NCCL, SHP_CLS_COLL, ncclAllGather, \
  (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, sendcount, datatype, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = sendcount, .dtype = datatype, .comm = comm, .stream = stream)) \
X(6, NCCL, SHP_CLS_COLL, ncclReduceScatter, \
  (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, recvcount, datatype, op, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = recvcount, .dtype = datatype, .redop = op, .comm = comm, .stream = stream)) \
X(7, NCCL, SHP_CLS_COLL, ncclAlltoAll, \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .comm = comm, .stream = stream)) \
X(8, NCCL, SHP_CLS_COLL, ncclGather, \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(9, NCCL, SHP_CLS_COLL, ncclScatter, \
  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, recvbuff, count, datatype, root, comm, stream), \
  (.a = sendbuff, .b = recvbuff, .count = count, .dtype = datatype, .root = root, .comm = comm, .stream = stream)) \
X(10, NCCL, SHP_CLS_P2P, ncclSend, \
  (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
  (sendbuff, count, datatype, peer, comm, stream), \
  (.a = sendbuff, .count = count, .dtype = datatype, .peer = peer, .comm = comm, .stream = stream)) \
X(11, NCCL, SHP_CLS_P2P, ncclRecv, \
  (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
  (recvbuff, count, datatype, peer, comm, stream), \
  (.b = recvbuff, .count = count, .dtype = datatype, .peer = peer, .comm = comm, .stream = stream)) \
X(12, NCCL, SHP_CLS_GROUP, ncclGroupStart, (void), (), (.count = 0)) \
X(13, NCCL, SHP_CLS_GROUP, ncclGroupEnd, (void), (), (.count = 0)) \
X(14, NCCL, SHP_CLS_COMM_INIT, ncclCommInitRank, \
  (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank), \
  (comm, nranks, commId, rank), \
  (.out = (void **)comm, .nranks = nranks, .uid = &commId, .nuid = 1, .rank = rank)) \
X(15, NCCL, SHP_CLS_COMM_INIT, ncclCommInitRankConfig, \
  (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config), \
  (comm, nranks, commId, rank, config), \
  (.out = (void **)comm, .nranks = nranks, .uid = &commId, .nuid = 1, .rank = rank)) \
X(16, NCCL, SHP_CLS_COMM_INIT, ncclCommInitAll, \
  (ncclComm_t *comm, int ndev, const int *devlist), \
  (comm, ndev, devlist), \
  (.out = (void **)comm, .nranks = ndev, .devlist = devlist, .rank = -1)) \
X(17, NCCL, SHP_CLS_COMM_INIT, ncclCommInitRankScalable, \
  (ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config), \
  (newcomm, nranks, myrank, nId, commIds, config), \
  (.out = (void **)newcomm, .nranks = nranks, .uid = commIds, .nuid = nId, .rank = myrank)) \
X(18, NCCL, SHP_CLS_COMM_SPLIT, ncclCommSplit, \
  (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config), \
  (comm, color, key, newcomm, config), \
  (.comm = comm, .color = color, .key = key, .out = (void **)newcomm)) \
X(19, NCCL, SHP_CLS_COMM_SPLIT, ncclCommShrink, \
  (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags), \
  (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags), \
  (.comm = comm, .color = -2, .key = excludeRanksCount, .out = (void **)newcomm)) \
X(20, NCCL, SHP_CLS_COMM_END, ncclCommFinalize, (ncclComm_t comm), (comm), (.comm = comm)) \
X(21, NCCL, SHP_CLS_COMM_END, ncclCommDestroy, (ncclComm_t comm), (comm), (.comm = comm)) \
X(22, NCCL, SHP_CLS_COMM_END, ncclCommAbort, (ncclComm_t comm), (comm), (.comm = comm))

#define SHP_CUDART_CALLS(X) \
X(23, CUDART, SHP_CLS_COPY, cudaMemcpy, \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind), \
  (dst, src, count, kind), (SHP_COPY_DESC(dst, src, count, kind, 0))) \
X(24, CUDART, SHP_CLS_COPY, cudaMemcpyAsync, \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, src, count, kind, stream), (SHP_COPY_DESC(dst, src, count, kind, stream))) \
X(25, CUDART, SHP_CLS_COPY, cudaMemcpy2D, \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind), \
  (dst, dpitch, src, spitch, width, height, kind), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, 0))) \
X(26, CUDART, SHP_CLS_COPY, cudaMemcpy2DAsync, \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, dpitch, src, spitch, width, height, kind, stream), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, stream))) \
X(27, CUDART, SHP_CLS_COPY, cudaMemcpyPeer, \
  (void *dst, int dstDevice, const void *src, int srcDevice, size_t count), \
  (dst, dstDevice, src, srcDevice, count), (SHP_PEER_DESC(dst, dstDevice, src, srcDevice, count, 0))) \
X(28, CUDART, SHP_CLS_COPY, cudaMemcpyPeerAsync, \
  (void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream), \
  (dst, dstDevice, src, srcDevice, count, stream), \
  (SHP_PEER_DESC(dst, dstDevice, src, srcDevice, count, stream))) \
X(29, CUDART, SHP_CLS_COPY, cudaMemcpy_ptds, \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind), \
  (dst, src, count, kind), (SHP_COPY_DESC(dst, src, count, kind, 0))) \
X(30, CUDART, SHP_CLS_COPY, cudaMemcpyAsync_ptsz, \
  (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, src, count, kind, stream), (SHP_COPY_DESC(dst, src, count, kind, stream))) \
X(31, CUDART, SHP_CLS_COPY, cudaMemcpy2D_ptds, \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind), \
  (dst, dpitch, src, spitch, width, height, kind), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, 0))) \
X(32, CUDART, SHP_CLS_COPY, cudaMemcpy2DAsync_ptsz, \
  (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream), \
  (dst, dpitch, src, spitch, width, height, kind, stream), \
  (SHP_COPY2D_DESC(dst, dpitch, src, spitch, width, height, kind, stream))) \
X(33, CUDART, SHP_CLS_ALLOC, cudaMalloc, (void **devPtr, size_t size), (devPtr, size), \
  (.out = devPtr, .size = size, .kind = SHP_ALLOC_DEVICE)) \
X(34, CUDART, SHP_CLS_ALLOC, cudaMallocAsync, (void **devPtr, size_t size, cudaStream_t hStream), \
  (devPtr, size, hStream), (.out = devPtr, .size = size, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(35, CUDART, SHP_CLS_ALLOC, cudaMallocAsync_ptsz, (void **devPtr, size_t size, cudaStream_t hStream), \
  (devPtr, size, hStream), (.out = devPtr, .size = size, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(36, CUDART, SHP_CLS_ALLOC, cudaMallocHost, (void **ptr, size_t size), (ptr, size), \
  (.out = ptr, .size = size, .kind = SHP_ALLOC_PINNED)) \
X(37, CUDART, SHP_CLS_ALLOC, cudaHostAlloc, (void **pHost, size_t size, unsigned int flags), \
  (pHost, size, flags), (.out = pHost, .size = size, .flags = flags, .kind = SHP_ALLOC_PINNED)) \
X(38, CUDART, SHP_CLS_FREE, cudaFree, (void *devPtr), (devPtr), (.a = devPtr, .kind = SHP_ALLOC_DEVICE)) \
X(39, CUDART, SHP_CLS_FREE, cudaFreeAsync, (void *devPtr, cudaStream_t hStream), (devPtr, hStream), \
  (.a = devPtr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(40, CUDART, SHP_CLS_FREE, cudaFreeAsync_ptsz, (void *devPtr, cudaStream_t hStream), (devPtr, hStream), \
  (.a = devPtr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(41, CUDART, SHP_CLS_FREE, cudaFreeHost, (void *ptr), (ptr), (.a = ptr, .kind = SHP_ALLOC_PINNED)) \
X(42, CUDART, SHP_CLS_CAPTURE, cudaStreamBeginCapture, \
  (cudaStream_t stream, enum cudaStreamCaptureMode mode), (stream, mode), \
  (.stream = stream, .flags = (unsigned)mode)) \
X(43, CUDART, SHP_CLS_CAPTURE, cudaStreamBeginCapture_ptsz, \
  (cudaStream_t stream, enum cudaStreamCaptureMode mode), (stream, mode), \
  (.stream = stream, .flags = (unsigned)mode)) \
X(44, CUDART, SHP_CLS_CAPTURE, cudaStreamEndCapture, (cudaStream_t stream, cudaGraph_t *pGraph), \
  (stream, pGraph), (.stream = stream, .out = (void **)pGraph)) \
X(45, CUDART, SHP_CLS_CAPTURE, cudaStreamEndCapture_ptsz, (cudaStream_t stream, cudaGraph_t *pGraph), \
  (stream, pGraph), (.stream = stream, .out = (void **)pGraph)) \
X(46, CUDART, SHP_CLS_GRAPH, cudaGraphInstantiate, \
  (cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags), (pGraphExec, graph, flags), \
  (.out = (void **)pGraphExec, .graph = graph, .flags = (unsigned)flags)) \
X(47, CUDART, SHP_CLS_GRAPH, cudaGraphInstantiateWithFlags, \
  (cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags), (pGraphExec, graph, flags), \
  (.out = (void **)pGraphExec, .graph = graph, .flags = (unsigned)flags)) \
X(48, CUDART, SHP_CLS_LAUNCH, cudaGraphLaunch, (cudaGraphExec_t graphExec, cudaStream_t stream), \
  (graphExec, stream), (.exec = graphExec, .stream = stream)) \
X(49, CUDART, SHP_CLS_LAUNCH, cudaGraphLaunch_ptsz, (cudaGraphExec_t graphExec, cudaStream_t stream), \
  (graphExec, stream), (.exec = graphExec, .stream = stream))
/* Driver copies: the direction is in the name, cuMemcpy and cuMemcpyAsync infer it (Default). */
#define SHP_CU_COPY_DESC(d, s, n, k, st)                                                           \
    SHP_COPY_DESC((const void *)(uintptr_t)(d), (const void *)(uintptr_t)(s), n, k, st)
/* A CUDA_MEMCPY2D: preload/cuda.c reads it (NULL-safe). */
#define SHP_CU_2D_DESC(p, st)                                                                      \
    .a = shp_cu2d_src(p), .b = shp_cu2d_dst(p), .width = (p) ? (p)->WidthInBytes : 0,              \
    .height = (p) ? (p)->Height : 0, .spitch = (p) ? (p)->srcPitch : 0,                            \
    .dpitch = (p) ? (p)->dstPitch : 0, .kind = shp_cu2d_kind(p), .stream = (st)
/* Peer copies name contexts, not device numbers: the devices stay unknown (-1). */
#define SHP_CU_PEER_DESC(d, s, n, st)                                                              \
    SHP_COPY_DESC((const void *)(uintptr_t)(d), (const void *)(uintptr_t)(s), n, 3, st)

#define SHP_CUDA_CALLS(X) \
X(50, CUDA, SHP_CLS_COPY, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), \
  (dst, src, ByteCount), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, 0))) \
X(51, CUDA, SHP_CLS_COPY, cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), \
  (dst, src, ByteCount, hStream), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, hStream))) \
X(52, CUDA, SHP_CLS_COPY, cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), \
  (dstDevice, srcHost, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, 0))) \
X(53, CUDA, SHP_CLS_COPY, cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstHost, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, 0))) \
X(54, CUDA, SHP_CLS_COPY, cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstDevice, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, 0))) \
X(55, CUDA, SHP_CLS_COPY, cuMemcpyHtoDAsync_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcHost, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, hStream))) \
X(56, CUDA, SHP_CLS_COPY, cuMemcpyDtoHAsync_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstHost, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, hStream))) \
X(57, CUDA, SHP_CLS_COPY, cuMemcpyDtoDAsync_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, hStream))) \
X(58, CUDA, SHP_CLS_COPY, cuMemcpy2D_v2, (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(59, CUDA, SHP_CLS_COPY, cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(60, CUDA, SHP_CLS_COPY, cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream), \
  (SHP_CU_2D_DESC(pCopy, hStream))) \
X(61, CUDA, SHP_CLS_COPY, cuMemcpyPeer, \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount), (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, 0))) \
X(62, CUDA, SHP_CLS_COPY, cuMemcpyPeerAsync, \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream), \
  (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, hStream))) \
X(63, CUDA, SHP_CLS_ALLOC, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize), \
  (.out = (void **)dptr, .size = bytesize, .kind = SHP_ALLOC_DEVICE)) \
X(64, CUDA, SHP_CLS_ALLOC, cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), \
  (dptr, bytesize, flags), (.out = (void **)dptr, .size = bytesize, .flags = flags, .kind = SHP_ALLOC_DEVICE)) \
X(65, CUDA, SHP_CLS_ALLOC, cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), \
  (dptr, bytesize, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(66, CUDA, SHP_CLS_ALLOC, cuMemAllocFromPoolAsync, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), \
  (dptr, bytesize, pool, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(67, CUDA, SHP_CLS_FREE, cuMemFree_v2, (CUdeviceptr dptr), (dptr), \
  (.a = (const void *)(uintptr_t)dptr, .kind = SHP_ALLOC_DEVICE)) \
X(68, CUDA, SHP_CLS_FREE, cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream), \
  (.a = (const void *)(uintptr_t)dptr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(69, CUDA, SHP_CLS_ALLOC, cuMemAllocHost_v2, (void **pp, size_t bytesize), (pp, bytesize), \
  (.out = pp, .size = bytesize, .kind = SHP_ALLOC_PINNED)) \
X(70, CUDA, SHP_CLS_ALLOC, cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags), (pp, bytesize, Flags), \
  (.out = pp, .size = bytesize, .flags = Flags, .kind = SHP_ALLOC_PINNED)) \
X(71, CUDA, SHP_CLS_FREE, cuMemFreeHost, (void *p), (p), (.a = p, .kind = SHP_ALLOC_PINNED)) \
X(72, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode), \
  (.stream = hStream, .flags = (unsigned)mode)) \
X(73, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCaptureToGraph, \
  (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode), \
  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode), \
  (.stream = hStream, .graph = hGraph, .flags = (unsigned)mode)) \
X(74, CUDA, SHP_CLS_CAPTURE, cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph), \
  (.stream = hStream, .out = (void **)phGraph)) \
X(75, CUDA, SHP_CLS_GRAPH, cuGraphInstantiateWithFlags, \
  (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags), (phGraphExec, hGraph, flags), \
  (.out = (void **)phGraphExec, .graph = hGraph, .flags = (unsigned)flags)) \
X(76, CUDA, SHP_CLS_GRAPH, cuGraphInstantiateWithParams, \
  (CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams), \
  (phGraphExec, hGraph, instantiateParams), \
  (.out = (void **)phGraphExec, .graph = hGraph, .flags = instantiateParams ? (unsigned)instantiateParams->flags : 0)) \
X(77, CUDA, SHP_CLS_LAUNCH, cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream), \
  (.exec = hGraphExec, .stream = hStream)) \
X(78, CUDA, SHP_CLS_COPY, cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), \
  (dst, src, ByteCount), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, 0))) \
X(79, CUDA, SHP_CLS_COPY, cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), \
  (dst, src, ByteCount, hStream), (SHP_CU_COPY_DESC(dst, src, ByteCount, 4, hStream))) \
X(80, CUDA, SHP_CLS_COPY, cuMemcpyHtoD_v2_ptds, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), \
  (dstDevice, srcHost, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, 0))) \
X(81, CUDA, SHP_CLS_COPY, cuMemcpyDtoH_v2_ptds, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstHost, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, 0))) \
X(82, CUDA, SHP_CLS_COPY, cuMemcpyDtoD_v2_ptds, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstDevice, srcDevice, ByteCount), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, 0))) \
X(83, CUDA, SHP_CLS_COPY, cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcHost, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcHost, ByteCount, 1, hStream))) \
X(84, CUDA, SHP_CLS_COPY, cuMemcpyDtoHAsync_v2_ptsz, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstHost, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstHost, srcDevice, ByteCount, 2, hStream))) \
X(85, CUDA, SHP_CLS_COPY, cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcDevice, ByteCount, hStream), (SHP_CU_COPY_DESC(dstDevice, srcDevice, ByteCount, 3, hStream))) \
X(86, CUDA, SHP_CLS_COPY, cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(87, CUDA, SHP_CLS_COPY, cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *pCopy), (pCopy), (SHP_CU_2D_DESC(pCopy, 0))) \
X(88, CUDA, SHP_CLS_COPY, cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream), \
  (SHP_CU_2D_DESC(pCopy, hStream))) \
X(89, CUDA, SHP_CLS_COPY, cuMemcpyPeer_ptds, \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount), (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, 0))) \
X(90, CUDA, SHP_CLS_COPY, cuMemcpyPeerAsync_ptsz, \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream), \
  (SHP_CU_PEER_DESC(dstDevice, srcDevice, ByteCount, hStream))) \
X(91, CUDA, SHP_CLS_ALLOC, cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), \
  (dptr, bytesize, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(92, CUDA, SHP_CLS_ALLOC, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), \
  (dptr, bytesize, pool, hStream), (.out = (void **)dptr, .size = bytesize, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(93, CUDA, SHP_CLS_FREE, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream), \
  (.a = (const void *)(uintptr_t)dptr, .stream = hStream, .kind = SHP_ALLOC_DEVICE)) \
X(94, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode), \
  (.stream = hStream, .flags = (unsigned)mode)) \
X(95, CUDA, SHP_CLS_CAPTURE, cuStreamBeginCaptureToGraph_ptsz, \
  (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode), \
  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode), \
  (.stream = hStream, .graph = hGraph, .flags = (unsigned)mode)) \
X(96, CUDA, SHP_CLS_CAPTURE, cuStreamEndCapture_ptsz, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph), \
  (.stream = hStream, .out = (void **)phGraph)) \
X(97, CUDA, SHP_CLS_GRAPH, cuGraphInstantiateWithParams_ptsz, \
  (CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams), \
  (phGraphExec, hGraph, instantiateParams), \
  (.out = (void **)phGraphExec, .graph = hGraph, .flags = instantiateParams ? (unsigned)instantiateParams->flags : 0)) \
X(98, CUDA, SHP_CLS_LAUNCH, cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream), \
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
#define SHP_X_ENUM(num, lib, cls, name, params, args, desc) SHP_OP_##name = num,
    SHP_CALLS(SHP_X_ENUM)
#undef SHP_X_ENUM
};
/* One more than the highest number, if the numbers are 1..N with none twice: common/ops.c's
 * tables fail to compile on a number used twice or out of range, and the sum catches a gap. */
#define SHP_X_ONE(num, lib, cls, name, params, args, desc) +1
#define SHP_X_SUM(num, lib, cls, name, params, args, desc) +(num)
enum { SHP_OP_COUNT = 1 SHP_CALLS(SHP_X_ONE) };
_Static_assert(0 SHP_CALLS(SHP_X_SUM) == (SHP_OP_COUNT - 1) * SHP_OP_COUNT / 2,
               "op numbers are 1..N, each once");
#undef SHP_X_ONE
#undef SHP_X_SUM
#endif

#endif
