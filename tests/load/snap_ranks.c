/* shapetrace tests: ranks of which one is not where the others are, for shapetrace snapshot
 * (tests/test_snapshot.py finds the lines below by their text: keep each call on its own line).
 * Every rank makes two all-reduces; then the last rank sleeps in warmup() while the others block
 * in step()'s all-reduce, waiting for it. When the file RELEASE exists (or after SLEEP_S seconds)
 * it joins them and every rank finishes. Each rank also runs a helper thread named "snap-helper"
 * that waits on a condition variable. A rank prints "rank R: blocking, pid P" just before it
 * blocks. With SNAP_CLOSE_FDS set, it first closes every descriptor above 2, as daemons do (the
 * preload's trace among them: its trace is then found through SHAPETRACE_DIR).
 * Usage: snap_ranks [SLEEP_S [RELEASE]] (default 20 s, no file). */
#define _GNU_SOURCE
#include <nccl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "examples/common.h"

#define COUNT 4096

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done;

static void *helper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!done)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Not a tail call, so that the call site keeps this frame. */
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static ncclResult_t
step_allreduce(ncclComm_t comm, float *buf)
{
    return ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, 0);
}

__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static void
warmup(double s, const char *release)
{
    for (int i = 0; i < (int)(s * 100) && !(release && access(release, F_OK) == 0); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

__attribute__((noinline, optimize("no-optimize-sibling-calls"))) static int
step(ncclComm_t comm, float *buf, int rank, int world, int i)
{
    ncclResult_t r = step_allreduce(comm, buf);
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: step %d failed: %s\n", rank, i, ncclGetErrorString(r));
        return 1;
    }
    float host[4];
    EX_CHECK(cudaMemcpy(host, buf, sizeof(host), cudaMemcpyDeviceToHost));
    return host[0] != (float)world;
}

int main(int argc, char **argv)
{
    double sleep_s = argc > 1 ? atof(argv[1]) : 20;
    const char *release = argc > 2 ? argv[2] : NULL;
    int rank = ex_rank(), world = ex_world();
    pthread_t th;
    pthread_create(&th, NULL, helper, NULL);
    pthread_setname_np(th, "snap-helper");
    ncclComm_t comm = ex_world_comm();
    float *buf, ones[COUNT];
    for (int i = 0; i < COUNT; i++)
        ones[i] = 1.0f;
    EX_CHECK(cudaMalloc((void **)&buf, sizeof(ones)));
    int wrong = 0;
    for (int i = 0; i < 3; i++) {
        EX_CHECK(cudaMemcpy(buf, ones, sizeof(ones), cudaMemcpyHostToDevice));
        if (i == 2) {
            if (getenv("SNAP_CLOSE_FDS"))
                for (int fd = 3; fd < 1024; fd++)
                    close(fd);
            printf("rank %d: blocking, pid %d\n", rank, (int)getpid());
            fflush(stdout);
            if (rank == world - 1)
                warmup(sleep_s, release);
        }
        wrong += step(comm, buf, rank, world, i);
    }
    pthread_mutex_lock(&mu);
    done = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(th, NULL);
    EX_CHECK(ncclCommDestroy(comm));
    printf("rank %d: 3 steps, sums %s\n", rank, wrong ? "WRONG" : "checked");
    return wrong ? 1 : 0;
}
