/* shapetrace tools: decoding records into events, with each op's size rule applied. */
#include "tools/lib/event.h"

#include <emmintrin.h>
#include <stddef.h>
#include <string.h>

#include "common/ops.h"
#include "tools/lib/out.h"
#include "tools/lib/stacks.h"

/* An event with nothing known, as clear() starts every decode: one copy of the fields before the
 * mark's text (a mark fills that itself), where a memset of the whole event, text included, then
 * the stores of every "none" were about 2% of analyze's instructions (callgrind). */
static const struct shp_event blank = {.dur_ns = SHP_NONE,
                                       .seq = SHP_NONE,
                                       .count = SHP_NONE,
                                       .bytes = SHP_NONE,
                                       .send_bytes = SHP_NONE,
                                       .recv_bytes = SHP_NONE,
                                       .src = SHP_NONE,
                                       .dst = SHP_NONE,
                                       .width = SHP_NONE,
                                       .height = SHP_NONE,
                                       .spitch = SHP_NONE,
                                       .dpitch = SHP_NONE,
                                       .stream = SHP_NONE,
                                       .graph = SHP_NONE,
                                       .ptr = SHP_NONE,
                                       .size = SHP_NONE,
                                       .exec = SHP_NONE,
                                       .capture = SHP_NONE,
                                       .parent = SHP_NONE,
                                       .handle = SHP_NONE,
                                       .comm_rank = -1,
                                       .nranks = -1,
                                       .dtype = -1,
                                       .redop = -1,
                                       .root = -1,
                                       .peer = -1,
                                       .kind = -1,
                                       .device = -1};

/* 16 bytes at a time, and not as a memcpy: GCC copies the blank with rep movsq, which takes
 * tens of cycles to start, a quarter of decoding a compact record (perf). */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static void clear(struct shp_event *e)
{
    enum { N = offsetof(struct shp_event, mark_text) };
    const char *src = (const char *)&blank;
    char *dst = (char *)e;
#pragma GCC unroll 32
    for (size_t i = 0; i + 16 <= N; i += 16)
        _mm_storeu_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
    if (N % 16)
        memcpy(dst + N - N % 16, src + N - N % 16, N % 16);
    e->mark_text[0] = 0;
}

/* shp_trace_comm_at, with a communicator of the reader's table (nearly every call's) inline. */
static inline struct shp_trace_comm comm_at(const struct shp_trace *t, unsigned idx)
{
    return idx < t->ncomms ? t->comms[idx] : shp_trace_comm_at(t, idx);
}

static void decode_ev(const struct shp_trace *t, const struct shp_ev *ev, struct shp_event *e)
{
    e->op = ev->op;
    e->cls = shp_op_class(ev->op);
    e->tid = ev->tid;
    e->t_ns = shp_trace_wall_ns(t, shp_trace_mono_ns(t, ev->t));
    uint64_t dur = __atomic_load_n(&ev->dur, __ATOMIC_ACQUIRE);
    e->dur_ns = dur == SHP_DUR_PENDING ? SHP_NONE : shp_trace_dur_ns(t, dur);
    e->flags = ev->flags;
    e->stack = ev->stack;
    e->result = ev->result;
    e->device = ev->device;
    e->group = ev->group;
}

static int bounded_nranks(int n)
{
    return n > SHP_MAX_NRANKS || n < -1 ? -1 : n;
}

/* a x b x c bytes, or SHP_NONE (and e impossible) when that does not fit in 64 bits. */
static uint64_t mul3(struct shp_event *e, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x;
    if (__builtin_mul_overflow(a, b, &x) || __builtin_mul_overflow(x, c, &x) || x == SHP_NONE) {
        e->impossible = true;
        return SHP_NONE;
    }
    return x;
}

/* count x m x es bytes for a multiplier m of 0, 1 or nranks: with 0 or 1 the product needs no
 * check of its own (e->bytes, count x es, was checked just before). */
static uint64_t times(struct shp_event *e, uint64_t count, uint64_t m, unsigned es)
{
    return m == 1 ? e->bytes : m == 0 ? 0 : mul3(e, count, m, es);
}

/* Whether a buffer of `len` bytes from `start` ends within 64 bits (either unknown: it does). */
static bool ends(uint64_t start, uint64_t len)
{
    uint64_t end;
    return start == SHP_NONE || len == SHP_NONE || !__builtin_add_overflow(start, len, &end);
}

/* What a collective or p2p record says beyond its head, full or compact alike; without sizes,
 * its byte counts and buffers stay unknown (shp_event_decode_brief). */
static inline __attribute__((always_inline)) void
coll_fields(struct shp_event *e, unsigned type, unsigned op, uint64_t count, unsigned dtype,
            int root, int comm_rank, int nranks, uint64_t sendbuf, uint64_t recvbuf, bool sizes)
{
    e->count = count;
    e->comm_rank = comm_rank;
    e->nranks = bounded_nranks(nranks);
    e->dtype = (int)dtype;
    e->root = root;
    if (!sizes)
        return;
    unsigned es = shp_dtype_size(dtype);
    /* The op's rule as multipliers of the count (0, 1 or nranks), so that each product is
     * checked: 2^62 fp32 elements are 2^64 bytes, not 0. */
    uint64_t sm, rm;
    shp_op_elems(op, 1, nranks, &sm, &rm);
    e->bytes = mul3(e, count, 1, es);
    e->send_bytes = type == SHP_REC_P2P && !sm ? SHP_NONE : times(e, count, sm, es);
    e->recv_bytes = type == SHP_REC_P2P && !rm ? SHP_NONE : times(e, count, rm, es);
    /* Root-only buffers (the call list's root fact): NCCL neither reads nor writes the receive
     * buffer of a reduce or a gather, nor the send buffer of a broadcast or a scatter, on a
     * non-root rank. They touch 0 bytes there (the address passed is still shown). */
    if (root >= 0 && comm_rank >= 0 && comm_rank != root) {
        int only = shp_op_root(op);
        if (only == SHP_ROOT_RECVS)
            e->recv_bytes = 0;
        else if (only == SHP_ROOT_SENDS)
            e->send_bytes = 0;
    }
    /* A send has no receive buffer and a receive no send buffer. */
    bool p2p = type == SHP_REC_P2P;
    e->src = p2p && e->send_bytes == SHP_NONE ? SHP_NONE : sendbuf;
    e->dst = p2p && e->recv_bytes == SHP_NONE ? SHP_NONE : recvbuf;
    if (!ends(e->src, e->send_bytes) || !ends(e->dst, e->recv_bytes))
        e->impossible = true;
}

/* What a communicator record says beyond its head, full or compact alike (a compact end's id,
 * handle, rank and size are its communicator's record's). */
static void comm_fields(struct shp_event *e, uint64_t id, unsigned kind, uint64_t parent,
                        uint64_t handle, int rank, int nranks)
{
    e->comm = id;
    e->comm_kind = (int)kind;
    e->parent = parent ? parent : SHP_NONE;
    e->handle = handle ? handle : SHP_NONE;
    e->comm_rank = rank;
    e->nranks = bounded_nranks(nranks);
    if (kind == SHP_COMM_SPLIT || kind == SHP_COMM_SHRINK)
        e->root = -1;
}

/* What an allocation or free record says beyond its head, full or compact alike: ptr is a
 * free's argument, or an allocation's result (unknown while the call is pending). */
static void alloc_fields(struct shp_event *e, uint64_t ptr, bool pending, uint64_t size,
                         uint64_t stream)
{
    bool is_free = e->cls == SHP_CLS_FREE;
    e->ptr = !is_free && pending ? SHP_NONE : ptr;
    e->size = is_free ? SHP_NONE : size;
    e->bytes = e->size;
    e->stream = stream ? stream : SHP_NONE;
}

/* What a copy record says of its buffers, full or compact alike: a 2-D copy moves `height` rows
 * of `width` bytes, each side's rows `pitch` apart. */
static void copy_shape(struct shp_event *e, uint64_t src, uint64_t dst, uint64_t width,
                       uint64_t height, uint64_t spitch, uint64_t dpitch)
{
    e->src = src;
    e->dst = dst;
    e->width = width;
    e->height = height;
    e->spitch = spitch;
    e->dpitch = dpitch;
    e->bytes = mul3(e, width, height, 1);
    if (height) {
        /* the extent each side spans: (height - 1) x pitch + width */
        uint64_t rs = mul3(e, height - 1, spitch, 1), rd = mul3(e, height - 1, dpitch, 1);
        if (!ends(rs, width) || !ends(rd, width) || (rs != SHP_NONE && !ends(src, rs + width)) ||
            (rd != SHP_NONE && !ends(dst, rd + width)))
            e->impossible = true;
    }
}

static void decode_head(const struct shp_trace *t, const struct shp_head *h, struct shp_event *e)
{
    e->op = h->op;
    e->cls = shp_op_class(h->op);
    e->tid = h->tid;
    e->t_ns = shp_trace_wall_ns(t, shp_trace_mono_ns(t, h->t));
    uint64_t done = __atomic_load_n(&h->done, __ATOMIC_ACQUIRE);
    e->dur_ns = done == SHP_DONE_PENDING ? SHP_NONE : shp_trace_dur_ns(t, SHP_DONE_DUR(done));
    e->result = done == SHP_DONE_PENDING ? 0 : SHP_DONE_RESULT(done);
    e->flags = h->flags;
    e->group = h->group;
}

/* A compact record, decoded to what its full record would say (trace.h). */
/* A collective or p2p record whose op is not a collective or a send/receive is damage: taken for
 * a call, it would be queued as nothing the analyzer can line up (seen: a fuzzed op 0 read as a
 * run of unknown places 2^64 long). */
static bool call_of_its_type(unsigned type, unsigned op)
{
    return shp_op_class(op) == (type == SHP_REC_P2P ? SHP_CLS_P2P : SHP_CLS_COLL);
}

static inline __attribute__((always_inline)) bool decode_compact(const struct shp_trace *t,
                                                                 const struct shp_rec *r,
                                                                 unsigned phys, struct shp_event *e,
                                                                 bool sizes)
{
    const struct shp_head *h = (const void *)r;
    decode_head(t, h, e);
    switch (phys) {
    case SHP_REC_COPY_C:
    case SHP_REC_COPY2D_C: {
        const struct shp_rec_copy_c *c = (const void *)r; /* a 2-D one starts with a row */
        e->stack = SHP_P48_TOP(c->stream_slo) | (uint32_t)SHP_P48_TOP(c->bytes_shi) << 16;
        e->device = (int16_t)SHP_P48_TOP(c->dst_dev);
        e->kind = (uint8_t)SHP_P48_TOP(c->src_kind);
        e->stream = SHP_P48_VAL(c->stream_slo);
        uint64_t dst = SHP_P48_VAL(c->dst_dev), src = SHP_P48_VAL(c->src_kind),
                 width = SHP_P48_VAL(c->bytes_shi);
        if (phys == SHP_REC_COPY_C) {
            e->dst = dst;
            e->src = src;
            e->width = e->spitch = e->dpitch = e->bytes = width;
            e->height = 1;
            return true;
        }
        const struct shp_rec_copy2d_c *d = (const void *)r;
        copy_shape(e, src, dst, width,
                   SHP_P48_TOP(d->spitch_hlo) | (uint64_t)SHP_P48_TOP(d->dpitch_hhi) << 16,
                   SHP_P48_VAL(d->spitch_hlo), SHP_P48_VAL(d->dpitch_hhi));
        return true;
    }
    case SHP_REC_COLL_C:
    case SHP_REC_P2P_C: {
        const struct shp_rec_coll_c *c = (const void *)r;
        struct shp_trace_comm cm = comm_at(t, SHP_P48_TOP(c->send_comm));
        unsigned type = shp_rec_as(phys);
        /* decode_head took the op's class already */
        if (e->cls != (type == SHP_REC_P2P ? SHP_CLS_P2P : SHP_CLS_COLL))
            return false;
        int rp = (int16_t)SHP_P48_TOP(c->recv_rp);
        unsigned redop = (unsigned)(c->count_dt >> 56);
        e->stack = SHP_P48_TOP(c->stream_slo) | (uint32_t)SHP_P48_TOP(c->seq_shi) << 16;
        e->device = cm.device;
        e->comm = cm.ok ? cm.id : 0;
        e->seq = SHP_P48_VAL(c->seq_shi);
        e->redop = redop == SHP_REDOP_NONE ? -1 : (int)redop;
        e->peer = type == SHP_REC_P2P ? rp : -1;
        e->stream = SHP_P48_VAL(c->stream_slo);
        coll_fields(e, type, h->op, SHP_P48_VAL(c->count_dt), (uint8_t)(c->count_dt >> 48),
                    type == SHP_REC_P2P ? -1 : rp, cm.rank, cm.nranks, SHP_P48_VAL(c->send_comm),
                    SHP_P48_VAL(c->recv_rp), sizes);
        return true;
    }
    case SHP_REC_COMM_END_C: {
        const struct shp_rec_comm_end_c *c = (const void *)r;
        if (e->cls != SHP_CLS_COMM_END)
            return false; /* damage, as for a collective's op below */
        struct shp_trace_comm cm = comm_at(t, c->comm);
        e->stack = c->stack;
        e->device = -1;
        comm_fields(e, cm.ok ? cm.id : 0, c->kind, 0, cm.ok ? cm.handle : 0, cm.rank, cm.nranks);
        return true;
    }
    case SHP_REC_ALLOC_C: {
        const struct shp_rec_alloc_c *c = (const void *)r;
        if (e->cls != SHP_CLS_ALLOC && e->cls != SHP_CLS_FREE)
            return false;
        e->stack = c->stack;
        e->device = (int16_t)SHP_P48_TOP(c->size_dev);
        alloc_fields(e, __atomic_load_n(&c->ptr, __ATOMIC_RELAXED), e->dur_ns == SHP_NONE,
                     SHP_P48_VAL(c->size_dev), 0);
        return true;
    }
    case SHP_REC_LAUNCH_C: {
        const struct shp_rec_launch_c *c = (const void *)r;
        e->stack = SHP_P48_TOP(c->stream_slo) | (uint32_t)SHP_P48_TOP(c->exec_shi) << 16;
        e->stream = SHP_P48_VAL(c->stream_slo);
        e->exec = SHP_P48_VAL(c->exec_shi) ? SHP_P48_VAL(c->exec_shi) : SHP_NONE;
        return true;
    }
    default:
        return false;
    }
}

static inline __attribute__((always_inline)) bool decode(const struct shp_trace *t,
                                                         const struct shp_rec *r, unsigned type,
                                                         struct shp_event *e, bool sizes)
{
    clear(e);
    e->type = type;
    unsigned phys = SHP_REC_WORD_TYPE(r->word);
    if (phys != type && shp_rec_as(phys) == type && (shp_rec_role(phys) & SHP_ROLE_COMPACT))
        return decode_compact(t, r, phys, e, sizes);
    switch (type) {
    case SHP_REC_COLL:
    case SHP_REC_P2P: {
        const struct shp_rec_coll *c = (const void *)r;
        if (!call_of_its_type(type, c->ev.op))
            return false;
        decode_ev(t, &c->ev, e);
        e->comm = c->comm;
        e->seq = c->seq;
        e->redop = c->redop == SHP_REDOP_NONE ? -1 : c->redop;
        e->peer = c->peer;
        e->stream = c->stream;
        e->graph = c->graph ? c->graph : SHP_NONE;
        coll_fields(e, type, c->ev.op, c->count, c->dtype, c->root, c->comm_rank, c->nranks,
                    c->sendbuf, c->recvbuf, sizes);
        return true;
    }
    case SHP_REC_COPY: {
        const struct shp_rec_copy *c = (const void *)r;
        decode_ev(t, &c->ev, e);
        copy_shape(e, c->src, c->dst, c->width, c->height, c->spitch, c->dpitch);
        e->kind = c->kind;
        e->stream = c->stream;
        e->graph = c->graph ? c->graph : SHP_NONE;
        return true;
    }
    case SHP_REC_COMM: {
        const struct shp_rec_comm *c = (const void *)r;
        decode_ev(t, &c->ev, e);
        comm_fields(e, c->id, c->kind, c->parent, shp_comm_rec_handle(c), shp_comm_rec_rank(c),
                    shp_comm_rec_nranks(c));
        return true;
    }
    case SHP_REC_GROUP: {
        decode_ev(t, (const void *)r, e);
        return true;
    }
    case SHP_REC_ALLOC: {
        const struct shp_rec_alloc *c = (const void *)r;
        decode_ev(t, &c->ev, e);
        bool is_free = e->cls == SHP_CLS_FREE;
        alloc_fields(e, is_free ? c->ptr : c->ev.out, c->ev.dur == SHP_DUR_PENDING, c->size,
                     c->stream);
        return true;
    }
    case SHP_REC_GRAPH: {
        const struct shp_rec_graph *c = (const void *)r;
        decode_ev(t, &c->ev, e);
        e->stream = c->stream;
        e->capture = c->capture ? c->capture : SHP_NONE;
        /* What an instantiation creates is an executable graph, not a graph (its class says so
         * at every level: runtime and driver). */
        e->graph =
            c->graph ? c->graph : (c->ev.out && e->cls != SHP_CLS_GRAPH ? c->ev.out : SHP_NONE);
        e->exec = c->exec ? c->exec : (c->ev.out && e->graph == c->graph ? c->ev.out : SHP_NONE);
        return true;
    }
    case SHP_REC_MARK: {
        const struct shp_rec_mark *m = (const void *)r;
        e->t_ns = shp_trace_wall_ns(t, m->t_ns); /* a mark's time is monotonic whatever the clock */
        /* A copy: the record's text may lack its NUL, and the file may end right after it. */
        memcpy(e->mark_text, m->text, sizeof(m->text));
        e->mark_text[sizeof(m->text)] = 0;
        e->mark = e->mark_text;
        return true;
    }
    default:
        return false;
    }
}

bool shp_event_decode(const struct shp_trace *t, const struct shp_rec *r, unsigned type,
                      struct shp_event *e)
{
    return decode(t, r, type, e, true);
}

bool shp_event_decode_brief(const struct shp_trace *t, const struct shp_rec *r, unsigned type,
                            struct shp_event *e)
{
    return decode(t, r, type, e, false);
}

void shp_event_spans(const struct shp_event *e, struct shp_span *read, struct shp_span *write)
{
    *read = *write = (struct shp_span){.rows = 1};
    if (e->impossible)
        return; /* a size or an end past 64 bits: no range to follow */
    switch (e->type) {
    case SHP_REC_COLL:
    case SHP_REC_P2P:
        if (e->src != SHP_NONE && e->send_bytes != SHP_NONE)
            read->start = e->src, read->len = e->send_bytes;
        if (e->dst != SHP_NONE && e->recv_bytes != SHP_NONE) {
            write->start = e->dst;
            write->len = e->recv_bytes;
            /* An all-gather's output is its ranks' pieces side by side: rows of one piece. */
            if (e->op == SHP_OP_ncclAllGather && e->nranks > 1)
                write->pitch = write->width = e->send_bytes;
        }
        break;
    case SHP_REC_COPY:
        if (e->height == SHP_NONE || e->height == 0)
            break;
        read->start = e->src;
        write->start = e->dst;
        /* A span that does not fit in 64 bits is damage: no span (the loops over its rows
         * would wrap). */
        if (__builtin_mul_overflow(e->height - 1, e->spitch, &read->len) ||
            __builtin_add_overflow(read->len, e->width, &read->len) ||
            __builtin_mul_overflow(e->height - 1, e->dpitch, &write->len) ||
            __builtin_add_overflow(write->len, e->width, &write->len)) {
            *read = *write = (struct shp_span){.rows = 1};
            break;
        }
        read->rows = write->rows = e->height;
        if (e->height > 1) {
            read->pitch = e->spitch;
            write->pitch = e->dpitch;
            read->width = write->width = e->width;
        }
        break;
    default:
        break;
    }
}

/* Keys go out with their comma and colon as one literal: K(",\"seq\":"). */
#define K(lit) shp_out_mem(o, lit, sizeof(lit) - 1)

static void json_u64(struct shp_out *o, uint64_t v)
{
    if (v == SHP_NONE)
        K("null");
    else
        shp_out_u64(o, v);
}

static void json_int(struct shp_out *o, int v)
{
    if (v < 0)
        K("null");
    else
        shp_out_int(o, v);
}

static void json_hex(struct shp_out *o, uint64_t v)
{
    if (v == SHP_NONE) {
        K("null");
        return;
    }
    K("\"0x");
    shp_out_hex(o, v, 1);
    shp_out_char(o, '"');
}

static void json_bool(struct shp_out *o, bool v)
{
    if (v)
        K("true");
    else
        K("false");
}

static void comm_id(struct shp_out *o, uint64_t id)
{
    shp_out_char(o, '"');
    shp_out_hex(o, id, 16);
    shp_out_char(o, '"');
}

void shp_event_json_out(struct shp_out *o, const struct shp_trace *t, struct shp_stacks *st,
                        const struct shp_event *e)
{
    const struct shp_file_header *h = t->hdr;
    K("{\"file\":");
    shp_out_json_str(o, t->path);
    K(",\"index\":");
    shp_out_u64(o, e->index);
    K(",\"host\":");
    shp_out_json_str(o, h->host);
    K(",\"pid\":");
    shp_out_u64(o, h->pid);
    K(",\"tid\":");
    shp_out_u64(o, e->tid);
    K(",\"rank\":");
    json_int(o, shp_trace_rank(t));
    K(",\"t_ns\":");
    shp_out_u64(o, e->t_ns);
    K(",\"dur_ns\":");
    json_u64(o, e->dur_ns);
    K(",\"op\":");
    shp_out_json_str(o, e->mark ? "mark" : shp_op_name(e->op));
    K(",\"comm\":");
    if (e->comm)
        comm_id(o, e->comm);
    else
        K("null");
    K(",\"comm_rank\":");
    json_int(o, e->comm_rank);
    K(",\"nranks\":");
    json_int(o, e->nranks);
    K(",\"seq\":");
    json_u64(o, e->seq);
    K(",\"count\":");
    json_u64(o, e->count);
    K(",\"dtype\":");
    shp_out_json_str(o, e->dtype >= 0 ? shp_dtype_name((unsigned)e->dtype) : NULL);
    K(",\"bytes\":");
    json_u64(o, e->bytes);
    K(",\"send_bytes\":");
    json_u64(o, e->send_bytes);
    K(",\"recv_bytes\":");
    json_u64(o, e->recv_bytes);
    K(",\"peer\":");
    json_int(o, e->peer);
    K(",\"root\":");
    json_int(o, e->root);
    K(",\"redop\":");
    shp_out_json_str(o, e->redop >= 0 ? shp_redop_name((unsigned)e->redop) : NULL);
    K(",\"src\":");
    json_hex(o, e->src);
    K(",\"dst\":");
    json_hex(o, e->dst);
    K(",\"kind\":");
    shp_out_json_str(o, e->kind >= 0 && e->kind <= 4 ? shp_kind_names[e->kind] : NULL);
    K(",\"width\":");
    json_u64(o, e->width);
    K(",\"height\":");
    json_u64(o, e->height);
    K(",\"spitch\":");
    json_u64(o, e->spitch);
    K(",\"dpitch\":");
    json_u64(o, e->dpitch);
    K(",\"stream\":");
    json_hex(o, e->stream);
    K(",\"captured\":");
    if (e->mark)
        K("null");
    else
        json_bool(o, e->flags & SHP_EV_CAPTURED);
    K(",\"graph\":");
    json_hex(o, e->graph);
    K(",\"result\":");
    if (e->mark || e->dur_ns == SHP_NONE)
        K("null");
    else
        shp_out_int(o, e->result);
    /* Keys beyond the first list of docs/CONTRACTS.md. */
    K(",\"device\":");
    json_int(o, e->device);
    K(",\"pending\":");
    json_bool(o, !e->mark && e->dur_ns == SHP_NONE);
    if (e->type == SHP_REC_COMM) {
        K(",\"comm_kind\":");
        shp_out_json_str(o, shp_comm_kind_names[e->comm_kind < 7 ? e->comm_kind : 0]);
        if (e->parent != SHP_NONE) {
            K(",\"parent\":");
            comm_id(o, e->parent);
        }
        K(",\"handle\":");
        json_hex(o, e->handle);
    }
    if (e->type == SHP_REC_ALLOC) {
        K(",\"ptr\":");
        json_hex(o, e->ptr);
        K(",\"size\":");
        json_u64(o, e->size);
    }
    if (e->type == SHP_REC_GRAPH) {
        K(",\"exec\":");
        json_hex(o, e->exec);
        K(",\"capture\":");
        json_u64(o, e->capture);
    }
    if (e->mark) {
        K(",\"mark\":");
        shp_out_json_str(o, e->mark);
    }
    /* The frame a person reads first (the site rule, site.h), then every frame. */
    K(",\"site\":");
    shp_stacks_site_json_out(o, st, e->stack);
    K(",\"stack\":");
    shp_stacks_json_out(o, st, e->stack);
    shp_out_char(o, '}');
}

void shp_event_json(FILE *f, const struct shp_trace *t, struct shp_stacks *st,
                    const struct shp_event *e)
{
    struct shp_out o;
    shp_out_init(&o, f);
    shp_event_json_out(&o, t, st, e);
    shp_out_flush(&o);
}
