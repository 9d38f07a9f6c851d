/* shapetrace tests: a wrapper reached when the library it wraps is not loaded at all. It must
 * return that library's own error and warn once, never crash or exit. */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*ar_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*copy_fn)(void *, const void *, size_t, int);

int main(void)
{
    ar_fn ar = (ar_fn)dlsym(RTLD_DEFAULT, "ncclAllReduce");
    copy_fn cp = (copy_fn)dlsym(RTLD_DEFAULT, "cudaMemcpy");
    if (!ar || !cp) {
        printf("not preloaded\n");
        return 1;
    }
    char a[4], b[4];
    int r1 = ar(a, b, 1, 0, 0, NULL, NULL);
    ar(a, b, 1, 0, 0, NULL, NULL);
    int r2 = cp(a, b, 4, 0);
    cp(a, b, 4, 0);
    printf("nccl %d cuda %d\n", r1, r2);
    return 0;
}
