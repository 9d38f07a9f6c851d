/* shapetrace: the fingerprint of a value (SHAPETRACE_VALUES), as a trace's value records hold it.
 *
 * One 64-bit number for a run of n bytes, the same whoever computes it: the preload on the host,
 * the preload's kernel on a GPU (preload/values.c, hand-written PTX), the driver double in C. It
 * must not depend on how the work is split, so it is built from sums: every 8-byte word w_i
 * (little-endian, i counted from the first byte, whatever the address's alignment) adds
 * lane_a(w_i, i) to one 64-bit sum and lane_b(w_i, i) to another, with wrapping addition; the
 * last n % 8 bytes, zero-padded, with their count in the top byte, are word n / 8. Any thread,
 * block or order adds the same sums. The final mix folds both sums and n into the fingerprint.
 * Two lanes: a difference that one lane's sum happens to cancel (a second change undoing the
 * first's contribution) is caught by the other. */
#ifndef SHAPETRACE_VALUES_H
#define SHAPETRACE_VALUES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "include/shapetrace/trace.h"

/* The kernel's entry point, its launch shape and where it leaves its sums: block b of the grid
 * writes its two partial sums to out[2b] and out[2b + 1] (uint64_t), which the host adds up.
 * Parameters, in order: the bytes' device address, their count and out, each a 64-bit value. */
#define SHP_VALUES_ENTRY "shp_fingerprint"
#define SHP_VALUES_THREADS 256
#define SHP_VALUES_MAX_BLOCKS 64
/* Words each thread takes before another block is worth launching. */
#define SHP_VALUES_WORDS_PER_THREAD 16

#define SHP_VALUES_K1 0x9e3779b97f4a7c15ull   /* lane a's index multiplier, also the length's */
#define SHP_VALUES_K2 0xd6e8feb86659fd93ull   /* lane b's */
#define SHP_VALUES_SEED 0x5348505f56414c31ull /* "SHP_VAL1" */

/* Lane a: murmur3's 64-bit finalizer (shp_mix64) of the word xor its index times K1. */
static inline uint64_t shp_values_lane_a(uint64_t w, uint64_t i)
{
    return shp_mix64(w ^ (i * SHP_VALUES_K1));
}

/* Lane b: splitmix64's finalizer of the word plus (index + 1) times K2. */
static inline uint64_t shp_values_lane_b(uint64_t w, uint64_t i)
{
    uint64_t z = w + (i + 1) * SHP_VALUES_K2;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The tail word: the last r = n % 8 bytes (r > 0), zero-padded, with r in the top byte. */
static inline uint64_t shp_values_tail(const unsigned char *p, size_t r)
{
    uint64_t t = 0;
    for (size_t j = 0; j < r; j++)
        t |= (uint64_t)p[j] << (8 * j);
    return t | (uint64_t)r << 56;
}

/* The two sums over the words [first, end) of p (n bytes), the tail included when end passes
 * the last whole word; added to *a and *b. */
static inline void shp_values_sums(const void *p, size_t n, uint64_t first, uint64_t end,
                                   uint64_t step, uint64_t *a, uint64_t *b)
{
    const unsigned char *c = (const unsigned char *)p;
    uint64_t words = n / 8, sa = 0, sb = 0;
    for (uint64_t i = first; i < end && i < words; i += step) {
        uint64_t w;
        memcpy(&w, c + 8 * i, 8);
        sa += shp_values_lane_a(w, i);
        sb += shp_values_lane_b(w, i);
    }
    *a += sa;
    *b += sb;
}

/* The tail's contribution (none when n is a multiple of 8). */
static inline void shp_values_tail_sums(const void *p, size_t n, uint64_t *a, uint64_t *b)
{
    if (n % 8 == 0)
        return;
    uint64_t t = shp_values_tail((const unsigned char *)p + n / 8 * 8, n % 8);
    *a += shp_values_lane_a(t, n / 8);
    *b += shp_values_lane_b(t, n / 8);
}

/* The fingerprint from the two sums of n bytes. */
static inline uint64_t shp_values_final(uint64_t a, uint64_t b, uint64_t n)
{
    return shp_mix64(a ^ (b << 29 | b >> 35) ^ (n * SHP_VALUES_K1) ^ SHP_VALUES_SEED);
}

/* The fingerprint of n bytes at p, on the host. */
static inline uint64_t shp_values_hash(const void *p, size_t n)
{
    uint64_t a = 0, b = 0;
    shp_values_sums(p, n, 0, n / 8, 1, &a, &b);
    shp_values_tail_sums(p, n, &a, &b);
    return shp_values_final(a, b, n);
}

/* Blocks of SHP_VALUES_THREADS threads the preload launches for n bytes (1 to the maximum). */
static inline unsigned shp_values_blocks(uint64_t n)
{
    uint64_t per = (uint64_t)SHP_VALUES_THREADS * SHP_VALUES_WORDS_PER_THREAD * 8;
    uint64_t g = (n + per - 1) / per;
    return g < 1 ? 1 : g > SHP_VALUES_MAX_BLOCKS ? SHP_VALUES_MAX_BLOCKS : (unsigned)g;
}

#endif
