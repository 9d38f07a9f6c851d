/* shapetrace tools: the only ways tools/lib and the analyzer print, a one-line error and a JSON
 * string. */
#ifndef SHAPETRACE_OUT_H
#define SHAPETRACE_OUT_H

#include <stdio.h>

/* "shapetrace: <text>" on stderr, one line. */
void shp_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* JSON string with escapes, or null for NULL. */
void shp_json_str(FILE *f, const char *s);

#endif
