/* shapetrace tests: an application that is hard on the preload. Usage: hostile closeall FILE N
 * (after its first CUDA call, closes every descriptor above 2, as daemons do, opens FILE, writes
 * 17 bytes, puts FILE on every descriptor up to 1023, then makes N copies; exits 0 only if FILE
 * still holds its 17 bytes) | calls N (N copies, nothing else) | exec N (N copies, then exec of
 * itself to make N more) | linger N (N copies, then waits until its stdin is closed). */
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

int main(int argc, char **argv)
{
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
    fprintf(stderr, "usage: hostile closeall FILE N | calls N | exec N | linger N\n");
    return 2;
}
