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

int shp_outfile_open(struct shp_outfile *o, const char *path)
{
    o->path = o->tmp = NULL;
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
    size_t n = strlen(real) + 40;
    char *tmp = malloc(n);
    if (!tmp) {
        free(real);
        return in_place(o, path);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned r = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    int fd = -1;
    for (int tries = 0; tries < 64 && fd < 0; tries++, r = r * 1103515245u + 12345u) {
        snprintf(tmp, n, "%.*s.%s.%08x.part", (int)dlen, real, real + dlen, r);
        /* 0666 under the umask, as fopen gives a new file. */
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
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

int shp_outfile_commit(struct shp_outfile *o)
{
    int rc = 0;
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
    if (o->tmp) {
        unlink(o->tmp);
        disarm();
    }
    free(o->path);
    free(o->tmp);
    o->path = o->tmp = NULL;
}
