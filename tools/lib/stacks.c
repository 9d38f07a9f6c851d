/* shapetrace tools: stack records to frame texts, symbolized once per stack and cached. Python
 * stacks are merged with their native frames here, and their lines found in the line tables
 * that the trace holds once per code object. */
#define _GNU_SOURCE
#include "tools/lib/stacks.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/out.h"
#include "tools/lib/site.h"
#include "tools/lib/symbolize.h"
#include "tools/lib/symfile.h"

/* From the C++ runtime: NCCL and torch frames are C++, and people read them demangled. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

struct stack_entry {
    const uint64_t *frames; /* native frames, in the mapped trace (or `whole`) */
    uint32_t n;
    uint32_t tail, from; /* a SHP_REC_STACK_TAIL's: whose frames follow its own, from where */
    uint64_t *whole;     /* its own frames and the tail's, once put together (owned) */
    const struct shp_rec_pystack *py; /* a Python stack: merged with its native one on use */
    char **text;                      /* built on first use */
    struct shp_site_frame *where;     /* beside text: each frame's module or file (site.h) */
    uint32_t ntext;
    uint32_t site; /* the site under the built-in rule + 1; 0: not computed yet */
    char *json;    /* the frames as a JSON array, built on first use by dump --json */
    size_t json_len;
    char *site_json; /* the site's frame as a JSON string, the same way */
    size_t site_json_len;
};

struct shp_stacks {
    struct shp_symbolizer *sym;
    bool symbolize;
    struct stack_entry *tab; /* indexed by id */
    uint32_t cap;
    const struct shp_rec_pycode **codes; /* indexed by PYCODE id */
    uint32_t ncodes;
    const struct shp_rec_pyinfo *pyinfo;
    /* the module records, sorted by lo, for the site rule: what a native frame's module is */
    struct module_range {
        uint64_t lo, hi;
        char *path;
    } * mods;
    size_t nmods, cap_mods;
    /* the rule whose sites the entries cache (the first one asked for) */
    const struct shp_site_rule *site_rule;
    bool site_rule_set;
};

/* Make room for index `id` in an array of `*cap` elements of `size` bytes, zeroing the new part. */
static bool grow(void **arr, uint32_t *cap, uint32_t id, size_t size, uint64_t max_id)
{
    if (id < *cap)
        return true;
    if (id == UINT32_MAX || id > max_id)
        return false;
    uint32_t ncap = *cap ? *cap : 256;
    while (ncap <= id)
        ncap = ncap > UINT32_MAX / 2 ? UINT32_MAX : ncap * 2;
    char *n = realloc(*arr, (size_t)ncap * size);
    if (!n)
        return false;
    memset(n + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
    *arr = n;
    *cap = ncap;
    return true;
}

static void load_pycode(struct shp_stacks *st, const struct shp_rec_pycode *c, size_t size,
                        uint64_t max_id)
{
    size_t need =
        sizeof(*c) + (size_t)c->name_len + c->qualname_len + c->filename_len + c->linetable_len;
    if (need > size || c->id == 0 ||
        !grow((void **)&st->codes, &st->ncodes, c->id, sizeof(*st->codes), max_id))
        return;
    st->codes[c->id] = c;
}

/* Keeps a module's range and path (owned from here on) for module_of; false when out of memory
 * or the range is empty. */
static bool add_module(struct shp_stacks *st, uint64_t lo, uint64_t hi, char *path)
{
    if (lo >= hi || !shp_grow((void **)&st->mods, &st->cap_mods, st->nmods, sizeof(*st->mods)))
        return false;
    st->mods[st->nmods++] = (struct module_range){.lo = lo, .hi = hi, .path = path};
    return true;
}

static int module_cmp(const void *a, const void *b)
{
    const struct module_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The path of the module whose range holds pc, or NULL. */
static const char *module_of(const struct shp_stacks *st, uint64_t pc)
{
    size_t lo = 0, hi = st->nmods;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->mods[mid].lo <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* the last module starting at or below pc; an earlier one may still hold it if they nest */
    for (size_t i = lo; i-- > 0;)
        if (pc < st->mods[i].hi)
            return st->mods[i].path;
    return NULL;
}

/* Each SHP_REC_STACK_TAIL's whole stack: its own frames, then those of the stack it names from
 * `from` on, at most SHP_STACK_MAX_FRAMES in all. In id order, so that the named stack (whose id
 * is smaller) is whole already. A tail that names no native stack stored before it (damage, or a
 * record lost to a cap) leaves the stack its own frames; out of memory does too. */
static void join_tails(struct shp_stacks *st)
{
    for (uint32_t id = 1; id < st->cap; id++) {
        struct stack_entry *e = &st->tab[id];
        if (!e->frames || !e->tail)
            continue;
        const struct stack_entry *t = e->tail < id ? &st->tab[e->tail] : NULL;
        uint32_t more = t && t->frames && e->from < t->n ? t->n - e->from : 0;
        if (e->n + more > SHP_STACK_MAX_FRAMES)
            more = e->n < SHP_STACK_MAX_FRAMES ? SHP_STACK_MAX_FRAMES - e->n : 0;
        uint64_t *w = more ? malloc(((size_t)e->n + more) * sizeof(*w)) : NULL;
        if (!w)
            continue;
        memcpy(w, e->frames, (size_t)e->n * sizeof(*w));
        memcpy(w + e->n, t->frames + e->from, (size_t)more * sizeof(*w));
        e->whole = w;
        e->frames = w;
        e->n += more;
    }
}

struct shp_stacks *shp_stacks_load(const struct shp_trace *t, bool symbolize)
{
    return shp_stacks_load_shared(t, symbolize, NULL);
}

struct shp_stacks *shp_stacks_load_shared(const struct shp_trace *t, bool symbolize,
                                          struct shp_symcache *cache)
{
    struct shp_stacks *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->symbolize = symbolize;
    if (symbolize)
        st->sym = shp_symbolizer_new();
    if (st->sym && cache) {
        shp_symbolizer_set_cache(st->sym, cache);
        if (t->path)
            shp_symbolizer_use_symfile(
                st->sym,
                shp_symcache_symfile_near(cache, t->path, t->hdr->host, sizeof(t->hdr->host)));
    } else if (st->sym && t->path) {
        shp_symbolizer_set_symfile(
            st->sym, shp_symfile_load_near(t->path, t->hdr->host, sizeof(t->hdr->host)));
    }
    struct shp_cursor cur = {0};
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    /* Writers number stacks and code objects from 1, one per record: an id beyond the records
     * the file can hold is damage, and must not size the tables (ids index them). */
    uint64_t max_id = (t->end - SHP_HEADER_SIZE) / sizeof(struct shp_rec_stack) + 65536;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        if (type == SHP_REC_MODULE || type == SHP_REC_MODULE_C) {
            struct shp_module_view m;
            if (!shp_module_view(r, type, size, &m))
                continue;
            char *path = strndup(m.path, m.path_len);
            if (path && st->sym)
                shp_symbolizer_add_module(st->sym, path, m.base, m.lo, m.hi, m.build_id,
                                          m.build_id_len);
            if (!path || !add_module(st, m.lo, m.hi, path))
                free(path);
        } else if (type == SHP_REC_STACK || type == SHP_REC_STACK_TAIL) {
            /* id and nframes are at the same places in both (trace.h) */
            const struct shp_rec_stack *s = (const void *)r;
            const struct shp_rec_stack_tail *tl =
                type == SHP_REC_STACK_TAIL ? (const void *)r : NULL;
            size_t head = tl ? sizeof(*tl) : sizeof(*s);
            if (head + (size_t)s->nframes * 8 > size || s->id == 0 ||
                !grow((void **)&st->tab, &st->cap, s->id, sizeof(*st->tab), max_id))
                continue;
            struct stack_entry *e = &st->tab[s->id];
            e->frames = (const uint64_t *)(const void *)((const char *)r + head);
            e->n = s->nframes;
            e->tail = tl ? tl->tail : 0;
            e->from = tl ? tl->from : 0;
            e->py = NULL; /* one record per id: the last one wins */
        } else if (type == SHP_REC_PYSTACK) {
            const struct shp_rec_pystack *s = (const void *)r;
            if (sizeof(*s) + (size_t)s->nframes * sizeof(struct shp_pyframe) > size || s->id == 0 ||
                !grow((void **)&st->tab, &st->cap, s->id, sizeof(*st->tab), max_id))
                continue;
            st->tab[s->id].py = s;
            st->tab[s->id].frames = NULL;
        } else if (type == SHP_REC_PYCODE) {
            load_pycode(st, (const void *)r, size, max_id);
        } else if (type == SHP_REC_PYINFO && !st->pyinfo) {
            st->pyinfo = (const void *)r;
        }
    }
    if (st->nmods)
        qsort(st->mods, st->nmods, sizeof(*st->mods), module_cmp);
    join_tails(st);
    return st;
}

void shp_stacks_free(struct shp_stacks *st)
{
    if (!st)
        return;
    for (uint32_t i = 0; i < st->cap; i++) {
        free(st->tab[i].whole);
        if (!st->tab[i].text)
            continue;
        for (uint32_t k = 0; k < st->tab[i].ntext; k++)
            free(st->tab[i].text[k]);
        free(st->tab[i].text);
        free(st->tab[i].where);
        free(st->tab[i].json);
        free(st->tab[i].site_json);
    }
    free(st->tab);
    free(st->codes);
    for (size_t i = 0; i < st->nmods; i++)
        free(st->mods[i].path);
    free(st->mods);
    if (st->sym)
        shp_symbolizer_free(st->sym);
    free(st);
}

/* GCC's clone suffixes ("gather_rows.constprop.0"): the person wrote gather_rows. */
static size_t without_clone_suffix(const char *name, size_t len)
{
    static const char *const suffixes[] = {".constprop.", ".isra.", ".part.", ".cold",
                                           ".lto_priv."};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        const char *s = strstr(name, suffixes[i]);
        if (s && (size_t)(s - name) < len)
            len = (size_t)(s - name);
    }
    return len;
}

char *shp_frame_demangle(const char *text)
{
    size_t full_len = strcspn(text, " +");
    size_t name_len = without_clone_suffix(text, full_len);
    const char *rest = text + full_len;
    if (strncmp(text, "_Z", 2) != 0) {
        size_t len = name_len + strlen(rest) + 1;
        char *out = malloc(len);
        if (out)
            snprintf(out, len, "%.*s%s", (int)name_len, text, rest);
        return out;
    }
    char *name = strndup(text, name_len);
    int status = -1;
    char *d = name ? __cxa_demangle(name, NULL, NULL, &status) : NULL;
    free(name);
    if (!d || status != 0) {
        free(d);
        return strdup(text);
    }
    size_t len = strlen(d) + strlen(rest) + 1;
    char *out = malloc(len);
    if (out)
        snprintf(out, len, "%s%s", d, rest);
    free(d);
    return out;
}

static char *native_text(struct shp_stacks *st, uint64_t addr, bool is_return_address)
{
    char buf[1024];
    if (st->sym)
        shp_symbolize(st->sym, addr, is_return_address, buf, sizeof(buf));
    else
        snprintf(buf, sizeof(buf), "0x%" PRIx64, addr);
    char *text = shp_frame_demangle(buf);
    return text ? text : strdup("?");
}

/* A native frame's place for the site rule: its module (return addresses looked up inside the
 * call instruction, as the symbolizer does). */
static struct shp_site_frame native_where(const struct shp_stacks *st, uint64_t addr, bool ret)
{
    const char *path = module_of(st, ret && addr ? addr - 1 : addr);
    return (struct shp_site_frame){.path = path, .path_len = path ? strlen(path) : 0};
}

/* The entry's first k texts, if every one was made; else (out of memory) none: the texts made
 * and both arrays are freed, and the stack is unknown to its callers, who take NULL for that,
 * rather than a frame without text. */
static bool texts_made(struct stack_entry *e, size_t k)
{
    bool all = true;
    for (size_t i = 0; i < k; i++)
        all = all && e->text[i];
    if (all) {
        e->ntext = (uint32_t)k;
        return true;
    }
    for (size_t i = 0; i < k; i++)
        free(e->text[i]);
    free(e->text);
    free(e->where);
    e->text = NULL;
    e->where = NULL;
    return false;
}

static bool build_native(struct shp_stacks *st, struct stack_entry *e)
{
    e->text = calloc(e->n ? e->n : 1, sizeof(char *));
    e->where = calloc(e->n ? e->n : 1, sizeof(*e->where));
    if (!e->text || !e->where) {
        free(e->text);
        free(e->where);
        e->text = NULL;
        e->where = NULL;
        return false;
    }
    for (uint32_t i = 0; i < e->n; i++) {
        e->text[i] = native_text(st, e->frames[i], i > 0);
        e->where[i] = native_where(st, e->frames[i], i > 0);
        e->where[i].text = e->text[i];
    }
    return texts_made(e, e->n);
}

static uint32_t varint(const uint8_t *p, size_t len, size_t *i)
{
    uint32_t v = 0;
    for (unsigned shift = 0; *i < len && shift < 32; shift += 6) {
        uint8_t b = p[(*i)++];
        v |= (uint32_t)(b & 63) << shift;
        if (!(b & 64))
            break;
    }
    return v;
}

int shp_py_addr2line(const uint8_t *table, size_t len, int firstlineno, uint32_t py_version,
                     uint32_t offset)
{
    if (offset == SHP_PYFRAME_NO_OFFSET)
        return firstlineno;
    /* 64-bit: a crafted table's deltas must not overflow; a line out of int's range is none. */
    int64_t line = firstlineno;
    uint64_t addr = 0;
    if (((py_version >> 16) & 0xff) == 10) {
        /* 3.10 (PEP 626): (bytecode bytes, signed line delta) pairs; -128: no line. */
        for (size_t i = 0; i + 1 < len; i += 2) {
            uint64_t start = addr;
            addr += table[i];
            int delta = (int8_t)table[i + 1];
            if (delta != -128)
                line += delta;
            if (offset >= start && offset < addr)
                return delta == -128 || line < 0 || line > INT_MAX ? -1 : (int)line;
        }
        return -1;
    }
    /* 3.11+ (Objects/locations.md): entries that start with a byte whose top bit is set; bits
     * 3-6 the kind, bits 0-2 the code units covered minus one. Kinds 13 and 14 carry a signed
     * varint line delta, 10-12 a delta of 0-2, 0-9 none; 15 has no line. */
    for (size_t i = 0; i < len;) {
        uint8_t b = table[i];
        if (!(b & 0x80)) {
            i++;
            continue;
        }
        unsigned kind = (b >> 3) & 15;
        uint64_t start = addr;
        addr += ((b & 7) + 1) * 2;
        size_t j = i + 1;
        if (kind == 13 || kind == 14) {
            uint32_t v = varint(table, len, &j);
            line += v & 1 ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
        } else if (kind == 11 || kind == 12) {
            line += (int)kind - 10;
        }
        if (offset >= start && offset < addr)
            return kind == 15 || line < 0 || line > INT_MAX ? -1 : (int)line;
        for (i++; i < len && !(table[i] & 0x80); i++)
            ;
    }
    return -1;
}

static char *py_text(struct shp_stacks *st, const struct shp_pyframe *f)
{
    const struct shp_rec_pycode *c = f->code < st->ncodes ? st->codes[f->code] : NULL;
    char *out = NULL;
    if (!c) {
        if (asprintf(&out, "py: ? (code %u not recorded)", f->code) < 0)
            out = NULL;
        return out;
    }
    const char *name = (const char *)(c + 1);
    const char *file = name + c->name_len + c->qualname_len;
    const uint8_t *table = (const uint8_t *)file + c->filename_len;
    int line = shp_py_addr2line(table, c->linetable_len, c->firstlineno, c->py_version,
                                SHP_PYFRAME_OFFSET(f->lasti));
    int rc = line > 0 ? asprintf(&out, "py: %.*s (%.*s:%d)", (int)c->name_len, name,
                                 (int)c->filename_len, file, line)
                      : asprintf(&out, "py: %.*s (%.*s)", (int)c->name_len, name,
                                 (int)c->filename_len, file);
    return rc < 0 ? NULL : out;
}

/* A Python frame's place for the site rule: its code object's file name, in the mapped trace. */
static struct shp_site_frame py_where(const struct shp_stacks *st, const struct shp_pyframe *f)
{
    const struct shp_rec_pycode *c = f->code < st->ncodes ? st->codes[f->code] : NULL;
    struct shp_site_frame w = {.python = true};
    if (c) {
        w.path = (const char *)(c + 1) + c->name_len + c->qualname_len;
        w.path_len = c->filename_len;
    }
    return w;
}

/* What a native frame is to the interpreter: a _PyEval_EvalFrameDefault call (by address, or by
 * name for a part the compiler split off, "_PyEval_EvalFrameDefault.cold"), another of the
 * interpreter's own frames, or something else. */
static int native_class(const struct shp_rec_pyinfo *pi, uint64_t addr, bool ret, const char *text)
{
    uint64_t pc = ret && addr ? addr - 1 : addr;
    if ((pi && pc >= pi->eval_lo && pc < pi->eval_hi) ||
        !strncmp(text, "_PyEval_EvalFrameDefault", 24))
        return SHP_NATIVE_EVAL;
    return pi && pc >= pi->interp_lo && pc < pi->interp_hi ? SHP_NATIVE_INTERP : SHP_NATIVE_OTHER;
}

size_t shp_py_merge(const int *cls, size_t nn, const bool *entry, size_t np,
                    struct shp_merged_frame *out)
{
    bool any_eval = false;
    for (size_t i = 0; i < nn; i++)
        any_eval |= cls[i] == SHP_NATIVE_EVAL;
    size_t k = 0, next_py = 0, i = 0, after_py = 0; /* where Python frames not placed yet go */
    if (!any_eval) {
        while (i < nn && cls[i] == SHP_NATIVE_OTHER)
            out[k++] = (struct shp_merged_frame){.index = (uint32_t)i++};
        after_py = k;
    }
    while (i < nn) {
        if (cls[i] == SHP_NATIVE_OTHER || !any_eval) {
            out[k++] = (struct shp_merged_frame){.index = (uint32_t)i++};
            continue;
        }
        size_t j = i, evals = 0;
        for (; j < nn && cls[j] != SHP_NATIVE_OTHER; j++)
            evals += cls[j] == SHP_NATIVE_EVAL;
        if (!evals || next_py >= np) {
            while (i < j)
                out[k++] = (struct shp_merged_frame){.index = (uint32_t)i++};
            continue;
        }
        for (; evals && next_py < np; evals--) {
            bool end = false;
            while (next_py < np && !end) {
                end = entry[next_py];
                out[k++] = (struct shp_merged_frame){.python = true, .index = (uint32_t)next_py++};
            }
        }
        after_py = k;
        i = j;
    }
    if (next_py < np) {
        size_t rest = np - next_py;
        memmove(out + after_py + rest, out + after_py, (k - after_py) * sizeof(*out));
        for (size_t r = 0; r < rest; r++)
            out[after_py + r] =
                (struct shp_merged_frame){.python = true, .index = (uint32_t)next_py++};
        k += rest;
    }
    return k;
}

/* A Python stack's frames merged with its native ones (shp_py_merge's rule). */
static bool build_merged(struct shp_stacks *st, struct stack_entry *e)
{
    const struct shp_rec_pystack *ps = e->py;
    const struct shp_pyframe *pf = (const void *)(ps + 1);
    uint32_t np = ps->nframes;
    size_t nn = 0;
    const char *const *nt = NULL;
    const uint64_t *addr = NULL;
    /* Only a native stack: a Python one (itself, or a cycle) would recurse without end. */
    if (ps->native && ps->native < st->cap && st->tab[ps->native].frames &&
        !st->tab[ps->native].py) {
        nt = shp_stacks_frames(st, ps->native, &nn);
        addr = st->tab[ps->native].frames;
    }
    if (!nt)
        nn = 0;
    const struct shp_site_frame *nw = nt ? st->tab[ps->native].where : NULL;
    int *cls = calloc(nn ? nn : 1, sizeof(int));
    bool *entry = calloc(np ? np : 1, sizeof(bool));
    struct shp_merged_frame *order = calloc(nn + np + 1, sizeof(*order));
    e->text = calloc(nn + np + 1, sizeof(char *));
    e->where = calloc(nn + np + 1, sizeof(*e->where));
    bool ok = cls && entry && order && e->text && e->where;
    if (ok) {
        for (size_t i = 0; i < nn; i++)
            cls[i] = native_class(st->pyinfo, addr[i], i > 0, nt[i]);
        for (uint32_t i = 0; i < np; i++)
            entry[i] = pf[i].lasti & SHP_PYFRAME_ENTRY;
        size_t k = shp_py_merge(cls, nn, entry, np, order);
        for (size_t t = 0; t < k; t++) {
            uint32_t x = order[t].index;
            if (order[t].python) {
                e->where[t] = py_where(st, &pf[x]);
                e->text[t] = py_text(st, &pf[x]);
            } else {
                e->text[t] = strdup(nt[x]);
                if (nw)
                    e->where[t] = nw[x];
            }
            if (!e->text[t])
                e->text[t] = strdup("?");
            e->where[t].text = e->text[t];
        }
        ok = texts_made(e, k);
    } else {
        free(e->text);
        free(e->where);
        e->text = NULL;
        e->where = NULL;
    }
    free(cls);
    free(entry);
    free(order);
    return ok;
}

const char *const *shp_stacks_frames(struct shp_stacks *st, uint32_t id, size_t *n)
{
    *n = 0;
    if (!st || id == 0 || id >= st->cap || (!st->tab[id].frames && !st->tab[id].py))
        return NULL;
    struct stack_entry *e = &st->tab[id];
    if (!e->text && !(e->py ? build_merged(st, e) : build_native(st, e)))
        return NULL;
    *n = e->ntext;
    return (const char *const *)e->text;
}

const struct shp_site_frame *shp_stacks_where(struct shp_stacks *st, uint32_t id, size_t *n)
{
    if (!shp_stacks_frames(st, id, n))
        return NULL;
    return st->tab[id].where;
}

void shp_stacks_set_rule(struct shp_stacks *st, const struct shp_site_rule *rule)
{
    if (!st)
        return;
    st->site_rule = rule;
    st->site_rule_set = true;
}

size_t shp_stacks_site_index(struct shp_stacks *st, uint32_t id, const struct shp_site_rule *rule)
{
    size_t n;
    const struct shp_site_frame *w = shp_stacks_where(st, id, &n);
    if (!w)
        return 0;
    if (!st->site_rule_set) {
        st->site_rule = rule;
        st->site_rule_set = true;
    }
    struct stack_entry *e = &st->tab[id];
    if (rule != st->site_rule)
        return shp_site_pick(rule, w, n);
    if (!e->site)
        e->site = (uint32_t)shp_site_pick(rule, w, n) + 1;
    return e->site - 1;
}

static void frames_json(struct shp_out *o, const char *const *fr, size_t n)
{
    shp_out_char(o, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            shp_out_char(o, ',');
        shp_out_json_str(o, fr[i]);
    }
    shp_out_char(o, ']');
}

/* A stack's JSON text (its frames, or with one of them, that frame's string), made once into
 * *out: the events of a trace share a few hundred stacks. */
static bool cache_json(char **out, size_t *out_len, const char *const *fr, size_t n,
                       const char *one)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return false;
    struct shp_out *o = malloc(sizeof(*o));
    if (o) {
        shp_out_init(o, mem);
        if (one)
            shp_out_json_str(o, one);
        else
            frames_json(o, fr, n);
        shp_out_flush(o);
        free(o);
    }
    if (fclose(mem) != 0 || !o) {
        free(text);
        return false;
    }
    *out = text;
    *out_len = len;
    return true;
}

void shp_stacks_json_out(struct shp_out *o, struct shp_stacks *st, uint32_t id)
{
    size_t n;
    const char *const *fr = shp_stacks_frames(st, id, &n);
    if (!fr) {
        shp_out_mem(o, "null", 4);
        return;
    }
    struct stack_entry *e = &st->tab[id];
    if (e->json || cache_json(&e->json, &e->json_len, fr, n, NULL))
        shp_out_mem(o, e->json, e->json_len);
    else
        frames_json(o, fr, n);
}

void shp_stacks_json(FILE *f, struct shp_stacks *st, uint32_t id)
{
    struct shp_out o;
    shp_out_init(&o, f);
    shp_stacks_json_out(&o, st, id);
    shp_out_flush(&o);
}

/* The site's frame under st's rule, NULL when the stack has none. */
static const char *site_frame(struct shp_stacks *st, uint32_t id)
{
    size_t n;
    const char *const *fr = shp_stacks_frames(st, id, &n);
    return fr && n ? fr[shp_stacks_site_index(st, id, st->site_rule)] : NULL;
}

void shp_stacks_site(struct shp_stacks *st, uint32_t id, char *out, size_t len)
{
    const char *site = site_frame(st, id);
    snprintf(out, len, "%s", site ? site : "");
}

void shp_stacks_site_json_out(struct shp_out *o, struct shp_stacks *st, uint32_t id)
{
    const char *site = site_frame(st, id);
    if (!site) {
        shp_out_mem(o, "null", 4);
        return;
    }
    struct stack_entry *e = &st->tab[id];
    if (e->site_json || cache_json(&e->site_json, &e->site_json_len, NULL, 0, site))
        shp_out_mem(o, e->site_json, e->site_json_len);
    else
        shp_out_json_str(o, site);
}
