/* shapetrace bench: nanoseconds per call of traced functions, for one process. Run it without
 * and with the preload; the difference is what tracing adds. Calls go to whatever libnccl and
 * libcudart the program is linked against (the test doubles under make bench).
 * Usage: overhead N -> prints "copy NS", "allreduce NS" and "launch NS" lines, then
 * "allreduce_captured NS" and "allreduce_joined NS": an all-reduce captured into a graph, issued
 * on the capturing stream, and on a side stream that joined the capture through an event (the
 * preload asks CUDA which capture that stream is in: cudaStreamGetCaptureInfo). cudaGraphLaunch
 * is the cheapest call of the doubles (it checks its argument and returns), so its line shows
 * the wrapper's own pass-through cost best. Each figure is the median of 15 interleaved batches
 * (N/15 calls each, after one batch of warm-up), and is followed by "NAME_sys NS", the kernel's
 * time a call over the same batches (page faults of a growing trace show there); the program ends
 * with "rdtsc NS" and "clock_gettime NS": one read of each clock the preload may time calls with.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <x86intrin.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The kernel's CPU time of this process so far, in nanoseconds. */
static double sys_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_stime.tv_sec * 1e9 + (double)ru.ru_stime.tv_usec * 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define BATCHES 15

/* A call's wall time a call in each of BATCHES batches, and the kernel's; the batches of the
 * three calls are interleaved, so that a slow moment of the machine lands on all of them alike.
 * The wall figure is the batches' median; the kernel's is their mean, since the kernel accounts
 * its time in ticks that can be longer than a batch. */
struct phase {
    const char *name;
    double wall[BATCHES], sys[BATCHES];
};

static void put(struct phase *p)
{
    double sys = 0;
    for (int b = 0; b < BATCHES; b++)
        sys += p->sys[b] / BATCHES;
    qsort(p->wall, BATCHES, sizeof(double), by_value);
    printf("%s %.2f\n%s_sys %.2f\n", p->name, p->wall[BATCHES / 2], p->name, sys);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    void *dev;
    char host[64];
    ncclUniqueId id;
    ncclComm_t comm;
    if (cudaMalloc(&dev, 4096) || ncclGetUniqueId(&id) || ncclCommInitRank(&comm, 1, id, 0)) {
        fprintf(stderr, "overhead: setup failed\n");
        return 1;
    }
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    if (cudaStreamCreate(&s) || cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) ||
        cudaStreamEndCapture(s, &g) || cudaGraphInstantiate(&exec, g, 0)) {
        fprintf(stderr, "overhead: graph setup failed\n");
        return 1;
    }
    cudaStream_t cs, side;
    cudaEvent_t fork, join;
    if (cudaStreamCreate(&cs) || cudaStreamCreate(&side) || cudaEventCreate(&fork) ||
        cudaEventCreate(&join)) {
        fprintf(stderr, "overhead: capture setup failed\n");
        return 1;
    }
    struct phase copy = {.name = "copy"}, ar = {.name = "allreduce"}, launch = {.name = "launch"};
    struct phase cap = {.name = "allreduce_captured"}, joined = {.name = "allreduce_joined"};
    long per = n / BATCHES > 0 ? n / BATCHES : 1;
    for (int b = -1; b < BATCHES; b++) { /* batch -1 warms up */
        double t = now(), k = sys_ns();
        for (long i = 0; i < per; i++)
            cudaMemcpyAsync(dev, host, sizeof(host), cudaMemcpyHostToDevice, 0);
        double t1 = now(), k1 = sys_ns();
        for (long i = 0; i < per; i++)
            ncclAllReduce(dev, dev, 16, ncclFloat32, ncclSum, comm, 0);
        double t2 = now(), k2 = sys_ns();
        for (long i = 0; i < 10 * per; i++)
            cudaGraphLaunch(exec, s);
        double t3 = now(), k3 = sys_ns();
        /* One capture: calls on the capturing stream, then on a side stream forked into it. */
        cudaGraph_t cg;
        if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) || cudaEventRecord(fork, cs) ||
            cudaStreamWaitEvent(side, fork, 0)) {
            fprintf(stderr, "overhead: capture failed\n");
            return 1;
        }
        double t4 = now(), k4 = sys_ns();
        for (long i = 0; i < per; i++)
            ncclAllReduce(dev, dev, 16, ncclFloat32, ncclSum, comm, cs);
        double t5 = now(), k5 = sys_ns();
        for (long i = 0; i < per; i++)
            ncclAllReduce(dev, dev, 16, ncclFloat32, ncclSum, comm, side);
        double t6 = now(), k6 = sys_ns();
        if (cudaEventRecord(join, side) || cudaStreamWaitEvent(cs, join, 0) ||
            cudaStreamEndCapture(cs, &cg) || cudaGraphDestroy(cg)) {
            fprintf(stderr, "overhead: capture failed\n");
            return 1;
        }
        if (b < 0)
            continue;
        cap.wall[b] = (t5 - t4) / (double)per, cap.sys[b] = (k5 - k4) / (double)per;
        joined.wall[b] = (t6 - t5) / (double)per, joined.sys[b] = (k6 - k5) / (double)per;
        copy.wall[b] = (t1 - t) / (double)per, copy.sys[b] = (k1 - k) / (double)per;
        ar.wall[b] = (t2 - t1) / (double)per, ar.sys[b] = (k2 - k1) / (double)per;
        launch.wall[b] = (t3 - t2) / (double)(10 * per);
        launch.sys[b] = (k3 - k2) / (double)(10 * per);
    }
    put(&copy);
    put(&ar);
    put(&launch);
    put(&cap);
    put(&joined);
    /* The clocks, read as the preload reads them (twice a recorded call). */
    volatile unsigned long long sink = 0;
    double t = now();
    for (long i = 0; i < 10 * n; i++)
        sink += __rdtsc();
    printf("rdtsc %.2f\n", (now() - t) / (double)(10 * n));
    t = now();
    for (long i = 0; i < 10 * n; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        sink += (unsigned long long)ts.tv_nsec;
    }
    printf("clock_gettime %.2f\n", (now() - t) / (double)(10 * n));
    return 0;
}
