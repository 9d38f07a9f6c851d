/* A program calling the driver API itself, as cuda-python, CuPy and JAX do: dlopen libcuda.so.1
 * and look each function up.
 *   driver_direct dlsym   with dlsym(handle, "cuMemcpyHtoD_v2")
 *   driver_direct proc    through cuGetProcAddress: the v1 form found by dlsym, asked for the v2
 *                         form, which is asked for per-thread-stream entry points and old versions
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*proc1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*proc2_fn)(const char *, void **, int, cuuint64_t,
                             CUdriverProcAddressQueryResult *);

static int fail(const char *what)
{
    fprintf(stderr, "driver_direct: %s\n", what);
    return 1;
}

/* One allocation, a copy in and a copy out, checked. */
__attribute__((noinline)) static int round_trip(alloc_fn alloc, htod_fn htod, dtoh_fn dtoh,
                                                free_fn fr)
{
    char in[256], out[256];
    for (int i = 0; i < 256; i++)
        in[i] = (char)i;
    CUdeviceptr d;
    if (alloc(&d, 256) || htod(d, in, 256) || dtoh(out, d, 256) || fr(d))
        return fail("a call failed");
    return memcmp(in, out, 256) ? fail("bytes lost") : 0;
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "dlsym";
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return fail(dlerror());
    init_fn init = (init_fn)dlsym(h, "cuInit");
    if (!init || init(0))
        return fail("cuInit");
    if (!strcmp(how, "dlsym")) {
        if (round_trip((alloc_fn)dlsym(h, "cuMemAlloc_v2"), (htod_fn)dlsym(h, "cuMemcpyHtoD_v2"),
                       (dtoh_fn)dlsym(h, "cuMemcpyDtoH_v2"), (free_fn)dlsym(h, "cuMemFree_v2")))
            return 1;
        printf("dlsym ok\n");
        return 0;
    }
    if (strcmp(how, "proc"))
        return fail("usage: driver_direct dlsym|proc");
    proc1_fn p1 = (proc1_fn)dlsym(h, "cuGetProcAddress");
    proc2_fn p2 = NULL;
    if (!p1 || p1("cuGetProcAddress", (void **)&p2, 12000, 0) || !p2)
        return fail("cuGetProcAddress_v2 through cuGetProcAddress");
    void *a = NULL, *hd = NULL, *dh = NULL, *fr = NULL, *in = NULL, *old = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (p2("cuMemAlloc", &a, 13000, 0, &st) || st != CU_GET_PROC_ADDRESS_SUCCESS ||
        p2("cuMemcpyHtoD", &hd, 13000, pt, &st) || p2("cuMemcpyDtoH", &dh, 13000, 0, &st) ||
        p2("cuMemFree", &fr, 13000, 0, NULL) || p2("cuInit", &in, 13000, 0, NULL))
        return fail("a lookup failed");
    /* What is not traced comes back as the driver's own pointer. */
    if (in != (void *)init)
        return fail("cuInit came back changed");
    /* Asked for a version before the entry point's: the driver's answer, untouched. */
    CUresult r = p2("cuMemcpyHtoD", &old, 3000, 0, &st);
    if (r != CUDA_ERROR_NOT_FOUND || st != CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT || old)
        return fail("an old version was not the driver's answer");
    /* An unknown name likewise. */
    if (p2("cuNoSuchCall", &old, 13000, 0, &st) != CUDA_ERROR_NOT_FOUND ||
        st != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        return fail("an unknown name was not the driver's answer");
    if (round_trip((alloc_fn)a, (htod_fn)hd, (dtoh_fn)dh, (free_fn)fr))
        return 1;
    printf("proc ok\n");
    return 0;
}
