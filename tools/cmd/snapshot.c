/* shapetrace snapshot: a live picture of a (hung) job that need not run under shapetrace: every
 * thread's native and Python stack, what it is blocked in, and the ranks grouped by where they
 * are, the ones the others wait for first. Options and orchestration only; the work is in
 * tools/lib (ptrace.c, unwind.c, pyremote.c, capture.c, snapshot.c). */
#define _GNU_SOURCE
#include "tools/lib/snapshot.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "include/shapetrace/env.h"
#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"
#include "tools/lib/site.h"

static void snapshot_usage(FILE *f)
{
    fputs("usage: shapetrace snapshot [--json] [-o FILE] [--full] [--stats] [--site-skip GLOB]...\n"
          "                           PID... | --all\n"
          "       shapetrace snapshot --merge [--json] [-o FILE] [--full] FILE...\n"
          "\n"
          "Stops each process for a few milliseconds (ptrace; no signal is sent), copies every\n"
          "thread's registers, stack and Python frames, lets it go, then shows where each rank\n"
          "is: the ranks grouped by the call they are in (ncclAllReduce, cudaStreamSynchronize,\n"
          "or, outside NCCL and CUDA, the function they wait in) and the line of the user's code\n"
          "they are at, the ranks the others wait for first; then each process and its threads.\n"
          "A process that runs the preload adds its trace's last collective per communicator.\n"
          "  --all              every process of yours on this host that maps libnccl or\n"
          "                     libcudart\n"
          "  --json             print one JSON object (keys in docs/CONTRACTS.md)\n"
          "  -o FILE            also write the JSON to FILE (one per host; see --merge)\n"
          "  --merge FILE...    show the snapshots of several hosts (their -o files) as one job\n"
          "  --full             every thread's whole stack (else the focus thread's, and one line\n"
          "                     for each other thread)\n"
          "  --stats            on stderr: how long each process was stopped, and where the time\n"
          "                     went\n" SHP_SITE_SKIP_HELP
          "Exit status: 0; 2 on bad usage, a process that may not be traced (the reason and the\n"
          "fix on stderr), an unreadable FILE, or nothing to show. A process that exits meanwhile\n"
          "is named and skipped.\n",
          f);
}

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

int shp_cmd_snapshot(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},  {"all", no_argument, 0, 'a'},
        {"merge", no_argument, 0, 'm'}, {"full", no_argument, 0, 'f'},
        {"stats", no_argument, 0, 's'}, {"site-skip", required_argument, 0, 'k'},
        {"help", no_argument, 0, 'h'},  {0, 0, 0, 0},
    };
    bool json = false, all = false, merge = false, full = false, stats = false;
    const char *out_path = NULL;
    struct shp_site_rule rule = {0};
    struct shp_snap_job job = {0};
    struct shp_snap_ctx *ctx = NULL;
    pid_t *pids = NULL;
    size_t npids = 0, cappids = 0;
    FILE *out = NULL;
    int status = SHP_EXIT_USAGE, c;
    if (shp_cmd_site_env(&rule) < 0)
        goto out;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
        } else if (c == 'a') {
            all = true;
        } else if (c == 'm') {
            merge = true;
        } else if (c == 'f') {
            full = true;
        } else if (c == 's') {
            stats = true;
        } else if (c == 'o') {
            out_path = optarg;
        } else if (c == 'k') {
            if (shp_cmd_site_skip(&rule, "snapshot", optarg) < 0)
                goto out;
        } else if (c == 'h') {
            snapshot_usage(stdout);
            status = SHP_EXIT_OK;
            goto out;
        } else {
            status = shp_bad_option("snapshot", argc, argv, "ho:", opts);
            goto out;
        }
    }
    if (merge && all) {
        status = shp_usage_error("snapshot", "--merge reads files; --all takes processes");
        goto out;
    }
    if (!merge && all == (optind < argc)) {
        status = shp_usage_error("snapshot", all ? "give PIDs or --all, not both"
                                                 : "give the PIDs to picture, or --all");
        goto out;
    }
    if (merge && optind == argc) {
        status = shp_usage_error("snapshot", "--merge needs the snapshot FILEs to merge");
        goto out;
    }
    for (int i = optind; !merge && i < argc; i++) {
        pid_t pid;
        if (!parse_pid(argv[i], &pid)) {
            status = shp_usage_error("snapshot", "'%s' is not a process id", argv[i]);
            goto out;
        }
        if (pid == getpid()) {
            status = shp_usage_error("snapshot", "%d is this command itself", (int)pid);
            goto out;
        }
        bool twice = false;
        for (size_t k = 0; k < npids; k++)
            twice |= pids[k] == pid;
        if (twice)
            continue;
        if (!shp_grow((void **)&pids, &cappids, npids, sizeof(*pids)))
            goto out;
        pids[npids++] = pid;
    }
    /* Before any process is stopped: a file that cannot be written stops nothing. */
    if (out_path && !(out = fopen(out_path, "we"))) {
        shp_err("%s: %s", out_path, strerror(errno));
        goto out;
    }
    double t0 = mono_s();
    if (merge) {
        for (int i = optind; i < argc; i++) {
            char err[512];
            int rc = shp_snap_load_json(&job, argv[i], err, sizeof(err));
            if (rc < 0) {
                shp_err("%s", err);
                goto out;
            }
        }
    } else {
        if (all) {
            if (shp_snap_find_gpu_processes(&pids, &npids) < 0)
                goto out;
            if (!npids) {
                shp_err("snapshot: no process of yours on this host maps libnccl or libcudart");
                goto out;
            }
        }
        ctx = shp_snap_ctx_new(&rule);
        if (!ctx || shp_snap_capture(ctx, pids, npids, hold_ms(), &job) < 0) {
            shp_err("snapshot: out of memory");
            goto out;
        }
    }
    size_t read = 0, refused = 0;
    for (size_t i = 0; i < job.n; i++) {
        const struct shp_snap_proc *p = &job.procs[i];
        if (p->error && !merge)
            shp_err("snapshot: %s", p->error);
        read += !p->error;
        refused += p->error && !p->gone;
    }
    if (json)
        shp_snap_print_json(stdout, &job);
    else if (read || merge)
        shp_snap_print_text(stdout, &job, full, isatty(1) && !getenv("NO_COLOR"));
    fflush(stdout);
    if (out) {
        shp_snap_print_json(out, &job);
        if (fclose(out) != 0) {
            out = NULL;
            shp_err("%s: %s", out_path, strerror(errno));
            goto out;
        }
        out = NULL;
    }
    if (stats && !merge)
        print_stats(&job, mono_s() - t0);
    status = read && !refused ? SHP_EXIT_OK : SHP_EXIT_USAGE;
out:
    if (out)
        fclose(out);
    shp_snap_ctx_free(ctx);
    shp_snap_job_free(&job);
    shp_site_rule_free(&rule);
    free(pids);
    return status;
}
