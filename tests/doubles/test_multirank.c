/* Multi-process test of the libnccl double: re-runs itself under shp_launch, one scenario at a
 * time (--child SCENARIO), as ranks that check their own results; the parent adds the exit status,
 * the timing and the messages on stderr. One line per check, then "N passed, M failed". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* nccl.h has C++-style empty parameter lists, which -Wstrict-prototypes rejects in C. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "tests/doubles/uid_exchange.h"
#include "tests/unit/harness.h"

#define C 6               /* elements per rank's chunk in the small collectives */
#define SENTINEL (-7.0)   /* what a buffer holds where a call must not write */
#define LAUNCH_LIMIT "25" /* shp_launch --timeout: a hung scenario fails, never the suite */

static int me = -1, nranks; /* in a child: RANK and WORLD_SIZE */
static const char *scenario;
static char group[96]; /* in a child: its lines' prefix, "SCENARIO rRANK" */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((format(printf, 1, 2), noreturn)) static void fatal(const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    test_condf(false, "setup: %s", msg);
    exit(1);
}

/* ---- values ---------------------------------------------------------------------------------- */

static size_t esize(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    default:
        return 4;
    }
}

static const char *tname(ncclDataType_t t)
{
    switch (t) {
    case ncclFloat32:
        return "fp32";
    case ncclInt32:
        return "int32";
    case ncclFloat16:
        return "fp16";
    case ncclBfloat16:
        return "bf16";
    default:
        return "uint8";
    }
}

/* The test's own conversions: every value used is a small integer or half-integer, exact in each
 * type, so fp16 and bf16 need no rounding here. */
static void put(ncclDataType_t t, void *buf, size_t i, double v)
{
    unsigned char *p = (unsigned char *)buf + i * esize(t);
    float f = (float)v;
    int32_t x = (int32_t)v;
    uint32_t u;
    uint16_t h;

    memcpy(&u, &f, 4);
    switch (t) {
    case ncclFloat32:
        memcpy(p, &f, 4);
        break;
    case ncclInt32:
        memcpy(p, &x, 4);
        break;
    case ncclBfloat16:
        h = (uint16_t)(u >> 16);
        memcpy(p, &h, 2);
        break;
    case ncclFloat16:
        h = (uint16_t)((u >> 16) & 0x8000);
        if (u & 0x7fffffff)
            h |= (uint16_t)((((u >> 23) & 0xff) - 127 + 15) << 10 | ((u >> 13) & 0x3ff));
        memcpy(p, &h, 2);
        break;
    default:
        *p = (unsigned char)x;
        break;
    }
}

static double get(ncclDataType_t t, const void *buf, size_t i)
{
    const unsigned char *p = (const unsigned char *)buf + i * esize(t);
    float f;
    int32_t x;
    uint32_t u;
    uint16_t h;

    switch (t) {
    case ncclFloat32:
        memcpy(&f, p, 4);
        return f;
    case ncclInt32:
        memcpy(&x, p, 4);
        return x;
    case ncclBfloat16:
        memcpy(&h, p, 2);
        u = (uint32_t)h << 16;
        break;
    case ncclFloat16:
        memcpy(&h, p, 2);
        u = (uint32_t)(h & 0x8000) << 16;
        if (h & 0x7fff)
            u |= (uint32_t)(((h >> 10) & 0x1f) - 15 + 127) << 23 | (uint32_t)(h & 0x3ff) << 13;
        break;
    default:
        return *p;
    }
    memcpy(&f, &u, 4);
    return f;
}

/* Rank r's element j: each rank's chunks differ, products of C of them stay exact in bf16. */
static double v(int r, size_t j)
{
    return r + 1 + (double)(j % C) + 7 * (double)(j / C);
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;

    if (cudaMalloc(&p, bytes) != cudaSuccess || !p)
        fatal("cudaMalloc of %zu bytes failed", bytes);
    return p;
}

/* Fills n elements of device memory: f(r, j), or a constant when f is NULL. */
static void fill(ncclDataType_t t, void *dev, size_t n, double (*f)(int, size_t), int r,
                 double constant)
{
    unsigned char *host = malloc(n * esize(t) + 1);

    if (!host)
        fatal("out of memory");
    for (size_t j = 0; j < n; j++)
        put(t, host, j, f ? f(r, j) : constant);
    cudaMemcpy(dev, host, n * esize(t), cudaMemcpyHostToDevice);
    free(host);
}

/* Compares n elements of device memory with want; says where the first difference is. */
static bool expect(ncclDataType_t t, const void *dev, const double *want, size_t n, char *why,
                   size_t len)
{
    unsigned char *host = malloc(n * esize(t) + 1);
    bool ok = true;

    if (!host)
        fatal("out of memory");
    cudaMemcpy(host, dev, n * esize(t), cudaMemcpyDeviceToHost);
    why[0] = 0;
    for (size_t j = 0; j < n && ok; j++) {
        if (get(t, host, j) != want[j]) {
            snprintf(why, len, ": element %zu is %g, want %g", j, get(t, host, j), want[j]);
            ok = false;
        }
    }
    free(host);
    return ok;
}

static void want_const(double *want, size_t from, size_t to, double x)
{
    for (size_t j = from; j < to; j++)
        want[j] = x;
}

/* The reduction over ranks 0..n-1 of v(r, j), as the double computes it. */
static double red(ncclRedOp_t op, ncclDataType_t t, int n, size_t j)
{
    double acc = v(0, j);

    for (int r = 1; r < n; r++) {
        double x = v(r, j);

        if (op == ncclProd)
            acc *= x;
        else if (op == ncclMax)
            acc = x > acc ? x : acc;
        else if (op == ncclMin)
            acc = x < acc ? x : acc;
        else
            acc += x;
    }
    if (op == ncclAvg)
        acc = t == ncclInt32 ? (double)(long long)(acc / n) : acc / n;
    return acc;
}

static ncclComm_t init_world(void)
{
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclResult_t r;

    if (shp_uid_exchange(&id, me) != 0)
        fatal("no unique id");
    if ((r = ncclCommInitRank(&comm, nranks, id, me)) != ncclSuccess || !comm)
        fatal("ncclCommInitRank: %s: %s", ncclGetErrorString(r), ncclGetLastError(NULL));
    return comm;
}

/* ---- scenario: every collective, known values ------------------------------------------------ */

static void colls_of_type(ncclComm_t comm, ncclDataType_t t)
{
    static const ncclRedOp_t redops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    static const char *const redop_names[] = {"sum", "prod", "max", "min", "avg"};
    size_t total = (size_t)nranks * C, es = esize(t);
    void *send = dev_alloc(total * es), *recv = dev_alloc(total * es);
    double *want = malloc(total * sizeof(*want));
    int last = nranks - 1, one = 1 % nranks;
    const char *tn = tname(t);
    char why[160];
    ncclResult_t r;

    if (!want)
        fatal("out of memory");
    fill(t, send, total, v, me, 0);
    for (int k = 0; k < 5; k++) {
        fill(t, recv, total, NULL, 0, SENTINEL);
        r = ncclAllReduce(send, recv, C, t, redops[k], comm, 0);
        for (size_t j = 0; j < C; j++)
            want[j] = red(redops[k], t, nranks, j);
        want_const(want, C, total, SENTINEL);
        test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
                   "%s all-reduce %s%s", tn, redop_names[k], why);
    }

    fill(t, recv, total, v, me, 0);
    r = ncclAllReduce(recv, recv, C, t, ncclSum, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C ? red(ncclSum, t, nranks, j) : v(me, j);
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s in-place all-reduce%s", tn, why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    r = ncclBroadcast(send, recv, C, t, one, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C ? v(one, j) : SENTINEL;
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s broadcast from rank %d%s", tn, one, why);

    fill(t, recv, total, v, me, 0);
    r = ncclBcast(recv, C, t, last, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C ? v(last, j) : v(me, j);
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s ncclBcast in place from rank %d%s", tn, last, why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    r = ncclReduce(send, recv, C, t, ncclSum, last, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C && me == last ? red(ncclSum, t, nranks, j) : SENTINEL;
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s reduce to rank %d (%s)%s", tn, last, me == last ? "the sum" : "untouched", why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    r = ncclAllGather(send, recv, C, t, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = v((int)(j / C), j % C);
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s all-gather%s", tn, why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    fill(t, (char *)recv + (size_t)me * C * es, C, v, me, 0);
    r = ncclAllGather((char *)recv + (size_t)me * C * es, recv, C, t, comm, 0);
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s in-place all-gather%s", tn, why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    r = ncclReduceScatter(send, recv, C, t, ncclSum, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C ? red(ncclSum, t, nranks, (size_t)me * C + j) : SENTINEL;
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s reduce-scatter sum%s", tn, why);

    fill(t, recv, total, v, me, 0);
    r = ncclReduceScatter(recv, (char *)recv + (size_t)me * C * es, C, t, ncclMax, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j / C == (size_t)me ? red(ncclMax, t, nranks, j) : v(me, j);
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s in-place reduce-scatter max%s", tn, why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    r = ncclAlltoAll(send, recv, C, t, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = v((int)(j / C), (size_t)me * C + j % C);
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s all-to-all%s", tn, why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    r = ncclGather(send, recv, C, t, 0, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = me == 0 ? v((int)(j / C), j % C) : SENTINEL;
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s gather to rank 0 (%s)%s", tn, me == 0 ? "every chunk" : "untouched", why);

    fill(t, recv, total, NULL, 0, SENTINEL);
    r = ncclScatter(send, recv, C, t, one, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C ? v(one, (size_t)me * C + j) : SENTINEL;
    test_condf(r == ncclSuccess && expect(t, recv, want, total, why, sizeof(why)),
               "%s scatter from rank %d%s", tn, one, why);

    cudaFree(send);
    cudaFree(recv);
    free(want);
}

static void child_collectives(void)
{
    static const ncclDataType_t types[] = {ncclFloat32, ncclBfloat16, ncclInt32, ncclFloat16};
    ncclComm_t comm = init_world();
    int n = -1, r = -1;
    bool ok = ncclCommCount(comm, &n) == ncclSuccess && ncclCommUserRank(comm, &r) == ncclSuccess;

    test_condf(ok && n == nranks && r == me, "ncclCommInitRank across processes: rank %d of %d", r,
               n);
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
        colls_of_type(comm, types[k]);
    test_condf(ncclCommDestroy(comm) == ncclSuccess, "destroy");
}

/* ---- scenario: buffers larger than a round ----------------------------------------------------
 */

static double v_row(int r, size_t j)
{
    return (double)((r * 37 + j) % 200);
}

static double v_small(int r, size_t j)
{
    return (double)(j % 100 + r);
}

static double v_byte(int r, size_t j)
{
    return (double)((r * 31 + j * 7) & 0xff);
}

/* Compares without a want array: big buffers. */
static bool expect_fn(ncclDataType_t t, const void *dev, size_t n, double (*f)(size_t, void *),
                      void *arg, char *why, size_t len)
{
    unsigned char *host = malloc(n * esize(t) + 1);
    bool ok = true;

    if (!host)
        fatal("out of memory");
    cudaMemcpy(host, dev, n * esize(t), cudaMemcpyDeviceToHost);
    why[0] = 0;
    for (size_t j = 0; j < n && ok; j++) {
        double w = f(j, arg);

        if (get(t, host, j) != w) {
            snprintf(why, len, ": element %zu is %g, want %g", j, get(t, host, j), w);
            ok = false;
        }
    }
    free(host);
    return ok;
}

struct big_arg {
    size_t count; /* per rank */
};

static double want_gathered_rows(size_t j, void *p)
{
    struct big_arg *a = p;

    return v_row((int)(j / a->count), j % a->count);
}

static double want_sum_small(size_t j, void *p)
{
    double s = 0;

    (void)p;
    for (int r = 0; r < nranks; r++)
        s += v_small(r, j);
    return s;
}

static double want_scattered_sum(size_t j, void *p)
{
    struct big_arg *a = p;

    return want_sum_small((size_t)me * a->count + j, NULL);
}

static double want_a2a(size_t j, void *p)
{
    struct big_arg *a = p;

    return v_small((int)(j / a->count), (size_t)me * a->count + j % a->count);
}

static double want_bytes_of_0(size_t j, void *p)
{
    (void)p;
    return v_byte(0, j);
}

static void child_big(void)
{
    ncclComm_t comm = init_world();
    struct big_arg rows = {771 * 896}, ar = {1536 * 1024}, rs = {400 * 1024}, a2a = {300 * 1024},
                   bc = {5 * 1024 * 1024 + 3};
    size_t most = 4 * (size_t)1536 * 1024 * 4;
    void *send = dev_alloc(most), *recv = dev_alloc(most);
    char why[160];
    ncclResult_t r;
    double t0 = now_s();

    fill(ncclBfloat16, send, rows.count, v_row, me, 0);
    r = ncclAllGather(send, recv, rows.count, ncclBfloat16, comm, 0);
    test_condf(r == ncclSuccess && expect_fn(ncclBfloat16, recv, rows.count * (size_t)nranks,
                                             want_gathered_rows, &rows, why, sizeof(why)),
               "bf16 all-gather of 771 x 896 per rank%s", why);

    fill(ncclFloat32, send, ar.count, v_small, me, 0);
    r = ncclAllReduce(send, recv, ar.count, ncclFloat32, ncclSum, comm, 0);
    test_condf(r == ncclSuccess &&
                   expect_fn(ncclFloat32, recv, ar.count, want_sum_small, NULL, why, sizeof(why)),
               "fp32 all-reduce of 6 MiB (two rounds)%s", why);

    fill(ncclFloat32, send, rs.count * (size_t)nranks, v_small, me, 0);
    r = ncclReduceScatter(send, recv, rs.count, ncclFloat32, ncclSum, comm, 0);
    test_condf(r == ncclSuccess && expect_fn(ncclFloat32, recv, rs.count, want_scattered_sum, &rs,
                                             why, sizeof(why)),
               "fp32 reduce-scatter of %zu per rank (rounds of blocks)%s", rs.count, why);

    fill(ncclInt32, send, a2a.count * (size_t)nranks, v_small, me, 0);
    r = ncclAlltoAll(send, recv, a2a.count, ncclInt32, comm, 0);
    test_condf(r == ncclSuccess && expect_fn(ncclInt32, recv, a2a.count * (size_t)nranks, want_a2a,
                                             &a2a, why, sizeof(why)),
               "int32 all-to-all of %zu per peer%s", a2a.count, why);

    fill(ncclUint8, send, bc.count, v_byte, me, 0);
    r = ncclBroadcast(send, recv, bc.count, ncclUint8, 0, comm, 0);
    test_condf(r == ncclSuccess &&
                   expect_fn(ncclUint8, recv, bc.count, want_bytes_of_0, NULL, why, sizeof(why)),
               "uint8 broadcast of 5 MiB + 3 from rank 0%s", why);
    test_condf(now_s() - t0 < 15, "large calls took %.2f s", now_s() - t0);
    cudaFree(send);
    cudaFree(recv);
    test_condf(ncclCommDestroy(comm) == ncclSuccess, "destroy");
}

/* ---- scenarios: send and receive --------------------------------------------------------------
 */

#define BIG_MSG ((size_t)3 << 20) /* larger than a ring: the peers must progress together */

static bool bytes_from(const unsigned char *buf, size_t n, int src, char *why, size_t len)
{
    for (size_t j = 0; j < n; j++) {
        if (buf[j] != (unsigned char)v_byte(src, j)) {
            snprintf(why, len, ": byte %zu is %u, want %u", j, buf[j],
                     (unsigned)(unsigned char)v_byte(src, j));
            return false;
        }
    }
    why[0] = 0;
    return true;
}

static void child_p2p_group(void)
{
    ncclComm_t comm = init_world();
    int next = (me + 1) % nranks, prev = (me + nranks - 1) % nranks;
    unsigned char *bsend = malloc(BIG_MSG), *brecv = malloc(BIG_MSG);
    int32_t small_send[4], small_recv[4] = {0}, a2a_send[64], a2a_recv[64];
    char why[160];
    ncclResult_t r;

    if (!bsend || !brecv || nranks > 16)
        fatal("setup");
    for (size_t j = 0; j < BIG_MSG; j++)
        bsend[j] = (unsigned char)v_byte(me, j);
    for (int k = 0; k < 4; k++)
        small_send[k] = 1000 * me + k;
    memset(brecv, 0, BIG_MSG);
    ncclGroupStart();
    ncclSend(bsend, BIG_MSG, ncclUint8, next, comm, 0);
    ncclSend(small_send, 4, ncclInt32, next, comm, 0);
    ncclRecv(brecv, BIG_MSG, ncclUint8, prev, comm, 0);
    ncclRecv(small_recv, 4, ncclInt32, prev, comm, 0);
    r = ncclGroupEnd();
    test_condf(r == ncclSuccess && bytes_from(brecv, BIG_MSG, prev, why, sizeof(why)),
               "ring in one group: 3 MiB from rank %d%s", prev, why);
    test_condf(small_recv[0] == 1000 * prev && small_recv[3] == 1000 * prev + 3,
               "second message to the same peer arrives second: %d %d", small_recv[0],
               small_recv[3]);

    /* torch's all-to-all: every send, then every receive, self included, in one group. */
    for (int q = 0; q < nranks; q++)
        for (int k = 0; k < 4; k++)
            a2a_send[q * 4 + k] = 100 * me + 10 * q + k;
    memset(a2a_recv, 0xff, sizeof(a2a_recv));
    ncclGroupStart();
    for (int q = 0; q < nranks; q++)
        ncclSend(a2a_send + q * 4, 4, ncclInt32, q, comm, 0);
    for (int q = 0; q < nranks; q++)
        ncclRecv(a2a_recv + q * 4, 4, ncclInt32, q, comm, 0);
    r = ncclGroupEnd();
    {
        bool ok = r == ncclSuccess;

        for (int q = 0; q < nranks; q++)
            for (int k = 0; k < 4; k++)
                ok = ok && a2a_recv[q * 4 + k] == 100 * q + 10 * me + k;
        test_condf(ok, "all-to-all made of sends and receives in one group");
    }

    /* Receives posted before the sends, and a collective in the same group. */
    {
        float x = (float)me, sum = -1;

        memset(small_recv, 0, sizeof(small_recv));
        ncclGroupStart();
        ncclRecv(small_recv, 4, ncclInt32, prev, comm, 0);
        ncclAllReduce(&x, &sum, 1, ncclFloat32, ncclSum, comm, 0);
        ncclSend(small_send, 4, ncclInt32, next, comm, 0);
        r = ncclGroupEnd();
        test_condf(r == ncclSuccess && small_recv[2] == 1000 * prev + 2 &&
                       sum == (float)(nranks * (nranks - 1) / 2),
                   "recv before send, with an all-reduce in the group: %d, sum %g", small_recv[2],
                   (double)sum);
    }
    free(bsend);
    free(brecv);
    test_condf(ncclCommDestroy(comm) == ncclSuccess, "destroy");
}

#define PAIR_MSG ((size_t)2 << 20)

static void child_p2p_blocking(void)
{
    ncclComm_t comm = init_world();
    int peer = me ^ 1;
    unsigned char *out = malloc(PAIR_MSG), *in = malloc(PAIR_MSG);
    int32_t msgs[3][2], got[3][2];
    char why[160];
    ncclResult_t r1, r2;

    if (!out || !in || nranks % 2)
        fatal("setup: an even number of ranks");
    for (size_t j = 0; j < PAIR_MSG; j++)
        out[j] = (unsigned char)v_byte(me, j);
    /* Each pair orders its blocking calls so that neither waits on the other. */
    if (me % 2 == 0) {
        r1 = ncclSend(out, PAIR_MSG, ncclUint8, peer, comm, 0);
        r2 = ncclRecv(in, PAIR_MSG, ncclUint8, peer, comm, 0);
    } else {
        r1 = ncclRecv(in, PAIR_MSG, ncclUint8, peer, comm, 0);
        r2 = ncclSend(out, PAIR_MSG, ncclUint8, peer, comm, 0);
    }
    test_condf(r1 == ncclSuccess && r2 == ncclSuccess &&
                   bytes_from(in, PAIR_MSG, peer, why, sizeof(why)),
               "blocking pair with rank %d, 2 MiB each way, outside a group%s", peer, why);

    /* Small sends complete before the receiver asks; receives take them in order. */
    if (me % 2 == 0) {
        bool ok = true;

        for (int k = 0; k < 3; k++) {
            msgs[k][0] = me;
            msgs[k][1] = k;
            ok = ok && ncclSend(msgs[k], 2, ncclInt32, peer, comm, 0) == ncclSuccess;
        }
        test_condf(ok, "three small sends to rank %d return before any receive", peer);
    } else {
        bool ok = true;

        usleep(50 * 1000);
        for (int k = 0; k < 3; k++)
            ok = ok && ncclRecv(got[k], 2, ncclInt32, peer, comm, 0) == ncclSuccess &&
                 got[k][0] == peer && got[k][1] == k;
        test_condf(ok, "three receives from rank %d get its sends in issue order", peer);
    }

    /* A receive that waits for a late sender. */
    if (me % 2 == 0) {
        usleep(100 * 1000);
        r1 = ncclSend(out, 16, ncclUint8, peer, comm, 0);
        test_condf(r1 == ncclSuccess, "late send to rank %d", peer);
    } else {
        double t0 = now_s();

        memset(in, 0, 16);
        r1 = ncclRecv(in, 16, ncclUint8, peer, comm, 0);
        test_condf(r1 == ncclSuccess && bytes_from(in, 16, peer, why, sizeof(why)),
                   "receive waited %.2f s for rank %d's late send%s", now_s() - t0, peer, why);
    }
    free(out);
    free(in);
    test_condf(ncclCommDestroy(comm) == ncclSuccess, "destroy");
}

/* ---- scenarios: split and shrink --------------------------------------------------------------
 */

/* The sum over the members (parent ranks) of v(member, j) for j < C, on comm. */
static void check_sum_on(ncclComm_t comm, const int *members, int k, const char *what)
{
    float send[C], recv[C];
    bool ok;
    ncclResult_t r;

    for (int j = 0; j < C; j++) {
        send[j] = (float)v(me, (size_t)j);
        recv[j] = -1;
    }
    r = ncclAllReduce(send, recv, C, ncclFloat32, ncclSum, comm, 0);
    ok = r == ncclSuccess;
    for (int j = 0; j < C && ok; j++) {
        double s = 0;

        for (int m = 0; m < k; m++)
            s += v(members[m], (size_t)j);
        ok = recv[j] == (float)s;
    }
    test_condf(ok, "all-reduce on %s sums its members' values", what);
}

/* The parent ranks of comm's members, in comm's rank order, by an all-gather. */
static bool order_is(ncclComm_t comm, const int *members, int k)
{
    int32_t mine = me, all[64];
    bool ok;

    if (k > 64)
        return false;
    ok = ncclAllGather(&mine, all, 1, ncclInt32, comm, 0) == ncclSuccess;
    for (int m = 0; m < k && ok; m++)
        ok = all[m] == members[m];
    return ok;
}

static void child_split(void)
{
    ncclComm_t world = init_world(), half = NULL, rev = NULL, three = NULL, solo = NULL;
    int n = -1, r = -1, halfm[2] = {me % 2, me % 2 + 2}, revm[2] = {me % 2 + 2, me % 2};
    int threem[3] = {0, 1, 2};
    ncclResult_t res;

    if (nranks != 4)
        fatal("split wants 4 ranks");
    res = ncclCommSplit(world, me % 2, me, &half, NULL);
    if (half) {
        ncclCommCount(half, &n);
        ncclCommUserRank(half, &r);
    }
    test_condf(res == ncclSuccess && half && n == 2 && r == me / 2,
               "split by color rank%%2: %d ranks, I am rank %d", n, r);
    check_sum_on(half, halfm, 2, "my half");
    test_condf(order_is(half, halfm, 2), "half ordered by key (= parent rank)");

    /* key = -rank reverses each half; inside a group, as NCCL allows. As with NCCL, the new comm
     * is handed out at the call and usable once the group has ended. */
    ncclGroupStart();
    res = ncclCommSplit(world, me % 2, -me, &rev, NULL);
    {
        ncclResult_t async = ncclSuccess;

        test_condf(res == ncclSuccess && rev && ncclCommCount(rev, &n) == ncclInvalidArgument &&
                       ncclCommGetAsyncError(rev, &async) == ncclSuccess && async == ncclInProgress,
                   "split in a group: the comm is handed out at once, in progress until the end");
    }
    res = ncclGroupEnd();
    r = -1;
    if (rev)
        ncclCommUserRank(rev, &r);
    test_condf(res == ncclSuccess && rev && r == 1 - me / 2,
               "split in a group with key -rank: I am rank %d", r);
    test_condf(order_is(rev, revm, 2), "reversed half ordered by key");

    /* NCCL_SPLIT_NOCOLOR gives NULL; equal keys keep parent order. */
    res = ncclCommSplit(world, me == 3 ? NCCL_SPLIT_NOCOLOR : 5, 0, &three, NULL);
    test_condf(res == ncclSuccess && (me == 3 ? three == NULL : three != NULL),
               "split with NCCL_SPLIT_NOCOLOR on rank 3: %s", three ? "a comm" : "NULL");
    if (three) {
        check_sum_on(three, threem, 3, "the 3-rank comm");
        test_condf(order_is(three, threem, 3), "equal keys: parent order");
    }

    /* A split of a split: one rank each. */
    res = ncclCommSplit(half, me, 0, &solo, NULL);
    test_condf(res == ncclSuccess && solo && ncclCommCount(solo, &n) == ncclSuccess && n == 1,
               "split of a split into single ranks");
    if (solo)
        check_sum_on(solo, &me, 1, "a 1-rank comm");

    {
        int all[4] = {0, 1, 2, 3};

        check_sum_on(world, all, 4, "the parent after its splits");
    }
    test_condf(ncclCommDestroy(solo) == ncclSuccess && ncclCommDestroy(three) == ncclSuccess &&
                   ncclCommDestroy(rev) == ncclSuccess && ncclCommDestroy(half) == ncclSuccess &&
                   ncclCommDestroy(world) == ncclSuccess,
               "destroy all");
}

/* Polls ncclCommGetAsyncError until the comm is no longer in progress; the polls it took. */
static int poll_ready(ncclComm_t comm, ncclResult_t *state)
{
    int polls = 0;

    *state = ncclInProgress;
    while (*state == ncclInProgress && polls < 100000) {
        if (ncclCommGetAsyncError(comm, state) != ncclSuccess)
            break;
        polls++;
        if (*state == ncclInProgress)
            usleep(500);
    }
    return polls;
}

/* config.blocking = 0, as NCCL: the creation returns ncclInProgress, the comm's attributes are
 * refused until ncclCommGetAsyncError (a read, which changes nothing) says it is ready. */
static void child_nonblocking(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t world = NULL, half = NULL;
    ncclUniqueId id;
    ncclResult_t r, state;
    int n = -1, rk = -1, halfm[2] = {me % 2, me % 2 + 2}, all[4] = {0, 1, 2, 3};

    if (nranks != 4)
        fatal("nonblocking wants 4 ranks");
    config.blocking = 0;
    if (shp_uid_exchange(&id, me) != 0)
        fatal("no unique id");
    r = ncclCommInitRankConfig(&world, nranks, id, me, &config);
    test_condf(r == ncclInProgress && world, "a non-blocking init returns ncclInProgress (%d)",
               (int)r);
    if (!world)
        fatal("no comm");
    test_condf(ncclCommUserRank(world, &rk) == ncclInvalidArgument && rk == -1 &&
                   ncclCommCount(world, &n) == ncclInvalidArgument,
               "its rank and size are refused while it is in progress");
    test_condf(ncclCommGetAsyncError(world, &state) == ncclSuccess && state == ncclInProgress,
               "ncclCommGetAsyncError says ncclInProgress");
    test_condf(ncclAllReduce(all, all, 1, ncclInt32, ncclSum, world, 0) == ncclInvalidArgument,
               "a collective on it is refused (ncclInvalidArgument) until it is ready");
    int polls = poll_ready(world, &state);
    test_condf(state == ncclSuccess && polls > 1, "ready after %d polls", polls);
    bool known = ncclCommUserRank(world, &rk) == ncclSuccess && ncclCommCount(world, &n) == 0;
    test_condf(known && rk == me && n == 4, "then its rank (%d) and size (%d)", rk, n);
    check_sum_on(world, all, 4, "the non-blocking world");
    r = ncclCommSplit(world, me % 2, me, &half, &config);
    test_condf(r == ncclInProgress && half, "a non-blocking split returns ncclInProgress (%d)",
               (int)r);
    if (!half)
        fatal("no half");
    test_condf(ncclCommUserRank(half, &rk) == ncclInvalidArgument, "the child is refused at first");
    polls = poll_ready(half, &state);
    known = state == ncclSuccess && ncclCommUserRank(half, &rk) == ncclSuccess;
    test_condf(known && rk == me / 2, "then ready, rank %d after %d polls", rk, polls);
    check_sum_on(half, halfm, 2, "the non-blocking half");
    test_condf(ncclCommDestroy(half) == ncclSuccess && ncclCommDestroy(world) == ncclSuccess,
               "destroy both");
}

static void child_shrink(void)
{
    ncclComm_t world = init_world(), small = NULL;
    int exclude[1] = {1}, members[3] = {0, 2, 3}, n = -1, r = -1;
    ncclResult_t res;

    if (nranks != 4)
        fatal("shrink wants 4 ranks");
    if (me == 1) {
        /* The excluded rank makes no call (it could be dead). */
        test_condf(ncclCommDestroy(world) == ncclSuccess, "excluded rank leaves without calling");
        return;
    }
    ncclGroupStart();
    res = ncclCommShrink(world, exclude, 1, &small, NULL, NCCL_SHRINK_DEFAULT);
    res = res == ncclSuccess ? ncclGroupEnd() : res;
    if (small) {
        ncclCommCount(small, &n);
        ncclCommUserRank(small, &r);
    }
    test_condf(res == ncclSuccess && small && n == 3 && r == (me == 0 ? 0 : me - 1),
               "shrink without rank 1, in a group: %d ranks, I am rank %d", n, r);
    if (small) {
        check_sum_on(small, members, 3, "the shrunk comm");
        test_condf(order_is(small, members, 3), "survivors keep their order");
    }
    test_condf(ncclCommDestroy(small) == ncclSuccess && ncclCommDestroy(world) == ncclSuccess,
               "destroy");
}

/* ---- scenarios: ranks that disagree -----------------------------------------------------------
 */

static void child_mismatch(void)
{
    ncclComm_t comm = init_world();
    size_t count = me == 3 ? 4 : C, total = (size_t)nranks * C;
    float *send = dev_alloc(total * 4), *recv = dev_alloc(total * 4);
    double want[4 * C];
    char why[160];
    ncclResult_t r;

    if (nranks != 4)
        fatal("mismatch wants 4 ranks");
    fill(ncclFloat32, send, total, v, me, 0);
    fill(ncclFloat32, recv, total, NULL, 0, SENTINEL);
    r = ncclAllGather(send, recv, count, ncclFloat32, comm, 0);
    for (size_t j = 0; j < total; j++) {
        size_t q = j / count, i = j % count;

        if (me == 3) /* its blocks are 4 wide: the first 4 of each rank's 6 */
            want[j] = j < 4 * count ? v((int)q, i) : SENTINEL;
        else /* rank 3's block: its 4 values, then zeros */
            want[j] = q == 3 && i >= 4 ? 0 : v((int)q, i);
    }
    test_condf(r == ncclSuccess && expect(ncclFloat32, recv, want, total, why, sizeof(why)),
               "all-gather where rank 3 sends 4, the others 6: success and %s%s",
               me == 3 ? "truncated blocks" : "rank 3's block padded with zeros", why);

    /* Ranks disagreeing on the root each take their own root's data. */
    fill(ncclFloat32, recv, total, NULL, 0, SENTINEL);
    r = ncclBroadcast(send, recv, C, ncclFloat32, me == 0 ? 0 : 1, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C ? v(me == 0 ? 0 : 1, j) : SENTINEL;
    test_condf(r == ncclSuccess && expect(ncclFloat32, recv, want, total, why, sizeof(why)),
               "broadcast where rank 0 says root 0, the others root 1: no error, each its own%s",
               why);

    /* Datatypes that disagree: garbage, no error, no crash. */
    r = ncclAllReduce(send, recv, C, me == 2 ? ncclFloat32 : ncclInt32, ncclSum, comm, 0);
    test_condf(r == ncclSuccess,
               "all-reduce where rank 2 says fp32 and the others int32: no error");

    /* p2p sizes that disagree: the receiver takes what fits, zeros after a short message. */
    if (me < 2) {
        int32_t s8[8] = {1, 2, 3, 4, 5, 6, 7, 8}, s2[2] = {9, 10}, got[4];

        if (me == 0) {
            r = ncclSend(s8, 8, ncclInt32, 1, comm, 0);
            test_condf(r == ncclSuccess && ncclSend(s2, 2, ncclInt32, 1, comm, 0) == ncclSuccess,
                       "sends of 8 then 2 int32 to rank 1");
        } else {
            r = ncclRecv(got, 4, ncclInt32, 0, comm, 0);
            test_condf(r == ncclSuccess && got[0] == 1 && got[3] == 4,
                       "receive of 4 from a send of 8: the first 4 (%d..%d)", got[0], got[3]);
            memset(got, 0x55, sizeof(got));
            r = ncclRecv(got, 4, ncclInt32, 0, comm, 0);
            test_condf(r == ncclSuccess && got[0] == 9 && got[1] == 10 && got[2] == 0 &&
                           got[3] == 0,
                       "receive of 4 from a send of 2: 2 values, then zeros");
        }
    }

    /* Each call took one round everywhere, so the ranks are still in step. */
    fill(ncclFloat32, recv, total, NULL, 0, SENTINEL);
    r = ncclAllReduce(send, recv, C, ncclFloat32, ncclSum, comm, 0);
    for (size_t j = 0; j < total; j++)
        want[j] = j < C ? red(ncclSum, ncclFloat32, nranks, j) : SENTINEL;
    test_condf(r == ncclSuccess && expect(ncclFloat32, recv, want, total, why, sizeof(why)),
               "an agreeing all-reduce afterwards is right%s", why);
    cudaFree(send);
    cudaFree(recv);
    test_condf(ncclCommDestroy(comm) == ncclSuccess, "destroy");
}

static void child_missing(void)
{
    ncclComm_t comm = init_world();
    float x[C] = {1, 2, 3, 4, 5, 6}, y[C];
    ncclResult_t r, async = ncclSuccess;
    double t0, took;

    r = ncclAllReduce(x, y, C, ncclFloat32, ncclSum, comm, 0);
    test_condf(r == ncclSuccess && y[0] == (float)nranks, "first all-reduce, everyone");
    if (me == nranks - 1) {
        test_condf(ncclCommDestroy(comm) == ncclSuccess, "rank %d skips the second and leaves", me);
        return;
    }
    t0 = now_s();
    r = ncclAllReduce(x, y, C, ncclFloat32, ncclSum, comm, 0);
    took = now_s() - t0;
    test_condf(r == ncclSystemError || r == ncclInternalError,
               "second all-reduce without rank %d: %s", nranks - 1, ncclGetErrorString(r));
    test_condf(took > 0.9 && took < 4, "gave up after %.2f s (SHAPETRACE_DOUBLE_TIMEOUT=1)", took);
    test_condf(strstr(ncclGetLastError(comm), "ncclAllReduce") &&
                   strstr(ncclGetLastError(comm), "waiting for rank 3 (1 of 4) to make this call"),
               "ncclGetLastError names the call and the missing rank: %s", ncclGetLastError(comm));
    test_condf(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSystemError,
               "ncclCommGetAsyncError reports the error");
    t0 = now_s();
    r = ncclAllReduce(x, y, C, ncclFloat32, ncclSum, comm, 0);
    test_condf(r != ncclSuccess && now_s() - t0 < 0.5, "the comm then refuses work at once");
    test_condf(ncclCommDestroy(comm) == ncclSuccess, "destroy after the timeout");
}

static void child_missing_p2p(void)
{
    ncclComm_t comm = init_world();
    unsigned char *buf = calloc(1, PAIR_MSG);
    ncclResult_t r;

    if (!buf)
        fatal("out of memory");
    if (me == 0) {
        r = ncclRecv(buf, 16, ncclUint8, 1, comm, 0);
        test_condf(r == ncclSystemError && strstr(ncclGetLastError(comm), "to send"),
                   "receive from a rank that never sends times out: %s", ncclGetLastError(comm));
    } else {
        /* Larger than the ring, and nobody receives. */
        r = ncclSend(buf, PAIR_MSG, ncclUint8, me, comm, 0);
        test_condf(r == ncclSystemError && strstr(ncclGetLastError(comm), "to receive"),
                   "send to self outside a group, never received, times out: %s",
                   ncclGetLastError(comm));
    }
    free(buf);
    test_condf(ncclCommDestroy(comm) == ncclSuccess, "destroy");
}

/* A split in a group that one rank never makes: the group fails after the timeout, and the comm
 * handed out at the call is left in error for the caller to destroy. */
static void child_missing_split(void)
{
    ncclComm_t comm = init_world(), sub = NULL;
    ncclResult_t r, async = ncclSuccess;
    double t0 = now_s();

    if (me == 1) {
        test_condf(ncclCommDestroy(comm) == ncclSuccess, "rank 1 never splits");
        return;
    }
    ncclGroupStart();
    ncclCommSplit(comm, 0, 0, &sub, NULL);
    r = ncclGroupEnd();
    test_condf(r == ncclSystemError && now_s() - t0 < 4, "the group's end fails after %.2f s",
               now_s() - t0);
    test_condf(sub && ncclCommGetAsyncError(sub, &async) == ncclSuccess && async == ncclSystemError,
               "the handed-out comm reports the error");
    test_condf(ncclCommDestroy(sub) == ncclSuccess && ncclCommDestroy(comm) == ncclSuccess,
               "destroy both");
}

/* ---- scenario: several communicators at once --------------------------------------------------
 */

struct loop {
    ncclComm_t comm;
    bool gather;
    int bad;
    ncclResult_t err;
};

#define LOOPS 40

static void *loop_main(void *p)
{
    struct loop *l = p;
    int32_t send[C], recv[64 * C];

    for (int it = 0; it < LOOPS; it++) {
        for (int j = 0; j < C; j++)
            send[j] = it * 100 + me * 10 + j;
        if (l->gather) {
            l->err = ncclAllGather(send, recv, C, ncclInt32, l->comm, 0);
            for (int q = 0; q < nranks; q++)
                for (int j = 0; j < C; j++)
                    l->bad += recv[q * C + j] != it * 100 + q * 10 + j;
        } else {
            l->err = ncclAllReduce(send, recv, C, ncclInt32, ncclSum, l->comm, 0);
            for (int j = 0; j < C; j++)
                l->bad += recv[j] != nranks * (it * 100 + j) + 10 * nranks * (nranks - 1) / 2;
        }
        if (l->err != ncclSuccess)
            break;
    }
    return NULL;
}

static void broadcast_id(ncclComm_t over, ncclUniqueId *id)
{
    if (me == 0 && ncclGetUniqueId(id) != ncclSuccess)
        fatal("ncclGetUniqueId");
    if (ncclBroadcast(id, id, sizeof(*id), ncclUint8, 0, over, 0) != ncclSuccess)
        fatal("broadcast of a unique id");
}

static void child_concurrent(void)
{
    ncclComm_t a = init_world(), b = NULL, c = NULL, d = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    struct loop la = {0}, lb = {0};
    ncclUniqueId idb, idc, idd;
    int32_t x = me + 1, ya = 0, yb[64] = {0}, yc = 0;
    pthread_t ta, tb;
    ncclResult_t r1, r2;

    /* b: the second id through the file (SHP_UID_FILE.1); c and d: ids broadcast over a. */
    if (shp_uid_exchange(&idb, me) != 0)
        fatal("second unique id");
    r1 = ncclCommInitRankConfig(&b, nranks, idb, me, &config);
    test_condf(r1 == ncclSuccess && b, "ncclCommInitRankConfig with the second exchanged id");
    broadcast_id(a, &idc);
    r1 = ncclCommInitRankScalable(&c, nranks, me, 1, &idc, NULL);
    test_condf(r1 == ncclSuccess && c, "ncclCommInitRankScalable with an id broadcast over a comm");
    broadcast_id(a, &idd);
    ncclGroupStart();
    r1 = ncclCommInitRank(&d, nranks, idd, me);
    {
        int n = -1;

        test_condf(r1 == ncclSuccess && d && ncclCommCount(d, &n) == ncclInvalidArgument,
                   "ncclCommInitRank inside a group: handed out, not usable before the end");
    }
    r2 = ncclGroupEnd();
    test_condf(r1 == ncclSuccess && r2 == ncclSuccess && d, "ncclCommInitRank inside a group");
    if (!b || !c || !d)
        fatal("communicators");

    /* Interleaved calls on four comms. */
    r1 = ncclAllReduce(&x, &ya, 1, ncclInt32, ncclSum, a, 0);
    r2 = ncclAllGather(&x, yb, 1, ncclInt32, b, 0);
    test_condf(r1 == ncclSuccess && r2 == ncclSuccess && ya == nranks * (nranks + 1) / 2 &&
                   yb[nranks - 1] == nranks,
               "interleaved all-reduce on a and all-gather on b");
    r1 = ncclBroadcast(&x, &yc, 1, ncclInt32, nranks - 1, c, 0);
    r2 = ncclAllReduce(&x, &ya, 1, ncclInt32, ncclMax, d, 0);
    test_condf(r1 == ncclSuccess && r2 == ncclSuccess && yc == nranks && ya == nranks,
               "broadcast on c, all-reduce max on d");

    /* One group, two comms, issued in opposite orders on odd and even ranks. */
    ya = 0;
    memset(yb, 0, sizeof(yb));
    ncclGroupStart();
    if (me % 2) {
        ncclAllGather(&x, yb, 1, ncclInt32, b, 0);
        ncclAllReduce(&x, &ya, 1, ncclInt32, ncclSum, a, 0);
    } else {
        ncclAllReduce(&x, &ya, 1, ncclInt32, ncclSum, a, 0);
        ncclAllGather(&x, yb, 1, ncclInt32, b, 0);
    }
    r1 = ncclGroupEnd();
    test_condf(r1 == ncclSuccess && ya == nranks * (nranks + 1) / 2 && yb[0] == 1,
               "a group with calls on two comms in different orders on different ranks");

    /* Two ranks per process: both made in one group, driven in one group. */
    {
        ncclComm_t e[2] = {NULL, NULL};
        ncclUniqueId ide;
        int32_t ye[2] = {0, 0}, xe[2] = {2 * me + 1, 2 * me + 2}, k = 2 * nranks;

        broadcast_id(a, &ide);
        ncclGroupStart();
        for (int i = 0; i < 2; i++)
            ncclCommInitRank(&e[i], 2 * nranks, ide, 2 * me + i);
        r1 = ncclGroupEnd();
        test_condf(r1 == ncclSuccess && e[0] && e[1], "two ranks of one comm made in one group");
        ncclGroupStart();
        for (int i = 0; i < 2; i++)
            ncclAllReduce(&xe[i], &ye[i], 1, ncclInt32, ncclSum, e[i], 0);
        r1 = ncclGroupEnd();
        test_condf(r1 == ncclSuccess && ye[0] == k * (k + 1) / 2 && ye[1] == ye[0],
                   "an all-reduce over %d ranks, two per process, in one group: %d", k, ye[0]);
        test_condf(ncclCommDestroy(e[0]) == ncclSuccess && ncclCommDestroy(e[1]) == ncclSuccess,
                   "destroy both");
    }

    /* Two threads, each driving its own comm. */
    la.comm = a;
    lb.comm = b;
    lb.gather = true;
    pthread_create(&ta, NULL, loop_main, &la);
    pthread_create(&tb, NULL, loop_main, &lb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    test_condf(la.err == ncclSuccess && la.bad == 0 && lb.err == ncclSuccess && lb.bad == 0,
               "two threads, %d all-reduces on a and %d all-gathers on b at once (bad %d, %d)",
               LOOPS, LOOPS, la.bad, lb.bad);
    test_condf(ncclCommDestroy(d) == ncclSuccess && ncclCommDestroy(c) == ncclSuccess &&
                   ncclCommDestroy(b) == ncclSuccess && ncclCommDestroy(a) == ncclSuccess,
               "destroy four comms");
}

/* ---- the parent -------------------------------------------------------------------------------
 */

struct scenario {
    const char *name;
    void (*child)(void);
    int nranks;
    const char *timeout; /* SHAPETRACE_DOUBLE_TIMEOUT for the ranks */
    void (*parent)(const char *err, double secs);
};

static int count_lines(const char *text, const char *part)
{
    int n = 0;

    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];

        snprintf(buf, sizeof(buf), "%.*s", (int)(len < sizeof(buf) - 1 ? len : sizeof(buf) - 1),
                 line);
        n += strstr(buf, part) != NULL;
        line = end ? end + 1 : NULL;
    }
    return n;
}

static void quiet(const char *err, double secs)
{
    (void)secs;
    test_condf(!*err, "no messages on stderr");
}

static void after_missing(const char *err, double secs)
{
    test_condf(count_lines(err, "timed out") == 3, "three ranks each print one timeout message");
    test_condf(count_lines(err, "waiting for rank 3 (1 of 4) to make this call") == 3,
               "each message says the call waits for rank 3");
    test_condf(count_lines(err, "ncclAllReduce(count 6, fp32, sum) : rank 0 of 4") == 1 &&
                   count_lines(err, "rank 1 of 4") == 1 && count_lines(err, "rank 2 of 4") == 1,
               "each names the op and its rank");
    test_condf(secs < 6, "the scenario ends in %.2f s", secs);
}

static void after_missing_split(const char *err, double secs)
{
    test_condf(count_lines(err, "ncclCommSplit : rank 0 of 2 timed out") == 1 &&
                   count_lines(err, "waiting for rank 1 (1 of 2) to make this call") == 1,
               "one message: the split waits for rank 1");
    test_condf(secs < 6, "the scenario ends in %.2f s", secs);
}

static void after_missing_p2p(const char *err, double secs)
{
    test_condf(count_lines(err, "ncclRecv(count 16, uint8, peer 1) : rank 0 of 2") == 1 &&
                   count_lines(err, "waiting for rank 1 to send") == 1,
               "the receive's message names its peer");
    test_condf(count_lines(err, "ncclSend(count 2097152, uint8, peer 1) : rank 1 of 2") == 1 &&
                   count_lines(err, "waiting for rank 1 to receive") == 1,
               "the send's message names its peer");
    test_condf(secs < 6, "the scenario ends in %.2f s", secs);
}

static const struct scenario scenarios[] = {
    {"collectives", child_collectives, 4, "5", quiet},
    {"collectives", child_collectives, 2, "5", quiet},
    {"big", child_big, 4, "5", quiet},
    {"p2p_group", child_p2p_group, 4, "5", quiet},
    {"p2p_blocking", child_p2p_blocking, 4, "5", quiet},
    {"split", child_split, 4, "5", quiet},
    {"shrink", child_shrink, 4, "5", quiet},
    {"nonblocking", child_nonblocking, 4, "5", quiet},
    {"mismatch", child_mismatch, 4, "5", quiet},
    {"missing", child_missing, 4, "1", after_missing},
    {"missing_p2p", child_missing_p2p, 2, "1", after_missing_p2p},
    {"missing_split", child_missing_split, 2, "1", after_missing_split},
    {"concurrent", child_concurrent, 4, "5", quiet},
};

#define NSCENARIOS (sizeof(scenarios) / sizeof(scenarios[0]))

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    long len;

    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)len + 1))) {
        text[fread(text, 1, (size_t)len, f)] = 0;
    }
    if (f)
        fclose(f);
    return text ? text : strdup("");
}

/* Runs the scenario under the launcher, its stdout and stderr each in a file. Returns the
 * launcher's exit status, or -1. */
static int launch(const char *launcher, const char *self, const struct scenario *s, char **out,
                  char **err, double *secs)
{
    char out_path[] = "/tmp/test_multirank.out.XXXXXX",
         err_path[] = "/tmp/test_multirank.err.XXXXXX";
    char n[16];
    int fo = mkstemp(out_path), fe = mkstemp(err_path), st = 0;
    double t0 = now_s();
    pid_t pid;

    if (fo < 0 || fe < 0)
        return -1;
    snprintf(n, sizeof(n), "%d", s->nranks);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        dup2(fo, STDOUT_FILENO);
        dup2(fe, STDERR_FILENO);
        setenv("SHAPETRACE_DOUBLE_TIMEOUT", s->timeout, 1);
        execl(launcher, launcher, "-n", n, "--timeout", LAUNCH_LIMIT, "--", self, "--child",
              s->name, (char *)NULL);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        st = -1;
    *secs = now_s() - t0;
    close(fo);
    close(fe);
    *out = slurp(out_path);
    *err = slurp(err_path);
    unlink(out_path);
    unlink(err_path);
    if (st == -1)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Echoes the ranks' check lines, counting them, and anything else as a comment. */
static void take_lines(const char *out)
{
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);

        if (!strncmp(line, "ok  ", 4))
            test_passed++;
        else if (!strncmp(line, "FAIL", 4))
            test_failed++;
        printf("%s%.*s\n", !strncmp(line, "ok  ", 4) || !strncmp(line, "FAIL", 4) ? "" : "# ", len,
               line);
        if (!end)
            break;
        line = end + 1;
    }
}

static int parent_main(void)
{
    char self[PATH_MAX], launcher[PATH_MAX + 16], *slash;
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    double t0 = now_s();

    if (len <= 0)
        return 2;
    self[len] = 0;
    snprintf(launcher, sizeof(launcher), "%s", self);
    if ((slash = strrchr(launcher, '/')))
        strcpy(slash + 1, "shp_launch");
    test_condf(access(launcher, X_OK) == 0, "launcher %s", launcher);
    for (size_t k = 0; k < NSCENARIOS && access(launcher, X_OK) == 0; k++) {
        const struct scenario *s = &scenarios[k];
        char *out = NULL, *err = NULL;
        double secs = 0;
        int st = launch(launcher, self, s, &out, &err, &secs);

        take_lines(out);
        test_condf(st == 0, "%s on %d ranks: every rank exits 0 (launcher status %d, %.2f s)",
                   s->name, s->nranks, st, secs);
        s->parent(err, secs);
        if (*err && s->parent == quiet)
            printf("# stderr of %s:\n%s", s->name, err);
        free(out);
        free(err);
    }
    test_condf(now_s() - t0 < 30, "the whole test took %.1f s", now_s() - t0);
    return test_report();
}

int main(int argc, char **argv)
{
    const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE");

    if (argc < 3 || strcmp(argv[1], "--child"))
        return parent_main();
    scenario = argv[2];
    me = rank ? atoi(rank) : 0;
    nranks = world ? atoi(world) : 1;
    snprintf(group, sizeof(group), "%s r%d", scenario, me);
    test_group(group);
    for (size_t k = 0; k < NSCENARIOS; k++) {
        if (!strcmp(scenarios[k].name, scenario)) {
            scenarios[k].child();
            return test_failed > 0;
        }
    }
    fatal("no scenario %s", scenario);
}
