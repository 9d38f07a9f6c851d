/* shapetrace analyze, pass 2: line the ranks up. Collectives are aligned by (communicator, seq):
 * a position is compared once every member has either reached it or ended. The culprits are the
 * ranks that differ from the majority (all of them on a tie). A rank that skipped or added one
 * collective is recognised by looking one position ahead, reported once, and realigned; after a
 * divergence that cannot be realigned, the rest of that communicator is counted as its
 * consequence instead of reported again. Sends and receives are matched per (communicator,
 * sender, receiver) in issue order. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "ops.h"

struct an_entry {
    struct an_ref ref;
    uint64_t t_ns, seq, count;
    int root, redop, dtype;
    unsigned op;
    bool pending;
};

struct an_queue {
    struct an_entry *v;
    size_t head, n, cap; /* ring buffer */
};

struct an_member {
    int proc; /* -1 until a trace claims this rank */
    bool ended;
    struct an_queue q;
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

struct an_comm_tab {
    struct an_comm **v;
    size_t n, cap;
    size_t *slots; /* open addressing over v's indices + 1 */
    size_t nslots;
};

struct an_chan {
    uint64_t comm;
    int src, dst;
    struct an_queue send, recv;
    size_t finding; /* + 1: later mismatches on the channel are its consequences */
};

struct an_p2p_tab {
    struct an_chan **v;
    size_t n, cap;
    size_t *slots;
    size_t nslots;
};

/* ---- small containers ---- */

static struct an_entry *q_at(struct an_queue *q, size_t i)
{
    return &q->v[(q->head + i) % q->cap];
}

static int q_push(struct an_queue *q, const struct an_entry *e)
{
    if (q->n == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 8;
        struct an_entry *nv = malloc(ncap * sizeof(*nv));
        if (!nv)
            return -1;
        for (size_t i = 0; i < q->n; i++)
            nv[i] = *q_at(q, i);
        free(q->v);
        q->v = nv;
        q->head = 0;
        q->cap = ncap;
    }
    q->v[(q->head + q->n) % q->cap] = *e;
    q->n++;
    return 0;
}

static void q_pop(struct an_queue *q)
{
    q->head = (q->head + 1) % q->cap;
    q->n--;
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* Open-addressing index from a 64-bit key to position+1 in an array. */
static size_t *index_find(size_t *slots, size_t nslots, uint64_t k,
                          bool (*match)(const void *, size_t, uint64_t), const void *arr)
{
    for (size_t i = mix(k) & (nslots - 1);; i = (i + 1) & (nslots - 1)) {
        if (!slots[i] || match(arr, slots[i] - 1, k))
            return &slots[i];
    }
}

static bool comm_match(const void *arr, size_t i, uint64_t k)
{
    return ((struct an_comm *const *)arr)[i]->id == k;
}

static uint64_t chan_key(uint64_t comm, int src, int dst)
{
    return mix(comm ^ ((uint64_t)(uint32_t)src << 32 | (uint32_t)dst));
}

static bool chan_match(const void *arr, size_t i, uint64_t k)
{
    const struct an_chan *c = ((struct an_chan *const *)arr)[i];
    return chan_key(c->comm, c->src, c->dst) == k;
}

static int regrow(size_t **slots, size_t *nslots, size_t n, void *arr,
                  uint64_t (*key_of)(const void *, size_t),
                  bool (*match)(const void *, size_t, uint64_t))
{
    if (*nslots && n * 2 < *nslots)
        return 0;
    size_t ns = *nslots ? *nslots * 2 : 64;
    size_t *s = calloc(ns, sizeof(*s));
    if (!s)
        return -1;
    for (size_t i = 0; i < n; i++)
        *index_find(s, ns, key_of(arr, i), match, arr) = i + 1;
    free(*slots);
    *slots = s;
    *nslots = ns;
    return 0;
}

static uint64_t comm_key_of(const void *arr, size_t i)
{
    return ((struct an_comm *const *)arr)[i]->id;
}

static uint64_t chan_key_of(const void *arr, size_t i)
{
    const struct an_chan *c = ((struct an_chan *const *)arr)[i];
    return chan_key(c->comm, c->src, c->dst);
}

static struct an_comm *comm_get(struct an_ctx *ctx, uint64_t id, int nranks)
{
    struct an_comm_tab *t = ctx->comms;
    if (t->nslots) {
        size_t *s = index_find(t->slots, t->nslots, id, comm_match, t->v);
        if (*s) {
            struct an_comm *c = t->v[*s - 1];
            if (c->nranks <= 0 && nranks > 0) {
                c->m = calloc((size_t)nranks, sizeof(*c->m));
                if (!c->m)
                    return NULL;
                for (int i = 0; i < nranks; i++)
                    c->m[i].proc = -1;
                c->nranks = nranks;
            }
            return c;
        }
    }
    if (nranks <= 0)
        return NULL;
    struct an_comm *c = calloc(1, sizeof(*c));
    if (!c || !(c->m = calloc((size_t)nranks, sizeof(*c->m)))) {
        free(c);
        return NULL;
    }
    c->id = id;
    c->nranks = nranks;
    c->finding = SIZE_MAX;
    for (int i = 0; i < nranks; i++)
        c->m[i].proc = -1;
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        struct an_comm **nv = realloc(t->v, ncap * sizeof(*nv));
        if (!nv)
            return NULL;
        t->v = nv;
        t->cap = ncap;
    }
    t->v[t->n++] = c;
    if (regrow(&t->slots, &t->nslots, t->n, t->v, comm_key_of, comm_match) == 0)
        *index_find(t->slots, t->nslots, id, comm_match, t->v) = t->n;
    return c;
}

static struct an_chan *chan_get(struct an_ctx *ctx, uint64_t comm, int src, int dst)
{
    struct an_p2p_tab *t = ctx->p2p;
    uint64_t k = chan_key(comm, src, dst);
    if (t->nslots) {
        size_t *s = index_find(t->slots, t->nslots, k, chan_match, t->v);
        if (*s)
            return t->v[*s - 1];
    }
    struct an_chan *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->comm = comm;
    c->src = src;
    c->dst = dst;
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        struct an_chan **nv = realloc(t->v, ncap * sizeof(*nv));
        if (!nv) {
            free(c);
            return NULL;
        }
        t->v = nv;
        t->cap = ncap;
    }
    t->v[t->n++] = c;
    if (regrow(&t->slots, &t->nslots, t->n, t->v, chan_key_of, chan_match) == 0)
        *index_find(t->slots, t->nslots, k, chan_match, t->v) = t->n;
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
        return e->op;
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

static int global_rank(const struct an_ctx *ctx, const struct an_comm *c, int member)
{
    int p = c->m[member].proc;
    return p >= 0 && ctx->procs[p].rank >= 0 ? ctx->procs[p].rank : member;
}

static void describe(const struct an_ctx *ctx, const struct an_entry *e, enum field f, char *out,
                     size_t len)
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
        an_shape(ctx, e->count, shape, sizeof(shape));
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

static void add_rank(struct an_finding *f, int rank)
{
    for (int i = 0; i < f->nranks; i++)
        if (f->ranks[i] == rank)
            return;
    if (f->nranks < (int)(sizeof(f->ranks) / sizeof(f->ranks[0])))
        f->ranks[f->nranks++] = rank;
    else
        f->more_ranks = true;
}

static void add_event(struct an_finding *f, const struct an_entry *e)
{
    if (f->nevents < AN_MAX_EVENTS)
        f->events[f->nevents++] = e->ref;
    if (!f->t_ns || e->t_ns < f->t_ns)
        f->t_ns = e->t_ns;
}

static void rank_list(const int *ranks, int n, bool more, char *out, size_t len)
{
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < n && off < len; i++)
        off += (size_t)snprintf(out + off, len - off, "%s%d", i ? ", " : "", ranks[i]);
    if (more && off < len)
        snprintf(out + off, len - off, ", ...");
}

/* Count a disagreement after the communicator diverged against its first finding. */
static void consequence(struct an_ctx *ctx, struct an_comm *c)
{
    if (c->finding < ctx->nfindings)
        ctx->findings[c->finding].consequences++;
}

static struct an_finding *finding_on(struct an_ctx *ctx, struct an_comm *c, enum an_kind kind,
                                     uint64_t seq)
{
    struct an_finding *f = an_add_finding(ctx, kind, true);
    if (!f)
        return NULL;
    f->comm = c->id;
    f->seq = seq;
    if (c->finding == SIZE_MAX)
        c->finding = (size_t)(f - ctx->findings);
    return f;
}

/* Members' heads grouped by the first differing field against the majority. */
static void mismatch(struct an_ctx *ctx, struct an_comm *c, const int *present, int npresent,
                     int majority_member, enum field fld)
{
    struct an_entry *maj = q_at(&c->m[majority_member].q, 0);
    uint64_t mv = field_value(maj, fld);
    struct an_finding *f = finding_on(ctx, c, kind_of_field[fld], maj->seq);
    if (!f)
        return;
    f->expected = maj->ref;
    f->has_expected = true;
    int culprits[16] = {0}, nc = 0, others[16] = {0}, no = 0;
    bool more_c = false, more_o = false;
    const struct an_entry *example = NULL;
    for (int i = 0; i < npresent; i++) {
        struct an_entry *e = q_at(&c->m[present[i]].q, 0);
        int g = global_rank(ctx, c, present[i]);
        if (field_value(e, fld) != mv) {
            add_rank(f, g);
            add_event(f, e);
            if (!example)
                example = e;
            if (nc < 16)
                culprits[nc++] = g;
            else
                more_c = true;
        } else if (no < 16) {
            others[no++] = g;
        } else {
            more_o = true;
        }
    }
    char a[128], b[128], ra[160], rb[160];
    describe(ctx, example, fld, a, sizeof(a));
    describe(ctx, maj, fld, b, sizeof(b));
    rank_list(culprits, nc, more_c, ra, sizeof(ra));
    rank_list(others, no, more_o, rb, sizeof(rb));
    snprintf(f->summary, sizeof(f->summary),
             "rank%s %s called %s where rank%s %s called %s (communicator %.8" PRIx64
             ", collective #%" PRIu64 ")",
             nc > 1 ? "s" : "", ra, a, no > 1 ? "s" : "", rb, b, c->id >> 32, maj->seq);
}

/* A rank's signature against the majority's: same op, dtype, count, redop, root. */
static bool same(const struct an_entry *a, const struct an_entry *b)
{
    return first_difference(a, b) == F_NONE;
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
        if (!same(q_at(a, ia + k), q_at(b, ib + k)))
            return false;
    return k > 0;
}

/* Compare and retire the positions of c that every member has reached or will never reach. */
static void advance(struct an_ctx *ctx, struct an_comm *c)
{
    int *present = malloc((size_t)c->nranks * sizeof(int) * 2);
    if (!present)
        return;
    int *absent = present + c->nranks;
    for (;;) {
        int np = 0, na = 0;
        for (int i = 0; i < c->nranks; i++) {
            struct an_member *m = &c->m[i];
            if (m->q.n)
                present[np++] = i;
            else if (m->ended)
                absent[na++] = i;
            else
                goto out; /* wait for this member */
        }
        if (np == 0)
            goto out;
        /* The majority signature: the common case (all equal) costs one pass. */
        struct an_entry *h0 = q_at(&c->m[present[0]].q, 0);
        bool all_same = true;
        for (int i = 1; i < np && all_same; i++)
            all_same = same(q_at(&c->m[present[i]].q, 0), h0);
        int maj = present[0];
        if (!all_same) {
            /* Boyer-Moore vote, then the first field where a minority differs. */
            int cand = present[0], votes = 0;
            for (int i = 0; i < np; i++) {
                struct an_entry *e = q_at(&c->m[present[i]].q, 0);
                if (votes == 0) {
                    cand = present[i];
                    votes = 1;
                } else if (same(e, q_at(&c->m[cand].q, 0))) {
                    votes++;
                } else {
                    votes--;
                }
            }
            int agree = 0;
            for (int i = 0; i < np; i++)
                agree += same(q_at(&c->m[present[i]].q, 0), q_at(&c->m[cand].q, 0));
            maj = cand;
            if (agree * 2 <= np)
                maj = -1; /* no majority: every rank is a culprit */
        }
        if (all_same && na == 0) {
            for (int i = 0; i < np; i++)
                q_pop(&c->m[present[i]].q);
            c->collectives++;
            ctx->collectives++;
            /* Back in step for a while: a later disagreement is a new finding. */
            if (++c->agree_run >= AN_LOOK && c->diverged) {
                c->diverged = false;
                c->finding = SIZE_MAX;
            }
            continue;
        }
        c->agree_run = 0;
        if (all_same) {
            /* Some members ended without reaching this collective. */
            if (!c->diverged) {
                struct an_finding *f = finding_on(ctx, c, AN_MISSING_COLLECTIVE, h0->seq);
                if (f) {
                    f->expected = h0->ref;
                    f->has_expected = true;
                    int ranks[16], nr = 0;
                    for (int i = 0; i < na; i++) {
                        int g = global_rank(ctx, c, absent[i]);
                        add_rank(f, g);
                        if (nr < 16)
                            ranks[nr++] = g;
                        int p = c->m[absent[i]].proc;
                        if (p >= 0 && ctx->procs[p].last.rec && f->nevents < AN_MAX_EVENTS)
                            f->events[f->nevents++] = ctx->procs[p].last;
                    }
                    f->t_ns = h0->t_ns;
                    char rl[160];
                    rank_list(ranks, nr, na > 16, rl, sizeof(rl));
                    snprintf(f->summary, sizeof(f->summary),
                             "rank%s %s never called %s #%" PRIu64 " on communicator %.8" PRIx64
                             " that %d other rank%s entered",
                             na > 1 ? "s" : "", rl, shp_op_name(h0->op), h0->seq, c->id >> 32, np,
                             np > 1 ? "s" : "");
                }
                c->diverged = true;
            } else {
                consequence(ctx, c);
            }
            for (int i = 0; i < np; i++)
                q_pop(&c->m[present[i]].q);
            continue;
        }
        /* A disagreement. With one culprit, look one position ahead: did it skip a collective
         * (its head matches the majority's next) or add one (its next matches the majority's
         * head)? That needs a second entry, so wait for one unless the member ended. */
        int culprit = -1, nculprits = 0;
        if (maj >= 0)
            for (int i = 0; i < np; i++)
                if (!same(q_at(&c->m[present[i]].q, 0), q_at(&c->m[maj].q, 0))) {
                    culprit = present[i];
                    nculprits++;
                }
        if (!c->diverged && maj >= 0 && nculprits == 1) {
            struct an_member *cm = &c->m[culprit], *mm = &c->m[maj];
            if ((mm->q.n < AN_LOOK + 1 && !mm->ended) || (cm->q.n < AN_LOOK + 1 && !cm->ended))
                goto out;
            struct an_entry *ch = q_at(&cm->q, 0), *mh = q_at(&mm->q, 0);
            /* Prefer the explanation that assumes least: a plain disagreement when what
             * follows lines up; then a skipped collective; then an added one. */
            if (!runs_match(&cm->q, 1, &mm->q, 1) && runs_match(&cm->q, 0, &mm->q, 1)) {
                struct an_finding *f = finding_on(ctx, c, AN_MISSING_COLLECTIVE, mh->seq);
                if (f) {
                    f->expected = mh->ref;
                    f->has_expected = true;
                    add_rank(f, global_rank(ctx, c, culprit));
                    add_event(f, ch);
                    f->t_ns = mh->t_ns < ch->t_ns ? mh->t_ns : ch->t_ns;
                    snprintf(f->summary, sizeof(f->summary),
                             "rank %d skipped %s #%" PRIu64 " on communicator %.8" PRIx64
                             " (its next collective lines up with the others' #%" PRIu64 ")",
                             global_rank(ctx, c, culprit), shp_op_name(mh->op), mh->seq,
                             c->id >> 32, mh->seq + 1);
                }
                for (int i = 0; i < np; i++)
                    if (present[i] != culprit)
                        q_pop(&c->m[present[i]].q);
                c->collectives++;
                ctx->collectives++;
                continue;
            }
            if (!runs_match(&cm->q, 1, &mm->q, 1) && runs_match(&cm->q, 1, &mm->q, 0)) {
                enum field fld = first_difference(ch, mh);
                mismatch(ctx, c, present, np, maj, fld == F_NONE ? F_OP : fld);
                struct an_finding *f = &ctx->findings[ctx->nfindings - 1];
                size_t l = strlen(f->summary);
                snprintf(f->summary + l, sizeof(f->summary) - l,
                         "; rank %d made one collective more than the others here",
                         global_rank(ctx, c, culprit));
                q_pop(&cm->q);
                continue;
            }
        }
        if (!c->diverged) {
            if (maj < 0) {
                enum field fld = first_difference(q_at(&c->m[present[0]].q, 0),
                                                  q_at(&c->m[present[np - 1]].q, 0));
                for (int i = 1; i < np && fld == F_NONE; i++)
                    fld = first_difference(q_at(&c->m[present[0]].q, 0),
                                           q_at(&c->m[present[i]].q, 0));
                /* A tie: name every rank, with the first rank's call as the reference. */
                struct an_entry *ref = q_at(&c->m[present[0]].q, 0);
                struct an_finding *f = finding_on(ctx, c, kind_of_field[fld], ref->seq);
                if (f) {
                    for (int i = 0; i < np; i++) {
                        add_rank(f, global_rank(ctx, c, present[i]));
                        add_event(f, q_at(&c->m[present[i]].q, 0));
                    }
                    char d[128];
                    describe(ctx, ref, fld, d, sizeof(d));
                    snprintf(f->summary, sizeof(f->summary),
                             "the ranks of communicator %.8" PRIx64
                             " disagree at collective #%" PRIu64
                             " with no majority (rank %d called %s)",
                             c->id >> 32, ref->seq, global_rank(ctx, c, present[0]), d);
                }
            } else {
                enum field fld = F_NONE;
                for (int i = 0; i < np && fld == F_NONE; i++)
                    fld = first_difference(q_at(&c->m[present[i]].q, 0), q_at(&c->m[maj].q, 0));
                mismatch(ctx, c, present, np, maj, fld);
            }
            c->diverged = true;
        } else {
            consequence(ctx, c);
        }
        for (int i = 0; i < np; i++)
            q_pop(&c->m[present[i]].q);
    }
out:
    free(present);
}

/* ---- p2p ---- */

static void match_p2p(struct an_ctx *ctx, struct an_chan *ch)
{
    while (ch->send.n && ch->recv.n) {
        struct an_entry *s = q_at(&ch->send, 0), *r = q_at(&ch->recv, 0);
        uint64_t sb = s->count * shp_dtype_size((unsigned)s->dtype);
        uint64_t rb = r->count * shp_dtype_size((unsigned)r->dtype);
        if ((sb != rb || s->dtype != r->dtype) && ch->finding) {
            ctx->findings[ch->finding - 1].consequences++;
        } else if (sb != rb || s->dtype != r->dtype) {
            bool size = sb != rb;
            struct an_finding *f =
                an_add_finding(ctx, size ? AN_P2P_SIZE_MISMATCH : AN_P2P_DTYPE_MISMATCH, size);
            if (f) {
                f->comm = ch->comm;
                f->seq = s->seq;
                int gs = ctx->procs[s->ref.proc].rank, gr = ctx->procs[r->ref.proc].rank;
                add_rank(f, gs >= 0 ? gs : ch->src);
                add_rank(f, gr >= 0 ? gr : ch->dst);
                add_event(f, s);
                add_event(f, r);
                char a[96], b[96];
                an_shape(ctx, s->count, a, sizeof(a));
                an_shape(ctx, r->count, b, sizeof(b));
                snprintf(f->summary, sizeof(f->summary),
                         "rank %d sent %" PRIu64 " %s%s%s (%" PRIu64 " bytes) to rank %d, which "
                         "received %" PRIu64 " %s%s%s (%" PRIu64 " bytes) (communicator %.8" PRIx64
                         ", message #%" PRIu64 ")",
                         gs, s->count, shp_dtype_name((unsigned)s->dtype), a[0] ? " " : "", a, sb,
                         gr, r->count, shp_dtype_name((unsigned)r->dtype), b[0] ? " " : "", b, rb,
                         ch->comm >> 32, s->seq);
                ch->finding = (size_t)(f - ctx->findings) + 1;
            }
        }
        q_pop(&ch->send);
        q_pop(&ch->recv);
    }
}

/* ---- events ---- */

void an_align_init(struct an_ctx *ctx)
{
    ctx->comms = calloc(1, sizeof(*ctx->comms));
    ctx->p2p = calloc(1, sizeof(*ctx->p2p));
}

static struct an_entry entry_of(const struct shp_event *e, const struct an_ref *ref)
{
    return (struct an_entry){.ref = *ref,
                             .t_ns = e->t_ns,
                             .seq = e->seq,
                             .count = e->count,
                             .root = e->root,
                             .redop = e->redop,
                             .dtype = e->dtype,
                             .op = e->op,
                             .pending = e->dur_ns == SHP_NONE};
}

void an_align_event(struct an_ctx *ctx, struct an_proc *p, const struct shp_event *e,
                    const struct an_ref *ref)
{
    if (!ctx->comms || !ctx->p2p)
        return;
    int pidx = (int)(p - ctx->procs);
    if (e->type == SHP_REC_COMM) {
        struct an_comm *c = comm_get(ctx, e->comm, e->nranks);
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
        return;
    }
    if (e->type == SHP_REC_COLL) {
        struct an_comm *c = comm_get(ctx, e->comm, e->nranks);
        if (!c || e->comm_rank < 0 || e->comm_rank >= c->nranks)
            return;
        struct an_member *m = &c->m[e->comm_rank];
        if (m->proc < 0)
            m->proc = pidx;
        struct an_entry en = entry_of(e, ref);
        if (q_push(&m->q, &en) == 0)
            advance(ctx, c);
        return;
    }
    if (e->type == SHP_REC_P2P && e->comm_rank >= 0 && e->peer >= 0) {
        bool send = e->op == SHP_OP_ncclSend;
        int src = send ? e->comm_rank : e->peer, dst = send ? e->peer : e->comm_rank;
        struct an_chan *ch = chan_get(ctx, e->comm, src, dst);
        if (!ch)
            return;
        struct an_entry en = entry_of(e, ref);
        if (q_push(send ? &ch->send : &ch->recv, &en) == 0)
            match_p2p(ctx, ch);
    }
}

void an_align_proc_ended(struct an_ctx *ctx, struct an_proc *p)
{
    if (!ctx->comms)
        return;
    int pidx = (int)(p - ctx->procs);
    for (size_t i = 0; i < ctx->comms->n; i++) {
        struct an_comm *c = ctx->comms->v[i];
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

void an_align_finish(struct an_ctx *ctx)
{
    if (!ctx->comms)
        return;
    /* Members that no trace provides. */
    for (size_t i = 0; i < ctx->comms->n; i++) {
        struct an_comm *c = ctx->comms->v[i];
        int missing[16], nm = 0, total = 0;
        for (int r = 0; r < c->nranks; r++) {
            if (c->m[r].proc >= 0)
                continue;
            total++;
            if (nm < 16)
                missing[nm++] = r;
            c->m[r].ended = true;
        }
        if (total) {
            struct an_finding *f = an_add_finding(ctx, AN_MISSING_RANK, true);
            if (f) {
                f->comm = c->id;
                f->seq = SHP_NONE;
                for (int k = 0; k < nm; k++)
                    add_rank(f, missing[k]);
                char rl[160];
                rank_list(missing, nm, total > 16, rl, sizeof(rl));
                snprintf(f->summary, sizeof(f->summary),
                         "no trace provides rank%s %s of communicator %.8" PRIx64
                         " (%d ranks): was every process traced, and every trace given?",
                         total > 1 ? "s" : "", rl, c->id >> 32, c->nranks);
                /* Its absence explains what follows on this communicator. */
                c->diverged = true;
                c->finding = (size_t)(f - ctx->findings);
            }
        }
        advance(ctx, c);
    }
    /* Sends and receives that found no partner. */
    for (size_t i = 0; i < ctx->p2p->n; i++) {
        struct an_chan *ch = ctx->p2p->v[i];
        struct an_queue *left = ch->send.n ? &ch->send : ch->recv.n ? &ch->recv : NULL;
        if (!left)
            continue;
        struct an_entry *e = q_at(left, 0);
        struct an_finding *f = an_add_finding(ctx, AN_P2P_UNMATCHED, true);
        if (!f)
            continue;
        f->comm = ch->comm;
        f->seq = e->seq;
        int g = ctx->procs[e->ref.proc].rank;
        add_rank(f, ch->src);
        add_rank(f, ch->dst);
        add_event(f, e);
        snprintf(f->summary, sizeof(f->summary),
                 "%zu %s from rank %d to rank %d on communicator %.8" PRIx64
                 " found no matching %s (first: message #%" PRIu64 ", issued by rank %d)",
                 left->n, left == &ch->send ? "send(s)" : "receive(s)", ch->src, ch->dst,
                 ch->comm >> 32, left == &ch->send ? "receive" : "send", e->seq, g);
    }
}

void an_align_free(struct an_ctx *ctx)
{
    if (ctx->comms) {
        for (size_t i = 0; i < ctx->comms->n; i++) {
            struct an_comm *c = ctx->comms->v[i];
            for (int r = 0; r < c->nranks; r++)
                free(c->m[r].q.v);
            free(c->m);
            free(c);
        }
        free(ctx->comms->v);
        free(ctx->comms->slots);
        free(ctx->comms);
    }
    if (ctx->p2p) {
        for (size_t i = 0; i < ctx->p2p->n; i++) {
            free(ctx->p2p->v[i]->send.v);
            free(ctx->p2p->v[i]->recv.v);
            free(ctx->p2p->v[i]);
        }
        free(ctx->p2p->v);
        free(ctx->p2p->slots);
        free(ctx->p2p);
    }
}

size_t an_comm_count(const struct an_ctx *ctx)
{
    return ctx->comms ? ctx->comms->n : 0;
}

void an_comm_info(const struct an_ctx *ctx, size_t i, uint64_t *id, int *nranks,
                  uint64_t *collectives, int *ranks, int max_ranks, int *nmembers)
{
    const struct an_comm *c = ctx->comms->v[i];
    *id = c->id;
    *nranks = c->nranks;
    *collectives = c->collectives;
    *nmembers = 0;
    for (int r = 0; r < c->nranks && *nmembers < max_ranks; r++)
        if (c->m[r].proc >= 0)
            ranks[(*nmembers)++] = global_rank(ctx, c, r);
}
