/* shapetrace: file-system helpers shared by the preload and the command (see fs.h). */
#include "common/fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

int shp_make_dirs(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/')
            continue;
        char c = *p;
        *p = 0;
        struct stat st;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -errno;
        /* EEXIST says nothing of what is there: a file in the way is refused here, not later
         * by whoever opens a file inside it. */
        if (stat(buf, &st) != 0)
            return -errno;
        if (!S_ISDIR(st.st_mode))
            return -ENOTDIR;
        if (!c)
            return 0;
        *p = c;
    }
}
