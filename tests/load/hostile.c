/* shapetrace tests: an application that is hard on the preload. Each mode prints what it saw on
 * stdout, so that a traced run can be compared with an untraced one byte for byte:
 *   closeall FILE N   after its first CUDA call, closes every descriptor above 2, as daemons do,
 *                     opens FILE, writes 17 bytes, puts FILE on every descriptor up to 1023, then
 *                     makes N copies; exits 0 only if FILE still holds its 17 bytes
 *   calls N           N copies, nothing else
 *   exec N            N copies, then exec of itself to make N more
 *   linger N          N copies, then waits until its stdin is closed
 *   pause N M         N copies, then waits for a line on its stdin, then M copies
 *   write FILE BYTES N  N copies, then writes BYTES bytes to FILE (its own file-size limit applies)
 *   fsize KB N FILE   counts SIGXFSZ; 1 copy, lowers its RLIMIT_FSIZE to KB KiB, N copies, then
 *                     writes FILE until the limit stops it (one SIGXFSZ, then EFBIG)
 *   malloc MB N       N copies, then allocates and touches MB MiB
 *   vmsize            1 copy, then prints its address space in use (VmSize), in KiB
 *   reuse A B N       1 copy, close_range(3, ~0), its own A (16 bytes) and B dup2'd onto 3 and 4,
 *                     N copies from new threads and call sites, then reads A back and checks B
 *                     is empty
 *   nofile N          1 copy, opens /dev/null until it runs out of descriptors, then N copies
 *   lastfd N          opens /dev/null until it runs out, closes one, makes its first N copies,
 *                     then opens one more file: the one it freed
 *   stderr FILE N     puts its data FILE (5 bytes) on descriptor 2, then N copies
 *   umask N           umask 0777, then N copies
 *   values N          what --values touches: after a failing cudaMalloc and closing every
 *                     descriptor above 2, N async device-to-device copies on a stream and N
 *                     synchronous ones to the host, the data checked; prints the bytes' sum,
 *                     the CUDA error still pending and its descriptors
 *   values-exit S     an async copy, then exit(S); values-_exit S: the same with _exit (no exit
 *                     handlers run)
 *   errno N           N rounds of six calls, each made with errno set to a value of its own:
 *                     an async device-to-device copy on a stream, one of kind Default, a
 *                     synchronous copy to the host, a graph launch, an all-reduce on a
 *                     communicator of one rank and one NCCL refuses (an invalid datatype);
 *                     prints for each how many calls returned with errno as it was set, and
 *                     what the others returned with
 *   alone N           a program of one thread that counts on being one: blocks SIGUSR2, takes
 *                     SIGALRM from a 1 ms timer (sent to the process, so to any thread that does
 *                     not block it) and notes which thread got each; N copies in 20 rounds, each
 *                     ended by a fork whose parent counts its threads at once (as Python's
 *                     os.fork does before it warns) and whose child makes 500 copies; counts its
 *                     threads every 1000 copies (the most, on stderr); checks its
 *                     signal mask; then main ends with pthread_exit: the process must end when
 *                     its only thread does */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static int copies(int n)
{
    float *dev, host[16] = {0};
    if (cudaMalloc((void **)&dev, sizeof(host)) != cudaSuccess)
        return 3;
    for (int i = 0; i < n; i++)
        if (cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice) != cudaSuccess)
            return 3;
    return 0;
}

static int close_all(const char *file, int n)
{
    int rc = copies(1);
    if (rc)
        return rc;
    for (int fd = 3; fd < 4096; fd++)
        close(fd);
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "seventeen bytes!\n", 17) != 17)
        return 5;
    /* Whatever number the preload moved its descriptor to now names this file. */
    for (int i = fd + 1; i < 1024; i++)
        dup2(fd, i);
    rc = copies(n);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != 17) {
        fprintf(stderr, "hostile: my file now has %lld bytes\n", (long long)st.st_size);
        return 6;
    }
    return rc;
}

static int write_file(const char *file, long bytes, int n)
{
    int rc = copies(n);
    if (rc)
        return rc;
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return 5;
    static char buf[4096];
    memset(buf, 'x', sizeof(buf));
    long done = 0;
    while (done < bytes) {
        size_t k = bytes - done < (long)sizeof(buf) ? (size_t)(bytes - done) : sizeof(buf);
        ssize_t w = write(fd, buf, k);
        if (w <= 0)
            break;
        done += w;
    }
    printf("wrote %ld of %ld bytes\n", done, bytes);
    return close(fd) == 0 && done == bytes ? 0 : 7;
}

static volatile sig_atomic_t xfsz_seen;

static void on_xfsz(int sig)
{
    (void)sig;
    xfsz_seen++;
}

static int fsize(long kb, int n, const char *file)
{
    signal(SIGXFSZ, on_xfsz);
    int rc = copies(1);
    if (rc)
        return rc;
    struct rlimit r = {(rlim_t)kb << 10, (rlim_t)kb << 10};
    if (setrlimit(RLIMIT_FSIZE, &r) != 0)
        return 8;
    rc = copies(n);
    printf("after %d copies: %d SIGXFSZ\n", n, (int)xfsz_seen);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return 5;
    static char buf[4096];
    long done = 0;
    ssize_t w = 0;
    while ((w = write(fd, buf, sizeof(buf))) > 0)
        done += w;
    printf("own file: %ld bytes, then %s, %d SIGXFSZ\n", done, w < 0 ? strerror(errno) : "0",
           (int)xfsz_seen);
    close(fd);
    return rc;
}

static int alloc(long mb, int n)
{
    int rc = copies(n);
    if (rc)
        return rc;
    char *p = malloc((size_t)mb << 20);
    if (!p) {
        printf("malloc of %ld MiB failed\n", mb);
        return 7;
    }
    for (size_t i = 0; i < (size_t)mb << 20; i += 1 << 20)
        p[i] = 1;
    printf("malloc of %ld MiB succeeded\n", mb);
    free(p);
    return 0;
}

/* Each level is a new call site: the unwinder meets frames it has not cached. */
static int vmsize(void)
{
    int rc = copies(1);
    char line[256];
    FILE *f = fopen("/proc/self/status", "re");
    while (rc == 0 && f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmSize:", 7))
            printf("%ld\n", atol(line + 7));
    if (f)
        fclose(f);
    return rc;
}

static int __attribute__((noinline)) deep(int level, int n)
{
    if (level > 0) {
        int rc = deep(level - 1, n);
        __asm__ volatile("" ::: "memory"); /* no tail call: the frame stays */
        return rc;
    }
    return copies(n);
}

static void *deep_thread(void *arg)
{
    return (void *)(intptr_t)deep((int)(intptr_t)arg, 1);
}

static int reuse(const char *a, const char *b, int n)
{
    int rc = copies(1);
    if (rc)
        return rc;
    syscall(SYS_close_range, 3u, ~0u, 0u);
    int fa = open(a, O_RDWR | O_CREAT | O_TRUNC, 0600);
    int fb = open(b, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fa < 0 || fb < 0 || write(fa, "sixteen bytes!!\n", 16) != 16)
        return 5;
    if ((fa != 3 && dup2(fa, 3) < 0) || (fb != 4 && dup2(fb, 4) < 0))
        return 5;
    lseek(3, 0, SEEK_SET);
    /* From new threads: the unwinder's cache of memory it checked is per thread. */
    for (int i = 0; i < n; i++) {
        pthread_t t;
        void *ret;
        if (pthread_create(&t, NULL, deep_thread, (void *)(intptr_t)(i % 16)) != 0 ||
            pthread_join(t, &ret) != 0 || ret)
            return 3;
    }
    char buf[64];
    ssize_t got = read(3, buf, sizeof(buf));
    struct stat st;
    fstat(4, &st);
    printf("read %zd of 16 bytes from A; B has %lld bytes\n", got, (long long)st.st_size);
    return got == 16 && st.st_size == 0 ? 0 : 6;
}

static int open_all(void)
{
    int k = 0;
    while (open("/dev/null", O_RDONLY) >= 0)
        k++;
    return k;
}

static int nofile(int n)
{
    int rc = copies(1);
    if (rc)
        return rc;
    printf("opened %d files\n", open_all());
    rc = copies(n);
    printf("copies: %s\n", rc ? "failed" : "ok");
    return rc;
}

static int lastfd(int n)
{
    int k = open_all();
    close(3);
    int rc = copies(n);
    int fd = open("/dev/null", O_RDONLY);
    printf("opened %d files, freed one, copies %s, then %s\n", k, rc ? "failed" : "ok",
           fd >= 0 ? "opened it again" : strerror(errno));
    return rc ? rc : fd >= 0 ? 0 : 6;
}

static int on_stderr(const char *file, int n)
{
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "data\n", 5) != 5 || dup2(fd, 2) < 0)
        return 5;
    int rc = copies(n);
    struct stat st;
    fstat(2, &st);
    printf("data file: %lld bytes\n", (long long)st.st_size);
    return rc ? rc : st.st_size == 5 ? 0 : 6;
}

/* Descriptors open now. */
static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

static int values(int n)
{
    void *huge;
    /* The application's own error, left pending: fingerprints must not clear or change it. */
    cudaError_t pending = cudaMalloc(&huge, (size_t)1 << 62);
    for (int fd = 3; fd < 4096; fd++)
        close(fd);
    cudaStream_t s;
    unsigned char *a, *b, host[4096];
    if (cudaStreamCreate(&s) || cudaMalloc((void **)&a, sizeof(host)) ||
        cudaMalloc((void **)&b, sizeof(host)))
        return 3;
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof(host); k++)
            host[k] = (unsigned char)(k * 31 + (size_t)i);
        if (cudaMemcpy(a, host, sizeof(host), cudaMemcpyHostToDevice) ||
            cudaMemcpyAsync(b, a, sizeof(host), cudaMemcpyDeviceToDevice, s) ||
            cudaStreamSynchronize(s) || cudaMemcpy(host, b, sizeof(host), cudaMemcpyDeviceToHost))
            return 3;
        for (size_t k = 0; k < sizeof(host); k++) {
            if (host[k] != (unsigned char)(k * 31 + (size_t)i))
                return 4;
            sum += host[k];
        }
    }
    printf("sum %lu, error pending %d (%s), descriptors %d\n", sum, (int)cudaGetLastError(),
           pending == cudaErrorMemoryAllocation ? "as the failed malloc left it" : "?", open_fds());
    return 0;
}

static int values_exit(int status, int hard)
{
    unsigned char *a, *b;
    cudaStream_t s;
    if (cudaStreamCreate(&s) || cudaMalloc((void **)&a, 64) || cudaMalloc((void **)&b, 64) ||
        cudaMemcpyAsync(b, a, 64, cudaMemcpyDeviceToDevice, s))
        return 3;
    printf("leaving with %d\n", status);
    fflush(stdout);
    if (hard)
        _exit(status);
    exit(status);
}

/* What errno a wrapper's caller sees: the value the real function left, which is the caller's
 * own where the real function does not touch it. */
static int errno_seen(int n)
{
    static const char *const what[] = {"cudaMemcpyAsync D2D", "cudaMemcpyAsync Default",
                                       "cudaMemcpy D2H",      "cudaGraphLaunch",
                                       "ncclAllReduce",       "ncclAllReduce refused"};
    int kept[6] = {0}, other[6] = {0};
    unsigned char *a, *b, host[256] = {1};
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    ncclUniqueId id;
    ncclComm_t comm;
    if (cudaStreamCreate(&s) || cudaMalloc((void **)&a, sizeof(host)) ||
        cudaMalloc((void **)&b, sizeof(host)) ||
        cudaMemcpy(a, host, sizeof(host), cudaMemcpyHostToDevice) ||
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) || cudaStreamEndCapture(s, &g) ||
        cudaGraphInstantiate(&exec, g, 0) || ncclGetUniqueId(&id) ||
        ncclCommInitRank(&comm, 1, id, 0))
        return 3;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++) {
            int mark = 1000 + (i * 6 + k) % 3000, rc;
            errno = mark;
            if (k == 0)
                rc = cudaMemcpyAsync(b, a, sizeof(host), cudaMemcpyDeviceToDevice, s);
            else if (k == 1)
                rc = cudaMemcpyAsync(a, b, sizeof(host), cudaMemcpyDefault, s);
            else if (k == 2)
                rc = cudaMemcpy(host, b, sizeof(host), cudaMemcpyDeviceToHost);
            else if (k == 3)
                rc = cudaGraphLaunch(exec, s);
            else if (k == 4)
                rc = ncclAllReduce(a, b, sizeof(host) / 4, ncclFloat32, ncclSum, comm, s);
            else
                rc = ncclAllReduce(a, b, 1, (ncclDataType_t)99, ncclSum, comm, s) ==
                             ncclInvalidArgument
                         ? 0
                         : 1;
            int seen = errno;
            if (rc)
                return 3;
            if (seen == mark)
                kept[k]++;
            else
                other[k] = seen;
        }
    }
    if (cudaStreamSynchronize(s) || ncclCommDestroy(comm))
        return 3;
    for (int k = 0; k < 6; k++)
        printf("%s: %d of %d returned with errno as set, the others with %d\n", what[k], kept[k], n,
               other[k]);
    return 0;
}

static volatile sig_atomic_t alarms_here, alarms_elsewhere;
static pid_t main_tid;

static void on_alarm(int sig)
{
    (void)sig;
    if ((pid_t)syscall(SYS_gettid) == main_tid)
        alarms_here++;
    else
        alarms_elsewhere++;
}

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int alone(int n)
{
    main_tid = (pid_t)syscall(SYS_gettid);
    sigset_t mine, now;
    sigemptyset(&mine);
    sigaddset(&mine, SIGUSR2);
    sigprocmask(SIG_BLOCK, &mine, NULL);
    signal(SIGALRM, on_alarm);
    struct itimerval every = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    float *dev, host[16] = {0};
    if (cudaMalloc((void **)&dev, sizeof(host)) != cudaSuccess)
        return 3;
    int single = 0, children = 0, most = 1;
    for (int k = 0; k < 20; k++) {
        for (int i = 0; i < n / 20; i++) {
            if (cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice) != cudaSuccess)
                return 3;
            if (i % 1000 == 999) {
                int t = threads_now();
                most = t > most ? t : most;
            }
        }
        pid_t pid = fork();
        if (pid == 0)
            exit(copies(500));
        single += threads_now() == 1;
        int st;
        children += pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st);
    }
    setitimer(ITIMER_REAL, &off, NULL);
    sigprocmask(SIG_BLOCK, NULL, &now);
    int same = 1;
    for (int sig = 1; sig < SIGRTMIN; sig++)
        same &= sigismember(&now, sig) == sigismember(&mine, sig);
    printf("20 forks: %d found one thread, %d children exited 0\n", single, children);
    printf("SIGALRM: %s on the main thread, %d on another; signal mask %s\n",
           alarms_here ? "taken" : "never taken", (int)alarms_elsewhere,
           same ? "as it was set" : "changed");
    /* Not on stdout, which the test compares with the untraced run's: the preload's helper
     * thread, while it runs, is one of these. */
    fprintf(stderr, "hostile: at most %d threads seen during the copies\n", most);
    fflush(stdout);
    pthread_exit(NULL);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 3 && !strcmp(argv[1], "closeall"))
        return close_all(argv[2], atoi(argv[3]));
    if (argc > 2 && !strcmp(argv[1], "calls"))
        return copies(atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "exec")) {
        int rc = copies(atoi(argv[2]));
        if (rc)
            return rc;
        execl("/proc/self/exe", argv[0], "calls", argv[2], (char *)NULL);
        return 4;
    }
    if (argc > 2 && !strcmp(argv[1], "linger")) {
        int rc = copies(atoi(argv[2]));
        char c;
        while (rc == 0 && read(0, &c, 1) > 0)
            ;
        return rc;
    }
    if (argc > 3 && !strcmp(argv[1], "pause")) {
        int rc = copies(atoi(argv[2]));
        char line[64];
        if (rc == 0 && fgets(line, sizeof(line), stdin))
            rc = copies(atoi(argv[3]));
        printf("pause: %s\n", rc ? "failed" : "ok");
        return rc;
    }
    if (argc > 4 && !strcmp(argv[1], "write"))
        return write_file(argv[2], atol(argv[3]), atoi(argv[4]));
    if (argc > 4 && !strcmp(argv[1], "fsize"))
        return fsize(atol(argv[2]), atoi(argv[3]), argv[4]);
    if (argc > 3 && !strcmp(argv[1], "malloc"))
        return alloc(atol(argv[2]), atoi(argv[3]));
    if (argc > 1 && !strcmp(argv[1], "vmsize"))
        return vmsize();
    if (argc > 4 && !strcmp(argv[1], "reuse"))
        return reuse(argv[2], argv[3], atoi(argv[4]));
    if (argc > 2 && !strcmp(argv[1], "nofile"))
        return nofile(atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "lastfd"))
        return lastfd(atoi(argv[2]));
    if (argc > 3 && !strcmp(argv[1], "stderr"))
        return on_stderr(argv[2], atoi(argv[3]));
    if (argc > 2 && !strcmp(argv[1], "umask")) {
        umask(0777);
        return copies(atoi(argv[2]));
    }
    if (argc > 2 && !strcmp(argv[1], "values"))
        return values(atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "values-exit"))
        return values_exit(atoi(argv[2]), 0);
    if (argc > 2 && !strcmp(argv[1], "values-_exit"))
        return values_exit(atoi(argv[2]), 1);
    if (argc > 2 && !strcmp(argv[1], "errno"))
        return errno_seen(atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "alone"))
        return alone(atoi(argv[2]));
    fprintf(
        stderr,
        "usage: hostile closeall FILE N | calls N | exec N | linger N | pause N M | write FILE "
        "BYTES N | fsize KB N FILE | malloc MB N | vmsize | reuse A B N | nofile N | lastfd N | "
        "stderr FILE N | umask N | values N | values-exit S | values-_exit S | errno N | "
        "alone N\n");
    return 2;
}
