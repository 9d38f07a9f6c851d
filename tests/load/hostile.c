/* shapetrace tests: an application that is hard on the preload. Usage: hostile closeall FILE N
 * (after its first CUDA call, closes every descriptor above 2, as daemons do, opens FILE, writes
 * 17 bytes, puts FILE on every descriptor up to 1023, then makes N copies; exits 0 only if FILE
 * still holds its 17 bytes) | calls N (N copies, nothing else) | exec N (N copies, then exec of
 * itself to make N more) | linger N (N copies, then waits until its stdin is closed)
 * | values N (what --values touches: after a failing cudaMalloc and closing every descriptor
 * above 2, N async device-to-device copies on a stream and N synchronous ones to the host, the
 * data checked; prints the bytes' sum, the CUDA error still pending, its descriptors but pipes)
 * | values-exit STATUS (an async copy, then exit(STATUS)) | values-_exit STATUS (the same with
 * _exit: no exit handlers run). */
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Descriptors open now that are not pipes. (Native call sites through libunwind may open a
 * pipe pair of its own, with or without --values: not what this program checks.) */
static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++) {
        struct stat st;
        n += fcntl(fd, F_GETFD) != -1 && (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode));
    }
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
    printf("sum %lu, error pending %d (%s), descriptors (not pipes) %d\n", sum,
           (int)cudaGetLastError(),
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

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "values"))
        return values(atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "values-exit"))
        return values_exit(atoi(argv[2]), 0);
    if (argc > 2 && !strcmp(argv[1], "values-_exit"))
        return values_exit(atoi(argv[2]), 1);
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
    fprintf(stderr, "usage: hostile closeall FILE N | calls N | exec N | linger N | values N"
                    " | values-exit STATUS | values-_exit STATUS\n");
    return 2;
}
