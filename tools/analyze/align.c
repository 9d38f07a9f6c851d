/* shapetrace analyze, alignment pass: line the ranks up. A communicator's collectives are
 * compared place by place (the k-th call each member executed, an_place): a place is compared
 * once every member has reached it, ended, or is not known there (traced from a later place on,
 * or its trace lost its end). The culprits are the ranks that differ from the majority (all of
 * them on a tie). A rank that skipped or added one collective, or whose call NCCL refused, is
 * recognised by looking ahead, reported once, and realigned; after a divergence that cannot be
 * realigned, the rest of that communicator is counted as its consequence instead of reported
 * again. Calls that cannot be tied to a communicator and a place in it are counted and
 * reported, and so are traces that contradict each other about a communicator's members. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"
#include "tools/lib/out.h"

/* A call NCCL refused at the place it would have taken (an_refused). */
struct refusal {
    uint64_t at;
    struct an_entry en;
    int result;
};
#define MAX_REFUSALS 4

struct an_member {
    int proc;            /* -1 until a trace claims this rank */
    bool ended;          /* its trace ended, or it finalized or destroyed the communicator */
    bool unknown_after;  /* its trace lost its end (cap, switched off, dormant at the end): after
                            its last call its absence proves nothing */
    bool started;        /* a call has placed it */
    uint64_t head, tail; /* places of the queue's head and after its last entry (head == tail:
                            empty, and head is where its next call goes) */
    int64_t shift;       /* realignments so far, added to an_place's places */
    struct an_place place;
    struct an_queue q;   /* what it executed; a run of places it is not known at is one entry of
                            op SHP_OP_NONE whose count is the run's length */
    struct an_ref last;  /* its last call executed on this communicator (rec NULL: none) */
    struct an_ref claim; /* the first record that said whose it is */
    struct refusal refused[MAX_REFUSALS];
    int nrefused;
};

struct an_comm {
    uint64_t id;
    size_t index; /* its position in the pass's table */
    int nranks;
    struct an_member *m;
    uint64_t at;          /* the place compared next */
    uint64_t collectives; /* places compared */
    bool diverged;
    /* Whether any member has refusals, or a run of unknown places queued: the common case
     * retires a place without looking at every member for them. */
    bool any_refused, any_gap;
    unsigned agree_run; /* places in a row where every member agreed */
    size_t finding;     /* the finding later disagreements are counted against */
    /* The member that the last look at place wait_at found waiting: those before it were not,
     * and stay so while the place is open (a member stops waiting when its call comes or its
     * trace ends; only on_extra, which takes a call back, undoes that). The look for a member
     * that has not reached the place starts there: from the first member each time, it cost
     * as many looks per place as members squared. */
    uint64_t wait_at;
    int wait_from;
};

/* A process whose calls on a communicator are not lined up: its traces contradict another's. */
struct conflict {
    uint64_t comm;
    int proc;
};

struct align {
    struct an_table comms;   /* of struct an_comm, by id */
    struct an_graphs graphs; /* what each process's graph launches execute */
    struct conflict *conflicts;
    size_t nconflicts, cap_conflicts;
    /* per process: calls that could not be tied to a communicator, and the first of them */
    uint64_t *untied;
    struct an_ref *untied_first;
    uint64_t *untied_comm;
    size_t nprocs;
    /* per process: the communicator of its last call, which its next call is most often on
     * too (the table's lookup for every call was a tenth of the pass's instructions) */
    struct an_comm **last;
    struct an_memberships members; /* by process, the members it claimed */
};

static uint64_t comm_key(const void *item)
{
    return ((const struct an_comm *)item)->id;
}

static struct an_member *new_members(int nranks)
{
    struct an_member *m = calloc((size_t)nranks, sizeof(*m));
    for (int i = 0; m && i < nranks; i++) {
        m[i].proc = -1;
        an_place_init(&m[i].place);
    }
    return m;
}

/* The communicator `id`, created on first sight; a communicator first seen without its size
 * (a destroy record) gets its members when a record gives the size. NULL when its size is
 * unknown. */
static struct an_comm *comm_get(struct align *A, uint64_t id, int nranks)
{
    struct an_comm *c = an_table_get(&A->comms, id);
    if (c) {
        if (c->nranks <= 0 && nranks > 0) {
            if (!(c->m = new_members(nranks)))
                return NULL;
            c->nranks = nranks;
        }
        return c->nranks > 0 ? c : NULL;
    }
    if (!id)
        return NULL;
    c = calloc(1, sizeof(*c));
    if (!c || (nranks > 0 && !(c->m = new_members(nranks)))) {
        free(c);
        return NULL;
    }
    c->id = id;
    c->nranks = nranks > 0 ? nranks : 0;
    c->finding = SIZE_MAX;
    if (an_table_add(&A->comms, c) < 0) {
        free(c->m);
        free(c);
        return NULL;
    }
    c->index = A->comms.n - 1;
    return c->nranks > 0 ? c : NULL;
}

static int global_rank(const struct an_ctx *ctx, const struct an_comm *c, int member)
{
    int p = c->m[member].proc;
    return p >= 0 && ctx->procs[p].sp->rank >= 0 ? ctx->procs[p].sp->rank : member;
}

/* ---- comparing one place ---- */

/* The fields compared, most fundamental first: the first that differs names the finding. */
enum field { F_OP, F_DTYPE, F_COUNT, F_REDOP, F_ROOT, F_NONE };
static const enum an_kind kind_of_field[] = {AN_OP_MISMATCH, AN_DTYPE_MISMATCH, AN_COUNT_MISMATCH,
                                             AN_REDOP_MISMATCH, AN_ROOT_MISMATCH};

static uint64_t field_value(const struct an_entry *e, enum field f)
{
    switch (f) {
    case F_OP:
        /* An op and its alias are one operation for the peers (ncclBcast is ncclBroadcast in
         * place). */
        return shp_op_same(e->op);
    case F_DTYPE:
        return (uint64_t)e->dtype;
    case F_COUNT:
        return e->count;
    case F_REDOP:
        return (uint64_t)(int64_t)e->redop;
    case F_ROOT:
        return (uint64_t)(int64_t)e->root;
    default:
        return 0;
    }
}

static enum field first_difference(const struct an_entry *a, const struct an_entry *b)
{
    for (enum field f = F_OP; f < F_NONE; f++)
        if (field_value(a, f) != field_value(b, f))
            return f;
    return F_NONE;
}

/* A rank's signature against the majority's: same op, dtype, count, redop, root (the fields of
 * first_difference, compared directly: every member's head is compared at every place). */
static bool same(const struct an_entry *a, const struct an_entry *b)
{
    return a->count == b->count && a->dtype == b->dtype && a->redop == b->redop &&
           a->root == b->root && (a->op == b->op || shp_op_same(a->op) == shp_op_same(b->op));
}

/* other: the count of the call e is compared with (0: none), so both read in one factoring. */
static void describe(const struct an_ctx *ctx, const struct an_entry *e, enum field f,
                     uint64_t other, char *out, size_t len)
{
    char shape[96];
    switch (f) {
    case F_OP:
        snprintf(out, len, "%s", shp_op_name(e->op));
        break;
    case F_DTYPE:
        snprintf(out, len, "%s with %s", shp_op_name(e->op), shp_dtype_name((unsigned)e->dtype));
        break;
    case F_COUNT:
        an_shape_as(&ctx->dims, e->count, other, shape, sizeof(shape));
        snprintf(out, len, "%s with count %" PRIu64 "%s%s", shp_op_name(e->op), e->count,
                 shape[0] ? " " : "", shape);
        break;
    case F_REDOP:
        snprintf(out, len, "%s with %s", shp_op_name(e->op),
                 e->redop >= 0 ? shp_redop_name((unsigned)e->redop) : "?");
        break;
    case F_ROOT:
        snprintf(out, len, "%s with root %d", shp_op_name(e->op), e->root);
        break;
    default:
        snprintf(out, len, "%s", shp_op_name(e->op));
    }
}

static void add_entry(struct an_finding *f, const struct an_entry *e)
{
    an_finding_event(f, &e->ref, e->t_ns);
    if (e->launch.rec && f->nevents < AN_MAX_EVENTS) {
        f->labels[f->nevents] = "the graph launch that executed it";
        f->events[f->nevents++] = e->launch;
    }
}

/* " in replay N of the graph launched at SITE (captured at SITE)" for a replayed call. */
static void replay_note(struct an_ctx *ctx, const struct an_entry *e, char *out, size_t len)
{
    out[0] = 0;
    if (!e->launch.rec)
        return;
    char ls[256], cs[256];
    an_site(ctx, &e->launch, ls, sizeof(ls));
    an_site(ctx, &e->ref, cs, sizeof(cs));
    snprintf(out, len, " in replay %" PRIu64 " of the graph launched at %s (captured at %s)",
             e->replay, ls, cs);
}

/* Append to f's summary what replays the culprit's and the majority's calls were part of. */
static void note_replays(struct an_ctx *ctx, struct an_finding *f, int culprit,
                         const struct an_entry *ce, int maj, const struct an_entry *me)
{
    char a[600], b[600];
    replay_note(ctx, ce, a, sizeof(a));
    replay_note(ctx, me, b, sizeof(b));
    if (!a[0] && !b[0])
        return;
    size_t l = strlen(f->summary);
    snprintf(f->summary + l, sizeof(f->summary) - l, "; rank %d executed it%s, rank %d%s", culprit,
             a[0] ? a : " eagerly", maj, b[0] ? b : " eagerly");
}

static struct an_finding *finding_on(struct an_ctx *ctx, struct an_comm *c, enum an_kind kind,
                                     uint64_t seq)
{
    struct an_finding *f = an_finding_add(&ctx->findings, kind);
    if (!f)
        return NULL;
    f->comm = c->id;
    f->seq = seq;
    f->position = c->at;
    if (c->finding == SIZE_MAX)
        c->finding = (size_t)(f - ctx->findings.v);
    return f;
}

/* Count a disagreement after the communicator diverged against its first finding. */
static void consequence(struct an_ctx *ctx, struct an_comm *c)
{
    if (c->finding < ctx->findings.n)
        ctx->findings.v[c->finding].consequences++;
}

/* ---- a member's queue of places ---- */

static struct an_entry *head(struct an_comm *c, int member)
{
    return an_queue_at(&c->m[member].q, 0);
}

static bool is_gap(const struct an_entry *e)
{
    return e->op == SHP_OP_NONE;
}

/* Retire the member's head place. */
static void pop_head(struct an_member *m)
{
    struct an_entry *h = an_queue_at(&m->q, 0);
    m->head++;
    if (!is_gap(h) || --h->count == 0)
        an_queue_pop(&m->q);
}

/* The refusal of member m at place `at`, or NULL. */
static const struct refusal *refused_at(const struct an_member *m, uint64_t at)
{
    for (int i = 0; i < m->nrefused; i++)
        if (m->refused[i].at == at)
            return &m->refused[i];
    return NULL;
}

/* Forget the refusals before place `at`. */
static void drop_refusals(struct an_member *m, uint64_t at)
{
    int k = 0;
    for (int i = 0; i < m->nrefused; i++)
        if (m->refused[i].at >= at)
            m->refused[k++] = m->refused[i];
    m->nrefused = k;
}

/* How far ahead a realignment looks: identical consecutive collectives (every layer's
 * all-reduce) make one place of look-ahead ambiguous. */
#define AN_LOOK 3

/* The frames of the call at r (an_frames: the session's, safe beside the workers); NULL when
 * unknown. */
static const char *const *frames_of(struct an_ctx *ctx, const struct an_ref *r, size_t *n)
{
    struct shp_event e;
    *n = 0;
    if (!an_decode(ctx, r, &e) || !e.stack)
        return NULL;
    return an_frames(ctx, r->proc, e.stack, n);
}

/* Whether two calls were made from the same place, every frame alike (an SPMD program makes a
 * collective from the same line on every rank; a rarely taken branch makes it from another). */
static bool same_site(struct an_ctx *ctx, const struct an_entry *a, const struct an_entry *b)
{
    size_t na, nb;
    const char *const *fa = frames_of(ctx, &a->ref, &na);
    const char *const *fb = frames_of(ctx, &b->ref, &nb);
    if (!fa || !fb || na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(fa[i], fb[i]))
            return false;
    return true;
}

/* How the entries of a from ia line up with those of b from ib, for up to AN_LOOK places or
 * until one runs out or reaches a place it is not known at: 0 when a call differs or nothing
 * could be compared, 1 when the calls agree, 2 when their call sites agree as well. */
static int lineup(struct an_ctx *ctx, struct an_queue *a, size_t ia, struct an_queue *b, size_t ib)
{
    size_t k = 0;
    bool sites = true;
    for (; k < AN_LOOK && ia + k < a->n && ib + k < b->n; k++) {
        struct an_entry *x = an_queue_at(a, ia + k), *y = an_queue_at(b, ib + k);
        if (is_gap(x) || is_gap(y))
            break;
        if (!same(x, y))
            return 0;
        sites = sites && same_site(ctx, x, y);
    }
    return k == 0 ? 0 : sites ? 2 : 1;
}

/* ---- the state of one place, classified ---- */

enum outcome {
    O_WAIT,       /* a member has not reached it yet (or nothing is open) */
    O_WAIT_AHEAD, /* a disagreement that needs the next places to be explained */
    O_NOTHING,    /* no member is known to have executed it: nothing to compare */
    O_AGREE,      /* every member known there made the same call */
    O_ENDED,      /* the members there agree; others ended without reaching it */
    O_SKIPPED,    /* one rank skipped this collective (or NCCL refused its call there): its
                     call matches the others' next */
    O_EXTRA,      /* one rank made one collective more: its next matches the others' call */
    O_TIE,        /* the members disagree with no majority */
    O_MISMATCH,   /* some members differ from the majority */
};

struct position {
    int *present, np; /* members with a call here */
    int *absent, na;  /* members that ended before it */
    int maj;          /* a member that made the majority's call; -1 on a tie */
    int culprit;      /* the one rank that differs (O_SKIPPED, O_EXTRA) */
};

enum mstate { M_PRESENT, M_ABSENT, M_UNKNOWN, M_WAIT };

static enum mstate state_at(const struct an_comm *c, const struct an_member *m, uint64_t at)
{
    if (m->q.n)
        return m->head > at || (c->any_gap && is_gap(an_queue_at((struct an_queue *)&m->q, 0)))
                   ? M_UNKNOWN
                   : M_PRESENT;
    if (m->started && m->head > at)
        return M_UNKNOWN; /* traced from a later place on */
    if (!m->ended)
        return M_WAIT;
    return m->unknown_after ? M_UNKNOWN : M_ABSENT;
}

/* Boyer-Moore vote over the heads, then a check that the candidate has a strict majority. */
static int majority(struct an_comm *c, const struct position *pos, int skip)
{
    int cand = -1, votes = 0, n = 0;
    for (int i = 0; i < pos->np; i++) {
        int r = pos->present[i];
        if (r == skip)
            continue;
        n++;
        if (votes == 0) {
            cand = r;
            votes = 1;
        } else if (same(head(c, r), head(c, cand))) {
            votes++;
        } else {
            votes--;
        }
    }
    if (cand < 0)
        return -1;
    int agree = 0;
    for (int i = 0; i < pos->np; i++)
        if (pos->present[i] != skip)
            agree += same(head(c, pos->present[i]), head(c, cand));
    return agree * 2 <= n ? -1 : cand;
}

/* A tie in which one member's call was refused here, and the others agree: that member's next
 * call took this place (as NCCL sees it), so it is realigned as if it had skipped it. */
static bool refused_tie(struct an_comm *c, struct position *pos)
{
    int who = -1;
    for (int i = 0; i < pos->np; i++)
        if (refused_at(&c->m[pos->present[i]], c->at)) {
            if (who >= 0)
                return false;
            who = pos->present[i];
        }
    if (who < 0 || pos->np < 2)
        return false;
    int maj = majority(c, pos, who);
    if (maj < 0)
        return false;
    for (int i = 0; i < pos->np; i++)
        if (pos->present[i] != who && !same(head(c, pos->present[i]), head(c, maj)))
            return false;
    pos->maj = maj;
    pos->culprit = who;
    return true;
}

/* No member is known to have executed the places from c->at on until the next one some member
 * is known at: jump there at once (a seq may be anything in a damaged trace, so one place at a
 * time could take forever), a run of unknown places at a queue's head being used up as far. */
static void skip_unknown(struct an_comm *c)
{
    uint64_t next = UINT64_MAX;
    for (int i = 0; i < c->nranks; i++) {
        const struct an_member *m = &c->m[i];
        uint64_t at = m->head;
        if (m->q.n && is_gap(an_queue_at((struct an_queue *)&m->q, 0)))
            at = m->head + an_queue_at((struct an_queue *)&m->q, 0)->count;
        if ((m->q.n || (m->started && !m->ended)) && at > c->at && at < next)
            next = at;
    }
    if (next == UINT64_MAX)
        next = c->at + 1;
    for (int i = 0; i < c->nranks; i++) {
        struct an_member *m = &c->m[i];
        struct an_entry *h = m->q.n ? an_queue_at(&m->q, 0) : NULL;
        if (h && is_gap(h) && m->head < next) {
            uint64_t k = next - m->head < h->count ? next - m->head : h->count;
            m->head += k;
            if (!(h->count -= k))
                an_queue_pop(&m->q);
        }
        drop_refusals(m, next);
    }
    c->at = next;
}

static bool has_entries(const struct an_comm *c)
{
    for (int i = 0; i < c->nranks; i++)
        if (c->m[i].q.n || (c->m[i].started && !c->m[i].ended && c->m[i].head > c->at))
            return true;
    return false;
}

static enum outcome classify(struct an_ctx *ctx, struct an_comm *c, struct position *pos)
{
    for (int i = c->wait_at == c->at ? c->wait_from : 0; i < c->nranks; i++)
        if (state_at(c, &c->m[i], c->at) == M_WAIT) {
            c->wait_at = c->at;
            c->wait_from = i;
            return O_WAIT;
        }
    pos->np = pos->na = 0;
    for (int i = 0; i < c->nranks; i++) {
        switch (state_at(c, &c->m[i], c->at)) {
        case M_PRESENT:
            pos->present[pos->np++] = i;
            break;
        case M_ABSENT:
            pos->absent[pos->na++] = i;
            break;
        case M_UNKNOWN:
            break;
        case M_WAIT:
            return O_WAIT;
        }
    }
    if (pos->np == 0)
        return has_entries(c) ? O_NOTHING : O_WAIT;
    /* The common case (all equal) costs one pass. */
    struct an_entry *h0 = head(c, pos->present[0]);
    bool all_same = true;
    for (int i = 1; i < pos->np && all_same; i++)
        all_same = same(head(c, pos->present[i]), h0);
    pos->maj = pos->present[0];
    if (all_same)
        return pos->na ? O_ENDED : O_AGREE;
    if ((pos->maj = majority(c, pos, -1)) < 0)
        return !c->diverged && refused_tie(c, pos) ? O_SKIPPED : O_TIE;
    int nculprits = 0;
    for (int i = 0; i < pos->np; i++)
        if (!same(head(c, pos->present[i]), head(c, pos->maj))) {
            pos->culprit = pos->present[i];
            nculprits++;
        }
    if (c->diverged || nculprits != 1)
        return O_MISMATCH;
    /* A culprit whose call NCCL refused here: its next call took this place. */
    if (refused_at(&c->m[pos->culprit], c->at))
        return O_SKIPPED;
    /* One culprit: did it skip a collective (its call matches the majority's next) or add one
     * (its next matches the majority's call)? That needs the next entries, so wait for them
     * unless the member ended. Prefer the explanation whose call sites agree too; among equals,
     * the one that assumes least: a plain disagreement when what follows lines up, then a
     * skipped collective, then an added one. */
    struct an_member *cm = &c->m[pos->culprit], *mm = &c->m[pos->maj];
    if ((mm->q.n < AN_LOOK + 1 && !mm->ended) || (cm->q.n < AN_LOOK + 1 && !cm->ended))
        return O_WAIT_AHEAD;
    int stay = lineup(ctx, &cm->q, 1, &mm->q, 1), skip = lineup(ctx, &cm->q, 0, &mm->q, 1),
        extra = lineup(ctx, &cm->q, 1, &mm->q, 0);
    if (stay == 2 || (stay && skip < 2 && extra < 2))
        return O_MISMATCH;
    if (skip == 2 || (skip && extra < 2))
        return O_SKIPPED;
    return extra ? O_EXTRA : O_MISMATCH;
}

/* ---- one function per outcome ---- */

static void retire(struct an_ctx *ctx, struct an_comm *c, bool compared)
{
    bool left = false;
    for (int i = 0; c->any_refused && i < c->nranks; i++) {
        drop_refusals(&c->m[i], c->at + 1);
        left = left || c->m[i].nrefused;
    }
    c->any_refused = left;
    c->at++;
    if (compared) {
        c->collectives++;
        ctx->collectives++;
    }
}

static void pop_present(struct an_comm *c, const struct position *pos)
{
    for (int i = 0; i < pos->np; i++)
        pop_head(&c->m[pos->present[i]]);
}

/* The members not present that are known here have their head later: move the places of
 * those that are not present and not absent along with the comparison. */
static void pass_unknown(struct an_comm *c)
{
    for (int i = 0; c->any_gap && i < c->nranks; i++) {
        struct an_member *m = &c->m[i];
        if (m->q.n && is_gap(an_queue_at(&m->q, 0)) && m->head == c->at)
            pop_head(m);
    }
}

static void on_agree(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    pop_present(c, pos);
    pass_unknown(c);
    retire(ctx, c, true);
    /* Back in step for a while: a later disagreement is a new finding. */
    if (++c->agree_run >= AN_LOOK && c->diverged) {
        c->diverged = false;
        c->finding = SIZE_MAX;
    }
}

/* NCCL's name of an error code (nccl.h's ncclResult_t). */
static const char *nccl_error(int r)
{
    static const char *const names[] = {
        "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
        "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
    return r >= 0 && r < (int)(sizeof(names) / sizeof(names[0])) ? names[r] : "an NCCL error";
}

/* The member's call at this place was refused where the others (`maj`'s call) executed it. */
static void report_refused(struct an_ctx *ctx, struct an_comm *c, int member,
                           const struct refusal *rf, const struct an_entry *maj, int nothers,
                           const struct an_entry *next)
{
    struct an_finding *f = finding_on(ctx, c, AN_FAILED_COLLECTIVE, maj->seq);
    if (!f)
        return;
    int g = global_rank(ctx, c, member);
    f->expected = maj->ref;
    f->has_expected = true;
    an_finding_rank(f, g);
    f->labels[f->nevents] = "the call NCCL refused";
    an_finding_event(f, &rf->en.ref, rf->en.t_ns);
    if (next && f->nevents < AN_MAX_EVENTS) {
        f->labels[f->nevents] = "its next collective, which took that call's place";
        add_entry(f, next);
    }
    if (maj->t_ns < f->t_ns)
        f->t_ns = maj->t_ns;
    snprintf(f->summary, sizeof(f->summary),
             "rank %d's %s #%" PRIu64 " on communicator %.8" PRIx64
             " failed with %s (error %d: NCCL enqueued nothing) where %d other rank%s executed "
             "it%s",
             g, shp_op_name(rf->en.op), maj->seq, c->id >> 32, nccl_error(rf->result), rf->result,
             nothers, nothers == 1 ? "" : "s",
             next ? "; its next collective lines up with their next one" : "");
}

static void on_skipped(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    struct an_entry *ch = head(c, pos->culprit), *mh = head(c, pos->maj);
    const struct refusal *rf = refused_at(&c->m[pos->culprit], c->at);
    if (rf) {
        report_refused(ctx, c, pos->culprit, rf, mh, pos->np - 1, ch);
    } else {
        struct an_finding *f = finding_on(ctx, c, AN_MISSING_COLLECTIVE, mh->seq);
        if (f) {
            f->expected = mh->ref;
            f->has_expected = true;
            an_finding_rank(f, global_rank(ctx, c, pos->culprit));
            add_entry(f, ch);
            f->t_ns = mh->t_ns < ch->t_ns ? mh->t_ns : ch->t_ns;
            snprintf(f->summary, sizeof(f->summary),
                     "rank %d skipped %s #%" PRIu64 " on communicator %.8" PRIx64
                     " (its next collective lines up with the others' #%" PRIu64 ")",
                     global_rank(ctx, c, pos->culprit), shp_op_name(mh->op), mh->seq, c->id >> 32,
                     mh->seq + 1);
        }
    }
    /* The others' call is retired; the culprit's lines up with their next one. */
    for (int i = 0; i < pos->np; i++)
        if (pos->present[i] != pos->culprit)
            pop_head(&c->m[pos->present[i]]);
    struct an_member *cm = &c->m[pos->culprit];
    cm->head++;
    cm->tail++;
    cm->shift++;
    pass_unknown(c);
    retire(ctx, c, true);
}

/* The members' calls at this place, grouped by `fld` against the majority's. */
static struct an_finding *report_mismatch(struct an_ctx *ctx, struct an_comm *c,
                                          const struct position *pos, enum field fld)
{
    struct an_entry *maj = head(c, pos->maj);
    uint64_t mv = field_value(maj, fld);
    struct an_finding *f = finding_on(ctx, c, kind_of_field[fld], maj->seq);
    if (!f)
        return NULL;
    f->expected = maj->ref;
    f->has_expected = true;
    int culprits[AN_MAX_RANKS] = {0}, nc = 0, others[AN_MAX_RANKS] = {0}, no = 0;
    bool more_c = false, more_o = false;
    const struct an_entry *example = NULL;
    for (int i = 0; i < pos->np; i++) {
        struct an_entry *e = head(c, pos->present[i]);
        int g = global_rank(ctx, c, pos->present[i]);
        if (field_value(e, fld) != mv) {
            an_finding_rank(f, g);
            add_entry(f, e);
            if (!example)
                example = e;
            if (nc < AN_MAX_RANKS)
                culprits[nc++] = g;
            else
                more_c = true;
        } else if (no < AN_MAX_RANKS) {
            others[no++] = g;
        } else {
            more_o = true;
        }
    }
    char a[128], b[128], ra[160], rb[160];
    describe(ctx, example, fld, maj->count, a, sizeof(a));
    describe(ctx, maj, fld, example ? example->count : 0, b, sizeof(b));
    an_rank_list(culprits, nc, more_c, ra, sizeof(ra));
    an_rank_list(others, no, more_o, rb, sizeof(rb));
    snprintf(f->summary, sizeof(f->summary),
             "rank%s %s called %s where rank%s %s called %s (communicator %.8" PRIx64
             ", collective #%" PRIu64 ")",
             nc > 1 ? "s" : "", ra, a, no > 1 ? "s" : "", rb, b, c->id >> 32, maj->seq);
    if (example)
        note_replays(ctx, f, culprits[0], example, global_rank(ctx, c, pos->maj), maj);
    return f;
}

static void on_extra(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    struct an_entry *ch = head(c, pos->culprit), *mh = head(c, pos->maj);
    struct an_finding *f = finding_on(ctx, c, AN_MISSING_COLLECTIVE, ch->seq);
    if (f) {
        int g = global_rank(ctx, c, pos->culprit);
        f->expected = mh->ref;
        f->has_expected = true;
        an_finding_rank(f, g);
        add_entry(f, ch);
        f->t_ns = mh->t_ns < ch->t_ns ? mh->t_ns : ch->t_ns;
        snprintf(f->summary, sizeof(f->summary),
                 "rank %d made one collective more than the others on communicator %.8" PRIx64
                 ": its %s #%" PRIu64 ", where the others called %s (its next collective lines "
                 "up with theirs)",
                 g, c->id >> 32, shp_op_name(ch->op), ch->seq, shp_op_name(mh->op));
        note_replays(ctx, f, g, ch, global_rank(ctx, c, pos->maj), mh);
    }
    /* Only the extra call is retired: the culprit's next lines up with this place (and the
     * culprit may wait for it again). */
    struct an_member *cm = &c->m[pos->culprit];
    c->wait_at = UINT64_MAX;
    an_queue_pop(&cm->q);
    cm->tail--;
    cm->shift--;
}

/* Whether process p finished normally: its trace closed at exit, and its last call returned
 * without an error (a rank stuck in a call that timed out or hung did not). */
static bool finished(struct an_ctx *ctx, int p)
{
    struct shp_event e;
    if (p < 0 || !shp_proc_complete(ctx->procs[p].sp))
        return false;
    return !an_decode(ctx, &ctx->procs[p].last, &e) || (e.dur_ns != SHP_NONE && e.result == 0);
}

/* The present members are fewer than the absent ones, which all finished: the present made a
 * collective more than the others at the end (a rarely taken branch on its last step). */
static bool extra_at_end(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    if (pos->np >= pos->na)
        return false;
    for (int i = 0; i < pos->na; i++)
        if (!finished(ctx, c->m[pos->absent[i]].proc))
            return false;
    return true;
}

static void report_extra_at_end(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    struct an_entry *h0 = head(c, pos->present[0]);
    struct an_finding *f = finding_on(ctx, c, AN_MISSING_COLLECTIVE, h0->seq);
    if (!f)
        return;
    int ranks[AN_MAX_RANKS], nr = 0, others[AN_MAX_RANKS], no = 0;
    for (int i = 0; i < pos->np; i++) {
        int g = global_rank(ctx, c, pos->present[i]);
        an_finding_rank(f, g);
        add_entry(f, head(c, pos->present[i]));
        if (nr < AN_MAX_RANKS)
            ranks[nr++] = g;
    }
    for (int i = 0; i < pos->na && no < AN_MAX_RANKS; i++)
        others[no++] = global_rank(ctx, c, pos->absent[i]);
    char rl[160], ol[160];
    an_rank_list(ranks, nr, pos->np > AN_MAX_RANKS, rl, sizeof(rl));
    an_rank_list(others, no, pos->na > AN_MAX_RANKS, ol, sizeof(ol));
    snprintf(f->summary, sizeof(f->summary),
             "rank%s %s made one collective more than the others on communicator %.8" PRIx64
             ": %s #%" PRIu64 ", which rank%s %s never called (they finished normally)",
             pos->np > 1 ? "s" : "", rl, c->id >> 32, shp_op_name(h0->op), h0->seq,
             pos->na > 1 ? "s" : "", ol);
}

/* A rank that never reached a collective on c but whose last call was on another communicator
 * that had already gone wrong (a finding there): it was held up there, so f, the collective it
 * never reached, comes after that finding. */
static void held_up(struct an_ctx *ctx, struct align *A, const struct an_comm *c, int proc,
                    struct an_finding *f)
{
    struct shp_event e;
    if (proc < 0 || !an_decode(ctx, &ctx->procs[proc].last, &e) || e.type != SHP_REC_COLL ||
        e.comm == c->id)
        return;
    const struct an_comm *other = an_table_get(&A->comms, e.comm);
    if (!other || other->finding >= ctx->findings.n)
        return;
    const struct an_finding *cause = &ctx->findings.v[other->finding];
    if (cause < f && cause->t_ns > f->t_ns)
        f->t_ns = cause->t_ns;
}

static void on_ended(struct an_ctx *ctx, struct align *A, struct an_comm *c,
                     const struct position *pos)
{
    struct an_entry *h0 = head(c, pos->present[0]);
    if (c->diverged) {
        consequence(ctx, c);
    } else if (extra_at_end(ctx, c, pos)) {
        report_extra_at_end(ctx, c, pos);
        c->diverged = true;
    } else {
        /* An absent member whose call NCCL refused here did not stop: it failed. */
        for (int i = 0; i < pos->na; i++) {
            const struct refusal *rf = refused_at(&c->m[pos->absent[i]], c->at);
            if (rf) {
                report_refused(ctx, c, pos->absent[i], rf, h0, pos->np, NULL);
                c->diverged = true;
            }
        }
        struct an_finding *f =
            c->diverged ? NULL : finding_on(ctx, c, AN_MISSING_COLLECTIVE, h0->seq);
        if (f) {
            f->expected = h0->ref;
            f->has_expected = true;
            int ranks[AN_MAX_RANKS], nr = 0;
            for (int i = 0; i < pos->na; i++) {
                int g = global_rank(ctx, c, pos->absent[i]);
                an_finding_rank(f, g);
                if (nr < AN_MAX_RANKS)
                    ranks[nr++] = g;
                /* Its last call on this communicator, then its last call overall. */
                const struct an_member *am = &c->m[pos->absent[i]];
                int p = am->proc;
                if (am->last.rec && f->nevents < AN_MAX_EVENTS) {
                    f->labels[f->nevents] = "its last call on this communicator";
                    f->events[f->nevents++] = am->last;
                }
                if (p >= 0 && ctx->procs[p].last.rec && f->nevents < AN_MAX_EVENTS &&
                    !(am->last.rec && am->last.rec == ctx->procs[p].last.rec)) {
                    f->labels[f->nevents] = "its last call";
                    f->events[f->nevents++] = ctx->procs[p].last;
                }
            }
            /* Causally it sits where its members entered it: the earliest of them; and after
             * what held a stopped rank up elsewhere. */
            f->t_ns = h0->t_ns;
            for (int i = 1; i < pos->np; i++)
                if (head(c, pos->present[i])->t_ns < f->t_ns)
                    f->t_ns = head(c, pos->present[i])->t_ns;
            for (int i = 0; i < pos->na; i++)
                held_up(ctx, A, c, c->m[pos->absent[i]].proc, f);
            char rl[160];
            an_rank_list(ranks, nr, pos->na > AN_MAX_RANKS, rl, sizeof(rl));
            snprintf(f->summary, sizeof(f->summary),
                     "rank%s %s never called %s #%" PRIu64 " on communicator %.8" PRIx64
                     " that %d other rank%s entered",
                     pos->na > 1 ? "s" : "", rl, shp_op_name(h0->op), h0->seq, c->id >> 32, pos->np,
                     pos->np > 1 ? "s" : "");
        }
        c->diverged = true;
    }
    pop_present(c, pos);
    pass_unknown(c);
    retire(ctx, c, true);
}

static void on_tie(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    if (c->diverged) {
        consequence(ctx, c);
        pop_present(c, pos);
        pass_unknown(c);
        retire(ctx, c, true);
        return;
    }
    struct an_entry *ref = head(c, pos->present[0]);
    enum field fld = first_difference(ref, head(c, pos->present[pos->np - 1]));
    for (int i = 1; i < pos->np && fld == F_NONE; i++)
        fld = first_difference(ref, head(c, pos->present[i]));
    /* Name every rank, with the first rank's call as the reference. */
    struct an_finding *f = finding_on(ctx, c, kind_of_field[fld], ref->seq);
    if (f) {
        for (int i = 0; i < pos->np; i++) {
            an_finding_rank(f, global_rank(ctx, c, pos->present[i]));
            add_entry(f, head(c, pos->present[i]));
        }
        char d[128];
        describe(ctx, ref, fld, 0, d, sizeof(d));
        snprintf(f->summary, sizeof(f->summary),
                 "the ranks of communicator %.8" PRIx64 " disagree at collective #%" PRIu64
                 " with no majority (rank %d called %s)",
                 c->id >> 32, ref->seq, global_rank(ctx, c, pos->present[0]), d);
        int last = pos->present[pos->np - 1];
        note_replays(ctx, f, global_rank(ctx, c, pos->present[0]), ref, global_rank(ctx, c, last),
                     head(c, last));
    }
    c->diverged = true;
    pop_present(c, pos);
    pass_unknown(c);
    retire(ctx, c, true);
}

static void on_mismatch(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    if (c->diverged) {
        consequence(ctx, c);
    } else {
        enum field fld = F_NONE;
        for (int i = 0; i < pos->np && fld == F_NONE; i++)
            fld = first_difference(head(c, pos->present[i]), head(c, pos->maj));
        report_mismatch(ctx, c, pos, fld);
        c->diverged = true;
    }
    pop_present(c, pos);
    pass_unknown(c);
    retire(ctx, c, true);
}

/* Compare and retire the places of c that every member has reached, will never reach, or is
 * not known at. */
static void advance(struct an_ctx *ctx, struct align *A, struct an_comm *c)
{
    /* On the stack for a communicator of up to 64 ranks: a malloc and a free for every
     * collective were a tenth of the merge thread's instructions. */
    int small[2 * 64];
    struct position pos = {
        .present = c->nranks <= 64 ? small : malloc((size_t)c->nranks * sizeof(int) * 2)};
    if (!pos.present)
        return;
    pos.absent = pos.present + c->nranks;
    for (;;) {
        enum outcome o = classify(ctx, c, &pos);
        if (o == O_WAIT)
            break;
        if (o != O_AGREE && o != O_NOTHING)
            c->agree_run = 0;
        if (o == O_WAIT_AHEAD)
            break;
        switch (o) {
        case O_NOTHING:
            skip_unknown(c);
            break;
        case O_AGREE:
            on_agree(ctx, c, &pos);
            break;
        case O_ENDED:
            on_ended(ctx, A, c, &pos);
            break;
        case O_SKIPPED:
            on_skipped(ctx, c, &pos);
            break;
        case O_EXTRA:
            on_extra(ctx, c, &pos);
            break;
        case O_TIE:
            on_tie(ctx, c, &pos);
            break;
        default:
            on_mismatch(ctx, c, &pos);
            break;
        }
    }
    if (pos.present != small)
        free(pos.present);
}

/* ---- who is whose: members, contradictions, calls that cannot be tied ---- */

static bool conflicted(const struct align *A, uint64_t comm, int proc)
{
    if (!A->nconflicts)
        return false;
    for (size_t i = 0; i < A->nconflicts; i++)
        if (A->conflicts[i].comm == comm && A->conflicts[i].proc == proc)
            return true;
    return false;
}

static void conflict_add(struct align *A, uint64_t comm, int proc)
{
    if (shp_grow((void **)&A->conflicts, &A->cap_conflicts, A->nconflicts, sizeof(*A->conflicts)))
        A->conflicts[A->nconflicts++] = (struct conflict){comm, proc};
}

static void proc_name(const struct an_ctx *ctx, int p, char *out, size_t len)
{
    const struct an_proc *ap = &ctx->procs[p];
    const struct shp_proc *sp = ap->sp;
    if (sp->rank >= 0)
        snprintf(out, len, "rank %d (%s:%" PRIu64 ")", sp->rank, sp->t.hdr->host, sp->t.hdr->pid);
    else
        snprintf(out, len, "%s:%" PRIu64, sp->t.hdr->host, sp->t.hdr->pid);
}

/* Process pidx's record (at s) contradicts what an earlier trace said of communicator `id`:
 * its size (nranks against c->nranks), or rank `member` is another process's. From here on its
 * calls on id are not lined up; said once. */
static void contradiction(struct an_ctx *ctx, struct align *A, struct an_comm *c, uint64_t id,
                          int pidx, const struct an_step *s, int nranks, int member)
{
    if (conflicted(A, id, pidx))
        return;
    conflict_add(A, id, pidx);
    struct an_finding *f = an_finding_add(&ctx->findings, AN_MEMBERSHIP_CONFLICT);
    if (!f)
        return;
    f->comm = id;
    f->t_ns = s->e->t_ns;
    char me[160], other[160];
    proc_name(ctx, pidx, me, sizeof(me));
    bool size = member < 0;
    int op = -1;
    if (!size) {
        op = c->m[member].proc;
    } else {
        for (int r = 0; r < c->nranks && op < 0; r++)
            op = c->m[r].proc;
    }
    if (op >= 0) {
        proc_name(ctx, op, other, sizeof(other));
        if (ctx->procs[op].sp->rank >= 0)
            an_finding_rank_in(f, ctx->procs[op].sp->rank, size ? -1 : member);
        const struct an_member *om = NULL;
        for (int r = 0; r < c->nranks && !om; r++)
            if (c->m[r].proc == op)
                om = &c->m[r];
        if (om && om->claim.rec)
            f->events[f->nevents++] = om->claim;
    } else {
        snprintf(other, sizeof(other), "an earlier trace");
    }
    if (ctx->procs[pidx].sp->rank >= 0)
        an_finding_rank_in(f, ctx->procs[pidx].sp->rank, size ? -1 : member);
    an_finding_event(f, s->ref, s->e->t_ns);
    if (size)
        snprintf(f->summary, sizeof(f->summary),
                 "the traces disagree on the size of communicator %.8" PRIx64
                 ": %s says it has %d rank%s, %s says %d; %s's calls on it are not checked",
                 id >> 32, other, c->nranks, c->nranks == 1 ? "" : "s", me, nranks, me);
    else
        snprintf(f->summary, sizeof(f->summary),
                 "%s and %s both claim rank %d of communicator %.8" PRIx64
                 " (one unique id used twice, or traces of two runs mixed?); %s's calls on it "
                 "are not checked",
                 other, me, member, id >> 32, me);
}

/* A call that names no communicator this analysis can place, or no place in it. */
static void untied(struct align *A, int pidx, const struct an_step *s)
{
    if ((size_t)pidx >= A->nprocs)
        return;
    if (!A->untied[pidx]++) {
        A->untied_first[pidx] = *s->ref;
        A->untied_comm[pidx] = s->e->comm;
    }
}

/* The member of communicator id that process pidx's event e speaks for, claiming it if no one
 * has, and in *cp its communicator (when cp is not NULL); NULL (counted or reported) when there is
 * none. */
static struct an_member *member_slow(struct an_ctx *ctx, struct align *A, int pidx,
                                     const struct an_step *s, const struct shp_event *e, bool call,
                                     struct an_comm **cp)
{
    /* A communicator kept here has its size: comm_get would return it as it is. */
    struct an_comm *c = A->last[pidx];
    if (!c || c->id != e->comm)
        A->last[pidx] = c = comm_get(A, e->comm, e->nranks);
    if (c && e->nranks > 0 && e->nranks != c->nranks) {
        contradiction(ctx, A, c, e->comm, pidx, s, e->nranks, -1);
        return NULL;
    }
    if (conflicted(A, e->comm, pidx))
        return NULL;
    if (!c || e->comm_rank < 0 || e->comm_rank >= c->nranks) {
        if (call)
            untied(A, pidx, s);
        return NULL;
    }
    struct an_member *m = &c->m[e->comm_rank];
    if (m->proc >= 0 && m->proc != pidx) {
        contradiction(ctx, A, c, e->comm, pidx, s, e->nranks, e->comm_rank);
        return NULL;
    }
    if (m->proc < 0) {
        m->claim = *s->ref;
        an_memberships_add(&A->members, (size_t)pidx, c->index, e->comm_rank);
    }
    m->proc = pidx;
    if (cp)
        *cp = c;
    return m;
}

/* member_slow, inline where the call is on the communicator of the process's last call, at a
 * member it has claimed already, its size as known, and no trace contradicts another (each
 * check the slow path would pass, changing nothing): the case of nearly every call, for which
 * the full look was a seventh of the pass. */
static inline struct an_member *member_of(struct an_ctx *ctx, struct align *A, int pidx,
                                          const struct an_step *s, const struct shp_event *e,
                                          bool call, struct an_comm **cp)
{
    struct an_comm *c = A->last[pidx];
    if (c && c->id == e->comm && (e->nranks <= 0 || e->nranks == c->nranks) && !A->nconflicts &&
        e->comm_rank >= 0 && e->comm_rank < c->nranks && c->m[e->comm_rank].proc == pidx) {
        if (cp)
            *cp = c;
        return &c->m[e->comm_rank];
    }
    return member_slow(ctx, A, pidx, s, e, call, cp);
}

/* ---- the pass ---- */

static void *align_init(struct an_ctx *ctx)
{
    struct align *A = calloc(1, sizeof(*A));
    if (!A)
        return NULL;
    A->comms.key = comm_key;
    A->nprocs = ctx->nprocs;
    size_t n = A->nprocs ? A->nprocs : 1;
    A->untied = calloc(n, sizeof(*A->untied));
    A->untied_first = calloc(n, sizeof(*A->untied_first));
    A->untied_comm = calloc(n, sizeof(*A->untied_comm));
    A->last = calloc(n, sizeof(*A->last));
    an_memberships_init(&A->members, A->nprocs);
    if (!A->untied || !A->untied_first || !A->untied_comm || !A->last) {
        an_memberships_free(&A->members);
        free(A->untied);
        free(A->untied_first);
        free(A->untied_comm);
        free(A->last);
        free(A);
        return NULL;
    }
    return A;
}

/* Queue at its place what a rank executed on a communicator: an eager call or a replayed one. */
static void executed(struct an_ctx *ctx, struct align *A, int pidx, const struct an_step *s,
                     const struct shp_event *e, const struct an_entry *en)
{
    struct an_comm *c;
    struct an_member *m = member_of(ctx, A, pidx, s, e, true, &c);
    if (!m)
        return;
    m->last = en->launch.rec ? en->launch : en->ref;
    int64_t at = (int64_t)an_place_next(&m->place, en) + m->shift;
    if (!m->started) {
        m->started = true;
        m->head = m->tail = at > (int64_t)c->at ? (uint64_t)at : c->at;
    } else if (at > (int64_t)m->tail) {
        if (!m->q.n) {
            m->head = m->tail = (uint64_t)at;
        } else {
            /* Calls it made unrecorded (dormant between two armings): not known there. */
            struct an_entry gap = {.op = SHP_OP_NONE, .count = (uint64_t)at - m->tail};
            if (an_queue_push(&m->q, &gap) < 0)
                return;
            m->tail = (uint64_t)at;
            c->any_gap = true; /* for good: gaps are rare (a rank armed twice) */
        }
    }
    if (an_queue_push(&m->q, en) == 0) {
        m->tail++;
        advance(ctx, A, c);
    }
}

/* A call NCCL refused: remembered at the place it would have taken. */
static void refused(struct an_ctx *ctx, struct align *A, int pidx, const struct an_step *s,
                    const struct shp_event *e)
{
    struct an_comm *c;
    struct an_member *m = member_of(ctx, A, pidx, s, e, false, &c);
    if (!m)
        return;
    struct an_entry en = an_entry_of(e, s->ref);
    int64_t at = (int64_t)an_place_refused(&m->place, &en) + m->shift;
    if (m->nrefused == MAX_REFUSALS)
        memmove(m->refused, m->refused + 1, (MAX_REFUSALS - 1) * sizeof(*m->refused));
    else
        m->nrefused++;
    m->refused[m->nrefused - 1] = (struct refusal){at < 0 ? 0 : (uint64_t)at, en, e->result};
    m->last = *s->ref;
    c->any_refused = true;
}

/* A captured call: it counts among what the rank issued, not what it executed. */
static void captured(struct an_ctx *ctx, struct align *A, int pidx, const struct an_step *s)
{
    struct an_member *m = member_of(ctx, A, pidx, s, s->e, false, NULL);
    if (m)
        m->place.captured++;
}

static void align_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct align *A = st;
    const struct shp_event *e = s->e;
    int pidx = (int)(s->proc - ctx->procs);
    if (e->type == SHP_REC_COLL && an_refused(e)) {
        if (!(e->flags & SHP_EV_CAPTURED))
            refused(ctx, A, pidx, s, e);
        return;
    }
    if (an_graphs_event(&A->graphs, s, SHP_REC_COLL)) {
        captured(ctx, A, pidx, s); /* it executes at each launch */
        return;
    }
    uint64_t replay = 0;
    struct an_graph *g = an_graphs_launch(&A->graphs, s, &replay);
    for (size_t i = 0; g && i < g->n; i++) {
        struct an_entry en = an_replay_entry(&g->calls[i], s, replay);
        executed(ctx, A, pidx, s, &g->calls[i].e, &en);
    }
    if (e->type == SHP_REC_COLL) {
        /* A call on no communicator (NULL) was refused by NCCL; anything else is tied. */
        if (!e->comm && e->dur_ns != SHP_NONE && e->result != 0)
            return;
        executed(ctx, A, pidx, s, e, an_step_entry(s));
        return;
    }
    if (e->type == SHP_REC_P2P) {
        /* The p2p pass matches them; here, only whether they can be tied to a communicator. */
        if (!an_refused(e) && !(e->comm == 0 && e->dur_ns != SHP_NONE && e->result != 0))
            member_of(ctx, A, pidx, s, e, true, NULL);
        return;
    }
    if (e->type != SHP_REC_COMM)
        return;
    if (e->comm_kind <= SHP_COMM_SHRINK) {
        /* A creation that failed made nothing; one still in progress says its rank later. */
        if (e->result == 0 || e->comm_rank >= 0)
            member_of(ctx, A, pidx, s, e, false, NULL);
        return;
    }
    struct an_comm *c = comm_get(A, e->comm, e->nranks);
    if (!c || e->comm_rank < 0 || e->comm_rank >= c->nranks)
        return;
    struct an_member *m = &c->m[e->comm_rank];
    if (m->proc == pidx) {
        m->ended = true; /* finalized or destroyed: no collective follows */
        advance(ctx, A, c);
    }
}

static void align_proc_end(void *st, struct an_ctx *ctx, struct an_proc *p)
{
    struct align *A = st;
    int pidx = (int)(p - ctx->procs);
    bool lost = an_lost_end(p);
    if (A->members.lost) {
        for (size_t i = 0; i < A->comms.n; i++) {
            struct an_comm *c = A->comms.v[i];
            bool touched = false;
            for (int r = 0; r < c->nranks; r++)
                if (c->m[r].proc == pidx && !c->m[r].ended) {
                    c->m[r].ended = true;
                    c->m[r].unknown_after = lost;
                    touched = true;
                }
            if (touched)
                advance(ctx, A, c);
        }
        return;
    }
    /* The same visits, in the same order (by the table's position), of the communicators where
     * the process claimed a member: no other member can be pidx's. */
    size_t n;
    const struct an_membership *ms = an_memberships_of(&A->members, (size_t)pidx, &n);
    for (size_t k = 0; k < n;) {
        struct an_comm *c = A->comms.v[ms[k].comm];
        bool touched = false;
        for (; k < n && A->comms.v[ms[k].comm] == c; k++) {
            struct an_member *m = &c->m[ms[k].rank];
            if (!m->ended) {
                m->ended = true;
                m->unknown_after = lost;
                touched = true;
            }
        }
        if (touched)
            advance(ctx, A, c);
    }
}

/* Members that no trace provides: one finding per communicator, which explains what follows. */
static void missing_members(struct an_ctx *ctx, struct an_comm *c)
{
    int missing[AN_MAX_RANKS], nm = 0, total = 0;
    for (int r = 0; r < c->nranks; r++) {
        if (c->m[r].proc >= 0)
            continue;
        total++;
        if (nm < AN_MAX_RANKS)
            missing[nm++] = r;
        c->m[r].ended = true;
    }
    if (!total)
        return;
    struct an_finding *f = an_finding_add(&ctx->findings, AN_MISSING_RANK);
    if (!f)
        return;
    f->comm = c->id;
    f->seq = SHP_NONE;
    for (int k = 0; k < nm; k++)
        an_finding_rank(f, missing[k]);
    char rl[160];
    an_rank_list(missing, nm, total > AN_MAX_RANKS, rl, sizeof(rl));
    snprintf(f->summary, sizeof(f->summary),
             "no trace provides rank%s %s of communicator %.8" PRIx64
             " (%d ranks): was every process traced, and every trace given?",
             total > 1 ? "s" : "", rl, c->id >> 32, c->nranks);
    c->diverged = true;
    c->finding = (size_t)(f - ctx->findings.v);
}

/* One finding per process with calls that could not be tied: never "the ranks agree" over
 * calls that were not lined up. */
static void report_untied(struct an_ctx *ctx, struct align *A)
{
    for (size_t p = 0; p < A->nprocs; p++) {
        if (!A->untied[p])
            continue;
        struct an_finding *f = an_finding_add(&ctx->findings, AN_UNTIED_CALLS);
        if (!f)
            return;
        struct shp_event e;
        f->comm = A->untied_comm[p];
        if (ctx->procs[p].sp->rank >= 0)
            an_finding_rank(f, ctx->procs[p].sp->rank);
        f->labels[0] = "the first of them";
        if (an_decode(ctx, &A->untied_first[p], &e))
            an_finding_event(f, &A->untied_first[p], e.t_ns);
        char who[160], why[96] = "they name no communicator that the traces describe";
        proc_name(ctx, (int)p, who, sizeof(who));
        if (A->untied_comm[p])
            snprintf(why, sizeof(why),
                     "communicator %.8" PRIx64 ": its size, or this rank's place in it, is unknown",
                     A->untied_comm[p] >> 32);
        snprintf(f->summary, sizeof(f->summary),
                 "%" PRIu64 " collective and send/receive call%s of %s could not be tied to a "
                 "communicator (%s): they were not checked",
                 A->untied[p], A->untied[p] == 1 ? "" : "s", who, why);
    }
}

/* What the report shows of each communicator. */
static void summarize(struct an_ctx *ctx, struct align *A)
{
    ctx->comms = calloc(A->comms.n ? A->comms.n : 1, sizeof(*ctx->comms));
    if (!ctx->comms)
        return;
    for (size_t i = 0; i < A->comms.n; i++) {
        const struct an_comm *c = A->comms.v[i];
        if (c->nranks <= 0)
            continue; /* never given a size: nothing of it was lined up */
        struct an_comm_summary *cs = &ctx->comms[ctx->ncomms++];
        cs->id = c->id;
        cs->nranks = c->nranks;
        cs->collectives = c->collectives;
        cs->ranks = calloc((size_t)c->nranks, sizeof(int));
        for (int r = 0; cs->ranks && r < c->nranks; r++)
            if (c->m[r].proc >= 0)
                cs->ranks[cs->nmembers++] = global_rank(ctx, c, r);
    }
}

static void align_finish(void *st, struct an_ctx *ctx)
{
    struct align *A = st;
    for (size_t i = 0; i < A->comms.n; i++) {
        struct an_comm *c = A->comms.v[i];
        if (c->nranks <= 0)
            continue;
        missing_members(ctx, c);
        advance(ctx, A, c);
    }
    report_untied(ctx, A);
    summarize(ctx, A);
}

static void align_free(void *st)
{
    struct align *A = st;
    for (size_t i = 0; i < A->comms.n; i++) {
        struct an_comm *c = A->comms.v[i];
        for (int r = 0; r < c->nranks; r++)
            free(c->m[r].q.v);
        free(c->m);
        free(c);
    }
    an_table_free(&A->comms);
    an_graphs_free(&A->graphs);
    free(A->conflicts);
    free(A->untied);
    free(A->untied_first);
    free(A->untied_comm);
    free(A->last);
    an_memberships_free(&A->members);
    free(A);
}

const struct an_pass an_pass_align = {
    .name = "align",
    .types = AN_TYPE(COMM) | AN_TYPE(COLL) | AN_TYPE(P2P) | AN_TYPE(GRAPH),
    .init = align_init,
    .event = align_event,
    .proc_end = align_proc_end,
    .finish = align_finish,
    .free = align_free,
};
