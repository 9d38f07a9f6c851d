/* shapetrace preload, bottom layer: configuration from the environment, logging, the tracing
 * state and switching it off, the control words, the clock. Calls nothing else of the preload.
 * Everything here may run inside another library's constructor, before our own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "include/shapetrace/env.h"
#include "preload/preload.h"

struct shp_config shp_cfg;
struct shp_log shp_log = {
    .level = SHP_LOG_WARN, .subsys = SHP_SUB_ALL, .fd = 2, .prefix = "shapetrace"};
_Atomic int shp_state = SHP_STATE_UNINIT;
static uint64_t ctl_local[8] = {[SHP_CTL_ARMED] = 1};
volatile uint64_t *shp_ctl = ctl_local;
SHP_TLS int shp_guard;
SHP_TLS uint32_t shp_tls_tid;

unsigned shp_clock_kind = SHP_CLOCK_MONOTONIC;

uint64_t shp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void shp_clock_pair_now(uint64_t *tsc, uint64_t *ns)
{
#if defined(__x86_64__)
    /* The reading nearest the middle of the shortest of a few tries: a preemption between the
     * two reads would otherwise skew the conversion of a whole trace. */
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 4; i++) {
        uint64_t a = __builtin_ia32_rdtsc();
        uint64_t n = shp_now_ns();
        uint64_t b = __builtin_ia32_rdtsc();
        if (b - a < best) {
            best = b - a;
            *tsc = a + (b - a) / 2;
            *ns = n;
        }
    }
#else
    *tsc = 0;
    *ns = shp_now_ns();
#endif
}

/* Whether the TSC can stand in for CLOCK_MONOTONIC: invariant (CPUID 0x80000007 EDX bit 8, so it
 * ticks at one rate in every power state, on every core) and what the kernel itself keeps time
 * with (it checked the cores agree; on a VM whose TSC it distrusts it picks another source). */
static bool tsc_usable(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
    if (a < 0x80000007u)
        return false;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u), "c"(0));
    if (!(d & (1u << 8)))
        return false;
    char buf[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
    if (!f)
        return false;
    bool ok = fgets(buf, sizeof(buf), f) && !strncmp(buf, "tsc", 3) && (buf[3] == '\n' || !buf[3]);
    fclose(f);
    return ok;
#else
    return false;
#endif
}

static void clock_choose(void)
{
    const char *v = getenv(SHP_ENV_CLOCK);
    bool want_tsc = true;
    if (v && !strcmp(v, "monotonic"))
        want_tsc = false;
    else if (v && *v && strcmp(v, "tsc"))
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                SHP_ENV_CLOCK "=%s is not one of tsc, monotonic; using tsc where usable", v);
    shp_clock_kind = want_tsc && tsc_usable() ? SHP_CLOCK_TSC : SHP_CLOCK_MONOTONIC;
}

uint32_t shp_tid_slow(void)
{
    shp_tls_tid = (uint32_t)syscall(SYS_gettid);
    return shp_tls_tid;
}

static int env_int(const char *name, int dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 || v > INT32_MAX ? dflt : (int)v;
}

static int env_rank(void)
{
    static const char *const names[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int r = env_int(names[i], -1);
        if (r >= 0)
            return r;
    }
    return -1;
}

/* Expand %h (host), %p (pid), %r (rank, or "x" when unknown), %% into out. Returns 0, or
 * -ENAMETOOLONG when the result does not fit (out then holds what did). */
static int expand_pattern(const char *pat, char *out, size_t outlen)
{
    size_t n = 0;
    const char *p = pat;
    for (; *p && n + 1 < outlen; p++) {
        char buf[32];
        const char *ins = NULL;
        if (*p == '%' && p[1]) {
            p++;
            if (*p == 'h')
                ins = shp_cfg.host;
            else if (*p == 'p')
                snprintf(buf, sizeof(buf), "%ld", (long)getpid()), ins = buf;
            else if (*p == 'r')
                ins = shp_cfg.env_rank >= 0
                          ? (snprintf(buf, sizeof(buf), "%d", shp_cfg.env_rank), buf)
                          : "x";
            else if (*p == '%')
                ins = "%";
            else {
                buf[0] = '%', buf[1] = *p, buf[2] = 0;
                ins = buf;
            }
            size_t m = strlen(ins);
            if (n + m >= outlen) {
                out[n] = 0;
                return -ENAMETOOLONG;
            }
            memcpy(out + n, ins, m);
            n += m;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = 0;
    return *p ? -ENAMETOOLONG : 0;
}

void shp_log_prefix_update(int comm_rank)
{
    int rank = shp_cfg.env_rank >= 0 ? shp_cfg.env_rank : comm_rank;
    char r[16];
    if (rank >= 0)
        snprintf(r, sizeof(r), "r%d ", rank);
    else
        r[0] = 0;
    snprintf(shp_log.prefix, sizeof(shp_log.prefix), "shapetrace[%s%s:%ld]", r, shp_cfg.host,
             (long)getpid());
}

/* Tracing is refused for good, with one warning: a path from the environment that cannot be
 * used as it is (a FIFO would hang the application in open; a name cut at PATH_MAX would make
 * directories nobody asked for). */
__attribute__((format(printf, 1, 2))) static void refuse(const char *fmt, ...)
{
    if (shp_cfg.refused)
        return;
    shp_cfg.refused = true;
    char text[PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT, "%s; not tracing", text);
}

/* Standard error as it is now, before the application could put a file of its own on
 * descriptor 2: warnings go there only while it is still that file, and into the trace
 * otherwise (see shp_log). No descriptor 2: into the trace only. */
static void check_stderr(void)
{
    struct stat st;
    shp_log.quiet = true;
    if (fstat(2, &st) != 0) {
        shp_log.fd = -1;
        return;
    }
    shp_log.fd = 2;
    shp_log.checked = true;
    shp_log.dev = st.st_dev;
    shp_log.ino = st.st_ino;
}

/* SHAPETRACE_DEBUG_FILE: opened for each line and closed again (the preload keeps no descriptor
 * of its own open), a regular file or none yet. */
static void log_file(void)
{
    const char *f = getenv(SHP_ENV_DEBUG_FILE);
    if (!f || !*f)
        return;
    struct stat st;
    if (expand_pattern(f, shp_cfg.log_path, sizeof(shp_cfg.log_path)) < 0)
        refuse(SHP_ENV_DEBUG_FILE " is longer than PATH_MAX");
    else if (lstat(shp_cfg.log_path, &st) == 0 && !S_ISREG(st.st_mode))
        refuse(SHP_ENV_DEBUG_FILE "=%s is not a regular file", shp_cfg.log_path);
    else
        shp_log.path = shp_cfg.log_path;
}

/* SHAPETRACE_DIR, expanded and made absolute (the trace is reopened by name to grow it, after
 * the application may have changed its directory), with room left for a trace's name. */
static void run_dir(void)
{
    const char *dir = getenv(SHP_ENV_DIR);
    char rel[PATH_MAX];
    /* host, '-', pid, '.', a number, the suffix and the segment bytes beyond. */
    const size_t room = sizeof(shp_cfg.host) + 48;
    if (expand_pattern(dir && *dir ? dir : SHP_DEFAULT_DIR, rel, sizeof(rel) - room) < 0) {
        refuse(SHP_ENV_DIR " is %zu bytes: with a trace's name it passes PATH_MAX (%d)",
               strlen(dir ? dir : ""), PATH_MAX);
        return;
    }
    if (rel[0] == '/') {
        snprintf(shp_cfg.dir, sizeof(shp_cfg.dir), "%s", rel);
        return;
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd))) {
        refuse(SHP_ENV_DIR "=%s is relative to a directory that cannot be named (%s)", rel,
               strerror(errno));
        return;
    }
    int n = snprintf(shp_cfg.dir, sizeof(shp_cfg.dir), "%s/%s", cwd, rel);
    if (n < 0 || (size_t)n >= sizeof(shp_cfg.dir) - room)
        refuse(SHP_ENV_DIR "=%s, after the current directory, passes PATH_MAX (%d)", rel, PATH_MAX);
}

/* SHAPETRACE_LIBUNWIND: a regular file, checked before anything opens it (a FIFO there held
 * the application in dlopen for ever). */
static void libunwind_path(void)
{
    const char *uw = getenv(SHP_ENV_LIBUNWIND);
    if (!uw || !*uw)
        return;
    struct stat st;
    if (strlen(uw) >= sizeof(shp_cfg.libunwind))
        refuse(SHP_ENV_LIBUNWIND " is %zu bytes, longer than PATH_MAX", strlen(uw));
    else if (stat(uw, &st) != 0)
        refuse(SHP_ENV_LIBUNWIND "=%s: %s", uw, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        refuse(SHP_ENV_LIBUNWIND "=%s is not a regular file", uw);
    else
        snprintf(shp_cfg.libunwind, sizeof(shp_cfg.libunwind), "%s", uw);
}

static void self_dir(void)
{
    Dl_info info;
    if (dladdr((void *)self_dir, &info) && info.dli_fname) {
        snprintf(shp_cfg.self_dir, sizeof(shp_cfg.self_dir), "%s", info.dli_fname);
        char *slash = strrchr(shp_cfg.self_dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(shp_cfg.self_dir, sizeof(shp_cfg.self_dir), ".");
    }
}

void shp_config_load(void)
{
    static const char *const stacks_names[] = {
        [SHP_STACKS_NONE] = "none", [SHP_STACKS_NATIVE] = "native", [SHP_STACKS_PYTHON] = "python"};
    if (gethostname(shp_cfg.host, sizeof(shp_cfg.host)) != 0)
        snprintf(shp_cfg.host, sizeof(shp_cfg.host), "localhost");
    shp_cfg.host[sizeof(shp_cfg.host) - 1] = 0;
    shp_cfg.env_rank = env_rank();
    shp_cfg.local_rank = env_int("LOCAL_RANK", -1);
    shp_cfg.world_size = env_int("WORLD_SIZE", -1);

    check_stderr();
    shp_log.level = shp_log_parse_level(getenv(SHP_ENV_DEBUG), SHP_LOG_WARN);
    shp_log.subsys = shp_log_parse_subsys(getenv(SHP_ENV_DEBUG_SUBSYS));
    shp_log_prefix_update(-1);
    log_file();
    run_dir();

    /* python by default: where no thread runs Python it records exactly what native does, and
     * in a Python program it is the line that made the call that a person looks for; it adds
     * about 0.4 us a call for 20 Python frames (bench/RESULTS.md). */
    const char *stacks = getenv(SHP_ENV_STACKS);
    shp_cfg.stacks = SHP_STACKS_PYTHON;
    if (stacks && !strcmp(stacks, "none"))
        shp_cfg.stacks = SHP_STACKS_NONE;
    else if (stacks && !strcmp(stacks, "native"))
        shp_cfg.stacks = SHP_STACKS_NATIVE;
    else if (stacks && *stacks && strcmp(stacks, "python"))
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                SHP_ENV_STACKS "=%s is not one of none, native, python; using python", stacks);

    const char *dbg = getenv(SHP_ENV_DEBUG);
    if (dbg && *dbg && shp_log_parse_level(dbg, -1) < 0)
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                SHP_ENV_DEBUG "=%s is not one of NONE, WARN, INFO, TRACE; using WARN", dbg);
    const char *mb = getenv(SHP_ENV_MAX_MB);
    int max_mb = env_int(SHP_ENV_MAX_MB, -1);
    if (mb && *mb && (max_mb < 1 || max_mb > 1 << 20)) {
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                SHP_ENV_MAX_MB "=%s is not a number of MiB from 1 to 1048576; using %d", mb,
                SHP_DEFAULT_MAX_MB);
        max_mb = SHP_DEFAULT_MAX_MB;
    } else if (max_mb < 0) {
        max_mb = SHP_DEFAULT_MAX_MB;
    }
    shp_cfg.cap = (uint64_t)max_mb << 20;
    if (shp_cfg.cap < ((uint64_t)SHP_MIN_MAX_MB << 20))
        shp_cfg.cap = (uint64_t)SHP_MIN_MAX_MB << 20;
    const char *dormant = getenv(SHP_ENV_DORMANT);
    shp_cfg.dormant = dormant && *dormant && strcmp(dormant, "0");
    if (shp_cfg.dormant)
        ctl_local[SHP_CTL_ARMED] = 0;
    clock_choose();
    const char *gr = getenv(SHP_ENV_FILE_GROWTH);
    shp_cfg.growth = SHP_GROWTH_CHUNK;
    if (gr && !strcmp(gr, "populate"))
        shp_cfg.growth = SHP_GROWTH_POPULATE;
    else if (gr && !strcmp(gr, "full"))
        shp_cfg.growth = SHP_GROWTH_FULL;
    else if (gr && !strcmp(gr, "large"))
        shp_cfg.growth = SHP_GROWTH_LARGE;
    else if (gr && *gr && strcmp(gr, "chunk"))
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT,
                SHP_ENV_FILE_GROWTH "=%s is not one of chunk, populate, full, large; using chunk",
                gr);
    /* A helper thread faults the trace's next pages in (writer.c); 0 leaves it to the calls. */
    const char *pf = getenv(SHP_ENV_PREFAULT);
    shp_cfg.prefault = !pf || !*pf || strcmp(pf, "0");
    if (pf && *pf && strcmp(pf, "0") && strcmp(pf, "1"))
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_INIT, SHP_ENV_PREFAULT "=%s is not 0 or 1; using 1",
                pf);
    libunwind_path();
    self_dir();

    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_INIT,
            "tracing into %s, stacks %s, cap %llu MiB, clock %s%s", shp_cfg.dir,
            stacks_names[shp_cfg.stacks], (unsigned long long)(shp_cfg.cap >> 20),
            shp_clock_kind == SHP_CLOCK_TSC ? "tsc" : "monotonic",
            shp_cfg.dormant ? ", dormant" : "");
}

bool shp_ctl_is_local(void)
{
    return __atomic_load_n(&shp_ctl, __ATOMIC_ACQUIRE) == ctl_local;
}

void shp_ctl_use(volatile uint64_t *ctl)
{
    __atomic_store_n(&shp_ctl, ctl ? ctl : ctl_local, __ATOMIC_RELEASE);
}

void shp_config_atfork_child(void)
{
    shp_tls_tid = 0;
    /* The parent's header is not the child's: back to a local copy of its control words. */
    ctl_local[SHP_CTL_ARMED] = __atomic_load_n(&shp_ctl, __ATOMIC_RELAXED)[SHP_CTL_ARMED];
    shp_ctl_use(NULL);
}

void shp_disable(const char *why)
{
    int prev = atomic_exchange(&shp_state, SHP_STATE_OFF);
    if (prev != SHP_STATE_OFF)
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_TRACE,
                "tracing switched off: %s; the application carries on untraced", why);
}
