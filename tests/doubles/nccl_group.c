/* The NCCL double's groups: the calls a thread makes between ncclGroupStart and ncclGroupEnd wait
 * in its queues and run at the outermost end; a call on a capturing stream becomes a host node
 * of the capture instead, and runs, as one group, at each launch of the graph. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/doubles/nccl_double.h"

/* ---- groups ---------------------------------------------------------------------------------- */

/* Calls made inside a group wait here, per thread, until the outermost ncclGroupEnd. A call made
 * outside a group is a group of one. */
static _Thread_local int group_depth;
static _Thread_local ncclResult_t group_error;
static _Thread_local struct op *queue;
static _Thread_local size_t queue_len;
static _Thread_local size_t queue_cap;
/* Calls on shared-memory comms: they progress together at ncclGroupEnd instead. */
static _Thread_local struct op *xqueue;
static _Thread_local size_t xqueue_len;
static _Thread_local size_t xqueue_cap;

static void clear_queue(void)
{
    for (size_t i = 0; i < queue_len; i++)
        free(queue[i].exclude);
    queue_len = 0;
}

/* Appends a copy of op; takes ownership of op->exclude. */
static ncclResult_t push(struct op **q, size_t *len, size_t *cap, const struct op *op)
{
    if (*len == *cap) {
        size_t grown_cap = *cap ? 2 * *cap : 16;
        struct op *grown = realloc(*q, grown_cap * sizeof(**q));

        if (!grown) {
            free(op->exclude);
            return no_memory(shp_nd_ops[op->kind].name);
        }
        *q = grown;
        *cap = grown_cap;
    }
    (*q)[(*len)++] = *op;
    (*q)[*len - 1].matched = false;
    return ncclSuccess;
}

/* Drops the queued calls on shared-memory comms. A comm whose creation was among them was already
 * handed out: it takes the error that dropped the group. */
static void drop_xqueue(ncclResult_t why)
{
    shp_nd_shm_drop(xqueue, xqueue_len, why);
    xqueue_len = 0;
}

/* Threads come and go: a thread's queues do not outlive its outermost group. */
static void release_queues(void)
{
    free(queue);
    queue = NULL;
    queue_cap = 0;
    free(xqueue);
    xqueue = NULL;
    xqueue_cap = 0;
}

/* Runs the queued calls on shared-memory comms, all together. */
static ncclResult_t run_xqueue(void)
{
    size_t n = xqueue_len;

    xqueue_len = 0;
    return shp_nd_shm_run(xqueue, n);
}

/* The outermost group's end: the clique calls first (they fail without moving anything), then
 * the calls on shared-memory comms. */
static ncclResult_t flush(void)
{
    ncclResult_t r = ncclSuccess;

    if (queue_len) {
        r = shp_nd_local_run(queue, queue_len);
        clear_queue();
    }
    if (r == ncclSuccess && xqueue_len)
        r = run_xqueue();
    else
        drop_xqueue(r);
    release_queues();
    return r;
}

bool shp_nd_in_group(void)
{
    return group_depth > 0;
}

/* Outside a group, a call on a shared-memory comm runs at once. */
ncclResult_t shp_nd_submit(const struct op *op)
{
    ncclResult_t r;

    if (op->comm->shm && group_depth == 0)
        return shp_nd_shm_run_one(op);
    if (op->comm->shm)
        return push(&xqueue, &xqueue_len, &xqueue_cap, op);
    if ((r = push(&queue, &queue_len, &queue_cap, op)) != ncclSuccess)
        return r;
    return group_depth > 0 ? ncclSuccess : flush();
}

ncclResult_t shp_nd_note(ncclResult_t r)
{
    if (r != ncclSuccess && group_depth > 0 && group_error == ncclSuccess)
        group_error = r;
    return r;
}

/* ---- CUDA graphs: a call on a capturing stream runs at each launch, not at capture ---- */

/* The calls of one capture, run together at each launch: one call, or a group's calls on
 * capturing streams. Never freed (a graph may be launched until the process ends), and kept
 * on one list so that they stay reachable. */
struct captured {
    struct captured *next;
    size_t n;
    struct op ops[];
};

static struct captured *all_captured;
static pthread_mutex_t captured_lock = PTHREAD_MUTEX_INITIALIZER;

static _Thread_local struct op *cqueue;
static _Thread_local size_t cqueue_len;
static _Thread_local size_t cqueue_cap;

/* Whether stream is being captured, asked of whichever libcudart is loaded (looked up at run
 * time, as nccl_comm.c's current_device does). */
static bool capturing(cudaStream_t stream)
{
    __typeof__(&cudaStreamIsCapturing) is =
        (__typeof__(&cudaStreamIsCapturing))dlsym(RTLD_DEFAULT, "cudaStreamIsCapturing");
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;

    return stream && is && is(stream, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive;
}

/* A launch: the calls go through as if issued now, as one group. Errors have been reported by
 * the calls themselves (a timeout's warning); a host function has no one to return them to. */
static void CUDART_CB replay_calls(void *data)
{
    const struct captured *c = data;
    ncclResult_t r = ncclSuccess;

    group_depth++;
    for (size_t i = 0; i < c->n && r == ncclSuccess; i++) {
        struct op op = c->ops[i];
        op.stream = NULL;
        if ((r = shp_nd_check_usable(op.comm, shp_nd_ops[op.kind].name)) == ncclSuccess)
            r = shp_nd_submit(&op);
    }
    if (--group_depth > 0)
        return;
    if (r == ncclSuccess) {
        flush();
    } else {
        clear_queue();
        drop_xqueue(r);
        release_queues();
    }
}

/* Hands ops[0..n) to the capture of stream as one host node. */
static ncclResult_t capture_calls(cudaStream_t stream, const struct op *o, size_t n)
{
    __typeof__(&cudaLaunchHostFunc) launch =
        (__typeof__(&cudaLaunchHostFunc))dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc");
    struct captured *c = malloc(sizeof(*c) + n * sizeof(*o));

    if (!c)
        return no_memory("capture");
    c->n = n;
    memcpy(c->ops, o, n * sizeof(*o));
    if (!launch || launch(stream, replay_calls, c) != cudaSuccess) {
        free(c);
        return fail(ncclUnhandledCudaError, "%s : cudaLaunchHostFunc on a capturing stream failed",
                    shp_nd_ops[o->kind].name);
    }
    pthread_mutex_lock(&captured_lock);
    c->next = all_captured;
    all_captured = c;
    pthread_mutex_unlock(&captured_lock);
    return ncclSuccess;
}

/* The outermost group's end: its calls on capturing streams become one node of the capture of
 * the first one's stream. */
static ncclResult_t flush_captured(void)
{
    ncclResult_t r = ncclSuccess;

    if (cqueue_len)
        r = capture_calls(cqueue[0].stream, cqueue, cqueue_len);
    free(cqueue);
    cqueue = NULL;
    cqueue_len = cqueue_cap = 0;
    return r;
}

ncclResult_t shp_nd_issue(const struct op *op)
{
    if (capturing(op->stream))
        return group_depth ? push(&cqueue, &cqueue_len, &cqueue_cap, op)
                           : capture_calls(op->stream, op, 1);
    return shp_nd_submit(op);
}

NCCL_API(ncclResult_t, ncclGroupStart, void)
{
    group_depth++;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void)
{
    ncclResult_t r;

    if (group_depth == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd : not in a group call");
    if (--group_depth > 0)
        return ncclSuccess;
    if (group_error != ncclSuccess) {
        r = group_error;
        group_error = ncclSuccess;
        free(cqueue);
        cqueue = NULL;
        cqueue_len = cqueue_cap = 0;
        clear_queue();
        drop_xqueue(r);
        release_queues();
        return r;
    }
    r = flush_captured();
    return r == ncclSuccess ? flush() : r;
}

bool shp_nd_queued_on(ncclComm_t comm)
{
    for (size_t i = 0; i < queue_len; i++)
        if (queue[i].comm == comm)
            return true;
    for (size_t i = 0; i < xqueue_len; i++)
        if (xqueue[i].comm == comm || xqueue[i].child == comm)
            return true;
    return false;
}

/* Removes the queued calls on comm from one queue. */
static void drop_calls_on(struct op *q, size_t *len, ncclComm_t comm)
{
    size_t kept = 0;

    for (size_t i = 0; i < *len; i++) {
        if (q[i].comm == comm || q[i].child == comm)
            free(q[i].exclude);
        else
            q[kept++] = q[i];
    }
    *len = kept;
}

void shp_nd_drop_calls_on(ncclComm_t comm)
{
    drop_calls_on(queue, &queue_len, comm);
    drop_calls_on(xqueue, &xqueue_len, comm);
}
