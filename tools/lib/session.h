/* shapetrace tools: the traces one command reads, opened once with one policy for what cannot be
 * read, one description per process, and the call stacks loaded and symbolized safely from the
 * analyzer's threads. Every command that reads traces (dump, status, analyze, export, report,
 * symbols) goes through it. */
#ifndef SHAPETRACE_SESSION_H
#define SHAPETRACE_SESSION_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/lib/reader.h"

struct shp_event;
struct shp_site_rule;
struct shp_stacks;
struct shp_symcache;

/* One process's trace as every command describes it. */
struct shp_proc {
    struct shp_trace t; /* t.path is the file, as found; t.hdr its host, pid, drops */
    int rank;           /* the global rank (shp_trace_rank), -1 when unknown */
    /* What a walk to the end found (shp_proc_walked), all 0 before one. */
    bool walked;
    uint64_t events;            /* calls and marks */
    uint64_t torn;              /* records the walk stepped over */
    uint64_t first_ns, last_ns; /* the earliest call's start and the latest end (a call in
                                   flight ends at its start); 0 with no events */
    /* the session's: see shp_session_stacks */
    struct shp_stacks *stacks;
};

/* A file found in a run directory that is not a readable trace: named and skipped. */
struct shp_unreadable {
    char *file, *why;
};

/* Options of shp_session_open. */
#define SHP_SESSION_UNIQUE 0x1u  /* the same trace twice (a file and its directory) is refused */
#define SHP_SESSION_PARTIAL 0x2u /* a refused PATH leaves the others open (dump): returns 1 */
#define SHP_SESSION_RAW 0x4u     /* frames print as addresses (dump --no-stacks) */
#define SHP_SESSION_EMPTY                                                                          \
    0x8u                        /* no trace at all, a PATH missing or empty, is neither refused    \
                                   nor named: the caller says so (status, before a run starts) */
#define SHP_SESSION_QUIET 0x10u /* unreadable files are listed, not named (run names them) */

struct shp_session {
    struct shp_proc *procs; /* in the order of the paths, a directory's files sorted */
    size_t nprocs;
    struct shp_unreadable *unreadable; /* files of run directories skipped, in the same order */
    size_t nunreadable;
    /* The site rule (site.h) of every call site the command shows: NULL, the built-in list, or
     * the command's (--site-skip, SHAPETRACE_SITE_SKIP), which must outlive the session. Set it
     * after shp_session_open, before any stack is read. */
    const struct shp_site_rule *site;
    /* the session's own */
    size_t cap;
    char **paths;
    int npaths;
    unsigned flags;
    const char *what;
    struct shp_symcache *cache;
    pthread_mutex_t lock;
};

/* Opens the traces in paths (trace files, and run directories searched one level deep for
 * *.shptrace), from any number of hosts, with the one policy of docs/analyzer.md ("What
 * analyze says"):
 *   - a PATH that does not exist, a file named as a PATH that is not a readable trace, and a
 *     directory without a trace when no other PATH has one, are refused: one line each;
 *   - a file found in a directory that is not a readable trace (empty, junk, another format
 *     version, a FIFO: never waited for) is named on stderr, one line, "FILE: WHY; skipped: WHAT
 *     covers the other traces only", and kept in s->unreadable, so that the command says it is
 *     partial;
 *   - a directory without any *.shptrace among other PATHs that have traces is a note.
 * what names the command's output in that line ("the analysis", "the dump"). flags: SHP_SESSION_*.
 * Returns 0; 1 (SHP_SESSION_PARTIAL only) when some PATH was refused and the others are open;
 * -1 after its lines when refused, with nothing left open. shp_session_close it either way. Not
 * thread-safe; the session it fills is (see below). */
int shp_session_open(struct shp_session *s, char *const *paths, int npaths, unsigned flags,
                     const char *what);

/* Looks again at the session's paths, for a command that watches a live run (status --watch):
 * every trace is opened again to see what was appended since, a new trace is added at the end,
 * and a new unreadable file is named once (a file being created is retried silently, and joins
 * when it becomes readable). Proc pointers and loaded stacks do not survive it; each proc's walk
 * fields are kept. Returns 0, or -1 when out of memory. Not thread-safe. */
int shp_session_update(struct shp_session *s);

/* Closes every trace and frees what the session holds. s may be zeroed and never opened. */
void shp_session_close(struct shp_session *s);

/* Records what a walk of p to its end (cur at the end) found, events counted by the caller:
 * completeness and torn records from it. */
void shp_proc_walked(struct shp_proc *p, const struct shp_cursor *cur, uint64_t events);

/* Extends p's time span with e (first_ns, last_ns). */
void shp_proc_saw(struct shp_proc *p, const struct shp_event *e);

/* The one rule of completeness, for every command: the writer closed the trace at a normal exit,
 * and nothing was dropped, torn (by the walk recorded with shp_proc_walked) or cut. */
bool shp_proc_complete(const struct shp_proc *p);

/* Why p is incomplete, as one phrase (shp_trace_incomplete_why), or NULL when it is complete.
 * The calling thread's text, valid until its next call. */
const char *shp_proc_incomplete_why(const struct shp_proc *p);

/* What became of p's process. */
enum shp_fate shp_proc_fate(const struct shp_proc *p);

/* Proc i's call stacks, loaded on first use and symbolized through the session's one cache of
 * module texts (each module of the run is symbolized once for the command). Loading takes the
 * session's lock; the stacks themselves are not thread-safe, so a command with threads uses
 * shp_session_frames and shp_session_site instead. NULL only when out of memory (the stacks
 * functions accept it). */
struct shp_stacks *shp_session_stacks(struct shp_session *s, size_t i);

/* The frames of stack `id` of proc i (shp_stacks_frames), under the session's lock: any thread
 * may call it at any time. The texts stay valid until the session is closed or updated. */
const char *const *shp_session_frames(struct shp_session *s, size_t i, uint32_t id, size_t *n);

/* The call site of stack `id` of proc i under s->site (shp_stacks_site), under the session's
 * lock. */
void shp_session_site(struct shp_session *s, size_t i, uint32_t id, char *out, size_t len);

/* The index of that site among shp_session_frames' frames (the ones before it are framework
 * code: a report folds them), under the session's lock; 0 for an unknown id. */
size_t shp_session_site_index(struct shp_session *s, size_t i, uint32_t id);

/* Gives back what proc i's stacks and the pages of its trace hold, for a command that is done
 * with it (dump, once a trace is printed); its description stays, and its stacks load again
 * if asked for. Under the session's lock: any thread, while no other uses proc i's stacks. */
void shp_session_release(struct shp_session *s, size_t i);

/* Gives back the pages of proc i's trace only (a walk of it is over; its stacks stay): they are
 * read again from the page cache when asked for. Any thread, while others read the trace. */
void shp_session_forget_pages(struct shp_session *s, size_t i);

#endif
