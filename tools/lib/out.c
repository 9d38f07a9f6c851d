/* shapetrace tools: one-line errors on stderr, JSON strings, the buffered writer, growing
 * arrays and the cores a command may use (see out.h). */
#define _GNU_SOURCE
#include "tools/lib/out.h"

#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void shp_err(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "shapetrace: %s\n", buf);
}

int shp_utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (c >= 0xf5 || !n)
        return 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || (c == 0xf0 && p[1] < 0x90) ||
        (c == 0xf4 && p[1] > 0x8f))
        return 0;
    return n;
}

char *shp_utf8_dup(const char *s)
{
    size_t len = strlen(s);
    char *out = malloc(3 * len + 1), *o = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int n = *p < 0x80 ? 1 : shp_utf8_len(p);
        if (!n) {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            continue;
        }
        memcpy(o, p, (size_t)n);
        o += n;
        p += n - 1;
    }
    *o = 0;
    return out;
}

void shp_out_init(struct shp_out *o, FILE *f)
{
    o->f = f;
    o->len = 0;
}

void shp_out_flush(struct shp_out *o)
{
    if (o->len)
        fwrite(o->buf, 1, o->len, o->f);
    o->len = 0;
}

void shp_out_mem_slow(struct shp_out *o, const void *p, size_t n)
{
    shp_out_flush(o);
    if (n > sizeof(o->buf)) {
        fwrite(p, 1, n, o->f);
        return;
    }
    memcpy(o->buf, p, n);
    o->len = n;
}

void shp_out_cstr(struct shp_out *o, const char *s)
{
    shp_out_mem(o, s, strlen(s));
}

void shp_out_u64(struct shp_out *o, uint64_t v)
{
    /* Two digits a step: half the divisions. */
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "6263646566676869707172737475767778798081828384858687888990919293"
                                "949596979899";
    char d[20];
    size_t i = sizeof(d);
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        d[--i] = pairs[2 * r + 1];
        d[--i] = pairs[2 * r];
    }
    if (v >= 10) {
        d[--i] = pairs[2 * v + 1];
        d[--i] = pairs[2 * v];
    } else {
        d[--i] = (char)('0' + v);
    }
    shp_out_mem(o, d + i, sizeof(d) - i);
}

void shp_out_int(struct shp_out *o, int v)
{
    if (v < 0) {
        shp_out_char(o, '-');
        shp_out_u64(o, -(uint64_t)(int64_t)v);
    } else {
        shp_out_u64(o, (uint64_t)v);
    }
}

void shp_out_hex(struct shp_out *o, uint64_t v, unsigned width)
{
    char d[16];
    size_t i = sizeof(d);
    do {
        d[--i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    while (sizeof(d) - i < width && i > 0)
        d[--i] = '0';
    shp_out_mem(o, d + i, sizeof(d) - i);
}

/* Bytes that go out as they are: printable ASCII other than the quote and the backslash. */
static bool json_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

void shp_out_json_str(struct shp_out *o, const char *s)
{
    if (!s) {
        shp_out_mem(o, "null", 4);
        return;
    }
    shp_out_char(o, '"');
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        const unsigned char *run = p;
        while (json_plain(*p))
            p++;
        if (p > run)
            shp_out_mem(o, run, (size_t)(p - run));
        if (!*p)
            break;
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            shp_out_mem(o, esc, 2);
        } else if (*p == '\n') {
            shp_out_mem(o, "\\n", 2);
        } else if (*p == '\t') {
            shp_out_mem(o, "\\t", 2);
        } else if (*p < 0x20) {
            shp_out_mem(o, "\\u00", 4);
            shp_out_hex(o, *p, 2);
        } else {
            /* Text from a trace (marks, host, exe, paths) may be any bytes: the output stays
             * valid JSON, each invalid byte shown as U+FFFD. */
            int n = shp_utf8_len(p);
            if (n) {
                shp_out_mem(o, p, (size_t)n);
                p += n - 1;
            } else {
                shp_out_mem(o, "\\ufffd", 6);
            }
        }
        p++;
    }
    shp_out_char(o, '"');
}

void shp_json_str(FILE *f, const char *s)
{
    struct shp_out o;
    shp_out_init(&o, f);
    shp_out_json_str(&o, s);
    shp_out_flush(&o);
}

bool shp_grow_slow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? 2 * *cap : 64;
    if (size && ncap > SIZE_MAX / size)
        return false;
    void *a = realloc(*arr, ncap * size);
    if (!a)
        return false;
    *arr = a;
    *cap = ncap;
    return true;
}

unsigned shp_cores_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}
