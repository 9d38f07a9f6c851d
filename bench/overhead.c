/* shapetrace bench: nanoseconds per call of traced functions, for one process. Run it without
 * and with the preload; the difference is what tracing adds. Calls go to whatever libnccl and
 * libcudart the program is linked against (the test doubles under make bench).
 * Usage: overhead N -> prints "copy NS", "allreduce NS" and "launch NS" lines. cudaGraphLaunch
 * is the cheapest call of the doubles (it checks its argument and returns), so its line shows
 * the wrapper's own pass-through cost best. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
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
    for (int round = 0; round < 2; round++) { /* the first round warms up */
        double t = now();
        for (long i = 0; i < n; i++)
            cudaMemcpyAsync(dev, host, sizeof(host), cudaMemcpyHostToDevice, 0);
        double copy = (now() - t) / (double)n;
        t = now();
        for (long i = 0; i < n; i++)
            ncclAllReduce(dev, dev, 16, ncclFloat32, ncclSum, comm, 0);
        double ar = (now() - t) / (double)n;
        t = now();
        for (long i = 0; i < 10 * n; i++)
            cudaGraphLaunch(exec, s);
        double launch = (now() - t) / (double)(10 * n);
        if (round == 1)
            printf("copy %.1f\nallreduce %.1f\nlaunch %.2f\n", copy, ar, launch);
    }
    return 0;
}
