/* shapetrace tools: stack records to frame texts, symbolized once per stack and cached. */
#include "stacks.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "symbolize.h"

/* From the C++ runtime: NCCL and torch frames are C++, and people read them demangled. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

struct stack_entry {
    const uint64_t *frames; /* in the mapped trace */
    uint32_t n;
    char **text; /* symbolized on first use */
};

struct shp_stacks {
    struct shp_symbolizer *sym;
    bool symbolize;
    struct stack_entry *tab; /* indexed by id */
    uint32_t cap;
};

struct shp_stacks *shp_stacks_load(struct shp_trace *t, bool symbolize)
{
    struct shp_stacks *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->symbolize = symbolize;
    if (symbolize)
        st->sym = shp_symbolizer_new();
    uint64_t off = 0, torn = t->torn;
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    while ((r = shp_trace_next(t, &off, &type, &size))) {
        if (type == SHP_REC_MODULE && st->sym) {
            const struct shp_rec_module *m = (const void *)r;
            size_t plen = m->path_len;
            if (sizeof(*m) + plen > size)
                continue;
            char *path = strndup((const char *)(m + 1), plen);
            if (path)
                shp_symbolizer_add_module(st->sym, path, m->base, m->lo, m->hi, m->build_id,
                                          m->build_id_len);
            free(path);
        } else if (type == SHP_REC_STACK) {
            const struct shp_rec_stack *s = (const void *)r;
            if (sizeof(*s) + (size_t)s->nframes * 8 > size || s->id == 0)
                continue;
            if (s->id >= st->cap) {
                uint32_t ncap = st->cap ? st->cap : 256;
                while (ncap <= s->id)
                    ncap *= 2;
                struct stack_entry *nt = realloc(st->tab, ncap * sizeof(*nt));
                if (!nt)
                    continue;
                memset(nt + st->cap, 0, (ncap - st->cap) * sizeof(*nt));
                st->tab = nt;
                st->cap = ncap;
            }
            st->tab[s->id].frames = (const uint64_t *)(s + 1);
            st->tab[s->id].n = s->nframes;
        }
    }
    t->torn = torn;
    return st;
}

void shp_stacks_free(struct shp_stacks *st)
{
    if (!st)
        return;
    for (uint32_t i = 0; i < st->cap; i++) {
        if (!st->tab[i].text)
            continue;
        for (uint32_t k = 0; k < st->tab[i].n; k++)
            free(st->tab[i].text[k]);
        free(st->tab[i].text);
    }
    free(st->tab);
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

/* "_ZN4ncclX+0x10 (libnccl.so.2)" -> "nccl::X()+0x10 (libnccl.so.2)". */
static char *demangled(const char *text)
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

const char *const *shp_stacks_frames(struct shp_stacks *st, uint32_t id, size_t *n)
{
    *n = 0;
    if (!st || id == 0 || id >= st->cap || !st->tab[id].frames)
        return NULL;
    struct stack_entry *e = &st->tab[id];
    if (!e->text) {
        e->text = calloc(e->n ? e->n : 1, sizeof(char *));
        if (!e->text)
            return NULL;
        for (uint32_t i = 0; i < e->n; i++) {
            char buf[1024];
            if (st->sym)
                shp_symbolize(st->sym, e->frames[i], i > 0, buf, sizeof(buf));
            else
                snprintf(buf, sizeof(buf), "0x%" PRIx64, e->frames[i]);
            e->text[i] = demangled(buf);
            if (!e->text[i])
                e->text[i] = strdup("?");
        }
    }
    *n = e->n;
    return (const char *const *)e->text;
}

void shp_stacks_json(FILE *f, struct shp_stacks *st, uint32_t id)
{
    size_t n;
    const char *const *fr = shp_stacks_frames(st, id, &n);
    if (!fr) {
        fputs("null", f);
        return;
    }
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        shp_json_str(f, fr[i]);
    }
    fputc(']', f);
}

void shp_stacks_site(struct shp_stacks *st, uint32_t id, char *out, size_t len)
{
    size_t n;
    const char *const *fr = shp_stacks_frames(st, id, &n);
    snprintf(out, len, "%s", fr && n ? fr[0] : "");
}
