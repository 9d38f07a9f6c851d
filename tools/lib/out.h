/* shapetrace tools: the only ways tools/lib and the analyzer print, a one-line error and a JSON
 * string. */
#ifndef SHAPETRACE_OUT_H
#define SHAPETRACE_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* "shapetrace: <text>" on stderr, one line. */
void shp_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* JSON string with escapes, or null for NULL. */
void shp_json_str(FILE *f, const char *s);

/* Room for one more of n elements of size bytes in the growing array *arr of capacity *cap
 * (doubled, from 64). Returns false when out of memory or the size would overflow, *arr and *cap
 * unchanged. The tools' growing tables all grow so. */
bool shp_grow(void **arr, size_t *cap, size_t n, size_t size);

#endif
