/* shapetrace analyze: what the passes share. The traces are read once, merged by time, and each
 * event is handed to the passes as it comes (load -> align collectives, match p2p, check buffers
 * -> order -> report); a pass keeps only what is still open (collectives not yet seen on every
 * member, unmatched sends), so memory follows the ranks and the open collectives, not the
 * number of events. */
#ifndef SHAPETRACE_ANALYZE_H
#define SHAPETRACE_ANALYZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "stacks.h"
#include "trace_read.h"

/* Finding kinds: DESIGN's list, extended at the end (never reorder). */
enum an_kind {
    AN_OP_MISMATCH,
    AN_COUNT_MISMATCH,
    AN_DTYPE_MISMATCH,
    AN_REDOP_MISMATCH,
    AN_ROOT_MISMATCH,
    AN_MISSING_COLLECTIVE,
    AN_P2P_SIZE_MISMATCH,
    AN_P2P_DTYPE_MISMATCH,
    AN_P2P_UNMATCHED,
    AN_BUFFER_OVERRUN,
    AN_SHAPE_MISMATCH,
    AN_EXPECTATION_VIOLATION,
    AN_MISSING_RANK, /* a communicator member that no trace provides */
    AN_KIND_COUNT
};
extern const char *const an_kind_names[AN_KIND_COUNT];

/* Where an event lives, so the report can decode it in full later. */
struct an_ref {
    uint32_t proc;
    uint64_t index; /* the event's index in its file, as dump numbers them */
    const struct shp_rec *rec;
    unsigned type;
};

struct an_proc {
    struct shp_trace t;
    struct shp_stacks *stacks; /* loaded when the report needs call sites */
    int rank;                  /* global rank, -1 if unknown */
    uint64_t off, index;
    uint64_t released; /* bytes of the mapping given back (an_load.c) */
    bool ended;
    /* the next event, read ahead for the merge */
    struct shp_event next;
    struct an_ref next_ref;
    bool has_next;
    /* the last call seen, for the hang report */
    struct an_ref last;
    bool last_pending;
    /* device allocations: sorted by start */
    struct an_alloc *allocs;
    size_t nallocs, allocs_cap;
};

struct an_alloc {
    uint64_t ptr, size;
};

#define AN_MAX_EVENTS 8
#define AN_MAX_LINEAGE 8
struct an_finding {
    enum an_kind kind;
    bool error;    /* severity: error, else warning */
    uint64_t comm; /* 0 if none */
    uint64_t seq;  /* SHP_NONE if none */
    int ranks[16]; /* culprit global ranks */
    int nranks;
    bool more_ranks; /* more culprits than fit */
    char summary[1024];
    struct an_ref events[AN_MAX_EVENTS]; /* the diverging calls first */
    int nevents;
    struct an_ref expected; /* a majority call, if any (ref.rec NULL if none) */
    bool has_expected;
    uint64_t consequences;                 /* later disagreements on the same communicator */
    struct an_ref lineage[AN_MAX_LINEAGE]; /* producers of what was read, nearest first */
    int nlineage;
    uint64_t t_ns;  /* earliest time among its events */
    uint64_t order; /* causal position, see an_order */
};

struct an_dim {
    char name[32];
    uint64_t value;
};

struct an_ctx {
    struct an_proc *procs;
    size_t nprocs;
    struct an_finding *findings;
    size_t nfindings, findings_cap;
    struct an_dim dims[16];
    int ndims;
    /* summary figures */
    uint64_t events, collectives;
    struct an_comm_tab *comms;  /* an_align.c */
    struct an_p2p_tab *p2p;     /* an_align.c */
    struct an_lineage *lineage; /* an_lineage.c */
    struct an_expect *expect;   /* an_expect.c */
    uint64_t bytes_total, bytes_done;
};

/* an_load.c: open the inputs (files or directories); 0, or -1 after printing one line. */
int an_load(struct an_ctx *ctx, char **paths, int npaths);
/* The next event in time order across all processes; false at the end. */
bool an_next(struct an_ctx *ctx, struct an_proc **proc, struct shp_event *e, struct an_ref *ref);
void an_unload(struct an_ctx *ctx);

/* an_align.c: collectives aligned by (communicator, seq), p2p matched in order. */
void an_align_init(struct an_ctx *ctx);
void an_align_event(struct an_ctx *ctx, struct an_proc *p, const struct shp_event *e,
                    const struct an_ref *ref);
void an_align_proc_ended(struct an_ctx *ctx, struct an_proc *p);
void an_align_finish(struct an_ctx *ctx);
void an_align_free(struct an_ctx *ctx);
/* For the report: per communicator size and members, and the hang wavefront. */
size_t an_comm_count(const struct an_ctx *ctx);
void an_comm_info(const struct an_ctx *ctx, size_t i, uint64_t *id, int *nranks,
                  uint64_t *collectives, int *ranks, int max_ranks, int *nmembers);

/* an_lineage.c: who wrote what each call reads; consumers that cut a region across its rows. */
void an_lineage_init(struct an_ctx *ctx);
/* Returns the producer (region + 1) of most of what the event read, 0 if none. */
uint32_t an_lineage_event(struct an_ctx *ctx, struct an_proc *p, const struct shp_event *e,
                          const struct an_ref *ref);
/* Fill f's lineage with the producer chain from region (+1) back to its origin. */
void an_lineage_chain(struct an_ctx *ctx, struct an_finding *f, uint32_t region);
/* Fill f's lineage with the producers of what the event last given to an_lineage_event read. */
void an_lineage_current(struct an_ctx *ctx, struct an_finding *f);
/* Run the lineage and expectation passes over one process's trace, from its start. */
void an_lineage_process(struct an_ctx *ctx, uint32_t proc);
void an_lineage_finish(struct an_ctx *ctx);
void an_lineage_free(struct an_ctx *ctx);

/* an_expect.c: --expect FILE. Load returns 0, or -1 after printing one line. */
int an_expect_load(struct an_ctx *ctx, const char *path);
void an_expect_event(struct an_ctx *ctx, struct an_proc *p, const struct shp_event *e,
                     const struct an_ref *ref);
void an_expect_finish(struct an_ctx *ctx);
/* For parallel lineage workers: a private copy of the expectations, merged back afterwards
 * (findings of `from` must already be appended to `into` from finding_base on). */
int an_expect_clone(const struct an_ctx *from, struct an_ctx *to);
void an_expect_merge(struct an_ctx *into, const struct an_ctx *from, size_t finding_base);
void an_expect_free(struct an_ctx *ctx);

/* an_buffers.c: byte ranges against the allocations that hold them. */
void an_buffers_event(struct an_ctx *ctx, struct an_proc *p, const struct shp_event *e,
                      const struct an_ref *ref);
/* Keep p's allocation list up to date without checking anything (the lineage pass). */
void an_buffers_track(struct an_proc *p, const struct shp_event *e);

/* an_report.c */
struct an_finding *an_add_finding(struct an_ctx *ctx, enum an_kind kind, bool error);
void an_order(struct an_ctx *ctx);
void an_report_text(struct an_ctx *ctx, bool color);
void an_report_json(struct an_ctx *ctx);
/* The largest extent made of the --dim values (a dim, or a product or quotient of two) that
 * divides count, with its name ("hidden/tp"); *best 0 if none. */
void an_factor(const struct an_ctx *ctx, uint64_t count, uint64_t *best, char *name, size_t len);
/* The innermost frame of the call at r ("generate (hidden.c:63)"). */
void an_site(struct an_ctx *ctx, const struct an_ref *r, char *out, size_t len);
/* Format a count as a shape when the --dim values make it factor ("[512, hidden/tp]"). */
void an_shape(const struct an_ctx *ctx, uint64_t count, char *out, size_t len);

#endif
