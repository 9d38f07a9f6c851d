/* shapetrace preload: the trace file. One file per process, created at the first record, mapped
 * MAP_SHARED so that a record is in the page cache (and survives SIGKILL) as soon as it is
 * stored, with no system call per record. Space is reserved by a CAS on the header's tail; the
 * file grows in chunks under a mutex, the only lock, taken once per chunk. The descriptor is kept
 * high and close-on-exec, and checked before each use: an application that closes descriptors
 * it did not open, then opens its own, must never have the preload act on its file. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "include/shapetrace/env.h"
#include "preload/preload.h"

enum { W_CLOSED, W_OPEN, W_FAILED };

static struct {
    _Atomic int state;
    pthread_mutex_t mu;
    int fd;
    dev_t dev; /* the trace file's identity, to know that fd is still ours */
    ino_t ino;
    struct shp_file_header *hdr;
    unsigned char *base;
    size_t map_len;
    uint64_t cap;    /* end offset for call records (the header's cap) */
    uint32_t gen;    /* bumped at fork: communicator indexes name this file's records only */
    uint32_t npairs; /* clock pairs stored so far (clock_pairs[npairs % SHP_CLOCK_PAIRS] next) */
    char path[PATH_MAX + 256];
} w = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

#define CHUNK_MIN (1ull << 20)
#define CHUNK_MAX (64ull << 20)
/* The lowest number the trace's descriptor may take. */
#define SHP_TRACE_FD_MIN 512

struct shp_file_header *shp_writer_header(void)
{
    return atomic_load_explicit(&w.state, memory_order_acquire) == W_OPEN ? w.hdr : NULL;
}

/* True while w.fd is still the trace file: the application may have closed it and got the same
 * number for a file of its own. */
static bool fd_is_ours(void)
{
    struct stat st;
    return w.fd >= 0 && fstat(w.fd, &st) == 0 && st.st_dev == w.dev && st.st_ino == w.ino;
}

/* Store a fresh clock pair in the next slot: check zeroed first, stored last, so that a reader
 * (or a kill) in between sees that slot as invalid and takes another. Under w.mu, or before the
 * header is visible. */
static void clock_pair_store(struct shp_file_header *h)
{
    if (h->clock != SHP_CLOCK_TSC)
        return;
    struct shp_clock_pair *p = &h->clock_pairs[w.npairs++ % SHP_CLOCK_PAIRS];
    uint64_t tsc, ns;
    shp_clock_pair_now(&tsc, &ns);
    __atomic_store_n(&p->check, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&p->tsc, tsc, __ATOMIC_RELAXED);
    __atomic_store_n(&p->ns, ns, __ATOMIC_RELAXED);
    __atomic_store_n(&p->check, shp_clock_pair_check(tsc, ns), __ATOMIC_RELEASE);
}

/* Fault the pages of [from, to) in ahead of the tail (SHP_GROWTH_POPULATE), so that the records
 * stored there take no page fault. MADV_POPULATE_WRITE needs Linux 5.14; older kernels refuse it
 * and the records fault as with plain chunks. */
static void populate(uint64_t from, uint64_t to)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    uint64_t pg = 4096;
    from &= ~(pg - 1);
    if (to > from)
        madvise(w.base + from, (size_t)(to - from), MADV_POPULATE_WRITE);
}

static int grow(uint64_t need)
{
    int rc = 0;
    pthread_mutex_lock(&w.mu);
    uint64_t have = __atomic_load_n(&w.hdr->allocated, __ATOMIC_ACQUIRE);
    if (need > have && !fd_is_ours()) {
        rc = -EBADF;
    } else if (need > have) {
        uint64_t chunk = have < CHUNK_MIN ? CHUNK_MIN : have > CHUNK_MAX ? CHUNK_MAX : have;
        if (shp_cfg.growth == SHP_GROWTH_LARGE)
            chunk = CHUNK_MAX;
        uint64_t want = need + chunk;
        if (want > w.map_len)
            want = w.map_len;
        /* fallocate, not ftruncate: a full disk then fails here, with an error we can handle,
         * instead of as SIGBUS on the first store into a hole. */
        int e = posix_fallocate(w.fd, (off_t)have, (off_t)(want - have));
        if (e != 0) {
            rc = -e;
        } else {
            __atomic_store_n(&w.hdr->allocated, want, __ATOMIC_RELEASE);
            if (shp_cfg.growth == SHP_GROWTH_POPULATE)
                populate(have, want);
            /* Once a chunk: a trace killed at any point converts with a pair this recent. */
            clock_pair_store(w.hdr);
        }
    }
    pthread_mutex_unlock(&w.mu);
    return rc;
}

/* Whether the run directory and its control file can be trusted with the run's wish: ours and
 * writable by no one else. Anyone else could otherwise switch tracing off, or plant a FIFO that
 * blocks the application in open(). */
static bool trusted(const struct stat *st, const char *what, const char *path)
{
    const char *why = st->st_uid != geteuid()               ? "owned by another user"
                      : (st->st_mode & (S_IWGRP | S_IWOTH)) ? "writable by others"
                                                            : NULL;
    if (!why)
        return true;
    SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE, "%s %s is %s: its control file is ignored", what,
            path, why);
    return false;
}

/* `shapetrace attach RUN_DIR` leaves the run's wish in its control file, for the processes whose
 * traces did not exist yet when it ran. */
static uint64_t run_armed(uint64_t dflt)
{
    char path[PATH_MAX + 16], buf[64];
    snprintf(path, sizeof(path), "%s/" SHP_CONTROL_FILE, shp_cfg.dir);
    struct stat st;
    /* Non-blocking: a FIFO would otherwise hold the application in open(). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return dflt;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE, "%s is not a regular file: ignored", path);
        close(fd);
        return dflt;
    }
    struct stat dst;
    if (!trusted(&st, "the control file", path) ||
        (stat(shp_cfg.dir, &dst) == 0 && !trusted(&dst, "the run directory", shp_cfg.dir))) {
        close(fd);
        return dflt;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return dflt;
    buf[n] = 0;
    return shp_control_armed(buf, dflt);
}

static void write_header(struct shp_file_header *h)
{
    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    h->clock = shp_clock_kind;
    if (h->clock == SHP_CLOCK_TSC) {
        uint64_t tsc, ns;
        shp_clock_pair_now(&tsc, &ns);
        h->clock_first = (struct shp_clock_pair){tsc, ns, shp_clock_pair_check(tsc, ns)};
        /* A first rate before any record: 200 us apart gives it to about 1e-4, which the
         * pairs of the growing file then refine. */
        while (shp_now_ns() - ns < 200000)
            ;
        clock_pair_store(h);
    }
    h->version = SHP_TRACE_VERSION;
    h->byte_order = SHP_BYTE_ORDER_MARK;
    h->header_size = SHP_HEADER_SIZE;
    h->pid = (uint64_t)getpid();
    h->ppid = (uint64_t)getppid();
    h->realtime_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    h->monotonic_ns = (uint64_t)mono.tv_sec * 1000000000ull + (uint64_t)mono.tv_nsec;
    h->env_rank = shp_cfg.env_rank;
    h->first_comm_rank = -1;
    h->local_rank = shp_cfg.local_rank;
    h->world_size = shp_cfg.world_size;
    h->cap = w.cap;
    h->ctl[SHP_CTL_ARMED] = run_armed(shp_ctl[SHP_CTL_ARMED]);
    h->stacks_mode = shp_cfg.stacks;
    snprintf(h->host, sizeof(h->host), "%s", shp_cfg.host);
    ssize_t n = readlink("/proc/self/exe", h->exe, sizeof(h->exe) - 1);
    h->exe[n > 0 ? n : 0] = 0;
    __atomic_store_n(&h->tail, (uint64_t)SHP_HEADER_SIZE, __ATOMIC_RELAXED);
    /* The magic last: a reader never takes a half-written header for a trace. */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(h->magic, SHP_TRACE_MAGIC, 8);
}

static int open_file(void)
{
    int rc = shp_make_dirs(shp_cfg.dir);
    if (rc < 0) {
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE, "cannot create %s: %s", shp_cfg.dir,
                strerror(-rc));
        return rc;
    }
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) {
        if (i == 0)
            snprintf(w.path, sizeof(w.path), "%s/%s-%ld%s", shp_cfg.dir, shp_cfg.host,
                     (long)getpid(), SHP_TRACE_SUFFIX);
        else
            snprintf(w.path, sizeof(w.path), "%s/%s-%ld.%d%s", shp_cfg.dir, shp_cfg.host,
                     (long)getpid(), i, SHP_TRACE_SUFFIX);
        fd = open(w.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = -errno;
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE, "cannot create %s: %s", w.path,
                strerror(errno));
        return rc;
    }
    /* Out of the low numbers that applications reuse and hand to children by number. */
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, SHP_TRACE_FD_MIN);
    if (hi >= 0) {
        close(fd);
        fd = hi;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        close(fd);
        unlink(w.path);
        return rc;
    }
    w.dev = st.st_dev;
    w.ino = st.st_ino;
    w.cap = SHP_HEADER_SIZE + shp_cfg.cap;
    w.map_len = w.cap + shp_cfg.cap / 16; /* the bookkeeping reserve: shp_rec_limit */
    uint64_t first = shp_cfg.growth == SHP_GROWTH_FULL    ? w.map_len
                     : shp_cfg.growth == SHP_GROWTH_LARGE ? CHUNK_MAX
                                                          : CHUNK_MIN;
    if (first > w.map_len)
        first = w.map_len;
    int e = posix_fallocate(fd, 0, (off_t)first);
    if (e != 0) {
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE, "cannot size %s: %s", w.path, strerror(e));
        close(fd);
        unlink(w.path); /* no empty, headerless trace left behind */
        return -e;
    }
    void *m = mmap(NULL, w.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        rc = -errno;
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE, "cannot map %s: %s", w.path,
                strerror(errno));
        close(fd);
        unlink(w.path);
        return rc;
    }
    w.fd = fd;
    w.base = m;
    w.hdr = m;
    w.hdr->allocated = first;
    w.npairs = 0;
    write_header(w.hdr);
    if (shp_cfg.growth == SHP_GROWTH_POPULATE)
        populate(SHP_HEADER_SIZE, first);
    /* From now on the header's control words are the ones a tool can flip. */
    shp_ctl_use(w.hdr->ctl);
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_TRACE, "trace %s", w.path);
    return 0;
}

int shp_writer_open(void)
{
    int st = atomic_load_explicit(&w.state, memory_order_acquire);
    if (__builtin_expect(st == W_OPEN, 1))
        return 0;
    if (st == W_FAILED)
        return -EIO;
    pthread_mutex_lock(&w.mu);
    int rc = 0;
    st = atomic_load_explicit(&w.state, memory_order_acquire);
    if (st == W_CLOSED) {
        rc = open_file();
        atomic_store_explicit(&w.state, rc == 0 ? W_OPEN : W_FAILED, memory_order_release);
        if (rc == 0)
            rc = 1;
    } else if (st == W_FAILED) {
        rc = -EIO;
    }
    pthread_mutex_unlock(&w.mu);
    return rc;
}

static void dropped(struct shp_file_header *h, size_t size)
{
    __atomic_fetch_add(&h->dropped, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->dropped_bytes, size, __ATOMIC_RELAXED);
}

/* Marks the trace disabled, with the first reason and when: the calls lost from then on are
 * counted by the wrappers (shp_call_lost). The clock is read here, not shp_now_ns, so that the
 * time is CLOCK_MONOTONIC whatever clock the records use. */
static void switched_off(struct shp_file_header *h, int rc)
{
    uint32_t reason = rc == -ENOSPC || rc == -EDQUOT ? SHP_OFF_NO_SPACE
                      : rc == -EBADF                 ? SHP_OFF_FD_CLOSED
                                                     : SHP_OFF_GROW;
    uint32_t none = 0;
    if (__atomic_compare_exchange_n(&h->off_reason, &none, reason, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        __atomic_store_n(&h->off_ns, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                         __ATOMIC_RELAXED);
    }
    __atomic_or_fetch(&h->flags, SHP_FILE_DISABLED, __ATOMIC_RELEASE);
}

void *shp_writer_reserve(unsigned type, size_t size, const char **why)
{
    if (__builtin_expect(atomic_load_explicit(&w.state, memory_order_acquire) != W_OPEN, 0))
        return NULL;
    struct shp_file_header *h = w.hdr;
    uint64_t off = shp_rec_reserve(h, shp_rec_limit(h, type), size);
    if (!off) {
        dropped(h, size);
        SHP_WARN_ONCE(&shp_log, SHP_SUB_TRACE,
                      "trace cap of %llu MiB reached: later records are dropped and counted "
                      "(" SHP_ENV_MAX_MB " raises it)",
                      (unsigned long long)(shp_cfg.cap >> 20));
        return NULL;
    }
    uint64_t end = off + size;
    if (end > __atomic_load_n(&h->allocated, __ATOMIC_ACQUIRE)) {
        int rc = grow(end);
        if (rc < 0) {
            dropped(h, size);
            /* Give the space back unless another thread reserved after it: a reader would
             * otherwise find a record never written, past the end of the file. */
            uint64_t reserved_end = end;
            __atomic_compare_exchange_n(&h->tail, &reserved_end, off, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
            switched_off(h, rc);
            *why = rc == -ENOSPC  ? "no space left for the trace"
                   : rc == -EBADF ? "the application closed the trace's file descriptor"
                                  : "the trace cannot grow";
            return NULL;
        }
    }
    void *r = w.base + off;
    /* The reserved size first, so a reader can step over this record if we die filling it. */
    shp_rec_mark_reserved(r, size);
    return r;
}

int shp_writer_comm_index(const void *rec)
{
    struct shp_file_header *h = shp_writer_header();
    if (!h || (const unsigned char *)rec < w.base + SHP_HEADER_SIZE ||
        (const unsigned char *)rec >= w.base + w.map_len)
        return -1;
    uint32_t i = __atomic_fetch_add(&h->ncomms, 1, __ATOMIC_RELAXED);
    if (i >= SHP_COMM_INDEX_MAX)
        return -1;
    __atomic_store_n(&h->comm_off[i], (uint64_t)((const unsigned char *)rec - w.base),
                     __ATOMIC_RELEASE);
    return (int)i;
}

uint32_t shp_writer_gen(void)
{
    return w.gen;
}

void shp_writer_close(void)
{
    /* The mapping stays: destructors that run after ours (NCCL's, torch's) may still be traced,
     * and their records land after the flag, which readers accept. */
    if (atomic_load_explicit(&w.state, memory_order_acquire) == W_OPEN) {
        pthread_mutex_lock(&w.mu);
        clock_pair_store(w.hdr);
        pthread_mutex_unlock(&w.mu);
        __atomic_or_fetch(&w.hdr->flags, SHP_FILE_COMPLETE, __ATOMIC_RELEASE);
    }
}

void shp_writer_atfork_child(void)
{
    /* The parent's file is the parent's: the child unmaps it and opens its own at its first
     * record. */
    if (atomic_load(&w.state) == W_OPEN) {
        munmap(w.base, w.map_len);
        if (fd_is_ours())
            close(w.fd);
    }
    w.fd = -1;
    w.base = NULL;
    w.hdr = NULL;
    w.gen++;
    pthread_mutex_init(&w.mu, NULL);
    atomic_store(&w.state, W_CLOSED);
}
