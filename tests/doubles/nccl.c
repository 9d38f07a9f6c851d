/* Test double of libnccl.so.2 (NCCL 2.28): communicators, groups, and every collective and p2p
 * call with real data movement and reductions, for ranks in this process (cliques) or in other
 * processes (POSIX shared memory). Defined against the real nccl.h; see docs/testing.md for its
 * limits. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* nccl.h declares ncclGroupStart, ncclGroupEnd and ncclResetDebugInit (and their pnccl twins)
 * with empty parentheses: a prototype in C++, an old-style declaration to -Wstrict-prototypes in C
 * (the Makefile's -isystem hides it; a plain -I build does not). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

/* The same two, with prototypes, so -Wmissing-prototypes sees the definitions declared. */
ncclResult_t pncclGroupStart(void);
ncclResult_t pncclGroupEnd(void);

/* As in NCCL itself: pncclX is the strong definition and ncclX a weak alias of it, the PMPI-style
 * hook that shapetrace resolves. Exported even from a -fvisibility=hidden build. */
#define NCCL_API(ret, name, ...)                                                                   \
    __attribute__((visibility("default"))) ret name(__VA_ARGS__)                                   \
        __attribute__((weak, alias("p" #name)));                                                   \
    __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

#define COMM_MAGIC 0x73687064636f6d6dULL /* "shpdcomm" */
#define CONFIG_MAGIC 0xcafebeefU         /* what NCCL_CONFIG_INITIALIZER stores */

/* Ranks created together (one ncclCommInitAll, one color of one split, ...). Collectives and p2p
 * calls meet their counterparts only within the same clique. */
struct clique {
    int nranks;
    int refs; /* live communicators; guarded by clique_lock */
};

struct shm_seg;

/* A rank of a clique (clique set, shm NULL) or of a communicator whose ranks are processes that
 * meet in a shared-memory segment (shm set, clique NULL). */
struct ncclComm {
    uint64_t magic;
    struct clique *clique;
    int rank;
    int nranks;
    int device;
    bool finalized;
    ncclResult_t async_error; /* set when a call on a shared-memory comm timed out or failed */
    unsigned long long ncoll; /* collectives completed: numbers the one that fails to match */
    struct shm_seg *shm;
    size_t shm_size;
    char shm_name[48];
    bool entered;       /* this rank counts among the segment's members */
    bool joined;        /* every rank has mapped the segment */
    bool pending;       /* handed out inside a group that has not ended: not usable yet */
    uint64_t ready_ns;  /* made non-blocking (config.blocking = 0): in progress until then, as if
                           NCCL finished it in the background; 0 for a blocking comm */
    uint32_t round;     /* the next collective round, counted alike by every rank */
    uint32_t nchildren; /* splits and shrinks made from this comm: names their segments */
};

static pthread_mutex_t clique_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- errors ---------------------------------------------------------------------------------- */

/* NCCL keeps one buffer per process; one per thread cannot be overwritten under a reader. */
static _Thread_local char last_error[1024];

static bool warn_enabled(void)
{
    const char *level = getenv("NCCL_DEBUG");

    return level && (!strcasecmp(level, "WARN") || !strcasecmp(level, "INFO") ||
                     !strcasecmp(level, "TRACE"));
}

__attribute__((format(printf, 3, 0))) static ncclResult_t vfail(ncclResult_t r, bool loud,
                                                                const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    if (loud || warn_enabled()) {
        char line[1200];
        int n = snprintf(line, sizeof(line), "nccl-double:%d NCCL WARN %s\n", (int)getpid(),
                         last_error);

        if (n > 0)
            (void)!write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line));
    }
    return r;
}

/* Records the message for ncclGetLastError, prints it as NCCL would under NCCL_DEBUG=WARN, and
 * returns r. */
__attribute__((format(printf, 2, 3))) static ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    r = vfail(r, false, fmt, ap);
    va_end(ap);
    return r;
}

/* The same, always on stderr: for a timeout, where NCCL would hang and a test that saw only the
 * error code would not know why. */
__attribute__((format(printf, 2, 3))) static ncclResult_t fail_loud(ncclResult_t r, const char *fmt,
                                                                    ...)
{
    va_list ap;

    va_start(ap, fmt);
    r = vfail(r, true, fmt, ap);
    va_end(ap);
    return r;
}

/* ---- datatypes ------------------------------------------------------------------------------- */

enum num_class { NUM_SIGNED, NUM_UNSIGNED, NUM_FLOAT };

struct dtype_info {
    const char *name; /* as shapetrace prints it */
    size_t size;
    enum num_class cls;
};

static const struct dtype_info dtypes[ncclNumTypes] = {
    [ncclInt8] = {"int8", 1, NUM_SIGNED},         [ncclUint8] = {"uint8", 1, NUM_UNSIGNED},
    [ncclInt32] = {"int32", 4, NUM_SIGNED},       [ncclUint32] = {"uint32", 4, NUM_UNSIGNED},
    [ncclInt64] = {"int64", 8, NUM_SIGNED},       [ncclUint64] = {"uint64", 8, NUM_UNSIGNED},
    [ncclFloat16] = {"fp16", 2, NUM_FLOAT},       [ncclFloat32] = {"fp32", 4, NUM_FLOAT},
    [ncclFloat64] = {"fp64", 8, NUM_FLOAT},       [ncclBfloat16] = {"bf16", 2, NUM_FLOAT},
    [ncclFloat8e4m3] = {"fp8e4m3", 1, NUM_FLOAT}, [ncclFloat8e5m2] = {"fp8e5m2", 1, NUM_FLOAT},
};

static const char *const redop_names[ncclNumOps] = {"sum", "prod", "max", "min", "avg"};

/* The narrow float formats. NCCL converts fp8 with __NV_SATFINITE (cuda_fp8.hpp's constructors):
 * out-of-range values, infinities included, clamp to the largest finite value. */
struct minifloat {
    int man_bits;
    int exp_bits;
    int bias;
    bool ieee_top; /* the all-ones exponent is inf/NaN; else (e4m3) only all-ones bits are NaN */
    bool saturate;
};

static const struct minifloat fmt_fp16 = {10, 5, 15, true, false};
static const struct minifloat fmt_bf16 = {7, 8, 127, true, false};
static const struct minifloat fmt_e4m3 = {3, 4, 7, false, true};
static const struct minifloat fmt_e5m2 = {2, 5, 15, true, true};

/* 2^e for -1022 <= e <= 1023, exactly, without libm: the Makefile links the doubles without -lm. */
static double pow2(int e)
{
    uint64_t bits = (uint64_t)(e + 1023) << 52;
    double d;

    memcpy(&d, &bits, sizeof(d));
    return d;
}

static double mini_to_double(uint32_t bits, const struct minifloat *f)
{
    uint32_t man_mask = (1u << f->man_bits) - 1;
    uint32_t exp_max = (1u << f->exp_bits) - 1;
    uint32_t exp = (bits >> f->man_bits) & exp_max;
    uint32_t man = bits & man_mask;
    bool neg = (bits >> (f->man_bits + f->exp_bits)) & 1;
    double v;

    if (exp == exp_max && (f->ieee_top || man == man_mask))
        v = f->ieee_top && man == 0 ? INFINITY : NAN;
    else if (exp == 0)
        v = man * pow2(1 - f->bias - f->man_bits);
    else
        v = (man | (man_mask + 1)) * pow2((int)exp - f->bias - f->man_bits);
    return neg ? -v : v;
}

/* Rounds a float to the format, to nearest with ties to even, on the integer significand so that
 * no libm call and no double rounding is involved. */
static uint32_t float_to_mini(float x, const struct minifloat *f)
{
    int m = f->man_bits;
    uint32_t man_mask = (1u << m) - 1;
    uint32_t exp_max = (1u << f->exp_bits) - 1;
    uint32_t max_finite =
        f->ieee_top ? ((exp_max - 1) << m | man_mask) : (exp_max << m | (man_mask - 1));
    uint32_t overflow, u, ax, sign, bits;
    int fexp, e2, top, e, shift;
    uint64_t sig, q;

    memcpy(&u, &x, sizeof(u));
    sign = (u >> 31) << (m + f->exp_bits);
    ax = u & 0x7fffffffu;
    overflow = f->saturate ? max_finite : exp_max << m;
    if (ax > 0x7f800000u)
        return (1u << (m + f->exp_bits)) - 1; /* CUDA's canonical NaN: every bit but the sign */
    if (ax == 0x7f800000u)
        return sign | overflow;
    if (ax == 0)
        return sign;
    fexp = (int)(ax >> 23);
    sig = fexp ? (ax & 0x7fffffu) | 0x800000u : ax & 0x7fffffu;
    e2 = (fexp ? fexp : 1) - 150; /* |x| = sig * 2^e2 */
    top = e2 + 63 - __builtin_clzll(sig);
    e = top < 1 - f->bias ? 1 - f->bias : top;
    shift = e - m - e2; /* significand bits that fall below the format's last mantissa bit */
    if (shift <= 0) {
        q = sig << -shift;
    } else if (shift > 40) {
        q = 0;
    } else {
        uint64_t rem = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);

        q = sig >> shift;
        if (rem > half || (rem == half && (q & 1)))
            q++;
    }
    if (q >> (m + 1)) {
        q >>= 1;
        e++;
    }
    bits = (q >> m) ? (uint32_t)(e + f->bias) << m | (uint32_t)(q & man_mask) : (uint32_t)q;
    return sign | (bits > max_finite ? overflow : bits);
}

static double load_float(const void *buf, size_t i, ncclDataType_t t)
{
    const unsigned char *p = (const unsigned char *)buf + i * dtypes[t].size;
    uint16_t h;
    float f;
    double d;

    switch (t) {
    case ncclFloat16:
        memcpy(&h, p, sizeof(h));
        return mini_to_double(h, &fmt_fp16);
    case ncclBfloat16:
        memcpy(&h, p, sizeof(h));
        return mini_to_double(h, &fmt_bf16);
    case ncclFloat8e4m3:
        return mini_to_double(*p, &fmt_e4m3);
    case ncclFloat8e5m2:
        return mini_to_double(*p, &fmt_e5m2);
    case ncclFloat32:
        memcpy(&f, p, sizeof(f));
        return f;
    default:
        memcpy(&d, p, sizeof(d));
        return d;
    }
}

static void store_float(void *buf, size_t i, ncclDataType_t t, double v)
{
    unsigned char *p = (unsigned char *)buf + i * dtypes[t].size;
    float f = (float)v;
    uint16_t h;

    switch (t) {
    case ncclFloat16:
        h = (uint16_t)float_to_mini(f, &fmt_fp16);
        memcpy(p, &h, sizeof(h));
        break;
    case ncclBfloat16:
        h = (uint16_t)float_to_mini(f, &fmt_bf16);
        memcpy(p, &h, sizeof(h));
        break;
    case ncclFloat8e4m3:
        *p = (unsigned char)float_to_mini(f, &fmt_e4m3);
        break;
    case ncclFloat8e5m2:
        *p = (unsigned char)float_to_mini(f, &fmt_e5m2);
        break;
    case ncclFloat32:
        memcpy(p, &f, sizeof(f));
        break;
    default:
        memcpy(p, &v, sizeof(v));
        break;
    }
}

/* Integers travel as their bits zero-extended to 64; arithmetic on them wraps like the GPU's. */
static uint64_t load_bits(const void *buf, size_t i, size_t size)
{
    const unsigned char *p = (const unsigned char *)buf + i * size;
    uint8_t b;
    uint32_t w;
    uint64_t q;

    switch (size) {
    case 1:
        memcpy(&b, p, 1);
        return b;
    case 4:
        memcpy(&w, p, 4);
        return w;
    default:
        memcpy(&q, p, 8);
        return q;
    }
}

static void store_bits(void *buf, size_t i, size_t size, uint64_t v)
{
    unsigned char *p = (unsigned char *)buf + i * size;
    uint8_t b = (uint8_t)v;
    uint32_t w = (uint32_t)v;

    switch (size) {
    case 1:
        memcpy(p, &b, 1);
        break;
    case 4:
        memcpy(p, &w, 4);
        break;
    default:
        memcpy(p, &v, 8);
        break;
    }
}

static uint64_t truncate_bits(uint64_t v, size_t size)
{
    return size >= 8 ? v : v & ((1ull << (8 * size)) - 1);
}

static int64_t sign_extend(uint64_t v, size_t size)
{
    uint64_t sign = 1ull << (8 * size - 1);

    v = truncate_bits(v, size);
    return (int64_t)((v ^ sign) - sign);
}

static uint64_t combine_int(ncclRedOp_t op, enum num_class cls, size_t size, uint64_t a, uint64_t b)
{
    bool less;

    switch (op) {
    case ncclProd:
        return truncate_bits(a * b, size);
    case ncclMax:
    case ncclMin:
        less = cls == NUM_SIGNED ? sign_extend(a, size) < sign_extend(b, size) : a < b;
        return (op == ncclMax) == less ? b : a;
    default: /* sum, and the sum that avg divides */
        return truncate_bits(a + b, size);
    }
}

/* max and min ignore a NaN operand, as fmaxf and fminf do; written out because the doubles are
 * linked without libm. */
static double combine_float(ncclRedOp_t op, double a, double b)
{
    switch (op) {
    case ncclProd:
        return a * b;
    case ncclMax:
        return isnan(a) ? b : isnan(b) ? a : a > b ? a : b;
    case ncclMin:
        return isnan(a) ? b : isnan(b) ? a : a < b ? a : b;
    default:
        return a + b;
    }
}

/* Float types narrower than fp64 reduce in float: each step is rounded to float. */
static double narrow(ncclDataType_t t, double v)
{
    return t == ncclFloat64 ? v : (double)(float)v;
}

/* out[i] = in[0][i] op in[1][i] op ... in rank order. Integers wrap at their width and avg
 * divides the wrapped sum (C division, toward zero); fp16, bf16 and fp8 are widened to float,
 * reduced in float and rounded back once, to nearest even. out must not overlap any input. */
static void reduce(void *out, const void *const *in, int n, size_t count, ncclDataType_t t,
                   ncclRedOp_t op)
{
    enum num_class cls = dtypes[t].cls;
    size_t size = dtypes[t].size;

    for (size_t i = 0; i < count; i++) {
        if (cls == NUM_FLOAT) {
            double acc = load_float(in[0], i, t);

            for (int r = 1; r < n; r++)
                acc = narrow(t, combine_float(op, acc, load_float(in[r], i, t)));
            if (op == ncclAvg)
                acc = narrow(t, acc / n);
            store_float(out, i, t, acc);
        } else {
            uint64_t acc = load_bits(in[0], i, size);

            for (int r = 1; r < n; r++)
                acc = combine_int(op, cls, size, acc, load_bits(in[r], i, size));
            if (op == ncclAvg && cls == NUM_SIGNED)
                acc = (uint64_t)(sign_extend(acc, size) / n);
            else if (op == ncclAvg)
                acc /= (uint64_t)n;
            store_bits(out, i, size, acc);
        }
    }
}

/* ---- operations ------------------------------------------------------------------------------ */

enum op_kind {
    OP_ALL_REDUCE,
    OP_BROADCAST,
    OP_REDUCE,
    OP_ALL_GATHER,
    OP_REDUCE_SCATTER,
    OP_ALLTOALL,
    OP_GATHER,
    OP_SCATTER,
    OP_SEND,
    OP_RECV,
    OP_SPLIT,
    OP_SHRINK,
    OP_INIT, /* the wait for the other processes of an ncclCommInitRank made inside a group */
    OP_KINDS
};

/* How calls meet at ncclGroupEnd. The k-th call of a family on one rank meets the k-th of the same
 * family on every other rank of the clique; a send meets the recv posted for it. */
enum family { FAM_COLL, FAM_P2P, FAM_SPLIT, FAM_SHRINK, FAM_INIT };

/* One call, as queued until its group ends. */
struct op {
    enum op_kind kind;
    ncclComm_t comm;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t redop;
    int root; /* the root, or the peer of a send or recv */
    int color;
    int key;
    int *exclude; /* shrink: the excluded ranks, sorted; owned by the queue */
    int nexclude;
    ncclComm_t *newcomm;
    ncclComm_t child; /* split, shrink in a group: the comm already handed out in *newcomm */
    const char *fn;   /* the API name when ops[kind].name is not it (the ncclCommInitRank family) */
    bool matched;
    cudaStream_t stream; /* collectives and p2p: a capturing stream records the call (below) */
};

/* A set of calls that run together: a collective's calls by rank, a split's or shrink's by rank
 * (NULL for ranks a shrink leaves out), or {send, recv}. */
struct job {
    enum op_kind kind;
    size_t first; /* queue index of the earliest call: jobs run in that order */
    struct clique *clique;
    enum family family;
    size_t seq;
    int nmembers;
    struct op **members;
};

/* The data movement, one function per operation, each seeing every rank's call at once. A
 * multi-process transport replaces these with ones that exchange each rank's part. */
typedef ncclResult_t (*run_fn)(struct op *const *members, int n);

struct op_info {
    const char *name;
    enum family family;
    bool has_redop;
    bool has_root;
    run_fn run;
};

static size_t elem_size(const struct op *op)
{
    return dtypes[op->dtype].size;
}

static ncclResult_t no_memory(const char *what)
{
    return fail(ncclSystemError, "%s : out of host memory", what);
}

static ncclResult_t reduce_to(struct op *const *m, int n, size_t count, void **result)
{
    const void **in = malloc((size_t)n * sizeof(*in));
    void *res = malloc(count * elem_size(m[0]));

    if (!in || !res) {
        free(in);
        free(res);
        return no_memory("reduction");
    }
    for (int r = 0; r < n; r++)
        in[r] = m[r]->sendbuff;
    reduce(res, in, n, count, m[0]->dtype, m[0]->redop);
    free(in);
    *result = res;
    return ncclSuccess;
}

static ncclResult_t run_all_reduce(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);
    ncclResult_t r;
    void *res;

    if (bytes == 0)
        return ncclSuccess;
    if ((r = reduce_to(m, n, m[0]->count, &res)) != ncclSuccess)
        return r;
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, res, bytes);
    free(res);
    return ncclSuccess;
}

static ncclResult_t run_reduce(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);
    ncclResult_t r;
    void *res;

    if (bytes == 0)
        return ncclSuccess;
    if ((r = reduce_to(m, n, m[0]->count, &res)) != ncclSuccess)
        return r;
    memcpy(m[m[0]->root]->recvbuff, res, bytes);
    free(res);
    return ncclSuccess;
}

static ncclResult_t run_reduce_scatter(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    ncclResult_t r;
    void *res;

    if (chunk == 0)
        return ncclSuccess;
    if ((r = reduce_to(m, n, m[0]->count * (size_t)n, &res)) != ncclSuccess)
        return r;
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, (char *)res + (size_t)i * chunk, chunk);
    free(res);
    return ncclSuccess;
}

/* Copies go through a staging buffer holding every input before any output is written, so
 * in-place calls (output overlapping some rank's input) see the inputs as they were. */
static ncclResult_t run_broadcast(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);
    void *stage;

    if (bytes == 0)
        return ncclSuccess;
    if (!(stage = malloc(bytes)))
        return no_memory("ncclBroadcast");
    memcpy(stage, m[m[0]->root]->sendbuff, bytes);
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, stage, bytes);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_all_gather(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(chunk * (size_t)n)))
        return no_memory("ncclAllGather");
    for (int i = 0; i < n; i++)
        memcpy(stage + (size_t)i * chunk, m[i]->sendbuff, chunk);
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, stage, chunk * (size_t)n);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_alltoall(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    size_t row = chunk * (size_t)n;
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(row * (size_t)n)))
        return no_memory("ncclAlltoAll");
    for (int i = 0; i < n; i++)
        memcpy(stage + (size_t)i * row, m[i]->sendbuff, row);
    /* Rank j receives, at block i, what rank i sent from its block j. */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            memcpy((char *)m[j]->recvbuff + (size_t)i * chunk,
                   stage + (size_t)i * row + (size_t)j * chunk, chunk);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_gather(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(chunk * (size_t)n)))
        return no_memory("ncclGather");
    for (int i = 0; i < n; i++)
        memcpy(stage + (size_t)i * chunk, m[i]->sendbuff, chunk);
    memcpy(m[m[0]->root]->recvbuff, stage, chunk * (size_t)n);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_scatter(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(chunk * (size_t)n)))
        return no_memory("ncclScatter");
    memcpy(stage, m[m[0]->root]->sendbuff, chunk * (size_t)n);
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, stage + (size_t)i * chunk, chunk);
    free(stage);
    return ncclSuccess;
}

/* members[0] is the send, members[1] its recv. */
static ncclResult_t run_send_recv(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);

    (void)n;
    if (bytes)
        memmove(m[1]->recvbuff, m[0]->sendbuff, bytes);
    return ncclSuccess;
}

static ncclResult_t run_split(struct op *const *m, int n);
static ncclResult_t run_shrink(struct op *const *m, int n);

static const struct op_info ops[OP_KINDS] = {
    [OP_ALL_REDUCE] = {"ncclAllReduce", FAM_COLL, true, false, run_all_reduce},
    [OP_BROADCAST] = {"ncclBroadcast", FAM_COLL, false, true, run_broadcast},
    [OP_REDUCE] = {"ncclReduce", FAM_COLL, true, true, run_reduce},
    [OP_ALL_GATHER] = {"ncclAllGather", FAM_COLL, false, false, run_all_gather},
    [OP_REDUCE_SCATTER] = {"ncclReduceScatter", FAM_COLL, true, false, run_reduce_scatter},
    [OP_ALLTOALL] = {"ncclAlltoAll", FAM_COLL, false, false, run_alltoall},
    [OP_GATHER] = {"ncclGather", FAM_COLL, false, true, run_gather},
    [OP_SCATTER] = {"ncclScatter", FAM_COLL, false, true, run_scatter},
    [OP_SEND] = {"ncclSend", FAM_P2P, false, false, run_send_recv},
    [OP_RECV] = {"ncclRecv", FAM_P2P, false, false, NULL},
    [OP_SPLIT] = {"ncclCommSplit", FAM_SPLIT, false, false, run_split},
    [OP_SHRINK] = {"ncclCommShrink", FAM_SHRINK, false, false, run_shrink},
    [OP_INIT] = {"ncclCommInitRank", FAM_INIT, false, false, NULL},
};

/* ---- communicators --------------------------------------------------------------------------- */

static int env_int(const char *name, int fallback)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (!s || !*s)
        return fallback;
    errno = 0;
    v = strtol(s, &end, 10);
    return errno || *end || v < 0 || v > 4096 ? fallback : (int)v;
}

/* The same variable and default as the libcudart double, so the two agree without linking. */
static int device_count(void)
{
    return env_int("SHAPETRACE_DOUBLE_DEVICES", 8);
}

/* NCCL binds a rank to the caller's current device. Ask whichever libcudart is loaded, looked up
 * at run time so that this library needs none; without one, torchrun's LOCAL_RANK or 0. */
static int current_device(void)
{
    __typeof__(&cudaGetDevice) get =
        (__typeof__(&cudaGetDevice))dlsym(RTLD_DEFAULT, "cudaGetDevice");
    int dev;

    if (get && get(&dev) == cudaSuccess)
        return dev;
    return env_int("LOCAL_RANK", 0);
}

static struct clique *new_clique(int nranks)
{
    struct clique *c = calloc(1, sizeof(*c));

    if (c)
        c->nranks = nranks;
    return c;
}

static ncclComm_t new_comm(struct clique *c, int rank, int device)
{
    ncclComm_t comm = calloc(1, sizeof(*comm));

    if (!comm)
        return NULL;
    comm->magic = COMM_MAGIC;
    comm->clique = c;
    comm->rank = rank;
    comm->nranks = c->nranks;
    comm->device = device;
    pthread_mutex_lock(&clique_lock);
    c->refs++;
    pthread_mutex_unlock(&clique_lock);
    return comm;
}

static void free_comm(ncclComm_t comm)
{
    struct clique *c = comm->clique;
    bool last;

    if (c) {
        pthread_mutex_lock(&clique_lock);
        last = --c->refs == 0;
        pthread_mutex_unlock(&clique_lock);
        if (last)
            free(c);
    }
    if (comm->shm) {
        /* Joined segments were unlinked when the last rank arrived; one whose join timed out
         * must not stay behind under its name. A rank refused at the door leaves the name to
         * those that entered, so that a late rank still finds them. */
        if (comm->entered && !comm->joined)
            shm_unlink(comm->shm_name);
        munmap(comm->shm, comm->shm_size);
    }
    comm->magic = 0;
    free(comm);
}

/* One new clique of k ranks: new rank i is the caller at old rank order[i]. On failure nothing is
 * left allocated. */
static bool make_clique(int k, const int *order, struct op *const *m, ncclComm_t *made)
{
    struct clique *c = new_clique(k);

    if (!c)
        return false;
    for (int i = 0; i < k; i++) {
        made[order[i]] = new_comm(c, i, m[order[i]]->comm->device);
        if (!made[order[i]]) {
            for (int j = 0; j < i; j++) {
                free_comm(made[order[j]]);
                made[order[j]] = NULL;
            }
            if (i == 0)
                free(c);
            return false;
        }
    }
    return true;
}

static ncclResult_t hand_out(struct op *const *m, int n, ncclComm_t *made, bool ok,
                             const char *what)
{
    if (!ok) {
        for (int r = 0; r < n; r++)
            if (made[r])
                free_comm(made[r]);
        free(made);
        return no_memory(what);
    }
    for (int r = 0; r < n; r++)
        if (m[r])
            *m[r]->newcomm = made[r];
    free(made);
    return ncclSuccess;
}

/* Each color becomes a clique whose ranks are ordered by key, then by old rank. */
static ncclResult_t run_split(struct op *const *m, int n)
{
    ncclComm_t *made = calloc((size_t)n, sizeof(*made));
    int *order = malloc((size_t)n * sizeof(*order));
    bool ok = made && order;

    for (int r = 0; ok && r < n; r++) {
        int k = 0;

        if (m[r]->color == NCCL_SPLIT_NOCOLOR || made[r])
            continue;
        for (int s = r; s < n; s++) {
            int j;

            if (m[s]->color != m[r]->color)
                continue;
            for (j = k; j > 0 && m[order[j - 1]]->key > m[s]->key; j--)
                order[j] = order[j - 1];
            order[j] = s;
            k++;
        }
        ok = make_clique(k, order, m, made);
    }
    free(order);
    if (!made)
        return no_memory("ncclCommSplit");
    return hand_out(m, n, made, ok, "ncclCommSplit");
}

/* The survivors keep their order; the excluded ranks (NULL members) get nothing. */
static ncclResult_t run_shrink(struct op *const *m, int n)
{
    ncclComm_t *made = calloc((size_t)n, sizeof(*made));
    int *order = malloc((size_t)n * sizeof(*order));
    bool ok = made && order;
    int k = 0;

    for (int r = 0; ok && r < n; r++)
        if (m[r])
            order[k++] = r;
    if (ok)
        ok = make_clique(k, order, m, made);
    free(order);
    if (!made)
        return no_memory("ncclCommShrink");
    return hand_out(m, n, made, ok, "ncclCommShrink");
}

static ncclResult_t check_comm(ncclComm_t comm, const char *fn)
{
    if (!comm)
        return fail(ncclInvalidArgument, "%s : comm argument is NULL", fn);
    if (comm->magic != COMM_MAGIC)
        return fail(ncclInvalidArgument, "%s : comm %p is not a live communicator", fn,
                    (void *)comm);
    return ncclSuccess;
}

static uint64_t now_ns(void);

/* Whether the comm's creation is still in progress: in a group that has not ended, or made
 * non-blocking and not finished yet. Asking costs nothing and changes nothing, as
 * ncclCommGetAsyncError in NCCL is a read. */
static bool in_progress(ncclComm_t comm)
{
    return comm->pending || (comm->ready_ns && now_ns() < comm->ready_ns);
}

/* How long a non-blocking creation stays in progress (SHAPETRACE_DOUBLE_NONBLOCKING_MS, default
 * 20): the work is done at the call, the comm reported ready only once this has passed, so that
 * a caller must poll ncclCommGetAsyncError as with NCCL. */
static void nonblocking(ncclComm_t comm)
{
    const char *v = getenv("SHAPETRACE_DOUBLE_NONBLOCKING_MS");
    long ms = v && *v ? strtol(v, NULL, 10) : 20;
    comm->ready_ns = now_ns() + (uint64_t)(ms > 0 ? ms : 1) * 1000000u;
}

/* NCCL's message for a comm whose creation is still in progress (ncclCommEnsureReady). */
static ncclResult_t pending_fail(const char *fn)
{
    return fail(ncclInvalidArgument,
                "%s : Attempt to use communicator before the previous operation returned "
                "ncclSuccess (it is created at the end of its group)",
                fn);
}

/* As ncclCommEnsureReady, for the calls that read a comm's attributes: an asynchronous error is
 * returned as is, and a comm still being created is refused. */
static ncclResult_t check_ready(ncclComm_t comm, const char *fn)
{
    ncclResult_t r = check_comm(comm, fn);

    if (r == ncclSuccess && comm->async_error != ncclSuccess)
        return fail(comm->async_error, "%s : rank %d's communicator is in error (%s)", fn,
                    comm->rank, pncclGetErrorString(comm->async_error));
    if (r == ncclSuccess && in_progress(comm))
        return pending_fail(fn);
    return r;
}

static ncclResult_t check_usable(ncclComm_t comm, const char *fn)
{
    ncclResult_t r = check_comm(comm, fn);

    if (r == ncclSuccess && comm->finalized)
        return fail(ncclInvalidUsage, "%s : comm was finalized", fn);
    /* As ncclCommEnsureReady: a comm with an asynchronous error refuses work until aborted. */
    if (r == ncclSuccess && comm->async_error != ncclSuccess)
        return fail(comm->async_error,
                    "%s : rank %d's communicator is in error (%s) since an earlier call on it "
                    "timed out or failed; destroy or abort it",
                    fn, comm->rank, pncclGetErrorString(comm->async_error));
    if (r == ncclSuccess && in_progress(comm))
        return pending_fail(fn);
    return r;
}

static ncclResult_t check_config(const ncclConfig_t *config, const char *fn)
{
    if (config && config->magic != CONFIG_MAGIC)
        return fail(ncclInvalidArgument,
                    "%s : config argument not initialized with NCCL_CONFIG_INITIALIZER", fn);
    return ncclSuccess;
}

/* ---- groups ---------------------------------------------------------------------------------- */

/* Calls made inside a group wait here, per thread, until the outermost ncclGroupEnd. A call made
 * outside a group is a group of one. */
static _Thread_local int group_depth;
static _Thread_local ncclResult_t group_error;
static _Thread_local struct op *queue;
static _Thread_local size_t queue_len;
static _Thread_local size_t queue_cap;
/* Calls on shared-memory comms: they progress together at ncclGroupEnd instead. */
static _Thread_local struct op *xqueue;
static _Thread_local size_t xqueue_len;
static _Thread_local size_t xqueue_cap;

static void clear_queue(void)
{
    for (size_t i = 0; i < queue_len; i++)
        free(queue[i].exclude);
    queue_len = 0;
}

/* Appends a copy of op; takes ownership of op->exclude. */
static ncclResult_t push(struct op **q, size_t *len, size_t *cap, const struct op *op)
{
    if (*len == *cap) {
        size_t grown_cap = *cap ? 2 * *cap : 16;
        struct op *grown = realloc(*q, grown_cap * sizeof(**q));

        if (!grown) {
            free(op->exclude);
            return no_memory(ops[op->kind].name);
        }
        *q = grown;
        *cap = grown_cap;
    }
    (*q)[(*len)++] = *op;
    (*q)[*len - 1].matched = false;
    return ncclSuccess;
}

/* Drops the queued calls on shared-memory comms. A comm whose creation was among them was already
 * handed out: it takes the error that dropped the group. */
static void drop_xqueue(ncclResult_t why)
{
    for (size_t i = 0; i < xqueue_len; i++) {
        ncclComm_t made = xqueue[i].kind == OP_INIT ? xqueue[i].comm : xqueue[i].child;

        if (made && made->async_error == ncclSuccess) {
            made->async_error = why != ncclSuccess ? why : ncclInvalidUsage;
            made->pending = false;
        }
        free(xqueue[i].exclude);
    }
    xqueue_len = 0;
}

/* Threads come and go: a thread's queues do not outlive its outermost group. */
static void release_queues(void)
{
    free(queue);
    queue = NULL;
    queue_cap = 0;
    free(xqueue);
    xqueue = NULL;
    xqueue_cap = 0;
}

static enum family family_of(const struct op *op)
{
    return ops[op->kind].family;
}

static void describe(char *buf, size_t len, const struct op *op)
{
    const struct op_info *info = &ops[op->kind];
    int n = 0;

    if (info->family != FAM_COLL && info->family != FAM_P2P) {
        snprintf(buf, len, "%s", info->name);
        return;
    }
    n = snprintf(buf, len, "%s(count %zu, %s", info->name, op->count, dtypes[op->dtype].name);
    if (n > 0 && (size_t)n < len && info->has_redop)
        n += snprintf(buf + n, len - (size_t)n, ", %s", redop_names[op->redop]);
    if (n > 0 && (size_t)n < len && info->has_root)
        n += snprintf(buf + n, len - (size_t)n, ", root %d", op->root);
    if (n > 0 && (size_t)n < len && info->family == FAM_P2P)
        n += snprintf(buf + n, len - (size_t)n, ", peer %d", op->root);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ")");
}

static bool same_call(const struct op *a, const struct op *b)
{
    const struct op_info *info = &ops[a->kind];

    if (a->kind != b->kind)
        return false;
    if (info->family == FAM_SPLIT)
        return true;
    if (info->family == FAM_SHRINK)
        return a->nexclude == b->nexclude &&
               !memcmp(a->exclude, b->exclude, (size_t)a->nexclude * sizeof(*a->exclude));
    return a->count == b->count && a->dtype == b->dtype &&
           (!info->has_redop || a->redop == b->redop) && (!info->has_root || a->root == b->root);
}

static void free_jobs(struct job *jobs, size_t njobs)
{
    for (size_t i = 0; i < njobs; i++)
        free(jobs[i].members);
    free(jobs);
}

static ncclResult_t add_job(struct job **jobs, size_t *njobs, const struct job *j, int nmembers)
{
    struct job *grown = realloc(*jobs, (*njobs + 1) * sizeof(**jobs));

    if (!grown)
        return no_memory("ncclGroupEnd");
    *jobs = grown;
    grown[*njobs] = *j;
    grown[*njobs].members = calloc((size_t)nmembers, sizeof(struct op *));
    if (!grown[*njobs].members)
        return no_memory("ncclGroupEnd");
    (*njobs)++;
    return ncclSuccess;
}

/* Gathers the calls of every rank of a clique that must run together: the k-th collective (or
 * split, or shrink) of each rank. Quadratic in the group's length, which is small in tests. */
static ncclResult_t match_collectives(struct job **jobs, size_t *njobs)
{
    for (size_t i = 0; i < queue_len; i++) {
        struct op *op = &queue[i];
        struct clique *c = op->comm->clique;
        enum family fam = family_of(op);
        struct job *j = NULL;
        size_t seq = 0;
        ncclResult_t r;

        if (fam == FAM_P2P)
            continue;
        for (size_t k = 0; k < i; k++)
            if (queue[k].comm == op->comm && family_of(&queue[k]) == fam)
                seq++;
        for (size_t k = 0; k < *njobs && !j; k++)
            if ((*jobs)[k].clique == c && (*jobs)[k].family == fam && (*jobs)[k].seq == seq)
                j = &(*jobs)[k];
        if (!j) {
            struct job nj = {.kind = op->kind, .first = i, .clique = c, .family = fam, .seq = seq};

            if ((r = add_job(jobs, njobs, &nj, c->nranks)) != ncclSuccess)
                return r;
            j = &(*jobs)[*njobs - 1];
        }
        j->members[op->comm->rank] = op;
        j->nmembers++;
        op->matched = true;
    }
    return ncclSuccess;
}

/* The i-th send from a to b meets the i-th recv that b posted from a. */
static ncclResult_t match_p2p(struct job **jobs, size_t *njobs)
{
    char what[160];

    for (size_t i = 0; i < queue_len; i++) {
        struct op *s = &queue[i];
        struct job nj = {.kind = OP_SEND, .family = FAM_P2P};
        size_t seq = 0, k = 0;
        struct op *recv = NULL;
        ncclResult_t r;

        if (s->kind != OP_SEND)
            continue;
        for (size_t p = 0; p < i; p++)
            if (queue[p].kind == OP_SEND && queue[p].comm == s->comm && queue[p].root == s->root)
                seq++;
        for (size_t p = 0; p < queue_len && !recv; p++) {
            struct op *q = &queue[p];

            if (q->kind == OP_RECV && q->comm->clique == s->comm->clique &&
                q->comm->rank == s->root && q->root == s->comm->rank && k++ == seq)
                recv = q;
        }
        describe(what, sizeof(what), s);
        if (!recv)
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : rank %d's %s has no matching ncclRecv from rank %d in "
                        "this group (the double never waits for a call that has not been made)",
                        s->comm->rank, what, s->root);
        if (recv->count * elem_size(recv) != s->count * elem_size(s)) {
            char rwhat[160];

            describe(rwhat, sizeof(rwhat), recv);
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : rank %d's %s sends %zu bytes but rank %d's %s expects "
                        "%zu",
                        s->comm->rank, what, s->count * elem_size(s), recv->comm->rank, rwhat,
                        recv->count * elem_size(recv));
        }
        s->matched = recv->matched = true;
        nj.first = i < (size_t)(recv - queue) ? i : (size_t)(recv - queue);
        nj.clique = s->comm->clique;
        if ((r = add_job(jobs, njobs, &nj, 2)) != ncclSuccess)
            return r;
        (*jobs)[*njobs - 1].members[0] = s;
        (*jobs)[*njobs - 1].members[1] = recv;
        (*jobs)[*njobs - 1].nmembers = 2;
    }
    for (size_t i = 0; i < queue_len; i++) {
        if (!queue[i].matched) {
            describe(what, sizeof(what), &queue[i]);
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : rank %d's %s has no matching ncclSend from rank %d in "
                        "this group (the double never waits for a call that has not been made)",
                        queue[i].comm->rank, what, queue[i].root);
        }
    }
    return ncclSuccess;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;

    return (x > y) - (x < y);
}

static bool excludes(const struct op *op, int rank)
{
    return op->nexclude && bsearch(&rank, op->exclude, (size_t)op->nexclude, sizeof(int), cmp_int);
}

/* Every rank present (for a shrink, every rank not excluded), all making the same call. */
static ncclResult_t check_job(const struct job *j)
{
    struct op *const *m = j->members;
    int n = j->clique->nranks, any = 0, missing = -1;
    char a[160], b[160];

    while (!m[any])
        any++;
    for (int r = 0; r < n && missing < 0; r++)
        if (!m[r] && !(j->family == FAM_SHRINK && excludes(m[any], r)))
            missing = r;
    if (missing >= 0) {
        describe(a, sizeof(a), m[any]);
        if (j->family == FAM_COLL)
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : collective %llu on a %d-rank communicator: rank %d called "
                        "%s but rank %d made no collective call in this group. The double runs "
                        "the ranks of one process together: every rank's call must be inside "
                        "one ncclGroupStart/ncclGroupEnd on one thread",
                        m[any]->comm->ncoll + j->seq, n, any, a, missing);
        return fail(ncclInvalidUsage,
                    "ncclGroupEnd : rank %d called %s but rank %d of its %d-rank communicator "
                    "did not, in this group",
                    any, a, missing, n);
    }
    for (int r = 0; r < n; r++) {
        if (!m[r] || same_call(m[any], m[r]))
            continue;
        describe(a, sizeof(a), m[any]);
        describe(b, sizeof(b), m[r]);
        return fail(ncclInvalidUsage,
                    "ncclGroupEnd : ranks disagree at call %llu of a %d-rank communicator: rank "
                    "%d called %s, rank %d called %s",
                    m[any]->comm->ncoll + j->seq, n, any, a, r, b);
    }
    return ncclSuccess;
}

static int by_first(const void *a, const void *b)
{
    const struct job *x = a, *y = b;

    return (x->first > y->first) - (x->first < y->first);
}

/* Matches every queued call with its counterparts, checks them all, and only then moves data:
 * a group that fails changes no buffer and creates no communicator. */
static ncclResult_t flush_local(void)
{
    struct job *jobs = NULL;
    size_t njobs = 0;
    ncclResult_t r = match_collectives(&jobs, &njobs);

    if (r == ncclSuccess)
        r = match_p2p(&jobs, &njobs);
    for (size_t i = 0; r == ncclSuccess && i < njobs; i++)
        if (jobs[i].family != FAM_P2P)
            r = check_job(&jobs[i]);
    if (r == ncclSuccess && njobs > 1)
        qsort(jobs, njobs, sizeof(*jobs), by_first);
    for (size_t i = 0; r == ncclSuccess && i < njobs; i++) {
        struct job *j = &jobs[i];

        r = ops[j->kind].run(j->members, j->family == FAM_P2P ? 2 : j->clique->nranks);
        for (int k = 0; j->family == FAM_COLL && k < j->clique->nranks; k++)
            j->members[k]->comm->ncoll++;
    }
    free_jobs(jobs, njobs);
    clear_queue();
    return r;
}

/* ---- ranks in other processes ---------------------------------------------------------------- */

/* A communicator whose ranks are processes meets in one POSIX shared-memory segment, named from its
 * unique id (a split's or shrink's child: from the parent's name, the child's index on the parent
 * and its color or exclude list), so that a later run, with a fresh id, never meets a stale
 * segment. The name is unlinked as soon as every rank has mapped the segment: a process killed
 * after that leaves nothing behind.
 *
 * Collectives go in rounds that every rank counts alike: a rank waits until every rank has left
 * the previous round, copies its part into its slot, arrives, waits until every rank has arrived,
 * computes its own output from the slots and leaves. A call larger than a slot takes several
 * rounds. As in NCCL, nothing checks that the ranks agree: a rank takes what the others put in
 * their slots, truncated or padded with zeros to what it expects, and ranks that make different
 * numbers of rounds leave someone waiting until SHAPETRACE_DOUBLE_TIMEOUT. Sends and receives go
 * through one byte ring per (sender, receiver), so the k-th send from a to b meets the k-th receive
 * b posts from a, whatever the sizes say. */

#define SHM_MAGIC 0x73687064736d656dULL /* "shpdsmem" */
#define SHM_HDR_BYTES ((size_t)4096)
#define SHM_SLOT_BYTES ((size_t)4 << 20) /* one rank's part of one round */
#define MSG_HDR_BYTES 8                  /* a message on a ring: its payload length, then payload */
#define SPLIT_MAGIC 0x73706c74           /* "splt": marks a split's vote in a slot */

struct shm_rank {
    _Atomic uint32_t present;  /* this rank has joined */
    _Atomic uint32_t arrived;  /* rounds it has entered; read only to say who is missing */
    _Atomic uint32_t departed; /* rounds it has left; likewise */
    uint32_t pad0;
    uint64_t slot_len; /* bytes in its slot for its latest round */
    char pad1[40];
};

struct shm_chan {
    _Atomic uint32_t head; /* bytes the sender has written, mod 2^32 */
    char pad0[60];
    _Atomic uint32_t tail; /* bytes the receiver has consumed, mod 2^32 */
    char pad1[60];
};

struct shm_seg {
    _Atomic uint64_t magic; /* stored last by the creator */
    int32_t nranks;
    uint32_t chan_bytes; /* one ring's capacity, a power of two */
    uint64_t slot_bytes;
    uint64_t size;
    char pad0[32];
    _Atomic uint32_t joined; /* ranks that have mapped the segment */
    char pad1[60];
    _Atomic uint32_t arrive; /* rounds entered, summed over the ranks, mod 2^32 */
    char pad2[60];
    _Atomic uint32_t depart; /* rounds left, likewise */
    char pad3[60];
};

_Static_assert(sizeof(struct shm_rank) == 64, "one cache line per rank");
_Static_assert(sizeof(struct shm_chan) == 128, "one cache line per end of a ring");
_Static_assert(sizeof(struct shm_seg) <= SHM_HDR_BYTES, "the header fits its page");

/* Offsets in the segment: header, ranks, rings' ends, slots, rings' data. */
struct shm_layout {
    size_t chans;
    size_t slots;
    size_t data;
    size_t size;
};

static size_t page_up(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

/* 1 MiB rings while n^2 of them fit in 64 MiB, smaller ones (down to 64 KiB) beyond: the segment
 * is sparse, but a ring used once stays resident. */
static uint32_t ring_bytes(int n)
{
    size_t cap = (size_t)1 << 20;

    while (cap > ((size_t)64 << 10) && (size_t)n * (size_t)n * cap > ((size_t)64 << 20))
        cap /= 2;
    return (uint32_t)cap;
}

static struct shm_layout layout(int n, size_t slot_bytes, size_t chan_bytes)
{
    struct shm_layout l;
    size_t nn = (size_t)n * (size_t)n;

    l.chans = SHM_HDR_BYTES + page_up((size_t)n * sizeof(struct shm_rank));
    l.slots = l.chans + page_up(nn * sizeof(struct shm_chan));
    l.data = l.slots + (size_t)n * slot_bytes;
    l.size = l.data + nn * chan_bytes;
    return l;
}

static struct shm_rank *seg_rank(ncclComm_t c, int r)
{
    return (struct shm_rank *)((char *)c->shm + SHM_HDR_BYTES) + r;
}

static unsigned char *seg_slot(ncclComm_t c, int r)
{
    struct shm_layout l = layout(c->nranks, c->shm->slot_bytes, c->shm->chan_bytes);

    return (unsigned char *)c->shm + l.slots + (size_t)r * c->shm->slot_bytes;
}

static struct shm_chan *seg_chan(ncclComm_t c, int src, int dst)
{
    struct shm_layout l = layout(c->nranks, c->shm->slot_bytes, c->shm->chan_bytes);

    return (struct shm_chan *)((char *)c->shm + l.chans) + (size_t)src * c->nranks + dst;
}

static unsigned char *seg_ring(ncclComm_t c, int src, int dst)
{
    struct shm_layout l = layout(c->nranks, c->shm->slot_bytes, c->shm->chan_bytes);

    return (unsigned char *)c->shm + l.data + ((size_t)src * c->nranks + dst) * c->shm->chan_bytes;
}

/* What rank r left in its slot, as far as the slot goes. */
static size_t slot_have(ncclComm_t c, int r)
{
    uint64_t n = seg_rank(c, r)->slot_len;

    return n < c->shm->slot_bytes ? (size_t)n : (size_t)c->shm->slot_bytes;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* SHAPETRACE_DOUBLE_TIMEOUT: seconds (fractions allowed) without progress after which a rank gives
 * up where NCCL would wait forever; read at every wait, so a test may change it. */
static double timeout_s(void)
{
    const char *s = getenv("SHAPETRACE_DOUBLE_TIMEOUT");
    char *end;
    double v;

    if (!s || !*s)
        return 10;
    v = strtod(s, &end);
    return *end || !(v > 0) || v > 1e6 ? 10 : v;
}

/* Shared futexes, not FUTEX_PRIVATE: the words live in a segment that other processes map. */
static void futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};

    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Two 64-bit FNV-1a hashes with different seeds over the same bytes name the segment. */
static void name_seg(char *out, size_t len, const uint64_t h[2])
{
    snprintf(out, len, "/shp-nccl-%016llx%016llx", (unsigned long long)h[0],
             (unsigned long long)h[1]);
}

static void name_from_id(ncclComm_t c, const ncclUniqueId *id)
{
    uint64_t h[2] = {fnv1a(0xcbf29ce484222325ULL, id->internal, sizeof(id->internal)),
                     fnv1a(0x6c62272e07bb0142ULL, id->internal, sizeof(id->internal))};

    name_seg(c->shm_name, sizeof(c->shm_name), h);
}

/* Every member computes the same name: the parent's, the child's index among the parent's splits
 * and shrinks, and what chose the members (a color, or the excluded ranks). */
static void name_child(ncclComm_t child, ncclComm_t parent, enum op_kind kind, const int *vals,
                       int nvals)
{
    int head[3] = {(int)kind, (int)parent->nchildren++, nvals};
    uint64_t h[2] = {0xcbf29ce484222325ULL, 0x6c62272e07bb0142ULL};

    for (int k = 0; k < 2; k++) {
        h[k] = fnv1a(h[k], parent->shm_name, strlen(parent->shm_name));
        h[k] = fnv1a(h[k], head, sizeof(head));
        h[k] = fnv1a(h[k], vals, (size_t)nvals * sizeof(*vals));
    }
    name_seg(child->shm_name, sizeof(child->shm_name), h);
}

static ncclComm_t new_shm_comm(int nranks, int rank, int device)
{
    ncclComm_t comm = calloc(1, sizeof(*comm));

    if (!comm)
        return NULL;
    comm->magic = COMM_MAGIC;
    comm->rank = rank;
    comm->nranks = nranks;
    comm->device = device;
    return comm;
}

static ncclResult_t sys_fail(const char *fn, const char *what)
{
    return fail(ncclSystemError, "%s : %s failed: %s", fn, what, strerror(errno));
}

static ncclResult_t enter(ncclComm_t c, const char *fn)
{
    if (atomic_exchange(&seg_rank(c, c->rank)->present, 1))
        return fail(ncclInvalidUsage,
                    "%s : rank %d of %d has already joined this communicator in another call (the "
                    "same unique id used twice?)",
                    fn, c->rank, c->nranks);
    c->entered = true;
    atomic_fetch_add_explicit(&c->shm->joined, 1, memory_order_release);
    futex_wake(&c->shm->joined);
    return ncclSuccess;
}

static ncclResult_t create_seg(ncclComm_t c, int fd, const char *fn)
{
    struct shm_layout l = layout(c->nranks, SHM_SLOT_BYTES, ring_bytes(c->nranks));
    struct shm_seg *s;

    if (ftruncate(fd, (off_t)l.size) != 0) {
        ncclResult_t r = sys_fail(fn, "ftruncate of the shared segment");

        close(fd);
        shm_unlink(c->shm_name);
        return r;
    }
    s = mmap(NULL, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED) {
        shm_unlink(c->shm_name);
        return sys_fail(fn, "mmap of the shared segment");
    }
    s->nranks = c->nranks;
    s->chan_bytes = ring_bytes(c->nranks);
    s->slot_bytes = SHM_SLOT_BYTES;
    s->size = l.size;
    atomic_store_explicit(&s->magic, SHM_MAGIC, memory_order_release);
    c->shm = s;
    c->shm_size = l.size;
    return enter(c, fn);
}

/* Creates the comm's segment, or maps the one another rank created, and joins it without waiting
 * for the others. It waits only for a creator between creating the segment and filling in its
 * header. On failure the caller frees the comm, which unlinks the name. */
static ncclResult_t attach(ncclComm_t c, const char *fn)
{
    double limit = timeout_s();
    uint64_t deadline = now_ns() + (uint64_t)(limit * 1e9);
    struct shm_layout l;
    struct shm_seg *s;
    struct stat st;
    int fd;

    for (;;) {
        fd = shm_open(c->shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0)
            return create_seg(c, fd, fn);
        if (errno != EEXIST)
            return sys_fail(fn, "shm_open");
        fd = shm_open(c->shm_name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0 && errno != ENOENT) /* ENOENT: unlinked since; the next round creates it */
            return sys_fail(fn, "shm_open");
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= SHM_HDR_BYTES)
            break;
        if (fd >= 0)
            close(fd);
        if (now_ns() > deadline)
            goto late;
        usleep(1000);
    }
    s = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED)
        return sys_fail(fn, "mmap of the shared segment");
    c->shm = s;
    c->shm_size = (size_t)st.st_size;
    while (atomic_load_explicit(&s->magic, memory_order_acquire) != SHM_MAGIC) {
        if (now_ns() > deadline)
            goto late;
        usleep(1000);
    }
    /* NCCL's bootstrap root refuses this too ("mismatch in rank count"). */
    if (s->nranks != c->nranks)
        return fail(ncclInvalidUsage,
                    "%s : rank %d was given nranks %d, but the rank that created the "
                    "communicator gave %d",
                    fn, c->rank, c->nranks, s->nranks);
    l = layout(s->nranks, s->slot_bytes, s->chan_bytes);
    if (l.size != s->size || l.size != c->shm_size || !s->chan_bytes ||
        (s->chan_bytes & (s->chan_bytes - 1)))
        return fail(ncclInternalError, "%s : shared segment %s is not the double's", fn,
                    c->shm_name);
    return enter(c, fn);
late:
    return fail_loud(ncclSystemError,
                     "%s : rank %d of %d timed out after %g s waiting for the rank that created "
                     "shared segment %s to initialise it (SHAPETRACE_DOUBLE_TIMEOUT)",
                     fn, c->rank, c->nranks, limit, c->shm_name);
}

/* ---- progress: every call on a shared-memory comm is a task that advances without blocking ----
 */

enum step { STEP_BLOCKED, STEP_MOVED, STEP_DONE, STEP_FAILED };

struct task {
    struct op op; /* owns op.exclude */
    const char *name;
    bool finished;
    int phase;              /* rounds: 0 before arriving, 1 arrived */
    unsigned long long seq; /* collectives: index among this rank's on the comm */
    size_t chunk, nchunks;  /* rounds: the current one and how many the call takes */
    size_t per;             /* elements per round */
    uint64_t done, total;   /* p2p: message bytes moved, and the send's message size */
    uint64_t msg_len;       /* recv: the payload size the sender announced */
    unsigned char hdr[MSG_HDR_BYTES];
    int new_rank, new_size; /* split: this rank's place in its color */
    ncclComm_t child;       /* split and shrink: the comm being made */
    bool joining;           /* split, shrink: attached, waiting for the other members */
    const void **in;        /* reductions: one input per rank */
    void **pad;             /* zero-padded copies of inputs shorter than expected */
    _Atomic uint32_t *word; /* a blocked step waits for this word to leave word_val */
    uint32_t word_val;
};

static bool blocked_layout(enum op_kind k)
{
    return k == OP_REDUCE_SCATTER || k == OP_ALLTOALL || k == OP_SCATTER;
}

static bool contributes(const struct op *op, int rank)
{
    return (op->kind != OP_BROADCAST && op->kind != OP_SCATTER) || rank == op->root;
}

static bool reads(const struct op *op, int rank)
{
    return (op->kind != OP_REDUCE && op->kind != OP_GATHER) || rank == op->root;
}

static bool uses_rounds(enum op_kind k)
{
    return ops[k].family == FAM_COLL || k == OP_SPLIT;
}

/* Takes ownership of op->exclude. */
static void init_task(struct task *t, const struct op *op)
{
    ncclComm_t c = op->comm;

    memset(t, 0, sizeof(*t));
    t->op = *op;
    t->name = op->fn ? op->fn : ops[op->kind].name;
    if (ops[op->kind].family == FAM_COLL) {
        size_t es = elem_size(op);

        /* Blocked calls put one block per rank in a slot. */
        t->per = c->shm->slot_bytes / (blocked_layout(op->kind) ? (size_t)c->nranks * es : es);
        t->nchunks = (op->count + t->per - 1) / t->per;
        t->seq = c->ncoll++;
    } else if (op->kind == OP_SPLIT) {
        t->nchunks = 1;
    } else if (op->kind == OP_SEND) {
        uint64_t len = op->count * elem_size(op);

        memcpy(t->hdr, &len, sizeof(len));
        t->total = MSG_HDR_BYTES + len;
    }
}

static void free_task(struct task *t)
{
    if (t->pad)
        for (int i = 0; i < t->op.comm->nranks; i++)
            free(t->pad[i]);
    free(t->pad);
    free(t->in);
    free(t->op.exclude);
}

static enum step block(struct task *t, _Atomic uint32_t *word, uint32_t val)
{
    t->word = word;
    t->word_val = val;
    return STEP_BLOCKED;
}

/* Copies bytes [at, at + bytes) of rank i's slot to dst: what is there, then zeros. */
static void fetch(ncclComm_t c, int i, size_t at, size_t bytes, void *dst)
{
    size_t have = slot_have(c, i), got = at < have ? have - at : 0;

    if (got > bytes)
        got = bytes;
    if (got)
        memcpy(dst, seg_slot(c, i) + at, got);
    if (got < bytes)
        memset((char *)dst + got, 0, bytes - got);
}

/* Rank i's input to a reduction: in its slot when it is all there, else a zero-padded copy. */
static const void *input(struct task *t, int i, size_t at, size_t bytes)
{
    ncclComm_t c = t->op.comm;

    if (at + bytes <= slot_have(c, i))
        return seg_slot(c, i) + at;
    if (!t->pad[i] && !(t->pad[i] = malloc(t->per * elem_size(&t->op))))
        return NULL;
    fetch(c, i, at, bytes, t->pad[i]);
    return t->pad[i];
}

static void put_part(struct task *t)
{
    const struct op *op = &t->op;
    ncclComm_t c = op->comm;
    unsigned char *slot = seg_slot(c, c->rank);
    const unsigned char *send = op->sendbuff;
    size_t es = elem_size(op), off = t->chunk * t->per, bytes = 0, len, piece;

    len = op->count - off < t->per ? op->count - off : t->per;
    piece = len * es;
    if (op->kind == OP_SPLIT) {
        int32_t vote[4] = {SPLIT_MAGIC, op->color, op->key, 0};

        memcpy(slot, vote, sizeof(vote));
        bytes = sizeof(vote);
    } else if (contributes(op, c->rank) && blocked_layout(op->kind)) {
        for (int j = 0; j < c->nranks; j++)
            memcpy(slot + (size_t)j * piece, send + ((size_t)j * op->count + off) * es, piece);
        bytes = (size_t)c->nranks * piece;
    } else if (contributes(op, c->rank)) {
        memcpy(slot, send + off * es, piece);
        bytes = piece;
    }
    seg_rank(c, c->rank)->slot_len = bytes;
}

/* A split's members by color; ranks ordered by key, then by parent rank, as in NCCL. */
static void count_votes(struct task *t)
{
    ncclComm_t c = t->op.comm;

    t->new_rank = 0;
    t->new_size = 0;
    for (int i = 0; i < c->nranks; i++) {
        int32_t v[4];

        if (slot_have(c, i) < sizeof(v))
            continue;
        memcpy(v, seg_slot(c, i), sizeof(v));
        if (v[0] != SPLIT_MAGIC || v[1] != t->op.color)
            continue;
        t->new_size++;
        if (v[2] < t->op.key || (v[2] == t->op.key && i < c->rank))
            t->new_rank++;
    }
}

static bool take_part(struct task *t)
{
    const struct op *op = &t->op;
    ncclComm_t c = op->comm;
    int n = c->nranks, me = c->rank;
    unsigned char *recv = op->recvbuff;
    size_t es = elem_size(op), off = t->chunk * t->per, len, piece, at;

    len = op->count - off < t->per ? op->count - off : t->per;
    piece = len * es;
    switch (op->kind) {
    case OP_ALL_REDUCE:
    case OP_REDUCE:
    case OP_REDUCE_SCATTER:
        if (!t->in && !(t->in = calloc((size_t)n, sizeof(*t->in))))
            return false;
        if (!t->pad && !(t->pad = calloc((size_t)n, sizeof(*t->pad))))
            return false;
        at = op->kind == OP_REDUCE_SCATTER ? (size_t)me * piece : 0;
        for (int i = 0; i < n; i++)
            if (!(t->in[i] = input(t, i, at, piece)))
                return false;
        reduce(recv + off * es, t->in, n, len, op->dtype, op->redop);
        break;
    case OP_BROADCAST:
        fetch(c, op->root, 0, piece, recv + off * es);
        break;
    case OP_SCATTER:
        fetch(c, op->root, (size_t)me * piece, piece, recv + off * es);
        break;
    case OP_ALL_GATHER:
    case OP_GATHER:
    case OP_ALLTOALL:
        at = op->kind == OP_ALLTOALL ? (size_t)me * piece : 0;
        for (int i = 0; i < n; i++)
            fetch(c, i, at, piece, recv + ((size_t)i * op->count + off) * es);
        break;
    case OP_SPLIT:
        count_votes(t);
        break;
    default:
        break;
    }
    return true;
}

static enum step leave(struct task *t)
{
    ncclComm_t c = t->op.comm;

    atomic_store_explicit(&seg_rank(c, c->rank)->departed, c->round + 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->shm->depart, 1, memory_order_release);
    futex_wake(&c->shm->depart);
    c->round++;
    t->chunk++;
    t->phase = 0;
    return t->chunk == t->nchunks ? STEP_DONE : STEP_MOVED;
}

/* One round: wait for every rank to leave the previous one, fill the slot, arrive, wait for every
 * rank to arrive, read, leave. A rank that reads nothing (a non-root of reduce or gather) leaves
 * as soon as it arrives. The counters wrap; differences are taken as signed. */
static enum step step_round(struct task *t, ncclResult_t *err)
{
    ncclComm_t c = t->op.comm;
    struct shm_seg *s = c->shm;
    uint32_t n = (uint32_t)c->nranks, v;

    if (t->chunk == t->nchunks)
        return STEP_DONE;
    if (t->phase == 0) {
        v = atomic_load_explicit(&s->depart, memory_order_acquire);
        if ((int32_t)(v - c->round * n) < 0)
            return block(t, &s->depart, v);
        put_part(t);
        atomic_store_explicit(&seg_rank(c, c->rank)->arrived, c->round + 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->arrive, 1, memory_order_release);
        futex_wake(&s->arrive);
        t->phase = 1;
        if (!reads(&t->op, c->rank))
            return leave(t);
    }
    v = atomic_load_explicit(&s->arrive, memory_order_acquire);
    if ((int32_t)(v - (c->round + 1) * n) < 0)
        return block(t, &s->arrive, v);
    if (!take_part(t)) {
        *err = no_memory(t->name);
        return STEP_FAILED;
    }
    return leave(t);
}

/* Copies bytes [from, from + len) of the message (length header, then payload) into the ring. */
static void ring_put(unsigned char *ring, uint32_t cap, uint32_t pos, const unsigned char *hdr,
                     const unsigned char *payload, uint64_t from, size_t len)
{
    while (len > 0) {
        uint32_t at = pos & (cap - 1);
        size_t k = len < cap - at ? len : cap - at;
        const unsigned char *src;

        if (from < MSG_HDR_BYTES) {
            src = hdr + from;
            if (k > MSG_HDR_BYTES - from)
                k = MSG_HDR_BYTES - from;
        } else {
            src = payload + (from - MSG_HDR_BYTES);
        }
        memcpy(ring + at, src, k);
        pos += (uint32_t)k;
        from += k;
        len -= k;
    }
}

/* The reverse; payload beyond room (the receiver's own size) is dropped. */
static void ring_get(const unsigned char *ring, uint32_t cap, uint32_t pos, unsigned char *hdr,
                     unsigned char *payload, size_t room, uint64_t from, size_t len)
{
    while (len > 0) {
        uint32_t at = pos & (cap - 1);
        size_t k = len < cap - at ? len : cap - at;

        if (from < MSG_HDR_BYTES) {
            if (k > MSG_HDR_BYTES - from)
                k = MSG_HDR_BYTES - from;
            memcpy(hdr + from, ring + at, k);
        } else if (from - MSG_HDR_BYTES < room) {
            size_t p = (size_t)(from - MSG_HDR_BYTES), keep = k < room - p ? k : room - p;

            memcpy(payload + p, ring + at, keep);
        }
        pos += (uint32_t)k;
        from += k;
        len -= k;
    }
}

/* A send completes once its message is in the ring: at once when it fits, as NCCL's small sends
 * do, else as the receiver drains it. */
static enum step step_send(struct task *t)
{
    ncclComm_t c = t->op.comm;
    struct shm_chan *ch = seg_chan(c, c->rank, t->op.root);
    uint32_t cap = c->shm->chan_bytes;
    uint32_t head = atomic_load_explicit(&ch->head, memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(&ch->tail, memory_order_acquire);
    uint32_t space = cap - (head - tail);
    uint64_t left = t->total - t->done;
    size_t k = left < space ? (size_t)left : space;

    if (k == 0)
        return block(t, &ch->tail, tail);
    ring_put(seg_ring(c, c->rank, t->op.root), cap, head, t->hdr, t->op.sendbuff, t->done, k);
    atomic_store_explicit(&ch->head, head + (uint32_t)k, memory_order_release);
    futex_wake(&ch->head);
    t->done += k;
    return t->done == t->total ? STEP_DONE : STEP_MOVED;
}

/* A receive takes the next message from its peer whatever its size: the first bytes that fit,
 * zeros after a shorter one. */
static enum step step_recv(struct task *t)
{
    ncclComm_t c = t->op.comm;
    struct shm_chan *ch = seg_chan(c, t->op.root, c->rank);
    uint32_t cap = c->shm->chan_bytes;
    uint32_t tail = atomic_load_explicit(&ch->tail, memory_order_relaxed);
    uint32_t head = atomic_load_explicit(&ch->head, memory_order_acquire);
    size_t room = t->op.count * elem_size(&t->op);
    uint64_t want =
        t->done < MSG_HDR_BYTES ? MSG_HDR_BYTES - t->done : MSG_HDR_BYTES + t->msg_len - t->done;
    size_t k = want < head - tail ? (size_t)want : head - tail;

    if (want > 0 && k == 0)
        return block(t, &ch->head, head);
    ring_get(seg_ring(c, t->op.root, c->rank), cap, tail, t->hdr, t->op.recvbuff, room, t->done, k);
    if (k) {
        atomic_store_explicit(&ch->tail, tail + (uint32_t)k, memory_order_release);
        futex_wake(&ch->tail);
    }
    t->done += k;
    if (t->done < MSG_HDR_BYTES)
        return STEP_MOVED;
    if (t->done == MSG_HDR_BYTES && k)
        memcpy(&t->msg_len, t->hdr, sizeof(t->msg_len));
    if (t->done < MSG_HDR_BYTES + t->msg_len)
        return STEP_MOVED;
    if (t->msg_len < room)
        memset((unsigned char *)t->op.recvbuff + t->msg_len, 0, room - (size_t)t->msg_len);
    return STEP_DONE;
}

static enum step step_join(struct task *t, ncclComm_t c)
{
    uint32_t j = atomic_load_explicit(&c->shm->joined, memory_order_acquire);

    if (j < (uint32_t)c->nranks)
        return block(t, &c->shm->joined, j);
    /* Everyone has it mapped: the name is no longer needed, and nothing can leak it now. */
    shm_unlink(c->shm_name);
    c->joined = true;
    c->pending = false;
    return STEP_DONE;
}

/* The comm a split or shrink makes: the one handed out at the call, inside a group, or a new
 * one. */
static ncclComm_t make_child(struct task *t, int nranks, int rank)
{
    ncclComm_t child = t->op.child;

    if (!child)
        return new_shm_comm(nranks, rank, t->op.comm->device);
    child->nranks = nranks;
    child->rank = rank;
    return child;
}

/* The new comm is the caller's once every member has joined. */
static enum step finish_child(struct task *t)
{
    enum step s = step_join(t, t->child);

    if (s == STEP_DONE) {
        *t->op.newcomm = t->child;
        t->child = NULL;
    }
    return s;
}

/* A vote in the parent's rounds, then the join of this color's comm. */
static enum step step_split(struct task *t, ncclResult_t *err)
{
    ncclComm_t c = t->op.comm;
    enum step s;

    if (t->chunk < t->nchunks) {
        if ((s = step_round(t, err)) != STEP_DONE)
            return s;
        if (t->op.color == NCCL_SPLIT_NOCOLOR) {
            c->nchildren++;
            return STEP_DONE;
        }
        if (!(t->child = make_child(t, t->new_size, t->new_rank))) {
            *err = no_memory(t->name);
            return STEP_FAILED;
        }
        name_child(t->child, c, OP_SPLIT, &t->op.color, 1);
        if ((*err = attach(t->child, t->name)) != ncclSuccess)
            return STEP_FAILED;
        t->joining = true;
        return STEP_MOVED;
    }
    return finish_child(t);
}

/* The excluded ranks do not call (they may be dead), so the survivors agree without meeting:
 * they keep their order, and the name comes from what they all know. */
static enum step step_shrink(struct task *t, ncclResult_t *err)
{
    ncclComm_t c = t->op.comm;

    if (!t->joining) {
        int k = 0;

        for (int r = 0; r < c->rank; r++)
            k += !excludes(&t->op, r);
        if (!(t->child = make_child(t, c->nranks - t->op.nexclude, k))) {
            *err = no_memory(t->name);
            return STEP_FAILED;
        }
        name_child(t->child, c, OP_SHRINK, t->op.exclude, t->op.nexclude);
        if ((*err = attach(t->child, t->name)) != ncclSuccess)
            return STEP_FAILED;
        t->joining = true;
        return STEP_MOVED;
    }
    return finish_child(t);
}

static enum step step(struct task *t, ncclResult_t *err)
{
    switch (t->op.kind) {
    case OP_SEND:
        return step_send(t);
    case OP_RECV:
        return step_recv(t);
    case OP_SPLIT:
        return step_split(t, err);
    case OP_SHRINK:
        return step_shrink(t, err);
    case OP_INIT:
        return step_join(t, t->op.comm);
    default:
        return step_round(t, err);
    }
}

/* Calls on one comm that share a sequence wait for the earlier ones: collectives and splits for
 * the rounds, sends to (receives from) one peer for the ring. Nothing runs on a comm whose join
 * is still pending in this group. */
static bool eligible(const struct task *t, size_t i)
{
    const struct op *a = &t[i].op;

    if (a->kind != OP_INIT && !a->comm->joined)
        return false;
    for (size_t j = 0; j < i; j++) {
        const struct op *b = &t[j].op;

        if (t[j].finished || b->comm != a->comm)
            continue;
        if (uses_rounds(a->kind) && uses_rounds(b->kind))
            return false;
        if ((a->kind == OP_SEND || a->kind == OP_RECV) && b->kind == a->kind && b->root == a->root)
            return false;
    }
    return true;
}

enum missing { MISSING_JOIN, MISSING_ARRIVAL, MISSING_DEPARTURE };

/* "ranks 1, 3 (2 of 4)": who has not joined, or not reached round target. */
static void missing_ranks(char *buf, size_t len, ncclComm_t c, enum missing what, uint32_t target)
{
    char list[96] = "";
    int k = 0, at = 0;

    for (int r = 0; r < c->nranks; r++) {
        struct shm_rank *sr = seg_rank(c, r);
        bool miss;

        if (what == MISSING_JOIN)
            miss = !atomic_load(&sr->present);
        else
            miss = (int32_t)(atomic_load(what == MISSING_ARRIVAL ? &sr->arrived : &sr->departed) -
                             target) < 0;
        if (!miss)
            continue;
        if (k < 8 && at >= 0 && (size_t)at < sizeof(list))
            at += snprintf(list + at, sizeof(list) - (size_t)at, "%s%d", k ? ", " : "", r);
        k++;
    }
    if (k == 0)
        snprintf(buf, len, "the other ranks");
    else
        snprintf(buf, len, "%s %s%s (%d of %d)", k == 1 ? "rank" : "ranks", list,
                 k > 8 ? ", ..." : "", k, c->nranks);
}

/* The one message a rank prints when it gives up: the call, the rank, and whom it waited for. */
static ncclResult_t timed_out(const struct task *t, double limit)
{
    const struct op *op = &t->op;
    ncclComm_t c = op->comm;
    char what[160], who[128], why[256], seq[48] = "";

    if (ops[op->kind].family == FAM_COLL || ops[op->kind].family == FAM_P2P)
        describe(what, sizeof(what), op);
    else
        snprintf(what, sizeof(what), "%s", t->name);
    if (ops[op->kind].family == FAM_COLL)
        snprintf(seq, sizeof(seq), " (collective %llu on this comm)", t->seq);
    if (op->kind == OP_SEND) {
        snprintf(why, sizeof(why),
                 "rank %d to receive (%llu of the message's %llu bytes do not fit in the ring "
                 "yet)",
                 op->root, (unsigned long long)(t->total - t->done), (unsigned long long)t->total);
    } else if (op->kind == OP_RECV) {
        if (t->done < MSG_HDR_BYTES)
            snprintf(why, sizeof(why), "rank %d to send (no message from it yet)", op->root);
        else
            snprintf(why, sizeof(why), "rank %d to send the rest (%llu of %llu bytes arrived)",
                     op->root, (unsigned long long)(t->done - MSG_HDR_BYTES),
                     (unsigned long long)t->msg_len);
    } else if (op->kind == OP_INIT || t->joining) {
        ncclComm_t j = t->joining ? t->child : c;

        missing_ranks(who, sizeof(who), j, MISSING_JOIN, 0);
        snprintf(why, sizeof(why), "%s of the new %d-rank communicator to join", who, j->nranks);
    } else if (t->phase == 0) {
        missing_ranks(who, sizeof(who), c, MISSING_DEPARTURE, c->round);
        snprintf(why, sizeof(why), "%s to finish the previous collective", who);
    } else {
        missing_ranks(who, sizeof(who), c, MISSING_ARRIVAL, c->round + 1);
        snprintf(why, sizeof(why), "%s to make this call", who);
    }
    return fail_loud(ncclSystemError,
                     "%s : rank %d of %d%s timed out after %g s waiting for %s; NCCL would hang "
                     "here (SHAPETRACE_DOUBLE_TIMEOUT)",
                     what, c->rank, c->nranks, seq, limit, why);
}

/* After a failure the comms of the unfinished calls are out of step with their peers: they take
 * NCCL's asynchronous error, and so do children already handed out; the others go. */
static void abandon(struct task *t, size_t n, ncclResult_t err)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i].finished)
            continue;
        if (t[i].op.child) { /* handed out at the call: it stays the caller's, in error */
            t[i].op.child->async_error = err;
            t[i].op.child->pending = false;
        } else if (t[i].child) {
            free_comm(t[i].child);
        }
        t[i].child = NULL;
        if (t[i].op.comm->async_error == ncclSuccess)
            t[i].op.comm->async_error = err;
    }
}

/* Advances every task until all are done, sleeping on a futex when none can move. A task that
 * cannot move for SHAPETRACE_DOUBLE_TIMEOUT seconds fails them all. */
static ncclResult_t run_tasks(struct task *t, size_t n)
{
    double limit = timeout_s();
    uint64_t limit_ns = (uint64_t)(limit * 1e9), last = now_ns();
    size_t left = n;

    while (left > 0) {
        struct task *stuck = NULL;
        ncclResult_t err = ncclSuccess;
        bool moved = false;
        size_t nstuck = 0;
        uint64_t now, wait;

        for (size_t i = 0; i < n; i++) {
            if (t[i].finished || !eligible(t, i))
                continue;
            switch (step(&t[i], &err)) {
            case STEP_DONE:
                t[i].finished = true;
                left--;
                moved = true;
                break;
            case STEP_MOVED:
                moved = true;
                break;
            case STEP_BLOCKED:
                stuck = stuck ? stuck : &t[i];
                nstuck++;
                break;
            case STEP_FAILED:
                abandon(t, n, err);
                return err;
            }
        }
        if (moved) {
            last = now_ns();
            continue;
        }
        if (!stuck) {
            err = fail(ncclInternalError, "%s : nothing can run", t[0].name);
            abandon(t, n, err);
            return err;
        }
        now = now_ns();
        if (now - last >= limit_ns) {
            err = timed_out(stuck, limit);
            abandon(t, n, err);
            return err;
        }
        /* With several waits, the other words are polled every millisecond. */
        wait = last + limit_ns - now;
        if (wait > (nstuck > 1 ? 1000000u : 100000000u))
            wait = nstuck > 1 ? 1000000u : 100000000u;
        futex_wait(stuck->word, stuck->word_val, wait);
    }
    return ncclSuccess;
}

/* A call on a shared-memory comm made outside a group. */
static ncclResult_t run_one(const struct op *op)
{
    struct task t;
    ncclResult_t r;

    init_task(&t, op);
    r = run_tasks(&t, 1);
    free_task(&t);
    return r;
}

/* Runs the queued calls on shared-memory comms, all together. */
static ncclResult_t run_xqueue(void)
{
    size_t n = xqueue_len;
    struct task *t = calloc(n, sizeof(*t));
    ncclResult_t r;

    if (!t) {
        drop_xqueue(ncclSystemError);
        return no_memory("ncclGroupEnd");
    }
    for (size_t i = 0; i < n; i++)
        init_task(&t[i], &xqueue[i]);
    xqueue_len = 0;
    r = run_tasks(t, n);
    for (size_t i = 0; i < n; i++)
        free_task(&t[i]);
    free(t);
    return r;
}

/* The outermost group's end: the clique calls first (they fail without moving anything), then
 * the calls on shared-memory comms. */
static ncclResult_t flush(void)
{
    ncclResult_t r = queue_len ? flush_local() : ncclSuccess;

    if (r == ncclSuccess && xqueue_len)
        r = run_xqueue();
    else
        drop_xqueue(r);
    release_queues();
    return r;
}

/* Queues a checked call; takes ownership of op->exclude. Outside a group, a call on a
 * shared-memory comm runs at once. */
static ncclResult_t submit(const struct op *op)
{
    ncclResult_t r;

    if (op->comm->shm && group_depth == 0)
        return run_one(op);
    if (op->comm->shm)
        return push(&xqueue, &xqueue_len, &xqueue_cap, op);
    if ((r = push(&queue, &queue_len, &queue_cap, op)) != ncclSuccess)
        return r;
    return group_depth > 0 ? ncclSuccess : flush();
}

/* As in NCCL, a call that fails inside a group also fails the group. */
static ncclResult_t note(ncclResult_t r)
{
    if (r != ncclSuccess && group_depth > 0 && group_error == ncclSuccess)
        group_error = r;
    return r;
}

/* ---- CUDA graphs: a call on a capturing stream runs at each launch, not at capture ---- */

/* The calls of one capture, run together at each launch: one call, or a group's calls on
 * capturing streams. Never freed (a graph may be launched until the process ends), and kept
 * on one list so that they stay reachable. */
struct captured {
    struct captured *next;
    size_t n;
    struct op ops[];
};

static struct captured *all_captured;
static pthread_mutex_t captured_lock = PTHREAD_MUTEX_INITIALIZER;

static _Thread_local struct op *cqueue;
static _Thread_local size_t cqueue_len;
static _Thread_local size_t cqueue_cap;

/* Whether stream is being captured, asked of whichever libcudart is loaded (looked up at run
 * time, as current_device does). */
static bool capturing(cudaStream_t stream)
{
    __typeof__(&cudaStreamIsCapturing) is =
        (__typeof__(&cudaStreamIsCapturing))dlsym(RTLD_DEFAULT, "cudaStreamIsCapturing");
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;

    return stream && is && is(stream, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive;
}

/* A launch: the calls go through as if issued now, as one group. Errors have been reported by
 * the calls themselves (a timeout's warning); a host function has no one to return them to. */
static void CUDART_CB replay_calls(void *data)
{
    const struct captured *c = data;
    ncclResult_t r = ncclSuccess;

    group_depth++;
    for (size_t i = 0; i < c->n && r == ncclSuccess; i++) {
        struct op op = c->ops[i];
        op.stream = NULL;
        if ((r = check_usable(op.comm, ops[op.kind].name)) == ncclSuccess)
            r = submit(&op);
    }
    if (--group_depth > 0)
        return;
    if (r == ncclSuccess) {
        flush();
    } else {
        clear_queue();
        drop_xqueue(r);
        release_queues();
    }
}

/* Hands ops[0..n) to the capture of stream as one host node. */
static ncclResult_t capture_calls(cudaStream_t stream, const struct op *o, size_t n)
{
    __typeof__(&cudaLaunchHostFunc) launch =
        (__typeof__(&cudaLaunchHostFunc))dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc");
    struct captured *c = malloc(sizeof(*c) + n * sizeof(*o));

    if (!c)
        return no_memory("capture");
    c->n = n;
    memcpy(c->ops, o, n * sizeof(*o));
    if (!launch || launch(stream, replay_calls, c) != cudaSuccess) {
        free(c);
        return fail(ncclUnhandledCudaError, "%s : cudaLaunchHostFunc on a capturing stream failed",
                    ops[o->kind].name);
    }
    pthread_mutex_lock(&captured_lock);
    c->next = all_captured;
    all_captured = c;
    pthread_mutex_unlock(&captured_lock);
    return ncclSuccess;
}

/* The outermost group's end: its calls on capturing streams become one node of the capture of
 * the first one's stream. */
static ncclResult_t flush_captured(void)
{
    ncclResult_t r = ncclSuccess;

    if (cqueue_len)
        r = capture_calls(cqueue[0].stream, cqueue, cqueue_len);
    free(cqueue);
    cqueue = NULL;
    cqueue_len = cqueue_cap = 0;
    return r;
}

NCCL_API(ncclResult_t, ncclGroupStart, void)
{
    group_depth++;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void)
{
    ncclResult_t r;

    if (group_depth == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd : not in a group call");
    if (--group_depth > 0)
        return ncclSuccess;
    if (group_error != ncclSuccess) {
        r = group_error;
        group_error = ncclSuccess;
        free(cqueue);
        cqueue = NULL;
        cqueue_len = cqueue_cap = 0;
        clear_queue();
        drop_xqueue(r);
        release_queues();
        return r;
    }
    r = flush_captured();
    return r == ncclSuccess ? flush() : r;
}

/* ---- collectives and p2p --------------------------------------------------------------------- */

/* NCCL's argument checks (enqueue.cc ArgsCheck), plus NULL buffers, which NCCL would pass to a
 * kernel that faults. Only the root's recvbuff matters to reduce and gather, and only the root's
 * sendbuff to broadcast and scatter. */
static ncclResult_t check_args(const struct op *op)
{
    const struct op_info *info = &ops[op->kind];
    bool is_root = op->comm && op->root == op->comm->rank;
    bool needs_send, needs_recv;
    ncclResult_t r;
    int n;

    if ((r = check_usable(op->comm, info->name)) != ncclSuccess)
        return r;
    n = op->comm->nranks;
    if ((unsigned)op->dtype >= ncclNumTypes)
        return fail(ncclInvalidArgument, "%s : invalid type %d", info->name, (int)op->dtype);
    if (info->has_redop && (unsigned)op->redop >= ncclNumOps)
        return fail(ncclInvalidArgument, "%s : invalid reduction operation %d", info->name,
                    (int)op->redop);
    if (info->has_root && (op->root < 0 || op->root >= n))
        return fail(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)",
                    info->name, op->root, n - 1);
    if (info->family == FAM_P2P && (op->root < 0 || op->root >= n))
        return fail(ncclInvalidArgument, "%s : invalid peer %d (peer should be in the 0..%d range)",
                    info->name, op->root, n - 1);
    if (op->count > SIZE_MAX / elem_size(op) / (size_t)n)
        return fail(ncclInvalidArgument, "%s : count %zu is too large", info->name, op->count);
    needs_send =
        op->kind != OP_RECV && ((op->kind != OP_BROADCAST && op->kind != OP_SCATTER) || is_root);
    needs_recv =
        op->kind != OP_SEND && ((op->kind != OP_REDUCE && op->kind != OP_GATHER) || is_root);
    if (op->count && needs_send && !op->sendbuff)
        return fail(ncclInvalidArgument, "%s : sendbuff argument is NULL", info->name);
    if (op->count && needs_recv && !op->recvbuff)
        return fail(ncclInvalidArgument, "%s : recvbuff argument is NULL", info->name);
    return ncclSuccess;
}

static ncclResult_t call(const struct op *op)
{
    ncclResult_t r = check_args(op);

    if (r == ncclSuccess && capturing(op->stream))
        r = group_depth ? push(&cqueue, &cqueue_len, &cqueue_cap, op)
                        : capture_calls(op->stream, op, 1);
    else if (r == ncclSuccess)
        r = submit(op);
    return note(r);
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_ALL_REDUCE,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .redop = op});
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_BROADCAST,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

/* As in NCCL (src/collectives.cc): ncclBcast is ncclBroadcast in place, called through the
 * exported symbol, so that a preloaded tracer sees the inner call too. */
NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_REDUCE,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .redop = op,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_ALL_GATHER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = sendcount,
                             .dtype = datatype});
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_REDUCE_SCATTER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = recvcount,
                             .dtype = datatype,
                             .redop = op});
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_ALLTOALL,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype});
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_GATHER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_SCATTER,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_SEND,
                             .comm = comm,
                             .stream = stream,
                             .sendbuff = sendbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = peer});
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream)
{
    return call(&(struct op){.kind = OP_RECV,
                             .comm = comm,
                             .stream = stream,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = peer});
}

/* ---- communicator API ------------------------------------------------------------------------ */

NCCL_API(ncclResult_t, ncclGetVersion, int *version)
{
    if (!version)
        return fail(ncclInvalidArgument, "ncclGetVersion : version argument is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
{
    size_t got = 0;

    if (!uniqueId)
        return fail(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
    while (got < sizeof(uniqueId->internal)) {
        ssize_t n = getrandom(uniqueId->internal + got, sizeof(uniqueId->internal) - got, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fail(ncclSystemError, "ncclGetUniqueId : getrandom failed: %s", strerror(errno));
        got += (size_t)n;
    }
    return ncclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm)
{
    (void)comm;
    return last_error;
}

static bool zero_id(const ncclUniqueId *id)
{
    for (size_t i = 0; i < sizeof(id->internal); i++)
        if (id->internal[i])
            return false;
    return true;
}

/* A rank of a communicator whose other ranks are other processes (or other threads). Inside a
 * group the comm is handed out at once and the wait for the others happens at ncclGroupEnd, so
 * that one thread can create several ranks, as with NCCL. */
static ncclResult_t init_shm(const char *fn, ncclComm_t *comm, int nranks, const ncclUniqueId *id,
                             int rank)
{
    ncclComm_t c = new_shm_comm(nranks, rank, current_device());
    struct op op = {.kind = OP_INIT, .fn = fn};
    ncclResult_t r;

    if (!c)
        return no_memory(fn);
    name_from_id(c, id);
    if ((r = attach(c, fn)) != ncclSuccess) {
        free_comm(c);
        return r;
    }
    op.comm = c;
    if (group_depth > 0) {
        if ((r = push(&xqueue, &xqueue_len, &xqueue_cap, &op)) != ncclSuccess) {
            free_comm(c);
            return r;
        }
        c->pending = true;
        *comm = c;
        return ncclSuccess;
    }
    if ((r = run_one(&op)) != ncclSuccess) {
        free_comm(c);
        return r;
    }
    *comm = c;
    return ncclSuccess;
}

/* Real NCCL calls the CUDA runtime from inside its own calls, looking its functions up at run
 * time; so does the double, with one small host copy per communicator it makes through a
 * function found by dlsym(handle): a tracer must keep such nested calls out of the trace, and
 * its dlsym hook must still hand out working functions inside them. */
static ncclResult_t runtime_copy(const char *fn)
{
    void *h = dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD);
    __typeof__(&cudaMemcpy) copy = h ? (__typeof__(&cudaMemcpy))dlsym(h, "cudaMemcpy") : NULL;
    uint64_t from = 0x736870646f75626cULL, to = 0;
    cudaError_t e = copy ? copy(&to, &from, sizeof(from), cudaMemcpyHostToHost) : cudaSuccess;

    if (h)
        dlclose(h);
    if (copy && (e != cudaSuccess || to != from))
        return fail(ncclInternalError, "%s : the runtime's cudaMemcpy failed (%d)", fn, (int)e);
    return ncclSuccess;
}

/* With SHP_DOUBLE_VIA_DRIVER=1, like real NCCL the double also uses the driver for buffers of its
 * own, from the calling thread and from a proxy thread of its own, with entry points found
 * through the driver's cuGetProcAddress_v2: a tracer must record none of them. */
typedef int (*drv_proc_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*drv_alloc_fn)(unsigned long long *, size_t);
typedef int (*drv_free_fn)(unsigned long long);
typedef int (*drv_htod_fn)(unsigned long long, const void *, size_t);

static struct {
    drv_alloc_fn alloc;
    drv_free_fn free;
    drv_htod_fn htod;
} drv;

static void *driver_buffer(void *arg)
{
    static const char bytes[64];
    unsigned long long d = 0;
    intptr_t bad = drv.alloc(&d, sizeof(bytes)) || drv.htod(d, bytes, sizeof(bytes)) || drv.free(d);
    (void)arg;
    return (void *)bad;
}

static ncclResult_t driver_buffers(const char *fn)
{
    const char *v = getenv("SHP_DOUBLE_VIA_DRIVER");
    if (!v || strcmp(v, "1"))
        return ncclSuccess;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    drv_proc_fn proc = h ? (drv_proc_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!proc || proc("cuMemAlloc", (void **)&drv.alloc, 12000, 0, NULL) ||
        proc("cuMemFree", (void **)&drv.free, 12000, 0, NULL) ||
        proc("cuMemcpyHtoD", (void **)&drv.htod, 12000, 0, NULL))
        return fail(ncclSystemError, "%s : no driver", fn);
    pthread_t proxy;
    void *bad = (void *)1;
    if (driver_buffer(NULL) || pthread_create(&proxy, NULL, driver_buffer, NULL) ||
        pthread_join(proxy, &bad) || bad)
        return fail(ncclInternalError, "%s : the driver's buffers failed", fn);
    return ncclSuccess;
}

static ncclResult_t init_rank(const char *fn, ncclComm_t *comm, int nranks, const ncclUniqueId *id,
                              int rank, const ncclConfig_t *config)
{
    struct clique *c;
    ncclResult_t r;

    if (!comm)
        return fail(ncclInvalidArgument, "%s : comm argument is NULL", fn);
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "%s : invalid rank requested : %d/%d", fn, rank, nranks);
    if ((r = check_config(config, fn)) != ncclSuccess)
        return r;
    /* Real NCCL would try to reach a bootstrap root at the address inside the id, and fail. */
    if (zero_id(id))
        return fail(ncclInvalidArgument,
                    "%s : the unique id is all zeroes: it was not made by ncclGetUniqueId", fn);
    if ((r = runtime_copy(fn)) != ncclSuccess || (r = driver_buffers(fn)) != ncclSuccess)
        return r;
    if (nranks > 1)
        return init_shm(fn, comm, nranks, id, rank);
    if (!(c = new_clique(1)) || !(*comm = new_comm(c, 0, current_device()))) {
        free(c);
        return no_memory(fn);
    }
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank)
{
    return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL);
}

/* config.blocking = 0: NCCL returns ncclInProgress and the comm is ready later (nonblocking). */
static bool is_nonblocking(const ncclConfig_t *config)
{
    return config && config->blocking == 0;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank, ncclConfig_t *config)
{
    ncclResult_t r = init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);

    if (r != ncclSuccess || !is_nonblocking(config))
        return r;
    nonblocking(*comm);
    return ncclInProgress;
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
         int nId, ncclUniqueId *commIds, ncclConfig_t *config)
{
    ncclResult_t r;

    if (nId < 1 || !commIds) {
        if (newcomm)
            *newcomm = NULL;
        return fail(ncclInvalidArgument, "ncclCommInitRankScalable : invalid nId %d or commIds %p",
                    nId, (void *)commIds);
    }
    r = init_rank("ncclCommInitRankScalable", newcomm, nranks, &commIds[0], myrank, config);
    if (r != ncclSuccess || !is_nonblocking(config))
        return r;
    nonblocking(*newcomm);
    return ncclInProgress;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist)
{
    int ndevices = device_count();
    struct clique *c;

    if (!comm)
        return fail(ncclInvalidArgument, "ncclCommInitAll : comm argument is NULL");
    if (ndev < 1)
        return fail(ncclInvalidArgument, "ncclCommInitAll : invalid ndev %d", ndev);
    for (int i = 0; i < ndev; i++) {
        int dev = devlist ? devlist[i] : i;

        if (dev < 0 || dev >= ndevices)
            return fail(ncclInvalidArgument,
                        "ncclCommInitAll : invalid device %d for rank %d (%d devices)", dev, i,
                        ndevices);
        for (int j = 0; j < i; j++)
            if (dev == (devlist ? devlist[j] : j))
                return fail(ncclInvalidUsage,
                            "ncclCommInitAll : Duplicate GPU detected : rank %d and rank %d both "
                            "on CUDA device %d",
                            j, i, dev);
    }
    if (!(c = new_clique(ndev)))
        return no_memory("ncclCommInitAll");
    for (int i = 0; i < ndev; i++) {
        comm[i] = new_comm(c, i, devlist ? devlist[i] : i);
        if (!comm[i]) {
            for (int j = 0; j < i; j++)
                free_comm(comm[j]);
            if (i == 0)
                free(c);
            return no_memory("ncclCommInitAll");
        }
    }
    return ncclSuccess;
}

/* Submits a split or shrink. On a shared-memory comm inside a group the new comm is handed out at
 * once, as NCCL's ncclCommSplit sets *newcomm before the group runs the child's init; like NCCL's,
 * it is refused until the group has ended (and shapetrace's wrapper sees the handle at the call).
 * A clique's split still fills *newcomm at ncclGroupEnd. */
static ncclResult_t submit_child(struct op *op)
{
    ncclComm_t child;
    ncclResult_t r;

    if (!op->comm->shm || group_depth == 0 ||
        (op->kind == OP_SPLIT && op->color == NCCL_SPLIT_NOCOLOR))
        return submit(op);
    if (!(child = new_shm_comm(0, -1, op->comm->device))) {
        free(op->exclude);
        return no_memory(ops[op->kind].name);
    }
    child->pending = true;
    op->child = child;
    if ((r = submit(op)) != ncclSuccess) {
        free_comm(child);
        return r;
    }
    *op->newcomm = child;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config)
{
    ncclResult_t r = check_usable(comm, "ncclCommSplit");

    if (r != ncclSuccess)
        return note(r);
    if (!newcomm)
        return note(fail(ncclInvalidArgument, "ncclCommSplit : newcomm argument is NULL"));
    *newcomm = NULL;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return note(fail(ncclInvalidArgument,
                         "ncclCommSplit : invalid color %d (non-negative or NCCL_SPLIT_NOCOLOR)",
                         color));
    if ((r = check_config(config, "ncclCommSplit")) != ncclSuccess)
        return note(r);
    r = submit_child(&(struct op){
        .kind = OP_SPLIT, .comm = comm, .color = color, .key = key, .newcomm = newcomm});
    if (r != ncclSuccess || !is_nonblocking(config) || !*newcomm)
        return note(r);
    nonblocking(*newcomm);
    return ncclInProgress;
}

/* Excluded ranks do not call; every other rank calls with the same list. */
NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
         int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    ncclResult_t r = check_usable(comm, "ncclCommShrink");
    int *exclude;

    if (r != ncclSuccess)
        return note(r);
    if (!newcomm)
        return note(fail(ncclInvalidArgument, "ncclCommShrink : newcomm argument is NULL"));
    *newcomm = NULL;
    if (excludeRanksCount < 0 || excludeRanksCount >= comm->nranks ||
        (excludeRanksCount > 0 && !excludeRanksList))
        return note(fail(ncclInvalidArgument, "ncclCommShrink : invalid exclude list (%d ranks)",
                         excludeRanksCount));
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
        return note(fail(ncclInvalidArgument, "ncclCommShrink : invalid flags %d", shrinkFlags));
    if ((r = check_config(config, "ncclCommShrink")) != ncclSuccess)
        return note(r);
    exclude = malloc((size_t)(excludeRanksCount ? excludeRanksCount : 1) * sizeof(*exclude));
    if (!exclude)
        return note(no_memory("ncclCommShrink"));
    if (excludeRanksCount)
        memcpy(exclude, excludeRanksList, (size_t)excludeRanksCount * sizeof(*exclude));
    qsort(exclude, (size_t)excludeRanksCount, sizeof(*exclude), cmp_int);
    for (int i = 0; i < excludeRanksCount; i++) {
        if (exclude[i] < 0 || exclude[i] >= comm->nranks || (i && exclude[i] == exclude[i - 1]) ||
            exclude[i] == comm->rank) {
            r = fail(ncclInvalidArgument,
                     "ncclCommShrink : rank %d cannot exclude rank %d (out of range, repeated, or "
                     "itself)",
                     comm->rank, exclude[i]);
            free(exclude);
            return note(r);
        }
    }
    return note(submit_child(&(struct op){.kind = OP_SHRINK,
                                          .comm = comm,
                                          .exclude = exclude,
                                          .nexclude = excludeRanksCount,
                                          .newcomm = newcomm}));
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
{
    ncclResult_t r = check_comm(comm, "ncclCommFinalize");

    if (r == ncclSuccess)
        comm->finalized = true;
    return r;
}

static bool queued_on(ncclComm_t comm)
{
    for (size_t i = 0; i < queue_len; i++)
        if (queue[i].comm == comm)
            return true;
    for (size_t i = 0; i < xqueue_len; i++)
        if (xqueue[i].comm == comm || xqueue[i].child == comm)
            return true;
    return false;
}

/* Removes the queued calls on comm from one queue. */
static void drop_calls_on(struct op *q, size_t *len, ncclComm_t comm)
{
    size_t kept = 0;

    for (size_t i = 0; i < *len; i++) {
        if (q[i].comm == comm || q[i].child == comm)
            free(q[i].exclude);
        else
            q[kept++] = q[i];
    }
    *len = kept;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
{
    ncclResult_t r;

    if (!comm)
        return ncclSuccess;
    if ((r = check_comm(comm, "ncclCommDestroy")) != ncclSuccess)
        return r;
    if (queued_on(comm))
        return fail(ncclInvalidUsage,
                    "ncclCommDestroy : rank %d has calls queued in an open group on this comm",
                    comm->rank);
    free_comm(comm);
    return ncclSuccess;
}

/* Drops this thread's queued calls on the comm, then destroys it. */
NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
{
    ncclResult_t r;

    if (!comm)
        return ncclSuccess;
    if ((r = check_comm(comm, "ncclCommAbort")) != ncclSuccess)
        return r;
    drop_calls_on(queue, &queue_len, comm);
    drop_calls_on(xqueue, &xqueue_len, comm);
    free_comm(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
{
    ncclResult_t r = check_ready(comm, "ncclCommCount");

    if (r != ncclSuccess)
        return r;
    if (!count)
        return fail(ncclInvalidArgument, "ncclCommCount : count argument is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
{
    ncclResult_t r = check_ready(comm, "ncclCommCuDevice");

    if (r != ncclSuccess)
        return r;
    if (!device)
        return fail(ncclInvalidArgument, "ncclCommCuDevice : device argument is NULL");
    *device = comm->device;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
{
    ncclResult_t r = check_ready(comm, "ncclCommUserRank");

    if (r != ncclSuccess)
        return r;
    if (!rank)
        return fail(ncclInvalidArgument, "ncclCommUserRank : rank argument is NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
{
    ncclResult_t r = check_comm(comm, "ncclCommGetAsyncError");

    if (r != ncclSuccess)
        return r;
    if (!asyncError)
        return fail(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError argument is NULL");
    *asyncError =
        in_progress(comm) && comm->async_error == ncclSuccess ? ncclInProgress : comm->async_error;
    return ncclSuccess;
}

/* Plain host memory, not the cudart double's device range (see docs/testing.md). */
NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
{
    if (!ptr || size == 0)
        return fail(ncclInvalidArgument, "ncclMemAlloc : invalid ptr %p or size %zu", (void *)ptr,
                    size);
    *ptr = malloc(size);
    return *ptr ? ncclSuccess : no_memory("ncclMemAlloc");
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
    free(ptr);
    return ncclSuccess;
}
