/* shapetrace analyze, p2p pass: sends and receives are matched per (communicator, sender,
 * receiver) in issue order, as NCCL matches them; a pair that disagrees on size or datatype is
 * reported once per channel (later ones are its consequences), and what is left unmatched at
 * the end is reported per channel. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"

struct an_chan {
    uint64_t comm;
    int src, dst;
    struct an_queue send, recv;
    size_t finding; /* + 1: later mismatches on the channel are its consequences */
};

/* A communicator rank's global rank: findings name global ranks, as collective findings do. */
struct member {
    uint64_t key; /* member_key */
    int rank;
    int proc;
};

struct p2p {
    struct an_table chans;   /* of struct an_chan, by chan_key */
    struct an_graphs graphs; /* sends and receives captured into graphs run at each launch */
    struct an_table members; /* of struct member */
};

static uint64_t member_key(uint64_t comm, int comm_rank)
{
    return an_mix(comm + 0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)comm_rank + 1));
}

static uint64_t member_key_of(const void *item)
{
    return ((const struct member *)item)->key;
}

/* Remember whose process holds comm_rank of comm (comm rank -2: the communicator's size, in
 * rank). */
static void member_seen(struct p2p *P, uint64_t comm, int comm_rank, int rank, int proc)
{
    if (!comm || comm_rank < -2 || comm_rank == -1 ||
        an_table_get(&P->members, member_key(comm, comm_rank)))
        return;
    struct member *m = malloc(sizeof(*m));
    if (!m)
        return;
    *m = (struct member){.key = member_key(comm, comm_rank), .rank = rank, .proc = proc};
    if (an_table_add(&P->members, m) < 0)
        free(m);
}

/* The global rank of comm_rank in comm; the comm rank itself when no trace says. */
static int global_of(const struct p2p *P, uint64_t comm, int comm_rank)
{
    const struct member *m = an_table_get(&P->members, member_key(comm, comm_rank));
    return m && m->rank >= 0 ? m->rank : comm_rank;
}

/* Whether the process holding comm_rank of comm lost the end of its trace (an_lost_end): then
 * the calls it did not record prove nothing. */
static bool lost_end_of(const struct p2p *P, const struct an_ctx *ctx, uint64_t comm, int comm_rank)
{
    const struct member *m = an_table_get(&P->members, member_key(comm, comm_rank));
    return m && m->proc >= 0 && an_lost_end(&ctx->procs[m->proc]);
}

/* "rank 5 (rank 1 of the communicator)", or "rank 5" where the two agree. */
static void who(char *out, size_t len, int rank, int comm_rank)
{
    if (rank == comm_rank || comm_rank < 0)
        snprintf(out, len, "rank %d", rank);
    else
        snprintf(out, len, "rank %d (comm rank %d)", rank, comm_rank);
}

/* "; rank 1 sent it in replay 3 of the graph launched at ..., rank 2 received it eagerly" when
 * a replay executed either side. */
static void note_replays(struct an_ctx *ctx, struct an_finding *f, int gs, const struct an_entry *s,
                         int gr, const struct an_entry *r)
{
    if (!s->launch.rec && !r->launch.rec)
        return;
    char a[600] = "eagerly", b[600] = "eagerly";
    if (s->launch.rec) {
        memcpy(a, "in ", 4);
        an_replay_note(ctx, &s->launch, s->replay, &s->ref, a + 3, sizeof(a) - 3);
    }
    if (r->launch.rec) {
        memcpy(b, "in ", 4);
        an_replay_note(ctx, &r->launch, r->replay, &r->ref, b + 3, sizeof(b) - 3);
    }
    size_t l = strlen(f->summary);
    snprintf(f->summary + l, sizeof(f->summary) - l, "; rank %d sent it %s, rank %d received it %s",
             gs, a, gr, b);
}

static uint64_t chan_key(uint64_t comm, int src, int dst)
{
    return an_mix(comm ^ ((uint64_t)(uint32_t)src << 32 | (uint32_t)dst));
}

static uint64_t chan_key_of(const void *item)
{
    const struct an_chan *c = item;
    return chan_key(c->comm, c->src, c->dst);
}

static struct an_chan *chan_get(struct p2p *P, uint64_t comm, int src, int dst)
{
    struct an_chan *c = an_table_get(&P->chans, chan_key(comm, src, dst));
    if (c)
        return c;
    if (!(c = calloc(1, sizeof(*c))))
        return NULL;
    c->comm = comm;
    c->src = src;
    c->dst = dst;
    if (an_table_add(&P->chans, c) < 0) {
        free(c);
        return NULL;
    }
    return c;
}

static void report_pair(struct an_ctx *ctx, struct p2p *P, struct an_chan *ch,
                        const struct an_entry *s, const struct an_entry *r, uint64_t sb,
                        uint64_t rb)
{
    bool size = sb != rb;
    struct an_finding *f =
        an_finding_add(&ctx->findings, size ? AN_P2P_SIZE_MISMATCH : AN_P2P_DTYPE_MISMATCH);
    if (!f)
        return;
    f->comm = ch->comm;
    f->seq = s->seq;
    int gs = global_of(P, ch->comm, ch->src), gr = global_of(P, ch->comm, ch->dst);
    an_finding_rank_in(f, gs, ch->src);
    an_finding_rank_in(f, gr, ch->dst);
    an_finding_event(f, &s->ref, s->t_ns);
    an_finding_event(f, &r->ref, r->t_ns);
    for (int k = 0; k < 2; k++) {
        const struct an_entry *x = k ? r : s;
        if (x->launch.rec && f->nevents < AN_MAX_EVENTS) {
            f->labels[f->nevents] = k ? "the graph launch that executed the receive"
                                      : "the graph launch that executed the send";
            f->events[f->nevents++] = x->launch;
        }
    }
    char a[96], b[96], ws[64], wr[64];
    an_shape_as(&ctx->dims, s->count, r->count, a, sizeof(a));
    an_shape_as(&ctx->dims, r->count, s->count, b, sizeof(b));
    who(ws, sizeof(ws), gs, ch->src);
    who(wr, sizeof(wr), gr, ch->dst);
    snprintf(f->summary, sizeof(f->summary),
             "%s sent %" PRIu64 " %s%s%s (%" PRIu64 " bytes) to %s, which "
             "received %" PRIu64 " %s%s%s (%" PRIu64 " bytes) (communicator %.8" PRIx64
             ", message #%" PRIu64 ")",
             ws, s->count, shp_dtype_name((unsigned)s->dtype), a[0] ? " " : "", a, sb, wr, r->count,
             shp_dtype_name((unsigned)r->dtype), b[0] ? " " : "", b, rb, ch->comm >> 32, s->seq);
    note_replays(ctx, f, gs, s, gr, r);
    ch->finding = (size_t)(f - ctx->findings.v) + 1;
}

/* A send's or receive's bytes, UINT64_MAX when they do not fit in 64 bits. */
static uint64_t bytes_of(const struct an_entry *e)
{
    uint64_t b;
    return __builtin_mul_overflow(e->count, (uint64_t)shp_dtype_size((unsigned)e->dtype), &b)
               ? UINT64_MAX
               : b;
}

static void match(struct an_ctx *ctx, struct p2p *P, struct an_chan *ch)
{
    while (ch->send.n && ch->recv.n) {
        struct an_entry *s = an_queue_at(&ch->send, 0), *r = an_queue_at(&ch->recv, 0);
        /* NCCL pairs the k-th send to a peer with its k-th receive from us, and seq is that k
         * (given back when NCCL refused a call). Two eager calls of different seqs: the other
         * side's call of the lower seq was made unrecorded (its tracing started later, run
         * --dormant): nothing is known of that pair. */
        if (!s->launch.rec && !r->launch.rec && s->seq != r->seq && s->seq != SHP_NONE &&
            r->seq != SHP_NONE) {
            an_queue_pop(s->seq < r->seq ? &ch->send : &ch->recv);
            continue;
        }
        uint64_t sb = bytes_of(s), rb = bytes_of(r);
        if ((sb != rb || s->dtype != r->dtype) && ch->finding)
            ctx->findings.v[ch->finding - 1].consequences++;
        else if (sb != rb || s->dtype != r->dtype)
            report_pair(ctx, P, ch, s, r, sb, rb);
        an_note_match(ctx, s, r);
        an_queue_pop(&ch->send);
        an_queue_pop(&ch->recv);
    }
}

static void *p2p_init(struct an_ctx *ctx)
{
    (void)ctx;
    struct p2p *P = calloc(1, sizeof(*P));
    if (P) {
        P->chans.key = chan_key_of;
        P->members.key = member_key_of;
    }
    return P;
}

/* Queue a send or receive a rank executed: eager, or in a replay. */
/* Whether process `proc` speaks for comm_rank of a communicator of that size as the traces first
 * said: a second process claiming the rank, or another size, is the alignment's to report
 * (membership_conflict), and its calls are not matched. */
static bool trusted(struct p2p *P, const struct shp_event *e, int proc)
{
    const struct member *m = an_table_get(&P->members, member_key(e->comm, e->comm_rank));
    const struct member *z = an_table_get(&P->members, member_key(e->comm, -2));
    return (!m || m->proc == proc) && (!z || z->rank == e->nranks);
}

static void executed(struct p2p *P, struct an_ctx *ctx, const struct shp_event *e,
                     const struct an_entry *en, int proc)
{
    if (e->comm_rank < 0 || e->peer < 0 || an_refused(e) || !trusted(P, e, proc))
        return;
    bool send = e->op == SHP_OP_ncclSend;
    int src = send ? e->comm_rank : e->peer, dst = send ? e->peer : e->comm_rank;
    struct an_chan *ch = chan_get(P, e->comm, src, dst);
    if (ch && an_queue_push(send ? &ch->send : &ch->recv, en) == 0)
        match(ctx, P, ch);
}

static void p2p_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct p2p *P = st;
    const struct shp_event *e = s->e;
    /* Every member's communicator record says whose it is; collectives need not be looked at. */
    int proc = (int)(s->proc - ctx->procs);
    if ((e->type == SHP_REC_COMM || e->type == SHP_REC_P2P) && e->nranks > 0) {
        member_seen(P, e->comm, -2, e->nranks, -1); /* the size, as first said */
        if (trusted(P, e, proc))
            member_seen(P, e->comm, e->comm_rank, s->proc->sp->rank, proc);
    }
    if (an_graphs_event(&P->graphs, s, SHP_REC_P2P))
        return; /* captured: it executes at each launch */
    uint64_t replay = 0;
    struct an_graph *g = an_graphs_launch(&P->graphs, s, &replay);
    for (size_t i = 0; g && i < g->n; i++) {
        struct an_entry en = an_replay_entry(&g->calls[i], s, replay);
        executed(P, ctx, &g->calls[i].e, &en, proc);
    }
    if (e->type != SHP_REC_P2P)
        return;
    struct an_entry en = an_entry_of(e, s->ref);
    executed(P, ctx, e, &en, proc);
}

/* Sends and receives that found no partner. */
static void p2p_finish(void *st, struct an_ctx *ctx)
{
    struct p2p *P = st;
    for (size_t i = 0; i < P->chans.n; i++) {
        struct an_chan *ch = P->chans.v[i];
        struct an_queue *left = ch->send.n ? &ch->send : ch->recv.n ? &ch->recv : NULL;
        if (!left)
            continue;
        struct an_entry *e = an_queue_at(left, 0);
        /* The partner's trace lost its end: that it never made the call proves nothing. */
        if (lost_end_of(P, ctx, ch->comm, left == &ch->send ? ch->dst : ch->src))
            continue;
        struct an_finding *f = an_finding_add(&ctx->findings, AN_P2P_UNMATCHED);
        if (!f)
            continue;
        f->comm = ch->comm;
        f->seq = e->seq;
        int gs = global_of(P, ch->comm, ch->src), gd = global_of(P, ch->comm, ch->dst);
        an_finding_rank_in(f, gs, ch->src);
        an_finding_rank_in(f, gd, ch->dst);
        an_finding_event(f, &e->ref, e->t_ns);
        if (e->launch.rec && f->nevents < AN_MAX_EVENTS) {
            f->labels[f->nevents] = "the graph launch that executed it";
            f->events[f->nevents++] = e->launch;
        }
        f->waits_on = left == &ch->send ? gd : gs;
        char ws[64], wd[64];
        who(ws, sizeof(ws), gs, ch->src);
        who(wd, sizeof(wd), gd, ch->dst);
        snprintf(f->summary, sizeof(f->summary),
                 "%zu %s from %s to %s on communicator %.8" PRIx64
                 " found no matching %s (first: message #%" PRIu64 ")",
                 left->n, left == &ch->send ? "send(s)" : "receive(s)", ws, wd, ch->comm >> 32,
                 left == &ch->send ? "receive" : "send", e->seq);
        if (e->launch.rec) {
            char note[600];
            an_replay_note(ctx, &e->launch, e->replay, &e->ref, note, sizeof(note));
            size_t l = strlen(f->summary);
            snprintf(f->summary + l, sizeof(f->summary) - l, ", in %s", note);
        }
    }
}

static void p2p_free(void *st)
{
    struct p2p *P = st;
    for (size_t i = 0; i < P->chans.n; i++) {
        struct an_chan *ch = P->chans.v[i];
        free(ch->send.v);
        free(ch->recv.v);
        free(ch);
    }
    an_table_free(&P->chans);
    for (size_t i = 0; i < P->members.n; i++)
        free(P->members.v[i]);
    an_table_free(&P->members);
    an_graphs_free(&P->graphs);
    free(P);
}

const struct an_pass an_pass_p2p = {
    .name = "p2p",
    .types = AN_TYPE(COMM) | AN_TYPE(P2P) | AN_TYPE(GRAPH),
    .init = p2p_init,
    .event = p2p_event,
    .finish = p2p_finish,
    .free = p2p_free,
};
