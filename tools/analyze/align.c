/* shapetrace analyze, alignment pass: line the ranks up. Collectives are aligned by
 * (communicator, seq): a position is compared once every member has either reached it or ended.
 * The culprits are the ranks that differ from the majority (all of them on a tie). A rank that
 * skipped or added one collective is recognised by looking one position ahead, reported once,
 * and realigned; after a divergence that cannot be realigned, the rest of that communicator is
 * counted as its consequence instead of reported again. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"

struct an_member {
    int proc; /* -1 until a trace claims this rank */
    bool ended;
    struct an_queue q;
    struct an_ref last; /* its last call executed on this communicator (rec NULL: none) */
};

struct an_comm {
    uint64_t id;
    int nranks;
    struct an_member *m;
    uint64_t collectives;
    bool diverged;
    unsigned agree_run; /* positions in a row where every member agreed */
    size_t finding;     /* the finding later disagreements are counted against */
};

struct align {
    struct an_table comms;   /* of struct an_comm, by id */
    struct an_graphs graphs; /* what each process's graph launches execute */
};

static uint64_t comm_key(const void *item)
{
    return ((const struct an_comm *)item)->id;
}

static struct an_member *new_members(int nranks)
{
    struct an_member *m = calloc((size_t)nranks, sizeof(*m));
    for (int i = 0; m && i < nranks; i++)
        m[i].proc = -1;
    return m;
}

/* The communicator `id`, created on first sight; a communicator first seen without its size
 * (a destroy record) gets its members when a record gives the size. */
static struct an_comm *comm_get(struct align *A, uint64_t id, int nranks)
{
    struct an_comm *c = an_table_get(&A->comms, id);
    if (c) {
        if (c->nranks <= 0 && nranks > 0) {
            if (!(c->m = new_members(nranks)))
                return NULL;
            c->nranks = nranks;
        }
        return c;
    }
    if (nranks <= 0)
        return NULL;
    c = calloc(1, sizeof(*c));
    if (!c || !(c->m = new_members(nranks))) {
        free(c);
        return NULL;
    }
    c->id = id;
    c->nranks = nranks;
    c->finding = SIZE_MAX;
    if (an_table_add(&A->comms, c) < 0) {
        free(c->m);
        free(c);
        return NULL;
    }
    return c;
}

/* ---- comparing one position ---- */

/* The fields compared, most fundamental first: the first that differs names the finding. */
enum field { F_OP, F_DTYPE, F_COUNT, F_REDOP, F_ROOT, F_NONE };
static const enum an_kind kind_of_field[] = {AN_OP_MISMATCH, AN_DTYPE_MISMATCH, AN_COUNT_MISMATCH,
                                             AN_REDOP_MISMATCH, AN_ROOT_MISMATCH};

static uint64_t field_value(const struct an_entry *e, enum field f)
{
    switch (f) {
    case F_OP:
        /* ncclBcast is ncclBroadcast in place: one operation for the peers. */
        return e->op == SHP_OP_ncclBcast ? SHP_OP_ncclBroadcast : e->op;
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

/* A rank's signature against the majority's: same op, dtype, count, redop, root. */
static bool same(const struct an_entry *a, const struct an_entry *b)
{
    return first_difference(a, b) == F_NONE;
}

static int global_rank(const struct an_ctx *ctx, const struct an_comm *c, int member)
{
    int p = c->m[member].proc;
    return p >= 0 && ctx->procs[p].sp->rank >= 0 ? ctx->procs[p].sp->rank : member;
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
    struct an_finding *f = an_finding_add(&ctx->findings, kind, true);
    if (!f)
        return NULL;
    f->comm = c->id;
    f->seq = seq;
    f->position = c->collectives;
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

/* How far ahead a realignment looks: identical consecutive collectives (every layer's
 * all-reduce) make one position of look-ahead ambiguous. */
#define AN_LOOK 3

/* Whether the entries of a from position ia match those of b from ib, for up to AN_LOOK
 * positions or until one runs out (at least one position must be compared). */
static bool runs_match(struct an_queue *a, size_t ia, struct an_queue *b, size_t ib)
{
    size_t k = 0;
    for (; k < AN_LOOK && ia + k < a->n && ib + k < b->n; k++)
        if (!same(an_queue_at(a, ia + k), an_queue_at(b, ib + k)))
            return false;
    return k > 0;
}

/* ---- the state of one position, classified ---- */

enum outcome {
    O_WAIT,       /* a member has not reached it yet (or nothing is open) */
    O_WAIT_AHEAD, /* a disagreement that needs the next positions to be explained */
    O_AGREE,      /* every member made the same call */
    O_ENDED,      /* the members there agree; the others ended without reaching it */
    O_SKIPPED,    /* one rank skipped this collective: its call matches the others' next */
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

static struct an_entry *head(struct an_comm *c, int member)
{
    return an_queue_at(&c->m[member].q, 0);
}

/* Boyer-Moore vote over the heads, then a check that the candidate has a strict majority. */
static int majority(struct an_comm *c, const struct position *pos)
{
    int cand = pos->present[0], votes = 0;
    for (int i = 0; i < pos->np; i++) {
        struct an_entry *e = head(c, pos->present[i]);
        if (votes == 0) {
            cand = pos->present[i];
            votes = 1;
        } else if (same(e, head(c, cand))) {
            votes++;
        } else {
            votes--;
        }
    }
    int agree = 0;
    for (int i = 0; i < pos->np; i++)
        agree += same(head(c, pos->present[i]), head(c, cand));
    return agree * 2 <= pos->np ? -1 : cand;
}

static enum outcome classify(struct an_comm *c, struct position *pos)
{
    pos->np = pos->na = 0;
    for (int i = 0; i < c->nranks; i++) {
        if (c->m[i].q.n)
            pos->present[pos->np++] = i;
        else if (c->m[i].ended)
            pos->absent[pos->na++] = i;
        else
            return O_WAIT;
    }
    if (pos->np == 0)
        return O_WAIT;
    /* The common case (all equal) costs one pass. */
    struct an_entry *h0 = head(c, pos->present[0]);
    bool all_same = true;
    for (int i = 1; i < pos->np && all_same; i++)
        all_same = same(head(c, pos->present[i]), h0);
    pos->maj = pos->present[0];
    if (all_same)
        return pos->na ? O_ENDED : O_AGREE;
    if ((pos->maj = majority(c, pos)) < 0)
        return O_TIE;
    int nculprits = 0;
    for (int i = 0; i < pos->np; i++)
        if (!same(head(c, pos->present[i]), head(c, pos->maj))) {
            pos->culprit = pos->present[i];
            nculprits++;
        }
    if (c->diverged || nculprits != 1)
        return O_MISMATCH;
    /* One culprit: did it skip a collective (its call matches the majority's next) or add one
     * (its next matches the majority's call)? That needs the next entries, so wait for them
     * unless the member ended. Prefer the explanation that assumes least: a plain disagreement
     * when what follows lines up; then a skipped collective; then an added one. */
    struct an_member *cm = &c->m[pos->culprit], *mm = &c->m[pos->maj];
    if ((mm->q.n < AN_LOOK + 1 && !mm->ended) || (cm->q.n < AN_LOOK + 1 && !cm->ended))
        return O_WAIT_AHEAD;
    if (runs_match(&cm->q, 1, &mm->q, 1))
        return O_MISMATCH;
    if (runs_match(&cm->q, 0, &mm->q, 1))
        return O_SKIPPED;
    if (runs_match(&cm->q, 1, &mm->q, 0))
        return O_EXTRA;
    return O_MISMATCH;
}

/* ---- one function per outcome ---- */

static void pop_present(struct an_comm *c, const struct position *pos)
{
    for (int i = 0; i < pos->np; i++)
        an_queue_pop(&c->m[pos->present[i]].q);
}

static void on_agree(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    pop_present(c, pos);
    c->collectives++;
    ctx->collectives++;
    /* Back in step for a while: a later disagreement is a new finding. */
    if (++c->agree_run >= AN_LOOK && c->diverged) {
        c->diverged = false;
        c->finding = SIZE_MAX;
    }
}

static void on_ended(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    struct an_entry *h0 = head(c, pos->present[0]);
    if (c->diverged) {
        consequence(ctx, c);
    } else {
        struct an_finding *f = finding_on(ctx, c, AN_MISSING_COLLECTIVE, h0->seq);
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
            /* Causally it sits where its members entered it: the earliest of them. */
            f->t_ns = h0->t_ns;
            for (int i = 1; i < pos->np; i++)
                if (head(c, pos->present[i])->t_ns < f->t_ns)
                    f->t_ns = head(c, pos->present[i])->t_ns;
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
}

static void on_skipped(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    struct an_entry *ch = head(c, pos->culprit), *mh = head(c, pos->maj);
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
    /* The others' call is retired; the culprit's lines up with their next one. */
    for (int i = 0; i < pos->np; i++)
        if (pos->present[i] != pos->culprit)
            an_queue_pop(&c->m[pos->present[i]].q);
    c->collectives++;
    ctx->collectives++;
}

/* The members' calls at this position, grouped by `fld` against the majority's. */
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
    enum field fld = first_difference(head(c, pos->culprit), head(c, pos->maj));
    struct an_finding *f = report_mismatch(ctx, c, pos, fld == F_NONE ? F_OP : fld);
    if (f) {
        size_t l = strlen(f->summary);
        snprintf(f->summary + l, sizeof(f->summary) - l,
                 "; rank %d made one collective more than the others here",
                 global_rank(ctx, c, pos->culprit));
    }
    /* Only the extra call is retired: the culprit's next lines up with this position. */
    an_queue_pop(&c->m[pos->culprit].q);
}

static void on_tie(struct an_ctx *ctx, struct an_comm *c, const struct position *pos)
{
    if (c->diverged) {
        consequence(ctx, c);
        pop_present(c, pos);
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
}

/* Compare and retire the positions of c that every member has reached or will never reach. */
static void advance(struct an_ctx *ctx, struct an_comm *c)
{
    struct position pos = {.present = malloc((size_t)c->nranks * sizeof(int) * 2)};
    if (!pos.present)
        return;
    pos.absent = pos.present + c->nranks;
    for (;;) {
        enum outcome o = classify(c, &pos);
        if (o == O_WAIT)
            break;
        if (o != O_AGREE)
            c->agree_run = 0;
        if (o == O_WAIT_AHEAD)
            break;
        switch (o) {
        case O_AGREE:
            on_agree(ctx, c, &pos);
            break;
        case O_ENDED:
            on_ended(ctx, c, &pos);
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
    free(pos.present);
}

/* ---- the pass ---- */

static void *align_init(struct an_ctx *ctx)
{
    (void)ctx;
    struct align *A = calloc(1, sizeof(*A));
    if (A)
        A->comms.key = comm_key;
    return A;
}

/* Queue what a rank executed on a communicator: an eager call, or a replayed one. */
static void executed(struct an_ctx *ctx, struct align *A, int pidx, const struct shp_event *e,
                     const struct an_entry *en)
{
    struct an_comm *c = comm_get(A, e->comm, e->nranks);
    if (!c || e->comm_rank < 0 || e->comm_rank >= c->nranks)
        return;
    struct an_member *m = &c->m[e->comm_rank];
    if (m->proc < 0)
        m->proc = pidx;
    m->last = en->launch.rec ? en->launch : en->ref;
    if (an_queue_push(&m->q, en) == 0)
        advance(ctx, c);
}

static void align_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct align *A = st;
    const struct shp_event *e = s->e;
    int pidx = (int)(s->proc - ctx->procs);
    if (an_graphs_event(&A->graphs, s, SHP_REC_COLL))
        return; /* captured: it executes at each launch */
    uint64_t replay = 0;
    struct an_graph *g = an_graphs_launch(&A->graphs, s, &replay);
    for (size_t i = 0; g && i < g->n; i++) {
        struct an_entry en = an_replay_entry(&g->calls[i], s, replay);
        executed(ctx, A, pidx, &g->calls[i].e, &en);
    }
    if (e->type != SHP_REC_COMM && e->type != SHP_REC_COLL)
        return;
    if (e->type == SHP_REC_COLL) {
        struct an_entry en = an_entry_of(e, s->ref);
        executed(ctx, A, pidx, e, &en);
        return;
    }
    struct an_comm *c = comm_get(A, e->comm, e->nranks);
    if (!c || e->comm_rank < 0 || e->comm_rank >= c->nranks)
        return;
    struct an_member *m = &c->m[e->comm_rank];
    if (e->comm_kind <= SHP_COMM_SHRINK) {
        if (m->proc < 0)
            m->proc = pidx;
    } else if (m->proc == pidx) {
        m->ended = true; /* finalized or destroyed: no collective follows */
        advance(ctx, c);
    }
}

static void align_proc_end(void *st, struct an_ctx *ctx, struct an_proc *p)
{
    struct align *A = st;
    int pidx = (int)(p - ctx->procs);
    for (size_t i = 0; i < A->comms.n; i++) {
        struct an_comm *c = A->comms.v[i];
        bool touched = false;
        for (int r = 0; r < c->nranks; r++)
            if (c->m[r].proc == pidx && !c->m[r].ended) {
                c->m[r].ended = true;
                touched = true;
            }
        if (touched)
            advance(ctx, c);
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
    struct an_finding *f = an_finding_add(&ctx->findings, AN_MISSING_RANK, true);
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

/* What the report shows of each communicator. */
static void summarize(struct an_ctx *ctx, struct align *A)
{
    ctx->comms = calloc(A->comms.n ? A->comms.n : 1, sizeof(*ctx->comms));
    if (!ctx->comms)
        return;
    ctx->ncomms = A->comms.n;
    for (size_t i = 0; i < A->comms.n; i++) {
        const struct an_comm *c = A->comms.v[i];
        struct an_comm_summary *cs = &ctx->comms[i];
        cs->id = c->id;
        cs->nranks = c->nranks;
        cs->collectives = c->collectives;
        cs->ranks = calloc(c->nranks > 0 ? (size_t)c->nranks : 1, sizeof(int));
        for (int r = 0; cs->ranks && r < c->nranks; r++)
            if (c->m[r].proc >= 0)
                cs->ranks[cs->nmembers++] = global_rank(ctx, c, r);
    }
}

static void align_finish(void *st, struct an_ctx *ctx)
{
    struct align *A = st;
    for (size_t i = 0; i < A->comms.n; i++) {
        missing_members(ctx, A->comms.v[i]);
        advance(ctx, A->comms.v[i]);
    }
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
    free(A);
}

const struct an_pass an_pass_align = {
    .name = "align",
    .init = align_init,
    .event = align_event,
    .proc_end = align_proc_end,
    .finish = align_finish,
    .free = align_free,
};
