/* shapetrace tools: a live picture of a job's processes (shapetrace snapshot). capture.c takes
 * one process's picture (every thread's native and Python stack, what each thread is blocked in,
 * the rank, the trace's collectives when the preload runs there); snapshot.c groups the ranks
 * by where they are, names the ones the others wait for, and writes the text and JSON views
 * (and reads the JSON back, to merge the pictures of several hosts). */
#ifndef SHAPETRACE_SNAPSHOT_H
#define SHAPETRACE_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* One thread of a process, as the picture shows it. */
struct shp_snap_thread {
    pid_t tid;
    char name[32]; /* /proc/PID/task/TID/comm */
    char **frames; /* innermost first: "function (file:line)", "function+0xoff (module)",
                    * "py: function (file.py:line)"; owned */
    size_t nframes;
    size_t site;     /* index of the frame in the user's or the model's code (site.h) */
    bool has_site;   /* frames[site] is such a frame (not a fallback among framework frames) */
    char *in;        /* the outermost call into NCCL or the CUDA runtime or driver (the
                      * function's name: "ncclAllReduce"), NULL when there is none */
    bool collective; /* `in` is an NCCL call */
    char *waiting;   /* the innermost frame's function: where the thread waits */
    bool python;     /* it runs Python (its stack has Python frames) */
    bool stopped;    /* false: it did not stop in time, and has no stack */
};

/* A communicator position, from the process's trace: the last collective it entered there. */
struct shp_snap_comm {
    uint64_t id;
    uint64_t seq; /* UINT64_MAX: none yet */
    char op[40];
    bool in_flight;
};

/* A call that had not returned, from the trace. */
struct shp_snap_call {
    pid_t tid;
    char op[40];
    uint64_t comm; /* 0: none */
    uint64_t seq;  /* UINT64_MAX: none */
};

/* Where the time of one process's picture went, in nanoseconds. */
struct shp_snap_stats {
    uint64_t prepare_ns;  /* before the stop: maps, modules, the interpreter's symbols */
    uint64_t stopped_ns;  /* from the first thread interrupted to the last let go */
    uint64_t unwind_ns;   /* native unwinding, after the stop */
    uint64_t symbols_ns;  /* symbolization and merging */
    uint64_t trace_ns;    /* reading the trace */
    uint64_t stack_bytes; /* stack memory copied while stopped */
    uint64_t py_reads;    /* reads of the interpreter's memory while stopped */
};

/* One process. */
struct shp_snap_proc {
    char host[64];
    pid_t pid;
    char *error; /* not read: why, one line (the others are empty); owned */
    bool gone;   /* error says it exited meanwhile */
    char name[32];
    char *exe;
    int rank, local_rank, world_size; /* -1: unknown */
    const char *rank_from;            /* "env", "trace" or NULL */
    char python[16];                  /* "3.12.1", "" without Python */
    char *python_note;                /* why Python frames are missing or short; NULL */
    struct shp_snap_thread *threads;
    size_t nthreads;
    size_t focus; /* the thread the job view reads (shp_snap_focus's rule) */
    unsigned late;
    char *trace;  /* the trace file read, NULL when none */
    bool dormant; /* its recording is off (shapetrace run --dormant): no collectives in it */
    struct shp_snap_comm *comms;
    size_t ncomms;
    struct shp_snap_call *inflight;
    size_t ninflight;
    struct shp_snap_comm last; /* the last collective it entered (seq UINT64_MAX: none) */
    bool behind;               /* set by the view: a lower seq than a peer's on a communicator */
    struct shp_snap_stats stats;
};

/* The processes of one picture (live, or merged from several hosts' files). */
struct shp_snap_job {
    struct shp_snap_proc *procs;
    size_t n, cap;
    uint64_t t_ns; /* wall clock when it was taken (the earliest, merged) */
};

struct shp_site_rule;
struct shp_snap_ctx;

/* What one command shares between the processes it pictures: one symbolizer in which each
 * module file (same path, build id, device and inode) is placed once, so that libtorch's
 * tables are read once however many processes map it; the site rule (NULL: the built-in list),
 * which must outlive the context. NULL when out of memory. */
struct shp_snap_ctx *shp_snap_ctx_new(const struct shp_site_rule *rule);
void shp_snap_ctx_free(struct shp_snap_ctx *c);

/* Pictures the processes pids[0..n) into job (appended, in that order): for all of them, what
 * needs no stop (maps, modules, the interpreter's symbols, environment); then each one in turn
 * stopped (every thread), its registers, stacks and Python frames copied, and let go, held
 * hold_ms longer when it is nonzero (a test's window, SHAPETRACE_SNAPSHOT_HOLD_MS, cut short by
 * a signal that ends the command); then, with every process running again, unwinding, symbols,
 * the merge of Python frames, the traces.
 * A process that cannot be read gets its error set (gone for one that exited) and is skipped;
 * the others are read. Returns 0, or -ENOMEM. */
int shp_snap_capture(struct shp_snap_ctx *c, const pid_t *pids, size_t n, unsigned hold_ms,
                     struct shp_snap_job *job);

/* The processes of the caller's user on this host, itself aside, that map libnccl or libcudart
 * (from /proc/PID/maps), in pid order, into a malloc'd array. Returns 0 or -ENOMEM. */
int shp_snap_find_gpu_processes(pid_t **pids, size_t *n);

/* The thread of p the job view reads: the first thread (the main thread first, then by tid) that
 * is in a GPU library with a site in the user's or the model's code (has_site); else the main
 * thread when it has such a site; else the first thread with one; else the main thread (or the
 * first). Framework threads (NCCL's, CUDA's, torch's watchdog) have no such site. */
size_t shp_snap_focus(const struct shp_snap_proc *p);

/* Prints the job view on f: the groups of ranks that are at the same place (the same call, at
 * the same site), the ones the others wait for first, then each process with its threads (every
 * thread's whole stack with full, else the focus thread's and one line for each other). */
void shp_snap_print_text(FILE *f, struct shp_snap_job *job, bool full, bool color);

/* Prints the job as one JSON object (docs/CONTRACTS.md) and a newline on f. */
void shp_snap_print_json(FILE *f, struct shp_snap_job *job);

/* Appends the processes of the snapshot JSON file at path (what shp_snap_print_json wrote) to
 * job. Returns 0; -EINVAL, with one line in err, for a file that is not one; another negative
 * errno when it cannot be read. */
int shp_snap_load_json(struct shp_snap_job *job, const char *path, char *err, size_t errlen);

/* Frees what job holds and leaves it empty. */
void shp_snap_job_free(struct shp_snap_job *job);

/* Replaces the control characters of s (NULL: none) with '?': the names, paths and frames of a
 * picture come from the processes, whose text view must not drive the terminal. */
void shp_snap_scrub(char *s);

/* Adds a zeroed process to job; NULL when out of memory. */
struct shp_snap_proc *shp_snap_job_add(struct shp_snap_job *job);

#endif
