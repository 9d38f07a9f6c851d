/* shapetrace analyze: the finding store. Passes add findings; the store puts them in causal
 * order and names what they are about (shapes from the --dim values, call sites). */
#ifndef SHAPETRACE_FINDINGS_H
#define SHAPETRACE_FINDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/lib/event.h"

/* Finding kinds, listed once: X(KIND, name, severity, what) gives the enum constant AN_KIND, the
 * name of the contract, ERROR or WARNING (the severity of every finding of the kind), and the
 * "what" of docs/CONTRACTS.md's table of kinds, word for word, in the table's order
 * (tests/unit/test_findings.c compares the two). Extended at the end, never reordered. */
/* clang-format off */
#define AN_KINDS(X) \
X(OP_MISMATCH, op_mismatch, ERROR, \
  "members of a communicator called different collectives at one `seq`") \
X(COUNT_MISMATCH, count_mismatch, ERROR, \
  "... the same collective with different counts (by the op's size rule)") \
X(DTYPE_MISMATCH, dtype_mismatch, ERROR, "... with different datatypes") \
X(REDOP_MISMATCH, redop_mismatch, ERROR, "... with different reductions") \
X(ROOT_MISMATCH, root_mismatch, ERROR, "... with different roots") \
X(MISSING_COLLECTIVE, missing_collective, ERROR, \
  "a rank skipped a collective, or ended (hung, died, finished) before one that the others " \
  "entered, or made one more than the others (in the middle, or at the end after the others " \
  "finished normally: then it is the culprit)") \
X(P2P_SIZE_MISMATCH, p2p_size_mismatch, ERROR, "a send and its receive differ in bytes") \
X(P2P_DTYPE_MISMATCH, p2p_dtype_mismatch, WARNING, "the same bytes, in different datatypes") \
X(P2P_UNMATCHED, p2p_unmatched, ERROR, "sends or receives left without a partner") \
X(BUFFER_OVERRUN, buffer_overrun, ERROR, \
  "a call's byte range runs past the traced allocation that holds its buffer") \
X(SHAPE_MISMATCH, shape_mismatch, ERROR, \
  "a consumer cuts a region across the rows its producer wrote") \
X(EXPECTATION_VIOLATION, expectation_violation, ERROR, \
  "a call that `--expect` selects cannot have the expected shape or datatype") \
X(MISSING_RANK, missing_rank, ERROR, "a communicator member that no trace provides") \
X(STALE_READ, stale_read, ERROR, \
  "a read, executed where it was issued, runs past what the latest graph replay wrote into a " \
  "buffer into bytes an earlier replay wrote from the same start (added)") \
X(VALUE_MISMATCH, value_mismatch, ERROR, \
  "with `--values`: members of a communicator received other bytes from one all-reduce, " \
  "all-gather or broadcast (`seq` is its), or copied other bytes at their n-th copy from one " \
  "site where they had copied the same bytes before (`seq` null); `ranks` differ from the " \
  "fingerprint most ranks hold (all of them when none does); `events` are their calls, " \
  "`expected` one of the majority's; the first per communicator, later ones its `consequences` " \
  "(added)") \
X(FAILED_COLLECTIVE, failed_collective, ERROR, \
  "NCCL refused a rank's collective (`ncclInvalidArgument`, `ncclInvalidUsage`: nothing " \
  "enqueued) where the others executed theirs; the summary names the error (added)") \
X(MEMBERSHIP_CONFLICT, membership_conflict, ERROR, \
  "the traces disagree on a communicator: its size, or two processes claim one rank; both " \
  "processes are named (added)") \
X(UNTIED_CALLS, untied_calls, WARNING, \
  "a process's collectives and sends/receives that could not be tied to a communicator and its " \
  "rank in it, and so were not checked; one per process (added)") \
X(DEADLOCK, deadlock, ERROR, \
  "ranks blocked in collectives on different communicators that wait on each other around a " \
  "cycle (added)") \
X(IMPOSSIBLE_SIZE, impossible_size, ERROR, \
  "a call whose byte count, or the end of one of its buffers, does not fit in 64 bits (added)")

enum an_kind {
#define AN_X_ENUM(kind, name, severity, what) AN_##kind,
    AN_KINDS(AN_X_ENUM)
#undef AN_X_ENUM
    AN_KIND_COUNT /* also marks a finding dropped by an_findings_compact */
};
/* clang-format on */
/* Each kind's name ("count_mismatch"), whether it is an error (else a warning), and its one-line
 * description as docs/CONTRACTS.md gives it. */
extern const char *const an_kind_names[AN_KIND_COUNT];
extern const bool an_kind_is_error[AN_KIND_COUNT];
extern const char *const an_kind_whats[AN_KIND_COUNT];

/* Where an event lives, so the report can decode it in full later. (24 bytes, in this order:
 * the lineage pass copies chains of them for every write.) */
struct an_ref {
    const struct shp_rec *rec;
    uint64_t index; /* the event's index in its file, as dump numbers them */
    uint32_t proc;
    unsigned type;
};

#define AN_MAX_EVENTS 8
#define AN_MAX_LINEAGE 8
#define AN_MAX_RANKS 16
struct an_finding {
    enum an_kind kind;
    bool error;              /* severity: an_kind_is_error[kind] */
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

/* A new finding, zeroed but for kind, its kind's severity and seq (SHP_NONE); NULL when out of
 * memory. Pointers into the store are valid until the next add. */
struct an_finding *an_finding_add(struct an_findings *fs, enum an_kind kind);
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
