/* Test double of libnccl.so.2 (NCCL 2.28): communicators, groups, and every collective and p2p
 * call with real data movement and reductions, for ranks in this process (cliques) or in other
 * processes (POSIX shared memory). Defined against the real nccl.h; see docs/testing.md for its
 * limits. This file: errors, the table of calls, and the collective, p2p and version calls; the
 * rest is in the files nccl_double.h names. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "tests/doubles/nccl_double.h"

/* ---- errors ---------------------------------------------------------------------------------- */

/* NCCL keeps one buffer per process; one per thread cannot be overwritten under a reader. */
static _Thread_local char last_error[1024];

static bool warn_enabled(void)
{
    const char *level = getenv("NCCL_DEBUG");

    return level && (!strcasecmp(level, "WARN") || !strcasecmp(level, "INFO") ||
                     !strcasecmp(level, "TRACE"));
}

ncclResult_t shp_nd_vfail(ncclResult_t r, bool loud, const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    if (loud || warn_enabled()) {
        char line[1200];
        int n = snprintf(line, sizeof(line), "nccl-double:%d NCCL WARN %s\n", (int)getpid(),
                         last_error);

        if (n > 0)
            (void)!write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line));
    }
    return r;
}

/* ---- calls ----------------------------------------------------------------------------------- */

static const char *const redop_names[ncclNumOps] = {"sum", "prod", "max", "min", "avg"};

const struct op_info shp_nd_ops[OP_KINDS] = {
    [OP_ALL_REDUCE] = {"ncclAllReduce", FAM_COLL, true, false},
    [OP_BROADCAST] = {"ncclBroadcast", FAM_COLL, false, true},
    [OP_REDUCE] = {"ncclReduce", FAM_COLL, true, true},
    [OP_ALL_GATHER] = {"ncclAllGather", FAM_COLL, false, false},
    [OP_REDUCE_SCATTER] = {"ncclReduceScatter", FAM_COLL, true, false},
    [OP_ALLTOALL] = {"ncclAlltoAll", FAM_COLL, false, false},
    [OP_GATHER] = {"ncclGather", FAM_COLL, false, true},
    [OP_SCATTER] = {"ncclScatter", FAM_COLL, false, true},
    [OP_SEND] = {"ncclSend", FAM_P2P, false, false},
    [OP_RECV] = {"ncclRecv", FAM_P2P, false, false},
    [OP_SPLIT] = {"ncclCommSplit", FAM_SPLIT, false, false},
    [OP_SHRINK] = {"ncclCommShrink", FAM_SHRINK, false, false},
    [OP_INIT] = {"ncclCommInitRank", FAM_INIT, false, false},
};

void shp_nd_describe(char *buf, size_t len, const struct op *op)
{
    const struct op_info *info = &shp_nd_ops[op->kind];
    int n = 0;

    if (info->family != FAM_COLL && info->family != FAM_P2P) {
        snprintf(buf, len, "%s", info->name);
        return;
    }
    n = snprintf(buf, len, "%s(count %zu, %s", info->name, op->count, shp_nd_dtype_name(op->dtype));
    if (n > 0 && (size_t)n < len && info->has_redop)
        n += snprintf(buf + n, len - (size_t)n, ", %s", redop_names[op->redop]);
    if (n > 0 && (size_t)n < len && info->has_root)
        n += snprintf(buf + n, len - (size_t)n, ", root %d", op->root);
    if (n > 0 && (size_t)n < len && info->family == FAM_P2P)
        n += snprintf(buf + n, len - (size_t)n, ", peer %d", op->root);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ")");
}

/* ---- collectives and p2p --------------------------------------------------------------------- */

/* NCCL's argument checks (enqueue.cc ArgsCheck), plus NULL buffers, which NCCL would pass to a
 * kernel that faults. Only the root's recvbuff matters to reduce and gather, and only the root's
 * sendbuff to broadcast and scatter. */
static ncclResult_t check_args(const struct op *op)
{
    const struct op_info *info = &shp_nd_ops[op->kind];
    bool is_root = op->comm && op->root == op->comm->rank;
    bool needs_send, needs_recv;
    ncclResult_t r;
    int n;

    if ((r = shp_nd_check_usable(op->comm, info->name)) != ncclSuccess)
        return r;
    n = op->comm->nranks;
    if ((unsigned)op->dtype >= ncclNumTypes)
        return fail(ncclInvalidArgument, "%s : invalid type %d", info->name, (int)op->dtype);
    if (info->has_redop && (unsigned)op->redop >= ncclNumOps)
        return fail(ncclInvalidArgument, "%s : invalid reduction operation %d", info->name,
                    (int)op->redop);
    if (info->has_root && (op->root < 0 || op->root >= n))
        return fail(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)",
                    info->name, op->root, n - 1);
    if (info->family == FAM_P2P && (op->root < 0 || op->root >= n))
        return fail(ncclInvalidArgument, "%s : invalid peer %d (peer should be in the 0..%d range)",
                    info->name, op->root, n - 1);
    if (op->count > SIZE_MAX / elem_size(op) / (size_t)n)
        return fail(ncclInvalidArgument, "%s : count %zu is too large", info->name, op->count);
    needs_send =
        op->kind != OP_RECV && ((op->kind != OP_BROADCAST && op->kind != OP_SCATTER) || is_root);
    needs_recv =
        op->kind != OP_SEND && ((op->kind != OP_REDUCE && op->kind != OP_GATHER) || is_root);
    if (op->count && needs_send && !op->sendbuff)
        return fail(ncclInvalidArgument, "%s : sendbuff argument is NULL", info->name);
    if (op->count && needs_recv && !op->recvbuff)
        return fail(ncclInvalidArgument, "%s : recvbuff argument is NULL", info->name);
    return ncclSuccess;
}

static ncclResult_t call(const struct op *op)
{
    ncclResult_t r = check_args(op);

    if (r == ncclSuccess)
        r = shp_nd_issue(op);
    return shp_nd_note(r);
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_ALL_REDUCE,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .redop = op});
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_BROADCAST,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

/* As in NCCL (src/collectives.cc): ncclBcast is ncclBroadcast in place, called through the
 * exported symbol, so that a preloaded tracer sees the inner call too. */
NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_REDUCE,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .redop = op,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_ALL_GATHER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = sendcount,
                             .dtype = datatype});
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_REDUCE_SCATTER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = recvcount,
                             .dtype = datatype,
                             .redop = op});
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_ALLTOALL,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype});
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_GATHER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_SCATTER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_SEND,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = peer});
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_RECV,
                             .comm = comm,
                             .stream = stream,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = peer});
}

/* ---- communicator API ------------------------------------------------------------------------ */

NCCL_API(ncclResult_t, ncclGetVersion, int *version)
{
    if (!version)
        return fail(ncclInvalidArgument, "ncclGetVersion : version argument is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
{
    size_t got = 0;

    if (!uniqueId)
        return fail(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
    while (got < sizeof(uniqueId->internal)) {
        ssize_t n = getrandom(uniqueId->internal + got, sizeof(uniqueId->internal) - got, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fail(ncclSystemError, "ncclGetUniqueId : getrandom failed: %s", strerror(errno));
        got += (size_t)n;
    }
    return ncclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm)
{
    (void)comm;
    return last_error;
}
