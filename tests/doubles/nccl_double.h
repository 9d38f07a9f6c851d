/* The libnccl.so.2 test double's internals, shared by its files and by nothing else: what a
 * communicator and a call are, and the functions each file offers the others. nccl.c holds the
 * calls' API and errors, nccl_data.c the datatypes and reductions, nccl_comm.c communicators,
 * nccl_group.c groups and CUDA graph capture, nccl_local.c ranks of one process (cliques),
 * nccl_shm.c ranks in other processes. The library is built with -fvisibility=hidden: only
 * NCCL's own names (NCCL_API) are exported. */
#ifndef SHP_DOUBLES_NCCL_DOUBLE_H
#define SHP_DOUBLES_NCCL_DOUBLE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* nccl.h declares ncclGroupStart, ncclGroupEnd and ncclResetDebugInit (and their pnccl twins)
 * with empty parentheses: a prototype in C++, an old-style declaration to -Wstrict-prototypes in C
 * (the Makefile's -isystem hides it; a plain -I build does not). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

/* The same two, with prototypes, so -Wmissing-prototypes sees the definitions declared. */
ncclResult_t pncclGroupStart(void);
ncclResult_t pncclGroupEnd(void);

/* As in NCCL itself: pncclX is the strong definition and ncclX a weak alias of it, the PMPI-style
 * hook that shapetrace resolves. Exported even from a -fvisibility=hidden build. */
#define NCCL_API(ret, name, ...)                                                                   \
    __attribute__((visibility("default"))) ret name(__VA_ARGS__)                                   \
        __attribute__((weak, alias("p" #name)));                                                   \
    __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

#define COMM_MAGIC 0x73687064636f6d6dULL /* "shpdcomm" */
#define CONFIG_MAGIC 0xcafebeefU         /* what NCCL_CONFIG_INITIALIZER stores */

/* Ranks created together (one ncclCommInitAll, one color of one split, ...). Collectives and p2p
 * calls meet their counterparts only within the same clique. */
struct clique {
    int nranks;
    int refs; /* live communicators; guarded by clique_lock */
};

struct shm_seg;

/* A rank of a clique (clique set, shm NULL) or of a communicator whose ranks are processes that
 * meet in a shared-memory segment (shm set, clique NULL). */
struct ncclComm {
    uint64_t magic;
    struct clique *clique;
    int rank;
    int nranks;
    int device;
    bool finalized;
    ncclResult_t async_error; /* set when a call on a shared-memory comm timed out or failed */
    unsigned long long ncoll; /* collectives completed: numbers the one that fails to match */
    struct shm_seg *shm;
    size_t shm_size;
    char shm_name[48];
    bool entered;       /* this rank counts among the segment's members */
    bool joined;        /* every rank has mapped the segment */
    bool pending;       /* handed out inside a group that has not ended: not usable yet */
    uint64_t ready_ns;  /* made non-blocking (config.blocking = 0): in progress until then, as if
                           NCCL finished it in the background; 0 for a blocking comm */
    uint32_t round;     /* the next collective round, counted alike by every rank */
    uint32_t nchildren; /* splits and shrinks made from this comm: names their segments */
};

enum op_kind {
    OP_ALL_REDUCE,
    OP_BROADCAST,
    OP_REDUCE,
    OP_ALL_GATHER,
    OP_REDUCE_SCATTER,
    OP_ALLTOALL,
    OP_GATHER,
    OP_SCATTER,
    OP_SEND,
    OP_RECV,
    OP_SPLIT,
    OP_SHRINK,
    OP_INIT, /* the wait for the other processes of an ncclCommInitRank made inside a group */
    OP_KINDS
};

/* How calls meet at ncclGroupEnd. The k-th call of a family on one rank meets the k-th of the same
 * family on every other rank of the clique; a send meets the recv posted for it. */
enum family { FAM_COLL, FAM_P2P, FAM_SPLIT, FAM_SHRINK, FAM_INIT };

/* One call, as queued until its group ends. */
struct op {
    enum op_kind kind;
    ncclComm_t comm;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t redop;
    int root; /* the root, or the peer of a send or recv */
    int color;
    int key;
    int *exclude; /* shrink: the excluded ranks, sorted; owned by the queue */
    int nexclude;
    ncclComm_t *newcomm;
    ncclComm_t child; /* split, shrink in a group: the comm already handed out in *newcomm */
    const char *fn;   /* the API name where it is not the kind's (the ncclCommInitRank family) */
    bool matched;
    cudaStream_t stream; /* collectives and p2p: a capturing stream records the call */
};

/* What every file knows of a call. */
struct op_info {
    const char *name;
    enum family family;
    bool has_redop;
    bool has_root;
};

/* By op kind (nccl.c). */
extern const struct op_info shp_nd_ops[OP_KINDS];

/* ---- errors and messages (nccl.c) ---- */

/* Records the message for ncclGetLastError, prints it as NCCL would under NCCL_DEBUG=WARN (always
 * when loud), and returns r. */
__attribute__((format(printf, 3, 0))) ncclResult_t shp_nd_vfail(ncclResult_t r, bool loud,
                                                                const char *fmt, va_list ap);

/* shp_nd_vfail, not loud. */
__attribute__((format(printf, 2, 3), unused)) static ncclResult_t fail(ncclResult_t r,
                                                                       const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    r = shp_nd_vfail(r, false, fmt, ap);
    va_end(ap);
    return r;
}

/* The same, always on stderr: for a timeout, where NCCL would hang and a test that saw only the
 * error code would not know why. */
__attribute__((format(printf, 2, 3), unused)) static ncclResult_t fail_loud(ncclResult_t r,
                                                                            const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    r = shp_nd_vfail(r, true, fmt, ap);
    va_end(ap);
    return r;
}

__attribute__((unused)) static ncclResult_t no_memory(const char *what)
{
    return fail(ncclSystemError, "%s : out of host memory", what);
}

/* "ncclAllReduce(count 6, fp32, sum)": a call as the messages name it. */
void shp_nd_describe(char *buf, size_t len, const struct op *op);

/* ---- datatypes (nccl_data.c) ---- */

/* Bytes of one element of t, and t's name as shapetrace prints it; t must be valid. */
size_t shp_nd_dtype_size(ncclDataType_t t);
const char *shp_nd_dtype_name(ncclDataType_t t);

/* out[i] = in[0][i] op in[1][i] op ... in rank order. Integers wrap at their width and avg
 * divides the wrapped sum (C division, toward zero); fp16, bf16 and fp8 are widened to float,
 * reduced in float and rounded back once, to nearest even. out must not overlap any input. */
void shp_nd_reduce(void *out, const void *const *in, int n, size_t count, ncclDataType_t t,
                   ncclRedOp_t op);

__attribute__((unused)) static size_t elem_size(const struct op *op)
{
    return shp_nd_dtype_size(op->dtype);
}

/* ---- communicators (nccl_comm.c) ---- */

/* A clique of nranks, and rank `rank` of it on device: NULL when out of memory. */
struct clique *shp_nd_new_clique(int nranks);
ncclComm_t shp_nd_new_comm(struct clique *c, int rank, int device);
/* A comm whose ranks are processes, not yet in a segment: NULL when out of memory. */
ncclComm_t shp_nd_new_shm_comm(int nranks, int rank, int device);
/* Frees a comm of either kind, its clique with its last comm, its segment's mapping. */
void shp_nd_free_comm(ncclComm_t comm);
/* ncclSuccess when comm is live, not finalized, not in error and not still being created; else
 * the error, reported as fn's. */
ncclResult_t shp_nd_check_usable(ncclComm_t comm, const char *fn);
/* Whether a shrink's call leaves rank out (its exclude list is sorted). */
bool shp_nd_excludes(const struct op *op, int rank);

/* ---- groups and graphs (nccl_group.c) ---- */

/* Whether this thread is inside ncclGroupStart/ncclGroupEnd. */
bool shp_nd_in_group(void);
/* Issues a checked call; takes ownership of op->exclude. A call on a capturing stream becomes part
 * of the capture; others are queued until the group ends, or run at once outside a group. */
ncclResult_t shp_nd_issue(const struct op *op);
/* As shp_nd_issue for a call on no stream (communicator creation, splits, shrinks). */
ncclResult_t shp_nd_submit(const struct op *op);
/* Returns r; as in NCCL, a call that fails inside a group also fails the group. */
ncclResult_t shp_nd_note(ncclResult_t r);
/* Whether this thread has calls on comm queued in an open group; and their removal. */
bool shp_nd_queued_on(ncclComm_t comm);
void shp_nd_drop_calls_on(ncclComm_t comm);

/* ---- ranks of one process (nccl_local.c) ---- */

/* Matches the n calls of a group on clique comms with their counterparts, checks them all, and
 * only then moves data: a group that fails changes no buffer and creates no communicator. The
 * caller keeps the calls (and their exclude lists). */
ncclResult_t shp_nd_local_run(struct op *calls, size_t n);

/* ---- ranks in other processes (nccl_shm.c) ---- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t shp_nd_now_ns(void);
/* Names the segment of a comm from its unique id. */
void shp_nd_name_from_id(ncclComm_t c, const ncclUniqueId *id);
/* Creates the comm's segment, or maps the one another rank created, and joins it without waiting
 * for the others. On failure the caller frees the comm, which unlinks the name. */
ncclResult_t shp_nd_attach(ncclComm_t c, const char *fn);
/* Runs one call, or the n calls of a group, on shared-memory comms until they are done, fail or
 * time out (SHAPETRACE_DOUBLE_TIMEOUT). Takes ownership of the calls' exclude lists. */
ncclResult_t shp_nd_shm_run_one(const struct op *op);
ncclResult_t shp_nd_shm_run(const struct op *calls, size_t n);
/* Drops n calls on shared-memory comms that will not run. A comm whose creation was among them
 * was already handed out: it takes the error why (ncclInvalidUsage for none). */
void shp_nd_shm_drop(const struct op *calls, size_t n, ncclResult_t why);

#endif
