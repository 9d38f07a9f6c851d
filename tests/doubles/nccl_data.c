/* The NCCL double's datatypes: their sizes and names, the narrow float formats, and the
 * reductions, computed as the GPU computes them. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tests/doubles/nccl_double.h"

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

void shp_nd_reduce(void *out, const void *const *in, int n, size_t count, ncclDataType_t t,
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

size_t shp_nd_dtype_size(ncclDataType_t t)
{
    return dtypes[t].size;
}

const char *shp_nd_dtype_name(ncclDataType_t t)
{
    return dtypes[t].name;
}
