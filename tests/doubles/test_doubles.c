/* Unit test of the libcudart and libnccl test doubles: where pointers live, checked copies,
 * capture and graphs, and every collective's data on a 4-rank ncclCommInitAll clique.
 * Prints one line per check and ends with "N passed, M failed". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nccl.h has C++-style empty parameter lists, which -Wstrict-prototypes rejects in C. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "tests/doubles/cudart_ptds.h"
#include "tests/doubles/shp_double.h"
#include "tests/unit/harness.h"

#define NRANKS 4
#define N 6 /* elements per rank's chunk */

static bool contains(const char *s, const char *part)
{
    return s && strstr(s, part);
}

/* ---- cudart ---------------------------------------------------------------------------------- */

static void test_pointers(void)
{
    struct cudaPointerAttributes a;
    void *d = NULL, *d3 = NULL, *h = NULL, *h2 = NULL, *z = (void *)1;
    char *plain = malloc(64);
    int count = 0, dev = -1;

    test_condf(cudaGetDeviceCount(&count) == cudaSuccess && count == 8, "8 devices by default");
    test_condf(cudaGetDevice(&dev) == cudaSuccess && dev == 0, "current device starts at 0");
    test_condf(cudaMalloc(&d, 1000) == cudaSuccess && d, "cudaMalloc succeeds");
    test_condf(shp_double_is_device(d), "cudaMalloc memory is in the device range");
    test_condf((uintptr_t)d % 256 == 0, "cudaMalloc memory is 256-byte aligned");
    test_condf(cudaPointerGetAttributes(&a, d) == cudaSuccess && a.type == cudaMemoryTypeDevice &&
                   a.device == 0 && a.devicePointer == d && !a.hostPointer,
               "device pointer: type device, device 0");
    test_condf(cudaPointerGetAttributes(&a, (char *)d + 999) == cudaSuccess &&
                   a.type == cudaMemoryTypeDevice,
               "pointer inside a device allocation is device memory");
    test_condf(cudaSetDevice(3) == cudaSuccess && cudaMalloc(&d3, 10) == cudaSuccess &&
                   cudaPointerGetAttributes(&a, d3) == cudaSuccess && a.device == 3,
               "allocation records the current device (3)");
    test_condf(cudaSetDevice(8) == cudaErrorInvalidDevice, "cudaSetDevice(8) is an invalid device");
    cudaSetDevice(0);
    test_condf(cudaMallocHost(&h, 100) == cudaSuccess && h && !shp_double_is_device(h),
               "pinned memory is outside the device range");
    test_condf(cudaPointerGetAttributes(&a, h) == cudaSuccess && a.type == cudaMemoryTypeHost &&
                   a.hostPointer == h && a.devicePointer == h,
               "pinned pointer: type host, mapped at the same address");
    test_condf(cudaHostAlloc(&h2, 64, cudaHostAllocMapped) == cudaSuccess &&
                   cudaPointerGetAttributes(&a, h2) == cudaSuccess && a.type == cudaMemoryTypeHost,
               "cudaHostAlloc gives pinned memory");
    test_condf(cudaHostAlloc(&z, 64, 0x100) == cudaErrorInvalidValue, "cudaHostAlloc bad flags");
    test_condf(!shp_double_is_device(plain) && cudaPointerGetAttributes(&a, plain) == cudaSuccess &&
                   a.type == cudaMemoryTypeUnregistered,
               "malloc pointer: unregistered");
    z = (void *)1;
    test_condf(cudaMalloc(&z, 0) == cudaSuccess && z == NULL, "cudaMalloc of 0 bytes gives NULL");
    test_condf(cudaFree(NULL) == cudaSuccess, "cudaFree(NULL) is fine");
    cudaGetLastError();
    test_condf(cudaFree(plain) == cudaErrorInvalidValue,
               "cudaFree of a host pointer: invalid value");
    test_condf(cudaPeekAtLastError() == cudaErrorInvalidValue &&
                   cudaPeekAtLastError() == cudaErrorInvalidValue,
               "cudaPeekAtLastError keeps the error");
    test_condf(cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess,
               "cudaGetLastError returns the error once");
    test_condf(cudaFreeHost(d) == cudaErrorInvalidValue, "cudaFreeHost of device memory fails");
    test_condf(cudaFree(h) == cudaErrorInvalidValue, "cudaFree of pinned memory fails");
    test_condf(cudaFree((char *)d + 256) == cudaErrorInvalidValue, "cudaFree inside a block fails");
    test_condf(cudaFree(d) == cudaSuccess && cudaFree(d) == cudaErrorInvalidValue,
               "double cudaFree fails");
    test_condf(cudaPointerGetAttributes(&a, d) == cudaErrorInvalidValue,
               "attributes of freed device memory: invalid value");
    test_condf(cudaFree(d3) == cudaSuccess && cudaFreeHost(h) == cudaSuccess &&
                   cudaFreeHost(h2) == cudaSuccess && cudaFreeHost(NULL) == cudaSuccess,
               "frees succeed");
    cudaGetLastError();
    free(plain);
}

static void test_allocator(void)
{
    void *a = NULL, *b = NULL, *c = NULL, *again = NULL, *big = NULL;

    cudaMalloc(&a, 300);
    cudaMalloc(&b, 300);
    cudaMalloc(&c, 300);
    test_condf((char *)b - (char *)a == 512 && (char *)c - (char *)b == 512,
               "blocks are packed at 256-byte granularity");
    cudaFree(b);
    test_condf(cudaMalloc(&again, 100) == cudaSuccess && again == b,
               "first fit reuses a freed hole");
    test_condf(cudaMalloc(&big, (size_t)1 << 30) == cudaSuccess && big,
               "1 GiB allocation (reserved, not touched)");
    test_condf(cudaMalloc(&b, (size_t)1 << 40) == cudaErrorMemoryAllocation,
               "1 TiB allocation: out of memory");
    cudaGetLastError();
    cudaFree(a);
    cudaFree(again);
    cudaFree(c);
    cudaFree(big);
}

static void test_copies(void)
{
    char host[1024], back[1024], *d = NULL, *d2 = NULL, *pinned = NULL;
    char *plain = malloc(1024);

    for (int i = 0; i < 1024; i++)
        host[i] = (char)(i * 7);
    cudaMalloc((void **)&d, 1000);
    cudaMalloc((void **)&d2, 1000);
    cudaMallocHost((void **)&pinned, 1000);

    test_condf(cudaMemcpy(d, host, 1000, cudaMemcpyHostToDevice) == cudaSuccess, "H2D succeeds");
    memset(back, 0, sizeof(back));
    test_condf(cudaMemcpy(back, d, 1000, cudaMemcpyDeviceToHost) == cudaSuccess &&
                   !memcmp(back, host, 1000),
               "D2H brings the bytes back");
    test_condf(cudaMemcpy(d2, d, 1000, cudaMemcpyDeviceToDevice) == cudaSuccess, "D2D succeeds");
    memset(back, 0, sizeof(back));
    cudaMemcpy(back, d2, 1000, cudaMemcpyDeviceToHost);
    test_condf(!memcmp(back, host, 1000), "D2D moved the bytes");
    test_condf(cudaMemcpy(plain, host, 1000, cudaMemcpyHostToHost) == cudaSuccess &&
                   !memcmp(plain, host, 1000),
               "H2H between plain host buffers");
    test_condf(cudaMemcpy(pinned, d, 1000, cudaMemcpyDeviceToHost) == cudaSuccess &&
                   !memcmp(pinned, host, 1000),
               "D2H into pinned memory");
    test_condf(cudaMemcpy(d2, pinned, 1000, cudaMemcpyHostToDevice) == cudaSuccess,
               "H2D from pinned memory");
    test_condf(cudaMemcpy(d2, host, 10, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(back, d2, 10, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(d, d2, 10, cudaMemcpyDefault) == cudaSuccess,
               "cudaMemcpyDefault infers every direction");

    test_condf(cudaMemcpy(plain, host, 10, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
               "H2D whose dst is host memory: invalid value");
    test_condf(cudaMemcpy(d2, d, 10, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
               "H2D whose src is device memory: invalid value");
    test_condf(cudaMemcpy(back, host, 10, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
               "D2H whose src is host memory: invalid value");
    test_condf(cudaMemcpy(d, back, 10, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
               "D2H whose dst is device memory: invalid value");
    test_condf(cudaMemcpy(d, host, 10, cudaMemcpyDeviceToDevice) == cudaErrorInvalidValue,
               "D2D from host memory: invalid value");
    test_condf(cudaMemcpy(back, d, 10, cudaMemcpyHostToHost) == cudaErrorInvalidValue,
               "H2H from device memory: invalid value");
    test_condf(cudaMemcpy(pinned, host, 10, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
               "H2D into pinned memory: invalid value");
    test_condf(cudaMemcpy(d, host, 10, (enum cudaMemcpyKind)9) == cudaErrorInvalidMemcpyDirection,
               "unknown kind: invalid direction");
    test_condf(cudaMemcpy(NULL, host, 10, cudaMemcpyHostToHost) == cudaErrorInvalidValue,
               "NULL dst: invalid value");
    test_condf(cudaMemcpy(NULL, NULL, 0, cudaMemcpyHostToDevice) == cudaSuccess,
               "zero-byte copy succeeds");

    test_condf(cudaMemcpy(d, host, 1001, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
               "H2D one byte past a 1000-byte allocation: invalid value");
    test_condf(cudaMemcpy(d + 500, host, 500, cudaMemcpyHostToDevice) == cudaSuccess &&
                   cudaMemcpy(d + 500, host, 501, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
               "copy at an offset is checked against the allocation's end");
    test_condf(cudaMemcpy(back, d + 1, 1000, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
               "D2H reading past the end: invalid value");
    test_condf(cudaMemcpy(pinned, host, 1001, cudaMemcpyHostToHost) == cudaErrorInvalidValue,
               "copy past the end of pinned memory: invalid value");
    cudaFree(d2);
    test_condf(cudaMemcpy(d2, host, 10, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
               "copy into freed device memory: invalid value");
    cudaGetLastError();
    cudaFree(d);
    cudaFreeHost(pinned);
    free(plain);
}

static void test_copies_2d(void)
{
    char src[4][10], dev_image[64], out[4][12], *d = NULL;
    bool rows_ok = true, pad_ok = true, out_ok = true;

    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 10; c++)
            src[r][c] = (char)(r * 16 + c + 1);
    cudaMalloc((void **)&d, 64);
    cudaMemset(d, 0xEE, 64);
    test_condf(cudaMemcpy2D(d, 16, src, 10, 10, 4, cudaMemcpyHostToDevice) == cudaSuccess,
               "2-D H2D, 4 rows of 10 into pitch 16");
    cudaMemcpy(dev_image, d, 64, cudaMemcpyDeviceToHost);
    for (int r = 0; r < 4; r++) {
        rows_ok &= !memcmp(dev_image + r * 16, src[r], 10);
        for (int c = 10; c < 16; c++)
            pad_ok &= dev_image[r * 16 + c] == (char)0xEE;
    }
    test_condf(rows_ok, "2-D copy put each row at its pitch");
    test_condf(pad_ok, "2-D copy left the padding alone");
    memset(out, 0, sizeof(out));
    test_condf(cudaMemcpy2D(out, 12, d, 16, 10, 4, cudaMemcpyDeviceToHost) == cudaSuccess,
               "2-D D2H, pitch 16 into pitch 12");
    for (int r = 0; r < 4; r++)
        out_ok &= !memcmp(out[r], src[r], 10) && out[r][10] == 0 && out[r][11] == 0;
    test_condf(out_ok, "2-D D2H rows are right");
    test_condf(cudaMemcpy2D(d, 8, src, 10, 10, 4, cudaMemcpyHostToDevice) ==
                   cudaErrorInvalidPitchValue,
               "dpitch < width: invalid pitch");
    test_condf(cudaMemcpy2D(d, 16, src, 9, 10, 4, cudaMemcpyHostToDevice) ==
                   cudaErrorInvalidPitchValue,
               "spitch < width: invalid pitch");
    test_condf(cudaMemcpy2D(d, 16, src, 10, 10, 5, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
               "2-D copy whose last row runs past the allocation: invalid value");
    test_condf(cudaMemcpy2D(d, 16, dev_image, 16, 16, 4, cudaMemcpyHostToDevice) == cudaSuccess,
               "2-D copy ending exactly at the allocation's end succeeds");
    test_condf(cudaMemcpy2D(d, 16, src, 10, 10, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
               "2-D D2H whose dst is device memory: invalid value");
    test_condf(cudaMemcpy2D_ptds(out, 12, d, 16, 10, 2, cudaMemcpyDeviceToHost) == cudaSuccess &&
                   cudaMemcpy2DAsync_ptsz(out, 12, d, 16, 10, 2, cudaMemcpyDeviceToHost, 0) ==
                       cudaSuccess &&
                   cudaMemcpy2DAsync(out, 12, d, 16, 10, 2, cudaMemcpyDeviceToHost, 0) ==
                       cudaSuccess,
               "2-D per-thread and async forms");
    cudaGetLastError();
    cudaFree(d);
}

static void test_memset_peer_ptds(void)
{
    unsigned char back[64], *d = NULL, *d2 = NULL;
    char host[64] = "per-thread default stream";
    bool all = true;

    cudaSetDevice(1);
    cudaMalloc((void **)&d, 64);
    cudaSetDevice(2);
    cudaMalloc((void **)&d2, 64);
    cudaSetDevice(0);
    test_condf(cudaMemset(d, 0xAB, 64) == cudaSuccess, "cudaMemset");
    cudaMemcpy(back, d, 64, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 64; i++)
        all &= back[i] == 0xAB;
    test_condf(all, "cudaMemset wrote every byte");
    test_condf(cudaMemsetAsync(d, 1, 65, 0) == cudaErrorInvalidValue,
               "cudaMemsetAsync past the end");
    test_condf(cudaMemset(host, 0, 8) == cudaErrorInvalidValue, "cudaMemset of host memory");
    test_condf(cudaMemset_ptds(d, 2, 8) == cudaSuccess && cudaMemsetAsync_ptsz(d, 3, 8, 0) == 0,
               "cudaMemset per-thread forms");
    test_condf(cudaMemcpyPeer(d2, 2, d, 1, 64) == cudaSuccess, "cudaMemcpyPeer 1 -> 2");
    cudaMemcpy(back, d2, 8, cudaMemcpyDeviceToHost);
    test_condf(back[0] == 3, "peer copy moved the bytes");
    test_condf(cudaMemcpyPeerAsync(d2, 2, d, 9, 64, 0) == cudaErrorInvalidDevice,
               "peer copy from device 9: invalid device");
    test_condf(cudaMemcpyPeer(d2, 2, host, 1, 8) == cudaErrorInvalidValue,
               "peer copy from host memory: invalid value");
    test_condf(cudaMemcpy_ptds(d, host, 26, cudaMemcpyHostToDevice) == cudaSuccess &&
                   cudaMemcpyAsync_ptsz(back, d, 26, cudaMemcpyDeviceToHost, 0) == cudaSuccess &&
                   !memcmp(back, host, 26),
               "cudaMemcpy_ptds and cudaMemcpyAsync_ptsz move bytes");
    test_condf(cudaMemcpyAsync_ptsz(host, d, 26, cudaMemcpyHostToDevice, 0) ==
                   cudaErrorInvalidValue,
               "cudaMemcpyAsync_ptsz checks kinds");
    cudaGetLastError();
    cudaFree(d);
    cudaFree(d2);
}

static void count_call(void *arg)
{
    (*(int *)arg)++;
}

static void test_streams_graphs(void)
{
    int host_calls = 0;
    cudaStream_t s = NULL, s2 = NULL;
    cudaEvent_t ev = NULL;
    cudaGraph_t g = NULL, g2 = (cudaGraph_t)1;
    cudaGraphExec_t x = NULL;
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    void *d = NULL;
    char host[16] = "captured";

    test_condf(cudaStreamCreate(&s) == cudaSuccess && s, "cudaStreamCreate");
    test_condf(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess,
               "cudaStreamCreateWithFlags");
    test_condf(cudaStreamCreateWithFlags(&s2, 0x80) == cudaErrorInvalidValue, "bad stream flags");
    test_condf(cudaMallocAsync(&d, 16, s) == cudaSuccess && shp_double_is_device(d),
               "cudaMallocAsync");
    test_condf(cudaMemcpyAsync(d, host, 16, cudaMemcpyHostToDevice, s) == cudaSuccess,
               "cudaMemcpyAsync on a stream");
    test_condf(cudaStreamSynchronize(s) == cudaSuccess && cudaStreamQuery(s) == cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess,
               "synchronize and query");
    test_condf(cudaEventCreate(&ev) == cudaSuccess && cudaEventRecord(ev, s) == cudaSuccess &&
                   cudaEventSynchronize(ev) == cudaSuccess && cudaEventDestroy(ev) == cudaSuccess,
               "event create, record, synchronize, destroy");
    test_condf(cudaEventDestroy(ev) == cudaErrorInvalidResourceHandle, "event destroyed twice");

    test_condf(cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone,
               "stream not capturing");
    test_condf(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess,
               "begin capture");
    test_condf(cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive,
               "stream capturing");
    test_condf(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState,
               "begin capture twice: illegal state");
    test_condf(cudaMemcpyAsync(host, d, 16, cudaMemcpyDeviceToHost, s) == cudaSuccess,
               "copy during capture");
    test_condf(cudaLaunchHostFunc(s, count_call, &host_calls) == cudaSuccess && host_calls == 0,
               "a host function during capture runs nothing");
    memset(host, 0, sizeof(host));
    test_condf(cudaStreamEndCapture(s, &g) == cudaSuccess && g, "end capture gives a graph");
    test_condf(host[0] == 0, "a captured copy moves nothing at capture");
    test_condf(cudaStreamEndCapture(s, &g2) == cudaErrorIllegalState && !g2,
               "end capture when not capturing: illegal state");
    test_condf(cudaGraphInstantiate(&x, g, 0) == cudaSuccess && x, "instantiate");
    test_condf(cudaGraphLaunch(x, s) == cudaSuccess && !strcmp(host, "captured") && host_calls == 1,
               "a launch runs the captured copy and host function");
    memset(host, 0, sizeof(host));
    test_condf(cudaGraphLaunch(x, s) == cudaSuccess && cudaGraphLaunch_ptsz(x, 0) == cudaSuccess &&
                   !strcmp(host, "captured") && host_calls == 3,
               "launch three times: each one replays them");
    test_condf(cudaLaunchHostFunc(s, count_call, &host_calls) == cudaSuccess && host_calls == 4,
               "a host function outside a capture runs at once");
    test_condf(cudaLaunchHostFunc(s, NULL, NULL) == cudaErrorInvalidValue, "a NULL host function");
    test_condf(cudaGraphLaunch(NULL, s) == cudaErrorInvalidValue, "launch of NULL: invalid value");
    test_condf(cudaGraphExecDestroy(x) == cudaSuccess &&
                   cudaGraphLaunch(x, s) == cudaErrorInvalidValue,
               "launch of a destroyed exec: invalid value");
    test_condf(cudaGraphInstantiateWithFlags(&x, g, 0) == cudaSuccess &&
                   cudaGraphExecDestroy(x) == cudaSuccess && cudaGraphDestroy(g) == cudaSuccess,
               "instantiate with flags, destroy");
    test_condf(cudaGraphInstantiate(&x, g, 0) == cudaErrorInvalidValue,
               "instantiate a destroyed graph: invalid value");

    test_condf(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal) ==
                   cudaErrorStreamCaptureUnsupported,
               "capture of the legacy stream: unsupported");
    test_condf(cudaStreamBeginCapture_ptsz(NULL, cudaStreamCaptureModeThreadLocal) == cudaSuccess &&
                   cudaStreamIsCapturing_ptsz(NULL, &st) == cudaSuccess &&
                   st == cudaStreamCaptureStatusActive && cudaStreamIsCapturing(NULL, &st) == 0 &&
                   st == cudaStreamCaptureStatusNone,
               "_ptsz: stream 0 is the per-thread stream, which can capture");
    test_condf(cudaStreamEndCapture_ptsz(NULL, &g) == cudaSuccess && g && cudaGraphDestroy(g) == 0,
               "_ptsz end capture");
    test_condf(cudaStreamBeginCapture(s2, cudaStreamCaptureModeRelaxed) == cudaSuccess &&
                   cudaStreamSynchronize(s2) == cudaErrorStreamCaptureUnsupported &&
                   cudaStreamIsCapturing(s2, &st) == cudaSuccess &&
                   st == cudaStreamCaptureStatusInvalidated,
               "synchronizing a capturing stream invalidates the capture");
    test_condf(cudaStreamEndCapture(s2, &g) == cudaErrorStreamCaptureInvalidated && !g,
               "end of an invalidated capture gives no graph");
    test_condf(cudaFreeAsync(d, s) == cudaSuccess, "cudaFreeAsync");
    test_condf(cudaMallocAsync_ptsz(&d, 8, 0) == cudaSuccess && cudaFreeAsync_ptsz(d, 0) == 0,
               "cudaMallocAsync_ptsz and cudaFreeAsync_ptsz");
    test_condf(cudaStreamDestroy(s) == cudaSuccess && cudaStreamDestroy(s2) == cudaSuccess,
               "cudaStreamDestroy");
    test_condf(cudaMemcpyAsync(host, host, 1, cudaMemcpyHostToHost, s) ==
                   cudaErrorInvalidResourceHandle,
               "copy on a destroyed stream: invalid resource handle");
    test_condf(cudaStreamDestroy(NULL) == cudaErrorInvalidResourceHandle,
               "destroying the legacy stream fails");
    cudaGetLastError();
}

/* Fork and join, as CUDA does them: a stream waiting on an event recorded on a capturing stream
 * joins that capture; the capture ends only once the fork is joined back. */
static void test_capture_fork_join(void)
{
    cudaStream_t s = NULL, side = NULL, other = NULL;
    cudaEvent_t fork = NULL, join = NULL, stranger = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    unsigned long long id = 0, side_id = 0;
    char host[8] = "forked", *d = NULL;

    test_condf(cudaStreamCreate(&s) == 0 && cudaStreamCreate(&side) == 0 &&
                   cudaStreamCreate(&other) == 0 && cudaEventCreate(&fork) == 0 &&
                   cudaEventCreate(&join) == 0 && cudaEventCreate(&stranger) == 0 &&
                   cudaMalloc((void **)&d, 8) == 0,
               "streams and events");
    test_condf(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess &&
                   cudaEventRecord(fork, s) == cudaSuccess &&
                   cudaStreamWaitEvent(side, fork, 0) == cudaSuccess,
               "a fork: the side stream waits on an event recorded on the capturing stream");
    test_condf(cudaStreamIsCapturing(side, &st) == cudaSuccess &&
                   st == cudaStreamCaptureStatusActive,
               "the side stream is capturing now");
    bool info = cudaStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL) == cudaSuccess &&
                cudaStreamGetCaptureInfo(side, &st, &side_id, NULL, NULL, NULL, NULL) == 0;
    test_condf(info && st == cudaStreamCaptureStatusActive && id && id == side_id,
               "cudaStreamGetCaptureInfo gives both streams the capture's id (%llu, %llu)", id,
               side_id);
    test_condf(cudaMemcpyAsync(d, host, 8, cudaMemcpyHostToDevice, side) == cudaSuccess &&
                   cudaEventRecord(join, side) == cudaSuccess,
               "work on the side stream goes into the capture");
    test_condf(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureUnjoined && !g,
               "ending it before the join: cudaErrorStreamCaptureUnjoined");
    test_condf(
        cudaStreamIsCapturing(side, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone &&
            cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone,
        "and neither stream captures any more");

    test_condf(cudaMemcpy(d, host, 8, cudaMemcpyHostToDevice) == cudaSuccess, "an eager copy");
    memset(host, 0, sizeof(host));
    test_condf(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess &&
                   cudaEventRecord(fork, s) == cudaSuccess &&
                   cudaStreamWaitEvent(side, fork, 0) == cudaSuccess &&
                   cudaMemcpyAsync(host, d, 8, cudaMemcpyDeviceToHost, side) == cudaSuccess &&
                   cudaEventRecord(join, side) == cudaSuccess &&
                   cudaStreamWaitEvent(s, join, 0) == cudaSuccess,
               "fork, work on the side stream, join back");
    test_condf(cudaStreamGetCaptureInfo(side, &st, &side_id, NULL, NULL, NULL, NULL) == 0 &&
                   side_id != id,
               "a new capture, a new id");
    test_condf(cudaStreamEndCapture(s, &g) == cudaSuccess && g && host[0] == 0,
               "then the capture ends, and the side stream's copy moved nothing");
    test_condf(cudaGraphInstantiate(&x, g, 0) == cudaSuccess &&
                   cudaGraphLaunch(x, s) == cudaSuccess && !strcmp(host, "forked"),
               "a launch runs the side stream's copy");
    test_condf(cudaStreamIsCapturing(side, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone,
               "the side stream left the capture with it");

    test_condf(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess &&
                   cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal) == cudaSuccess &&
                   cudaEventRecord(stranger, other) == cudaSuccess &&
                   cudaStreamWaitEvent(s, stranger, 0) == cudaErrorStreamCaptureIsolation,
               "waiting on another capture's event: cudaErrorStreamCaptureIsolation");
    test_condf(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated &&
                   cudaStreamEndCapture(other, &g) == cudaErrorStreamCaptureInvalidated,
               "and both captures are invalidated");
    test_condf(cudaGraphExecDestroy(x) == 0 && cudaStreamDestroy(s) == 0 &&
                   cudaStreamDestroy(side) == 0 && cudaStreamDestroy(other) == 0 &&
                   cudaFree(d) == 0,
               "clean up");
    cudaGetLastError();
}

static void test_misc_cudart(const char *self)
{
    int v = 0;
    char line[128] = "";
    FILE *child;
    char cmd[4200];

    test_condf(cudaRuntimeGetVersion(&v) == cudaSuccess && v == 13000, "runtime version 13000");
    test_condf(cudaDriverGetVersion(&v) == cudaSuccess && v >= 13000, "driver version");
    test_condf(!strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") &&
                   !strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") &&
                   !strcmp(cudaGetErrorString(cudaSuccess), "no error"),
               "error names and strings");
    snprintf(cmd, sizeof(cmd), "LOCAL_RANK=3 SHAPETRACE_DOUBLE_DEVICES=4 '%s' --child", self);
    child = popen(cmd, "r");
    if (child) {
        if (!fgets(line, sizeof(line), child))
            line[0] = 0;
        pclose(child);
    }
    line[strcspn(line, "\n")] = 0;
    test_condf(!strcmp(line, "device 3 of 4, comm device 3"),
               "LOCAL_RANK and SHAPETRACE_DOUBLE_DEVICES (child said: %.40s)", line);
}

/* What the --child run prints: read by test_misc_cudart in the parent. */
static int child_main(void)
{
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    int dev = -1, count = -1, cdev = -1;

    cudaGetDevice(&dev);
    cudaGetDeviceCount(&count);
    ncclGetUniqueId(&id);
    ncclCommInitRank(&comm, 1, id, 0);
    ncclCommCuDevice(comm, &cdev);
    printf("device %d of %d, comm device %d\n", dev, count, cdev);
    ncclCommDestroy(comm);
    return 0;
}

/* ---- nccl: one rank ---------------------------------------------------------------------------
 */

static void test_nccl_single(void)
{
    ncclUniqueId id, id2, zero;
    ncclComm_t comm = NULL, bad = (ncclComm_t)1, sub = (ncclComm_t)1;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    float in[4] = {1, 2, 3, 4}, out[4] = {0};
    float *d = NULL;
    int v = 0, n = 0;

    test_condf(ncclGetVersion(&v) == ncclSuccess && v == 22809, "ncclGetVersion 22809");
    memset(&zero, 0, sizeof(zero));
    test_condf(ncclGetUniqueId(&id) == ncclSuccess && ncclGetUniqueId(&id2) == ncclSuccess &&
                   memcmp(&id, &id2, sizeof(id)) && memcmp(&id, &zero, sizeof(id)),
               "unique ids are random");
    /* Rank 1 would be another process (see test_multirank): alone, rank 0 waits for it until
     * SHAPETRACE_DOUBLE_TIMEOUT, then fails as NCCL's watchdog would. */
    setenv("SHAPETRACE_DOUBLE_TIMEOUT", "0.2", 1);
    test_condf(ncclCommInitRank(&bad, 2, id, 0) == ncclSystemError && bad == NULL,
               "nranks 2 with no other process: system error after the timeout, no hang");
    unsetenv("SHAPETRACE_DOUBLE_TIMEOUT");
    test_condf(contains(ncclGetLastError(NULL), "rank 1 (1 of 2)") &&
                   contains(ncclGetLastError(NULL), "to join"),
               "message says whom it waited for: %s", ncclGetLastError(NULL));
    test_condf(ncclCommInitRank(&bad, 2, id, 2) == ncclInvalidArgument, "rank 2 of 2: invalid");
    test_condf(ncclCommInitRank(&bad, 1, zero, 0) == ncclInvalidArgument, "all-zero unique id");
    config.magic = 0;
    test_condf(ncclCommInitRankConfig(&bad, 1, id, 0, &config) == ncclInvalidArgument,
               "uninitialized config: invalid argument");
    cudaSetDevice(5);
    test_condf(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess && comm, "ncclCommInitRank 1 rank");
    cudaSetDevice(0);
    test_condf(ncclCommCount(comm, &n) == ncclSuccess && n == 1 &&
                   ncclCommUserRank(comm, &n) == ncclSuccess && n == 0 &&
                   ncclCommCuDevice(comm, &n) == ncclSuccess && n == 5,
               "count 1, rank 0, device 5 (current at init)");

    cudaMalloc((void **)&d, sizeof(in) * 4);
    cudaMemcpy(d, in, sizeof(in), cudaMemcpyHostToDevice);
    test_condf(ncclAllReduce(d, d + 4, 4, ncclFloat32, ncclSum, comm, 0) == ncclSuccess,
               "1-rank all-reduce outside a group");
    cudaMemcpy(out, d + 4, sizeof(out), cudaMemcpyDeviceToHost);
    test_condf(!memcmp(in, out, sizeof(in)), "1-rank all-reduce copies");
    test_condf(ncclAllGather(d, d + 8, 4, ncclFloat32, comm, 0) == ncclSuccess,
               "1-rank all-gather");
    cudaMemcpy(out, d + 8, sizeof(out), cudaMemcpyDeviceToHost);
    test_condf(!memcmp(in, out, sizeof(in)), "1-rank all-gather copies sendcount");
    cudaMemset(d + 4, 0, sizeof(in));
    ncclGroupStart();
    test_condf(ncclSend(d, 4, ncclFloat32, 0, comm, 0) == ncclSuccess &&
                   ncclRecv(d + 4, 4, ncclFloat32, 0, comm, 0) == ncclSuccess,
               "send and recv to self queue in a group");
    test_condf(ncclGroupEnd() == ncclSuccess, "group with send/recv to self ends");
    cudaMemcpy(out, d + 4, sizeof(out), cudaMemcpyDeviceToHost);
    test_condf(!memcmp(in, out, sizeof(in)), "send to self moved the data");
    test_condf(ncclSend(d, 4, ncclFloat32, 0, comm, 0) == ncclInvalidUsage,
               "send to self outside a group has no recv: invalid usage, no hang");
    test_condf(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &sub, NULL) == ncclSuccess && sub == NULL,
               "1-rank split with NCCL_SPLIT_NOCOLOR gives NULL");
    test_condf(ncclCommSplit(comm, 7, 0, &sub, NULL) == ncclSuccess && sub &&
                   ncclCommCount(sub, &n) == ncclSuccess && n == 1 && ncclCommDestroy(sub) == 0,
               "1-rank split with a color gives a 1-rank comm");
    test_condf(ncclCommFinalize(comm) == ncclSuccess &&
                   ncclAllReduce(d, d + 4, 4, ncclFloat32, ncclSum, comm, 0) == ncclInvalidUsage,
               "collective after finalize: invalid usage");
    test_condf(ncclCommDestroy(comm) == ncclSuccess && ncclCommDestroy(NULL) == ncclSuccess,
               "destroy");
    cudaFree(d);
    test_condf(ncclMemAlloc((void **)&d, 64) == ncclSuccess && d && ncclMemFree(d) == ncclSuccess,
               "ncclMemAlloc and ncclMemFree");
    test_condf(contains(ncclGetErrorString(ncclInvalidUsage), "invalid usage"), "error strings");
}

/* ---- nccl: four ranks in one process -----------------------------------------------------------
 */

static ncclComm_t comms[NRANKS];
static void *dsend[NRANKS], *drecv[NRANKS];
static cudaStream_t streams[NRANKS];

#define BUF_BYTES (NRANKS * N * 8)

static size_t esize(ncclDataType_t t)
{
    return t == ncclInt32 || t == ncclFloat32 ? 4 : 2;
}

/* The test's own conversions: every value used is a small integer, exact in each type. */
static void put(ncclDataType_t t, void *buf, size_t i, double v)
{
    float f = (float)v;
    int32_t x = (int32_t)v;
    uint32_t u;
    uint16_t h;

    if (t == ncclFloat32) {
        memcpy((char *)buf + 4 * i, &f, 4);
    } else if (t == ncclInt32) {
        memcpy((char *)buf + 4 * i, &x, 4);
    } else {
        memcpy(&u, &f, 4);
        h = (uint16_t)(u >> 16);
        memcpy((char *)buf + 2 * i, &h, 2);
    }
}

static double get(ncclDataType_t t, const void *buf, size_t i)
{
    float f;
    int32_t x;
    uint32_t u;
    uint16_t h;

    if (t == ncclFloat32) {
        memcpy(&f, (const char *)buf + 4 * i, 4);
        return f;
    }
    if (t == ncclInt32) {
        memcpy(&x, (const char *)buf + 4 * i, 4);
        return x;
    }
    memcpy(&h, (const char *)buf + 2 * i, 2);
    u = (uint32_t)h << 16;
    memcpy(&f, &u, 4);
    return f;
}

static const char *tname(ncclDataType_t t)
{
    return t == ncclFloat32 ? "fp32" : t == ncclInt32 ? "int32" : "bf16";
}

/* Rank r's element i. */
static double val(int r, size_t i)
{
    return (r + 1) * (double)(i % 7 + 1) - 3;
}

static void upload(ncclDataType_t t)
{
    unsigned char host[BUF_BYTES];

    for (int r = 0; r < NRANKS; r++) {
        for (size_t i = 0; i < NRANKS * N; i++)
            put(t, host, i, val(r, i));
        cudaMemcpy(dsend[r], host, NRANKS * N * esize(t), cudaMemcpyHostToDevice);
        cudaMemset(drecv[r], 0x5A, BUF_BYTES);
    }
}

enum coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, ALLTOALL, REDUCE, GATHER, SCATTER };

static const char *const coll_names[] = {"all-reduce", "all-gather", "reduce-scatter", "broadcast",
                                         "alltoall",   "reduce",     "gather",         "scatter"};

static ncclResult_t run(enum coll c, ncclDataType_t t, int root)
{
    ncclResult_t r = ncclSuccess;

    ncclGroupStart();
    for (int k = 0; k < NRANKS; k++) {
        ncclResult_t rr = ncclSuccess;

        switch (c) {
        case ALL_REDUCE:
            rr = ncclAllReduce(dsend[k], drecv[k], N, t, ncclSum, comms[k], streams[k]);
            break;
        case ALL_GATHER:
            rr = ncclAllGather(dsend[k], drecv[k], N, t, comms[k], streams[k]);
            break;
        case REDUCE_SCATTER:
            rr = ncclReduceScatter(dsend[k], drecv[k], N, t, ncclSum, comms[k], streams[k]);
            break;
        case BROADCAST:
            rr = ncclBroadcast(dsend[k], drecv[k], N, t, root, comms[k], streams[k]);
            break;
        case ALLTOALL:
            rr = ncclAlltoAll(dsend[k], drecv[k], N, t, comms[k], streams[k]);
            break;
        case REDUCE:
            rr = ncclReduce(dsend[k], drecv[k], N, t, ncclSum, root, comms[k], streams[k]);
            break;
        case GATHER:
            rr = ncclGather(dsend[k], drecv[k], N, t, root, comms[k], streams[k]);
            break;
        case SCATTER:
            rr = ncclScatter(dsend[k], drecv[k], N, t, root, comms[k], streams[k]);
            break;
        }
        if (rr != ncclSuccess)
            r = rr;
    }
    if (ncclGroupEnd() != ncclSuccess)
        r = ncclInternalError;
    return r;
}

/* What rank r's recvbuff must hold at element i, from the definitions in nccl.h; NAN where the
 * collective must not write (a non-root's recvbuff). Returns the number of elements to check. */
static size_t expect(enum coll c, int root, int r, size_t i, double *v)
{
    double sum = 0;

    switch (c) {
    case ALL_REDUCE:
    case REDUCE:
        for (int s = 0; s < NRANKS; s++)
            sum += val(s, i);
        *v = c == REDUCE && r != root ? -1e300 : sum;
        return N;
    case ALL_GATHER:
        *v = val((int)(i / N), i % N);
        return NRANKS * N;
    case REDUCE_SCATTER:
        for (int s = 0; s < NRANKS; s++)
            sum += val(s, (size_t)r * N + i);
        *v = sum;
        return N;
    case BROADCAST:
        *v = val(root, i);
        return N;
    case ALLTOALL:
        *v = val((int)(i / N), (size_t)r * N + i % N);
        return NRANKS * N;
    case GATHER:
        *v = r == root ? val((int)(i / N), i % N) : -1e300;
        return NRANKS * N;
    case SCATTER:
        *v = val(root, (size_t)r * N + i);
        return N;
    }
    return 0;
}

static void check_coll(enum coll c, ncclDataType_t t, int root)
{
    unsigned char host[BUF_BYTES], sentinel[BUF_BYTES];
    bool ok = true;
    ncclResult_t res;

    memset(sentinel, 0x5A, sizeof(sentinel));
    upload(t);
    res = run(c, t, root);
    for (int r = 0; r < NRANKS; r++) {
        double want;
        size_t n = expect(c, root, r, 0, &want);

        cudaMemcpy(host, drecv[r], BUF_BYTES, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n; i++) {
            expect(c, root, r, i, &want);
            if (want == -1e300)
                ok &= !memcmp(host + i * esize(t), sentinel, esize(t));
            else
                ok &= get(t, host, i) == want;
        }
        /* Nothing past the result is touched. */
        ok &= !memcmp(host + n * esize(t), sentinel, BUF_BYTES - n * esize(t));
    }
    test_condf(res == ncclSuccess && ok, "4 ranks: %s %s (root %d)", coll_names[c], tname(t), root);
}

static void test_nccl_clique_setup(void)
{
    int devs[2] = {0, 0}, n = -1, dev = -1;
    ncclComm_t two[2];

    test_condf(ncclCommInitAll(comms, NRANKS, NULL) == ncclSuccess, "ncclCommInitAll 4 ranks");
    for (int r = 0; r < NRANKS; r++) {
        test_condf(ncclCommCount(comms[r], &n) == ncclSuccess && n == NRANKS &&
                       ncclCommUserRank(comms[r], &n) == ncclSuccess && n == r &&
                       ncclCommCuDevice(comms[r], &dev) == ncclSuccess && dev == r,
                   "comm %d: 4 ranks, rank %d, device %d", r, r, r);
        cudaSetDevice(r);
        cudaMalloc(&dsend[r], BUF_BYTES);
        cudaMalloc(&drecv[r], BUF_BYTES);
        cudaStreamCreate(&streams[r]);
    }
    cudaSetDevice(0);
    test_condf(ncclCommInitAll(two, 2, devs) == ncclInvalidUsage,
               "duplicate device: invalid usage");
    devs[1] = 9;
    test_condf(ncclCommInitAll(two, 2, devs) == ncclInvalidArgument, "device 9 of 8: invalid");
}

static void test_nccl_collectives(void)
{
    ncclDataType_t types[] = {ncclFloat32, ncclBfloat16, ncclInt32};

    for (size_t k = 0; k < 3; k++) {
        check_coll(ALL_REDUCE, types[k], 0);
        check_coll(ALL_GATHER, types[k], 0);
        check_coll(REDUCE_SCATTER, types[k], 0);
        check_coll(BROADCAST, types[k], 2);
        check_coll(ALLTOALL, types[k], 0);
        check_coll(REDUCE, types[k], 1);
        check_coll(GATHER, types[k], 3);
        check_coll(SCATTER, types[k], 0);
    }
}

static void test_nccl_redops(void)
{
    int32_t in[NRANKS][3] = {{-2, 5, 7}, {-1, 6, 7}, {0, -7, 7}, {1, 8, 7}};
    int32_t out[3];
    const struct {
        ncclRedOp_t op;
        const char *name;
        int32_t want[3];
    } cases[] = {
        {ncclSum, "sum", {-2, 12, 28}},
        {ncclProd, "prod", {0, -1680, 2401}},
        {ncclMax, "max", {1, 8, 7}},
        {ncclMin, "min", {-2, -7, 7}},
        {ncclAvg, "avg (truncates)", {0, 3, 7}},
    };

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ncclResult_t res;
        bool ok = true;

        for (int r = 0; r < NRANKS; r++)
            cudaMemcpy(dsend[r], in[r], sizeof(in[r]), cudaMemcpyHostToDevice);
        ncclGroupStart();
        for (int r = 0; r < NRANKS; r++)
            ncclAllReduce(dsend[r], drecv[r], 3, ncclInt32, cases[c].op, comms[r], 0);
        res = ncclGroupEnd();
        for (int r = 0; r < NRANKS; r++) {
            cudaMemcpy(out, drecv[r], sizeof(out), cudaMemcpyDeviceToHost);
            ok &= !memcmp(out, cases[c].want, sizeof(out));
        }
        test_condf(res == ncclSuccess && ok, "4 ranks: int32 all-reduce %s", cases[c].name);
    }
}

static void test_nccl_inplace_nested(void)
{
    float v[NRANKS][N], out[N];
    bool ok = true, untouched = true;

    for (int r = 0; r < NRANKS; r++) {
        for (int i = 0; i < N; i++)
            v[r][i] = (float)(r * 10 + i);
        cudaMemcpy(drecv[r], v[r], sizeof(v[r]), cudaMemcpyHostToDevice);
    }
    ncclGroupStart();
    ncclGroupStart();
    for (int r = 0; r < NRANKS; r++)
        ncclAllReduce(drecv[r], drecv[r], N, ncclFloat32, ncclSum, comms[r], 0);
    test_condf(ncclGroupEnd() == ncclSuccess, "inner ncclGroupEnd of a nested group");
    for (int r = 0; r < NRANKS; r++) {
        cudaMemcpy(out, drecv[r], sizeof(out), cudaMemcpyDeviceToHost);
        untouched &= !memcmp(out, v[r], sizeof(out));
    }
    test_condf(untouched, "nothing moves before the outermost ncclGroupEnd");
    test_condf(ncclGroupEnd() == ncclSuccess, "outer ncclGroupEnd");
    for (int r = 0; r < NRANKS; r++) {
        cudaMemcpy(out, drecv[r], sizeof(out), cudaMemcpyDeviceToHost);
        for (int i = 0; i < N; i++)
            ok &= out[i] == (float)(60 + 4 * i);
    }
    test_condf(ok, "in-place all-reduce (sendbuff == recvbuff) sums across ranks");
    test_condf(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd outside a group: invalid usage");
}

static void test_nccl_p2p(void)
{
    int32_t mine[N], out[N];
    bool ok = true;
    ncclResult_t res;

    for (int r = 0; r < NRANKS; r++) {
        for (int i = 0; i < N; i++)
            mine[i] = 100 * r + i;
        cudaMemcpy(dsend[r], mine, sizeof(mine), cudaMemcpyHostToDevice);
        cudaMemset(drecv[r], 0, BUF_BYTES);
    }
    /* A ring, posted recv first on odd ranks to show order inside a group does not matter. */
    ncclGroupStart();
    for (int r = 0; r < NRANKS; r++) {
        int next = (r + 1) % NRANKS, prev = (r + NRANKS - 1) % NRANKS;

        if (r % 2) {
            ncclRecv(drecv[r], N, ncclInt32, prev, comms[r], 0);
            ncclSend(dsend[r], N, ncclInt32, next, comms[r], 0);
        } else {
            ncclSend(dsend[r], N, ncclInt32, next, comms[r], 0);
            ncclRecv(drecv[r], N, ncclInt32, prev, comms[r], 0);
        }
    }
    res = ncclGroupEnd();
    for (int r = 0; r < NRANKS; r++) {
        int prev = (r + NRANKS - 1) % NRANKS;

        cudaMemcpy(out, drecv[r], sizeof(out), cudaMemcpyDeviceToHost);
        for (int i = 0; i < N; i++)
            ok &= out[i] == 100 * prev + i;
    }
    test_condf(res == ncclSuccess && ok, "4 ranks: send/recv ring");

    /* Two sends from 2 to itself: the first recv gets the first send. */
    ncclGroupStart();
    ncclRecv(drecv[2], 2, ncclInt32, 2, comms[2], 0);
    ncclRecv((int32_t *)drecv[2] + 2, 2, ncclInt32, 2, comms[2], 0);
    ncclSend(dsend[2], 2, ncclInt32, 2, comms[2], 0);
    ncclSend((int32_t *)dsend[2] + 4, 2, ncclInt32, 2, comms[2], 0);
    res = ncclGroupEnd();
    cudaMemcpy(out, drecv[2], sizeof(out), cudaMemcpyDeviceToHost);
    test_condf(res == ncclSuccess && out[0] == 200 && out[1] == 201 && out[2] == 204 &&
                   out[3] == 205,
               "send/recv to self match in order");

    ncclGroupStart();
    ncclSend(dsend[0], 4, ncclInt32, 1, comms[0], 0);
    ncclRecv(drecv[1], 2, ncclInt32, 0, comms[1], 0);
    test_condf(ncclGroupEnd() == ncclInvalidUsage,
               "send of 16 bytes to a recv of 8: invalid usage");
    test_condf(contains(ncclGetLastError(NULL), "bytes"), "message: %s", ncclGetLastError(NULL));
    ncclGroupStart();
    ncclSend(dsend[0], 4, ncclInt32, 1, comms[0], 0);
    ncclRecv(drecv[1], 16, ncclInt8, 0, comms[1], 0);
    test_condf(ncclGroupEnd() == ncclSuccess,
               "same bytes, different datatype: moves, as NCCL does");
    ncclGroupStart();
    ncclRecv(drecv[1], 2, ncclInt32, 3, comms[1], 0);
    test_condf(ncclGroupEnd() == ncclInvalidUsage, "recv without a send: invalid usage");
}

static void test_nccl_errors(void)
{
    unsigned char before[BUF_BYTES], after[BUF_BYTES];

    test_condf(ncclAllReduce(dsend[0], drecv[0], N, ncclFloat32, ncclSum, NULL, 0) ==
                   ncclInvalidArgument,
               "NULL comm: invalid argument");
    test_condf(contains(ncclGetLastError(NULL), "NULL"), "message: %s", ncclGetLastError(NULL));
    test_condf(ncclAllReduce(dsend[0], drecv[0], N, ncclNumTypes, ncclSum, comms[0], 0) ==
                   ncclInvalidArgument,
               "bad datatype: invalid argument");
    test_condf(contains(ncclGetLastError(NULL), "invalid type"), "message: %s",
               ncclGetLastError(NULL));
    test_condf(ncclAllReduce(dsend[0], drecv[0], N, ncclFloat32, (ncclRedOp_t)9, comms[0], 0) ==
                   ncclInvalidArgument,
               "bad reduction op: invalid argument");
    test_condf(ncclBroadcast(dsend[0], drecv[0], N, ncclFloat32, NRANKS, comms[0], 0) ==
                   ncclInvalidArgument,
               "root out of range: invalid argument");
    test_condf(contains(ncclGetLastError(NULL), "root"), "message: %s", ncclGetLastError(NULL));
    test_condf(ncclSend(dsend[0], N, ncclFloat32, 7, comms[0], 0) == ncclInvalidArgument,
               "peer out of range: invalid argument");
    test_condf(ncclRecv(dsend[0], N, ncclFloat32, -1, comms[0], 0) == ncclInvalidArgument,
               "negative peer: invalid argument");
    test_condf(ncclAllReduce(NULL, drecv[0], N, ncclFloat32, ncclSum, comms[0], 0) ==
                   ncclInvalidArgument,
               "NULL sendbuff: invalid argument");

    ncclGroupStart();
    for (int r = 0; r < NRANKS; r++)
        ncclAllReduce(dsend[r], drecv[r], N, ncclFloat32, ncclSum, comms[r], 0);
    ncclBroadcast(dsend[0], drecv[0], N, ncclFloat32, 99, comms[0], 0);
    test_condf(ncclGroupEnd() == ncclInvalidArgument, "a failed call fails its group");

    cudaMemcpy(before, drecv[0], BUF_BYTES, cudaMemcpyDeviceToHost);
    ncclGroupStart();
    for (int r = 0; r < NRANKS - 1; r++)
        ncclAllReduce(dsend[r], drecv[r], N, ncclFloat32, ncclSum, comms[r], 0);
    test_condf(ncclGroupEnd() == ncclInvalidUsage, "3 of 4 ranks: invalid usage, no hang");
    test_condf(contains(ncclGetLastError(NULL), "rank 3"), "message: %s", ncclGetLastError(NULL));
    cudaMemcpy(after, drecv[0], BUF_BYTES, cudaMemcpyDeviceToHost);
    test_condf(!memcmp(before, after, BUF_BYTES), "a failed group moves no data");
    test_condf(ncclAllReduce(dsend[0], drecv[0], N, ncclFloat32, ncclSum, comms[0], 0) ==
                   ncclInvalidUsage,
               "multi-rank collective outside a group: invalid usage, no hang");

    ncclGroupStart();
    for (int r = 0; r < NRANKS; r++)
        ncclAllReduce(dsend[r], drecv[r], r == 2 ? N - 1 : N, ncclFloat32, ncclSum, comms[r], 0);
    test_condf(ncclGroupEnd() == ncclInvalidUsage, "count mismatch across ranks: invalid usage");
    test_condf(contains(ncclGetLastError(NULL), "disagree"), "message: %s", ncclGetLastError(NULL));
    ncclGroupStart();
    for (int r = 0; r < NRANKS; r++) {
        if (r == 1)
            ncclAllGather(dsend[r], drecv[r], N, ncclFloat32, comms[r], 0);
        else
            ncclAllReduce(dsend[r], drecv[r], N, ncclFloat32, ncclSum, comms[r], 0);
    }
    test_condf(ncclGroupEnd() == ncclInvalidUsage, "different collectives across ranks: invalid");
}

static void test_nccl_split_shrink(void)
{
    ncclComm_t sub[NRANKS], shr[NRANKS];
    int n = -1, rank = -1, exclude[1] = {3};
    float a[2] = {1, 2}, b[2] = {10, 20}, out[2];
    ncclResult_t res;

    ncclGroupStart();
    for (int r = 0; r < NRANKS; r++)
        ncclCommSplit(comms[r], r == 3 ? NCCL_SPLIT_NOCOLOR : r % 2, -r, &sub[r], NULL);
    res = ncclGroupEnd();
    test_condf(res == ncclSuccess && sub[3] == NULL, "4-rank split: NCCL_SPLIT_NOCOLOR gives NULL");
    test_condf(sub[0] && sub[2] && ncclCommCount(sub[0], &n) == ncclSuccess && n == 2 &&
                   ncclCommUserRank(sub[2], &rank) == ncclSuccess && rank == 0 &&
                   ncclCommUserRank(sub[0], &rank) == ncclSuccess && rank == 1,
               "color 0 holds old ranks 0 and 2, ordered by key");
    test_condf(sub[1] && ncclCommCount(sub[1], &n) == ncclSuccess && n == 1, "color 1 alone");
    test_condf(ncclCommCuDevice(sub[2], &n) == ncclSuccess && n == 2, "split keeps the device");

    cudaMemcpy(dsend[0], a, sizeof(a), cudaMemcpyHostToDevice);
    cudaMemcpy(dsend[2], b, sizeof(b), cudaMemcpyHostToDevice);
    ncclGroupStart();
    ncclAllReduce(dsend[0], drecv[0], 2, ncclFloat32, ncclSum, sub[0], 0);
    ncclAllReduce(dsend[2], drecv[2], 2, ncclFloat32, ncclSum, sub[2], 0);
    res = ncclGroupEnd();
    cudaMemcpy(out, drecv[0], sizeof(out), cudaMemcpyDeviceToHost);
    test_condf(res == ncclSuccess && out[0] == 11 && out[1] == 22, "all-reduce on the split comm");
    for (int r = 0; r < NRANKS; r++)
        ncclCommDestroy(sub[r]);

    ncclGroupStart();
    for (int r = 0; r < NRANKS; r++)
        ncclCommSplit(comms[r], 0, 0, &sub[r], NULL);
    ncclCommSplit(comms[0], 0, 0, &sub[0], NULL);
    test_condf(ncclGroupEnd() == ncclInvalidUsage,
               "a second split on one rank only: invalid usage");

    ncclGroupStart();
    for (int r = 0; r < NRANKS - 1; r++)
        ncclCommShrink(comms[r], exclude, 1, &shr[r], NULL, NCCL_SHRINK_DEFAULT);
    res = ncclGroupEnd();
    test_condf(res == ncclSuccess && shr[0] && shr[2] && ncclCommCount(shr[2], &n) == 0 && n == 3 &&
                   ncclCommUserRank(shr[2], &rank) == 0 && rank == 2,
               "shrink without rank 3: 3 ranks, order kept");
    for (int r = 0; r < NRANKS - 1; r++)
        ncclCommDestroy(shr[r]);
    test_condf(ncclCommShrink(comms[3], exclude, 1, &shr[3], NULL, 0) == ncclInvalidArgument,
               "a rank cannot exclude itself");
}

/* fp16 bits of 1.5, 2.25, -0.5, 3.0 on the four ranks, and the results from Python's struct. */
static void test_nccl_fp16(void)
{
    const uint16_t in[NRANKS][4] = {{0x3e00, 0x6800, 0x6800, 0x7bff},
                                    {0x4080, 0x3c00, 0x4200, 0x7bff},
                                    {0xb800, 0x0000, 0x0000, 0x0000},
                                    {0x4200, 0x0000, 0x0000, 0x0000}};
    const struct {
        ncclRedOp_t op;
        const char *name;
        uint16_t want;
    } cases[] = {{ncclSum, "sum 6.25", 0x4640},
                 {ncclProd, "prod -5.0625", 0xc510},
                 {ncclMax, "max 3", 0x4200},
                 {ncclMin, "min -0.5", 0xb800},
                 {ncclAvg, "avg 1.5625", 0x3e40}};
    uint16_t out[4];
    ncclResult_t res;

    for (int r = 0; r < NRANKS; r++)
        cudaMemcpy(dsend[r], in[r], sizeof(in[r]), cudaMemcpyHostToDevice);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ncclGroupStart();
        for (int r = 0; r < NRANKS; r++)
            ncclAllReduce(dsend[r], drecv[r], 4, ncclFloat16, cases[c].op, comms[r], 0);
        res = ncclGroupEnd();
        cudaMemcpy(out, drecv[3], sizeof(out), cudaMemcpyDeviceToHost);
        test_condf(res == ncclSuccess && out[0] == cases[c].want, "fp16 all-reduce %s (got 0x%04x)",
                   cases[c].name, out[0]);
        if (cases[c].op == ncclSum) {
            test_condf(out[1] == 0x6800, "fp16 2048 + 1 rounds to even: 2048 (got 0x%04x)", out[1]);
            test_condf(out[2] == 0x6802, "fp16 2048 + 3 rounds to even: 2052 (got 0x%04x)", out[2]);
            test_condf(out[3] == 0x7c00, "fp16 65504 + 65504 overflows to inf (got 0x%04x)",
                       out[3]);
        }
    }
}

/* One rank is enough to check conversions and wrapping for the remaining types. */
static void test_nccl_types(void)
{
    ncclComm_t two[2];
    unsigned char a[16], b[16], out[16];
    int64_t i64[2] = {INT64_MAX, 1}, o64;
    double f64[2] = {0.1, 0.2}, of64;
    const struct {
        ncclDataType_t t;
        ncclRedOp_t op;
        unsigned char x, y, want;
        const char *what;
    } cases[] = {
        {ncclFloat8e4m3, ncclSum, 0x38, 0x38, 0x40, "fp8e4m3 1 + 1 = 2"},
        {ncclFloat8e4m3, ncclSum, 0x7e, 0x7e, 0x7e, "fp8e4m3 448 + 448 saturates to 448"},
        {ncclFloat8e4m3, ncclMax, 0xb8, 0x30, 0x30, "fp8e4m3 max(-1, 0.5) = 0.5"},
        {ncclFloat8e5m2, ncclSum, 0x3c, 0x3c, 0x40, "fp8e5m2 1 + 1 = 2"},
        {ncclFloat8e5m2, ncclSum, 0x7b, 0x7b, 0x7b, "fp8e5m2 57344 * 2 saturates"},
        {ncclFloat8e5m2, ncclProd, 0x3d, 0x3d, 0x3e, "fp8e5m2 1.25 * 1.25 = 1.5625 -> 1.5"},
        {ncclInt8, ncclSum, 100, 100, 200, "int8 100 + 100 wraps to -56"},
        {ncclInt8, ncclMax, 0xff, 0x01, 0x01, "int8 max(-1, 1) = 1"},
        {ncclUint8, ncclMax, 0xff, 0x01, 0xff, "uint8 max(255, 1) = 255"},
        {ncclUint8, ncclAvg, 0xff, 0x03, 0x01, "uint8 avg of the wrapped sum 258 -> 1"},
    };

    test_condf(ncclCommInitAll(two, 2, NULL) == ncclSuccess, "ncclCommInitAll 2 ranks");
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ncclResult_t res;

        a[0] = cases[c].x;
        b[0] = cases[c].y;
        cudaMemcpy(dsend[0], a, 1, cudaMemcpyHostToDevice);
        cudaMemcpy(dsend[1], b, 1, cudaMemcpyHostToDevice);
        ncclGroupStart();
        ncclAllReduce(dsend[0], drecv[0], 1, cases[c].t, cases[c].op, two[0], 0);
        ncclAllReduce(dsend[1], drecv[1], 1, cases[c].t, cases[c].op, two[1], 0);
        res = ncclGroupEnd();
        cudaMemcpy(out, drecv[1], 1, cudaMemcpyDeviceToHost);
        test_condf(res == ncclSuccess && out[0] == cases[c].want, "%s (got 0x%02x)", cases[c].what,
                   out[0]);
    }
    cudaMemcpy(dsend[0], &i64[0], 8, cudaMemcpyHostToDevice);
    cudaMemcpy(dsend[1], &i64[1], 8, cudaMemcpyHostToDevice);
    ncclGroupStart();
    ncclAllReduce(dsend[0], drecv[0], 1, ncclInt64, ncclSum, two[0], 0);
    ncclAllReduce(dsend[1], drecv[1], 1, ncclInt64, ncclSum, two[1], 0);
    ncclGroupEnd();
    cudaMemcpy(&o64, drecv[0], 8, cudaMemcpyDeviceToHost);
    test_condf(o64 == INT64_MIN, "int64 max + 1 wraps to min");
    cudaMemcpy(dsend[0], &f64[0], 8, cudaMemcpyHostToDevice);
    cudaMemcpy(dsend[1], &f64[1], 8, cudaMemcpyHostToDevice);
    ncclGroupStart();
    ncclAllReduce(dsend[0], drecv[0], 1, ncclFloat64, ncclSum, two[0], 0);
    ncclAllReduce(dsend[1], drecv[1], 1, ncclFloat64, ncclSum, two[1], 0);
    ncclGroupEnd();
    cudaMemcpy(&of64, drecv[0], 8, cudaMemcpyDeviceToHost);
    test_condf(of64 == 0.1 + 0.2, "fp64 sums in double");
    ncclCommDestroy(two[0]);
    ncclCommDestroy(two[1]);
}

static void test_nccl_symbols(void)
{
    void *weak = dlsym(RTLD_DEFAULT, "ncclAllReduce");
    void *strong = dlsym(RTLD_DEFAULT, "pncclAllReduce");

    test_condf(weak && weak == strong, "ncclAllReduce and pncclAllReduce are one function");
    test_condf(dlsym(RTLD_DEFAULT, "pncclCommInitRankConfig") &&
                   dlsym(RTLD_DEFAULT, "pncclGroupEnd") == dlsym(RTLD_DEFAULT, "ncclGroupEnd"),
               "pnccl aliases are exported");
}

static void test_nccl_teardown(void)
{
    ncclComm_t dying[2];
    ncclResult_t res = ncclSuccess;

    ncclCommInitAll(dying, 2, NULL);
    ncclGroupStart();
    ncclAllReduce(dsend[0], drecv[0], N, ncclFloat32, ncclSum, dying[0], 0);
    test_condf(ncclCommDestroy(dying[0]) == ncclInvalidUsage, "destroy with queued calls: refused");
    test_condf(ncclCommAbort(dying[0]) == ncclSuccess, "abort drops the queued calls");
    test_condf(ncclGroupEnd() == ncclSuccess, "the group then ends empty");
    ncclCommDestroy(dying[1]);
    for (int r = 0; r < NRANKS; r++) {
        if (ncclCommDestroy(comms[r]) != ncclSuccess)
            res = ncclInternalError;
        cudaFree(dsend[r]);
        cudaFree(drecv[r]);
        cudaStreamDestroy(streams[r]);
    }
    test_condf(res == ncclSuccess, "destroy the 4-rank clique");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--child"))
        return child_main();
    /* The defaults are what the checks expect; the child sets its own. */
    unsetenv("LOCAL_RANK");
    unsetenv("SHAPETRACE_DOUBLE_DEVICES");

    test_pointers();
    test_allocator();
    test_copies();
    test_copies_2d();
    test_memset_peer_ptds();
    test_streams_graphs();
    test_capture_fork_join();
    test_misc_cudart(argv[0]);
    test_nccl_single();
    test_nccl_clique_setup();
    test_nccl_collectives();
    test_nccl_redops();
    test_nccl_inplace_nested();
    test_nccl_p2p();
    test_nccl_errors();
    test_nccl_split_shrink();
    test_nccl_fp16();
    test_nccl_types();
    test_nccl_symbols();
    test_nccl_teardown();
    return test_report();
}
