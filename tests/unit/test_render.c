/* Unit tests of tools/render's walk drawn on several threads: each process a part, drawn by
 * whichever thread takes it, the parts written in rank order. On traces of tests/gen_traces (made
 * here, beside this program), a backend of this test writes one line per hook, so that the bytes
 * of a drawing through parts can be held against those of the same backend drawn on one thread
 * without parts; Perfetto's and Chrome's backends are held against themselves on 1, 2, 3 and 7
 * threads, with the parts ahead allowed to hold nothing (every chunk of theirs waits) or the
 * default. The ThreadSanitizer run (make check) runs it too. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "tools/lib/session.h"
#include "tools/render/timeline.h"

/* ---- a backend of lines ---- */

struct lines {
    FILE *out; /* the file's; NULL for a part */
    char *p;
    size_t len, cap;
    int (*emit)(void *, char **, size_t *, size_t *);
    void *arg;
    bool oom;
};

/* Parts emit every 200 bytes: many chunks a part, each handed over as the real ones are. */
#define LINES_CHUNK 200

static void lines_flush(struct lines *l, bool all)
{
    if (!l->len || (!all && l->len < LINES_CHUNK))
        return;
    if (l->emit) {
        if (l->emit(l->arg, &l->p, &l->len, &l->cap) < 0)
            l->oom = true;
        return;
    }
    fwrite(l->p, 1, l->len, l->out);
    l->len = 0;
}

__attribute__((format(printf, 2, 3))) static void put(struct lines *l, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t k = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if (l->len + k > l->cap) {
        size_t cap = l->cap ? l->cap : 256;
        while (cap < l->len + k)
            cap *= 2;
        char *p = realloc(l->p, cap);
        if (!p) {
            l->oom = true;
            return;
        }
        l->p = p;
        l->cap = cap;
    }
    memcpy(l->p + l->len, line, k);
    l->len += k;
    lines_flush(l, false);
}

static void *lines_open(FILE *out, uint64_t t0, void *arg)
{
    (void)arg;
    struct lines *l = calloc(1, sizeof(*l));
    if (l) {
        l->out = out;
        put(l, "begin %" PRIu64 "\n", t0);
    }
    return l;
}

static void *lines_part(uint64_t t0, uint32_t seq, int (*emit)(void *, char **, size_t *, size_t *),
                        void *arg)
{
    (void)t0;
    struct lines *l = calloc(1, sizeof(*l));
    if (l) {
        l->emit = emit;
        l->arg = arg;
        put(l, "part %u\n", seq);
    }
    return l;
}

static void lines_raw(void *b, const char *p, size_t n, bool start)
{
    (void)start;
    struct lines *l = b;
    lines_flush(l, true);
    fwrite(p, 1, n, l->out);
}

static void lines_process(void *b, const struct shp_tl_proc *p, const char *name)
{
    struct lines *l = b;
    if (!l->emit && l->out)
        put(l, "part %u\n", p->pid + 1); /* the serial drawing's stand-in for a part's start */
    put(l, "process %u %s\n", p->pid, name);
}

static void lines_thread(void *b, const struct shp_tl_proc *p, uint32_t tord, const char *what)
{
    put(b, "thread %u %u %s %u\n", p->pid, tord, what, p->tids[tord]);
}

static void lines_slice(void *b, const struct shp_tl_slice *s)
{
    char flows[512] = "";
    size_t n = 0;
    for (size_t i = 0; i < s->nf && n < sizeof(flows) - 40; i++)
        n += (size_t)snprintf(flows + n, sizeof(flows) - n, " %s%" PRIx64 "/%s",
                              s->f[i].out ? ">" : "<", s->f[i].id, s->f[i].cat);
    put(b, "slice %u %u %" PRIu64 " %" PRIu64 " %s %s %d args, index %" PRIu64 "%s\n", s->proc->pid,
        s->tord, s->ts, s->dur, s->name, s->cat, s->na, s->e->index, flows);
}

static void lines_instant(void *b, const struct shp_tl_instant *in)
{
    put(b, "instant %u %" PRIu64 " %s %s\n", in->proc->pid, in->ts, in->name, in->cat);
}

static int lines_close(void *b)
{
    struct lines *l = b;
    if (!l->emit)
        put(l, "end\n");
    lines_flush(l, true);
    int rc = l->oom ? -ENOMEM : 0;
    free(l->p);
    free(l);
    return rc;
}

static const struct shp_tl_ops lines_serial = {
    .name = "lines",
    .open = lines_open,
    .process = lines_process,
    .thread = lines_thread,
    .slice = lines_slice,
    .instant = lines_instant,
    .close = lines_close,
};

/* ---- drawings ---- */

/* One drawing of the traces in dir (a walk of its own) into a malloc'd text; NULL on error. */
static char *drawing(const char *dir, const struct shp_tl_ops *ops, unsigned threads,
                     size_t held_max, bool release, size_t *len)
{
    struct shp_session s;
    char *paths[] = {(char *)dir};
    if (shp_session_open(&s, paths, 1, SHP_SESSION_UNIQUE, "the test") < 0)
        return NULL;
    struct shp_tl_options o = {.flows = true};
    struct shp_tl *tl = NULL;
    char *text = NULL;
    FILE *f = NULL;
    int rc = -1;
    if (shp_tl_open(&s, &o, &tl) == 0 && shp_tl_scan(tl) == 0 && (f = open_memstream(&text, len))) {
        struct shp_tl_draw d = {.ops = ops,
                                .to = UINT64_MAX,
                                .release = release,
                                .threads = threads,
                                .held_max = held_max};
        rc = shp_tl_draw(tl, &d, f);
    }
    if (f)
        fclose(f);
    shp_tl_close(tl);
    shp_session_close(&s);
    if (rc < 0) {
        free(text);
        return NULL;
    }
    return text;
}

static bool same(const char *a, size_t na, const char *b, size_t nb)
{
    return a && b && na == nb && !memcmp(a, b, na);
}

static void test_parts(const char *dir)
{
    test_group("parts");
    struct shp_tl_ops lines_parts = lines_serial; /* the same backend, with parts */
    lines_parts.part = lines_part;
    lines_parts.raw = lines_raw;
    size_t n1, n;
    char *serial = drawing(dir, &lines_serial, 1, 0, false, &n1);
    test_cond("the serial drawing is made", serial && n1 > 100000);
    test_cond("it has every process, in rank order, and every slice",
              serial && strstr(serial, "process 1 rank 0") && strstr(serial, "process 6 rank 5") &&
                  strstr(serial, "process 1 rank 0") < strstr(serial, "process 6 rank 5"));
    const unsigned threads[] = {1, 2, 3, 7};
    const size_t held[] = {0, 1, 4096};
    for (size_t i = 0; i < sizeof(threads) / sizeof(*threads); i++)
        for (size_t h = 0; h < sizeof(held) / sizeof(*held); h++) {
            char *t = drawing(dir, &lines_parts, threads[i], held[h], h == 1, &n);
            test_condf(same(serial, n1, t, n),
                       "drawn in parts on %u threads, the parts ahead holding at most %zu bytes%s: "
                       "the serial drawing's bytes (%zu and %zu)",
                       threads[i], held[h], h == 1 ? ", each trace released once drawn" : "", n1,
                       n);
            free(t);
        }
    free(serial);
}

/* The file formats: the same bytes on any number of threads, and every time. */
static void test_formats(const char *dir)
{
    const struct shp_tl_ops *fmts[] = {&shp_tl_perfetto, &shp_tl_chrome};
    for (size_t k = 0; k < 2; k++) {
        test_group(fmts[k]->name);
        size_t n1, n;
        char *one = drawing(dir, fmts[k], 1, 0, true, &n1);
        test_cond("drawn on one thread", one && n1 > 100000);
        bool all = true;
        const unsigned threads[] = {2, 3, 7};
        for (size_t i = 0; i < sizeof(threads) / sizeof(*threads); i++)
            for (size_t h = 0; h < 2; h++) {
                unsigned t = threads[i];
                char *x = drawing(dir, fmts[k], t, h ? 1 : 0, true, &n);
                if (!same(one, n1, x, n)) {
                    test_condf(0, "on %u threads, held at most %s: %zu bytes, not %zu", t,
                               h ? "1 byte" : "the default", n, n1);
                    all = false;
                }
                free(x);
            }
        test_cond("the same bytes on 2, 3 and 7 threads, with and without the parts ahead waiting",
                  all);
        free(one);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    char self[4096], dir[64] = "/tmp/shp_render.XXXXXX", cmd[8400];
    snprintf(self, sizeof(self), "%s", argv[0]);
    if (!mkdtemp(dir)) {
        test_cond("a temporary directory", 0);
        return test_report();
    }
    /* 6 ranks of 2,500 calls each: collectives on several communicators, sends and receives,
     * copies (tests/gen/gen_traces.c). */
    snprintf(cmd, sizeof(cmd), "'%s/gen_traces' '%s/run' 6 2500 >/dev/null", dirname(self), dir);
    test_cond("traces to draw are made", system(cmd) == 0);
    char run[96];
    snprintf(run, sizeof(run), "%s/run", dir);
    test_parts(run);
    test_formats(run);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        test_cond("the temporary directory is removed", 0);
    return test_report();
}
