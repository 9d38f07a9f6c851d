/* shapetrace bench: nanoseconds per call of traced functions, for one process. Run it without
 * and with the preload; the difference is what tracing adds. Calls go to whatever libnccl and
 * libcudart the program is linked against (the test doubles under make bench).
 *
 * Each call is made two ways, in alternating batches of the same process: through the program's
 * own symbol binding (what the preload intercepts) and "direct", to the library's own function
 * as libc's dlsym finds it in the library's handle (the preload's hook is passed by): the paired
 * difference is what the preload adds, free of the library's cost moving from process to
 * process (the doubles' all-reduce moved between 231 and 454 ns from run to run). Untraced, the
 * two ways are the same function and the difference is the method's own noise.
 *
 * Usage: overhead N -> for each of copy (cudaMemcpyAsync), allreduce (ncclAllReduce) and launch
 * (cudaGraphLaunch, the cheapest call of the doubles, 10x as many: its line shows the wrapper's
 * own cost best), these lines:
 *   NAME NS           the median of 15 batches (N/15 calls each, after one batch of warm-up)
 *   NAME_sys NS       this thread's kernel time a call over the same batches (the page faults of
 *                     a growing trace show there), their mean
 *   NAME_mean NS      the whole run's mean: every call, the warm-up batch included, over the time
 *                     all of them took (a batch median leaves out the batches that grew the trace
 *                     and took its page faults; the mean keeps them)
 *   NAME_cpu NS       the same whole-run mean in this thread's CPU time (user and kernel): the
 *                     faults are in it, the moments another process had the core are not (on a
 *                     shared machine one preemption of 10 ms adds 1.5 us a call to a batch's wall
 *                     mean)
 *   NAME_direct NS, NAME_direct_mean NS, NAME_direct_cpu NS: the same for the direct calls
 *   NAME_added NS     NAME_cpu less NAME_direct_cpu: what the preload added a call on the
 *                     calling thread, faults and growth included
 *   NAME_added_wall NS  NAME_mean less NAME_direct_mean
 * and the same lines for allreduce_captured and allreduce_joined: an all-reduce captured into a
 * graph, issued on the capturing stream, and on a side stream that joined the capture through an
 * event (the preload asks CUDA which capture that stream is in: cudaStreamGetCaptureInfo), one
 * capture a batch and way, a tenth as many calls as the copies, begun and ended through the
 * program's own binding both ways (left
 * out by `overhead N nocapture`, which bench/instr.sh runs: it counts every call of a function);
 * then "other_threads_cpu NS": the CPU time of the process's other threads (a helper thread of
 * the preload's, the doubles' own) a bound call; then "rdtsc NS" and "clock_gettime NS": one read
 * of each clock the preload may time calls with. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <x86intrin.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The kernel's CPU time of this thread so far, in nanoseconds: what the calls made it wait for
 * (a helper thread of the preload's faults pages in on its own time: see cpu_ns). */
static double sys_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (double)ru.ru_stime.tv_sec * 1e9 + (double)ru.ru_stime.tv_usec * 1e3;
}

/* This thread's CPU time so far (user and kernel), in nanoseconds. */
static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* User and kernel CPU time so far, in nanoseconds, of this thread or of the whole process. */
static double cpu_ns(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)(ru.ru_stime.tv_sec + ru.ru_utime.tv_sec) * 1e9 +
           (double)(ru.ru_stime.tv_usec + ru.ru_utime.tv_usec) * 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define BATCHES 15

/* One way of making one call: each batch's ns a call and kernel ns a call, and the totals of
 * every batch, warm-up included. */
struct way {
    double wall[BATCHES], sys[BATCHES];
    double total_ns, total_cpu;
    long calls;
};

/* One call, both ways; the batches of the three calls and of the two ways are interleaved, so
 * that a slow moment of the machine lands on all of them alike. */
struct phase {
    const char *name;
    struct way bound, direct;
};

static double median(double *v)
{
    qsort(v, BATCHES, sizeof(double), by_value);
    return v[BATCHES / 2];
}

static void put(struct phase *p)
{
    double sys = 0;
    for (int b = 0; b < BATCHES; b++)
        sys += p->bound.sys[b] / BATCHES;
    double mean = p->bound.total_ns / (double)p->bound.calls;
    double dmean = p->direct.total_ns / (double)p->direct.calls;
    double cpu = p->bound.total_cpu / (double)p->bound.calls;
    double dcpu = p->direct.total_cpu / (double)p->direct.calls;
    printf("%s %.2f\n%s_sys %.2f\n%s_mean %.2f\n%s_cpu %.2f\n", p->name, median(p->bound.wall),
           p->name, sys, p->name, mean, p->name, cpu);
    printf("%s_direct %.2f\n%s_direct_mean %.2f\n%s_direct_cpu %.2f\n", p->name,
           median(p->direct.wall), p->name, dmean, p->name, dcpu);
    printf("%s_added %.2f\n%s_added_wall %.2f\n", p->name, cpu - dcpu, p->name, mean - dmean);
}

typedef cudaError_t (*copy_fn)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
typedef ncclResult_t (*allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                     ncclComm_t, cudaStream_t);
typedef cudaError_t (*launch_fn)(cudaGraphExec_t, cudaStream_t);

/* The library's own definition of `name`, looked up in its handle with libc's dlsym, taken
 * by version: the preload's dlsym hook would hand out its wrapper for a traced name. */
static void *direct(const char *lib, const char *name)
{
    typedef void *(*dlsym_fn)(void *, const char *);
    dlsym_fn libc_dlsym = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (!libc_dlsym)
        libc_dlsym = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    void *h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
    void *f = h && libc_dlsym ? libc_dlsym(h, name) : NULL;
    if (!f) {
        fprintf(stderr, "overhead: no direct %s in %s\n", name, lib);
        exit(1);
    }
    return f;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int captures = !(argc > 2 && !strcmp(argv[2], "nocapture"));
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
    copy_fn copy_d = (copy_fn)direct("libcudart.so.13", "cudaMemcpyAsync");
    allreduce_fn ar_d = (allreduce_fn)direct("libnccl.so.2", "ncclAllReduce");
    launch_fn launch_d = (launch_fn)direct("libcudart.so.13", "cudaGraphLaunch");
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
    /* A tenth as many captured calls: their full records would otherwise grow the trace faster
     * than the helper thread faults it in, and the next batch's copies would pay for that. */
    long cper = per / 10 > 0 ? per / 10 : 1;
    for (int b = -1; b < BATCHES; b++) { /* batch -1 warms up */
        /* Direct first in odd batches, bound first in even ones. */
        for (int k = 0; k < 2; k++) {
            int d = (k ^ b) & 1;
            struct way *wc = d ? &copy.direct : &copy.bound, *wa = d ? &ar.direct : &ar.bound;
            struct way *wl = d ? &launch.direct : &launch.bound;
            struct way *wk = d ? &cap.direct : &cap.bound, *wj = d ? &joined.direct : &joined.bound;
            copy_fn cf = d ? copy_d : cudaMemcpyAsync;
            allreduce_fn af = d ? ar_d : ncclAllReduce;
            launch_fn lf = d ? launch_d : cudaGraphLaunch;
            double t = now(), q = sys_ns(), c = thread_cpu();
            for (long i = 0; i < per; i++)
                cf(dev, host, sizeof(host), cudaMemcpyHostToDevice, 0);
            double t1 = now(), q1 = sys_ns(), c1 = thread_cpu();
            for (long i = 0; i < per; i++)
                af(dev, dev, 16, ncclFloat32, ncclSum, comm, 0);
            double t2 = now(), q2 = sys_ns(), c2 = thread_cpu();
            for (long i = 0; i < 10 * per; i++)
                lf(exec, s);
            double t3 = now(), q3 = sys_ns(), c3 = thread_cpu();
            wc->total_ns += t1 - t, wc->total_cpu += c1 - c, wc->calls += per;
            wa->total_ns += t2 - t1, wa->total_cpu += c2 - c1, wa->calls += per;
            wl->total_ns += t3 - t2, wl->total_cpu += c3 - c2, wl->calls += 10 * per;
            if (b >= 0) {
                wc->wall[b] = (t1 - t) / (double)per, wc->sys[b] = (q1 - q) / (double)per;
                wa->wall[b] = (t2 - t1) / (double)per, wa->sys[b] = (q2 - q1) / (double)per;
                wl->wall[b] = (t3 - t2) / (double)(10 * per);
                wl->sys[b] = (q3 - q2) / (double)(10 * per);
            }
            if (!captures)
                continue;
            /* One capture: calls on the capturing stream, then on a side stream forked into it. */
            cudaGraph_t cg;
            if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) ||
                cudaEventRecord(fork, cs) || cudaStreamWaitEvent(side, fork, 0)) {
                fprintf(stderr, "overhead: capture failed\n");
                return 1;
            }
            double t4 = now(), q4 = sys_ns(), c4 = thread_cpu();
            for (long i = 0; i < cper; i++)
                af(dev, dev, 16, ncclFloat32, ncclSum, comm, cs);
            double t5 = now(), q5 = sys_ns(), c5 = thread_cpu();
            for (long i = 0; i < cper; i++)
                af(dev, dev, 16, ncclFloat32, ncclSum, comm, side);
            double t6 = now(), q6 = sys_ns(), c6 = thread_cpu();
            if (cudaEventRecord(join, side) || cudaStreamWaitEvent(cs, join, 0) ||
                cudaStreamEndCapture(cs, &cg) || cudaGraphDestroy(cg)) {
                fprintf(stderr, "overhead: capture failed\n");
                return 1;
            }
            wk->total_ns += t5 - t4, wk->total_cpu += c5 - c4, wk->calls += cper;
            wj->total_ns += t6 - t5, wj->total_cpu += c6 - c5, wj->calls += cper;
            if (b < 0)
                continue;
            wk->wall[b] = (t5 - t4) / (double)cper, wk->sys[b] = (q5 - q4) / (double)cper;
            wj->wall[b] = (t6 - t5) / (double)cper, wj->sys[b] = (q6 - q5) / (double)cper;
        }
    }
    put(&copy);
    put(&ar);
    put(&launch);
    if (captures) {
        put(&cap);
        put(&joined);
    }
    /* CPU time the process's other threads took meanwhile, a bound call: the preload's helper
     * thread, where it has one, and the doubles' own threads. */
    printf("other_threads_cpu %.2f\n",
           (cpu_ns(RUSAGE_SELF) - cpu_ns(RUSAGE_THREAD)) /
               (double)(copy.bound.calls + ar.bound.calls + launch.bound.calls + cap.bound.calls +
                        joined.bound.calls));
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
