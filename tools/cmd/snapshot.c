/* shapetrace snapshot: a live picture of a (hung) job that need not run under shapetrace: every
 * thread's native and Python stack, what it is blocked in, and the ranks grouped by where they
 * are, the ones the others wait for first. Options and orchestration only; the work is in
 * tools/lib (ptrace.c, unwind.c, pyremote.c, capture.c, snapshot.c). */
#define _GNU_SOURCE
#include "tools/lib/snapshot.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "include/shapetrace/env.h"
#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"
#include "tools/lib/out.h"
#include "tools/lib/outfile.h"
#include "tools/lib/site.h"

/* snapshot's options (tools/cmd/options.h). */
/* clang-format off */
#define SNAPSHOT_OPTIONS(X) \
X(OPT_ALL, "all", 0, NULL, "every process of yours on this host that maps libnccl or libcudart") \
X(OPT_JSON, "json", 0, NULL, "print one JSON object (keys in docs/CONTRACTS.md)") \
X(OPT_OUT, NULL, 'o', "FILE", "also write the JSON to FILE (one per host; see --merge)") \
X(OPT_MERGE, "merge", 0, NULL, \
  "show the snapshots in FILE... (the -o files of several hosts) as one job") \
X(OPT_FULL, "full", 0, NULL, \
  "every thread's whole stack (else the focus thread's, and one line\n" \
  "for each other thread)") \
X(OPT_STATS, "stats", 0, NULL, \
  "on stderr: how long each process was stopped, and where the time\n" \
  "went") \
SHP_SITE_SKIP_OPTION(X)
/* clang-format on */
SHP_OPTS_ROWS(snapshot_rows, SNAPSHOT_OPTIONS);
static const struct shp_opts snapshot_opts = {
    .cmd = "snapshot",
    .synopsis =
        "usage: shapetrace snapshot [--json] [-o FILE] [--full] [--stats] [--site-skip GLOB]...\n"
        "                           PID... | --all\n"
        "       shapetrace snapshot --merge [--json] [-o FILE] [--full] FILE...\n"
        "\n"
        "Stops each process for a few milliseconds (ptrace; no signal is sent), copies every\n"
        "thread's registers, stack and Python frames, lets it go, then shows where each rank\n"
        "is: the ranks grouped by the call they are in (ncclAllReduce, cudaStreamSynchronize,\n"
        "or, outside NCCL and CUDA, the function they wait in) and the line of the user's code\n"
        "they are at, the ranks the others wait for first; then each process and its threads.\n"
        "A process that runs the preload adds its trace's last collective per communicator.\n",
    .epilogue =
        "Exit status: 0; 2 on bad usage, a process that may not be traced (the reason and the\n"
        "fix on stderr), an unreadable FILE, or nothing to show. A process that exits meanwhile\n"
        "is named and skipped.\n",
    .v = snapshot_rows,
    .n = SHP_OPTS_N(snapshot_rows),
};

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static void print_stats(const struct shp_snap_job *job, double wall_s)
{
    uint64_t stopped = 0, max = 0, bytes = 0, prep = 0, unwind = 0, sym = 0, trace = 0;
    size_t n = 0, threads = 0;
    for (size_t i = 0; i < job->n; i++) {
        const struct shp_snap_proc *p = &job->procs[i];
        if (p->error)
            continue;
        n++;
        threads += p->nthreads;
        stopped += p->stats.stopped_ns;
        max = p->stats.stopped_ns > max ? p->stats.stopped_ns : max;
        bytes += p->stats.stack_bytes;
        prep += p->stats.prepare_ns;
        unwind += p->stats.unwind_ns;
        sym += p->stats.symbols_ns;
        trace += p->stats.trace_ns;
    }
    fprintf(stderr,
            "shapetrace: snapshot of %zu process%s (%zu threads) in %.3f s; stopped %.2f ms on "
            "average, %.2f ms at most (target 50 ms); %.0f KiB of stack copied\n",
            n, n == 1 ? "" : "es", threads, wall_s, n ? ms(stopped) / (double)n : 0.0, ms(max),
            (double)bytes / 1024);
    fprintf(stderr,
            "shapetrace:   before the stops %.1f ms, unwinding %.1f ms, symbols %.1f ms, traces "
            "%.1f ms\n",
            ms(prep), ms(unwind), ms(sym), ms(trace));
    for (size_t i = 0; i < job->n; i++) {
        const struct shp_snap_proc *p = &job->procs[i];
        if (p->error)
            continue;
        char rank[24] = "";
        if (p->rank >= 0)
            snprintf(rank, sizeof(rank), " (rank %d)", p->rank);
        fprintf(stderr,
                "shapetrace:   pid %d%s: stopped %.2f ms, %zu threads, %.0f KiB of stack, %llu "
                "reads of Python's memory\n",
                (int)p->pid, rank, ms(p->stats.stopped_ns), p->nthreads,
                (double)p->stats.stack_bytes / 1024, (unsigned long long)p->stats.py_reads);
    }
}

/* A pid, the whole of text. */
static bool parse_pid(const char *text, pid_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v <= 0 || v > INT32_MAX)
        return false;
    *out = (pid_t)v;
    return true;
}

static unsigned hold_ms(void)
{
    const char *s = getenv(SHP_ENV_SNAPSHOT_HOLD_MS);
    long v = s ? strtol(s, NULL, 10) : 0;
    return v > 0 && v <= 60000 ? (unsigned)v : 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the command line asks for. */
struct snap_args {
    bool json, all, merge, full, stats;
    const char *out_path;
    struct shp_site_rule rule;
    pid_t *pids; /* the PIDs given, each once */
    size_t npids, cappids;
    char **files; /* with --merge: the FILEs (nfiles) */
    int nfiles;
};

static void snap_args_free(struct snap_args *a)
{
    shp_site_rule_free(&a->rule);
    free(a->pids);
}

/* The operands: PIDs (each once), or the FILEs of --merge. */
static int take_operands(struct snap_args *a, char **ops, int n)
{
    if (a->merge && a->all)
        return shp_usage_error("snapshot", "--merge reads files; --all takes processes");
    if (!a->merge && a->all == (n > 0))
        return shp_usage_error("snapshot", a->all ? "give PIDs or --all, not both"
                                                  : "give the PIDs to picture, or --all");
    if (a->merge && n == 0)
        return shp_usage_error("snapshot", "--merge needs the snapshot FILEs to merge");
    if (a->merge) {
        a->files = ops;
        a->nfiles = n;
        return SHP_PARSED;
    }
    for (int i = 0; i < n; i++) {
        pid_t pid;
        if (!parse_pid(ops[i], &pid))
            return shp_usage_error("snapshot", "'%s' is not a process id", ops[i]);
        if (pid == getpid())
            return shp_usage_error("snapshot", "%d is this command itself", (int)pid);
        bool twice = false;
        for (size_t k = 0; k < a->npids; k++)
            twice |= a->pids[k] == pid;
        if (twice)
            continue;
        if (!shp_grow((void **)&a->pids, &a->cappids, a->npids, sizeof(*a->pids)))
            return SHP_EXIT_USAGE;
        a->pids[a->npids++] = pid;
    }
    return SHP_PARSED;
}

static int parse(struct snap_args *a, int argc, char **argv)
{
    struct shp_optparse p;
    int c;
    memset(a, 0, sizeof(*a));
    if (shp_cmd_site_env(&a->rule) < 0)
        return SHP_EXIT_USAGE;
    shp_opts_begin(&p, &snapshot_opts);
    while ((c = shp_opts_next(&p, argc, argv)) >= 0) {
        if (c == OPT_JSON) {
            a->json = true;
        } else if (c == OPT_ALL) {
            a->all = true;
        } else if (c == OPT_MERGE) {
            a->merge = true;
        } else if (c == OPT_FULL) {
            a->full = true;
        } else if (c == OPT_STATS) {
            a->stats = true;
        } else if (c == OPT_OUT) {
            a->out_path = p.arg;
        } else if (c == OPT_SITE_SKIP && shp_cmd_site_skip(&a->rule, "snapshot", p.arg) < 0) {
            return SHP_EXIT_USAGE;
        }
    }
    if (c == SHP_OPT_STOP)
        return p.status;
    return take_operands(a, argv + optind, argc - optind);
}

/* The job, into *job: the merged FILEs, or the processes captured now (ctx made into *ctx).
 * Returns 0, or -1 after one line. */
static int gather(struct snap_args *a, struct shp_snap_job *job, struct shp_snap_ctx **ctx)
{
    if (a->merge) {
        for (int i = 0; i < a->nfiles; i++) {
            char err[512];
            if (shp_snap_load_json(job, a->files[i], err, sizeof(err)) < 0) {
                shp_err("%s", err);
                return -1;
            }
        }
        return 0;
    }
    if (a->all) {
        if (shp_snap_find_gpu_processes(&a->pids, &a->npids) < 0)
            return -1;
        if (!a->npids) {
            shp_err("snapshot: no process of yours on this host maps libnccl or libcudart");
            return -1;
        }
    }
    *ctx = shp_snap_ctx_new(&a->rule);
    if (!*ctx || shp_snap_capture(*ctx, a->pids, a->npids, hold_ms(), job) < 0) {
        shp_err("snapshot: out of memory");
        return -1;
    }
    return 0;
}

/* Prints the job (and writes out, closing it). Returns the exit status. */
static int show(const struct snap_args *a, struct shp_snap_job *job, FILE *out,
                struct shp_outfile *of, double t0)
{
    size_t read = 0, refused = 0;
    for (size_t i = 0; i < job->n; i++) {
        const struct shp_snap_proc *p = &job->procs[i];
        if (p->error && !a->merge)
            shp_err("snapshot: %s", p->error);
        read += !p->error;
        refused += p->error && !p->gone;
    }
    if (a->json)
        shp_snap_print_json(stdout, job);
    else if (read || a->merge)
        shp_snap_print_text(stdout, job, a->full, isatty(1) && !getenv("NO_COLOR"));
    fflush(stdout);
    if (out) {
        shp_snap_print_json(out, job);
        /* Every byte out: only now does the file take the place of the one named. */
        if (shp_outfile_close(of, out)) {
            shp_err("%s: %s", a->out_path, strerror(errno));
            return SHP_EXIT_USAGE;
        }
    }
    if (a->stats && !a->merge)
        print_stats(job, mono_s() - t0);
    return read && !refused ? SHP_EXIT_OK : SHP_EXIT_USAGE;
}

int shp_cmd_snapshot(int argc, char **argv)
{
    struct snap_args a;
    struct shp_snap_job job = {0};
    struct shp_snap_ctx *ctx = NULL;
    FILE *out = NULL;
    struct shp_outfile of = {0};
    int status = parse(&a, argc, argv);
    if (status != SHP_PARSED)
        goto out;
    status = SHP_EXIT_USAGE;
    /* Before any process is stopped: a file that cannot be written stops nothing. */
    if (a.out_path && !(out = shp_outfile_fopen(&of, a.out_path))) {
        shp_err("%s: %s", a.out_path, strerror(errno));
        goto out;
    }
    double t0 = mono_s();
    if (gather(&a, &job, &ctx) < 0)
        goto out;
    status = show(&a, &job, out, &of, t0);
    out = NULL; /* closed by show */
out:
    if (out)
        fclose(out);
    shp_outfile_abort(&of);
    shp_snap_ctx_free(ctx);
    shp_snap_job_free(&job);
    snap_args_free(&a);
    return status;
}
