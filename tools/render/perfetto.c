/* shapetrace render: the timeline in Perfetto's protobuf trace format, written by shapetrace
 * itself (pb.h): a track descriptor per process and thread, slice begin and end events with
 * interned names, categories and arguments, flow ids, and instants. One packet sequence. Each
 * packet is written in place into the output buffer, which a thread of its own writes out
 * (sink.h); a string is interned by its address (timeline.h: the walk's strings stay put). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/render/pb.h"
#include "tools/render/sink.h"
#include "tools/render/timeline.h"

/* Field numbers of perfetto.protos (trace_packet.proto, track_event.proto, ...). */
#define TRACE_PACKET 1
#define PKT_TIMESTAMP 8
#define PKT_SEQ_ID 10
#define PKT_TRACK_EVENT 11
#define PKT_INTERNED 12
#define PKT_SEQ_FLAGS 13
#define PKT_TRACK_DESC 60
#define SEQ_CLEARED 1
#define SEQ_NEEDS_STATE 2
#define TD_UUID 1
#define TD_NAME 2
#define TD_PROCESS 3
#define TD_THREAD 4
#define TD_PARENT 5
#define PD_PID 1
#define PD_NAME 6
#define THD_PID 1
#define THD_TID 2
#define THD_NAME 5
#define TE_CATEGORY_IIDS 3
#define TE_ANNOT 4
#define TE_TYPE 9
#define TE_NAME_IID 10
#define TE_TRACK 11
#define TE_FLOW_IDS 47
#define TE_SLICE_BEGIN 1
#define TE_SLICE_END 2
#define TE_INSTANT 3
#define DA_NAME_IID 1
#define DA_BOOL 2
#define DA_UINT 3
#define DA_INT 4
#define DA_STRING 6
#define DA_STRING_IID 17
#define ID_EVENT_CATEGORIES 1
#define ID_EVENT_NAMES 2
#define ID_ANNOT_NAMES 3
#define ID_STRINGS 29
#define SEQ 1 /* the sequence of the file's own packets; a process's part has its own */

#define RECENT_BITS 6

/* Interned strings of one kind, by address: iids from 1, in the order they came. */
struct itab {
    const char **s;
    uint64_t *iid;
    size_t n, cap; /* open addressing, at most half full */
    uint64_t next;
    unsigned field; /* of InternedData */
};

struct perfetto {
    struct shp_sink *sink; /* NULL: written to out here, or emitted */
    FILE *out;
    /* A part (timeline.h): its bytes go to emit, in the packets of sequence seq. */
    int (*emit)(void *, char **, size_t *, size_t *);
    void *emit_arg;
    uint32_t seq;
    uint64_t t0;
    struct itab cats, names, keys, values;
    struct recent { /* by a key's address: the key, its last string value, their iids */
        const char *key, *value;
        uint64_t key_iid, value_iid;
    } recent[1 << RECENT_BITS];
    struct shp_pb buf, interned;
    bool cleared, oom;
    int err;
};

static inline size_t slot_of(const struct itab *t, const char *s)
{
    /* Fibonacci hashing: the product's top bits (its middle ones made long probe runs of the
     * addresses of neighbouring string literals). */
    uint64_t h = (uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ull;
    size_t k = (size_t)(h >> (64 - __builtin_ctzll(t->cap)));
    while (t->s[k] && t->s[k] != s)
        k = (k + 1) & (t->cap - 1);
    return k;
}

/* Doubles t when it is half full; false when out of memory (t unchanged). */
static bool itab_room(struct itab *t)
{
    if (t->n * 2 < t->cap)
        return true;
    struct itab nt = *t;
    nt.cap = t->cap ? t->cap * 2 : 256;
    nt.s = calloc(nt.cap, sizeof(*nt.s));
    nt.iid = calloc(nt.cap, sizeof(*nt.iid));
    if (!nt.s || !nt.iid) {
        free(nt.s), free(nt.iid);
        return false;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->s[i])
            continue;
        size_t k = slot_of(&nt, t->s[i]);
        nt.s[k] = t->s[i], nt.iid[k] = t->iid[i];
    }
    free(t->s), free(t->iid);
    *t = nt;
    return true;
}

/* A new string's iid, defined in pf->interned, at slot k; 0 when out of memory. */
static __attribute__((noinline)) uint64_t intern_new(struct perfetto *pf, struct itab *t, size_t k,
                                                     const char *s)
{
    if (t->n * 2 >= t->cap) {
        if (!itab_room(t)) {
            pf->oom = true;
            return 0;
        }
        k = slot_of(t, s);
    }
    t->s[k] = s;
    t->iid[k] = ++t->next;
    t->n++;
    size_t at = shp_pb_begin(&pf->interned, t->field);
    shp_pb_uint(&pf->interned, 1, t->iid[k]);
    shp_pb_str(&pf->interned, 2, s);
    shp_pb_end(&pf->interned, at);
    return t->iid[k];
}

/* The iid of s, defined in pf->interned when it is new; 0 when out of memory. Inline: a known
 * string (nearly every time) is a probe or two. */
static inline __attribute__((always_inline)) uint64_t intern(struct perfetto *pf, struct itab *t,
                                                             const char *s)
{
    if (__builtin_expect(!t->cap, 0))
        return intern_new(pf, t, 0, s);
    size_t k = slot_of(t, s);
    if (__builtin_expect(t->s[k] != NULL, 1))
        return t->iid[k];
    return intern_new(pf, t, k, s);
}

static void itab_free(struct itab *t)
{
    free(t->s), free(t->iid);
    memset(t, 0, sizeof(*t));
}

/* Hands the output buffer to the writer once it holds a chunk's worth (a packet is small: one
 * more never takes the buffer past its size); all: the rest, without a sink (shp_sink_close
 * takes the last buffer). */
static void pf_flush(struct perfetto *pf, bool all)
{
    struct shp_pb *b = &pf->buf;
    if (!b->len || (!all && b->len < SHP_SINK_CHUNK - 65536) || (all && pf->sink))
        return;
    if (pf->emit || pf->sink) { /* a part's emit takes a buffer as the sink does */
        char *p = (char *)b->p;
        if ((pf->emit ? pf->emit(pf->emit_arg, &p, &b->len, &b->cap)
                      : shp_sink_put(pf->sink, &p, &b->len, &b->cap)) < 0)
            pf->oom = true;
        b->p = (uint8_t *)p;
        return;
    }
    if (fwrite(b->p, 1, b->len, pf->out) != b->len && !pf->err)
        pf->err = errno ? errno : EIO;
    b->len = 0;
}

/* A packet: its start, and its end with the sequence's fields. */
static size_t packet_begin(struct perfetto *pf)
{
    return shp_pb_begin(&pf->buf, TRACE_PACKET);
}

static void packet_end(struct perfetto *pf, size_t at, bool needs_state)
{
    shp_pb_uint(&pf->buf, PKT_SEQ_ID, pf->seq);
    if (!pf->cleared) {
        shp_pb_uint(&pf->buf, PKT_SEQ_FLAGS, SEQ_CLEARED | SEQ_NEEDS_STATE);
        pf->cleared = true;
    } else if (needs_state) {
        shp_pb_uint(&pf->buf, PKT_SEQ_FLAGS, SEQ_NEEDS_STATE);
    }
    shp_pb_end(&pf->buf, at);
    pf_flush(pf, false);
}

/* Track uuids: Cantor's pairing of the timeline's pid (1..) with 0 for the process and tord + 1
 * for its threads, one-to-one and small, since every event names its track: the first threads
 * of a few ranks take one byte, where pid << 32 took five (8 of a slice's 120 bytes). */
static uint64_t track_uuid(uint32_t pid, uint64_t t)
{
    uint64_t s = pid + t;
    return s * (s + 1) / 2 + t;
}

static uint64_t proc_uuid(uint32_t pid)
{
    return track_uuid(pid, 0);
}

static uint64_t thread_uuid(uint32_t pid, uint32_t tord)
{
    return track_uuid(pid, (uint64_t)tord + 1);
}

static struct perfetto *pf_new(uint64_t t0, uint32_t seq)
{
    struct perfetto *pf = calloc(1, sizeof(*pf));
    if (!pf)
        return NULL;
    pf->t0 = t0;
    pf->seq = seq;
    pf->cats.field = ID_EVENT_CATEGORIES;
    pf->names.field = ID_EVENT_NAMES;
    pf->keys.field = ID_ANNOT_NAMES;
    pf->values.field = ID_STRINGS;
    return pf;
}

static void *perfetto_open(FILE *out, uint64_t t0, void *arg)
{
    (void)arg;
    struct perfetto *pf = pf_new(t0, SEQ);
    if (!pf)
        return NULL;
    pf->out = out;
    pf->sink = shp_sink_open(out);
    return pf;
}

/* A process's packets on a sequence of its own: its strings interned there, apart from the
 * other parts'. */
static void *perfetto_part(uint64_t t0, uint32_t seq,
                           int (*emit)(void *, char **, size_t *, size_t *), void *arg)
{
    struct perfetto *pf = pf_new(t0, seq);
    if (pf) {
        pf->emit = emit;
        pf->emit_arg = arg;
    }
    return pf;
}

static void perfetto_raw(void *b, const char *p, size_t n, bool start)
{
    (void)start;
    struct perfetto *pf = b;
    shp_pb_raw(&pf->buf, p, n); /* out of memory: pf->buf.oom, which close reports */
    pf_flush(pf, false);
}

static void perfetto_process(void *b, const struct shp_tl_proc *p, const char *name)
{
    struct perfetto *pf = b;
    struct shp_pb *o = &pf->buf;
    size_t pk = packet_begin(pf), td = shp_pb_begin(o, PKT_TRACK_DESC);
    shp_pb_uint(o, TD_UUID, proc_uuid(p->pid));
    size_t pd = shp_pb_begin(o, TD_PROCESS);
    shp_pb_uint(o, PD_PID, p->pid);
    shp_pb_str(o, PD_NAME, name);
    shp_pb_end(o, pd);
    shp_pb_end(o, td);
    packet_end(pf, pk, false);
}

static void perfetto_thread(void *b, const struct shp_tl_proc *p, uint32_t tord, const char *what)
{
    struct perfetto *pf = b;
    struct shp_pb *o = &pf->buf;
    size_t pk = packet_begin(pf), td = shp_pb_begin(o, PKT_TRACK_DESC);
    shp_pb_uint(o, TD_UUID, thread_uuid(p->pid, tord));
    shp_pb_uint(o, TD_PARENT, proc_uuid(p->pid));
    size_t thd = shp_pb_begin(o, TD_THREAD);
    shp_pb_uint(o, THD_PID, p->pid);
    /* Real tids of different hosts may collide; the viewer keys threads by tid alone. */
    shp_pb_uint(o, THD_TID, (uint64_t)p->pid * 65536 + tord + 1);
    char tname[96];
    snprintf(tname, sizeof(tname), "%s %u", what, p->tids[tord]);
    shp_pb_str(o, THD_NAME, tname);
    shp_pb_end(o, thd);
    shp_pb_end(o, td);
    packet_end(pf, pk, false);
}

/* The iids of an event's strings, interned first so that their definitions come in the packet
 * before the event that uses them. */
struct iids {
    uint64_t name, cat;
    uint64_t key[SHP_TL_MAX_ARGS], value[SHP_TL_MAX_ARGS];
};

/* Writes without a check: pf_event makes room for the whole packet first. */
static inline uint8_t *put_varint(uint8_t *q, uint64_t v)
{
    while (v >= 0x80) {
        *q++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *q++ = (uint8_t)v;
    return q;
}

static inline uint8_t *put_uint(uint8_t *q, unsigned field, uint64_t v)
{
    return put_varint(put_varint(q, (uint64_t)field << 3), v);
}

/* Sets the one-byte length at `len` of the message that ends at q, moving the message along
 * when its length takes more bytes (over 127: pf_event's room allows for 2); returns the new
 * end. */
static inline uint8_t *put_len(uint8_t *len, uint8_t *q)
{
    size_t n = (size_t)(q - len - 1);
    if (__builtin_expect(n < 0x80, 1)) {
        *len = (uint8_t)n;
        return q;
    }
    uint8_t v[10], *e = put_varint(v, n);
    size_t more = (size_t)(e - v) - 1;
    memmove(len + 1 + more, len + 1, n);
    memcpy(len, v, more + 1);
    return q + more;
}

static void pf_event(struct perfetto *pf, uint64_t ts, unsigned type, uint64_t track,
                     const char *name, const char *cat, const struct shp_tl_arg *a, int na,
                     const struct shp_tl_flow *f, size_t nf)
{
    /* Not zeroed: only what is used is set (clearing it all took a quarter of this function). */
    struct iids id;
    id.name = id.cat = 0;
    shp_pb_reset(&pf->interned);
    if (name) {
        id.name = intern(pf, &pf->names, name);
        id.cat = intern(pf, &pf->cats, cat);
    }
    /* The keys are a few dozen texts, each mostly with the value it had last time: a small
     * cache by the key's address remembers its iid, its last string value and that one's iid;
     * the tables are asked on a miss. */
    for (int i = 0; i < na; i++) {
        struct recent *r = &pf->recent[(uint64_t)(uintptr_t)a[i].key * 0x9e3779b97f4a7c15ull >>
                                       (64 - RECENT_BITS)];
        if (r->key != a[i].key) {
            r->key = a[i].key;
            r->key_iid = intern(pf, &pf->keys, a[i].key);
            r->value = NULL;
        }
        id.key[i] = r->key_iid;
        if (a[i].type != SHP_TL_S)
            continue;
        if (r->value != a[i].s) {
            r->value = a[i].s;
            r->value_iid = intern(pf, &pf->values, a[i].s);
        }
        id.value[i] = r->value_iid;
    }
    /* At most: the packet's key and length (1 and 3), its timestamp (11), the interned data
     * (11 and its bytes), the event's key and length (1 and 3), its type, track, name and
     * category (44), an argument's 25, a flow's 10, the sequence's fields (6). */
    size_t most = 90 + pf->interned.len + (size_t)na * 25 + nf * 10;
    if (!shp_pb_room(&pf->buf, most)) {
        pf->oom = true;
        return;
    }
    uint8_t *q = pf->buf.p + pf->buf.len, *pk, *te;
    *q++ = TRACE_PACKET << 3 | 2;
    pk = q++;
    q = put_uint(q, PKT_TIMESTAMP, ts - pf->t0);
    if (pf->interned.len) {
        *q++ = PKT_INTERNED << 3 | 2;
        q = put_varint(q, pf->interned.len);
        memcpy(q, pf->interned.p, pf->interned.len);
        q += pf->interned.len;
    }
    *q++ = PKT_TRACK_EVENT << 3 | 2;
    te = q++;
    q = put_uint(q, TE_TYPE, type);
    q = put_uint(q, TE_TRACK, track);
    if (name) {
        q = put_uint(q, TE_NAME_IID, id.name);
        q = put_uint(q, TE_CATEGORY_IIDS, id.cat);
    }
    for (int i = 0; i < na; i++) {
        *q++ = TE_ANNOT << 3 | 2;
        uint8_t *an = q++;
        q = put_uint(q, DA_NAME_IID, id.key[i]);
        if (a[i].type == SHP_TL_S)
            q = put_uint(q, DA_STRING_IID, id.value[i]);
        else if (a[i].type == SHP_TL_B)
            q = put_uint(q, DA_BOOL, a[i].u);
        else
            q = put_uint(q, a[i].type == SHP_TL_I ? DA_INT : DA_UINT, a[i].u);
        q = put_len(an, q);
    }
    for (size_t i = 0; i < nf; i++) {
        q = put_varint(q, TE_FLOW_IDS << 3 | 1);
        for (int k = 0; k < 8; k++)
            *q++ = (uint8_t)(f[i].id >> (8 * k));
    }
    q = put_len(te, q);
    q = put_uint(q, PKT_SEQ_ID, pf->seq);
    if (!pf->cleared) {
        q = put_uint(q, PKT_SEQ_FLAGS, SEQ_CLEARED | SEQ_NEEDS_STATE);
        pf->cleared = true;
    } else if (name) {
        q = put_uint(q, PKT_SEQ_FLAGS, SEQ_NEEDS_STATE);
    }
    q = put_len(pk, q);
    pf->buf.len = (size_t)(q - pf->buf.p);
    pf_flush(pf, false);
}

static void perfetto_slice(void *b, const struct shp_tl_slice *s)
{
    struct perfetto *pf = b;
    uint64_t track = thread_uuid(s->proc->pid, s->tord);
    pf_event(pf, s->ts, TE_SLICE_BEGIN, track, s->name, s->cat, s->a, s->na, s->f, s->nf);
    pf_event(pf, s->ts + s->dur, TE_SLICE_END, track, NULL, NULL, NULL, 0, NULL, 0);
}

static void perfetto_instant(void *b, const struct shp_tl_instant *in)
{
    uint64_t track = in->process ? proc_uuid(in->proc->pid) : thread_uuid(in->proc->pid, in->tord);
    pf_event(b, in->ts, TE_INSTANT, track, in->name, in->cat, in->a, in->na, NULL, 0);
}

static int perfetto_close(void *b)
{
    struct perfetto *pf = b;
    pf_flush(pf, true);
    int rc = pf->sink ? shp_sink_close(pf->sink, (const char *)pf->buf.p, pf->buf.len) : 0;
    bool oom = pf->oom || pf->buf.oom || pf->interned.oom;
    if (!rc)
        rc = pf->err ? -pf->err : oom ? -ENOMEM : 0;
    itab_free(&pf->cats), itab_free(&pf->names), itab_free(&pf->keys), itab_free(&pf->values);
    shp_pb_free(&pf->buf), shp_pb_free(&pf->interned);
    free(pf);
    return rc;
}

const struct shp_tl_ops shp_tl_perfetto = {
    .name = "Perfetto protobuf",
    .path = "trace.perfetto-trace",
    .open = perfetto_open,
    .process = perfetto_process,
    .thread = perfetto_thread,
    .slice = perfetto_slice,
    .instant = perfetto_instant,
    .close = perfetto_close,
    .part = perfetto_part,
    .raw = perfetto_raw,
};
