/* shapetrace tools: the session, the traces one command reads (see session.h): collected and
 * opened once under one policy, described once, their stacks behind one lock and one cache. */
#define _GNU_SOURCE
#include "tools/lib/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "tools/lib/event.h"
#include "tools/lib/out.h"
#include "tools/lib/stacks.h"
#include "tools/lib/symbolize.h"

/* One file to open, and whether a PATH named it (else a directory held it). */
struct found {
    char *file;
    bool named;
};

static void free_found(struct found *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(f[i].file);
    free(f);
}

/* The files of paths[0..npaths) in order, each directory's sorted. Sets *refused when a PATH
 * does not exist or cannot be read (its line printed; with SHP_SESSION_PARTIAL, the others are
 * still collected; with SHP_SESSION_EMPTY a missing PATH is no refusal), and in *empty the first
 * PATH without any trace (NULL if none; each such directory is remembered in empties for its
 * note). Returns 0 or -ENOMEM. */
static int collect(char *const *paths, int npaths, unsigned flags, struct found **out, size_t *nout,
                   size_t *cap, bool *refused, const char **empty, bool *empties)
{
    bool partial = flags & SHP_SESSION_PARTIAL;
    for (int i = 0; i < npaths && (partial || !*refused); i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            int e = errno;
            if (e == ENOENT && (flags & SHP_SESSION_EMPTY)) {
                if (!*empty)
                    *empty = paths[i];
                continue;
            }
            shp_err("%s: %s", paths[i],
                    e == ENOENT ? "no such file, or no traces in it" : strerror(e));
            *refused = true;
            continue;
        }
        char **files = NULL;
        size_t n = 0;
        int rc = shp_trace_collect(paths[i], &files, &n);
        if (rc == -ENOENT && S_ISDIR(st.st_mode) && n == 0) {
            if (!*empty)
                *empty = paths[i];
            empties[i] = true;
        } else if (rc < 0 && rc != -ENOMEM) {
            shp_err("%s: %s", paths[i], strerror(-rc));
            *refused = true;
        }
        bool oom = rc == -ENOMEM;
        for (size_t k = 0; k < n; k++) {
            if (rc == 0 && !oom && shp_grow((void **)out, cap, *nout, sizeof(**out))) {
                (*out)[(*nout)++] = (struct found){files[k], !S_ISDIR(st.st_mode)};
                continue;
            }
            oom |= rc == 0;
            free(files[k]);
        }
        free(files);
        if (oom)
            return -ENOMEM;
    }
    return 0;
}

static int add_unreadable(struct shp_session *s, const char *file, const char *why)
{
    struct shp_unreadable *u = realloc(s->unreadable, (s->nunreadable + 1) * sizeof(*u));
    if (!u)
        return -ENOMEM;
    s->unreadable = u;
    u += s->nunreadable;
    if (!(u->file = strdup(file)) || !(u->why = strdup(why))) {
        free(u->file);
        return -ENOMEM;
    }
    s->nunreadable++;
    return 0;
}

static void skipped(const struct shp_session *s, const char *file, const char *why)
{
    if (!(s->flags & SHP_SESSION_QUIET))
        shp_err("%s: %s; skipped: %s covers the other traces only", file, why, s->what);
}

static int add_proc(struct shp_session *s, const struct shp_trace *t)
{
    if (!shp_grow((void **)&s->procs, &s->cap, s->nprocs, sizeof(*s->procs)))
        return -ENOMEM;
    struct shp_proc *p = &s->procs[s->nprocs++];
    memset(p, 0, sizeof(*p));
    p->t = *t;
    p->rank = shp_trace_rank(t);
    return 0;
}

static int by_identity(const void *a, const void *b, void *arg)
{
    const struct shp_proc *ps = arg;
    const struct shp_file_header *x = ps[*(const size_t *)a].t.hdr;
    const struct shp_file_header *y = ps[*(const size_t *)b].t.hdr;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->realtime_ns != y->realtime_ns)
        return x->realtime_ns < y->realtime_ns ? -1 : 1;
    int c = strcmp(x->host, y->host);
    if (c)
        return c;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

static bool same_trace(const struct shp_proc *a, const struct shp_proc *b)
{
    return a->t.hdr->pid == b->t.hdr->pid && a->t.hdr->realtime_ns == b->t.hdr->realtime_ns &&
           !strcmp(a->t.hdr->host, b->t.hdr->host);
}

/* The same trace given twice (a file and its directory) would look like two ranks: the first
 * such pair, in the order the traces were given, is named. -1 after its line, 0, or -ENOMEM. */
static int refuse_twice(const struct shp_session *s)
{
    size_t *ix = malloc((s->nprocs ? s->nprocs : 1) * sizeof(*ix));
    if (!ix)
        return -ENOMEM;
    for (size_t i = 0; i < s->nprocs; i++)
        ix[i] = i;
    qsort_r(ix, s->nprocs, sizeof(*ix), by_identity, s->procs);
    size_t bi = SIZE_MAX, bk = SIZE_MAX;
    for (size_t i = 1; i < s->nprocs; i++) {
        /* Sorted by index within equal identities: the group's first pair is its smallest. */
        if (!same_trace(&s->procs[ix[i - 1]], &s->procs[ix[i]]) ||
            (i > 1 && same_trace(&s->procs[ix[i - 2]], &s->procs[ix[i]])))
            continue;
        if (ix[i - 1] < bi || (ix[i - 1] == bi && ix[i] < bk)) {
            bi = ix[i - 1];
            bk = ix[i];
        }
    }
    free(ix);
    if (bi == SIZE_MAX)
        return 0;
    shp_err("%s and %s are the same trace given twice", s->procs[bi].t.path, s->procs[bk].t.path);
    return -1;
}

int shp_session_open(struct shp_session *s, char *const *paths, int npaths, unsigned flags,
                     const char *what)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->flags = flags;
    s->what = what;
    bool partial = flags & SHP_SESSION_PARTIAL, refused = false;
    const char *empty = NULL;
    struct found *found = NULL;
    size_t nfound = 0, fcap = 0;
    int rc = -ENOMEM;
    s->paths = calloc((size_t)(npaths > 0 ? npaths : 1), sizeof(*s->paths));
    bool *empties = calloc((size_t)(npaths > 0 ? npaths : 1), sizeof(*empties));
    if (!s->paths || !empties)
        goto out;
    for (int i = 0; i < npaths; i++)
        if (!(s->paths[s->npaths++] = strdup(paths[i])))
            goto out;
    if (!(flags & SHP_SESSION_RAW) && !(s->cache = shp_symcache_new()))
        goto out;
    rc = collect(paths, npaths, flags, &found, &nfound, &fcap, &refused, &empty, empties);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < nfound && (partial || !refused); i++) {
        struct shp_trace t;
        char err[256];
        if (shp_trace_open(&t, found[i].file, err, sizeof(err)) == 0) {
            if ((rc = add_proc(s, &t)) < 0) {
                shp_trace_close(&t);
                goto out;
            }
        } else if (found[i].named) {
            shp_err("%s: %s", found[i].file, err);
            refused = true;
        } else {
            if ((rc = add_unreadable(s, found[i].file, err)) < 0)
                goto out;
            skipped(s, found[i].file, err);
        }
    }
    rc = refused ? 1 : 0;
    if (!refused && !s->nprocs && !(flags & SHP_SESSION_EMPTY)) {
        /* Nothing to read at all: a run directory of junk, or only empty directories. */
        if (s->nunreadable)
            shp_err("no readable trace in %s", npaths == 1 ? paths[0] : "the paths given");
        else
            shp_err("%s: no such file, or no traces in it", empty ? empty : "");
        rc = -1;
    }
    if (rc >= 0 && s->nprocs)
        for (int i = 0; i < npaths; i++)
            if (empties[i])
                shp_err("note: %s: no traces in it", paths[i]);
    if (rc >= 0 && (flags & SHP_SESSION_UNIQUE)) {
        int u = refuse_twice(s);
        rc = u == -ENOMEM ? u : u < 0 ? -1 : rc;
    }
    if (rc == 1 && !partial)
        rc = -1;
out:
    if (rc == -ENOMEM)
        shp_err("out of memory");
    free(empties);
    free_found(found, nfound);
    return rc < 0 ? -1 : rc;
}

static bool is_proc(const struct shp_session *s, const char *file)
{
    for (size_t i = 0; i < s->nprocs; i++)
        if (!strcmp(s->procs[i].t.path, file))
            return true;
    return false;
}

static long unreadable_at(const struct shp_session *s, const char *file)
{
    for (size_t i = 0; i < s->nunreadable; i++)
        if (!strcmp(s->unreadable[i].file, file))
            return (long)i;
    return -1;
}

int shp_session_update(struct shp_session *s)
{
    int status = 0;
    for (size_t i = 0; i < s->nprocs; i++) {
        struct shp_proc *p = &s->procs[i];
        struct shp_trace t;
        char err[256];
        shp_stacks_free(p->stacks);
        p->stacks = NULL;
        /* Opened again to see what the writer appended since (the mapping is the file's size
         * at open); a trace that cannot be read any more keeps what it showed. */
        if (shp_trace_open(&t, p->t.path, err, sizeof(err)) != 0) {
            shp_err("%s: %s", p->t.path, err);
            status = 1;
            continue;
        }
        shp_trace_close(&p->t);
        p->t = t;
        p->rank = shp_trace_rank(&t);
    }
    struct found *found = NULL;
    size_t nfound = 0, fcap = 0;
    bool refused = false, *empties = calloc((size_t)(s->npaths ? s->npaths : 1), 1);
    const char *empty = NULL;
    if (!empties || collect(s->paths, s->npaths, s->flags | SHP_SESSION_PARTIAL, &found, &nfound,
                            &fcap, &refused, &empty, empties) < 0) {
        free(empties);
        free_found(found, nfound);
        return -1;
    }
    for (size_t i = 0; i < nfound; i++) {
        if (is_proc(s, found[i].file))
            continue;
        long u = unreadable_at(s, found[i].file);
        struct shp_trace t;
        char err[256];
        if (shp_trace_open(&t, found[i].file, err, sizeof(err)) == 0) {
            if (add_proc(s, &t) < 0) {
                shp_trace_close(&t);
                status = -1;
                break;
            }
            if (u >= 0) { /* created meanwhile: no longer unreadable */
                free(s->unreadable[u].file);
                free(s->unreadable[u].why);
                memmove(&s->unreadable[u], &s->unreadable[u + 1],
                        (s->nunreadable - (size_t)u - 1) * sizeof(*s->unreadable));
                s->nunreadable--;
            }
        } else if (u < 0) {
            if (add_unreadable(s, found[i].file, err) < 0) {
                status = -1;
                break;
            }
            skipped(s, found[i].file, err);
        }
    }
    free(empties);
    free_found(found, nfound);
    return status < 0 ? -1 : 0;
}

void shp_session_close(struct shp_session *s)
{
    for (size_t i = 0; i < s->nprocs; i++) {
        shp_stacks_free(s->procs[i].stacks);
        shp_trace_close(&s->procs[i].t);
    }
    free(s->procs);
    for (size_t i = 0; i < s->nunreadable; i++) {
        free(s->unreadable[i].file);
        free(s->unreadable[i].why);
    }
    free(s->unreadable);
    for (int i = 0; i < s->npaths; i++)
        free(s->paths[i]);
    free(s->paths);
    shp_symcache_free(s->cache);
    pthread_mutex_destroy(&s->lock);
    memset(s, 0, sizeof(*s));
}

void shp_proc_walked(struct shp_proc *p, const struct shp_cursor *cur, uint64_t events)
{
    p->walked = true;
    p->torn = cur->torn;
    p->events = events;
}

void shp_proc_saw(struct shp_proc *p, const struct shp_event *e)
{
    uint64_t end = e->dur_ns == SHP_NONE ? e->t_ns : e->t_ns + e->dur_ns;
    if (!p->first_ns || e->t_ns < p->first_ns)
        p->first_ns = e->t_ns;
    if (end > p->last_ns)
        p->last_ns = end;
}

bool shp_proc_complete(const struct shp_proc *p)
{
    struct shp_cursor c = {.torn = p->torn};
    return shp_trace_complete(&p->t, &c);
}

const char *shp_proc_incomplete_why(const struct shp_proc *p)
{
    struct shp_cursor c = {.torn = p->torn};
    return shp_trace_incomplete_why(&p->t, &c);
}

enum shp_fate shp_proc_fate(const struct shp_proc *p)
{
    return shp_trace_fate(&p->t, NULL, 0);
}

/* Proc i's stacks; the caller holds the lock. */
static struct shp_stacks *stacks_locked(struct shp_session *s, size_t i)
{
    struct shp_proc *p = &s->procs[i];
    if (!p->stacks) {
        p->stacks = shp_stacks_load_shared(&p->t, !(s->flags & SHP_SESSION_RAW), s->cache);
        shp_stacks_set_rule(p->stacks, s->site);
    }
    return p->stacks;
}

struct shp_stacks *shp_session_stacks(struct shp_session *s, size_t i)
{
    pthread_mutex_lock(&s->lock);
    struct shp_stacks *st = stacks_locked(s, i);
    pthread_mutex_unlock(&s->lock);
    return st;
}

const char *const *shp_session_frames(struct shp_session *s, size_t i, uint32_t id, size_t *n)
{
    /* One lock for all: symbolizing enters libdw, which is not thread-safe, and the module
     * texts are shared by every process's symbolizer through one cache. */
    pthread_mutex_lock(&s->lock);
    const char *const *fr = shp_stacks_frames(stacks_locked(s, i), id, n);
    pthread_mutex_unlock(&s->lock);
    return fr;
}

void shp_session_site(struct shp_session *s, size_t i, uint32_t id, char *out, size_t len)
{
    pthread_mutex_lock(&s->lock);
    shp_stacks_site(stacks_locked(s, i), id, out, len);
    pthread_mutex_unlock(&s->lock);
}

size_t shp_session_site_index(struct shp_session *s, size_t i, uint32_t id)
{
    pthread_mutex_lock(&s->lock);
    size_t site = shp_stacks_site_index(stacks_locked(s, i), id, s->site);
    pthread_mutex_unlock(&s->lock);
    return site;
}

void shp_session_forget_pages(struct shp_session *s, size_t i)
{
    struct shp_proc *p = &s->procs[i];
    /* The pages go back to the page cache; the header stays. */
    if (p->t.map && p->t.size > SHP_HEADER_SIZE)
        madvise((void *)(p->t.map + SHP_HEADER_SIZE), (p->t.size - SHP_HEADER_SIZE) & ~4095ul,
                MADV_DONTNEED);
}

void shp_session_release(struct shp_session *s, size_t i)
{
    struct shp_proc *p = &s->procs[i];
    pthread_mutex_lock(&s->lock); /* the module texts its stacks share with the others' */
    shp_stacks_free(p->stacks);
    p->stacks = NULL;
    pthread_mutex_unlock(&s->lock);
    shp_session_forget_pages(s, i);
}
