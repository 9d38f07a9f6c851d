/* shapetrace tests: two native paths from one Python line to one cudaMemcpy. copy_via(k) goes
 * through path_a or path_b, whose frames are alike in size, into one leaf that makes the copy:
 * the same return address into the application and the same stack depth at the library, so
 * only an unwind tells the two apart (the call-site key of Python stacks, preload/python.c). */
#include <cuda_runtime.h>
#include <stddef.h>

int copy_via(int k, void *dev, const void *host, size_t n);
int path_a(void *dev, const void *host, size_t n);
int path_b(void *dev, const void *host, size_t n);

static volatile int sink;

__attribute__((noinline)) static int leaf(void *dev, const void *host, size_t n)
{
    int r = (int)cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice);
    sink = r;
    return r;
}

__attribute__((noinline)) int path_a(void *dev, const void *host, size_t n)
{
    int r = leaf(dev, host, n);
    sink = r;
    return r;
}

__attribute__((noinline)) int path_b(void *dev, const void *host, size_t n)
{
    int r = leaf(dev, host, n);
    sink = r;
    return r;
}

int copy_via(int k, void *dev, const void *host, size_t n)
{
    int r = k ? path_b(dev, host, n) : path_a(dev, host, n);
    sink = r;
    return r;
}
