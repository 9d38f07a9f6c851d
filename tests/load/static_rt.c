/* A program built the way nvcc builds by default: the CUDA runtime linked in (here the static
 * runtime double, tests/doubles/static_cudart.c), so its calls reach only the driver.
 *   static_rt copies    copies of every kind, pinned memory, a captured copy launched twice
 *   static_rt overrun   a copy that reads past its allocation (the driver refuses it)
 *   static_rt lineage   bytes that reach the device from the host, move on the device, and come
 *                       back to the host as 700 bytes: not whole rows of 256 bf16 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)e_);         \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__attribute__((noinline)) static int copies(void)
{
    char *a, *b, *pinned, host[4096], back[4096];
    for (int i = 0; i < 4096; i++)
        host[i] = (char)(i * 7);
    CHECK_CUDA(cudaMalloc((void **)&a, 4096));
    CHECK_CUDA(cudaMalloc((void **)&b, 4096));
    CHECK_CUDA(cudaMemcpy(a, host, 4096, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(b, a, 4096, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy(back, b, 4096, cudaMemcpyDeviceToHost));
    if (memcmp(back, host, 4096))
        return fprintf(stderr, "H2D, D2D, D2H lost bytes\n"), 1;
    CHECK_CUDA(cudaMemcpy(back, a, 64, cudaMemcpyDefault));
    CHECK_CUDA(cudaMemcpy2D(back, 100, a, 64, 32, 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMallocHost((void **)&pinned, 4096));
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));
    CHECK_CUDA(cudaMemcpyAsync(pinned, a, 4096, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaMemcpyAsync(b, a, 1024, cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaFreeHost(pinned));
    CHECK_CUDA(cudaFree(b));
    CHECK_CUDA(cudaFree(a));
    printf("static ok\n");
    return 0;
}

/* Reads 4 KiB from 1 KiB into a 4 KiB allocation. */
__attribute__((noinline)) static int read_past_the_end(void)
{
    char *dev, host[8192];
    CHECK_CUDA(cudaMalloc((void **)&dev, 4096));
    CHECK_CUDA(cudaMemcpy(host, dev, 1024, cudaMemcpyDeviceToHost));
    cudaError_t e = cudaMemcpy(host, dev + 1024, 4096, cudaMemcpyDeviceToHost);
    printf("overrun %d\n", (int)e);
    return 0;
}

__attribute__((noinline)) static int receive(char *dev, const char *host)
{
    CHECK_CUDA(cudaMemcpy(dev, host, 4096, cudaMemcpyHostToDevice));
    return 0;
}

__attribute__((noinline)) static int part_of_a_row(void)
{
    char *a, *b, host[4096] = {0};
    CHECK_CUDA(cudaMalloc((void **)&a, 4096));
    CHECK_CUDA(cudaMalloc((void **)&b, 4096));
    if (receive(a, host))
        return 1;
    CHECK_CUDA(cudaMemcpy(b, a, 4096, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy(host, b, 700, cudaMemcpyDeviceToHost));
    printf("lineage ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "copies";
    if (!strcmp(what, "copies"))
        return copies();
    if (!strcmp(what, "overrun"))
        return read_past_the_end();
    if (!strcmp(what, "lineage"))
        return part_of_a_row();
    fprintf(stderr, "usage: static_rt copies|overrun|lineage\n");
    return 2;
}
