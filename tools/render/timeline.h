/* shapetrace render: the traces as one timeline, drawn by one walk and many printers (perf's
 * struct perf_tool, uftrace's dump ops). The walk reads each trace twice: a scan (threads, time
 * span, what each call executed on each communicator) and a drawing, in which every call becomes
 * a slice, with its arguments, its call site and its flows, handed to a backend's table of
 * operations: Chrome's JSON, Perfetto's protobuf, the report page's SVG rows. */
#ifndef SHAPETRACE_TIMELINE_H
#define SHAPETRACE_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/lib/event.h"

struct an_result;
struct shp_proc;
struct shp_session;
struct shp_tl;

/* One process of the timeline, in rank order (known ranks first, then the others by path). */
struct shp_tl_proc {
    struct shp_proc *sp; /* the session's: trace, rank, time span, completeness */
    size_t si;           /* its index in the session */
    uint32_t pid;        /* in the timeline: 1.. in rank order */
    uint32_t *tids;      /* its threads, in the order their first calls came */
    size_t ntids;
    /* What the scan found (the walk never writes the session's description: an analysis may
     * read it meanwhile). */
    uint64_t events, torn;      /* calls and marks; records stepped over */
    uint64_t first_ns, last_ns; /* the earliest start and the latest end (0 without events) */
};

/* An argument of a slice or instant: a number, a string, or a boolean. Strings (these, and the
 * names and categories below) are static, the walk's (one copy of each text, for as long as it
 * is open) or the analysis result's, so a backend may key what it derives from one (an
 * interned id, an escaped text) by its address. */
enum { SHP_TL_U, SHP_TL_I, SHP_TL_S, SHP_TL_B };
struct shp_tl_arg {
    const char *key;
    int type;
    uint64_t u; /* SHP_TL_I: an int64_t */
    const char *s;
};

/* One end of an arrow between slices: both ends carry the same id; out at the start. The top
 * bit of a collective's id is clear; lineage and send/receive arrows have it set. */
struct shp_tl_flow {
    uint64_t id;
    bool out;
    const char *cat; /* "collective", "lineage", "p2p" */
};

#define SHP_TL_MAX_ARGS 20

/* One call as a slice of its thread's track. */
struct shp_tl_slice {
    const struct shp_tl_proc *proc;
    const struct shp_event *e; /* the call; e->index is its index in its trace */
    uint32_t tid, tord;        /* its thread, and that thread's position in proc->tids */
    uint64_t ts, dur;          /* ns; a call in flight lasts to the end of the timeline */
    const char *name, *cat;    /* the API function; its kind ("collective", "copy", ...) */
    const char *site;          /* its call site, NULL when the trace has none */
    struct shp_tl_arg a[SHP_TL_MAX_ARGS];
    int na;
    const struct shp_tl_flow *f;
    size_t nf;
};

/* A mark on its thread, or a finding on its process. */
struct shp_tl_instant {
    const struct shp_tl_proc *proc;
    uint32_t tid, tord;
    bool process; /* a finding (process-wide) rather than a mark (on its thread) */
    uint64_t ts;
    const char *name, *cat;
    const struct shp_tl_arg *a;
    int na;
};

/* A backend. open makes its state for one drawing onto out, whose times count from t0 (arg is
 * the caller's, for a backend drawn inside a bigger picture); NULL when out of memory. The hooks
 * write; close writes what is left, frees the state and returns 0 or a negative errno (out of
 * memory along the way, or what writing out returned). */
struct shp_tl_ops {
    const char *name; /* what it writes, for a person: "Chrome JSON" */
    const char *path; /* the file export writes by default */
    void *(*open)(FILE *out, uint64_t t0, void *arg);
    void (*process)(void *b, const struct shp_tl_proc *p, const char *name);
    void (*thread)(void *b, const struct shp_tl_proc *p, uint32_t tord, const char *what);
    void (*slice)(void *b, const struct shp_tl_slice *s);
    void (*instant)(void *b, const struct shp_tl_instant *i);
    int (*close)(void *b);
    /* Optional, for a drawing on several threads (NULL: the drawing is on one). part makes a
     * state like open's for one process's part of the file, drawn by one thread, that hands its
     * bytes to emit rather than writing them (its own packet sequence, seq, where the format has
     * sequences); close emits the rest and frees it. emit(arg, buf, len, cap) takes the *len
     * bytes of the malloc'd *buf (of *cap) and leaves in *buf a buffer to go on with (NULL and 0
     * for a new one), and returns 0 or -ENOMEM. raw writes such bytes into b's file, in order;
     * start is true for the first bytes of a part. */
    void *(*part)(uint64_t t0, uint32_t seq, int (*emit)(void *, char **, size_t *, size_t *),
                  void *arg);
    void (*raw)(void *b, const char *p, size_t n, bool start);
};

extern const struct shp_tl_ops shp_tl_chrome;   /* chrome.c */
extern const struct shp_tl_ops shp_tl_perfetto; /* perfetto.c */

/* What a walk reads. */
struct shp_tl_options {
    const int *ranks; /* only the processes of these global ranks; NULL: every process */
    size_t nranks;
    bool flows;  /* keep what the collective arrows need (where each collective ran) */
    bool window; /* and each one's times: the drawing will have a window (from, to) */
    /* Called for each event of each process during the scan (the report's grid), or NULL. */
    void (*scan)(void *arg, const struct shp_tl_proc *p, const struct shp_event *e);
    void *arg;
};

/* Opens a walk over the session's processes of o->ranks, in rank order (o must outlive it).
 * Returns 0; -ENOENT when no process is left (no trace of those ranks, or none at all); -ENOMEM.
 * *out is NULL on error. Not thread-safe. */
int shp_tl_open(struct shp_session *s, const struct shp_tl_options *o, struct shp_tl **out);

/* The scan: each process's threads and time span (the session's description too, as a walk to
 * its end finds them), o->scan's calls, and with o->flows where each collective ran. Call it
 * once, before anything below. Returns 0 or -ENOMEM. */
int shp_tl_scan(struct shp_tl *tl);

/* The processes in rank order. */
const struct shp_tl_proc *shp_tl_procs(const struct shp_tl *tl, size_t *n);
/* The first call's start and the latest end any trace of the walk saw (0 without events). */
uint64_t shp_tl_t0(const struct shp_tl *tl);
uint64_t shp_tl_tend(const struct shp_tl *tl);

/* How a drawing goes. */
struct shp_tl_draw {
    const struct shp_tl_ops *ops;
    void *arg;                        /* for ops->open */
    uint64_t from, to;                /* only calls that overlap [from, to], in ns of the traces */
    const bool *only;                 /* by position in rank order: draw it; NULL: every one */
    const struct an_result *result;   /* the analysis: its findings, lineage and matched sends and
                                         receives drawn too; NULL: none */
    bool release;                     /* give each trace's pages and stacks back once drawn */
    unsigned threads;                 /* the most threads it may use, 0: the cores available; a
                                         backend with parts writes the same bytes whatever it is */
    size_t held_max;                  /* the bytes the parts drawn ahead of the one being written
                                         may hold, all together (0: 128 MiB); a thread ahead waits
                                         while they are this many or more */
    uint64_t slices, flows, instants; /* what was drawn */
    unsigned threads_used;            /* the threads that drew it (this one among them) */
};

/* Draws the walk through d->ops onto out: with a backend that has parts, each process on
 * whichever of d->threads threads takes it, the parts written in rank order. Returns 0, or a
 * negative errno (out of memory, or what the backend's close returned). */
int shp_tl_draw(struct shp_tl *tl, struct shp_tl_draw *d, FILE *out);

void shp_tl_close(struct shp_tl *tl);

#endif
