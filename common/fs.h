/* shapetrace: file-system helpers of both sides: the run directory is made by `shapetrace run`
 * and, when a job is traced without it, by the preload; the files either side creates in it;
 * writes that must never raise a signal in the traced application. */
#ifndef SHAPETRACE_COMMON_FS_H
#define SHAPETRACE_COMMON_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/* mkdir: makes the directory path, mode 0700 whatever the umask. Returns 0, or a negative
 * errno (-EEXIST when something is there already). */
int shp_make_dir(const char *path);

/* mkdir -p: makes dir and any missing parent, each new directory mode 0700 whatever the umask
 * (existing ones are left as they are). Returns 0, or a negative errno: -ENOTDIR when a part is
 * not a directory, -ENAMETOOLONG when dir does not fit in PATH_MAX. Takes no lock and allocates
 * nothing; safe from any thread. */
int shp_make_dirs(const char *dir);

/* Why a run directory with status st cannot be trusted with traces: "owned by another user" or
 * "writable by others" (its group or anyone: they could replace, add or link the files in it);
 * NULL when it is the caller's own and writable by no one else. */
const char *shp_dir_untrusted(const struct stat *st);

/* The run directory: shp_make_dirs(dir), then the directory must be one that shp_dir_untrusted
 * accepts. Returns 0; a negative errno from shp_make_dirs; or -EPERM with *why set to
 * shp_dir_untrusted's reason. */
int shp_run_dir(const char *dir, const char **why);

/* Creates a new file for `name` in dir, to be renamed into place once written: under a name of
 * its own (dir/.name.XXXXXX) created exclusively, so that no link is followed and no existing
 * file reused, mode 0600 whatever the umask, close-on-exec. Writes that name into tmp (len
 * bytes). Returns the descriptor, or a negative errno (-ENAMETOOLONG when the name does not
 * fit). */
int shp_create_private(const char *dir, const char *name, char *tmp, size_t len);

/* write(2) and posix_fallocate(3) that raise no SIGPIPE and no SIGXFSZ in the process: both
 * signals are blocked on the calling thread for the call, and one that the call raised (and
 * that was not pending before) is taken back before they are unblocked. The caller's signal mask
 * and dispositions are as they were. shp_write_quiet returns what write returned (errno set);
 * shp_fallocate_quiet 0 or an error number, as posix_fallocate. */
ssize_t shp_write_quiet(int fd, const void *buf, size_t n);
int shp_fallocate_quiet(int fd, off_t off, off_t len);

/* True when descriptor fd is open on the file (dev, ino). */
bool shp_fd_is(int fd, dev_t dev, ino_t ino);

#endif
