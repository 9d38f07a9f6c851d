/* shapetrace preload: the trace file. One file per process, created at the first record, mapped
 * MAP_SHARED so that a record is in the page cache (and survives SIGKILL) as soon as it is
 * stored, with no system call per record. Space is reserved by a CAS on the header's tail; the
 * file grows in chunks under a mutex, the only lock, taken once per chunk.
 *
 * The application's resources stay its own. No descriptor is kept: the file is opened to create
 * it and each time it grows, checked to be the same file (device and inode), and closed (an
 * application that closes every descriptor, or counts on all it may open, never meets ours).
 * The mapping is made in segments as the file grows, within a share of what RLIMIT_AS leaves;
 * the file never grows past RLIMIT_FSIZE; both limits lower the cap (say so in the header) and
 * the records beyond are dropped and counted, as at the cap. No write of ours raises SIGXFSZ.
 *
 * The first store into a new page of the file costs the kernel 1 to 3 us (it allocates and
 * zeroes the page; on a VM the host backs it too): 13 to 45 ns a call at 48 to 72 bytes a
 * record. A helper thread faults the next pages in ahead of the tail instead, while the file is
 * kept growing that far ahead (see prefault_main for what the helper may and may not do). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "include/shapetrace/env.h"
#include "preload/preload.h"

enum { W_CLOSED, W_OPEN, W_FAILED };

/* The file is mapped in segments of 2^shift bytes of file, each mapping OVERLAP bytes more, so
 * that a record that starts in a segment ends in the same mapping (no record is larger). */
#define SEG_MAX SHP_SEG_MAX
#define SEG_SHIFT_MAX 26 /* 64 MiB */
#define SEG_SHIFT_MIN 20
#define OVERLAP (512u << 10)
_Static_assert(SHP_REC_MAX_SIZE <= OVERLAP, "a record fits in a segment's overlap");

/* What every call record reads (preload.h: shp_reserve_call). */
struct shp_writer_hot shp_wh;

static struct {
    _Atomic int state;
    _Atomic uint64_t ready; /* [0, ready) is allocated and mapped by this process */
    pthread_mutex_t mu;
    dev_t dev; /* the trace file's identity, checked each time it is opened again */
    ino_t ino;
    uint64_t map_len;   /* the largest the file may become: cap plus the bookkeeping reserve */
    uint64_t as_mapped; /* bytes of address space the segments take */
    uint64_t cap;       /* end offset for call records (the header's cap) */
    uint32_t npairs;    /* clock pairs stored so far (clock_pairs[npairs % SHP_CLOCK_PAIRS] next) */
    char path[PATH_MAX + 256];
    char why[PATH_MAX + 320]; /* why the trace could not be made */
    char pending[128];        /* a warning said before the trace existed, for it */
    _Atomic int pending_taken;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The helper thread that faults pages in ahead of the tail (see prefault_main). */
#define PF_AHEAD (2ull << 20)   /* it keeps this much of the file faulted in past the tail */
#define PF_STEP (256ull << 10)  /* one madvise call; the stop flag is read between them */
#define PF_START (256ull << 10) /* a trace smaller than this never starts one */
#define PF_STACK (64u << 10)
static struct {
    pthread_mutex_t mu;       /* held to start or join it, and from fork's prepare to its end */
    _Atomic bool usable;      /* decided when the trace is made; false for good after a failure */
    _Atomic int running;      /* set by its starter, cleared by the helper as its last act */
    _Atomic int stop;         /* fork or exit: stop at the next step */
    _Atomic int tid;          /* the kernel's id of the last one started (0: not known yet) */
    bool joinable;            /* a thread was started and not joined yet; under mu */
    bool said;                /* the INFO line about it was logged; under mu */
    pthread_t thread;         /* under mu */
    _Atomic uint64_t done;    /* faulted in up to here */
    _Atomic uint64_t kick_at; /* a record ending past this asks for the helper */
    _Atomic uint64_t grow_at; /* a record ending past this grows the file PF_AHEAD further */
} pf = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define CHUNK_MIN (1ull << 20)
#define CHUNK_MAX (64ull << 20)
#define PAGE 4096ull
/* Fewer bytes of records than this: no trace at all. */
#define MIN_RECORDS (2 * PAGE)

struct shp_file_header *shp_writer_header(void)
{
    return atomic_load_explicit(&w.state, memory_order_acquire) == W_OPEN ? shp_wh.hdr : NULL;
}

static uint64_t seg_len(unsigned i)
{
    uint64_t start = (uint64_t)i << shp_wh.shift;
    uint64_t len = (1ull << shp_wh.shift) + OVERLAP;
    return start + len > w.map_len ? w.map_len - start : len;
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

/* Fault the pages of [from, to) in ahead of the tail (SHP_GROWTH_POPULATE, and the helper), so
 * that the records stored there take no page fault. MADV_POPULATE_WRITE needs Linux 5.14; older
 * kernels refuse it and the records fault as with plain chunks. Returns 0 or -errno. */
static int populate(uint64_t from, uint64_t to)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    from &= ~(PAGE - 1);
    while (from < to) {
        unsigned i = (unsigned)(from >> shp_wh.shift);
        uint64_t start = (uint64_t)i << shp_wh.shift, end = start + (1ull << shp_wh.shift);
        uint64_t stop = to < end ? to : end;
        if (madvise(shp_wh.seg[i] + (from - start), (size_t)(stop - from), MADV_POPULATE_WRITE))
            return -errno;
        from = stop;
    }
    return 0;
}

static uint64_t limit_of(int resource)
{
    struct rlimit r;
    return getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY ? (uint64_t)r.rlim_cur
                                                                       : UINT64_MAX;
}

/* fast_end (preload.h) from what bounds it: what exists and is mapped, and where the helper must
 * be asked again. Both only grow, so a refresh that races another can store too low a value,
 * never too high: a record then takes the slow path once more. */
/* Where a record must grow the file for the helper: PF_AHEAD before what exists, while the file
 * may still grow and the helper is in use. Under w.mu, or before the trace is visible. */
static void set_grow_at(void)
{
    uint64_t r = atomic_load_explicit(&w.ready, memory_order_relaxed);
    uint64_t g = UINT64_MAX;
    if (atomic_load_explicit(&pf.usable, memory_order_relaxed) && r < w.map_len)
        g = r > PF_AHEAD ? r - PF_AHEAD : 0;
    atomic_store_explicit(&pf.grow_at, g, memory_order_relaxed);
}

static void refresh_fast(void)
{
    if (atomic_load_explicit(&w.state, memory_order_acquire) != W_OPEN)
        return;
    uint64_t e = atomic_load_explicit(&w.ready, memory_order_acquire);
    uint64_t g = atomic_load_explicit(&pf.grow_at, memory_order_relaxed);
    uint64_t k = atomic_load_explicit(&pf.kick_at, memory_order_relaxed);
    e = g < e ? g : e;
    e = k < e ? k : e;
    atomic_store_explicit(&shp_wh.fast_end, e, memory_order_release);
}

/* The helper thread: faults the pages of [tail, tail + PF_AHEAD) in, as far as the file exists,
 * PF_STEP at a time, then ends (it lives a millisecond or so each time it is asked, and is
 * never there for long). What it may do and what it never does:
 * - it runs only our code (the guard is held: no wrapper records a call it would make), blocks
 *   every signal (a signal sent to the process goes to one of the application's threads), and
 *   makes no system call but gettid, madvise and prctl; no descriptor, no allocation, no lock;
 * - it starts lazily: only once a trace has PF_START bytes of records, and again each time the
 *   tail passes the middle of what it faulted in; never under RLIMIT_AS, nor when the user's
 *   tasks could come near RLIMIT_NPROC (it would take a task the application may need);
 * - fork: the prepare handler stops it, joins it and waits until the kernel has let it go
 *   (settle), so that the fork finds none of our threads (Python's os.fork counts the threads
 *   there are and warns of any) and the child has none; the child starts its own;
 * - exit: it is never waited for (exit_group ends it); a process whose last thread of its own
 *   ends with pthread_exit waits for the step in progress at most. */
static void *prefault_main(void *arg)
{
    (void)arg;
    shp_guard = 1;
    atomic_store_explicit(&pf.tid, (int)gettid(), memory_order_release);
    prctl(PR_SET_NAME, "shapetrace", 0, 0, 0);
    struct shp_file_header *h = shp_wh.hdr;
    while (!atomic_load_explicit(&pf.stop, memory_order_acquire) &&
           atomic_load_explicit(&shp_state, memory_order_acquire) == SHP_STATE_ON) {
        uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_RELAXED);
        uint64_t ready = atomic_load_explicit(&w.ready, memory_order_acquire);
        uint64_t from = atomic_load_explicit(&pf.done, memory_order_relaxed);
        from = (from > tail ? from : tail) & ~(PAGE - 1);
        uint64_t to = tail + PF_AHEAD < ready ? tail + PF_AHEAD : ready;
        /* Less than a step to do: the tail has not come far enough for it to be worth a call;
         * the next ask comes when it has (kick_at). Never a page at a time behind the tail. */
        if (from + PF_STEP > to)
            break;
        to = from + PF_STEP < to ? from + PF_STEP : to;
        int rc;
        while ((rc = populate(from, to)) == -EINTR)
            ;
        if (rc < 0)
            break;
        atomic_store_explicit(&pf.done, to, memory_order_relaxed);
        uint64_t k = to > PF_AHEAD / 2 ? to - PF_AHEAD / 2 : 0;
        if (k > atomic_load_explicit(&pf.kick_at, memory_order_relaxed))
            atomic_store_explicit(&pf.kick_at, k, memory_order_relaxed);
        refresh_fast();
    }
    atomic_store_explicit(&pf.running, 0, memory_order_release);
    return NULL;
}

/* True when a thread of ours cannot take a task that the application may need: no RLIMIT_NPROC,
 * or one that the whole system's tasks (the user's are among them) are far below. */
static bool task_to_spare(void)
{
    uint64_t nproc = limit_of(RLIMIT_NPROC);
    if (nproc == UINT64_MAX)
        return true;
    struct sysinfo si;
    return sysinfo(&si) == 0 && (uint64_t)si.procs * 2 + 64 <= nproc;
}

/* A record passed pf.kick_at: start the helper unless it runs (it then sees the new tail
 * itself) or fork is under way. Only from call records, never from an allocation's: those may
 * come from inside an allocator, and pthread_create allocates. */
static void prefault_kick(void)
{
    if (!atomic_load_explicit(&pf.usable, memory_order_relaxed) ||
        atomic_load_explicit(&pf.running, memory_order_acquire) ||
        pthread_mutex_trylock(&pf.mu) != 0)
        return;
    if (!atomic_load_explicit(&pf.running, memory_order_acquire)) {
        if (pf.joinable)
            pthread_join(pf.thread, NULL);
        pf.joinable = false;
        pthread_attr_t attr;
        sigset_t all;
        sigfillset(&all);
        bool ok = task_to_spare() && pthread_attr_init(&attr) == 0;
        if (ok) {
            atomic_store_explicit(&pf.running, 1, memory_order_release);
            ok = pthread_attr_setstacksize(&attr, PF_STACK) == 0 &&
                 pthread_attr_setsigmask_np(&attr, &all) == 0 &&
                 pthread_create(&pf.thread, &attr, prefault_main, NULL) == 0;
            pthread_attr_destroy(&attr);
            pf.joinable = ok;
        }
        if (ok && !pf.said) {
            pf.said = true;
            SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_TRACE,
                    "a helper thread faults the trace's next pages in, ahead of the calls");
        }
        if (!ok) {
            /* No helper: the calls fault their pages themselves, as without one. */
            atomic_store_explicit(&pf.running, 0, memory_order_release);
            atomic_store_explicit(&pf.usable, false, memory_order_relaxed);
            atomic_store_explicit(&pf.kick_at, UINT64_MAX, memory_order_relaxed);
            SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_TRACE,
                    "no helper thread for the trace's pages; the calls fault them in themselves");
        }
    }
    pthread_mutex_unlock(&pf.mu);
}

/* Whether this trace uses the helper (decided when it is made): wanted, the kernel can fault
 * pages in for it (MADV_POPULATE_WRITE, Linux 5.14; tried on the header page, which is ours
 * already), and no RLIMIT_AS for its stack to count against. */
static bool prefault_usable(void)
{
    return shp_cfg.prefault && shp_cfg.growth != SHP_GROWTH_POPULATE &&
           limit_of(RLIMIT_AS) == UINT64_MAX &&
           madvise(shp_wh.seg[0], PAGE, MADV_POPULATE_WRITE) == 0;
}

/* pthread_join returns once the kernel has cleared the thread's id, which it does before the
 * thread leaves the thread group: for a while the kernel still counts it (/proc/self/stat, what
 * Python's os.fork reads; measured on 2 cores: 644 joins in 100,000, up to 5,637 yields long).
 * Wait until its /proc/self/task entry is gone, which the kernel removes in the same step as it
 * stops counting it; a stat, no descriptor; at most about 100 ms, then the fork goes ahead. */
static void settle(int tid)
{
    if (tid <= 0)
        return;
    char path[48];
    snprintf(path, sizeof path, "/proc/self/task/%d", tid);
    struct stat st;
    for (int i = 0; i < 10000 && stat(path, &st) == 0; i++) {
        if (i < 100) {
            sched_yield();
        } else {
            struct timespec ts = {0, 10000};
            nanosleep(&ts, NULL);
        }
    }
}

void shp_writer_atfork_prepare(void)
{
    int saved = errno;
    pthread_mutex_lock(&pf.mu);
    atomic_store_explicit(&pf.stop, 1, memory_order_release);
    if (pf.joinable)
        pthread_join(pf.thread, NULL);
    pf.joinable = false;
    /* Also after a join by prefault_kick whose next start failed. */
    settle(atomic_load_explicit(&pf.tid, memory_order_acquire));
    atomic_store_explicit(&pf.running, 0, memory_order_relaxed);
    atomic_store_explicit(&pf.stop, 0, memory_order_relaxed);
    errno = saved;
    /* Held until the fork is done: no call of another thread starts a helper meanwhile. */
}

void shp_writer_atfork_parent(void)
{
    pthread_mutex_unlock(&pf.mu);
}

static const char *limit_name(uint32_t why)
{
    return why == SHP_CAP_FSIZE ? "file-size limit (RLIMIT_FSIZE)"
                                : "address-space limit (RLIMIT_AS)";
}

/* The end offset of call records that keeps every record, bookkeeping included, below `len`. */
static uint64_t cap_for(uint64_t len)
{
    if (len < SHP_HEADER_SIZE)
        return SHP_HEADER_SIZE;
    return SHP_HEADER_SIZE + (((len - SHP_HEADER_SIZE) / 17 * 16) & ~7ull);
}

/* A resource limit leaves the file `len` bytes at most: lower the cap to fit (records beyond it
 * are then dropped and counted, as at the cap) and say so in the header. Under w.mu. */
static void lower_cap(uint64_t len, uint32_t why, uint64_t limit)
{
    uint64_t cap = cap_for(len);
    if (cap >= w.cap)
        return;
    w.cap = cap;
    struct shp_file_header *h = shp_wh.hdr;
    if (h) {
        __atomic_store_n(&h->cap_limit, limit, __ATOMIC_RELAXED);
        __atomic_store_n(&h->cap_why, why, __ATOMIC_RELAXED);
        __atomic_store_n(&h->cap, cap, __ATOMIC_RELEASE);
        SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_TRACE,
                "the %s of %llu KiB caps the trace at %llu KiB", limit_name(why),
                (unsigned long long)(limit >> 10), (unsigned long long)(cap >> 10));
    }
}

/* A record dropped at the cap: one warning for each thing that set it. */
static void cap_reached(struct shp_file_header *h)
{
    uint32_t why = __atomic_load_n(&h->cap_why, __ATOMIC_RELAXED);
    if (why == SHP_CAP_MAX_MB)
        SHP_WARN_ONCE(&shp_log, SHP_SUB_TRACE,
                      "trace cap of %llu MiB reached: later records are dropped and counted "
                      "(" SHP_ENV_MAX_MB " raises it)",
                      (unsigned long long)(shp_cfg.cap >> 20));
    else
        SHP_WARN_ONCE(&shp_log, SHP_SUB_TRACE,
                      "trace cap of %llu KiB reached, which the %s of %llu KiB set: later records "
                      "are dropped and counted",
                      (unsigned long long)(__atomic_load_n(&h->cap, __ATOMIC_RELAXED) >> 10),
                      limit_name(why),
                      (unsigned long long)(__atomic_load_n(&h->cap_limit, __ATOMIC_RELAXED) >> 10));
}

/* The trace, opened again by its name to grow it: the same file (device and inode), or -ESTALE;
 * -EMFILE when the application has no descriptor to spare (taking its last one, even for a
 * moment, could make one of its own opens fail). */
static int reopen(void)
{
    int fd = open(w.path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return errno == EMFILE || errno == ENFILE ? -EMFILE : -ESTALE;
    if (!shp_fd_is(fd, w.dev, w.ino)) {
        close(fd);
        return -ESTALE;
    }
    int spare = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (spare < 0) {
        close(fd);
        return -EMFILE;
    }
    close(spare);
    return fd;
}

/* The process's address space in use now (VmSize), in bytes; 0 if it cannot be read. */
static uint64_t vm_size(void)
{
    char buf[64];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return strtoull(buf, NULL, 10) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* The address space the segments may take: under RLIMIT_AS, an eighth of what the limit leaves
 * the process now, counting what they already hold (the application's own growth since shrinks
 * it); any amount without a limit. */
static uint64_t as_share(void)
{
    uint64_t as = limit_of(RLIMIT_AS);
    if (as == UINT64_MAX)
        return UINT64_MAX;
    uint64_t vm = vm_size();
    return vm && as > vm ? (as - vm + w.as_mapped) / 8 : 0;
}

/* Map the segments of [from, to) that are not mapped yet, within `share` (as_share(), taken
 * before the trace was opened: reading it opens /proc/self/statm, and the preload holds one
 * descriptor at a time; it does not move as segments are mapped, which add to both VmSize and
 * w.as_mapped). Under w.mu. Returns 0, or -ENOMEM with *mapped_to set to the end of what is
 * mapped (the share is spent, or the limit refused the mapping). */
static int map_segments(int fd, uint64_t from, uint64_t to, uint64_t share, uint64_t *mapped_to)
{
    for (unsigned i = (unsigned)(from >> shp_wh.shift); (uint64_t)i << shp_wh.shift < to; i++) {
        if (shp_wh.seg[i])
            continue;
        uint64_t len = seg_len(i);
        void *m = MAP_FAILED;
        if (w.as_mapped + len <= share)
            m = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                     (off_t)((uint64_t)i << shp_wh.shift));
        if (m == MAP_FAILED) {
            *mapped_to = (uint64_t)i << shp_wh.shift;
            return -ENOMEM;
        }
        w.as_mapped += len;
        __atomic_store_n(&shp_wh.seg[i], (unsigned char *)m, __ATOMIC_RELEASE);
    }
    return 0;
}

/* Make [0, need) exist and be mapped, a chunk ahead. Returns 0; -EFBIG when a limit of the
 * process leaves no room for it (the cap is lowered: the record is dropped, tracing goes on);
 * or the error that switches tracing off. */
static int grow(uint64_t need)
{
    int rc = 0;
    pthread_mutex_lock(&w.mu);
    uint64_t have = atomic_load_explicit(&w.ready, memory_order_relaxed);
    if (need <= have)
        goto out;
    uint64_t chunk = have < CHUNK_MIN ? CHUNK_MIN : have > CHUNK_MAX ? CHUNK_MAX : have;
    if (shp_cfg.growth == SHP_GROWTH_LARGE)
        chunk = CHUNK_MAX;
    uint64_t want = need + chunk < w.map_len ? need + chunk : w.map_len;
    /* As the limit is now: the application may have lowered it since the trace was made. */
    uint64_t fsize = limit_of(RLIMIT_FSIZE);
    if (want > (fsize & ~(PAGE - 1))) {
        want = fsize & ~(PAGE - 1);
        lower_cap(want, SHP_CAP_FSIZE, fsize);
        if (need > want) {
            rc = -EFBIG;
            goto out;
        }
    }
    uint64_t share = as_share();
    int fd = reopen();
    if (fd < 0) {
        rc = fd;
        goto out;
    }
    /* fallocate, not ftruncate: a full disk then fails here, with an error we can handle,
     * instead of as SIGBUS on the first store into a hole. */
    int e = shp_fallocate_quiet(fd, (off_t)have, (off_t)(want - have));
    uint64_t mapped_to = want;
    bool as_spent = e == 0 && map_segments(fd, have, want, share, &mapped_to) < 0;
    close(fd); /* before lower_cap, whose log line may open the debug file */
    if (e == EFBIG) {
        /* The limit was lowered between our look and the call. */
        lower_cap(have, SHP_CAP_FSIZE, limit_of(RLIMIT_FSIZE));
        rc = -EFBIG;
    } else if (e != 0) {
        rc = -e;
    } else if (as_spent) {
        lower_cap(mapped_to, SHP_CAP_AS, limit_of(RLIMIT_AS));
        want = mapped_to > have ? mapped_to : have;
        rc = need > want ? -EFBIG : 0;
    }
    if (want > have && e == 0) {
        /* `attach` may have grown the file too: the header keeps the larger. */
        struct shp_file_header *h = shp_wh.hdr;
        uint64_t a = __atomic_load_n(&h->allocated, __ATOMIC_RELAXED);
        while (a < want && !__atomic_compare_exchange_n(&h->allocated, &a, want, true,
                                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
        atomic_store_explicit(&w.ready, want, memory_order_release);
        set_grow_at();
        refresh_fast();
        if (shp_cfg.growth == SHP_GROWTH_POPULATE)
            populate(have, want);
        /* Once a chunk: a trace killed at any point converts with a pair this recent. */
        clock_pair_store(h);
    }
out:
    pthread_mutex_unlock(&w.mu);
    return rc;
}

/* Whether the run directory and its control file can be trusted with the run's wish: ours and
 * writable by no one else. Anyone else could otherwise switch tracing off, or plant a FIFO that
 * blocks the application in open(). */
static bool trusted(const struct stat *st, const char *what, const char *path)
{
    const char *why = shp_dir_untrusted(st);
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
    if (!trusted(&st, "the control file", path)) {
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

static void write_header(struct shp_file_header *h, uint32_t cap_why, uint64_t cap_limit)
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
    h->cap_why = cap_why;
    h->cap_limit = cap_limit;
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

/* How big the file may become and how it is mapped, within the process's limits: the cap is
 * lowered (why and the limit in *cap_why, *cap_limit) for a file-size limit it would pass, and
 * for an address-space limit, of whose headroom the segments take an eighth at most (`share`,
 * as_share()). Returns false when no trace fits. */
static bool plan(uint64_t share, uint32_t *cap_why, uint64_t *cap_limit)
{
    w.cap = SHP_HEADER_SIZE + shp_cfg.cap;
    w.map_len = w.cap + shp_cfg.cap / 16; /* the bookkeeping reserve: shp_rec_limit */
    *cap_why = SHP_CAP_MAX_MB;
    *cap_limit = 0;
    uint64_t fsize = limit_of(RLIMIT_FSIZE);
    if (w.map_len > (fsize & ~(PAGE - 1))) {
        w.cap = cap_for(fsize & ~(PAGE - 1));
        w.map_len = fsize & ~(PAGE - 1);
        *cap_why = SHP_CAP_FSIZE;
        *cap_limit = fsize;
    }
    shp_wh.shift = SEG_SHIFT_MAX;
    while ((w.map_len >> shp_wh.shift) >= SEG_MAX)
        shp_wh.shift++;
    uint64_t as = limit_of(RLIMIT_AS);
    if (as != UINT64_MAX) {
        /* Segments small enough that a few fit in the share, so that a small trace maps
         * little; then the cap that the share can map whole. */
        while (shp_wh.shift > SEG_SHIFT_MIN && ((1ull << shp_wh.shift) + OVERLAP) * 4 > share)
            shp_wh.shift--;
        uint64_t fit = share / ((1ull << shp_wh.shift) + OVERLAP) << shp_wh.shift;
        if (fit < w.map_len) {
            w.cap = cap_for(fit);
            w.map_len = fit;
            *cap_why = SHP_CAP_AS;
            *cap_limit = as;
        }
    }
    if (w.map_len > (uint64_t)SEG_MAX << shp_wh.shift) {
        w.map_len = (uint64_t)SEG_MAX << shp_wh.shift;
        w.cap = cap_for(w.map_len);
    }
    shp_wh.mask = (1ull << shp_wh.shift) - 1;
    if (w.cap - SHP_HEADER_SIZE < MIN_RECORDS) {
        snprintf(w.why, sizeof(w.why), "the %s of %llu KiB leaves no room for a trace",
                 limit_name(*cap_why), (unsigned long long)(*cap_limit >> 10));
        return false;
    }
    return true;
}

/* Create the trace; on failure, w.why says why and no file is left behind. */
static int open_file(void)
{
    const char *untrusted = NULL;
    int rc = shp_run_dir(shp_cfg.dir, &untrusted);
    if (rc < 0) {
        if (untrusted)
            snprintf(w.why, sizeof(w.why),
                     "the run directory %s is %s (it must be the user's own, mode 0700)",
                     shp_cfg.dir, untrusted);
        else
            snprintf(w.why, sizeof(w.why), "cannot create %s: %s", shp_cfg.dir, strerror(-rc));
        return rc;
    }
    uint32_t cap_why;
    uint64_t cap_limit;
    uint64_t share = as_share(); /* before the trace is opened: it reads /proc/self/statm */
    if (!plan(share, &cap_why, &cap_limit))
        return -EFBIG;
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) {
        if (i == 0)
            snprintf(w.path, sizeof(w.path), "%s/%s-%ld%s", shp_cfg.dir, shp_cfg.host,
                     (long)getpid(), SHP_TRACE_SUFFIX);
        else
            snprintf(w.path, sizeof(w.path), "%s/%s-%ld.%d%s", shp_cfg.dir, shp_cfg.host,
                     (long)getpid(), i, SHP_TRACE_SUFFIX);
        fd = open(w.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = -errno;
        snprintf(w.why, sizeof(w.why), "cannot create %s: %s", w.path, strerror(-rc));
        return rc;
    }
    const char *fail = NULL;
    struct stat st;
    int spare = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (spare < 0) {
        rc = -EMFILE;
        fail = "the application has no file descriptor to spare";
        goto fail;
    }
    close(spare);
    /* 0600 whatever the umask: under umask 0777 the file was made 0000, unreadable. */
    if (fchmod(fd, 0600) != 0 || fstat(fd, &st) != 0) {
        rc = -errno;
        fail = strerror(-rc);
        goto fail;
    }
    w.dev = st.st_dev;
    w.ino = st.st_ino;
    uint64_t first = shp_cfg.growth == SHP_GROWTH_FULL    ? w.map_len
                     : shp_cfg.growth == SHP_GROWTH_LARGE ? CHUNK_MAX
                                                          : CHUNK_MIN;
    if (first > w.map_len)
        first = w.map_len;
    int e = shp_fallocate_quiet(fd, 0, (off_t)first);
    uint64_t mapped_to;
    if (e != 0) {
        rc = -e;
        fail = strerror(e);
    } else if (map_segments(fd, 0, first, share, &mapped_to) < 0) {
        rc = -ENOMEM;
        fail = "no address space left to map it";
    }
    if (fail)
        goto fail;
    close(fd);
    shp_wh.hdr = (struct shp_file_header *)shp_wh.seg[0];
    shp_wh.hdr->allocated = first;
    w.npairs = 0;
    write_header(shp_wh.hdr, cap_why, cap_limit);
    atomic_store_explicit(&w.ready, first, memory_order_release);
    if (shp_cfg.growth == SHP_GROWTH_POPULATE)
        populate(SHP_HEADER_SIZE, first);
    bool helper = prefault_usable();
    atomic_store_explicit(&pf.usable, helper, memory_order_relaxed);
    atomic_store_explicit(&pf.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pf.kick_at, helper ? SHP_HEADER_SIZE + PF_START : UINT64_MAX,
                          memory_order_relaxed);
    set_grow_at();
    /* From now on the header's control words are the ones a tool can flip. */
    shp_ctl_use(shp_wh.hdr->ctl);
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_TRACE, "trace %s", w.path);
    if (cap_why != SHP_CAP_MAX_MB)
        SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_TRACE,
                "the %s of %llu KiB caps the trace at %llu KiB", limit_name(cap_why),
                (unsigned long long)(cap_limit >> 10), (unsigned long long)(w.cap >> 10));
    return 0;
fail:
    snprintf(w.why, sizeof(w.why), "cannot make the trace %s: %s", w.path, fail);
    for (unsigned i = 0; i < SEG_MAX; i++)
        if (shp_wh.seg[i]) {
            munmap(shp_wh.seg[i], (size_t)seg_len(i));
            shp_wh.seg[i] = NULL;
        }
    w.as_mapped = 0;
    close(fd);
    unlink(w.path); /* no empty, headerless trace left behind */
    return rc;
}

static void write_note(struct shp_file_header *h, const char *text);

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
        if (rc == 0) {
            refresh_fast();
            rc = 1;
        }
    } else if (st == W_FAILED) {
        rc = -EIO;
    }
    pthread_mutex_unlock(&w.mu);
    if (rc < 0 && st == W_CLOSED)
        shp_disable(w.why); /* the one line that says why */
    if (rc == 1 && w.pending[0])
        write_note(shp_wh.hdr, w.pending);
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
static const char *switched_off(struct shp_file_header *h, int rc)
{
    uint32_t reason = rc == -ENOSPC || rc == -EDQUOT ? SHP_OFF_NO_SPACE
                      : rc == -ESTALE                ? SHP_OFF_FILE_GONE
                      : rc == -EMFILE                ? SHP_OFF_NO_FD
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
#define SHP_REASON_PHRASE(name, num, key, phrase) [num] = phrase,
    static const char *const phrases[SHP_OFF_COUNT] = {SHP_OFF_REASONS(SHP_REASON_PHRASE)};
#undef SHP_REASON_PHRASE
    return phrases[reason];
}

/* A call record ended past where the helper needs the file grown (pf.grow_at: it faults in
 * only what exists, and a growth right where the calls write had them fault the new chunk's
 * first pages side by side with it: copies 94 against 48 ns a call) or must be asked again
 * (pf.kick_at). The growth is ahead of need: when it fails it is not tried ahead again, and the
 * record that needs the bytes meets the failure itself (a limit, a full disk, no descriptor, a
 * replaced file) and says what it is. */
static void ahead(uint64_t end)
{
    if (end > atomic_load_explicit(&pf.grow_at, memory_order_relaxed) && grow(end + PF_AHEAD) < 0)
        atomic_store_explicit(&pf.grow_at, UINT64_MAX, memory_order_relaxed);
    uint64_t k = atomic_load_explicit(&pf.kick_at, memory_order_relaxed);
    if (end > k) {
        prefault_kick();
        /* Asked: the next records need not ask again while it catches up. */
        uint64_t next = end + PF_STEP;
        while (k < next && !atomic_compare_exchange_weak_explicit(
                               &pf.kick_at, &k, next, memory_order_relaxed, memory_order_relaxed))
            ;
    }
}

void *shp_writer_reserve(unsigned type, size_t size, const char **why)
{
    if (__builtin_expect(atomic_load_explicit(&w.state, memory_order_acquire) != W_OPEN, 0))
        return NULL;
    struct shp_file_header *h = shp_wh.hdr;
    uint64_t off = shp_rec_reserve(h, shp_rec_limit(h, type), size);
    if (!off) {
        dropped(h, size);
        cap_reached(h);
        return NULL;
    }
    uint64_t end = off + size;
    /* Growing the file and starting the helper make system calls: errno is the caller's. */
    int saved = errno;
    if (end > atomic_load_explicit(&w.ready, memory_order_acquire)) {
        int rc = grow(end);
        if (rc < 0) {
            dropped(h, size);
            /* Give the space back unless another thread reserved after it: a reader would
             * otherwise find a record never written, past the end of the file. */
            uint64_t reserved_end = end;
            __atomic_compare_exchange_n(&h->tail, &reserved_end, off, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
            if (rc == -EFBIG) /* a limit of the process: a cap, tracing goes on */
                cap_reached(h);
            else
                *why = switched_off(h, rc);
            errno = saved;
            return NULL;
        }
    }
    if (shp_rec_role(type) & SHP_ROLE_COMPACT)
        ahead(end);
    refresh_fast();
    errno = saved;
    unsigned char *base = __atomic_load_n(&shp_wh.seg[off >> shp_wh.shift], __ATOMIC_RELAXED);
    void *r = base + (off & shp_wh.mask);
    /* The reserved size first, so a reader can step over this record if we die filling it. */
    shp_rec_mark_reserved(r, size);
    return r;
}

/* A warning that could not go to the application's standard error, as a mark record of the
 * trace (dump shows it). Only into space that exists: the warning may come from inside grow. */
static void write_note(struct shp_file_header *h, const char *text)
{
    size_t size = sizeof(struct shp_rec_mark);
    uint64_t off = shp_rec_reserve(h, shp_rec_limit(h, SHP_REC_MARK), size);
    if (!off)
        return;
    if (off + size > atomic_load_explicit(&w.ready, memory_order_acquire)) {
        dropped(h, size);
        uint64_t reserved_end = off + size;
        __atomic_compare_exchange_n(&h->tail, &reserved_end, off, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
        return;
    }
    struct shp_rec_mark *m =
        (struct shp_rec_mark *)(__atomic_load_n(&shp_wh.seg[off >> shp_wh.shift],
                                                __ATOMIC_RELAXED) +
                                (off & shp_wh.mask));
    shp_rec_mark_reserved(m, size);
    memset((char *)m + sizeof(m->h), 0, sizeof(*m) - sizeof(m->h));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    m->t_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    snprintf(m->text, sizeof(m->text), "shapetrace %s", text);
    shp_rec_publish(m, SHP_REC_MARK, sizeof(*m));
}

void shp_writer_note(const char *text)
{
    static SHP_TLS int inside;
    if (inside)
        return;
    inside = 1;
    struct shp_file_header *h = shp_writer_header();
    if (h)
        write_note(h, text);
    else if (!atomic_exchange(&w.pending_taken, 1))
        snprintf(w.pending, sizeof(w.pending), "%s", text);
    inside = 0;
}

uint64_t shp_writer_offset(const void *rec)
{
    const unsigned char *p = rec;
    for (unsigned i = 0; i < SEG_MAX; i++) {
        const unsigned char *s = __atomic_load_n(&shp_wh.seg[i], __ATOMIC_ACQUIRE);
        if (s && p >= s && p < s + seg_len(i))
            return ((uint64_t)i << shp_wh.shift) + (uint64_t)(p - s);
    }
    return 0;
}

int shp_writer_comm_index(const void *rec)
{
    struct shp_file_header *h = shp_writer_header();
    if (!h)
        return -1;
    uint64_t off = shp_writer_offset(rec);
    if (off < SHP_HEADER_SIZE)
        return -1;
    uint32_t i = __atomic_fetch_add(&h->ncomms, 1, __ATOMIC_RELAXED);
    if (i >= SHP_COMM_INDEX_MAX)
        return -1;
    __atomic_store_n(&h->comm_off[i], off, __ATOMIC_RELEASE);
    return (int)i;
}

const void *shp_writer_comm_record(unsigned idx)
{
    struct shp_file_header *h = shp_writer_header();
    if (!h || idx >= SHP_COMM_INDEX_MAX)
        return NULL;
    uint64_t off = __atomic_load_n(&h->comm_off[idx], __ATOMIC_ACQUIRE);
    unsigned i = off >> shp_wh.shift;
    const unsigned char *s = off >= SHP_HEADER_SIZE && i < SEG_MAX
                                 ? __atomic_load_n(&shp_wh.seg[i], __ATOMIC_ACQUIRE)
                                 : NULL;
    return s ? s + (off & shp_wh.mask) : NULL;
}

void shp_writer_close(void)
{
    /* The helper is told to stop, never waited for: exit_group ends it. */
    atomic_store_explicit(&pf.usable, false, memory_order_relaxed);
    atomic_store_explicit(&pf.stop, 1, memory_order_release);
    /* The mapping stays: destructors that run after ours (NCCL's, torch's) may still be traced,
     * and their records land after the flag, which readers accept. */
    if (atomic_load_explicit(&w.state, memory_order_acquire) == W_OPEN) {
        pthread_mutex_lock(&w.mu);
        clock_pair_store(shp_wh.hdr);
        pthread_mutex_unlock(&w.mu);
        __atomic_or_fetch(&shp_wh.hdr->flags, SHP_FILE_COMPLETE, __ATOMIC_RELEASE);
    }
}

void shp_writer_atfork_child(void)
{
    /* Our records stop at once: the file below is the parent's. */
    atomic_store(&shp_wh.fast_end, 0);
    /* The parent's helper was joined before the fork (shp_writer_atfork_prepare). */
    pthread_mutex_init(&pf.mu, NULL);
    pf.joinable = false;
    pf.said = false;
    atomic_store(&pf.running, 0);
    atomic_store(&pf.stop, 0);
    atomic_store(&pf.tid, 0);
    atomic_store(&pf.usable, false);
    /* The parent's file is the parent's: the child unmaps it and opens its own at its first
     * record. */
    for (unsigned i = 0; i < SEG_MAX; i++)
        if (shp_wh.seg[i]) {
            munmap(shp_wh.seg[i], (size_t)seg_len(i));
            shp_wh.seg[i] = NULL;
        }
    w.as_mapped = 0;
    shp_wh.hdr = NULL;
    w.pending[0] = 0;
    atomic_store(&w.pending_taken, 0);
    atomic_store(&w.ready, 0);
    shp_wh.gen++;
    pthread_mutex_init(&w.mu, NULL);
    atomic_store(&w.state, W_CLOSED);
}
