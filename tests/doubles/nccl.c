/* Test double of libnccl.so.2 (NCCL 2.28): communicators, groups, and every collective and p2p
 * call with real data movement and reductions, for ranks that all live in this process. Defined
 * against the real nccl.h; see README.md for what it does not simulate. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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

struct ncclComm {
    uint64_t magic;
    struct clique *clique;
    int rank;
    int nranks;
    int device;
    bool finalized;
    ncclResult_t async_error;
    unsigned long long ncoll; /* collectives completed: numbers the one that fails to match */
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

/* Records the message for ncclGetLastError, prints it as NCCL would under NCCL_DEBUG=WARN, and
 * returns r. */
__attribute__((format(printf, 2, 3))) static ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    if (warn_enabled()) {
        char line[1200];
        int n = snprintf(line, sizeof(line), "nccl-double:%d NCCL WARN %s\n", (int)getpid(),
                         last_error);

        if (n > 0)
            (void)!write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line));
    }
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
    OP_KINDS
};

/* How calls meet at ncclGroupEnd. The k-th call of a family on one rank meets the k-th of the same
 * family on every other rank of the clique; a send meets the recv posted for it. */
enum family { FAM_COLL, FAM_P2P, FAM_SPLIT, FAM_SHRINK };

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
    bool matched;
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

    pthread_mutex_lock(&clique_lock);
    last = --c->refs == 0;
    pthread_mutex_unlock(&clique_lock);
    if (last)
        free(c);
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

static ncclResult_t check_usable(ncclComm_t comm, const char *fn)
{
    ncclResult_t r = check_comm(comm, fn);

    if (r == ncclSuccess && comm->finalized)
        return fail(ncclInvalidUsage, "%s : comm was finalized", fn);
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

static void clear_queue(void)
{
    for (size_t i = 0; i < queue_len; i++)
        free(queue[i].exclude);
    queue_len = 0;
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
static ncclResult_t flush(void)
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

/* Queues a checked call; takes ownership of op->exclude. */
static ncclResult_t submit(const struct op *op)
{
    if (queue_len == queue_cap) {
        size_t cap = queue_cap ? 2 * queue_cap : 16;
        struct op *grown = realloc(queue, cap * sizeof(*queue));

        if (!grown) {
            free(op->exclude);
            return no_memory(ops[op->kind].name);
        }
        queue = grown;
        queue_cap = cap;
    }
    queue[queue_len++] = *op;
    queue[queue_len - 1].matched = false;
    return group_depth > 0 ? ncclSuccess : flush();
}

/* As in NCCL, a call that fails inside a group also fails the group. */
static ncclResult_t note(ncclResult_t r)
{
    if (r != ncclSuccess && group_depth > 0 && group_error == ncclSuccess)
        group_error = r;
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
        clear_queue();
        return r;
    }
    return flush();
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

    if (r == ncclSuccess)
        r = submit(op);
    return note(r);
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_ALL_REDUCE,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .redop = op});
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_BROADCAST,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_BROADCAST,
                             .comm = comm,
                             .sendbuff = buff,
                             .recvbuff = buff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_REDUCE,
                             .comm = comm,
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
    (void)stream;
    return call(&(struct op){.kind = OP_ALL_GATHER,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = sendcount,
                             .dtype = datatype});
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_REDUCE_SCATTER,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = recvcount,
                             .dtype = datatype,
                             .redop = op});
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_ALLTOALL,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype});
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_GATHER,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_SCATTER,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .recvbuff = recvbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = root});
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_SEND,
                             .comm = comm,
                             .sendbuff = sendbuff,
                             .count = count,
                             .dtype = datatype,
                             .root = peer});
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return call(&(struct op){.kind = OP_RECV,
                             .comm = comm,
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
    /* The other ranks would be in other processes; waiting for them would hang forever. */
    if (nranks > 1)
        return fail(ncclInvalidUsage,
                    "%s : rank %d of %d: ranks in other processes need the multi-rank NCCL "
                    "double, and this one is single-process (for several ranks in one process "
                    "use ncclCommInitAll)",
                    fn, rank, nranks);
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

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank, ncclConfig_t *config)
{
    return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
         int nId, ncclUniqueId *commIds, ncclConfig_t *config)
{
    if (nId < 1 || !commIds) {
        if (newcomm)
            *newcomm = NULL;
        return fail(ncclInvalidArgument, "ncclCommInitRankScalable : invalid nId %d or commIds %p",
                    nId, (void *)commIds);
    }
    return init_rank("ncclCommInitRankScalable", newcomm, nranks, &commIds[0], myrank, config);
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
    return note(submit(&(struct op){
        .kind = OP_SPLIT, .comm = comm, .color = color, .key = key, .newcomm = newcomm}));
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
    return note(submit(&(struct op){.kind = OP_SHRINK,
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
    return false;
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
    size_t kept = 0;

    if (!comm)
        return ncclSuccess;
    if ((r = check_comm(comm, "ncclCommAbort")) != ncclSuccess)
        return r;
    for (size_t i = 0; i < queue_len; i++) {
        if (queue[i].comm == comm)
            free(queue[i].exclude);
        else
            queue[kept++] = queue[i];
    }
    queue_len = kept;
    free_comm(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
{
    ncclResult_t r = check_comm(comm, "ncclCommCount");

    if (r != ncclSuccess)
        return r;
    if (!count)
        return fail(ncclInvalidArgument, "ncclCommCount : count argument is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
{
    ncclResult_t r = check_comm(comm, "ncclCommCuDevice");

    if (r != ncclSuccess)
        return r;
    if (!device)
        return fail(ncclInvalidArgument, "ncclCommCuDevice : device argument is NULL");
    *device = comm->device;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
{
    ncclResult_t r = check_comm(comm, "ncclCommUserRank");

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
    *asyncError = comm->async_error;
    return ncclSuccess;
}

/* Plain host memory, not the cudart double's device range (see README.md). */
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
