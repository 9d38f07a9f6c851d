/* shapetrace tests: a program linked against libnccl and libcudart (the doubles here, the real
 * ones on a GPU host) that makes a known sequence of calls, so tests can assert on its trace.
 * Usage: scenario basic | threads N M | depths N M | forkdepths N | fork | kill N | graph |
 * default-kind | nested (ncclBcast, which the NCCL double, like NCCL, runs through ncclBroadcast,
 * then an all-reduce; the double's init makes a copy of its own) | overrun (a copy that reads past
 * its allocation; the double refuses it, the trace keeps it) | phases GO_FILE NPROC K STALL_RANK
 * (NPROC processes share one communicator id; each makes K copies and all-reduces, STALL_RANK three
 * fewer, says "ready", waits for GO_FILE to exist, then makes 5 more of each) | joined (captures
 * joined through events: an all-reduce and a copy on a side stream that joins the capture by
 * waiting on an event, replayed 3 times; a fork left unjoined; the same fork and join at the driver
 * level, with libcuda.so.1 opened by name) | latecomm N (N copies, then a communicator and 4
 * all-reduces on it) */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK_CUDA(x)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #x, (int)e_);                   \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK_NCCL(x)                                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (x);                                                                     \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #x, (int)r_);                   \
            exit(4);                                                                               \
        }                                                                                          \
    } while (0)

static ncclComm_t one_rank_comm(void)
{
    ncclUniqueId id;
    ncclComm_t comm;
    CHECK_NCCL(ncclGetUniqueId(&id));
    CHECK_NCCL(ncclCommInitRank(&comm, 1, id, 0));
    return comm;
}

/* Named so that tests can find it as the call site of the all-gather. */
__attribute__((noinline)) static void gather_rows(ncclComm_t comm, float *in, float *out, size_t n,
                                                  cudaStream_t s)
{
    CHECK_NCCL(ncclAllGather(in, out, n, ncclFloat32, comm, s));
}

static int basic(void)
{
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));
    float host[1024], back[1024];
    for (int i = 0; i < 1024; i++)
        host[i] = (float)i;
    float *a, *b;
    CHECK_CUDA(cudaMalloc((void **)&a, sizeof(host)));
    CHECK_CUDA(cudaMalloc((void **)&b, sizeof(host)));
    CHECK_CUDA(cudaMemcpy(a, host, sizeof(host), cudaMemcpyHostToDevice));
    ncclComm_t comm = one_rank_comm();
    CHECK_NCCL(ncclAllReduce(a, b, 1024, ncclFloat32, ncclSum, comm, s));
    gather_rows(comm, a, b, 512, s);
    CHECK_NCCL(ncclBroadcast(a, b, 256, ncclBfloat16, 0, comm, s));
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclSend(a, 100, ncclInt32, 0, comm, s));
    CHECK_NCCL(ncclRecv(b, 100, ncclInt32, 0, comm, s));
    CHECK_NCCL(ncclGroupEnd());
    CHECK_CUDA(cudaMemcpyAsync(back, b, sizeof(back), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    /* 2-D: 8 rows of 64 bytes out of rows of 256. */
    CHECK_CUDA(cudaMemcpy2D(back, 64, a, 256, 64, 8, cudaMemcpyDeviceToHost));
    ncclComm_t child;
    CHECK_NCCL(ncclCommSplit(comm, 7, 0, &child, NULL));
    CHECK_NCCL(ncclAllReduce(a, b, 16, ncclFloat16, ncclMax, child, s));
    CHECK_NCCL(ncclCommDestroy(child));
    CHECK_NCCL(ncclCommDestroy(comm));
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
    /* A failing call is still traced, with its result. */
    cudaError_t e = cudaMemcpy(back, host, 16, cudaMemcpyDeviceToHost);
    printf("basic ok %d\n", (int)e != 0);
    return 0;
}

struct worker {
    int id, iters;
    float *dev;
    ncclComm_t comm;
};

/* The threads share one communicator and take turns on it, as NCCL requires ("it is not allowed
 * to issue NCCL operations to a single communicator in parallel with multiple threads"; "it is
 * safe ... as long as users can guarantee only one thread operates the communicator at a
 * time"); their copies run at the same time. */
static pthread_mutex_t comm_turn = PTHREAD_MUTEX_INITIALIZER;

static void *work(void *arg)
{
    struct worker *w = arg;
    float host[64];
    for (int i = 0; i < w->iters; i++) {
        host[0] = (float)i;
        CHECK_CUDA(cudaMemcpy(w->dev + w->id * 64, host, sizeof(host), cudaMemcpyHostToDevice));
        pthread_mutex_lock(&comm_turn);
        ncclResult_t r = ncclAllReduce(w->dev, w->dev, 8, ncclFloat32, ncclSum, w->comm, 0);
        pthread_mutex_unlock(&comm_turn);
        CHECK_NCCL(r);
    }
    return NULL;
}

/* depths: threads that each copy from the bottom of a recursion of `depth` calls, a new depth
 * (so a new stack) at each iteration, with the depth and the thread in the copy's size (16 bytes a
 * level, plus the thread): the stacks share their outer frames, and are stored by several threads
 * at once. */
__attribute__((noinline)) static void recurse(const struct worker *w, int depth, int left,
                                              float *host)
{
    if (left > 1) {
        recurse(w, depth, left - 1, host);
        __asm__ volatile("" ::: "memory"); /* not a tail call: each level keeps its frame */
        return;
    }
    CHECK_CUDA(cudaMemcpy(w->dev + w->id * 64, host, (size_t)depth * 16 + (size_t)w->id,
                          cudaMemcpyHostToDevice));
}

static void *deep(void *arg)
{
    struct worker *w = arg;
    float host[64 * 8] = {0};
    for (int i = 0; i < w->iters; i++)
        recurse(w, (i * 7 + w->id * 3) % 24 + 1, (i * 7 + w->id * 3) % 24 + 1, host);
    return NULL;
}

static int depths(int n, int iters)
{
    float *dev;
    CHECK_CUDA(cudaMalloc((void **)&dev, (size_t)n * 64 * sizeof(float) * 8));
    pthread_t t[16];
    struct worker w[16];
    if (n > 16)
        n = 16;
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){.id = i, .iters = iters, .dev = dev};
        pthread_create(&t[i], NULL, deep, &w[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("depths ok\n");
    return 0;
}

/* forkdepths N: while 4 threads store new stacks (depths 1 to 24), the main thread forks N
 * children one after another; each child copies from the bottom of a recursion (a new stack in
 * its own trace, stored under the lock the parent's threads take) and exits 0. */
static int forkdepths(int n)
{
    float *dev;
    CHECK_CUDA(cudaMalloc((void **)&dev, 4 * 64 * sizeof(float) * 8));
    pthread_t t[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.id = i, .iters = 240, .dev = dev};
        pthread_create(&t[i], NULL, deep, &w[i]);
    }
    int ok = 0;
    for (int k = 0; k < n; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            float host[64 * 8] = {0};
            recurse(&w[k % 4], k % 24 + 1, k % 24 + 1, host);
            _exit(0);
        }
        int st;
        ok += pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    printf("%d forks: %d children exited 0\n", n, ok);
    return ok == n ? 0 : 1;
}

static int threads(int n, int iters)
{
    float *dev;
    CHECK_CUDA(cudaMalloc((void **)&dev, (size_t)n * 64 * sizeof(float)));
    ncclComm_t comm = one_rank_comm();
    pthread_t t[64];
    struct worker w[64];
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){.id = i, .iters = iters, .dev = dev, .comm = comm};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("threads ok\n");
    return 0;
}

static int do_fork(void)
{
    float *dev, host[16] = {0};
    CHECK_CUDA(cudaMalloc((void **)&dev, sizeof(host)));
    CHECK_CUDA(cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice));
    pid_t pid = fork();
    if (pid == 0) {
        CHECK_CUDA(cudaMemcpy(host, dev, 12, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(host, dev, 12, cudaMemcpyDeviceToHost));
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK_CUDA(cudaMemcpy(host, dev, 8, cudaMemcpyDeviceToHost));
    printf("fork ok\n");
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int kill_after(int n)
{
    float *dev, host[16] = {0};
    CHECK_CUDA(cudaMalloc((void **)&dev, sizeof(host)));
    for (int i = 0; i < n; i++)
        CHECK_CUDA(cudaMemcpy(dev, host, (size_t)(i % 16 + 1) * 4, cudaMemcpyHostToDevice));
    fflush(stdout);
    kill(getpid(), SIGKILL);
    return 0;
}

static int graph(void)
{
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));
    float *a;
    CHECK_CUDA(cudaMalloc((void **)&a, 4096));
    ncclComm_t comm = one_rank_comm();
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK_NCCL(ncclAllReduce(a, a, 1024, ncclFloat32, ncclSum, comm, s));
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    for (int i = 0; i < 5; i++)
        CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_NCCL(ncclAllReduce(a, a, 1024, ncclFloat32, ncclSum, comm, s));
    printf("graph ok\n");
    return 0;
}

/* Captures joined through events, as torch and vLLM put NCCL on a side stream inside a graph. */
__attribute__((noinline)) static void side_stream_work(ncclComm_t comm, float *a, float *host,
                                                       cudaStream_t side)
{
    CHECK_NCCL(ncclAllReduce(a, a, 1024, ncclFloat32, ncclSum, comm, side));
    CHECK_CUDA(cudaMemcpyAsync(host, a, 64, cudaMemcpyDeviceToHost, side));
}

typedef CUresult (*cu_stream_fn)(CUstream *, unsigned int);
typedef CUresult (*cu_event_fn)(CUevent *, unsigned int);
typedef CUresult (*cu_record_fn)(CUevent, CUstream);
typedef CUresult (*cu_wait_fn)(CUstream, CUevent, unsigned int);
typedef CUresult (*cu_begin_fn)(CUstream, CUstreamCaptureMode);
typedef CUresult (*cu_end_fn)(CUstream, CUgraph *);
typedef CUresult (*cu_alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*cu_htod_fn)(CUdeviceptr, const void *, size_t, CUstream);

/* The same fork and join with the driver's own calls (CuPy, JAX). */
static int driver_joined(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    cu_stream_fn mk = (cu_stream_fn)dlsym(h, "cuStreamCreate");
    cu_event_fn ev = (cu_event_fn)dlsym(h, "cuEventCreate");
    cu_record_fn rec = (cu_record_fn)dlsym(h, "cuEventRecord");
    cu_wait_fn wait = (cu_wait_fn)dlsym(h, "cuStreamWaitEvent");
    cu_begin_fn begin = (cu_begin_fn)dlsym(h, "cuStreamBeginCapture_v2");
    cu_end_fn end = (cu_end_fn)dlsym(h, "cuStreamEndCapture");
    cu_alloc_fn alloc = (cu_alloc_fn)dlsym(h, "cuMemAlloc_v2");
    cu_htod_fn htod = (cu_htod_fn)dlsym(h, "cuMemcpyHtoDAsync_v2");
    CUstream s, side;
    CUevent fork, join;
    CUdeviceptr d;
    CUgraph g;
    static char bytes[64];
    if (!mk || !ev || !rec || !wait || !begin || !end || !alloc || !htod || mk(&s, 0) ||
        mk(&side, 0) || ev(&fork, 0) || ev(&join, 0) || alloc(&d, 64))
        return 1;
    if (begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL) || rec(fork, s) || wait(side, fork, 0) ||
        htod(d, bytes, sizeof(bytes), side) || rec(join, side) || wait(s, join, 0) || end(s, &g))
        return 1;
    return 0;
}

static int joined(void)
{
    cudaStream_t s, side;
    cudaEvent_t fork, join;
    float *a, host[16];
    CHECK_CUDA(cudaStreamCreate(&s));
    CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreate(&fork));
    CHECK_CUDA(cudaEventCreate(&join));
    CHECK_CUDA(cudaMalloc((void **)&a, 4096));
    ncclComm_t comm = one_rank_comm();
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaEventRecord(fork, s));
    CHECK_CUDA(cudaStreamWaitEvent(side, fork, 0));
    side_stream_work(comm, a, host, side);
    CHECK_CUDA(cudaEventRecord(join, side));
    CHECK_CUDA(cudaStreamWaitEvent(s, join, 0));
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    for (int i = 0; i < 3; i++)
        CHECK_CUDA(cudaGraphLaunch(exec, s));
    /* A fork that is never joined back: CUDA ends that capture with an error. */
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaEventRecord(fork, s));
    CHECK_CUDA(cudaStreamWaitEvent(side, fork, 0));
    CHECK_CUDA(cudaMemcpyAsync(host, a, 64, cudaMemcpyDeviceToHost, side));
    cudaError_t unjoined = cudaStreamEndCapture(s, &g);
    /* Afterwards the side stream is eager again. */
    CHECK_NCCL(ncclAllReduce(a, a, 16, ncclFloat32, ncclSum, comm, side));
    printf("joined ok; unjoined %d; driver %d\n", (int)unjoined, driver_joined());
    return 0;
}

/* Reads 8 KiB out of a 4 KiB allocation. */
__attribute__((noinline)) static int read_past_the_end(void)
{
    char *dev, host[8192];
    CHECK_CUDA(cudaMalloc((void **)&dev, 4096));
    CHECK_CUDA(cudaMemcpy(host, dev, 1024, cudaMemcpyDeviceToHost));
    cudaError_t e = cudaMemcpy(host, dev + 1024, 4096, cudaMemcpyDeviceToHost);
    printf("overrun %d\n", (int)e);
    return 0;
}

static int default_kind(void)
{
    float *a, *pinned, host[32] = {0};
    CHECK_CUDA(cudaMalloc((void **)&a, sizeof(host)));
    CHECK_CUDA(cudaMallocHost((void **)&pinned, sizeof(host)));
    CHECK_CUDA(cudaMemcpy(a, host, sizeof(host), cudaMemcpyDefault));      /* H2D */
    CHECK_CUDA(cudaMemcpy(pinned, a, sizeof(host), cudaMemcpyDefault));    /* D2H */
    CHECK_CUDA(cudaMemcpy(a, a, sizeof(host), cudaMemcpyDefault));         /* D2D */
    CHECK_CUDA(cudaMemcpy(host, pinned, sizeof(host), cudaMemcpyDefault)); /* H2H */
    CHECK_CUDA(cudaFreeHost(pinned));
    /* The application's view of CUDA's last error is untouched by our own queries. */
    printf("default-kind ok %d\n", (int)cudaPeekAtLastError());
    return 0;
}

/* Every process of `phases` joins a one-rank communicator made from the same unique id, so the
 * traces agree on its id as a real job's ranks would. */
static int phases_child(const char *go, int k, int rank, int stall)
{
    float *dev, host[16] = {0};
    CHECK_CUDA(cudaMalloc((void **)&dev, sizeof(host)));
    ncclUniqueId id;
    memset(&id, 0x5a, sizeof(id));
    ncclComm_t comm;
    CHECK_NCCL(ncclCommInitRank(&comm, 1, id, 0));
    int n = rank == stall ? k - 3 : k;
    for (int i = 0; i < n; i++) {
        CHECK_CUDA(cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice));
        CHECK_NCCL(ncclAllReduce(dev, dev, 4, ncclFloat32, ncclSum, comm, 0));
    }
    printf("ready %d %d\n", rank, (int)getpid());
    fflush(stdout);
    for (int waited = 0; access(go, F_OK) != 0; waited++) {
        if (waited > 6000)
            return 5;
        usleep(10000);
    }
    for (int i = 0; i < 5; i++) {
        CHECK_CUDA(cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice));
        CHECK_NCCL(ncclAllReduce(dev, dev, 4, ncclFloat32, ncclSum, comm, 0));
    }
    return 0;
}

static int phases(char **argv, const char *go, int nproc, const char *k, const char *stall)
{
    pid_t pids[64];
    if (nproc > 64)
        nproc = 64;
    for (int r = 0; r < nproc; r++) {
        char rank[16];
        snprintf(rank, sizeof(rank), "%d", r);
        pids[r] = fork();
        if (pids[r] == 0) {
            setenv("RANK", rank, 1);
            execl("/proc/self/exe", argv[0], "phases-child", go, k, rank, stall, (char *)NULL);
            _exit(127);
        }
    }
    int bad = 0;
    for (int r = 0; r < nproc; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return bad;
}

/* Named so that tests can find it as the call site of the broadcast. */
__attribute__((noinline)) static void bcast_step(ncclComm_t comm, float *buf, size_t n)
{
    CHECK_NCCL(ncclBcast(buf, n, ncclFloat32, 0, comm, 0));
}

static int nested(void)
{
    float *buf;
    CHECK_CUDA(cudaMalloc((void **)&buf, 64 * sizeof(float)));
    ncclComm_t comm = one_rank_comm();
    bcast_step(comm, buf, 64);
    CHECK_NCCL(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, 0));
    CHECK_NCCL(ncclCommDestroy(comm));
    CHECK_CUDA(cudaFree(buf));
    printf("nested ok\n");
    return 0;
}

/* n copies, then a communicator and a few all-reduces on it: its record lies n copies into the
 * trace (past the writer's first segment, 64 MiB, for n over about a million). */
static int late_comm(int n)
{
    float *dev, host[16] = {0};
    CHECK_CUDA(cudaMalloc((void **)&dev, sizeof(host)));
    for (int i = 0; i < n; i++)
        CHECK_CUDA(cudaMemcpyAsync(dev, host, sizeof(host), cudaMemcpyHostToDevice, 0));
    ncclComm_t comm = one_rank_comm();
    for (int i = 0; i < 4; i++)
        CHECK_NCCL(ncclAllReduce(dev, dev, 16, ncclFloat32, ncclSum, comm, 0));
    CHECK_CUDA(cudaStreamSynchronize(0));
    CHECK_NCCL(ncclCommDestroy(comm));
    printf("latecomm ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "basic";
    if (!strcmp(what, "basic"))
        return basic();
    if (!strcmp(what, "threads"))
        return threads(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 1000);
    if (!strcmp(what, "depths"))
        return depths(argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atoi(argv[3]) : 48);
    if (!strcmp(what, "forkdepths"))
        return forkdepths(argc > 2 ? atoi(argv[2]) : 20);
    if (!strcmp(what, "fork"))
        return do_fork();
    if (!strcmp(what, "kill"))
        return kill_after(argc > 2 ? atoi(argv[2]) : 1000);
    if (!strcmp(what, "graph"))
        return graph();
    if (!strcmp(what, "default-kind"))
        return default_kind();
    if (!strcmp(what, "nested"))
        return nested();
    if (!strcmp(what, "overrun"))
        return read_past_the_end();
    if (!strcmp(what, "latecomm"))
        return late_comm(argc > 2 ? atoi(argv[2]) : 1100000);
    if (!strcmp(what, "joined"))
        return joined();
    if (!strcmp(what, "phases") && argc > 5)
        return phases(argv, argv[2], atoi(argv[3]), argv[4], argv[5]);
    if (!strcmp(what, "phases-child") && argc > 5)
        return phases_child(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    fprintf(stderr, "scenario: unknown '%s'\n", what);
    return 2;
}
