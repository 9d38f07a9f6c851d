/* shapetrace render: the timeline in Perfetto's protobuf trace format, written by shapetrace
 * itself (pb.h): a track descriptor per process and thread, slice begin and end events with
 * interned names and arguments, flow ids, and instants. One packet sequence. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/render/pb.h"
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
#define TE_ANNOT 4
#define TE_TYPE 9
#define TE_NAME_IID 10
#define TE_TRACK 11
#define TE_CATEGORIES 22
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
#define ID_EVENT_NAMES 2
#define ID_ANNOT_NAMES 3
#define ID_STRINGS 29
#define SEQ 1 /* the one packet sequence this writer uses */

/* Interned strings: names of events, of annotations, and annotation values. */
struct itab {
    char **s;
    uint64_t *h;
    size_t n, cap; /* open addressing; iid = slot's insertion number */
    uint64_t *iid;
    uint64_t next;
};

struct perfetto {
    FILE *out;
    uint64_t t0;
    struct itab names, keys, values;
    struct shp_pb pkt, ev, sub, interned, item, buf;
    bool cleared, oom;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Doubles t when it is half full; false when out of memory (t unchanged). */
static bool itab_room(struct itab *t)
{
    if (t->n * 2 < t->cap)
        return true;
    size_t cap = t->cap ? t->cap * 2 : 256;
    struct itab nt = {calloc(cap, sizeof(char *)), calloc(cap, 8), 0, cap, calloc(cap, 8), t->next};
    if (!nt.s || !nt.h || !nt.iid) {
        free(nt.s), free(nt.h), free(nt.iid);
        return false;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->s[i])
            continue;
        size_t k = t->h[i] & (cap - 1);
        while (nt.s[k])
            k = (k + 1) & (cap - 1);
        nt.s[k] = t->s[i], nt.h[k] = t->h[i], nt.iid[k] = t->iid[i];
        nt.n++;
    }
    free(t->s), free(t->h), free(t->iid);
    *t = nt;
    return true;
}

/* The iid of s; *fresh true when it was just added (the caller emits its definition). 0 when
 * out of memory. */
static uint64_t intern(struct itab *t, const char *s, bool *fresh)
{
    *fresh = false;
    if (!itab_room(t))
        return 0;
    uint64_t h = hash_str(s);
    size_t k = h & (t->cap - 1);
    while (t->s[k]) {
        if (t->h[k] == h && !strcmp(t->s[k], s))
            return t->iid[k];
        k = (k + 1) & (t->cap - 1);
    }
    t->s[k] = strdup(s);
    if (!t->s[k])
        return 0;
    t->h[k] = h;
    t->iid[k] = ++t->next;
    t->n++;
    *fresh = true;
    return t->iid[k];
}

static void itab_free(struct itab *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->s[i]);
    free(t->s), free(t->h), free(t->iid);
    memset(t, 0, sizeof(*t));
}

static void pf_write(struct perfetto *pf, bool flush)
{
    if (pf->buf.len > (1u << 20) || (flush && pf->buf.len)) {
        fwrite(pf->buf.p, 1, pf->buf.len, pf->out);
        shp_pb_reset(&pf->buf);
    }
}

/* Append one packet made of pf->pkt (without sequence fields) to the output. */
static void pf_packet(struct perfetto *pf, bool needs_state)
{
    shp_pb_uint(&pf->pkt, PKT_SEQ_ID, SEQ);
    if (!pf->cleared) {
        shp_pb_uint(&pf->pkt, PKT_SEQ_FLAGS, SEQ_CLEARED | SEQ_NEEDS_STATE);
        pf->cleared = true;
    } else if (needs_state) {
        shp_pb_uint(&pf->pkt, PKT_SEQ_FLAGS, SEQ_NEEDS_STATE);
    }
    shp_pb_msg(&pf->buf, TRACE_PACKET, &pf->pkt);
    shp_pb_reset(&pf->pkt);
    pf_write(pf, false);
}

static uint64_t pf_intern(struct perfetto *pf, struct itab *t, unsigned field, const char *s)
{
    bool fresh;
    uint64_t iid = intern(t, s, &fresh);
    pf->oom |= !iid;
    if (fresh) {
        shp_pb_reset(&pf->item);
        shp_pb_uint(&pf->item, 1, iid);
        shp_pb_str(&pf->item, 2, s);
        shp_pb_msg(&pf->interned, field, &pf->item);
    }
    return iid;
}

static void pf_annots(struct perfetto *pf, const struct shp_tl_arg *a, int na)
{
    for (int i = 0; i < na; i++) {
        shp_pb_reset(&pf->sub);
        shp_pb_uint(&pf->sub, DA_NAME_IID, pf_intern(pf, &pf->keys, ID_ANNOT_NAMES, a[i].key));
        if (a[i].type == SHP_TL_S)
            shp_pb_uint(&pf->sub, DA_STRING_IID, pf_intern(pf, &pf->values, ID_STRINGS, a[i].s));
        else if (a[i].type == SHP_TL_B)
            shp_pb_uint(&pf->sub, DA_BOOL, a[i].u);
        else
            shp_pb_uint(&pf->sub, a[i].type == SHP_TL_I ? DA_INT : DA_UINT, a[i].u);
        shp_pb_msg(&pf->ev, TE_ANNOT, &pf->sub);
    }
}

static uint64_t proc_uuid(uint32_t pid)
{
    return (uint64_t)pid << 32;
}

static uint64_t thread_uuid(uint32_t pid, uint32_t tord)
{
    return (uint64_t)pid << 32 | (tord + 1);
}

static void *perfetto_open(FILE *out, uint64_t t0, void *arg)
{
    (void)arg;
    struct perfetto *pf = calloc(1, sizeof(*pf));
    if (pf) {
        pf->out = out;
        pf->t0 = t0;
    }
    return pf;
}

static void perfetto_process(void *b, const struct shp_tl_proc *p, const char *name)
{
    struct perfetto *pf = b;
    shp_pb_reset(&pf->ev);
    shp_pb_reset(&pf->sub);
    shp_pb_uint(&pf->ev, TD_UUID, proc_uuid(p->pid));
    shp_pb_uint(&pf->sub, PD_PID, p->pid);
    shp_pb_str(&pf->sub, PD_NAME, name);
    shp_pb_msg(&pf->ev, TD_PROCESS, &pf->sub);
    shp_pb_msg(&pf->pkt, PKT_TRACK_DESC, &pf->ev);
    pf_packet(pf, false);
}

static void perfetto_thread(void *b, const struct shp_tl_proc *p, uint32_t tord, const char *what)
{
    struct perfetto *pf = b;
    shp_pb_reset(&pf->ev);
    shp_pb_reset(&pf->sub);
    shp_pb_uint(&pf->ev, TD_UUID, thread_uuid(p->pid, tord));
    shp_pb_uint(&pf->ev, TD_PARENT, proc_uuid(p->pid));
    shp_pb_uint(&pf->sub, THD_PID, p->pid);
    /* Real tids of different hosts may collide; the viewer keys threads by tid alone. */
    shp_pb_uint(&pf->sub, THD_TID, (uint64_t)p->pid * 65536 + tord + 1);
    char tname[96];
    snprintf(tname, sizeof(tname), "%s %u", what, p->tids[tord]);
    shp_pb_str(&pf->sub, THD_NAME, tname);
    shp_pb_msg(&pf->ev, TD_THREAD, &pf->sub);
    shp_pb_msg(&pf->pkt, PKT_TRACK_DESC, &pf->ev);
    pf_packet(pf, false);
}

static void pf_event(struct perfetto *pf, uint64_t ts, unsigned type, uint64_t track,
                     const char *name, const char *cat, const struct shp_tl_arg *a, int na,
                     const struct shp_tl_flow *f, size_t nf)
{
    shp_pb_reset(&pf->ev);
    shp_pb_reset(&pf->interned);
    shp_pb_uint(&pf->ev, TE_TYPE, type);
    shp_pb_uint(&pf->ev, TE_TRACK, track);
    if (name) {
        shp_pb_uint(&pf->ev, TE_NAME_IID, pf_intern(pf, &pf->names, ID_EVENT_NAMES, name));
        shp_pb_str(&pf->ev, TE_CATEGORIES, cat);
    }
    pf_annots(pf, a, na);
    for (size_t i = 0; i < nf; i++)
        shp_pb_fixed64(&pf->ev, TE_FLOW_IDS, f[i].id);
    shp_pb_uint(&pf->pkt, PKT_TIMESTAMP, ts - pf->t0);
    if (pf->interned.len)
        shp_pb_msg(&pf->pkt, PKT_INTERNED, &pf->interned);
    shp_pb_msg(&pf->pkt, PKT_TRACK_EVENT, &pf->ev);
    pf_packet(pf, name != NULL);
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
    pf_write(pf, true);
    bool oom = pf->oom || pf->pkt.oom || pf->ev.oom || pf->sub.oom || pf->interned.oom ||
               pf->item.oom || pf->buf.oom;
    itab_free(&pf->names), itab_free(&pf->keys), itab_free(&pf->values);
    shp_pb_free(&pf->pkt), shp_pb_free(&pf->ev), shp_pb_free(&pf->sub);
    shp_pb_free(&pf->interned), shp_pb_free(&pf->item), shp_pb_free(&pf->buf);
    free(pf);
    return oom ? -ENOMEM : 0;
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
};
