/* shapetrace tests: five native paths from one Python line to one cudaMemcpy. copy_via(k) goes
 * through path_a, path_b, path_c, path_d or path_e, whose frames are alike in size, into one leaf
 * that makes the copy: the same return address into the application and the same stack depth at
 * the library, so only an unwind tells them apart (the call-site cache, preload/stacks.c, keeps
 * four paths a place: the fifth makes it give one up). */
#include <cuda_runtime.h>
#include <stddef.h>

int copy_via(int k, void *dev, const void *host, size_t n);
int path_a(void *dev, const void *host, size_t n);
int path_b(void *dev, const void *host, size_t n);
int path_c(void *dev, const void *host, size_t n);
int path_d(void *dev, const void *host, size_t n);
int path_e(void *dev, const void *host, size_t n);

static volatile int sink;

__attribute__((noinline)) static int leaf(void *dev, const void *host, size_t n)
{
    int r = (int)cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice);
    sink = r;
    return r;
}

#define PATH(name)                                                                                 \
    __attribute__((noinline)) int name(void *dev, const void *host, size_t n)                      \
    {                                                                                              \
        int r = leaf(dev, host, n);                                                                \
        sink = r;                                                                                  \
        return r;                                                                                  \
    }
PATH(path_a)
PATH(path_b)
PATH(path_c)
PATH(path_d)
PATH(path_e)

int copy_via(int k, void *dev, const void *host, size_t n)
{
    static int (*const path[])(void *, const void *, size_t) = {path_a, path_b, path_c, path_d,
                                                                path_e};
    int r = path[(unsigned)k % 5](dev, host, n);
    sink = r;
    return r;
}
