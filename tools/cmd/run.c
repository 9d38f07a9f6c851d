/* shapetrace run: run a command with the preload in every process it starts. Our own words go
 * to stderr only; the command's stdin, stdout and exit status pass through untouched. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "include/shapetrace/env.h"
#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"
#include "tools/lib/out.h"
#include "tools/lib/reader.h"

#ifndef SHP_PREFIX
#define SHP_PREFIX "/usr/local"
#endif

/* The frame names, resolved here while the modules are at hand (tools/cmd/symbols.c). */
static void report_symbols(const char *dir)
{
    struct shp_symbols_stats s;
    int rc = shp_symbols_write(dir, &s);
    if (rc == -ESRCH)
        return; /* the traces came from other hosts only: theirs to resolve */
    if (rc)
        shp_err("cannot store the native frame names in %s: %s", dir, strerror(-rc));
    else if (s.frames)
        fprintf(stderr, "shapetrace: %" PRIu64 " native frames symbolized in %.2f s, into %s\n",
                s.frames, s.seconds, s.path);
}

/* The files that are traces. A process killed between creating its file and writing the header
 * leaves an empty or headerless file: named, one line each, and not counted. */
static size_t count_traces(char **files, size_t n)
{
    size_t ntraces = 0;
    for (size_t i = 0; i < n; i++) {
        struct shp_trace t;
        char err[256];
        if (shp_trace_open(&t, files[i], err, sizeof(err)) == 0) {
            shp_trace_close(&t);
            ntraces++;
        } else {
            shp_err("%s: not counted as a trace: %s", files[i], err);
        }
    }
    return ntraces;
}

/* run's options (tools/cmd/options.h). */
/* clang-format off */
#define RUN_OPTIONS(X) \
X(OPT_DIR, "dir", 0, "DIR", "run directory (default ./shapetrace-YYYYMMDD-HHMMSS)") \
X(OPT_STACKS, "stacks", 0, "MODE", \
  "call sites to record (" SHP_ENV_STACKS "; default " SHP_DEFAULT_STACKS "):\n" \
  "  none    no call sites\n" \
  "  native  native return addresses, symbolized by dump\n" \
  "  python  native, plus the Python frames (function, file,\n" \
  "          line) of a thread that runs Python (CPython 3.10\n" \
  "          to 3.13), in place of the interpreter's own frames;\n" \
  "          the same as native where no Python runs") \
X(OPT_MAX_MB, "max-mb", 0, "N", "trace cap per process in MiB (default 1024)") \
X(OPT_DEBUG, "debug", 0, "LEVEL", "NONE, WARN, INFO or TRACE (" SHP_ENV_DEBUG ")") \
X(OPT_DORMANT, "dormant", 0, NULL, \
  "start with recording off (shapetrace attach turns it on);\n" \
  "communicator and allocation records are still kept") \
X(OPT_VALUES, "values", 0, "[WHAT]", \
  "fingerprint values that must agree across ranks (" SHP_ENV_VALUES "):\n" \
  "  collectives  the output of every all-reduce, all-gather\n" \
  "               and broadcast\n" \
  "  copies       the bytes of every copy whose call site\n" \
  "               matches --values-site\n" \
  "  all          both (the default)\n" \
  "analyze then reports value_mismatch where ranks differ") \
X(OPT_VALUES_EVERY, "values-every", 0, "N", \
  "only every Nth collective of a communicator and copy of a\n" \
  "site (" SHP_ENV_VALUES_EVERY "; default 1)") \
X(OPT_VALUES_SITE, "values-site", 0, "GLOB", \
  "the copies to fingerprint: a glob on any frame's function,\n" \
  "Python or native (" SHP_ENV_VALUES_SITE "; default '*')") \
X(OPT_PRELOAD, "preload", 0, "PATH", "the preload to use (default: next to this command)")
/* clang-format on */
SHP_OPTS_ROWS(run_rows, RUN_OPTIONS);
static const struct shp_opts run_opts = {
    .cmd = "run",
    .synopsis =
        "usage: shapetrace run [OPTIONS] -- CMD ARGS...\n"
        "\n"
        "Runs CMD with libshapetrace.so preloaded; every process that calls NCCL or the CUDA\n"
        "runtime writes one trace into the run directory, printed at the end (stderr).\n"
        "Returns CMD's exit status.\n"
        "\n",
    .v = run_rows,
    .n = SHP_OPTS_N(run_rows),
    .in_order = true,
};

static int find_preload(char *out, size_t len)
{
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(out, len, "%s/../lib/libshapetrace.so", exe);
            if (access(out, R_OK) == 0)
                return 0;
        }
    }
    snprintf(out, len, "%s/lib/libshapetrace.so", SHP_PREFIX);
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
}

static int default_dir(char *out, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
    for (int i = 0; i < 100; i++) {
        if (i == 0)
            snprintf(out, len, "shapetrace-%s", stamp);
        else
            snprintf(out, len, "shapetrace-%s.%d", stamp, i);
        int rc = shp_make_dir(out); /* mode 0700, whatever the umask */
        if (rc != -EEXIST)
            return rc;
    }
    return -EEXIST;
}

/* Sanitizer runtimes must come first in LD_PRELOAD; ours goes right after them. */
static char *make_ld_preload(const char *preload)
{
    const char *old = getenv("LD_PRELOAD");
    size_t len = strlen(preload) + (old ? strlen(old) : 0) + 2;
    char *s = malloc(len);
    if (!s)
        return NULL;
    if (!old || !*old) {
        snprintf(s, len, "%s", preload);
        return s;
    }
    bool san = strstr(old, "libasan") || strstr(old, "libtsan") || strstr(old, "libubsan") ||
               strstr(old, "clang_rt.asan");
    if (!san) {
        snprintf(s, len, "%s:%s", preload, old);
        return s;
    }
    /* Keep the first entry (the runtime) in front. */
    size_t first = strcspn(old, ": ");
    snprintf(s, len, "%.*s:%s%s%s", (int)first, old, preload, old[first] ? ":" : "",
             old[first] ? old + first + 1 : "");
    return s;
}

/* True when s is a decimal number from lo to hi. */
static bool in_range(const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v >= lo && v <= hi;
}

/* What the command line asks for: each value as given (the preload reads them from its
 * environment), checked. */
struct run_args {
    const char *dir, *stacks, *max_mb, *debug, *preload;
    const char *values, *values_every, *values_site;
    bool dormant;
    char **cmd; /* CMD ARGS..., argv's own */
};

/* The value of --values: "--values all" as well as "--values=all": the next word is taken when
 * it is one of the three (a command named "all" needs "--" before it anyway). */
static int take_values(struct run_args *a, const char *w, int argc, char **argv)
{
    static const char *const what[] = {"collectives", "copies", "all", NULL};
    for (int k = 0; !w && optind < argc && what[k]; k++)
        if (!strcmp(argv[optind], what[k]))
            w = argv[optind++]; /* the last argument, maybe: look no further */
    a->values = w ? w : "all";
    for (int k = 0; what[k]; k++)
        if (!strcmp(a->values, what[k]))
            return 0;
    shp_err("--values takes collectives, copies or all, not '%s'", a->values);
    return SHP_EXIT_USAGE;
}

/* One option of the command line into a, checked. Returns 0, or SHP_EXIT_USAGE after one line. */
static int take(struct run_args *a, int id, const char *v, int argc, char **argv)
{
    switch (id) {
    case OPT_DIR:
        a->dir = v;
        return 0;
    case OPT_STACKS:
        if (strcmp(v, "none") && strcmp(v, "native") && strcmp(v, "python")) {
            shp_err("--stacks takes none, native or python, not '%s'", v);
            return SHP_EXIT_USAGE;
        }
        a->stacks = v;
        return 0;
    case OPT_MAX_MB:
        if (!in_range(v, 1, 1 << 20)) {
            shp_err("--max-mb takes a number of MiB from 1 to 1048576, not '%s'", v);
            return SHP_EXIT_USAGE;
        }
        a->max_mb = v;
        return 0;
    case OPT_DEBUG:
        if (shp_log_parse_level(v, -1) < 0) {
            shp_err("--debug takes NONE, WARN, INFO or TRACE, not '%s'", v);
            return SHP_EXIT_USAGE;
        }
        a->debug = v;
        return 0;
    case OPT_DORMANT:
        a->dormant = true;
        return 0;
    case OPT_VALUES:
        return take_values(a, v, argc, argv);
    case OPT_VALUES_EVERY:
        if (!in_range(v, 1, SHP_MAX_VALUES_EVERY)) {
            shp_err("--values-every takes a number from 1 to %d, not '%s'", SHP_MAX_VALUES_EVERY,
                    v);
            return SHP_EXIT_USAGE;
        }
        a->values_every = v;
        return 0;
    case OPT_VALUES_SITE:
        if (!*v || strlen(v) >= SHP_VALUES_SITE_MAX) {
            shp_err("--values-site takes a glob of 1 to %d bytes", SHP_VALUES_SITE_MAX - 1);
            return SHP_EXIT_USAGE;
        }
        a->values_site = v;
        return 0;
    case OPT_PRELOAD:
        a->preload = v;
        return 0;
    }
    return SHP_EXIT_USAGE;
}

static int parse(struct run_args *a, int argc, char **argv)
{
    struct shp_optparse p;
    int c, rc;
    memset(a, 0, sizeof(*a));
    shp_opts_begin(&p, &run_opts);
    while ((c = shp_opts_next(&p, argc, argv)) >= 0)
        if ((rc = take(a, c, p.arg, argc, argv)) != 0)
            return rc;
    if (c == SHP_OPT_STOP)
        return p.status;
    if (optind >= argc)
        return shp_usage_error("run", "no command given (shapetrace run -- CMD ARGS...)");
    a->cmd = argv + optind;
    return SHP_PARSED;
}

/* The preload's absolute path into real (PATH_MAX). Returns 0, or -1 after one line. */
static int locate_preload(const struct run_args *a, char *real)
{
    char preload[PATH_MAX];
    if (a->preload)
        snprintf(preload, sizeof(preload), "%s", a->preload);
    else if (find_preload(preload, sizeof(preload)) < 0) {
        shp_err("cannot find libshapetrace.so next to this command or in %s/lib", SHP_PREFIX);
        return -1;
    }
    if (!realpath(preload, real)) {
        shp_err("%s: %s", preload, strerror(errno));
        return -1;
    }
    return 0;
}

/* The run directory, made if need be, as an absolute path into absdir (PATH_MAX). Returns 0, or
 * -1 after one line. */
static int make_run_dir(const struct run_args *a, char *absdir)
{
    char dirbuf[PATH_MAX];
    if (a->dir) {
        /* Missing parents are made, as the preload makes them; a FILE, or a directory that
         * others could fill, is refused before the command runs, never run untraced. */
        const char *why = NULL;
        int rc = shp_run_dir(a->dir, &why);
        if (rc < 0 && why) {
            shp_err("%s is %s: a run directory must be the user's own and writable by no one "
                    "else (a new one is made 0700)",
                    a->dir, why);
            return -1;
        }
        if (rc < 0) {
            shp_err("cannot create %s: %s", a->dir, strerror(-rc));
            return -1;
        }
        snprintf(dirbuf, sizeof(dirbuf), "%s", a->dir);
    } else {
        int rc = default_dir(dirbuf, sizeof(dirbuf));
        if (rc < 0) {
            shp_err("cannot create a run directory here: %s", strerror(-rc));
            return -1;
        }
    }
    if (!realpath(dirbuf, absdir)) {
        shp_err("%s: %s", dirbuf, strerror(errno));
        return -1;
    }
    return 0;
}

static void set_if_given(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
}

/* The environment the command inherits: the preload and what the options say. Returns 0, or -1
 * after one line. */
static int set_environment(const struct run_args *a, const char *preload, const char *absdir)
{
    char *ldp = make_ld_preload(preload);
    if (!ldp) {
        shp_err("out of memory");
        return -1;
    }
    setenv("LD_PRELOAD", ldp, 1);
    free(ldp);
    setenv(SHP_ENV_DIR, absdir, 1);
    set_if_given(SHP_ENV_STACKS, a->stacks);
    set_if_given(SHP_ENV_MAX_MB, a->max_mb);
    set_if_given(SHP_ENV_DEBUG, a->debug);
    if (a->dormant)
        setenv(SHP_ENV_DORMANT, "1", 1);
    else
        unsetenv(SHP_ENV_DORMANT);
    set_if_given(SHP_ENV_VALUES, a->values);
    set_if_given(SHP_ENV_VALUES_EVERY, a->values_every);
    set_if_given(SHP_ENV_VALUES_SITE, a->values_site);
    return 0;
}

static volatile pid_t child_pid;

static void forward(int sig)
{
    if (child_pid > 0)
        kill(child_pid, sig);
}

/* Runs cmd to its end, its wait status into *status. Returns 0, or -1 after one line (no fork). */
static int run_command(char **cmd, int *status)
{
    /* The terminal sends SIGINT and SIGQUIT to the whole group, the command included; we wait
     * for it to finish so the run directory is printed. Others are passed on. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, fwd = {.sa_handler = forward};
    struct sigaction old_int, old_quit;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    sigaction(SIGTERM, &fwd, NULL);
    sigaction(SIGHUP, &fwd, NULL);
    sigaction(SIGUSR1, &fwd, NULL);
    sigaction(SIGUSR2, &fwd, NULL);

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        shp_err("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGUSR1, SIG_DFL);
        signal(SIGUSR2, SIG_DFL);
        execvp(cmd[0], cmd);
        int e = errno;
        shp_err("cannot run %s: %s", cmd[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    child_pid = pid;
    *status = 0;
    while (waitpid(pid, status, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

/* The run directory's traces, counted and named on stderr, and their frame names stored. */
static void report_run(const char *absdir)
{
    char **files = NULL;
    size_t nfiles = 0;
    shp_trace_collect(absdir, &files, &nfiles);
    size_t ntraces = count_traces(files, nfiles);
    fprintf(stderr, "shapetrace: %zu trace%s in %s\n", ntraces, ntraces == 1 ? "" : "s", absdir);
    if (ntraces)
        report_symbols(absdir);
    for (size_t i = 0; i < nfiles; i++)
        free(files[i]);
    free(files);
}

/* The exit status of a command that ended with wait status: a command killed by a signal is
 * died of the same way, without a core of our own, so that the caller sees the same status. */
static int exit_as(int status)
{
    if (!WIFSIGNALED(status))
        return WEXITSTATUS(status);
    int sig = WTERMSIG(status);
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    return 128 + sig;
}

int shp_cmd_run(int argc, char **argv)
{
    struct run_args a;
    char preload[PATH_MAX], absdir[PATH_MAX];
    int status, rc = parse(&a, argc, argv);
    if (rc != SHP_PARSED)
        return rc;
    if (locate_preload(&a, preload) < 0 || make_run_dir(&a, absdir) < 0 ||
        set_environment(&a, preload, absdir) < 0 || run_command(a.cmd, &status) < 0)
        return SHP_EXIT_RUN_FAILED;
    report_run(absdir);
    return exit_as(status);
}
