/* shapetrace tools: an output file that the user names (-o FILE), replaced whole or not at all.
 * The output is written to a new file in FILE's directory that has no name yet (O_TMPFILE), then
 * named and renamed over FILE once every byte is out, so that an export or report that fails
 * half-way (a full disk, a file size limit, an interrupt, even SIGKILL) leaves the file that was
 * there as it was, and no half-written one. Where the filesystem makes no such file, the new file
 * has a hidden name from the start, removed on an error or a signal that can be caught. */
#ifndef SHAPETRACE_OUTFILE_H
#define SHAPETRACE_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

struct shp_outfile {
    char *path;   /* the file to replace (a link's target when the name was a link) */
    char *tmp;    /* the named file being written, NULL when written in place or unnamed */
    bool unnamed; /* written to a file without a name (O_TMPFILE), of which keep is a descriptor */
    int keep;
};

/* A descriptor to write the output named `path` to, or -1 with errno set. A regular file, or a
 * name that does not exist yet, gets a new file in the same directory (without a name, or else
 * with a hidden one; the old file's mode, or a new file's under the umask) that
 * shp_outfile_commit puts in its place;
 * anything else (/dev/null, a FIFO, a terminal), a file of another owner, of several names (hard
 * links) or that may not be written, or a directory where no file can be made, is opened in place
 * and truncated, as fopen(path, "w") does (and fails where it fails). While a new file has a
 * name, SIGINT, SIGTERM and SIGHUP remove it before the command dies of them. */
int shp_outfile_open(struct shp_outfile *o, const char *path);

/* shp_outfile_open with the new file named from the start, as on a filesystem that makes no file
 * without a name (the tests' way to reach that path on any filesystem). */
int shp_outfile_open_named(struct shp_outfile *o, const char *path);

/* shp_outfile_open's descriptor as a FILE for writing; NULL with errno set. */
FILE *shp_outfile_fopen(struct shp_outfile *o, const char *path);

/* Once the descriptor is closed with every byte written: puts the output in place. 0, or -1 with
 * errno set (then as shp_outfile_abort). */
int shp_outfile_commit(struct shp_outfile *o);

/* Closes f, the FILE of the output, and commits it if the close wrote every byte; 0, or -1 with
 * errno set (then as shp_outfile_abort). */
int shp_outfile_close(struct shp_outfile *o, FILE *f);

/* After an error: removes the new file; the named one is left as it was. */
void shp_outfile_abort(struct shp_outfile *o);

#endif
