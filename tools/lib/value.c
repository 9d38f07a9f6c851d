/* shapetrace tools: decoding value records, finding the call one names, printing one. */
#include "tools/lib/value.h"

#include "common/ops.h"
#include "tools/lib/event.h"
#include "tools/lib/out.h"

bool shp_value_decode(const struct shp_trace *t, const struct shp_rec *r, unsigned type,
                      struct shp_value *v)
{
    if (type != SHP_REC_VALUE)
        return false;
    const struct shp_rec_value *x = (const void *)r;
    /* The status last, as the writer stores it: fp is valid once it says done. */
    unsigned st = __atomic_load_n(&x->status, __ATOMIC_ACQUIRE);
    v->t_ns = shp_trace_wall_ns(t, shp_trace_mono_ns(t, x->t));
    v->call = x->call;
    v->op = x->op;
    v->comm = x->comm;
    v->seq = x->seq;
    v->occ = x->occ;
    v->bytes = x->bytes;
    v->site = x->site;
    v->stack = x->stack;
    v->what = x->what;
    v->how = x->how;
    v->status = st <= SHP_VALUE_LOST ? st : SHP_VALUE_LOST;
    v->fp = st == SHP_VALUE_DONE ? x->fp : 0;
    return true;
}

const char *shp_value_status_name(unsigned status)
{
    static const char *const names[] = {"pending", "done", "captured", "busy", "lost"};
    return status < sizeof(names) / sizeof(names[0]) ? names[status] : "lost";
}

const struct shp_rec *shp_value_call_at(const struct shp_trace *t, uint64_t off, unsigned *type)
{
    if (off < SHP_HEADER_SIZE || off % 8 || off + sizeof(struct shp_rec) > t->end)
        return NULL;
    const struct shp_rec *r = (const void *)(t->map + off);
    uint32_t w = __atomic_load_n(&r->word, __ATOMIC_ACQUIRE);
    unsigned ty = SHP_REC_WORD_TYPE(w);
    size_t sz = SHP_REC_WORD_SIZE(w);
    if (SHP_REC_WORD_MAGIC(w) != SHP_REC_MAGIC || ty == SHP_REC_RESERVED ||
        ty >= SHP_REC_TYPE_COUNT || sz < shp_rec_min_size(ty) || off + sz > t->end ||
        r->check != shp_rec_check(r, ty, sz))
        return NULL;
    *type = shp_rec_as(ty);
    return r;
}

void shp_value_recent_note(struct shp_value_recent *r, uint64_t off, uint64_t index)
{
    size_t i = r->n++ % SHP_VALUE_RECENT;
    r->off[i] = off;
    r->index[i] = index;
}

uint64_t shp_value_recent_find(const struct shp_value_recent *r, uint64_t off)
{
    uint64_t n = r->n < SHP_VALUE_RECENT ? r->n : SHP_VALUE_RECENT;
    for (uint64_t k = 0; k < n; k++) {
        size_t i = (r->n - 1 - k) % SHP_VALUE_RECENT;
        if (r->off[i] == off)
            return r->index[i];
    }
    return SHP_NONE;
}

#define K(lit) shp_out_mem(o, lit, sizeof(lit) - 1)

static void hex_or_null(struct shp_out *o, uint64_t v, bool have)
{
    if (!have) {
        K("null");
        return;
    }
    K("\"0x");
    shp_out_hex(o, v, 16);
    shp_out_char(o, '"');
}

void shp_value_json_out(struct shp_out *o, const struct shp_trace *t, const struct shp_value *v,
                        uint64_t of)
{
    const struct shp_file_header *h = t->hdr;
    K("{\"file\":");
    shp_out_json_str(o, t->path);
    K(",\"index\":null,\"host\":");
    shp_out_json_str(o, h->host);
    K(",\"pid\":");
    shp_out_u64(o, h->pid);
    K(",\"rank\":");
    int rank = shp_trace_rank(t);
    if (rank < 0)
        K("null");
    else
        shp_out_int(o, rank);
    K(",\"t_ns\":");
    shp_out_u64(o, v->t_ns);
    K(",\"op\":\"value\",\"of\":");
    if (of == SHP_NONE)
        K("null");
    else
        shp_out_u64(o, of);
    K(",\"call_op\":");
    shp_out_json_str(o, shp_op_name(v->op));
    K(",\"comm\":");
    if (v->comm) {
        shp_out_char(o, '"');
        shp_out_hex(o, v->comm, 16);
        shp_out_char(o, '"');
    } else {
        K("null");
    }
    K(",\"seq\":");
    if (v->seq == SHP_NONE)
        K("null");
    else
        shp_out_u64(o, v->seq);
    K(",\"value\":");
    shp_out_json_str(o, v->what == SHP_VALUE_OUTPUT ? "output" : "copied");
    K(",\"occurrence\":");
    if (v->what == SHP_VALUE_COPIED)
        shp_out_u64(o, v->occ);
    else
        K("null");
    K(",\"site\":");
    hex_or_null(o, v->site, v->what == SHP_VALUE_COPIED);
    K(",\"bytes\":");
    shp_out_u64(o, v->bytes);
    K(",\"on\":");
    shp_out_json_str(o, v->how == SHP_VALUE_HOST ? "host" : "device");
    K(",\"status\":");
    shp_out_json_str(o, shp_value_status_name(v->status));
    K(",\"fingerprint\":");
    hex_or_null(o, v->fp, v->status == SHP_VALUE_DONE);
    shp_out_char(o, '}');
}
