/* shapetrace render: where a timeline's bytes go. A thread of its own writes them to the FILE
 * while the drawing fills the next buffer, so that the kernel's copy of a gigabyte into the page
 * cache is not on the drawing's path. The order of the bytes is the order they were given. */
#ifndef SHAPETRACE_SINK_H
#define SHAPETRACE_SINK_H

#include <stddef.h>
#include <stdio.h>

struct shp_sink;

/* The size a backend fills a buffer to before it hands it over. */
#define SHP_SINK_CHUNK (4u << 20)

/* Starts a sink onto out (NULL when out of memory, or no thread could be made: then write to out
 * yourself). */
struct shp_sink *shp_sink_open(FILE *out);

/* Hands *buf (len bytes of a malloc'd buffer of *cap) to the writer and gives back in *buf and
 * *cap an empty one of at least SHP_SINK_CHUNK bytes to fill next, waiting while the writer is
 * two buffers behind. Returns 0, or -ENOMEM (then *buf is the old one, emptied: its bytes are
 * lost, and shp_sink_close says so). */
int shp_sink_put(struct shp_sink *s, char **buf, size_t len, size_t *cap);

/* Writes what is left, stops the thread, frees s and returns 0 or a negative errno: out of
 * memory along the way, or the first write error (then nothing after it was written). */
int shp_sink_close(struct shp_sink *s);

#endif
