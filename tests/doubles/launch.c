/* shp_launch: runs N copies of a command as the ranks of one job on one node, as torchrun does,
 * and hands them a file through which rank 0 publishes the NCCL unique id (test equipment).
 * Usage: shp_launch [-n N] [--timeout S] -- CMD [ARGS...] */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 1024
#define EXIT_USAGE 2
#define EXIT_SETUP 125 /* as `shapetrace run` and env(1): the launcher itself failed */
#define EXIT_TIMEOUT 124

static const char usage[] =
    "usage: shp_launch [-n N] [--timeout S] -- CMD [ARGS...]\n"
    "Runs N copies of CMD (default 1) with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and\n"
    "SHP_UID_FILE set, passing their output through. Exits 0 when every rank exits 0, else with\n"
    "the first non-zero status (128+signal for a signal); with --timeout, kills every rank after\n"
    "S seconds (fractions allowed) and exits 124.\n";

struct rank_proc {
    pid_t pid;
    bool live;
};

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "shp_launch: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", usage);
    return EXIT_USAGE;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Removes what the ranks left in the directory (the id files, a temporary one if a rank died
 * mid-write), then the directory. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (d) {
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    if (rmdir(dir) != 0)
        fprintf(stderr, "shp_launch: cannot remove %s: %s\n", dir, strerror(errno));
}

static void set_int_env(const char *name, int v)
{
    char buf[16];

    snprintf(buf, sizeof(buf), "%d", v);
    setenv(name, buf, 1);
}

/* In the child: its own process group, so that a timeout kills what it started too. */
static void exec_rank(int rank, int n, const char *uid_file, char **cmd, const sigset_t *mask)
{
    setpgid(0, 0);
    sigprocmask(SIG_SETMASK, mask, NULL);
    set_int_env("RANK", rank);
    set_int_env("WORLD_SIZE", n);
    set_int_env("LOCAL_RANK", rank);
    set_int_env("LOCAL_WORLD_SIZE", n);
    setenv("SHP_UID_FILE", uid_file, 1);
    execvp(cmd[0], cmd);
    fprintf(stderr, "shp_launch: %s: %s\n", cmd[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

static int status_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return 1;
}

/* Reaps every rank that has ended; keeps the first non-zero status. */
static int reap(struct rank_proc *ranks, int n, bool block, int *first)
{
    int st, ended = 0;
    pid_t pid;

    while ((pid = waitpid(-1, &st, block ? 0 : WNOHANG)) > 0) {
        for (int r = 0; r < n; r++) {
            if (ranks[r].pid != pid || !ranks[r].live)
                continue;
            ranks[r].live = false;
            ended++;
            if (status_code(st) != 0 && *first == 0)
                *first = status_code(st);
        }
        block = false;
    }
    return ended;
}

static void signal_all(struct rank_proc *ranks, int n, int sig)
{
    for (int r = 0; r < n; r++)
        if (ranks[r].live)
            kill(-ranks[r].pid, sig);
}

int main(int argc, char **argv)
{
    static struct rank_proc ranks[MAX_RANKS];
    char dir[PATH_MAX], uid_file[PATH_MAX + 8];
    const char *tmp = getenv("TMPDIR");
    sigset_t wait_set, old_mask;
    double timeout = 0, deadline = 0;
    int n = 1, live = 0, first = 0, i;
    bool timed_out = false;
    char **cmd = NULL;

    for (i = 1; i < argc && !cmd; i++) {
        char *end;

        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);

            if (*end || v < 1 || v > MAX_RANKS)
                return bad_usage("-n wants a number of ranks from 1 to 1024, not '%s'", argv[i]);
            n = (int)v;
        } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
            timeout = strtod(argv[++i], &end);
            if (*end || !(timeout > 0))
                return bad_usage("--timeout wants a positive number of seconds, not '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--")) {
            if (i + 1 < argc)
                cmd = &argv[i + 1];
            break;
        } else if (argv[i][0] == '-') {
            return bad_usage("unknown or incomplete option '%s'", argv[i]);
        } else {
            cmd = &argv[i];
        }
    }
    if (!cmd)
        return bad_usage("no command to run");

    snprintf(dir, sizeof(dir), "%s/shp_launch.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "shp_launch: cannot create a directory in %s: %s\n",
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
        return EXIT_SETUP;
    }
    snprintf(uid_file, sizeof(uid_file), "%s/uid", dir);

    /* Signals are taken with sigtimedwait, so none can arrive between a check and the wait. */
    sigemptyset(&wait_set);
    sigaddset(&wait_set, SIGCHLD);
    sigaddset(&wait_set, SIGINT);
    sigaddset(&wait_set, SIGTERM);
    sigaddset(&wait_set, SIGHUP);
    sigprocmask(SIG_BLOCK, &wait_set, &old_mask);
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();

        if (pid == 0)
            exec_rank(r, n, uid_file, cmd, &old_mask);
        if (pid < 0) {
            fprintf(stderr, "shp_launch: fork of rank %d failed: %s\n", r, strerror(errno));
            signal_all(ranks, n, SIGKILL);
            while (live > 0)
                live -= reap(ranks, n, true, &first);
            remove_dir(dir);
            return EXIT_SETUP;
        }
        setpgid(pid, pid); /* also here, so that a kill right after fork reaches the group */
        ranks[r].pid = pid;
        ranks[r].live = true;
        live++;
    }
    if (timeout > 0)
        deadline = now_s() + timeout;

    while (live > 0) {
        struct timespec ts, *wait = NULL;
        siginfo_t info;
        int sig;

        if (timeout > 0) {
            double left = deadline - now_s();

            if (left < 0)
                left = 0;
            ts.tv_sec = (time_t)left;
            ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
            wait = &ts;
        }
        sig = sigtimedwait(&wait_set, &info, wait);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
            signal_all(ranks, n, sig);
        if (sig < 0 && errno == EAGAIN) {
            fprintf(stderr, "shp_launch: timed out after %g s; killing %d rank%s\n", timeout, live,
                    live == 1 ? "" : "s");
            signal_all(ranks, n, SIGKILL);
            timed_out = true;
            while (live > 0)
                live -= reap(ranks, n, true, &first);
            break;
        }
        live -= reap(ranks, n, false, &first);
    }
    remove_dir(dir);
    return timed_out ? EXIT_TIMEOUT : first;
}
