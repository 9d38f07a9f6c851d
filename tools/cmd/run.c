/* shapetrace run: run a command with the preload in every process it starts. Our own words go
 * to stderr only; the command's stdin, stdout and exit status pass through untouched. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
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

static void run_usage(FILE *f)
{
    fputs("usage: shapetrace run [OPTIONS] -- CMD ARGS...\n"
          "\n"
          "Runs CMD with libshapetrace.so preloaded; every process that calls NCCL or the CUDA\n"
          "runtime writes one trace into the run directory, printed at the end (stderr).\n"
          "Returns CMD's exit status.\n"
          "\n"
          "  --dir DIR            run directory (default ./shapetrace-YYYYMMDD-HHMMSS)\n"
          "  --stacks MODE        call sites to record (" SHP_ENV_STACKS
          "; default " SHP_DEFAULT_STACKS "):\n"
          "                         none    no call sites\n"
          "                         native  native return addresses, symbolized by dump\n"
          "                         python  native, plus the Python frames (function, file,\n"
          "                                 line) of a thread that runs Python (CPython 3.10\n"
          "                                 to 3.13), in place of the interpreter's own frames;\n"
          "                                 the same as native where no Python runs\n"
          "  --max-mb N           trace cap per process in MiB (default 1024)\n"
          "  --debug LEVEL        WARN, INFO or TRACE (" SHP_ENV_DEBUG ")\n"
          "  --dormant            start with recording off (shapetrace attach turns it on);\n"
          "                       communicator and allocation records are still kept\n"
          "  --values [WHAT]      fingerprint values that must agree across ranks (" SHP_ENV_VALUES
          "):\n"
          "                         collectives  the output of every all-reduce, all-gather\n"
          "                                      and broadcast\n"
          "                         copies       the bytes of every copy whose call site\n"
          "                                      matches --values-site\n"
          "                         all          both (the default)\n"
          "                       analyze then reports value_mismatch where ranks differ\n"
          "  --values-every N     only every Nth collective of a communicator and copy of a\n"
          "                       site (" SHP_ENV_VALUES_EVERY "; default 1)\n"
          "  --values-site GLOB   the copies to fingerprint: a glob on any frame's function,\n"
          "                       Python or native (" SHP_ENV_VALUES_SITE "; default '*')\n"
          "  --preload PATH       the preload to use (default: next to this command)\n",
          f);
}

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

static volatile pid_t child_pid;

static void forward(int sig)
{
    if (child_pid > 0)
        kill(child_pid, sig);
}

int shp_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"dir", required_argument, 0, 'd'},
        {"stacks", required_argument, 0, 's'},
        {"max-mb", required_argument, 0, 'm'},
        {"debug", required_argument, 0, 'g'},
        {"preload", required_argument, 0, 'p'},
        {"help", no_argument, 0, 'h'},
        {"dormant", no_argument, 0, 'D'},
        {"values", optional_argument, 0, 'v'},
        {"values-every", required_argument, 0, 'e'},
        {"values-site", required_argument, 0, 'S'},
        {0, 0, 0, 0},
    };
    static const char *const values_what[] = {"collectives", "copies", "all", NULL};
    bool dormant = false;
    const char *dir = NULL, *stacks = NULL, *maxmb = NULL, *debug = NULL, *preload_opt = NULL;
    const char *values = NULL, *values_every = NULL, *values_site = NULL;
    int c;
    optind = 1;
    opterr = 0;
    /* '+': stop at the first non-option, so CMD's own options are never ours. */
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dir = optarg;
            break;
        case 's':
            stacks = optarg;
            if (strcmp(stacks, "none") && strcmp(stacks, "native") && strcmp(stacks, "python")) {
                shp_err("--stacks takes none, native or python, not '%s'", stacks);
                return SHP_EXIT_USAGE;
            }
            break;
        case 'm':
            if (!in_range(optarg, 1, 1 << 20)) {
                shp_err("--max-mb takes a number of MiB from 1 to 1048576, not '%s'", optarg);
                return SHP_EXIT_USAGE;
            }
            maxmb = optarg;
            break;
        case 'g':
            if (shp_log_parse_level(optarg, -1) < 0) {
                shp_err("--debug takes NONE, WARN, INFO or TRACE, not '%s'", optarg);
                return SHP_EXIT_USAGE;
            }
            debug = optarg;
            break;
        case 'p':
            preload_opt = optarg;
            break;
        case 'D':
            dormant = true;
            break;
        case 'v': {
            /* "--values all" as well as "--values=all": the next word is taken when it is one
             * of the three (a command named "all" needs "--" before it anyway). */
            const char *w = optarg;
            if (!w && optind < argc)
                for (int k = 0; values_what[k]; k++)
                    if (!strcmp(argv[optind], values_what[k]))
                        w = argv[optind++];
            values = w ? w : "all";
            bool known = false;
            for (int k = 0; values_what[k]; k++)
                known |= !strcmp(values, values_what[k]);
            if (!known) {
                shp_err("--values takes collectives, copies or all, not '%s'", values);
                return SHP_EXIT_USAGE;
            }
            break;
        }
        case 'e':
            if (!in_range(optarg, 1, SHP_MAX_VALUES_EVERY)) {
                shp_err("--values-every takes a number from 1 to %d, not '%s'",
                        SHP_MAX_VALUES_EVERY, optarg);
                return SHP_EXIT_USAGE;
            }
            values_every = optarg;
            break;
        case 'S':
            if (!*optarg || strlen(optarg) >= SHP_VALUES_SITE_MAX) {
                shp_err("--values-site takes a glob of 1 to %d bytes", SHP_VALUES_SITE_MAX - 1);
                return SHP_EXIT_USAGE;
            }
            values_site = optarg;
            break;
        case 'h':
            run_usage(stdout);
            return SHP_EXIT_OK;
        default:
            return shp_bad_option("run", argc, argv, "+h", opts);
        }
    }
    if (optind >= argc)
        return shp_usage_error("run", "no command given (shapetrace run -- CMD ARGS...)");
    char **cmd = argv + optind;

    char preload[PATH_MAX], real_preload[PATH_MAX];
    if (preload_opt)
        snprintf(preload, sizeof(preload), "%s", preload_opt);
    else if (find_preload(preload, sizeof(preload)) < 0) {
        shp_err("cannot find libshapetrace.so next to this command or in %s/lib", SHP_PREFIX);
        return SHP_EXIT_RUN_FAILED;
    }
    if (!realpath(preload, real_preload)) {
        shp_err("%s: %s", preload, strerror(errno));
        return SHP_EXIT_RUN_FAILED;
    }

    char dirbuf[PATH_MAX], absdir[PATH_MAX];
    if (dir) {
        /* Missing parents are made, as the preload makes them; a FILE, or a directory that
         * others could fill, is refused before the command runs, never run untraced. */
        const char *why = NULL;
        int rc = shp_run_dir(dir, &why);
        if (rc < 0 && why) {
            shp_err("%s is %s: a run directory must be the user's own and writable by no one "
                    "else (a new one is made 0700)",
                    dir, why);
            return SHP_EXIT_RUN_FAILED;
        }
        if (rc < 0) {
            shp_err("cannot create %s: %s", dir, strerror(-rc));
            return SHP_EXIT_RUN_FAILED;
        }
        snprintf(dirbuf, sizeof(dirbuf), "%s", dir);
    } else {
        int rc = default_dir(dirbuf, sizeof(dirbuf));
        if (rc < 0) {
            shp_err("cannot create a run directory here: %s", strerror(-rc));
            return SHP_EXIT_RUN_FAILED;
        }
    }
    if (!realpath(dirbuf, absdir)) {
        shp_err("%s: %s", dirbuf, strerror(errno));
        return SHP_EXIT_RUN_FAILED;
    }

    char *ldp = make_ld_preload(real_preload);
    if (!ldp) {
        shp_err("out of memory");
        return SHP_EXIT_RUN_FAILED;
    }
    setenv("LD_PRELOAD", ldp, 1);
    free(ldp);
    setenv(SHP_ENV_DIR, absdir, 1);
    if (stacks)
        setenv(SHP_ENV_STACKS, stacks, 1);
    if (maxmb)
        setenv(SHP_ENV_MAX_MB, maxmb, 1);
    if (debug)
        setenv(SHP_ENV_DEBUG, debug, 1);
    if (dormant)
        setenv(SHP_ENV_DORMANT, "1", 1);
    else
        unsetenv(SHP_ENV_DORMANT);
    if (values)
        setenv(SHP_ENV_VALUES, values, 1);
    if (values_every)
        setenv(SHP_ENV_VALUES_EVERY, values_every, 1);
    if (values_site)
        setenv(SHP_ENV_VALUES_SITE, values_site, 1);

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
        return SHP_EXIT_RUN_FAILED;
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
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;

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

    if (WIFSIGNALED(status)) {
        /* Die the same way, without a core of our own, so the caller sees the same status. */
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
    return WEXITSTATUS(status);
}
