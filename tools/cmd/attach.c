/* shapetrace attach: switch recording on or off in the processes of a run, or put a mark on
 * their timelines, while they run. No signal and no thread: the preload reads its control words
 * from its own trace header, which is a shared mapping of the file, so a store into the file is
 * seen at the process's next call; a mark is appended to each trace as a record. Only the owner
 * of a trace (mode 0600) can open it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/rec.h"
#include "include/shapetrace/env.h"
#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"
#include "tools/lib/reader.h"

static void attach_usage(FILE *f)
{
    fputs("usage: shapetrace attach RUN_DIR|PID [--on] [--off] [--mark TEXT]\n"
          "\n"
          "Acts on every process of the run (RUN_DIR), or on one process (PID, on this host),\n"
          "within its next traced call:\n"
          "  --on         record calls (the default action)\n"
          "  --off        stop recording; communicator and allocation records are still kept\n"
          "  --mark TEXT  add a mark record with TEXT to each trace (shown by dump)\n"
          "A run started with `shapetrace run --dormant` starts with recording off.\n"
          "Exit status: 0, or 2 when nothing could be reached.\n",
          f);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reserve room for one record in a live trace with the writer's own protocol, growing the file if
 * the writer has not yet. */
static int append_mark(int fd, struct shp_file_header *h, const char *text)
{
    size_t size = sizeof(struct shp_rec_mark);
    uint64_t off = shp_rec_reserve(h, shp_rec_limit(h, SHP_REC_MARK), size);
    if (!off)
        return -ENOSPC;
    uint64_t end = off + size;
    uint64_t have = __atomic_load_n(&h->allocated, __ATOMIC_ACQUIRE);
    if (end > have) {
        uint64_t want = (end + (1u << 20)) & ~((uint64_t)(1u << 20) - 1);
        int e = posix_fallocate(fd, 0, (off_t)want);
        if (e)
            return -e;
        /* The writer may grow the file at the same time; allocated only records a lower bound
         * of what exists, so a lost update costs a redundant fallocate later, nothing more. */
        while (have < want && !__atomic_compare_exchange_n(&h->allocated, &have, want, true,
                                                           __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t base = off & ~((uint64_t)page - 1);
    size_t len = (size_t)(end - base);
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)base);
    if (m == MAP_FAILED)
        return -errno;
    struct shp_rec_mark *r = (struct shp_rec_mark *)(m + (off - base));
    shp_rec_mark_reserved(r, size);
    memset((char *)r + sizeof(r->h), 0, size - sizeof(r->h));
    /* The writer's clock: CLOCK_MONOTONIC of this host (attach by PID is same-host; for a run
     * directory on a shared file system, marks of other hosts' traces are placed by this
     * host's clock). */
    r->t_ns = mono_ns();
    snprintf(r->text, sizeof(r->text), "%s", text);
    shp_rec_publish(r, SHP_REC_MARK, size);
    munmap(m, len);
    return 0;
}

/* Apply the actions to one trace; returns 0 or a negative errno with *why set. */
static int act_on(const char *path, int arm, const char *mark, const char **why)
{
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror(errno);
        return -errno;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
        *why = "owned by another user";
        close(fd);
        return -EPERM;
    }
    if ((size_t)st.st_size < SHP_HEADER_SIZE) {
        *why = "not a shapetrace trace";
        close(fd);
        return -EINVAL;
    }
    struct shp_file_header *h =
        mmap(NULL, SHP_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        *why = strerror(errno);
        close(fd);
        return -EIO;
    }
    if (memcmp(h->magic, SHP_TRACE_MAGIC, 8) || !shp_trace_version_known(h->version) ||
        h->byte_order != SHP_BYTE_ORDER_MARK) {
        *why = "not a shapetrace trace of this version";
        rc = -EINVAL;
    } else {
        if (arm >= 0)
            __atomic_store_n(&h->ctl[SHP_CTL_ARMED], (uint64_t)arm, __ATOMIC_RELEASE);
        if (mark && (rc = append_mark(fd, h, mark)) < 0)
            *why = rc == -ENOSPC ? "the trace is full" : strerror(-rc);
    }
    munmap(h, SHP_HEADER_SIZE);
    close(fd);
    return rc;
}

/* The run directory of a traced process, from its environment. */
static int dir_of_pid(long pid, char *out, size_t len)
{
    char path[64], buf[1 << 16];
    snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -ENOENT;
    buf[n] = 0;
    for (char *p = buf; p < buf + n; p += strlen(p) + 1) {
        if (!strncmp(p, SHP_ENV_DIR "=", sizeof(SHP_ENV_DIR))) {
            snprintf(out, len, "%s", p + sizeof(SHP_ENV_DIR));
            return 0;
        }
    }
    return -ENOENT;
}

static int write_run_control(const char *dir, int arm)
{
    char tmp[PATH_MAX + 32], final[PATH_MAX + 16];
    snprintf(final, sizeof(final), "%s/" SHP_CONTROL_FILE, dir);
    /* Created exclusively under a name of its own: no link followed, no file reused. */
    int fd = shp_create_private(dir, SHP_CONTROL_FILE, tmp, sizeof(tmp));
    if (fd < 0)
        return fd;
    char line[32];
    int n = shp_control_format(line, sizeof(line), arm);
    bool ok = write(fd, line, (size_t)n) == n;
    close(fd);
    if (!ok || rename(tmp, final) != 0) {
        unlink(tmp);
        return -EIO;
    }
    return 0;
}

int shp_cmd_attach(int argc, char **argv)
{
    static const struct option opts[] = {
        {"on", no_argument, 0, 'o'},
        {"off", no_argument, 0, 'f'},
        {"mark", required_argument, 0, 'm'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int arm = -1, c;
    const char *mark = NULL;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'o')
            arm = 1;
        else if (c == 'f')
            arm = 0;
        else if (c == 'm')
            mark = optarg;
        else if (c == 'h') {
            attach_usage(stdout);
            return SHP_EXIT_OK;
        } else {
            return shp_bad_option("attach", argc, argv, "h", opts);
        }
    }
    if (optind != argc - 1)
        return shp_usage_error("attach", "give one RUN_DIR or PID");
    if (arm < 0 && !mark)
        arm = 1;
    if (mark && strlen(mark) >= sizeof(((struct shp_rec_mark *)0)->text)) {
        shp_err("attach: a mark holds at most %zu bytes; this one has %zu",
                sizeof(((struct shp_rec_mark *)0)->text) - 1, strlen(mark));
        return SHP_EXIT_USAGE;
    }
    const char *target = argv[optind];
    char *end;
    long pid = strtol(target, &end, 10);
    bool by_pid = *target && !*end && pid > 0;
    char dir[PATH_MAX];
    char **files = NULL;
    size_t n = 0;
    if (by_pid) {
        if (dir_of_pid(pid, dir, sizeof(dir)) < 0) {
            shp_err("process %ld is not traced (no SHAPETRACE_DIR in its environment, or it is "
                    "not yours)",
                    pid);
            return SHP_EXIT_USAGE;
        }
        char host[64] = "", prefix[128];
        gethostname(host, sizeof(host) - 1);
        snprintf(prefix, sizeof(prefix), "%s-%ld.", host, pid);
        char **all = NULL;
        size_t nall = 0;
        shp_trace_collect(dir, &all, &nall);
        for (size_t i = 0; i < nall; i++) {
            const char *base = strrchr(all[i], '/');
            base = base ? base + 1 : all[i];
            if (!strncmp(base, prefix, strlen(prefix))) {
                files = realloc(files, (n + 1) * sizeof(*files));
                files[n++] = all[i];
            } else {
                free(all[i]);
            }
        }
        free(all);
        if (n == 0) {
            shp_err("process %ld has no trace yet in %s (no CUDA or NCCL call so far)", pid, dir);
            return SHP_EXIT_USAGE;
        }
    } else {
        snprintf(dir, sizeof(dir), "%s", target);
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            shp_err("%s: not a run directory or a process id", target);
            return SHP_EXIT_USAGE;
        }
        /* Before anything is written: a refusal leaves no file behind in another user's run. */
        if (st.st_uid != geteuid()) {
            shp_err("%s: owned by another user; attach acts only on your own runs", dir);
            return SHP_EXIT_USAGE;
        }
        /* For the processes that have no trace yet: they read this when they create one. */
        if (arm >= 0 && write_run_control(dir, arm) < 0) {
            shp_err("%s: cannot write its control file", dir);
            return SHP_EXIT_USAGE;
        }
        shp_trace_collect(dir, &files, &n);
    }
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
        const char *why = "";
        if (act_on(files[i], arm, mark, &why) == 0)
            done++;
        else
            shp_err("%s: %s", files[i], why);
        free(files[i]);
    }
    free(files);
    fprintf(stderr, "shapetrace: %s%s%s%s in %zu of %zu trace%s (%s)\n",
            arm == 1   ? "recording on"
            : arm == 0 ? "recording off"
                       : "",
            arm >= 0 && mark ? ", " : "", mark ? "mark " : "", mark ? mark : "", done, n,
            n == 1 ? "" : "s", dir);
    return done == n && (n > 0 || !by_pid) ? SHP_EXIT_OK : SHP_EXIT_USAGE;
}
