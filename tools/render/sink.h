/* shapetrace render: where a timeline's bytes go. A thread of its own writes them to the FILE
 * while the drawing fills the next buffer, so that the kernel's side of writing a gigabyte is not
 * on the drawing's path; a file on a local disk is written past the page cache (direct I/O),
 * whole blocks at a time. The order of the bytes is the order they were given. */
#ifndef SHAPETRACE_SINK_H
#define SHAPETRACE_SINK_H

#include <stddef.h>
#include <stdio.h>

struct shp_sink;

/* The size a backend fills a buffer to before it hands it over. */
#define SHP_SINK_CHUNK (4u << 20)

/* A FILE for writing a timeline to, made of fd (opened for writing; -1 gives NULL, errno as it
 * is). A regular file on a local disk filesystem (ext4, XFS, btrfs) is switched to direct I/O: a
 * sink onto it writes it past the page cache (a timeline is written once and read later, by a
 * viewer: copying it into the page cache took most of the system time of an export, and pushed
 * the traces out of it). Such a FILE is for a sink only; shp_sink_open switches direct I/O off
 * when it cannot start one. NULL with errno set (fd closed) when no FILE can be made. */
FILE *shp_sink_fdopen(int fd);

/* Starts a sink onto out (NULL when out of memory, or no thread could be made: then write to out
 * yourself). It writes out's descriptor itself: nothing may be left in out's buffer, and nothing
 * else may write to out until shp_sink_close. */
struct shp_sink *shp_sink_open(FILE *out);

/* Hands the bytes of *buf (*len of a malloc'd buffer of *cap) to the writer and gives back in
 * *buf and *cap a buffer of at least SHP_SINK_CHUNK bytes to go on filling, from *len: a sink
 * writing direct keeps the last partial block back, and moves it to the start of that buffer.
 * Waits while the writer is two buffers behind. Returns 0, or -ENOMEM (then *buf is the old one,
 * emptied: its bytes are lost, and shp_sink_close says so). */
int shp_sink_put(struct shp_sink *s, char **buf, size_t *len, size_t *cap);

/* Writes what was handed over, then the len bytes at buf (the end: the backend's last buffer),
 * stops the thread, gives out its descriptor back as it came (direct I/O off), frees s and
 * returns 0 or a negative errno: out of memory along the way, or the first write error (then
 * nothing after it was written). */
int shp_sink_close(struct shp_sink *s, const char *buf, size_t len);

#endif
