/* shapetrace tools: the trace reader. Files are mapped read-only; a live trace may grow while it
 * is read, and only what its header's tail covered at open is read. */
#define _GNU_SOURCE
#include "tools/lib/reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int shp_trace_open(struct shp_trace *t, const char *path, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    /* Non-blocking: a FIFO named *.shptrace must not hold the reader in open(). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s", strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "not a regular file");
        return -EINVAL;
    }
    if ((size_t)st.st_size < SHP_HEADER_SIZE) {
        close(fd);
        snprintf(err, errlen, "not a shapetrace trace (%lld bytes, shorter than a header)",
                 (long long)st.st_size);
        return -EINVAL;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map: %s", strerror(e));
        return -e;
    }
    t->map = m;
    t->size = (size_t)st.st_size;
    t->hdr = m;
    const struct shp_file_header *h = t->hdr;
    int rc = -EINVAL;
    if (memcmp(h->magic, SHP_TRACE_MAGIC, 8) != 0) {
        snprintf(err, errlen, "not a shapetrace trace (bad magic)");
    } else if (h->byte_order != SHP_BYTE_ORDER_MARK) {
        snprintf(err, errlen, "written on a machine of the other byte order; read it there");
    } else if (!shp_trace_version_known(h->version)) {
        snprintf(err, errlen, "trace format version %u; this shapetrace reads versions %u to %u",
                 h->version, SHP_TRACE_VERSION_OLDEST, SHP_TRACE_VERSION_VALUES);
    } else if (h->header_size != SHP_HEADER_SIZE) {
        snprintf(err, errlen, "corrupt header (header size %u)", h->header_size);
    } else if (!memchr(h->host, 0, sizeof(h->host)) || !memchr(h->exe, 0, sizeof(h->exe))) {
        snprintf(err, errlen, "corrupt header (host or exe not terminated)");
    } else {
        rc = 0;
    }
    if (rc < 0) {
        munmap(m, t->size);
        memset(t, 0, sizeof(*t));
        return rc;
    }
    uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE);
    t->end = tail < t->size ? tail : t->size;
    /* A writer that switched itself off because the file could not grow may have reserved
     * space it never had: not a cut file. */
    t->truncated =
        tail > t->size && (h->flags & SHP_FILE_COMPLETE) && !(h->flags & SHP_FILE_DISABLED);
    if (t->end < SHP_HEADER_SIZE)
        t->end = SHP_HEADER_SIZE;
    shp_trace_clock_setup(t, h);
    uint32_t n = __atomic_load_n(&h->ncomms, __ATOMIC_ACQUIRE);
    n = n < SHP_COMM_INDEX_MAX ? n : SHP_COMM_INDEX_MAX;
    t->comms = n ? calloc(n, sizeof(*t->comms)) : NULL;
    t->ncomms = 0;
    for (uint32_t i = 0; t->comms && i < n; i++) {
        struct shp_trace_comm c = shp_trace_comm_at(t, i);
        t->comms[i] = c;
        t->ncomms = i + 1;
    }
    t->path = strdup(path);
    return 0;
}

void shp_trace_close(struct shp_trace *t)
{
    if (t->map)
        munmap((void *)t->map, t->size);
    free(t->path);
    free(t->comms);
    memset(t, 0, sizeof(*t));
}

/* Bytes a resync may hash for each byte it scans (see shp_trace_next). */
#define RESYNC_HASH_PER_BYTE 16

/* shp_rec_check of a record, with the frequent compact records' type and size as constants,
 * so that the sum over their words is unrolled with the skipped word left out at compile time:
 * every record of every walk is checked. */
__attribute__((optimize("unroll-loops"))) static inline uint32_t check_of(const struct shp_rec *r,
                                                                          unsigned ty, size_t sz)
{
#define CHECK_AS(type, st)                                                                         \
    case type:                                                                                     \
        if (sz == sizeof(st))                                                                      \
            return shp_rec_check(r, type, sizeof(st));                                             \
        break;
    switch (ty) {
        CHECK_AS(SHP_REC_COPY_C, struct shp_rec_copy_c)
        CHECK_AS(SHP_REC_COPY2D_C, struct shp_rec_copy2d_c)
        CHECK_AS(SHP_REC_COLL_C, struct shp_rec_coll_c)
        CHECK_AS(SHP_REC_P2P_C, struct shp_rec_coll_c)
        CHECK_AS(SHP_REC_LAUNCH_C, struct shp_rec_launch_c)
    default:
        break;
    }
#undef CHECK_AS
    return shp_rec_check(r, ty, sz);
}

/* A published record of a known type whose size fits and whose check matches. Inline where
 * the walk asks it of every record (shp_trace_next), out of line elsewhere. */
static inline __attribute__((always_inline)) bool valid_rec(const struct shp_trace *t, uint64_t off,
                                                            unsigned *type, size_t *size)
{
    if (off + 8 > t->end)
        return false;
    const struct shp_rec *r = (const struct shp_rec *)(t->map + off);
    uint32_t w = __atomic_load_n(&r->word, __ATOMIC_ACQUIRE);
    if (SHP_REC_WORD_MAGIC(w) != SHP_REC_MAGIC)
        return false;
    unsigned ty = SHP_REC_WORD_TYPE(w);
    size_t sz = SHP_REC_WORD_SIZE(w);
    if (ty == SHP_REC_RESERVED || ty >= SHP_REC_TYPE_COUNT || sz < shp_rec_min_size(ty) ||
        off + sz > t->end)
        return false;
    if (r->check != check_of(r, ty, sz))
        return false;
    *type = ty;
    *size = sz;
    return true;
}

static bool valid_at(const struct shp_trace *t, uint64_t off, unsigned *type, size_t *size)
{
    return valid_rec(t, off, type, size);
}

/* valid_at, with the type as readers see it. */
static bool valid_as(const struct shp_trace *t, uint64_t off, unsigned *type, size_t *size)
{
    if (!valid_at(t, off, type, size))
        return false;
    *type = shp_rec_as(*type);
    return true;
}

struct shp_trace_comm shp_trace_comm_at(const struct shp_trace *t, unsigned idx)
{
    struct shp_trace_comm c = {.ok = false, .rank = -1, .nranks = -1, .device = -1};
    if (idx < t->ncomms)
        return t->comms[idx];
    if (idx >= SHP_COMM_INDEX_MAX)
        return c;
    uint64_t off = __atomic_load_n(&t->hdr->comm_off[idx], __ATOMIC_ACQUIRE);
    unsigned ty;
    size_t sz;
    if (off < SHP_HEADER_SIZE || off % 8 || off > t->end || !valid_at(t, off, &ty, &sz) ||
        ty != SHP_REC_COMM)
        return c;
    const struct shp_rec_comm *r = (const void *)(t->map + off);
    c.id = r->id;
    c.handle = shp_comm_rec_handle(r);
    c.rank = shp_comm_rec_rank(r);
    c.nranks = shp_comm_rec_nranks(r);
    c.device = r->ev.device;
    c.ok = true;
    return c;
}

const struct shp_rec *shp_trace_next(const struct shp_trace *t, struct shp_cursor *c,
                                     unsigned *type, size_t *size)
{
    uint64_t o = c->off < SHP_HEADER_SIZE ? SHP_HEADER_SIZE : c->off;
    /* The next record is nearly always whole: checked inline, the rest as before. */
    if (valid_rec(t, o, type, size)) {
        c->off = o + *size;
        *type = shp_rec_as(*type);
        return (const struct shp_rec *)(t->map + o);
    }
    while (o + 8 <= t->end) {
        if (valid_as(t, o, type, size)) {
            c->off = o + *size;
            return (const struct shp_rec *)(t->map + o);
        }
        if (c->live) {
            c->off = o;
            return NULL;
        }
        c->torn++;
        const struct shp_rec *r = (const struct shp_rec *)(t->map + o);
        uint32_t w = __atomic_load_n(&r->word, __ATOMIC_ACQUIRE);
        size_t sz = SHP_REC_WORD_SIZE(w);
        if (SHP_REC_WORD_MAGIC(w) == SHP_REC_MAGIC && sz >= 8 && o + sz <= t->end) {
            /* Reserved (or published and damaged): its size is known, step over it. */
            o += sz;
            continue;
        }
        /* A writer died between reserving and marking its space: find the next record. Each
         * candidate costs a hash of the size it claims; a crafted run of candidates that all
         * claim the largest size would make this quadratic. So the bytes hashed are bounded by
         * a multiple of the distance scanned, and past that only records of a fixed size (a few
         * words) are candidates: linear in the file whatever it holds. */
        uint64_t s = o + 8, hashed = 0;
        for (; s + 8 <= t->end; s += 8) {
            uint32_t cw = __atomic_load_n((const uint32_t *)(t->map + s), __ATOMIC_ACQUIRE);
            if (SHP_REC_WORD_MAGIC(cw) != SHP_REC_MAGIC)
                continue;
            unsigned cty = SHP_REC_WORD_TYPE(cw);
            size_t csz = SHP_REC_WORD_SIZE(cw);
            struct shp_rec_info ci = shp_rec_info(cty);
            if (!(ci.role & SHP_ROLE_VAR) && csz != ci.min_size)
                continue;
            if ((ci.role & SHP_ROLE_VAR) && hashed > RESYNC_HASH_PER_BYTE * (s - o) + (1u << 20))
                continue;
            hashed += csz;
            if (valid_as(t, s, type, size))
                break;
        }
        o = s;
    }
    c->off = t->end;
    return NULL;
}

bool shp_trace_complete(const struct shp_trace *t, const struct shp_cursor *c)
{
    return (t->hdr->flags & SHP_FILE_COMPLETE) && !c->torn && !t->truncated && !t->hdr->dropped;
}

const char *shp_trace_off_why(const struct shp_trace *t)
{
    if (!(t->hdr->flags & SHP_FILE_DISABLED))
        return NULL;
#define SHP_REASON_PHRASE(name, num, key, phrase) [num] = phrase,
    static const char *const phrases[SHP_OFF_COUNT] = {SHP_OFF_REASONS(SHP_REASON_PHRASE)};
#undef SHP_REASON_PHRASE
    uint32_t r = t->hdr->off_reason;
    return r < SHP_OFF_COUNT && phrases[r] ? phrases[r] : "an error of its own";
}

const char *shp_trace_cap_why(const struct shp_trace *t)
{
#define SHP_REASON_PHRASE(name, num, key, phrase) [num] = phrase,
    static const char *const phrases[SHP_CAP_COUNT] = {SHP_CAP_REASONS(SHP_REASON_PHRASE)};
#undef SHP_REASON_PHRASE
    uint32_t r = t->hdr->cap_why;
    return r < SHP_CAP_COUNT ? phrases[r] : phrases[SHP_CAP_MAX_MB];
}

/* True when h's process runs on this host now: its pid is alive, not a zombie, and started no
 * later than the trace was created (a pid reused by a later process started after it). */
static bool running_here(const struct shp_file_header *h)
{
    char me[sizeof(h->host)] = "";
    if (gethostname(me, sizeof(me) - 1) != 0 || strncmp(me, h->host, sizeof(me)) || h->pid == 0 ||
        h->pid > INT32_MAX)
        return false;
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%" PRIu64 "/stat", h->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    /* Fields after the command name, which is in parentheses and may hold anything: state is
     * the 3rd field, starttime (clock ticks since boot) the 22nd. */
    const char *p = strrchr(buf, ')');
    char state = 0;
    unsigned long long start = 0;
    if (!p ||
        sscanf(p + 1,
               " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
               "%*s %*s %llu",
               &state, &start) != 2 ||
        state == 'Z' || state == 'X')
        return false;
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec boot, mono;
    if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) || clock_gettime(CLOCK_MONOTONIC, &mono))
        return false;
    /* The trace's creation on the boot clock: the boot clock runs ahead of the monotonic one
     * by the time the host was suspended. */
    int64_t ahead =
        ((int64_t)boot.tv_sec - mono.tv_sec) * 1000000000ll + (boot.tv_nsec - mono.tv_nsec);
    double created_s = ((double)h->monotonic_ns + (double)ahead) / 1e9;
    return (double)start / (double)hz <= created_s + 2.0 / (double)hz;
}

/* The new image's trace, if t's process exec'd: the writer names a process's traces
 * HOST-PID.shptrace, then HOST-PID.N.shptrace, so only those names are opened. */
static bool execd(const struct shp_trace *t, char *next, size_t len)
{
    const struct shp_file_header *h = t->hdr;
    char dir[PATH_MAX], prefix[sizeof(h->host) + 32];
    const char *slash = strrchr(t->path, '/');
    const char *self = slash ? slash + 1 : t->path;
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == t->path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - t->path), t->path);
    int plen = snprintf(prefix, sizeof(prefix), "%s-%" PRIu64 ".", h->host, h->pid);
    DIR *d = opendir(dir);
    if (!d)
        return false;
    uint64_t best = 0;
    struct dirent *de;
    size_t slen = strlen(SHP_TRACE_SUFFIX);
    while ((de = readdir(d))) {
        size_t nlen = strlen(de->d_name);
        if (strncmp(de->d_name, prefix, (size_t)plen) || !strcmp(de->d_name, self) ||
            nlen <= slen || strcmp(de->d_name + nlen - slen, SHP_TRACE_SUFFIX))
            continue;
        char full[PATH_MAX], err[256];
        struct shp_trace o;
        if (snprintf(full, sizeof(full), "%s/%s", dir, de->d_name) >= (int)sizeof(full) ||
            shp_trace_open(&o, full, err, sizeof(err)) != 0)
            continue;
        const struct shp_file_header *oh = o.hdr;
        if (oh->pid == h->pid && oh->ppid == h->ppid && !strcmp(oh->host, h->host) &&
            oh->realtime_ns > h->realtime_ns && (!best || oh->realtime_ns < best)) {
            best = oh->realtime_ns;
            if (next)
                snprintf(next, len, "%s", full);
        }
        shp_trace_close(&o);
    }
    closedir(d);
    return best != 0;
}

enum shp_fate shp_trace_fate(const struct shp_trace *t, char *next, size_t len)
{
    if (t->hdr->flags & SHP_FILE_COMPLETE)
        return SHP_FATE_EXITED;
    if (execd(t, next, len))
        return SHP_FATE_EXECD;
    return running_here(t->hdr) ? SHP_FATE_RUNNING : SHP_FATE_KILLED;
}

/* A phrase being built in a fixed buffer. */
struct phrase {
    char *buf;
    size_t cap, n;
};

/* Appends to it, cutting it at the end of the buffer. */
static void __attribute__((format(printf, 2, 3))) add(struct phrase *p, const char *fmt, ...)
{
    if (p->n + 1 >= p->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(p->buf + p->n, p->cap - p->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        p->n = p->n + (size_t)k < p->cap ? p->n + (size_t)k : p->cap - 1;
}

const char *shp_trace_incomplete_why(const struct shp_trace *t, const struct shp_cursor *c)
{
    static __thread char why[PATH_MAX + 512];
    const struct shp_file_header *h = t->hdr;
    if (shp_trace_complete(t, c))
        return NULL;
    why[0] = 0;
    struct phrase p = {why, sizeof(why), 0};
    const char *off = shp_trace_off_why(t);
    if (off) {
        add(&p, "tracing switched itself off");
        if (h->off_ns >= h->monotonic_ns && h->off_ns)
            add(&p, " %.3f s into the trace", (double)(h->off_ns - h->monotonic_ns) / 1e9);
        add(&p, " (%s); %" PRIu64 " call%s after it not recorded", off, h->calls_lost,
            h->calls_lost == 1 ? "" : "s");
    } else if (h->dropped) {
        add(&p, "calls were dropped at %s", shp_trace_cap_why(t));
        if (h->cap_why != SHP_CAP_MAX_MB && h->cap_limit)
            add(&p, " of %" PRIu64 " KiB, which capped the trace at %" PRIu64 " KiB",
                h->cap_limit >> 10, h->cap >> 10);
    }
    char next[PATH_MAX] = "";
    enum shp_fate fate = shp_trace_fate(t, next, sizeof(next));
    const char *sep = p.n ? "; " : "";
    if (fate == SHP_FATE_EXITED && p.n)
        add(&p, "; the process exited normally");
    else if (fate == SHP_FATE_RUNNING)
        add(&p, "%sthe process is still running", sep);
    else if (fate == SHP_FATE_EXECD)
        add(&p, "%sthe process exec'd (the new image's trace: %s)", sep, next);
    else if (fate == SHP_FATE_KILLED)
        add(&p, "%sthe process did not exit normally (killed or crashed)", sep);
    if (c->torn)
        add(&p, "%srecords were torn (%" PRIu64 " skipped)", p.n ? "; " : "", c->torn);
    if (t->truncated)
        add(&p, "%sthe file is shorter than its header says", p.n ? "; " : "");
    return why;
}

int shp_trace_rank(const struct shp_trace *t)
{
    return t->hdr->env_rank >= 0 ? t->hdr->env_rank : t->hdr->first_comm_rank;
}

void shp_trace_clock_setup(struct shp_trace *t, const struct shp_file_header *h)
{
    t->realtime_ns = h->realtime_ns;
    t->monotonic_ns = h->monotonic_ns;
    t->base_t = t->base_ns = 0;
    t->mult = 1ull << SHP_CLOCK_FRAC;
    t->clock_guessed = false;
    if (h->clock != SHP_CLOCK_TSC)
        return;
    const struct shp_clock_pair *f = &h->clock_first;
    const struct shp_clock_pair *best = NULL;
    struct shp_clock_pair p[SHP_CLOCK_PAIRS];
    bool first_ok = f->check == shp_clock_pair_check(f->tsc, f->ns);
    for (int i = 0; first_ok && i < SHP_CLOCK_PAIRS; i++) {
        /* The check last, as the writer stores it first (zero) and last. */
        p[i].check = __atomic_load_n(&h->clock_pairs[i].check, __ATOMIC_ACQUIRE);
        p[i].tsc = __atomic_load_n(&h->clock_pairs[i].tsc, __ATOMIC_ACQUIRE);
        p[i].ns = __atomic_load_n(&h->clock_pairs[i].ns, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&h->clock_pairs[i].check, __ATOMIC_RELAXED) != p[i].check ||
            p[i].check != shp_clock_pair_check(p[i].tsc, p[i].ns) || p[i].tsc <= f->tsc ||
            p[i].ns <= f->ns)
            continue;
        if (!best || p[i].tsc > best->tsc)
            best = &p[i];
    }
    if (!best) {
        t->clock_guessed = true;
        return;
    }
    t->base_t = f->tsc;
    t->base_ns = f->ns;
    unsigned __int128 m =
        ((unsigned __int128)(best->ns - f->ns) << SHP_CLOCK_FRAC) / (best->tsc - f->tsc);
    /* A rate no clock has (over 2^24 ns a tick) is damage: keep 1 ns a tick. */
    t->mult = m >> 64 || !m ? 1ull << SHP_CLOCK_FRAC : (uint64_t)m;
}

static int push(char ***files, size_t *n, const char *path)
{
    char **f = realloc(*files, (*n + 1) * sizeof(**files));
    if (!f)
        return -ENOMEM;
    *files = f;
    if (!(f[*n] = strdup(path)))
        return -ENOMEM;
    (*n)++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int shp_trace_collect(const char *path, char ***files, size_t *n)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return push(files, n, path);
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    size_t first = *n;
    int rc = 0;
    struct dirent *de;
    size_t slen = strlen(SHP_TRACE_SUFFIX);
    while ((de = readdir(d)) && rc == 0) {
        size_t len = strlen(de->d_name);
        if (len <= slen || strcmp(de->d_name + len - slen, SHP_TRACE_SUFFIX))
            continue;
        char full[PATH_MAX];
        if (snprintf(full, sizeof(full), "%s/%s", path, de->d_name) >= (int)sizeof(full))
            continue;
        rc = push(files, n, full);
    }
    closedir(d);
    if (rc == 0 && *n == first)
        rc = -ENOENT;
    if (rc == 0)
        qsort(*files + first, *n - first, sizeof(**files), cmp_str);
    return rc;
}
