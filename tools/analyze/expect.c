/* shapetrace analyze, expectation pass (per process): shapes the user believes in (--expect FILE,
 * in the format of docs/CONTRACTS.md).
 * Each expectation selects calls (globs on op and on any frame's function, exact kind, comm,
 * rank) and says what shape their element count must have; the first call that cannot have it
 * is reported with the producers of what it read, and an expectation that matched nothing is
 * a warning, not silence. */
#define _GNU_SOURCE
#include "tools/analyze/expect.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ops.h"
#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"
#include "tools/lib/out.h"
#include "tools/lib/site.h"
#include "tools/lib/stacks.h"

#define MAX_EXTENTS 8

struct extent {
    bool any;       /* "*" */
    uint64_t value; /* resolved */
    char text[64];
};

struct expectation {
    char name[160];
    char op[64], kind[8], site[128], comm[24];
    int rank;  /* -1: any */
    int dtype; /* -1: any */
    struct extent ext[MAX_EXTENTS];
    int next;
    uint64_t matched, violated;
    size_t finding; /* SIZE_MAX until the first violation */
};

/* The expectations as read; each walk works on a copy that counts its own matches. */
struct an_expect {
    struct expectation *v;
    size_t n;
};

/* "hidden", "hidden/tp", "hidden*tp", "4096", products and quotients left to right. */
static int eval_extent(const struct an_dims *dims, const char *s, uint64_t *out)
{
    uint64_t acc = 0;
    char op = 0;
    const char *p = s;
    while (*p) {
        size_t n = strcspn(p, "*/");
        char tok[64];
        if (n == 0 || n >= sizeof(tok))
            return -1;
        memcpy(tok, p, n);
        tok[n] = 0;
        uint64_t v = 0;
        char *end;
        errno = 0;
        unsigned long long num = strtoull(tok, &end, 10);
        if (!*end && errno)
            return -4;
        if (!*end) {
            v = num;
        } else {
            int i;
            for (i = 0; i < dims->n && strcmp(dims->v[i].name, tok); i++)
                ;
            if (i == dims->n)
                return -2;
            v = dims->v[i].value;
        }
        if (!op)
            acc = v;
        else if (op == '*' && __builtin_mul_overflow(acc, v, &acc))
            return -4;
        else if (op == '*')
            ;
        else if (!v || acc % v)
            return -3;
        else
            acc /= v;
        p += n;
        if (*p)
            op = *p++;
        if (*p == 0 && op && p[-1] == op)
            return -1;
    }
    if (!acc)
        return -1;
    *out = acc;
    return 0;
}

static int fail(const char *path, const char *where, const char *what)
{
    shp_err("%s: %s: %s", path, where, what);
    return -1;
}

/* Refuses a key of o that is not in keys (NULL-terminated): "mtach" must not match every call. */
static int known_keys(json_t *o, const char *const *keys, const char *path, const char *where)
{
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val)
    {
        size_t i;
        for (i = 0; keys[i] && strcmp(keys[i], key); i++)
            ;
        if (!keys[i]) {
            char w[160], what[200];
            snprintf(w, sizeof(w), "%s%s%.64s", where, where[0] ? "." : "", key);
            snprintf(what, sizeof(what), "unknown key (known here:");
            for (i = 0; keys[i]; i++)
                snprintf(what + strlen(what), sizeof(what) - strlen(what), " %s", keys[i]);
            snprintf(what + strlen(what), sizeof(what) - strlen(what), ")");
            return fail(path, w, what);
        }
    }
    return 0;
}

/* The file whole, past a UTF-8 byte-order mark (editors on some systems write one). */
static json_t *load_json(const char *path)
{
    /* Opened without blocking and read only if it is a regular file: a FIFO (or a device) named
     * as the expectation file would hold analyze in open() or read() forever. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        shp_err("%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        shp_err("%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        shp_err("%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            char *nb = cap >= (64u << 20) ? NULL : realloc(buf, cap ? 2 * cap : 4096);
            if (!nb) {
                shp_err("%s: %s", path, cap ? "larger than 64 MiB" : strerror(ENOMEM));
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap = cap ? 2 * cap : 4096;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        shp_err("%s: read error", path);
        free(buf);
        return NULL;
    }
    size_t skip = len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
    json_error_t err;
    json_t *root = json_loadb(buf + skip, len - skip, 0, &err);
    free(buf);
    if (!root)
        shp_err("%s:%d:%d: %s", path, err.line, err.column, err.text);
    return root;
}

static int copy_str(json_t *o, const char *key, char *out, size_t len, const char *path,
                    const char *where)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_string(v)) {
        char w[160];
        snprintf(w, sizeof(w), "%s.%s", where, key);
        return fail(path, w, "expected a string");
    }
    snprintf(out, len, "%s", json_string_value(v));
    return 0;
}

struct an_expect *an_expect_load(const char *path, struct an_dims *dims)
{
    static const char *const top_keys[] = {"dims", "expect", NULL};
    static const char *const x_keys[] = {"name", "match", "shape", "dtype", NULL};
    static const char *const m_keys[] = {"op", "kind", "site", "comm", "rank", NULL};
    json_t *root = load_json(path);
    if (!root)
        return NULL;
    int rc = -1;
    struct an_expect *E = calloc(1, sizeof(*E));
    if (!E || !json_is_object(root)) {
        fail(path, "top level", "expected an object with \"dims\" and \"expect\"");
        goto out;
    }
    if (known_keys(root, top_keys, path, "") < 0)
        goto out;
    json_t *jdims = json_object_get(root, "dims");
    if (jdims && !json_is_object(jdims)) {
        fail(path, "dims", "expected an object of NAME: positive integer");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(jdims, key, val)
    {
        if (!json_is_integer(val) || json_integer_value(val) <= 0 || strlen(key) >= 32) {
            char w[96];
            snprintf(w, sizeof(w), "dims.%s", key);
            fail(path, w, "expected a positive integer (and a name under 32 characters)");
            goto out;
        }
        int i;
        for (i = 0; i < dims->n && strcmp(dims->v[i].name, key); i++)
            ;
        if (i < dims->n)
            continue; /* --dim on the command line wins */
        if (dims->n == (int)(sizeof(dims->v) / sizeof(dims->v[0]))) {
            fail(path, "dims", "too many dims (16 at most)");
            goto out;
        }
        snprintf(dims->v[dims->n].name, sizeof(dims->v[0].name), "%s", key);
        dims->v[dims->n++].value = (uint64_t)json_integer_value(val);
    }
    json_t *list = json_object_get(root, "expect");
    if (!json_is_array(list)) {
        fail(path, "expect", "expected an array of expectations");
        goto out;
    }
    E->n = json_array_size(list);
    E->v = calloc(E->n ? E->n : 1, sizeof(*E->v));
    if (!E->v)
        goto out;
    for (size_t i = 0; i < E->n; i++) {
        struct expectation *x = &E->v[i];
        json_t *o = json_array_get(list, i);
        char where[64];
        snprintf(where, sizeof(where), "expect[%zu]", i);
        x->rank = x->dtype = -1;
        x->finding = SIZE_MAX;
        if (!json_is_object(o)) {
            fail(path, where, "expected an object with \"match\" and \"shape\"");
            goto out;
        }
        snprintf(x->name, sizeof(x->name), "%s", where);
        if (known_keys(o, x_keys, path, where) < 0)
            goto out;
        if (copy_str(o, "name", x->name, sizeof(x->name), path, where) < 0)
            goto out;
        json_t *m = json_object_get(o, "match");
        if (m && !json_is_object(m)) {
            fail(path, where, "\"match\" must be an object");
            goto out;
        }
        char mw[96];
        snprintf(mw, sizeof(mw), "%s.match", where);
        if (m && known_keys(m, m_keys, path, mw) < 0)
            goto out;
        if (copy_str(m, "op", x->op, sizeof(x->op), path, mw) < 0 ||
            copy_str(m, "kind", x->kind, sizeof(x->kind), path, mw) < 0 ||
            copy_str(m, "site", x->site, sizeof(x->site), path, mw) < 0 ||
            copy_str(m, "comm", x->comm, sizeof(x->comm), path, mw) < 0)
            goto out;
        if (x->kind[0] && strcmp(x->kind, "H2D") && strcmp(x->kind, "D2H") &&
            strcmp(x->kind, "D2D") && strcmp(x->kind, "H2H")) {
            fail(path, mw, "\"kind\" must be one of H2D D2H D2D H2H");
            goto out;
        }
        json_t *r = json_object_get(m, "rank");
        if (r) {
            if (!json_is_integer(r) || json_integer_value(r) < 0 ||
                json_integer_value(r) > INT_MAX) {
                fail(path, mw, "\"rank\" must be an integer from 0 to 2147483647");
                goto out;
            }
            x->rank = (int)json_integer_value(r);
        }
        char dt[16] = "";
        if (copy_str(o, "dtype", dt, sizeof(dt), path, where) < 0)
            goto out;
        if (dt[0]) {
            for (unsigned d = 0; d < SHP_DTYPE_COUNT && x->dtype < 0; d++)
                if (!strcmp(shp_dtype_name(d), dt))
                    x->dtype = (int)d;
            if (x->dtype < 0) {
                fail(path, where,
                     "\"dtype\" must be one of int8 uint8 int32 uint32 int64 "
                     "uint64 fp16 fp32 fp64 bf16 fp8e4m3 fp8e5m2");
                goto out;
            }
        }
        json_t *shape = json_object_get(o, "shape");
        if (!json_is_array(shape) || json_array_size(shape) == 0 ||
            json_array_size(shape) > MAX_EXTENTS) {
            fail(path, where, "\"shape\" must be a list of 1 to 8 extents");
            goto out;
        }
        for (size_t k = 0; k < json_array_size(shape); k++) {
            json_t *e = json_array_get(shape, k);
            struct extent *xe = &x->ext[x->next++];
            char w[96];
            snprintf(w, sizeof(w), "%s.shape[%zu]", where, k);
            if (json_is_integer(e) && json_integer_value(e) > 0) {
                xe->value = (uint64_t)json_integer_value(e);
                snprintf(xe->text, sizeof(xe->text), "%" PRIu64, xe->value);
            } else if (json_is_string(e) && !strcmp(json_string_value(e), "*")) {
                xe->any = true;
                snprintf(xe->text, sizeof(xe->text), "*");
            } else if (json_is_string(e)) {
                snprintf(xe->text, sizeof(xe->text), "%s", json_string_value(e));
                int er = eval_extent(dims, xe->text, &xe->value);
                if (er < 0) {
                    char msg[200];
                    snprintf(msg, sizeof(msg), "'%s' %s", xe->text,
                             er == -2   ? "names a dim that \"dims\" and --dim do not define"
                             : er == -3 ? "is a quotient that does not divide"
                             : er == -4 ? "is out of range (overflows 64 bits)"
                                        : "is not an integer, a dim, or NAME*NAME / NAME/NAME");
                    fail(path, w, msg);
                    goto out;
                }
            } else {
                fail(path, w, "expected a positive integer, a dim expression, or \"*\"");
                goto out;
            }
        }
        uint64_t product = 1;
        for (int k = 0; k < x->next; k++)
            if (!x->ext[k].any && __builtin_mul_overflow(product, x->ext[k].value, &product)) {
                char w[96];
                snprintf(w, sizeof(w), "%s.shape", where);
                fail(path, w, "the extents' product is out of range (overflows 64 bits)");
                goto out;
            }
    }
    rc = 0;
out:
    json_decref(root);
    if (rc < 0) {
        an_expect_free(E);
        return NULL;
    }
    return E;
}

/* The function part of a frame text: "generate (x.c:3)", "generate+0x1f (mod)", or a Python
 * frame "py: generate (serve.py:88)". */
static bool site_matches(const char *glob, const char *frame)
{
    char fn[512];
    shp_frame_function(frame, fn, sizeof(fn));
    return fnmatch(glob, fn, 0) == 0;
}

/* Whether count elements can be written as the expectation's shape. */
static bool fits(const struct expectation *x, uint64_t count)
{
    uint64_t known = 1;
    int stars = 0;
    for (int i = 0; i < x->next; i++) {
        if (x->ext[i].any)
            stars++;
        else
            known *= x->ext[i].value;
    }
    if (!known)
        return false;
    return stars ? count >= known && count % known == 0 : count == known;
}

static void expect_event(void *st, struct an_ctx *ctx, struct an_step *s)
{
    struct an_expect *E = st;
    const struct shp_event *e = s->e;
    const struct an_ref *ref = s->ref;
    struct an_proc *p = s->proc;
    if (e->mark || !e->op || e->result != 0)
        return;
    const char *op = shp_op_name(e->op);
    for (size_t i = 0; i < E->n; i++) {
        struct expectation *x = &E->v[i];
        if (x->op[0] && fnmatch(x->op, op, 0))
            continue;
        if (x->kind[0] && (e->kind < 0 || e->kind > 3 || strcmp(x->kind, shp_kind_names[e->kind])))
            continue;
        if (x->rank >= 0 && p->sp->rank != x->rank)
            continue;
        if (x->comm[0]) {
            char id[24];
            snprintf(id, sizeof(id), "%016" PRIx64, e->comm);
            if (!e->comm || strncmp(id, x->comm, strlen(x->comm)))
                continue;
        }
        if (x->site[0]) {
            size_t n;
            const char *const *fr = an_frames(ctx, ref->proc, e->stack, &n);
            bool hit = false;
            for (size_t k = 0; k < n && !hit; k++)
                hit = site_matches(x->site, fr[k]);
            if (!hit)
                continue;
        }
        /* Element count: the op's own count for NCCL, bytes over the element size for copies. */
        uint64_t count;
        bool bad_dtype = false;
        if (e->type == SHP_REC_COPY) {
            unsigned es = x->dtype >= 0 ? shp_dtype_size((unsigned)x->dtype) : 1;
            count = e->bytes % es ? 0 : e->bytes / es;
        } else {
            count = e->count;
            bad_dtype = x->dtype >= 0 && e->dtype >= 0 && e->dtype != x->dtype;
        }
        /* A call without an element count (ncclCommInitRank, a group marker) has no shape to
         * check; it is neither a match nor a violation. */
        if (count == SHP_NONE)
            continue;
        x->matched++;
        if (fits(x, count) && !bad_dtype)
            continue;
        x->violated++;
        if (x->finding != SIZE_MAX)
            continue;
        struct an_finding *f = an_finding_add(&ctx->findings, AN_EXPECTATION_VIOLATION);
        if (!f)
            return;
        x->finding = (size_t)(f - ctx->findings.v);
        f->comm = e->comm;
        f->seq = e->seq;
        f->t_ns = e->t_ns;
        if (p->sp->rank >= 0)
            f->ranks[f->nranks++] = p->sp->rank;
        f->events[f->nevents++] = *ref;
        for (int k = 0; k < s->nproducers && f->nlineage < AN_MAX_LINEAGE; k++)
            f->lineage[f->nlineage++] = s->producers[k];
        char shape[160] = "", have[96];
        for (int k = 0; k < x->next; k++)
            snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%s", k ? ", " : "",
                     x->ext[k].text);
        an_shape(&ctx->dims, count, have, sizeof(have));
        char site[256];
        an_site(ctx, ref, site, sizeof(site));
        if (bad_dtype)
            snprintf(f->summary, sizeof(f->summary), "\"%s\": %s at %s is %s, expected %s", x->name,
                     op, site, shp_dtype_name((unsigned)e->dtype),
                     shp_dtype_name((unsigned)x->dtype));
        else
            snprintf(f->summary, sizeof(f->summary),
                     "\"%s\": %s at %s moves %" PRIu64 " %s element%s%s%s, which is not [%s]",
                     x->name, op, site, count,
                     x->dtype >= 0 ? shp_dtype_name((unsigned)x->dtype) : "", count == 1 ? "" : "s",
                     have[0] ? " " : "", have, shape);
        /* A captured call executes, and is checked, at each replay: name the first one. */
        if (s->launch) {
            char note[600];
            an_replay_note(ctx, s->launch, s->replay, ref, note, sizeof(note));
            size_t l = strlen(f->summary);
            snprintf(f->summary + l, sizeof(f->summary) - l, ", in %s", note);
            f->labels[f->nevents] = "the graph launch that executed it";
            f->events[f->nevents++] = *s->launch;
        }
    }
}

/* Main thread, after the merges: an expectation that matched nothing is a warning, not
 * silence; a violated one says how often. */
static void expect_done(void *st, struct an_ctx *ctx)
{
    struct an_expect *E = st;
    for (size_t i = 0; i < E->n; i++) {
        struct expectation *x = &E->v[i];
        if (!x->matched)
            shp_err("warning: expectation \"%s\" matched no call", x->name);
        else if (x->finding != SIZE_MAX) {
            struct an_finding *f = &ctx->findings.v[x->finding];
            size_t l = strlen(f->summary);
            snprintf(f->summary + l, sizeof(f->summary) - l,
                     " (%" PRIu64 " of %" PRIu64 " matching calls violate it)", x->violated,
                     x->matched);
        }
    }
}

void an_expect_free(struct an_expect *E)
{
    if (E)
        free(E->v);
    free(E);
}

/* A copy of the expectations read, with counters of its own. */
static void *expect_init(struct an_ctx *ctx)
{
    const struct an_expect *from = ctx->expect;
    if (!from)
        return NULL;
    struct an_expect *E = calloc(1, sizeof(*E));
    if (!E)
        return NULL;
    *E = *from;
    E->v = malloc((E->n ? E->n : 1) * sizeof(*E->v));
    if (!E->v) {
        free(E);
        return NULL;
    }
    memcpy(E->v, from->v, E->n * sizeof(*E->v));
    return E;
}

static void expect_merge(void *into, struct an_ctx *ctx, void *from, size_t finding_base)
{
    struct an_expect *A = into, *B = from;
    for (size_t i = 0; i < A->n && i < B->n; i++) {
        struct expectation *a = &A->v[i], *b = &B->v[i];
        a->matched += b->matched;
        a->violated += b->violated;
        if (b->finding == SIZE_MAX)
            continue;
        size_t bf = finding_base + b->finding;
        /* One finding per expectation: the earliest violation among the processes. */
        if (a->finding == SIZE_MAX) {
            a->finding = bf;
        } else if (ctx->findings.v[bf].t_ns < ctx->findings.v[a->finding].t_ns) {
            ctx->findings.v[a->finding].kind = AN_KIND_COUNT; /* dropped by the driver */
            a->finding = bf;
        } else {
            ctx->findings.v[bf].kind = AN_KIND_COUNT;
        }
    }
}

static void expect_free_state(void *st)
{
    an_expect_free(st);
}

const struct an_pass an_pass_expect = {
    .name = "expect",
    .init = expect_init,
    .event = expect_event,
    .merge = expect_merge,
    .done = expect_done,
    .free = expect_free_state,
};
