/* shapetrace tests: NCCL loaded with dlopen and looked up with dlsym(handle, name), the way
 * vLLM's pynccl does; plus the RTLD_NEXT probe. Usage: dlsym_handle LIBNCCL LIBNEXT_A */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>

typedef ncclResult_t (*uid_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*ar_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                              cudaStream_t);

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    uid_fn get_uid = (uid_fn)dlsym(h, "ncclGetUniqueId");
    init_fn init = (init_fn)dlsym(h, "ncclCommInitRank");
    ar_fn allreduce = (ar_fn)dlsym(h, "ncclAllReduce");
    ncclUniqueId id;
    ncclComm_t comm;
    static float buf[256];
    if (!get_uid || !init || !allreduce || get_uid(&id) || init(&comm, 1, id, 0))
        return 3;
    for (int i = 0; i < 3; i++)
        if (allreduce(buf, buf, 256, ncclFloat32, ncclSum, comm, 0) != ncclSuccess)
            return 4;
    /* The RTLD_NEXT probe. */
    void *a = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
    void *(*next_of_probe)(void) = a ? (void *(*)(void))dlsym(a, "next_of_probe") : NULL;
    int (*next)(void) = next_of_probe ? (int (*)(void))next_of_probe() : NULL;
    printf("rtld_next %d\n", next ? next() : -1);
    printf("dlsym_handle ok\n");
    return 0;
}
