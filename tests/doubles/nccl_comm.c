/* The NCCL double's communicators: how they are made, checked and freed, and the communicator
 * API (creation, split, shrink, finalize, destroy, abort, attributes, memory). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tests/doubles/nccl_double.h"

static pthread_mutex_t clique_lock = PTHREAD_MUTEX_INITIALIZER;

static int env_int(const char *name, int fallback)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (!s || !*s)
        return fallback;
    errno = 0;
    v = strtol(s, &end, 10);
    return errno || *end || v < 0 || v > 4096 ? fallback : (int)v;
}

/* The same variable and default as the libcudart double, so the two agree without linking. */
static int device_count(void)
{
    return env_int("SHAPETRACE_DOUBLE_DEVICES", 8);
}

/* NCCL binds a rank to the caller's current device. Ask whichever libcudart is loaded, looked up
 * at run time so that this library needs none; without one, torchrun's LOCAL_RANK or 0. */
static int current_device(void)
{
    __typeof__(&cudaGetDevice) get =
        (__typeof__(&cudaGetDevice))dlsym(RTLD_DEFAULT, "cudaGetDevice");
    int dev;

    if (get && get(&dev) == cudaSuccess)
        return dev;
    return env_int("LOCAL_RANK", 0);
}

struct clique *shp_nd_new_clique(int nranks)
{
    struct clique *c = calloc(1, sizeof(*c));

    if (c)
        c->nranks = nranks;
    return c;
}

ncclComm_t shp_nd_new_comm(struct clique *c, int rank, int device)
{
    ncclComm_t comm = calloc(1, sizeof(*comm));

    if (!comm)
        return NULL;
    comm->magic = COMM_MAGIC;
    comm->clique = c;
    comm->rank = rank;
    comm->nranks = c->nranks;
    comm->device = device;
    pthread_mutex_lock(&clique_lock);
    c->refs++;
    pthread_mutex_unlock(&clique_lock);
    return comm;
}

void shp_nd_free_comm(ncclComm_t comm)
{
    struct clique *c = comm->clique;
    bool last;

    if (c) {
        pthread_mutex_lock(&clique_lock);
        last = --c->refs == 0;
        pthread_mutex_unlock(&clique_lock);
        if (last)
            free(c);
    }
    if (comm->shm) {
        /* Joined segments were unlinked when the last rank arrived; one whose join timed out
         * must not stay behind under its name. A rank refused at the door leaves the name to
         * those that entered, so that a late rank still finds them. */
        if (comm->entered && !comm->joined)
            shm_unlink(comm->shm_name);
        munmap(comm->shm, comm->shm_size);
    }
    comm->magic = 0;
    free(comm);
}

ncclComm_t shp_nd_new_shm_comm(int nranks, int rank, int device)
{
    ncclComm_t comm = calloc(1, sizeof(*comm));

    if (!comm)
        return NULL;
    comm->magic = COMM_MAGIC;
    comm->rank = rank;
    comm->nranks = nranks;
    comm->device = device;
    return comm;
}

static ncclResult_t check_comm(ncclComm_t comm, const char *fn)
{
    if (!comm)
        return fail(ncclInvalidArgument, "%s : comm argument is NULL", fn);
    if (comm->magic != COMM_MAGIC)
        return fail(ncclInvalidArgument, "%s : comm %p is not a live communicator", fn,
                    (void *)comm);
    return ncclSuccess;
}

/* Whether the comm's creation is still in progress: in a group that has not ended, or made
 * non-blocking and not finished yet. Asking costs nothing and changes nothing, as
 * ncclCommGetAsyncError in NCCL is a read. */
static bool in_progress(ncclComm_t comm)
{
    return comm->pending || (comm->ready_ns && shp_nd_now_ns() < comm->ready_ns);
}

/* How long a non-blocking creation stays in progress (SHAPETRACE_DOUBLE_NONBLOCKING_MS, default
 * 20): the work is done at the call, the comm reported ready only once this has passed, so that
 * a caller must poll ncclCommGetAsyncError as with NCCL. */
static void nonblocking(ncclComm_t comm)
{
    const char *v = getenv("SHAPETRACE_DOUBLE_NONBLOCKING_MS");
    long ms = v && *v ? strtol(v, NULL, 10) : 20;
    comm->ready_ns = shp_nd_now_ns() + (uint64_t)(ms > 0 ? ms : 1) * 1000000u;
}

/* NCCL's message for a comm whose creation is still in progress (ncclCommEnsureReady). */
static ncclResult_t pending_fail(const char *fn)
{
    return fail(ncclInvalidArgument,
                "%s : Attempt to use communicator before the previous operation returned "
                "ncclSuccess (it is created at the end of its group)",
                fn);
}

/* As ncclCommEnsureReady, for the calls that read a comm's attributes: an asynchronous error is
 * returned as is, and a comm still being created is refused. */
static ncclResult_t check_ready(ncclComm_t comm, const char *fn)
{
    ncclResult_t r = check_comm(comm, fn);

    if (r == ncclSuccess && comm->async_error != ncclSuccess)
        return fail(comm->async_error, "%s : rank %d's communicator is in error (%s)", fn,
                    comm->rank, pncclGetErrorString(comm->async_error));
    if (r == ncclSuccess && in_progress(comm))
        return pending_fail(fn);
    return r;
}

ncclResult_t shp_nd_check_usable(ncclComm_t comm, const char *fn)
{
    ncclResult_t r = check_comm(comm, fn);

    if (r == ncclSuccess && comm->finalized)
        return fail(ncclInvalidUsage, "%s : comm was finalized", fn);
    /* As ncclCommEnsureReady: a comm with an asynchronous error refuses work until aborted. */
    if (r == ncclSuccess && comm->async_error != ncclSuccess)
        return fail(comm->async_error,
                    "%s : rank %d's communicator is in error (%s) since an earlier call on it "
                    "timed out or failed; destroy or abort it",
                    fn, comm->rank, pncclGetErrorString(comm->async_error));
    if (r == ncclSuccess && in_progress(comm))
        return pending_fail(fn);
    return r;
}

static ncclResult_t check_config(const ncclConfig_t *config, const char *fn)
{
    if (config && config->magic != CONFIG_MAGIC)
        return fail(ncclInvalidArgument,
                    "%s : config argument not initialized with NCCL_CONFIG_INITIALIZER", fn);
    return ncclSuccess;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;

    return (x > y) - (x < y);
}

bool shp_nd_excludes(const struct op *op, int rank)
{
    return op->nexclude && bsearch(&rank, op->exclude, (size_t)op->nexclude, sizeof(int), cmp_int);
}

static bool zero_id(const ncclUniqueId *id)
{
    for (size_t i = 0; i < sizeof(id->internal); i++)
        if (id->internal[i])
            return false;
    return true;
}

/* A rank of a communicator whose other ranks are other processes (or other threads). Inside a
 * group the comm is handed out at once and the wait for the others happens at ncclGroupEnd, so
 * that one thread can create several ranks, as with NCCL. */
static ncclResult_t init_shm(const char *fn, ncclComm_t *comm, int nranks, const ncclUniqueId *id,
                             int rank)
{
    ncclComm_t c = shp_nd_new_shm_comm(nranks, rank, current_device());
    struct op op = {.kind = OP_INIT, .fn = fn};
    ncclResult_t r;

    if (!c)
        return no_memory(fn);
    shp_nd_name_from_id(c, id);
    if ((r = shp_nd_attach(c, fn)) != ncclSuccess) {
        shp_nd_free_comm(c);
        return r;
    }
    op.comm = c;
    if (shp_nd_in_group()) {
        if ((r = shp_nd_submit(&op)) != ncclSuccess) {
            shp_nd_free_comm(c);
            return r;
        }
        c->pending = true;
        *comm = c;
        return ncclSuccess;
    }
    if ((r = shp_nd_shm_run_one(&op)) != ncclSuccess) {
        shp_nd_free_comm(c);
        return r;
    }
    *comm = c;
    return ncclSuccess;
}

/* Real NCCL calls the CUDA runtime from inside its own calls, looking its functions up at run
 * time; so does the double, with one small host copy per communicator it makes through a
 * function found by dlsym(handle): a tracer must keep such nested calls out of the trace, and
 * its dlsym hook must still hand out working functions inside them. */
static ncclResult_t runtime_copy(const char *fn)
{
    void *h = dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD);
    __typeof__(&cudaMemcpy) copy = h ? (__typeof__(&cudaMemcpy))dlsym(h, "cudaMemcpy") : NULL;
    uint64_t from = 0x736870646f75626cULL, to = 0;
    cudaError_t e = copy ? copy(&to, &from, sizeof(from), cudaMemcpyHostToHost) : cudaSuccess;

    if (h)
        dlclose(h);
    if (copy && (e != cudaSuccess || to != from))
        return fail(ncclInternalError, "%s : the runtime's cudaMemcpy failed (%d)", fn, (int)e);
    return ncclSuccess;
}

/* With SHP_DOUBLE_VIA_DRIVER=1, like real NCCL the double also uses the driver for buffers of its
 * own, from the calling thread and from a proxy thread of its own, with entry points found
 * through the driver's cuGetProcAddress_v2: a tracer must record none of them. */
typedef int (*drv_proc_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*drv_alloc_fn)(unsigned long long *, size_t);
typedef int (*drv_free_fn)(unsigned long long);
typedef int (*drv_htod_fn)(unsigned long long, const void *, size_t);

static struct {
    drv_alloc_fn alloc;
    drv_free_fn free;
    drv_htod_fn htod;
} drv;

static void *driver_buffer(void *arg)
{
    static const char bytes[64];
    unsigned long long d = 0;
    intptr_t bad = drv.alloc(&d, sizeof(bytes)) || drv.htod(d, bytes, sizeof(bytes)) || drv.free(d);
    (void)arg;
    return (void *)bad;
}

static ncclResult_t driver_buffers(const char *fn)
{
    const char *v = getenv("SHP_DOUBLE_VIA_DRIVER");
    if (!v || strcmp(v, "1"))
        return ncclSuccess;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    drv_proc_fn proc = h ? (drv_proc_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!proc || proc("cuMemAlloc", (void **)&drv.alloc, 12000, 0, NULL) ||
        proc("cuMemFree", (void **)&drv.free, 12000, 0, NULL) ||
        proc("cuMemcpyHtoD", (void **)&drv.htod, 12000, 0, NULL))
        return fail(ncclSystemError, "%s : no driver", fn);
    pthread_t proxy;
    void *bad = (void *)1;
    if (driver_buffer(NULL) || pthread_create(&proxy, NULL, driver_buffer, NULL) ||
        pthread_join(proxy, &bad) || bad)
        return fail(ncclInternalError, "%s : the driver's buffers failed", fn);
    return ncclSuccess;
}

static ncclResult_t init_rank(const char *fn, ncclComm_t *comm, int nranks, const ncclUniqueId *id,
                              int rank, const ncclConfig_t *config)
{
    struct clique *c;
    ncclResult_t r;

    if (!comm)
        return fail(ncclInvalidArgument, "%s : comm argument is NULL", fn);
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "%s : invalid rank requested : %d/%d", fn, rank, nranks);
    if ((r = check_config(config, fn)) != ncclSuccess)
        return r;
    /* Real NCCL would try to reach a bootstrap root at the address inside the id, and fail. */
    if (zero_id(id))
        return fail(ncclInvalidArgument,
                    "%s : the unique id is all zeroes: it was not made by ncclGetUniqueId", fn);
    if ((r = runtime_copy(fn)) != ncclSuccess || (r = driver_buffers(fn)) != ncclSuccess)
        return r;
    if (nranks > 1)
        return init_shm(fn, comm, nranks, id, rank);
    if (!(c = shp_nd_new_clique(1)) || !(*comm = shp_nd_new_comm(c, 0, current_device()))) {
        free(c);
        return no_memory(fn);
    }
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank)
{
    return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL);
}

/* config.blocking = 0: NCCL returns ncclInProgress and the comm is ready later (nonblocking). */
static bool is_nonblocking(const ncclConfig_t *config)
{
    return config && config->blocking == 0;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank, ncclConfig_t *config)
{
    ncclResult_t r = init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);

    if (r != ncclSuccess || !is_nonblocking(config))
        return r;
    nonblocking(*comm);
    return ncclInProgress;
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
         int nId, ncclUniqueId *commIds, ncclConfig_t *config)
{
    ncclResult_t r;

    if (nId < 1 || !commIds) {
        if (newcomm)
            *newcomm = NULL;
        return fail(ncclInvalidArgument, "ncclCommInitRankScalable : invalid nId %d or commIds %p",
                    nId, (void *)commIds);
    }
    r = init_rank("ncclCommInitRankScalable", newcomm, nranks, &commIds[0], myrank, config);
    if (r != ncclSuccess || !is_nonblocking(config))
        return r;
    nonblocking(*newcomm);
    return ncclInProgress;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist)
{
    int ndevices = device_count();
    struct clique *c;

    if (!comm)
        return fail(ncclInvalidArgument, "ncclCommInitAll : comm argument is NULL");
    if (ndev < 1)
        return fail(ncclInvalidArgument, "ncclCommInitAll : invalid ndev %d", ndev);
    for (int i = 0; i < ndev; i++) {
        int dev = devlist ? devlist[i] : i;

        if (dev < 0 || dev >= ndevices)
            return fail(ncclInvalidArgument,
                        "ncclCommInitAll : invalid device %d for rank %d (%d devices)", dev, i,
                        ndevices);
        for (int j = 0; j < i; j++)
            if (dev == (devlist ? devlist[j] : j))
                return fail(ncclInvalidUsage,
                            "ncclCommInitAll : Duplicate GPU detected : rank %d and rank %d both "
                            "on CUDA device %d",
                            j, i, dev);
    }
    if (!(c = shp_nd_new_clique(ndev)))
        return no_memory("ncclCommInitAll");
    for (int i = 0; i < ndev; i++) {
        comm[i] = shp_nd_new_comm(c, i, devlist ? devlist[i] : i);
        if (!comm[i]) {
            for (int j = 0; j < i; j++)
                shp_nd_free_comm(comm[j]);
            if (i == 0)
                free(c);
            return no_memory("ncclCommInitAll");
        }
    }
    return ncclSuccess;
}

/* Submits a split or shrink. On a shared-memory comm inside a group the new comm is handed out at
 * once, as NCCL's ncclCommSplit sets *newcomm before the group runs the child's init; like NCCL's,
 * it is refused until the group has ended (and shapetrace's wrapper sees the handle at the call).
 * A clique's split still fills *newcomm at ncclGroupEnd. */
static ncclResult_t submit_child(struct op *op)
{
    ncclComm_t child;
    ncclResult_t r;

    if (!op->comm->shm || !shp_nd_in_group() ||
        (op->kind == OP_SPLIT && op->color == NCCL_SPLIT_NOCOLOR))
        return shp_nd_submit(op);
    if (!(child = shp_nd_new_shm_comm(0, -1, op->comm->device))) {
        free(op->exclude);
        return no_memory(shp_nd_ops[op->kind].name);
    }
    child->pending = true;
    op->child = child;
    if ((r = shp_nd_submit(op)) != ncclSuccess) {
        shp_nd_free_comm(child);
        return r;
    }
    *op->newcomm = child;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config)
{
    ncclResult_t r = shp_nd_check_usable(comm, "ncclCommSplit");

    if (r != ncclSuccess)
        return shp_nd_note(r);
    if (!newcomm)
        return shp_nd_note(fail(ncclInvalidArgument, "ncclCommSplit : newcomm argument is NULL"));
    *newcomm = NULL;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return shp_nd_note(
            fail(ncclInvalidArgument,
                 "ncclCommSplit : invalid color %d (non-negative or NCCL_SPLIT_NOCOLOR)", color));
    if ((r = check_config(config, "ncclCommSplit")) != ncclSuccess)
        return shp_nd_note(r);
    r = submit_child(&(struct op){
        .kind = OP_SPLIT, .comm = comm, .color = color, .key = key, .newcomm = newcomm});
    if (r != ncclSuccess || !is_nonblocking(config) || !*newcomm)
        return shp_nd_note(r);
    nonblocking(*newcomm);
    return ncclInProgress;
}

/* Excluded ranks do not call; every other rank calls with the same list. */
NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
         int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    ncclResult_t r = shp_nd_check_usable(comm, "ncclCommShrink");
    int *exclude;

    if (r != ncclSuccess)
        return shp_nd_note(r);
    if (!newcomm)
        return shp_nd_note(fail(ncclInvalidArgument, "ncclCommShrink : newcomm argument is NULL"));
    *newcomm = NULL;
    if (excludeRanksCount < 0 || excludeRanksCount >= comm->nranks ||
        (excludeRanksCount > 0 && !excludeRanksList))
        return shp_nd_note(fail(ncclInvalidArgument,
                                "ncclCommShrink : invalid exclude list (%d ranks)",
                                excludeRanksCount));
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
        return shp_nd_note(
            fail(ncclInvalidArgument, "ncclCommShrink : invalid flags %d", shrinkFlags));
    if ((r = check_config(config, "ncclCommShrink")) != ncclSuccess)
        return shp_nd_note(r);
    exclude = malloc((size_t)(excludeRanksCount ? excludeRanksCount : 1) * sizeof(*exclude));
    if (!exclude)
        return shp_nd_note(no_memory("ncclCommShrink"));
    if (excludeRanksCount)
        memcpy(exclude, excludeRanksList, (size_t)excludeRanksCount * sizeof(*exclude));
    qsort(exclude, (size_t)excludeRanksCount, sizeof(*exclude), cmp_int);
    for (int i = 0; i < excludeRanksCount; i++) {
        if (exclude[i] < 0 || exclude[i] >= comm->nranks || (i && exclude[i] == exclude[i - 1]) ||
            exclude[i] == comm->rank) {
            r = fail(ncclInvalidArgument,
                     "ncclCommShrink : rank %d cannot exclude rank %d (out of range, repeated, or "
                     "itself)",
                     comm->rank, exclude[i]);
            free(exclude);
            return shp_nd_note(r);
        }
    }
    return shp_nd_note(submit_child(&(struct op){.kind = OP_SHRINK,
                                                 .comm = comm,
                                                 .exclude = exclude,
                                                 .nexclude = excludeRanksCount,
                                                 .newcomm = newcomm}));
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
{
    ncclResult_t r = check_comm(comm, "ncclCommFinalize");

    if (r == ncclSuccess)
        comm->finalized = true;
    return r;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
{
    ncclResult_t r;

    if (!comm)
        return ncclSuccess;
    if ((r = check_comm(comm, "ncclCommDestroy")) != ncclSuccess)
        return r;
    if (shp_nd_queued_on(comm))
        return fail(ncclInvalidUsage,
                    "ncclCommDestroy : rank %d has calls queued in an open group on this comm",
                    comm->rank);
    shp_nd_free_comm(comm);
    return ncclSuccess;
}

/* Drops this thread's queued calls on the comm, then destroys it. */
NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
{
    ncclResult_t r;

    if (!comm)
        return ncclSuccess;
    if ((r = check_comm(comm, "ncclCommAbort")) != ncclSuccess)
        return r;
    shp_nd_drop_calls_on(comm);
    shp_nd_free_comm(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
{
    ncclResult_t r = check_ready(comm, "ncclCommCount");

    if (r != ncclSuccess)
        return r;
    if (!count)
        return fail(ncclInvalidArgument, "ncclCommCount : count argument is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
{
    ncclResult_t r = check_ready(comm, "ncclCommCuDevice");

    if (r != ncclSuccess)
        return r;
    if (!device)
        return fail(ncclInvalidArgument, "ncclCommCuDevice : device argument is NULL");
    *device = comm->device;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
{
    ncclResult_t r = check_ready(comm, "ncclCommUserRank");

    if (r != ncclSuccess)
        return r;
    if (!rank)
        return fail(ncclInvalidArgument, "ncclCommUserRank : rank argument is NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
{
    ncclResult_t r = check_comm(comm, "ncclCommGetAsyncError");

    if (r != ncclSuccess)
        return r;
    if (!asyncError)
        return fail(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError argument is NULL");
    *asyncError =
        in_progress(comm) && comm->async_error == ncclSuccess ? ncclInProgress : comm->async_error;
    return ncclSuccess;
}

/* Plain host memory, not the cudart double's device range (see docs/testing.md). */
NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
{
    if (!ptr || size == 0)
        return fail(ncclInvalidArgument, "ncclMemAlloc : invalid ptr %p or size %zu", (void *)ptr,
                    size);
    *ptr = malloc(size);
    return *ptr ? ncclSuccess : no_memory("ncclMemAlloc");
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
    free(ptr);
    return ncclSuccess;
}
