/* shapetrace tools: one-line errors on stderr, JSON strings and growing arrays (see out.h). */
#include "tools/lib/out.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

void shp_err(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "shapetrace: %s\n", buf);
}

/* The length of the valid UTF-8 sequence at p (1 to 4), or 0 when it is not one: a stray
 * continuation byte, a cut sequence, an overlong form, a surrogate, or beyond U+10FFFF. */
static int utf8_len(const unsigned char *p)
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

void shp_json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else if (*p < 0x80)
            fputc(*p, f);
        else {
            /* Text from a trace (marks, host, exe, paths) may be any bytes: the output stays
             * valid JSON, each invalid byte shown as U+FFFD. */
            int n = utf8_len(p);
            if (n) {
                fwrite(p, 1, (size_t)n, f);
                p += n - 1;
            } else {
                fputs("\\ufffd", f);
            }
        }
    }
    fputc('"', f);
}

bool shp_grow(void **arr, size_t *cap, size_t n, size_t size)
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
