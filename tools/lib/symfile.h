/* shapetrace tools: the run directory's symbol file, frame texts resolved on the traced host and
 * keyed by build id, read back where the modules are absent. Format: docs/CONTRACTS.md. */
#ifndef SHAPETRACE_SYMFILE_H
#define SHAPETRACE_SYMFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A host's file in a run directory is "HOST.symbols" (one per host, so that the nodes of a job
 * that share one directory do not overwrite each other's); it starts with the magic line. */
#define SHP_SYMFILE_SUFFIX ".symbols"
#define SHP_SYMFILE_MAGIC "shapetrace symbols 1"

/* Files larger than this are refused (a symbol file of a big torch job is a few MiB). */
#define SHP_SYMFILE_MAX_BYTES (256u << 20)

/* A loaded symbol file. Immutable once loaded: any number of threads may look up at once. */
struct shp_symfile;

/* The path of host's symbol file in dir, into out (NUL-terminated). host is read up to host_max
 * bytes or its NUL. Returns false when host cannot be a file name (empty, starts with '.', holds
 * '/' or a control character) or out is too short. */
bool shp_symfile_path(char *out, size_t len, const char *dir, const char *host, size_t host_max);

/* The path of host's symbol file next to the trace at trace_path, into out; false as for
 * shp_symfile_path. */
bool shp_symfile_path_near(char *out, size_t len, const char *trace_path, const char *host,
                           size_t host_max);

/* Loads the symbol file of host (a trace header's host field, host_max bytes at most) in the
 * directory that holds the trace at trace_path. Returns NULL when there is none, and also when
 * it is unreadable, malformed or truncated: then one line on stderr says so (once per process),
 * and the frames fall back to offsets. Free with shp_symfile_free. */
struct shp_symfile *shp_symfile_load_near(const char *trace_path, const char *host,
                                          size_t host_max);

/* Loads the symbol file at path; as shp_symfile_load_near otherwise. */
struct shp_symfile *shp_symfile_load(const char *path);

/* f may be NULL. */
void shp_symfile_free(struct shp_symfile *f);

/* The text recorded for the frame at byte offset off (address minus load bias) of the module
 * with this build id; is_return_address as for shp_symbolize. Returns NULL when the file holds
 * none. The text is owned by f. f may be NULL. */
const char *shp_symfile_find(const struct shp_symfile *f, const uint8_t *build_id,
                             size_t build_id_len, uint64_t off, bool is_return_address);

/* Writing, in the order the file takes: the header, then per module its line and its frames
 * (sorted by offset, is_return_address false first), then the end line with the number of frame
 * lines written. Newlines and other control characters in texts and names are written as '?'.
 * Return 0 or a negative errno. */
int shp_symfile_write_header(FILE *out);
int shp_symfile_write_module(FILE *out, const uint8_t *build_id, size_t build_id_len,
                             const char *name);
int shp_symfile_write_frame(FILE *out, uint64_t off, bool is_return_address, const char *text);
int shp_symfile_write_end(FILE *out, uint64_t nframes);

#endif
