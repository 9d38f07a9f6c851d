/* shapetrace analyze: what a pass sees. The traces are read once, merged by time (load.c), and
 * each event is handed to the merged-stream passes as it comes (align collectives, match p2p,
 * check buffers); the per-process passes (lineage, expectations) walk one process's trace at a
 * time on worker threads. Only the driver (driver.c) names the passes. A pass keeps only what
 * is still open, so memory follows the ranks and the open collectives, not the number of
 * events. */
#ifndef SHAPETRACE_PASS_H
#define SHAPETRACE_PASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/analyze/findings.h"
#include "tools/lib/event.h"
#include "tools/lib/reader.h"
#include "tools/lib/session.h"

/* A process as the analyzer walks it: the session's description (its trace, its global rank),
 * and the merged stream's place in it (the merging thread's: a pass of one process reads sp
 * only). */
struct an_proc {
    struct shp_proc *sp; /* the session's (tools/lib/session.h): sp->t, sp->rank */
    uint64_t index;      /* events the merged stream handed out so far */
    bool ended;          /* the merged stream handed out its last event */
    /* the last call the merged stream handed out, for the hang report */
    struct an_ref last;
};

/* A communicator as the alignment pass saw it, for the report. */
struct an_comm_summary {
    uint64_t id;
    int nranks;
    uint64_t collectives;
    int *ranks; /* global ranks of the members some trace provides */
    int nmembers;
};

/* What the values pass made of the fingerprints (SHAPETRACE_VALUES), for the report; all 0 when
 * no trace holds any. */
struct an_values_counts {
    uint64_t records;  /* value records read */
    uint64_t compared; /* collectives and copies whose fingerprints were compared across ranks */
    uint64_t differ;   /* of those, the ones whose ranks' fingerprints differ */
    uint64_t captured, busy, lost, pending; /* calls whose fingerprint was not taken, by why */
};

struct an_load;
struct an_expect;

/* A send and the receive it matched, as the p2p pass matched them: each side's call, or the
 * graph launch that executed it. */
struct an_match {
    struct an_ref send, recv;
};

struct an_ctx {
    struct shp_session *session; /* the traces, their stacks (thread-safe: an_site, an_frames) */
    struct an_proc *procs;       /* by the session's index */
    size_t nprocs;
    struct an_findings findings;
    struct an_dims dims;
    struct an_load *load;           /* the merge (load.c) */
    const struct an_expect *expect; /* --expect FILE as read (expect.c); NULL if none */
    /* summary figures */
    uint64_t events, collectives;
    struct an_comm_summary *comms; /* filled by the alignment pass when it finishes */
    size_t ncomms;
    uint64_t bytes_total;
    /* every match of the p2p pass, when the options ask for them (an_options.matches) */
    bool keep_matches;
    struct an_match *matches;
    size_t nmatches, cap_matches;
    struct an_values_counts values; /* written by the values pass as it finishes */
};

/* One call as the alignment and p2p passes keep it while it is open. */
struct an_entry {
    struct an_ref ref; /* the call as issued (for a replay: as captured) */
    uint64_t t_ns, seq, count;
    int root, redop, dtype;
    unsigned op;
    /* A call a graph replay executed: the cudaGraphLaunch (rec NULL for an eager call) and
     * the replay's number among that rank's graph launches, from 1. */
    struct an_ref launch;
    uint64_t replay;
};
struct an_entry an_entry_of(const struct shp_event *e, const struct an_ref *ref);

/* One event as the passes see it. */
struct an_step {
    struct an_proc *proc;
    const struct shp_event *e;
    const struct an_ref *ref;
    /* Per-process passes: the producers of most of what this call read, nearest first, as the
     * lineage pass found them before the call's own write replaced them (an in-place
     * collective); the passes after it read them. */
    struct an_ref producers[AN_MAX_LINEAGE];
    int nproducers;
    /* Per-process passes: a call that a graph replay executed (e and ref are the captured
     * call's, e->t_ns the launch's): the cudaGraphLaunch, and the replay's number among the
     * process's graph launches, from 1 (replay.h). NULL and 0 for a call executed where it was
     * issued. */
    const struct an_ref *launch;
    uint64_t replay;
    /* The bytes the call reads and writes (shp_event_spans), once for all the passes of the
     * step: an_step_spans. */
    bool has_spans;
    struct shp_span rd, wr;
    /* The call as an entry (an_entry_of), once for all the merged passes of the step:
     * an_step_entry. */
    bool has_entry;
    struct an_entry entry;
};

/* What the call of s reads and writes, by its op's size rule (shp_event_spans). */
static inline void an_step_spans(struct an_step *s, struct shp_span *rd, struct shp_span *wr)
{
    if (!s->has_spans) {
        shp_event_spans(s->e, &s->rd, &s->wr);
        s->has_spans = true;
    }
    *rd = s->rd;
    *wr = s->wr;
}

/* an_entry_of(s->e, s->ref): the alignment and wait-for passes each took one of every call. */
static inline const struct an_entry *an_step_entry(struct an_step *s)
{
    if (!s->has_entry) {
        s->entry = an_entry_of(s->e, s->ref);
        s->has_entry = true;
    }
    return &s->entry;
}

/* A bit of an_pass.types. */
#define AN_TYPE(name) (1u << SHP_REC_##name)

/* A pass. Every hook but event may be NULL. */
struct an_pass {
    const char *name;
    /* Merged stream: the record types (AN_TYPE(COLL) | ...) of the events it is handed, 0 for
     * all of them; the merge decodes only what some pass asks for, and a call's sizes (bytes,
     * send_bytes, recv_bytes, src, dst) may be unknown there (an_next). */
    unsigned types;
    /* Its state for one walk: the merged stream, or one worker's processes. NULL: the pass has
     * nothing to do (or no memory) and is skipped. */
    void *(*init)(struct an_ctx *ctx);
    void (*event)(void *st, struct an_ctx *ctx, struct an_step *s);
    /* Merged stream: p has handed out its last event. Per process: the walk of p is over. */
    void (*proc_end)(void *st, struct an_ctx *ctx, struct an_proc *p);
    /* After the last event of the walk, on the thread that walked. */
    void (*finish)(void *st, struct an_ctx *ctx);
    /* Per-process passes: fold a worker's state into the main thread's; the worker's findings
     * are already in ctx, from index base on. */
    void (*merge)(void *into, struct an_ctx *ctx, void *from, size_t base);
    /* Per-process passes: on the main thread, after every merge. */
    void (*done)(void *st, struct an_ctx *ctx);
    void (*free)(void *st);
};

/* ---- what passes share: a queue of calls, and an index from 64-bit keys ---- */

/* Keeps that send matched receive, when ctx->keep_matches (out of memory loses it). Merged
 * stream only. */
void an_note_match(struct an_ctx *ctx, const struct an_entry *send, const struct an_entry *recv);

/* True for a collective or p2p call that NCCL refused before it enqueued anything: it returned
 * ncclInvalidArgument or ncclInvalidUsage, the errors of ncclEnqueueCheck's checks of the
 * communicator's state and of the arguments (NCCL 2.28, enqueue.cc). It executed nothing and
 * took no seq: the preload gives a refused call's seq back, so the rank's next call has it. Other
 * errors (a system or remote error; a timeout on the doubles) come from a call that was entered:
 * it counts as executed. */
static inline bool an_refused(const struct shp_event *e)
{
    /* ncclInvalidArgument and ncclInvalidUsage (nccl.h numbers them 4 and 5). */
    return (e->type == SHP_REC_COLL || e->type == SHP_REC_P2P) && e->dur_ns != SHP_NONE &&
           (e->result == 4 || e->result == 5);
}

/* Whether p's trace lost its end: calls dropped at the cap, tracing switched off after an error,
 * or the process dormant when its trace ends (attach --off, or never armed). After its last
 * recorded call, a call it did not record proves nothing. */
bool an_lost_end(const struct an_proc *p);

/* ---- where a member's executed collectives sit on a communicator (align, waitfor) ---- */

/* NCCL matches the k-th collective that each member executes on a communicator with the others'
 * k-th: that k is a call's place. A rank's seq counts what it issued: its eager calls and those
 * captured into graphs (which execute at each replay instead), not the ones NCCL refused. So an
 * eager call's place is its seq, less the calls captured before it, plus the replayed calls
 * executed before it: the executed count for a rank traced from its start, and the right place
 * for a rank whose tracing started later (run --dormant, then attach --on: seq kept counting
 * while it was dormant). A replayed call takes the place after the last one. */
struct an_place {
    bool placed;
    uint64_t next;        /* the place of the next call, once placed */
    uint64_t captured;    /* calls recorded while captured */
    uint64_t replayed;    /* calls that replays executed */
    uint64_t refused;     /* refused calls whose seq was not given back (an older preload) */
    uint64_t refused_seq; /* seq of the last refused call, SHP_NONE when none is pending */
};
/* Zeroed, with refused_seq SHP_NONE. */
void an_place_init(struct an_place *p);
/* The place of the executed call en (a replay when en->launch.rec is set); advances p. */
uint64_t an_place_next(struct an_place *p, const struct an_entry *en);
/* The place that the refused call en would have taken; notes its seq. */
uint64_t an_place_refused(struct an_place *p, const struct an_entry *en);

/* ---- the communicators each process is a member of (align, waitfor) ---- */

/* A member a process claimed: its communicator, by its position in the pass's table, and its
 * rank there. */
struct an_membership {
    size_t comm;
    int rank;
};

/* By process, the members it claimed, so that a pass's proc_end visits the communicators of the
 * process that ended and not every communicator (with 2048 traces that loop was 30 instructions
 * an event). lost: a claim could not be kept (out of memory), and proc_end must look at every
 * communicator instead. */
struct an_memberships {
    struct {
        struct an_membership *v;
        size_t n, cap;
    } * by_proc;
    size_t nprocs;
    bool lost;
};
/* Room for nprocs processes; 0, or -1 when out of memory (then lost is set). */
int an_memberships_init(struct an_memberships *ms, size_t nprocs);
/* Process proc claimed the member `rank` of the communicator at position comm. */
void an_memberships_add(struct an_memberships *ms, size_t proc, size_t comm, int rank);
/* Process proc's members, ordered by communicator's position then rank (the order of a look at
 * every communicator); *n of them, NULL when none. */
const struct an_membership *an_memberships_of(struct an_memberships *ms, size_t proc, size_t *n);
void an_memberships_free(struct an_memberships *ms);

/* ---- what CUDA graphs execute: capture id -> graph -> executable -> launches ---- */

/* A call recorded while its stream was captured. */
struct an_captured {
    struct shp_event e;
    struct an_ref ref;
};

/* One capture of one process, with what it captured in capture order. */
struct an_graph {
    uint32_t proc;
    uint64_t capture, graph; /* capture id; the graph cudaStreamEndCapture returned (0: none) */
    struct an_captured *calls;
    size_t n, cap;
};

struct an_graphs {
    struct an_graph *v;
    size_t n, cap;
    struct an_exec {
        uint32_t proc;
        uint64_t exec;
        size_t graph; /* index in v */
    } * execs;
    size_t nexecs, cap_execs;
    uint64_t *launches; /* by process: its graph launches so far */
    size_t nlaunches;
};

/* keep for an_graphs_event: every call that moves bytes (collectives, p2p, copies). */
#define AN_KEEP_CALLS 0x100u
/* Follow the graph records of s and keep the calls of record type `keep` (SHP_REC_COLL or
 * SHP_REC_P2P, or AN_KEEP_CALLS) issued during a capture (not one NCCL refused: an_refused).
 * Returns true when s is such a captured call: it executes nothing by itself, the caller skips
 * it. Out of memory loses the call silently. */
bool an_graphs_event_of(struct an_graphs *g, const struct an_step *s, unsigned keep);
/* an_graphs_event_of, with the calls that are neither captured nor graph records passed by
 * inline. */
static inline bool an_graphs_event(struct an_graphs *g, const struct an_step *s, unsigned keep)
{
    /* Most calls are neither captured nor graph records: every pass that follows graphs asks
     * for every event. */
    if (!(s->e->flags & SHP_EV_CAPTURED) && s->e->type != SHP_REC_GRAPH)
        return false;
    return an_graphs_event_of(g, s, keep);
}
/* For a cudaGraphLaunch step: the capture it replays, and in *replay the launch's number
 * among the process's graph launches, from 1; NULL for any other step or an executable whose
 * graph the trace does not show. */
struct an_graph *an_graphs_launch_of(struct an_graphs *g, const struct an_step *s,
                                     uint64_t *replay);
/* an_graphs_launch_of, with the events that are not graph records passed by inline. */
static inline struct an_graph *an_graphs_launch(struct an_graphs *g, const struct an_step *s,
                                                uint64_t *replay)
{
    return s->e->type == SHP_REC_GRAPH ? an_graphs_launch_of(g, s, replay) : NULL;
}
/* The entry of a call that a replay executed. */
struct an_entry an_replay_entry(const struct an_captured *c, const struct an_step *launch,
                                uint64_t replay);
void an_graphs_free(struct an_graphs *g);

/* A FIFO of entries (a ring buffer). Its capacity is a power of two, so that a place is a mask,
 * not a division: the alignment pass looks at every member's head for every collective. */
struct an_queue {
    struct an_entry *v;
    size_t head, n, cap;
};
/* The i-th entry from the head (i < n). */
static inline struct an_entry *an_queue_at(struct an_queue *q, size_t i)
{
    return &q->v[(q->head + i) & (q->cap - 1)];
}
/* an_queue_push into a full queue: its capacity doubled first. */
int an_queue_push_grow(struct an_queue *q, const struct an_entry *e);
/* 0, or -1 when out of memory (q unchanged). Inline while there is room: every collective is
 * pushed, and the call was a tenth of the alignment pass. */
static inline int an_queue_push(struct an_queue *q, const struct an_entry *e)
{
    if (q->n == q->cap)
        return an_queue_push_grow(q, e);
    q->v[(q->head + q->n) & (q->cap - 1)] = *e;
    q->n++;
    return 0;
}
/* Drop the head; q must not be empty. */
static inline void an_queue_pop(struct an_queue *q)
{
    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
}

/* A table of pointers with an open-addressing index from 64-bit keys to positions. */
struct an_table {
    void **v;
    size_t n, cap;
    size_t *slots; /* position + 1, 0 for empty */
    size_t nslots;
    uint64_t (*key)(const void *item);
};
uint64_t an_mix(uint64_t h);
/* The item with key k, or NULL. */
void *an_table_get(const struct an_table *t, uint64_t k);
/* Add item (whose key is not in t yet); 0, or -1 when out of memory (item not added). */
int an_table_add(struct an_table *t, void *item);
/* Frees the table's arrays, not the items. */
void an_table_free(struct an_table *t);

#endif
