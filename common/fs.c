/* shapetrace: file-system helpers shared by the preload and the command (see fs.h). */
#define _GNU_SOURCE
#include "common/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Mode 0700 for a directory we just made: mkdir's mode went through the umask (0777 gave 0000,
 * a directory nobody but root could fill). Through a descriptor, never the name: a name that
 * someone swapped for a link since is not followed. */
static int make_private(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? -errno : st.st_uid != geteuid() ? -EPERM : 0;
    if (rc == 0 && (st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0)
        rc = -errno;
    close(fd);
    return rc;
}

int shp_make_dir(const char *path)
{
    if (mkdir(path, 0700) != 0)
        return -errno;
    return make_private(path);
}

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
        int rc = shp_make_dir(buf);
        if (rc < 0 && rc != -EEXIST)
            return rc;
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

const char *shp_dir_untrusted(const struct stat *st)
{
    if (st->st_uid != geteuid())
        return "owned by another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return "writable by others";
    return NULL;
}

int shp_run_dir(const char *dir, const char **why)
{
    int rc = shp_make_dirs(dir);
    if (rc < 0)
        return rc;
    struct stat st;
    if (stat(dir, &st) != 0)
        return -errno;
    *why = shp_dir_untrusted(&st);
    return *why ? -EPERM : 0;
}

int shp_create_private(const char *dir, const char *name, char *tmp, size_t len)
{
    if ((size_t)snprintf(tmp, len, "%s/.%s.XXXXXX", dir, name) >= len)
        return -ENAMETOOLONG;
    /* mkostemp creates with O_CREAT|O_EXCL: an existing name, a link included, is never used. */
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fchmod(fd, 0600) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return -e;
    }
    return fd;
}

/* The signals a write of ours could raise in the application: SIGPIPE (a reader gone), SIGXFSZ
 * (its file-size limit). Blocked around the call; what the call raised is taken back. */
struct quiet {
    sigset_t set, old, pending;
};

static void quiet_begin(struct quiet *q)
{
    sigemptyset(&q->set);
    sigaddset(&q->set, SIGPIPE);
    sigaddset(&q->set, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &q->set, &q->old);
    sigpending(&q->pending);
}

static void quiet_end(struct quiet *q, int err)
{
    int sig = err == EPIPE ? SIGPIPE : err == EFBIG ? SIGXFSZ : 0;
    /* One already pending before the call is the application's: it stays. */
    if (sig && !sigismember(&q->pending, sig)) {
        sigset_t now, one;
        sigpending(&now);
        if (sigismember(&now, sig)) {
            sigemptyset(&one);
            sigaddset(&one, sig);
            struct timespec zero = {0, 0};
            sigtimedwait(&one, NULL, &zero);
        }
    }
    pthread_sigmask(SIG_SETMASK, &q->old, NULL);
}

ssize_t shp_write_quiet(int fd, const void *buf, size_t n)
{
    struct quiet q;
    quiet_begin(&q);
    ssize_t w = write(fd, buf, n);
    int e = w < 0 ? errno : 0;
    quiet_end(&q, e);
    errno = e;
    return w;
}

int shp_fallocate_quiet(int fd, off_t off, off_t len)
{
    struct quiet q;
    quiet_begin(&q);
    int e = posix_fallocate(fd, off, len);
    quiet_end(&q, e);
    return e;
}

bool shp_fd_is(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}
