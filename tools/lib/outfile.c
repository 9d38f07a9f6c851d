/* shapetrace tools: an output file replaced whole or not at all (outfile.h). */
#define _GNU_SOURCE
#include "tools/lib/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The new file being written, for the signal handler: one at a time in a command. */
static char pending[PATH_MAX + 64];
static volatile sig_atomic_t armed;
static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction old_act[sizeof(sigs) / sizeof(sigs[0])];
static bool caught[sizeof(sigs) / sizeof(sigs[0])];

static void on_signal(int sig)
{
    if (armed)
        unlink(pending);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Catches the signals that would leave the new file behind; not one that was ignored (nohup). */
static void arm(const char *tmp)
{
    snprintf(pending, sizeof(pending), "%s", tmp);
    armed = 1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        caught[i] = !sigaction(sigs[i], NULL, &old_act[i]) && old_act[i].sa_handler == SIG_DFL &&
                    !(old_act[i].sa_flags & SA_SIGINFO) && !sigaction(sigs[i], &sa, NULL);
    }
}

static void disarm(void)
{
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (caught[i])
            sigaction(sigs[i], &old_act[i], NULL);
    armed = 0;
}

static int in_place(struct shp_outfile *o, const char *path)
{
    o->tmp = NULL;
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
}

/* A new name beside path (.NAME.XXXXXXXX.part in its directory) that nothing had, given to a
 * file by make(name, arg), which returns a descriptor (or 0) and fails with EEXIST on a name in
 * use: the name, malloc'd, with *rc what make returned; NULL with *rc -1 and errno set. */
static char *beside(const char *path, int (*make)(const char *name, void *arg), void *arg, int *rc)
{
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0, n = strlen(path) + 40;
    char *tmp = malloc(n);
    *rc = -1;
    if (!tmp) {
        errno = ENOMEM;
        return NULL;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned r = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    for (int tries = 0; tries < 64; tries++, r = r * 1103515245u + 12345u) {
        snprintf(tmp, n, "%.*s.%s.%08x.part", (int)dlen, path, path + dlen, r);
        *rc = make(tmp, arg);
        if (*rc >= 0 || errno != EEXIST)
            break;
    }
    if (*rc < 0) {
        int e = errno;
        free(tmp);
        errno = e;
        return NULL;
    }
    return tmp;
}

/* The name through which /proc reaches this process's descriptor fd. */
static void proc_fd(char out[static 64], int fd)
{
    snprintf(out, 64, "/proc/self/fd/%d", fd);
}

static int make_file(const char *name, void *arg)
{
    (void)arg;
    /* 0666 under the umask, as fopen gives a new file. */
    return open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
}

/* Names the unnamed file whose descriptor is *arg (through /proc, which needs no privilege). */
static int link_kept(const char *name, void *arg)
{
    char proc[64];
    proc_fd(proc, *(const int *)arg);
    return linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW);
}

/* A file without a name in real's directory, which /proc can name later: its descriptor, with
 * *keep a second one that outlives the caller's; -1 where the filesystem makes none. */
static int unnamed(const char *real, int *keep)
{
    const char *slash = strrchr(real, '/');
    size_t dlen = slash ? (size_t)(slash - real) + 1 : 0;
    char dir[PATH_MAX];
    if (dlen >= sizeof(dir))
        return -1;
    snprintf(dir, sizeof(dir), "%.*s", (int)(dlen ? dlen : 1), dlen ? real : ".");
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    char proc[64];
    *keep = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    proc_fd(proc, *keep);
    if (*keep < 0 || access(proc, F_OK) != 0) {
        if (*keep >= 0)
            close(*keep);
        close(fd);
        return -1;
    }
    return fd;
}

static int open_new(struct shp_outfile *o, const char *path, bool may_be_unnamed)
{
    o->path = o->tmp = NULL;
    o->unnamed = false;
    struct stat st;
    bool exists = !stat(path, &st);
    /* What a rename would change, besides the bytes, is left to fopen's way: another owner's
     * file, a file of several names (hard links), one that may not be written. */
    if (exists && (!S_ISREG(st.st_mode) || st.st_nlink > 1 || st.st_uid != geteuid() ||
                   access(path, W_OK) != 0))
        return in_place(o, path);
    /* Through a link, the link's target is replaced, as writing through the link would. */
    char *real = exists ? realpath(path, NULL) : strdup(path);
    if (!real)
        return in_place(o, path);
    int fd = may_be_unnamed ? unnamed(real, &o->keep) : -1;
    if (fd >= 0) {
        if (exists)
            (void)fchmod(fd, st.st_mode & 07777);
        o->path = real;
        o->unnamed = true;
        return fd;
    }
    char *tmp = beside(real, make_file, NULL, &fd);
    if (!tmp) { /* a directory that takes no new file: as before, in place */
        free(real);
        return in_place(o, path);
    }
    if (exists)
        (void)fchmod(fd, st.st_mode & 07777);
    o->path = real;
    o->tmp = tmp;
    arm(tmp);
    return fd;
}

/* The unnamed file gets a hidden name, then FILE's, with the signals that would leave the
 * hidden one behind held off between the two. */
static int name_unnamed(struct shp_outfile *o)
{
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaddset(&block, sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    int rc;
    char *tmp = beside(o->path, link_kept, &o->keep, &rc);
    if (tmp && rename(tmp, o->path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        rc = -1;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(tmp);
    return rc < 0 ? -1 : 0;
}

int shp_outfile_open(struct shp_outfile *o, const char *path)
{
    return open_new(o, path, true);
}

int shp_outfile_open_named(struct shp_outfile *o, const char *path)
{
    return open_new(o, path, false);
}

FILE *shp_outfile_fopen(struct shp_outfile *o, const char *path)
{
    int fd = shp_outfile_open(o, path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f && fd >= 0) {
        int e = errno;
        close(fd);
        shp_outfile_abort(o);
        errno = e;
    }
    return f;
}

int shp_outfile_close(struct shp_outfile *o, FILE *f)
{
    if (fclose(f)) {
        int e = errno;
        shp_outfile_abort(o);
        errno = e;
        return -1;
    }
    return shp_outfile_commit(o);
}

static void forget_unnamed(struct shp_outfile *o)
{
    if (o->unnamed) {
        int e = errno;
        close(o->keep);
        errno = e;
    }
    o->unnamed = false;
}

int shp_outfile_commit(struct shp_outfile *o)
{
    int rc = 0;
    if (o->unnamed)
        rc = name_unnamed(o);
    forget_unnamed(o);
    if (o->tmp && rename(o->tmp, o->path)) {
        int e = errno;
        unlink(o->tmp);
        errno = e;
        rc = -1;
    }
    if (o->tmp)
        disarm();
    free(o->path);
    free(o->tmp);
    o->path = o->tmp = NULL;
    return rc;
}

void shp_outfile_abort(struct shp_outfile *o)
{
    forget_unnamed(o);
    if (o->tmp) {
        unlink(o->tmp);
        disarm();
    }
    free(o->path);
    free(o->tmp);
    o->path = o->tmp = NULL;
}
