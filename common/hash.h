/* shapetrace: the small hashes both sides use (the ids' mixer, shp_mix64, is in the trace
 * contract: include/shapetrace/trace.h). Inline: they run for every frame of every stack. */
#ifndef SHAPETRACE_COMMON_HASH_H
#define SHAPETRACE_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define SHP_FNV_OFFSET 0xcbf29ce484222325ull
#define SHP_FNV_PRIME 0x100000001b3ull

/* FNV-1a of n bytes at p, continuing from h (start with SHP_FNV_OFFSET, or any seed). */
static inline uint64_t shp_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= SHP_FNV_PRIME;
    }
    return h;
}

/* One word into a running hash: an FNV step on the word, then a fold of the high bits, so that
 * words that differ only in their top bits (addresses) still spread. */
static inline uint64_t shp_hash_word(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= SHP_FNV_PRIME;
    h ^= h >> 29;
    return h;
}

#endif
