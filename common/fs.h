/* shapetrace: file-system helpers of both sides: the run directory is made by `shapetrace run`
 * and, when a job is traced without it, by the preload. */
#ifndef SHAPETRACE_COMMON_FS_H
#define SHAPETRACE_COMMON_FS_H

/* mkdir -p: makes dir and any missing parent, new directories mode 0700 (existing ones are left
 * as they are). Returns 0, or a negative errno: -ENOTDIR when a part is not a directory,
 * -ENAMETOOLONG when dir does not fit in PATH_MAX. Takes no lock and allocates nothing; safe
 * from any thread. */
int shp_make_dirs(const char *dir);

#endif
