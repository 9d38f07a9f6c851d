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

/* A name beside real (dlen: its directory's length, with the slash) that nothing has, for a new
 * file made there by make(name); its descriptor (or 0 for a link), or -1 with errno set. */
static int beside(const char *real, size_t dlen, char *tmp, size_t n,
                  int (*make)(const char *name, void *arg), void *arg)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned r = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    int rc = -1;
    for (int tries = 0; tries < 64; tries++, r = r * 1103515245u + 12345u) {
        snprintf(tmp, n, "%.*s.%s.%08x.part", (int)dlen, real, real + dlen, r);
        rc = make(tmp, arg);
        if (rc >= 0 || errno != EEXIST)
            break;
    }
    return rc;
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
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", *(const int *)arg);
    return linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW);
}

/* A file without a name in real's directory (dlen), which /proc can name later: its descriptor,
 * with *keep a second one that outlives the caller's; -1 where the filesystem makes none. */
static int unnamed(const char *real, size_t dlen, int *keep)
{
    char dir[PATH_MAX];
    if (dlen >= sizeof(dir))
        return -1;
    snprintf(dir, sizeof(dir), "%.*s", (int)(dlen ? dlen : 1), dlen ? real : ".");
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    char proc[64];
    *keep = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", *keep);
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
    const char *slash = strrchr(real, '/');
    size_t dlen = slash ? (size_t)(slash - real) + 1 : 0;
    int fd = may_be_unnamed ? unnamed(real, dlen, &o->keep) : -1;
    if (fd >= 0) {
        if (exists)
            (void)fchmod(fd, st.st_mode & 07777);
        o->path = real;
        o->unnamed = true;
        return fd;
    }
    size_t n = strlen(real) + 40;
    char *tmp = malloc(n);
    if (!tmp) {
        free(real);
        return in_place(o, path);
    }
    fd = beside(real, dlen, tmp, n, make_file, NULL);
    if (fd < 0) { /* a directory that takes no new file: as before, in place */
        free(tmp);
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
    const char *slash = strrchr(o->path, '/');
    size_t dlen = slash ? (size_t)(slash - o->path) + 1 : 0;
    size_t n = strlen(o->path) + 40;
    char *tmp = malloc(n);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaddset(&block, sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    int rc = beside(o->path, dlen, tmp, n, link_kept, &o->keep);
    if (rc == 0 && rename(tmp, o->path) != 0) {
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
