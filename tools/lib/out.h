/* shapetrace tools: the only ways tools/lib and the analyzer print: a one-line error, a JSON
 * string, and a buffered writer with its own number formatting for outputs of millions of lines. */
#ifndef SHAPETRACE_OUT_H
#define SHAPETRACE_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* "shapetrace: <text>" on stderr, one line. */
void shp_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* JSON string with escapes, or null for NULL. */
void shp_json_str(FILE *f, const char *s);

/* The length of the valid UTF-8 sequence at p (1 to 4), or 0 when it is not one: a stray
 * continuation byte, a cut sequence, an overlong form, a surrogate, or beyond U+10FFFF. The JSON
 * writers show each byte that starts none as U+FFFD. */
int shp_utf8_len(const unsigned char *p);
/* A copy of s as the JSON writers show it: each byte that starts no valid UTF-8 sequence is
 * U+FFFD. Free it; NULL when out of memory. */
char *shp_utf8_dup(const char *s);

/* A buffered writer onto a FILE: what it holds goes out with shp_out_flush (and whenever the
 * buffer fills). No printf: dump --json writes about 600 bytes an event, a million events a
 * second. Not thread-safe; one writer per stream at a time, and nothing else written to the FILE
 * between a put and the flush. */
#define SHP_OUT_BUF 16384
struct shp_out {
    FILE *f;
    size_t len;
    char buf[SHP_OUT_BUF];
};

/* Starts an empty writer onto f. */
void shp_out_init(struct shp_out *o, FILE *f);
/* Writes what o holds to its FILE (not fflush: the FILE keeps its own buffering). */
void shp_out_flush(struct shp_out *o);
/* What shp_out_mem does when the buffer is full; not for direct use. */
void shp_out_mem_slow(struct shp_out *o, const void *p, size_t n);

/* n bytes of p, as they are. Inline: most writes are a few bytes of a known length, which the
 * compiler turns into one or two moves. */
static inline void shp_out_mem(struct shp_out *o, const void *p, size_t n)
{
    if (__builtin_expect(o->len + n <= sizeof(o->buf), 1)) {
        memcpy(o->buf + o->len, p, n);
        o->len += n;
    } else {
        shp_out_mem_slow(o, p, n);
    }
}

static inline void shp_out_char(struct shp_out *o, char c)
{
    if (__builtin_expect(o->len == sizeof(o->buf), 0))
        shp_out_flush(o);
    o->buf[o->len++] = c;
}

/* A NUL-terminated string, as it is. */
void shp_out_cstr(struct shp_out *o, const char *s);
/* Decimal, as printf's PRIu64 and %d write them. */
void shp_out_u64(struct shp_out *o, uint64_t v);
void shp_out_int(struct shp_out *o, int v);
/* Lowercase hexadecimal without a prefix, zero-padded to at least width digits (PRIx64, or
 * "%016" PRIx64 with width 16). */
void shp_out_hex(struct shp_out *o, uint64_t v, unsigned width);
/* As shp_json_str. */
void shp_out_json_str(struct shp_out *o, const char *s);

/* Room for one more of n elements of size bytes in the growing array *arr of capacity *cap
 * (doubled, from 64). Returns false when out of memory or the size would overflow, *arr and *cap
 * unchanged. The tools' growing tables all grow so. shp_grow_slow is the part past the inline
 * test of room. */
bool shp_grow_slow(void **arr, size_t *cap, size_t n, size_t size);
/* Inline while there is room: the analyzer's merge asks it for every collective. */
static inline bool shp_grow(void **arr, size_t *cap, size_t n, size_t size)
{
    return n < *cap || shp_grow_slow(arr, cap, n, size);
}

/* The cores this process may run on (its affinity mask), at least 1: what a command's threads
 * default to. */
unsigned shp_cores_available(void);

#endif
