/* shapetrace analyze: the finding store. Passes add findings; the store puts them in causal
 * order and names what they are about (shapes from the --dim values, call sites). */
#ifndef SHAPETRACE_FINDINGS_H
#define SHAPETRACE_FINDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/lib/event.h"

/* Finding kinds: the list of docs/CONTRACTS.md, extended at the end (never reorder). */
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
    AN_STALE_READ,   /* a read past what the latest graph replay wrote into its buffer */
    AN_KIND_COUNT    /* also marks a finding dropped by an_findings_compact */
};
extern const char *const an_kind_names[AN_KIND_COUNT];

/* Where an event lives, so the report can decode it in full later. */
struct an_ref {
    uint32_t proc;
    uint64_t index; /* the event's index in its file, as dump numbers them */
    const struct shp_rec *rec;
    unsigned type;
};

#define AN_MAX_EVENTS 8
#define AN_MAX_LINEAGE 8
#define AN_MAX_RANKS 16
struct an_finding {
    enum an_kind kind;
    bool error;              /* severity: error, else warning */
    uint64_t comm;           /* 0 if none */
    uint64_t seq;            /* SHP_NONE if none */
    uint64_t position;       /* collectives: positions retired on comm before it (executed
                                order, replays included); SHP_NONE for other findings */
    int waits_on;            /* p2p_unmatched: the rank that never made the matching call */
    int ranks[AN_MAX_RANKS]; /* culprit global ranks */
    /* each one's rank in comm; -1 where unknown */
    int comm_ranks[AN_MAX_RANKS];
    int nranks;
    char summary[1024];
    struct an_ref events[AN_MAX_EVENTS]; /* the diverging calls first */
    int nevents;
    const char *labels[AN_MAX_EVENTS]; /* what each event is, when not plain (static text) */
    struct an_ref expected;            /* a majority call, if any (ref.rec NULL if none) */
    bool has_expected;
    uint64_t consequences;                 /* later disagreements on the same communicator */
    struct an_ref lineage[AN_MAX_LINEAGE]; /* producers of what was read, nearest first */
    int nlineage;
    uint64_t t_ns;  /* earliest time among its events */
    uint64_t order; /* causal position, see an_findings_order */
};

struct an_findings {
    struct an_finding *v;
    size_t n, cap;
};

/* A new finding, zeroed but for kind, severity and seq (SHP_NONE); NULL when out of memory.
 * Pointers into the store are valid until the next add. */
struct an_finding *an_finding_add(struct an_findings *fs, enum an_kind kind, bool error);
/* Add a culprit rank once; ranks past AN_MAX_RANKS are not kept. */
void an_finding_rank(struct an_finding *f, int rank);
/* The same, with the rank's rank in the finding's communicator (-1: unknown). */
void an_finding_rank_in(struct an_finding *f, int rank, int comm_rank);
/* Add a diverging call (up to AN_MAX_EVENTS) made at t_ns; f->t_ns becomes the earliest. */
void an_finding_event(struct an_finding *f, const struct an_ref *ref, uint64_t t_ns);
/* Append the findings of `from` (a worker's) to fs; returns the index of the first, or
 * SIZE_MAX when out of memory (then none were added). */
size_t an_findings_append(struct an_findings *fs, const struct an_findings *from);
/* Drop the findings marked AN_KIND_COUNT. */
void an_findings_compact(struct an_findings *fs);
/* Set each finding's order: on one communicator a lower executed position comes first
 * whatever the clocks say; an unmatched send or receive comes after another finding that
 * names the rank it waits on (that rank was held up there); otherwise the earlier time, then
 * the order they were added in. */
void an_findings_order(struct an_findings *fs);
/* The finding at causal position `order`, or NULL. */
const struct an_finding *an_findings_nth(const struct an_findings *fs, size_t order);
void an_findings_free(struct an_findings *fs);

/* "0, 1, 2" into out, with ", ..." when more is set. */
void an_rank_list(const int *ranks, int n, bool more, char *out, size_t len);

/* Model dimensions from --dim and the expectation file. */
struct an_dim {
    char name[32];
    uint64_t value;
};
struct an_dims {
    struct an_dim v[16];
    int n;
};

/* The largest extent made of the dims (a dim, or a product or quotient of two) that divides
 * count, with its name ("hidden/tp"); *best 0 if none. */
void an_factor(const struct an_dims *d, uint64_t count, uint64_t *best, char *name, size_t len);
/* A count as a shape when the dims factor it ("[512, hidden/tp]"), else "". */
void an_shape(const struct an_dims *d, uint64_t count, char *out, size_t len);
/* The same, for one side of a comparison with other: in the largest extent that factors both
 * counts when there is one, so that both sides read in the same factoring. */
void an_shape_as(const struct an_dims *d, uint64_t count, uint64_t other, char *out, size_t len);

struct an_ctx;
/* The frames of stack `stack` of process `proc` (shp_stacks_frames), loaded and symbolized on
 * first use: any thread may call it, and this and an_site are the only ways the passes read
 * stacks (the session's lock keeps libdw and the shared texts to one thread at a time). */
const char *const *an_frames(struct an_ctx *ctx, uint32_t proc, uint32_t stack, size_t *n);
/* Decode the call at r; false if r holds none. */
bool an_decode(struct an_ctx *ctx, const struct an_ref *r, struct shp_event *e);
/* The call site of r as a person wrote it: the first frame of the application's or the model's
 * code under the session's site rule ("generate (hidden.c:63)"), else "an unknown site". Any
 * thread. */
void an_site(struct an_ctx *ctx, const struct an_ref *r, char *out, size_t len);
/* "replay N of the graph launched at SITE (captured at SITE)" for a call that replay N of the
 * launch at `launch` executed, `captured` being the call as recorded at its capture. */
void an_replay_note(struct an_ctx *ctx, const struct an_ref *launch, uint64_t replay,
                    const struct an_ref *captured, char *out, size_t len);
/* Fill the comm_ranks that f does not know from its events on f->comm (a collective finding's
 * calls say each member's rank there). */
void an_finding_comm_ranks(struct an_ctx *ctx, struct an_finding *f);

#endif
