/* shapetrace analyze: the finding store, its causal order, and the naming of shapes and call
 * sites that every pass's summaries use (see findings.h). */
#include "tools/analyze/findings.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/analyze/pass.h"
#include "tools/lib/session.h"

#define AN_X_NAME(kind, name, severity, what) [AN_##kind] = #name,
const char *const an_kind_names[AN_KIND_COUNT] = {AN_KINDS(AN_X_NAME)};
#undef AN_X_NAME

#define AN_SEVERITY_ERROR true
#define AN_SEVERITY_WARNING false
#define AN_X_ERROR(kind, name, severity, what) [AN_##kind] = AN_SEVERITY_##severity,
const bool an_kind_is_error[AN_KIND_COUNT] = {AN_KINDS(AN_X_ERROR)};
#undef AN_X_ERROR

#define AN_X_WHAT(kind, name, severity, what) [AN_##kind] = what,
const char *const an_kind_whats[AN_KIND_COUNT] = {AN_KINDS(AN_X_WHAT)};
#undef AN_X_WHAT

static bool reserve(struct an_findings *fs, size_t more)
{
    if (fs->n + more <= fs->cap)
        return true;
    size_t ncap = fs->cap ? fs->cap * 2 : 16;
    while (ncap < fs->n + more)
        ncap *= 2;
    struct an_finding *n = realloc(fs->v, ncap * sizeof(*n));
    if (!n)
        return false;
    fs->v = n;
    fs->cap = ncap;
    return true;
}

struct an_finding *an_finding_add(struct an_findings *fs, enum an_kind kind)
{
    if (!reserve(fs, 1))
        return NULL;
    struct an_finding *f = &fs->v[fs->n++];
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    f->error = kind < AN_KIND_COUNT && an_kind_is_error[kind];
    f->seq = f->position = SHP_NONE;
    f->waits_on = -1;
    for (int i = 0; i < AN_MAX_RANKS; i++)
        f->comm_ranks[i] = -1;
    return f;
}

void an_finding_rank_in(struct an_finding *f, int rank, int comm_rank)
{
    for (int i = 0; i < f->nranks; i++)
        if (f->ranks[i] == rank) {
            if (f->comm_ranks[i] < 0)
                f->comm_ranks[i] = comm_rank;
            return;
        }
    if (f->nranks < AN_MAX_RANKS) {
        f->comm_ranks[f->nranks] = comm_rank;
        f->ranks[f->nranks++] = rank;
    }
}

void an_finding_rank(struct an_finding *f, int rank)
{
    an_finding_rank_in(f, rank, -1);
}

void an_finding_event(struct an_finding *f, const struct an_ref *ref, uint64_t t_ns)
{
    if (f->nevents < AN_MAX_EVENTS)
        f->events[f->nevents++] = *ref;
    if (!f->t_ns || t_ns < f->t_ns)
        f->t_ns = t_ns;
}

size_t an_findings_append(struct an_findings *fs, const struct an_findings *from)
{
    size_t base = fs->n;
    if (!reserve(fs, from->n))
        return SIZE_MAX;
    if (from->n)
        memcpy(fs->v + fs->n, from->v, from->n * sizeof(*from->v));
    fs->n += from->n;
    return base;
}

void an_findings_compact(struct an_findings *fs)
{
    size_t out = 0;
    for (size_t i = 0; i < fs->n; i++)
        if (fs->v[i].kind != AN_KIND_COUNT)
            fs->v[out++] = fs->v[i];
    fs->n = out;
}

/* Collectives order the ranks: on one communicator a lower seq comes first whatever the clocks
 * say; across communicators and processes, time decides. */
static bool names(const struct an_finding *f, int rank)
{
    for (int i = 0; i < f->nranks; i++)
        if (f->ranks[i] == rank)
            return true;
    return false;
}

/* Whether a waits on a rank that b names: a is b's consequence. */
static bool held_up_by(const struct an_finding *a, const struct an_finding *b)
{
    return a->kind == AN_P2P_UNMATCHED && a->waits_on >= 0 && b->kind != AN_P2P_UNMATCHED &&
           names(b, a->waits_on);
}

static int before(const struct an_finding *a, const struct an_finding *b)
{
    if (a->comm && a->comm == b->comm && a->position != SHP_NONE && b->position != SHP_NONE &&
        a->position != b->position)
        return a->position < b->position;
    if (held_up_by(a, b) != held_up_by(b, a))
        return held_up_by(b, a);
    if (a->t_ns != b->t_ns)
        return a->t_ns && (a->t_ns < b->t_ns || !b->t_ns);
    return a < b;
}

void an_findings_order(struct an_findings *fs)
{
    /* Insertion sort: findings are few, and the relation is not a total order for qsort. */
    size_t n = fs->n;
    size_t *idx = malloc((n ? n : 1) * sizeof(*idx));
    if (!idx)
        return;
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        while (k > 0 && before(&fs->v[i], &fs->v[idx[k - 1]])) {
            idx[k] = idx[k - 1];
            k--;
        }
        idx[k] = i;
    }
    for (size_t i = 0; i < n; i++)
        fs->v[idx[i]].order = i;
    free(idx);
}

const struct an_finding *an_findings_nth(const struct an_findings *fs, size_t order)
{
    for (size_t i = 0; i < fs->n; i++)
        if (fs->v[i].order == order)
            return &fs->v[i];
    return NULL;
}

void an_findings_free(struct an_findings *fs)
{
    free(fs->v);
    memset(fs, 0, sizeof(*fs));
}

void an_rank_list(const int *ranks, int n, bool more, char *out, size_t len)
{
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < n && off < len; i++)
        off += (size_t)snprintf(out + off, len - off, "%s%d", i ? ", " : "", ranks[i]);
    if (more && off < len)
        snprintf(out + off, len - off, ", ...");
}

/* an_factor, where the extent must divide other as well (0: no other). */
static void factor_both(const struct an_dims *d, uint64_t count, uint64_t other, uint64_t *best,
                        char *name, size_t len)
{
    *best = 0;
    name[0] = 0;
    if (!count || count == SHP_NONE || other == SHP_NONE)
        return;
    /* Candidate extents: each dim, and products and quotients of two. The largest one that
     * divides the count explains most of it with one free number. */
    for (int i = 0; i < d->n; i++) {
        for (int k = -2; k < d->n; k++) {
            uint64_t v = d->v[i].value, w = k >= 0 ? d->v[k].value : 0;
            char n[80];
            if (k == -2) {
                snprintf(n, sizeof(n), "%s", d->v[i].name);
            } else if (k == -1 || k == i) {
                continue;
            } else if (w && v % w == 0 && v / w > 1) {
                v /= w;
                snprintf(n, sizeof(n), "%s/%s", d->v[i].name, d->v[k].name);
            } else {
                continue;
            }
            if (v > 1 && count % v == 0 && (!other || other % v == 0) && v > *best) {
                *best = v;
                snprintf(name, len, "%s", n);
            }
        }
        for (int k = i + 1; k < d->n; k++) {
            uint64_t v = d->v[i].value * d->v[k].value;
            if (v > 1 && count % v == 0 && (!other || other % v == 0) && v > *best) {
                *best = v;
                snprintf(name, len, "%s*%s", d->v[i].name, d->v[k].name);
            }
        }
    }
}

void an_factor(const struct an_dims *d, uint64_t count, uint64_t *best, char *name, size_t len)
{
    factor_both(d, count, 0, best, name, len);
}

void an_shape(const struct an_dims *d, uint64_t count, char *out, size_t len)
{
    an_shape_as(d, count, 0, out, len);
}

void an_shape_as(const struct an_dims *d, uint64_t count, uint64_t other, char *out, size_t len)
{
    uint64_t best = 0;
    char name[96];
    out[0] = 0;
    /* One extent that factors both sides shows a one-token difference as [511, ..] next to
     * [512, ..]; without one, each side in its own. */
    if (other && other != count)
        factor_both(d, count, other, &best, name, sizeof(name));
    if (!best)
        factor_both(d, count, 0, &best, name, sizeof(name));
    if (!best)
        return;
    if (count == best)
        snprintf(out, len, "[%s]", name);
    else
        snprintf(out, len, "[%" PRIu64 ", %s]", count / best, name);
}

const char *const *an_frames(struct an_ctx *ctx, uint32_t proc, uint32_t stack, size_t *n)
{
    return shp_session_frames(ctx->session, proc, stack, n);
}

bool an_decode(struct an_ctx *ctx, const struct an_ref *r, struct shp_event *e)
{
    if (!r->rec || !shp_event_decode(&ctx->procs[r->proc].sp->t, r->rec, r->type, e))
        return false;
    e->index = r->index;
    return true;
}

void an_site(struct an_ctx *ctx, const struct an_ref *r, char *out, size_t len)
{
    struct shp_event e;
    out[0] = 0;
    if (an_decode(ctx, r, &e))
        shp_session_site(ctx->session, r->proc, e.stack, out, len);
    if (!out[0])
        snprintf(out, len, "an unknown site");
}

void an_replay_note(struct an_ctx *ctx, const struct an_ref *launch, uint64_t replay,
                    const struct an_ref *captured, char *out, size_t len)
{
    char ls[256], cs[256];
    an_site(ctx, launch, ls, sizeof(ls));
    an_site(ctx, captured, cs, sizeof(cs));
    snprintf(out, len, "replay %" PRIu64 " of the graph launched at %s (captured at %s)", replay,
             ls, cs);
}

void an_finding_comm_ranks(struct an_ctx *ctx, struct an_finding *f)
{
    if (!f->comm)
        return;
    for (int k = 0; k < f->nevents; k++) {
        struct shp_event e;
        int g = ctx->procs[f->events[k].proc].sp->rank;
        if (!an_decode(ctx, &f->events[k], &e) || e.comm != f->comm || e.comm_rank < 0)
            continue;
        for (int i = 0; i < f->nranks; i++)
            if (f->ranks[i] == g && f->comm_ranks[i] < 0)
                f->comm_ranks[i] = e.comm_rank;
    }
}
