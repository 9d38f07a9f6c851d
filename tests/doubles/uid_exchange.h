/* shp_uid_exchange: how the ranks that shp_launch (or torchrun with SHP_UID_FILE set) starts agree
 * on an ncclUniqueId. Header-only; public NCCL API and files only, so it works with real NCCL. */
#ifndef SHP_UID_EXCHANGE_H
#define SHP_UID_EXCHANGE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef NCCL_H_
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

#define SHP_UID_WAIT_S 60

/* The file for the k-th exchange of this translation unit: $SHP_UID_FILE, then $SHP_UID_FILE.1,
 * $SHP_UID_FILE.2, ... */
static inline int shp_uid_path(char *buf, size_t len, unsigned k)
{
    const char *base = getenv("SHP_UID_FILE");
    int n;

    if (!base || !*base)
        return -EINVAL;
    n = k ? snprintf(buf, len, "%s.%u", base, k) : snprintf(buf, len, "%s", base);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static inline int shp_uid_publish(const char *path, const ncclUniqueId *id)
{
    char tmp[4200];
    size_t done = 0;
    int fd, err = 0;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    while (done < sizeof(*id) && !err) {
        ssize_t w = write(fd, (const char *)id + done, sizeof(*id) - done);

        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno != EINTR)
            err = -errno;
    }
    if (close(fd) != 0 && !err)
        err = -errno;
    /* rename is atomic: a reader sees no file or the whole id, never a part of one. */
    if (!err && rename(tmp, path) != 0)
        err = -errno;
    if (err)
        unlink(tmp);
    return err;
}

static inline int shp_uid_read(const char *path, ncclUniqueId *id)
{
    struct timespec pause = {0, 10 * 1000 * 1000};
    time_t give_up = time(NULL) + SHP_UID_WAIT_S;

    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);

        if (fd >= 0) {
            size_t got = 0;

            while (got < sizeof(*id)) {
                ssize_t r = read(fd, (char *)id + got, sizeof(*id) - got);

                if (r > 0)
                    got += (size_t)r;
                else if (r == 0 || errno != EINTR)
                    break;
            }
            close(fd);
            return got == sizeof(*id) ? 0 : -EIO;
        }
        if (errno != ENOENT)
            return -errno;
        if (time(NULL) >= give_up)
            return -ETIMEDOUT;
        nanosleep(&pause, NULL);
    }
}

/* Gives every rank the same unique id: rank 0 makes it with ncclGetUniqueId and publishes it in
 * $SHP_UID_FILE (written under a temporary name, then renamed); the other ranks wait for that file
 * for up to 60 seconds. Each call is one exchange: the k-th call of a program (counted per
 * translation unit) uses $SHP_UID_FILE.k after the first, so every rank must make the same calls
 * in the same order. Without SHP_UID_FILE, a rank 0 whose WORLD_SIZE is unset or 1 just makes an
 * id. Returns 0, or a negative errno (-EINVAL without SHP_UID_FILE, -ETIMEDOUT, -EIO for a short
 * file, -EPROTO when ncclGetUniqueId fails) after one line on stderr. Not thread-safe. */
static inline int shp_uid_exchange(ncclUniqueId *id, int rank)
{
    static unsigned calls;
    const char *world = getenv("WORLD_SIZE");
    char path[4096];
    int err = shp_uid_path(path, sizeof(path), calls++);

    if (err == -EINVAL && rank == 0 && (!world || !strcmp(world, "1")))
        return ncclGetUniqueId(id) == ncclSuccess ? 0 : -EPROTO;
    if (err) {
        fprintf(stderr, "shp_uid_exchange: rank %d: SHP_UID_FILE is %s\n", rank,
                err == -EINVAL ? "not set (run under shp_launch)" : "too long");
        return err;
    }
    if (rank == 0) {
        if (ncclGetUniqueId(id) != ncclSuccess) {
            fprintf(stderr, "shp_uid_exchange: ncclGetUniqueId failed\n");
            return -EPROTO;
        }
        err = shp_uid_publish(path, id);
    } else {
        err = shp_uid_read(path, id);
    }
    if (err)
        fprintf(stderr, "shp_uid_exchange: rank %d: %s %s: %s\n", rank,
                rank == 0 ? "cannot publish" : "no unique id in", path, strerror(-err));
    return err;
}

#endif
