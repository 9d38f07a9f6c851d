/* shapetrace tools: a trace's call stacks, symbolized on demand against its module map. */
#ifndef SHAPETRACE_STACKS_H
#define SHAPETRACE_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace_read.h"

struct shp_stacks;

/* Read the stack and module records of t (one pass; t's torn count is left as it was). With
 * symbolize false, frames print as raw addresses. Returns NULL only when out of memory, and the
 * functions below accept NULL. Not thread-safe. */
struct shp_stacks *shp_stacks_load(struct shp_trace *t, bool symbolize);
void shp_stacks_free(struct shp_stacks *st);

/* The frames of stack `id`, innermost first, as "function (file:line)" or
 * "function+0xoff (module)"; *n is 0 for an unknown id. Owned by st. */
const char *const *shp_stacks_frames(struct shp_stacks *st, uint32_t id, size_t *n);

/* Print stack `id` as a JSON array of strings, or null. */
void shp_stacks_json(FILE *f, struct shp_stacks *st, uint32_t id);

/* The innermost frame as one line ("" if none). */
void shp_stacks_site(struct shp_stacks *st, uint32_t id, char *out, size_t len);

#endif
