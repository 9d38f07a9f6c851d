/* shapetrace render: the writer thread of a timeline (sink.h). Two buffers go round: the
 * drawing fills one while the thread writes the other, with write(2) on the FILE's descriptor;
 * past the page cache when the file was opened for it (shp_sink_fdopen). */
#define _GNU_SOURCE
#include "tools/render/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define QUEUE 2
/* Direct I/O wants the buffer, the length and the file offset in whole logical blocks: 4096
 * bytes covers the 512-byte and 4 KiB ones of the disks it is used on. */
#define BLOCK 4096

struct shp_sink {
    int fd;
    bool direct; /* fd has O_DIRECT, as shp_sink_fdopen gave it: puts hand over whole blocks */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct chunk {
        char *p;
        size_t len, cap;
    } q[QUEUE], spare; /* q: handed over, in order; spare: written, to be given back */
    size_t head, n;
    bool done, oom;
    int err; /* the first write error, as a positive errno */
    /* the writer's: a block-aligned copy of a buffer that is not aligned; whether the file
     * refused direct I/O */
    char *bounce;
    bool refused;
};

FILE *shp_sink_fdopen(int fd)
{
    if (fd < 0)
        return NULL;
    struct stat st;
    struct statfs fs;
    /* Local disks only: on NFS and parallel filesystems direct I/O makes every write a round
     * trip to the server; tmpfs has no page cache to keep out of. */
    if (!fstat(fd, &st) && S_ISREG(st.st_mode) && !fstatfs(fd, &fs) &&
        (fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC ||
         fs.f_type == BTRFS_SUPER_MAGIC)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            fcntl(fd, F_SETFL, fl | O_DIRECT);
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

/* Switches O_DIRECT off fd (the end of a file need not be a whole block). */
static void direct_off(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_DIRECT))
        fcntl(fd, F_SETFL, fl & ~O_DIRECT);
}

/* All n bytes at p, or a positive errno. */
static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A chunk of whole blocks, direct: through the bounce buffer when p is not aligned (a backend's
 * first buffer, or one it grew). A filesystem that refuses direct I/O after all (EINVAL) gets
 * the rest of the file through the page cache. */
static int write_direct(struct shp_sink *s, const char *p, size_t n)
{
    while (n) {
        if (s->refused)
            return write_all(s->fd, p, n);
        const char *from = p;
        size_t k = n;
        if ((uintptr_t)p % BLOCK) {
            if (!s->bounce && posix_memalign((void **)&s->bounce, BLOCK, SHP_SINK_CHUNK)) {
                s->bounce = NULL;
                return ENOMEM;
            }
            k = n < SHP_SINK_CHUNK ? n : SHP_SINK_CHUNK;
            memcpy(s->bounce, p, k);
            from = s->bounce;
        }
        for (size_t off = 0; off < k;) {
            ssize_t w = write(s->fd, from + off, k - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && errno == EINVAL) {
                s->refused = true;
                direct_off(s->fd);
                return write_all(s->fd, p + off, n - off);
            }
            if (w <= 0)
                return w < 0 ? errno : EIO;
            off += (size_t)w;
        }
        p += k;
        n -= k;
    }
    return 0;
}

static void *writer(void *arg)
{
    struct shp_sink *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->n && !s->done)
            pthread_cond_wait(&s->cond, &s->lock);
        if (!s->n)
            break;
        struct chunk c = s->q[s->head];
        int err = s->err;
        pthread_mutex_unlock(&s->lock);
        if (!err)
            err = s->direct ? write_direct(s, c.p, c.len) : write_all(s->fd, c.p, c.len);
        pthread_mutex_lock(&s->lock);
        if (!s->err)
            s->err = err;
        s->head = (s->head + 1) % QUEUE;
        s->n--;
        if (!s->spare.p) {
            c.len = 0;
            s->spare = c;
        } else {
            free(c.p);
        }
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

struct shp_sink *shp_sink_open(FILE *out)
{
    struct shp_sink *s = calloc(1, sizeof(*s));
    int fd = fileno(out), fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    if (!s || fd < 0 || fflush(out)) {
        free(s);
        goto fail;
    }
    s->fd = fd;
    /* Direct I/O from a block boundary only (a file shp_sink_fdopen was given starts at 0). */
    s->direct = fl >= 0 && (fl & O_DIRECT) && lseek(fd, 0, SEEK_CUR) % BLOCK == 0;
    if (!s->direct)
        direct_off(fd);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, writer, s) != 0) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        goto fail;
    }
    return s;
fail:
    /* The backend writes out through stdio itself, in pieces of any length. */
    if (fd >= 0)
        direct_off(fd);
    return NULL;
}

int shp_sink_put(struct shp_sink *s, char **buf, size_t *len, size_t *cap)
{
    pthread_mutex_lock(&s->lock);
    while (s->n == QUEUE)
        pthread_cond_wait(&s->cond, &s->lock);
    struct chunk next = s->spare;
    s->spare = (struct chunk){0};
    if (!next.p || next.cap < SHP_SINK_CHUNK) {
        free(next.p);
        next = (struct chunk){.cap = SHP_SINK_CHUNK};
        if (posix_memalign((void **)&next.p, BLOCK, SHP_SINK_CHUNK))
            next.p = NULL;
    }
    if (!next.p) {
        s->oom = true;
        pthread_mutex_unlock(&s->lock);
        *len = 0;
        return -ENOMEM;
    }
    size_t keep = s->direct ? *len % BLOCK : 0;
    memcpy(next.p, *buf + *len - keep, keep);
    s->q[(s->head + s->n) % QUEUE] = (struct chunk){*buf, *len - keep, *cap};
    s->n++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    *buf = next.p;
    *len = keep;
    *cap = next.cap;
    return 0;
}

int shp_sink_close(struct shp_sink *s, const char *buf, size_t len)
{
    pthread_mutex_lock(&s->lock);
    s->done = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    /* The last partial block goes through the page cache. */
    direct_off(s->fd);
    if (!s->err && len)
        s->err = write_all(s->fd, buf, len);
    int rc = s->err ? -s->err : s->oom ? -ENOMEM : 0;
    free(s->spare.p);
    free(s->bounce);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
    return rc;
}
