/* shapetrace render: the timeline in Chrome's JSON trace-event format (chrome://tracing and
 * ui.perfetto.dev read it): "X" slices, "s"/"f" flow events bound to the slice that encloses
 * them, "i" instants, "M" names. Times are microseconds after the first call. A thread of its
 * own writes the text out (sink.h); a string's JSON text is made once, kept by its address
 * (timeline.h: the walk's strings stay put). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tools/render/sink.h"
#include "tools/render/timeline.h"

/* JSON texts of strings, by address. */
struct memo {
    const char **s;
    char **json;
    size_t *len;
    size_t n, cap; /* open addressing, at most half full */
};

struct chrome {
    struct shp_sink *sink; /* NULL: written to out here, or emitted */
    FILE *out;
    int (*emit)(void *, char **, size_t *, size_t *); /* a part's (timeline.h) */
    void *emit_arg;
    uint64_t t0;
    char *p;
    size_t len, cap;
    struct memo memo;
    bool first, oom;
    int err;
};

static void jraw_slow(struct chrome *c, const char *s, size_t n)
{
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1 << 16;
        while (cap < c->len + n + 1)
            cap *= 2;
        char *p = c->oom ? NULL : realloc(c->p, cap);
        if (!p) {
            c->oom = true;
            return;
        }
        c->p = p;
        c->cap = cap;
    }
    memcpy(c->p + c->len, s, n);
    c->len += n;
}

static inline void jraw(struct chrome *c, const char *s, size_t n)
{
    if (__builtin_expect(c->len + n + 1 <= c->cap, 1)) {
        memcpy(c->p + c->len, s, n);
        c->len += n;
    } else {
        jraw_slow(c, s, n);
    }
}

/* A literal: its length known where it is written. */
#define JLIT(c, lit) jraw(c, lit, sizeof(lit) - 1)

static void jlit(struct chrome *c, const char *s)
{
    jraw(c, s, strlen(s));
}

static void juint(struct chrome *c, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do
        tmp[sizeof(tmp) - 1 - n++] = (char)('0' + v % 10);
    while ((v /= 10));
    jraw(c, tmp + sizeof(tmp) - n, (size_t)n);
}

/* Microseconds with three decimals, from nanoseconds. */
static void jus(struct chrome *c, uint64_t ns)
{
    juint(c, ns / 1000);
    char frac[4] = {'.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10),
                    (char)('0' + ns % 10)};
    jraw(c, frac, 4);
}

static void jstr_made(struct chrome *c, const char *s)
{
    jraw(c, "\"", 1);
    const char *run = s;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p >= 0x20 && *p != '"' && *p != '\\' && *p != '<')
            continue;
        jraw(c, run, (size_t)((const char *)p - run));
        char esc[8];
        /* '<' escaped too, so that no trace text can close a script element around this. */
        snprintf(esc, sizeof(esc), "\\u%04x", *p);
        jraw(c, esc, 6);
        run = (const char *)p + 1;
    }
    jlit(c, run);
    jraw(c, "\"", 1);
}

/* The JSON text of s, made once per address. */
static void jstr(struct chrome *c, const char *s)
{
    struct memo *m = &c->memo;
    if (m->n * 2 >= m->cap) {
        struct memo nm = {.cap = m->cap ? m->cap * 2 : 256, .n = m->n};
        nm.s = calloc(nm.cap, sizeof(*nm.s));
        nm.json = calloc(nm.cap, sizeof(*nm.json));
        nm.len = calloc(nm.cap, sizeof(*nm.len));
        if (!nm.s || !nm.json || !nm.len) {
            free(nm.s), free(nm.json), free(nm.len);
            jstr_made(c, s);
            return;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->s[i])
                continue;
            size_t k = ((uintptr_t)m->s[i] * 0x9e3779b97f4a7c15ull >> 32) & (nm.cap - 1);
            while (nm.s[k])
                k = (k + 1) & (nm.cap - 1);
            nm.s[k] = m->s[i], nm.json[k] = m->json[i], nm.len[k] = m->len[i];
        }
        free(m->s), free(m->json), free(m->len);
        *m = nm;
    }
    size_t k = ((uintptr_t)s * 0x9e3779b97f4a7c15ull >> 32) & (m->cap - 1);
    while (m->s[k] && m->s[k] != s)
        k = (k + 1) & (m->cap - 1);
    if (m->s[k]) {
        jraw(c, m->json[k], m->len[k]);
        return;
    }
    size_t at = c->len;
    jstr_made(c, s);
    if (c->oom || !(m->json[k] = malloc(c->len - at)))
        return;
    memcpy(m->json[k], c->p + at, c->len - at);
    m->len[k] = c->len - at;
    m->s[k] = s;
    m->n++;
}

/* Hands the text to the writer once it holds a chunk's worth; all: the rest, without a sink
 * (shp_sink_close takes the last buffer). */
static void jflush(struct chrome *c, bool all)
{
    if (!c->len || (!all && c->len < SHP_SINK_CHUNK - 65536) || (all && c->sink))
        return;
    if (c->emit || c->sink) { /* a part's emit takes a buffer as the sink does */
        if ((c->emit ? c->emit(c->emit_arg, &c->p, &c->len, &c->cap)
                     : shp_sink_put(c->sink, &c->p, &c->len, &c->cap)) < 0)
            c->oom = true;
        return;
    }
    if (fwrite(c->p, 1, c->len, c->out) != c->len && !c->err)
        c->err = errno ? errno : EIO;
    c->len = 0;
}

static void jsep(struct chrome *c)
{
    jlit(c, c->first ? "\n" : ",\n");
    c->first = false;
}

static void jargs(struct chrome *c, const struct shp_tl_arg *a, int na)
{
    JLIT(c, "\"args\":{");
    for (int i = 0; i < na; i++) {
        if (i)
            jraw(c, ",", 1);
        jstr(c, a[i].key);
        jraw(c, ":", 1);
        if (a[i].type == SHP_TL_S)
            jstr(c, a[i].s);
        else if (a[i].type == SHP_TL_B)
            jlit(c, a[i].u ? "true" : "false");
        else
            juint(c, a[i].u);
    }
    jraw(c, "}", 1);
}

static void jhead(struct chrome *c, const char *ph, uint32_t pid, uint32_t tid)
{
    jsep(c);
    JLIT(c, "{\"ph\":\"");
    jlit(c, ph);
    JLIT(c, "\",\"pid\":");
    juint(c, pid);
    JLIT(c, ",\"tid\":");
    juint(c, tid);
}

static void *chrome_open(FILE *out, uint64_t t0, void *arg)
{
    (void)arg;
    struct chrome *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->out = out;
    c->t0 = t0;
    c->first = true;
    c->sink = shp_sink_open(out);
    JLIT(c, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"shapetrace export\","
            "\"t0_unix_ns\":");
    juint(c, t0);
    JLIT(c, ",\"note\":\"ts are microseconds after t0_unix_ns, the first call\"},"
            "\"traceEvents\":[");
    return c;
}

static void meta(struct chrome *c, uint32_t pid, uint32_t tid, const char *what, const char *name,
                 int sort)
{
    jhead(c, "M", pid, tid);
    JLIT(c, ",\"name\":");
    jstr(c, what);
    JLIT(c, ",\"args\":{\"name\":");
    jstr_made(c, name); /* the caller's buffer: not kept */
    JLIT(c, "}}");
    if (sort >= 0) {
        jhead(c, "M", pid, tid);
        JLIT(c, ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
        juint(c, (uint64_t)sort);
        JLIT(c, "}}");
    }
}

static void chrome_process(void *b, const struct shp_tl_proc *p, const char *name)
{
    meta(b, p->pid, 0, "process_name", name, (int)p->pid);
}

static void chrome_thread(void *b, const struct shp_tl_proc *p, uint32_t tord, const char *what)
{
    char name[96];
    snprintf(name, sizeof(name), "%s %u", what, p->tids[tord]);
    meta(b, p->pid, p->tids[tord], "thread_name", name, -1);
}

static void chrome_slice(void *b, const struct shp_tl_slice *s)
{
    struct chrome *c = b;
    jhead(c, "X", s->proc->pid, s->tid);
    JLIT(c, ",\"ts\":");
    jus(c, s->ts - c->t0);
    JLIT(c, ",\"dur\":");
    jus(c, s->dur);
    JLIT(c, ",\"name\":");
    jstr(c, s->name);
    JLIT(c, ",\"cat\":\"");
    jlit(c, s->cat);
    JLIT(c, "\",");
    jargs(c, s->a, s->na);
    jraw(c, "}", 1);
    /* Flow events bind to the slice that encloses them: put them in its middle, where no
     * neighbour on the same thread can be mistaken for it. */
    for (size_t i = 0; i < s->nf; i++) {
        jhead(c, s->f[i].out ? "s" : "f", s->proc->pid, s->tid);
        JLIT(c, ",\"ts\":");
        jus(c, s->ts - c->t0 + s->dur / 2);
        char id[32];
        snprintf(id, sizeof(id), "\"0x%" PRIx64 "\"", s->f[i].id);
        JLIT(c, ",\"id\":");
        jlit(c, id);
        JLIT(c, ",\"name\":\"");
        jlit(c, s->f[i].cat);
        JLIT(c, "\",\"cat\":\"");
        jlit(c, s->f[i].cat);
        jlit(c, s->f[i].out ? "\"}" : "\",\"bp\":\"e\"}");
    }
    jflush(c, false);
}

static void chrome_instant(void *b, const struct shp_tl_instant *in)
{
    struct chrome *c = b;
    jhead(c, "i", in->proc->pid, in->tid);
    jlit(c, in->process ? ",\"s\":\"p\",\"ts\":" : ",\"s\":\"t\",\"ts\":");
    jus(c, in->ts - c->t0);
    JLIT(c, ",\"name\":");
    jstr(c, in->name);
    jlit(c, in->process ? ",\"cat\":\"finding\"," : ",\"cat\":\"mark\",");
    jargs(c, in->a, in->na);
    jraw(c, "}", 1);
}

/* A process's events, each after a separator: raw puts the one between parts. */
static void *chrome_part(uint64_t t0, uint32_t seq,
                         int (*emit)(void *, char **, size_t *, size_t *), void *arg)
{
    (void)seq;
    struct chrome *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->t0 = t0;
    c->first = true;
    c->emit = emit;
    c->emit_arg = arg;
    return c;
}

static void chrome_raw(void *b, const char *p, size_t n, bool start)
{
    struct chrome *c = b;
    if (start && !c->first)
        jraw(c, ",", 1);
    c->first = false;
    jraw(c, p, n);
    jflush(c, false);
}

static int chrome_close(void *b)
{
    struct chrome *c = b;
    if (!c->emit)
        JLIT(c, "\n]}\n");
    jflush(c, true);
    int rc = c->sink ? shp_sink_close(c->sink, c->p, c->len) : 0;
    if (!rc)
        rc = c->err ? -c->err : c->oom ? -ENOMEM : 0;
    for (size_t i = 0; i < c->memo.cap; i++)
        free(c->memo.json[i]);
    free(c->memo.s), free(c->memo.json), free(c->memo.len);
    free(c->p);
    free(c);
    return rc;
}

const struct shp_tl_ops shp_tl_chrome = {
    .name = "Chrome JSON",
    .path = "trace.json",
    .open = chrome_open,
    .process = chrome_process,
    .thread = chrome_thread,
    .slice = chrome_slice,
    .instant = chrome_instant,
    .close = chrome_close,
    .part = chrome_part,
    .raw = chrome_raw,
};
