/* shapetrace tools: the job view of a snapshot (snapshot.h). Ranks are grouped by where their
 * focus thread is: the same call into NCCL or CUDA (or, outside them, the same function it waits
 * in), at the same site in the user's code, after the same collective when traces say it. The
 * groups the others wait for come first: with traces, the ranks behind on a communicator; else,
 * when some ranks are in a GPU library and others are not, the ones that are not. */
#define _GNU_SOURCE
#include "tools/lib/snapshot.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/out.h"

#define SNAP_KIND "shapetrace snapshot"
#define SNAP_VERSION 1
#define WHERE_MAX 160 /* a place in a file being merged ("processes[2].threads[5]") */

struct shp_snap_proc *shp_snap_job_add(struct shp_snap_job *job)
{
    if (!shp_grow((void **)&job->procs, &job->cap, job->n, sizeof(*job->procs)))
        return NULL;
    struct shp_snap_proc *p = &job->procs[job->n++];
    *p = (struct shp_snap_proc){.rank = -1, .local_rank = -1, .world_size = -1};
    p->last.seq = UINT64_MAX;
    return p;
}

void shp_snap_scrub(char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

static void free_thread(struct shp_snap_thread *t)
{
    for (size_t i = 0; i < t->nframes; i++)
        free(t->frames[i]);
    free(t->frames);
    free(t->in);
    free(t->waiting);
}

static void free_proc(struct shp_snap_proc *p)
{
    for (size_t k = 0; k < p->nthreads; k++)
        free_thread(&p->threads[k]);
    free(p->threads);
    free(p->error);
    free(p->exe);
    free(p->python_note);
    free(p->trace);
    free(p->comms);
    free(p->inflight);
}

void shp_snap_job_free(struct shp_snap_job *job)
{
    for (size_t i = 0; i < job->n; i++)
        free_proc(&job->procs[i]);
    free(job->procs);
    *job = (struct shp_snap_job){0};
}

size_t shp_snap_focus(const struct shp_snap_proc *p)
{
    size_t main = SIZE_MAX, gpu = SIZE_MAX, site = SIZE_MAX;
    for (size_t i = 0; i < p->nthreads; i++) {
        const struct shp_snap_thread *t = &p->threads[i];
        bool is_main = t->tid == p->pid;
        if (is_main)
            main = i;
        /* the main thread first, then the lowest tid */
        bool before_gpu = gpu == SIZE_MAX || is_main ||
                          (p->threads[gpu].tid != p->pid && t->tid < p->threads[gpu].tid);
        if (t->has_site && t->in && before_gpu)
            gpu = i;
        if (t->has_site && (site == SIZE_MAX || t->tid < p->threads[site].tid))
            site = i;
    }
    if (gpu != SIZE_MAX)
        return gpu;
    if (main != SIZE_MAX && p->threads[main].has_site)
        return main;
    if (site != SIZE_MAX)
        return site;
    return main != SIZE_MAX ? main : 0;
}

/* ---- the view ---- */

static const struct shp_snap_thread *focus_of(const struct shp_snap_proc *p)
{
    return p->error || !p->nthreads || p->focus >= p->nthreads ? NULL : &p->threads[p->focus];
}

/* "main thread" or "thread NAME" */
static void who(const struct shp_snap_proc *p, const struct shp_snap_thread *t, char *out,
                size_t len)
{
    if (t->tid == p->pid)
        snprintf(out, len, "main thread");
    else
        snprintf(out, len, "thread %s", t->name[0] ? t->name : "?");
}

/* A site frame as a person reads it: without the "py: " of a Python frame. */
static const char *site_text(const struct shp_snap_thread *t)
{
    if (!t->has_site || t->site >= t->nframes)
        return "";
    const char *s = t->frames[t->site];
    return strncmp(s, "py: ", 4) ? s : s + 4;
}

/* Where the process is among its collectives, from its trace: "ncclAllReduce #5". */
static void position(const struct shp_snap_proc *p, char *out, size_t len)
{
    out[0] = '\0';
    if (p->trace && p->last.seq != UINT64_MAX)
        snprintf(out, len, "%s #%" PRIu64, p->last.op, p->last.seq);
}

struct group {
    size_t *members; /* indexes into the job's processes */
    size_t n, cap;
    char who[48];
    const char *what; /* the call, or the function it waits in */
    bool gpu, collective;
    const char *site;
    char pos[64]; /* the last collective entered, from traces */
    bool waited;
    bool ranked;    /* its processes have ranks (a launcher's, say, have none) */
    int first_rank; /* the lowest rank, for the order; INT32_MAX: none */
};

static bool same_place(const struct group *g, bool ranked, const char *w, const char *what,
                       bool gpu, const char *site, const char *pos)
{
    return g->ranked == ranked && g->gpu == gpu && !strcmp(g->who, w) && !strcmp(g->what, what) &&
           !strcmp(g->site, site) && !strcmp(g->pos, pos);
}

/* Behind: a lower seq than another member's on a communicator they share. */
static void mark_behind(struct shp_snap_job *job)
{
    for (size_t i = 0; i < job->n; i++) {
        struct shp_snap_proc *p = &job->procs[i];
        p->behind = false;
        for (size_t k = 0; k < p->ncomms && !p->behind; k++) {
            const struct shp_snap_comm *c = &p->comms[k];
            uint64_t mine = c->seq == UINT64_MAX ? 0 : c->seq + 1;
            for (size_t j = 0; j < job->n && !p->behind; j++)
                for (size_t m = 0; m < job->procs[j].ncomms; m++) {
                    const struct shp_snap_comm *o = &job->procs[j].comms[m];
                    if (o->id == c->id && o->seq != UINT64_MAX && o->seq + 1 > mine)
                        p->behind = true;
                }
        }
    }
}

static int rank_of(const struct shp_snap_job *job, size_t i)
{
    return job->procs[i].rank >= 0 ? job->procs[i].rank : INT32_MAX;
}

static int cmp_group(const struct group *a, const struct group *b)
{
    if (a->waited != b->waited)
        return a->waited ? -1 : 1;
    if (a->ranked != b->ranked)
        return a->ranked ? -1 : 1;
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    return a->first_rank < b->first_rank ? -1 : a->first_rank > b->first_rank;
}

/* The groups of job's processes that were read, the ones waited for first. */
static struct group *make_groups(struct shp_snap_job *job, size_t *ng, const char **reason)
{
    struct group *gs = NULL;
    size_t n = 0, cap = 0;
    *reason = NULL;
    mark_behind(job);
    bool any_behind = false;
    for (size_t i = 0; i < job->n; i++) {
        const struct shp_snap_proc *p = &job->procs[i];
        const struct shp_snap_thread *t = focus_of(p);
        if (!t)
            continue;
        any_behind |= p->behind;
        char w[48], pos[64];
        who(p, t, w, sizeof(w));
        position(p, pos, sizeof(pos));
        const char *what = t->in ? t->in : t->waiting ? t->waiting : "?";
        struct group *g = NULL;
        bool ranked = p->rank >= 0;
        for (size_t k = 0; k < n && !g; k++)
            if (same_place(&gs[k], ranked, w, what, t->in != NULL, site_text(t), pos))
                g = &gs[k];
        if (!g) {
            if (!shp_grow((void **)&gs, &cap, n, sizeof(*gs)))
                break;
            g = &gs[n++];
            *g = (struct group){.what = what,
                                .gpu = t->in != NULL,
                                .collective = t->collective,
                                .site = site_text(t),
                                .ranked = ranked,
                                .first_rank = INT32_MAX};
            snprintf(g->who, sizeof(g->who), "%s", w);
            snprintf(g->pos, sizeof(g->pos), "%s", pos);
        }
        if (!shp_grow((void **)&g->members, &g->cap, g->n, sizeof(*g->members)))
            continue;
        g->members[g->n++] = i;
        if (rank_of(job, i) < g->first_rank)
            g->first_rank = rank_of(job, i);
    }
    /* Where ranks are known, only ranks are waited for: a launcher (torchrun's agent, which
     * maps libnccl too) waits outside any GPU library without anyone waiting for it. */
    bool any_ranked = false, any_gpu = false, any_other = false;
    for (size_t k = 0; k < n; k++)
        any_ranked |= gs[k].ranked;
    for (size_t k = 0; k < n; k++) {
        any_gpu |= gs[k].gpu && (gs[k].ranked || !any_ranked);
        any_other |= !gs[k].gpu && (gs[k].ranked || !any_ranked);
    }
    for (size_t k = 0; k < n; k++) {
        struct group *g = &gs[k];
        if (any_ranked && !g->ranked)
            continue;
        if (any_behind) {
            for (size_t m = 0; m < g->n; m++)
                g->waited |= job->procs[g->members[m]].behind;
            *reason = "behind";
        } else if (any_gpu && any_other) {
            g->waited = !g->gpu;
            *reason = "outside";
        }
    }
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && cmp_group(&gs[j], &gs[j - 1]) < 0; j--) {
            struct group x = gs[j];
            gs[j] = gs[j - 1];
            gs[j - 1] = x;
        }
    *ng = n;
    return gs;
}

static void free_groups(struct group *gs, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(gs[k].members);
    free(gs);
}

static int cmp_member(const void *a, const void *b, void *arg)
{
    const struct shp_snap_job *job = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int rx = rank_of(job, x), ry = rank_of(job, y);
    if (rx != ry)
        return rx < ry ? -1 : 1;
    return job->procs[x].pid < job->procs[y].pid ? -1 : job->procs[x].pid > job->procs[y].pid;
}

/* "rank 3", "ranks 0, 1, 2", "ranks 0-7, 9", with pids for processes of no known rank. */
static void members_text(const struct shp_snap_job *job, size_t *m, size_t n, char *out, size_t len)
{
    qsort_r(m, n, sizeof(*m), cmp_member, (void *)job);
    size_t ranked = 0, o = 0;
    while (ranked < n && job->procs[m[ranked]].rank >= 0)
        ranked++;
    if (ranked)
        o += (size_t)snprintf(out + o, len - o, "rank%s ", ranked > 1 ? "s" : "");
    for (size_t i = 0; i < ranked && o < len;) {
        size_t j = i;
        while (j + 1 < ranked && job->procs[m[j + 1]].rank == job->procs[m[j]].rank + 1)
            j++;
        int a = job->procs[m[i]].rank, b = job->procs[m[j]].rank;
        if (j - i >= 3)
            o += (size_t)snprintf(out + o, len - o, "%s%d-%d", i ? ", " : "", a, b);
        else
            for (size_t k = i; k <= j && o < len; k++)
                o += (size_t)snprintf(out + o, len - o, "%s%d", k ? ", " : "",
                                      job->procs[m[k]].rank);
        i = j + 1;
    }
    for (size_t i = ranked; i < n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%spid %d", i ? ", " : "",
                              (int)job->procs[m[i]].pid);
    if (o >= len && len > 4)
        memcpy(out + len - 4, "...", 4);
}

/* "main thread in ncclAllReduce #5 at step (x.c:3)", "main thread in clock_nanosleep (not in a
 * GPU library) after ncclAllReduce #4 at warmup (x.c:9)". */
static void place_text(const struct group *g, char *out, size_t len)
{
    size_t wl = strlen(g->what);
    bool at_it = g->collective && !strncmp(g->pos, g->what, wl) && g->pos[wl] == ' ';
    char pos[96] = "";
    if (at_it)
        snprintf(pos, sizeof(pos), " %s", g->pos + wl + 1);
    else if (g->pos[0])
        snprintf(pos, sizeof(pos), " after %s", g->pos);
    snprintf(out, len, "%s in %s%s%s%s%s", g->who, g->what, g->gpu ? "" : " (not in a GPU library)",
             pos, g->site[0] ? " at " : "", g->site);
}

/* For the headline: a communicator on which process p is behind, its seq there and the highest
 * seq of the others. False when there is none. */
static bool behind_on(const struct shp_snap_job *job, const struct shp_snap_proc *p, uint64_t *comm,
                      uint64_t *mine, uint64_t *theirs)
{
    for (size_t k = 0; k < p->ncomms; k++) {
        const struct shp_snap_comm *c = &p->comms[k];
        uint64_t best = c->seq;
        for (size_t j = 0; j < job->n; j++)
            for (size_t m = 0; m < job->procs[j].ncomms; m++) {
                const struct shp_snap_comm *o = &job->procs[j].comms[m];
                if (o->id == c->id && o->seq != UINT64_MAX && (best == UINT64_MAX || o->seq > best))
                    best = o->seq;
            }
        if (best != c->seq) {
            *comm = c->id;
            *mine = c->seq;
            *theirs = best;
            return true;
        }
    }
    return false;
}

static void print_headline(FILE *f, struct shp_snap_job *job, struct group *gs, size_t ng,
                           const char *reason, const char *red, const char *off)
{
    size_t read = 0, skipped = 0;
    for (size_t i = 0; i < job->n; i++)
        job->procs[i].error ? skipped++ : read++;
    fprintf(f, "shapetrace snapshot: %zu process%s", read, read == 1 ? "" : "es");
    if (skipped)
        fprintf(f, " (%zu skipped)", skipped);
    fprintf(f, ", %zu place%s\n", ng, ng == 1 ? "" : "s");
    size_t *waited = NULL, *others = NULL, nw = 0, no = 0;
    waited = calloc(job->n + 1, sizeof(*waited));
    others = calloc(job->n + 1, sizeof(*others));
    bool any_ranked = false;
    for (size_t k = 0; k < ng; k++)
        any_ranked |= gs[k].ranked;
    /* the others: the ranks that wait (in a GPU library, or further on) */
    for (size_t k = 0; waited && others && k < ng; k++)
        for (size_t m = 0; m < gs[k].n; m++) {
            if (gs[k].waited)
                waited[nw++] = gs[k].members[m];
            else if ((gs[k].ranked || !any_ranked) && (gs[k].gpu || !strcmp(reason, "behind")))
                others[no++] = gs[k].members[m];
        }
    if (nw && no) {
        char a[512], b[512];
        members_text(job, waited, nw, a, sizeof(a));
        members_text(job, others, no, b, sizeof(b));
        uint64_t comm = 0, mine = 0, theirs = 0;
        if (!strcmp(reason, "behind") &&
            behind_on(job, &job->procs[waited[0]], &comm, &mine, &theirs)) {
            char at[64] = "no collective yet";
            if (mine != UINT64_MAX)
                snprintf(at, sizeof(at), "its last collective #%" PRIu64, mine);
            fprintf(f,
                    "%swaiting for %s: behind on communicator %.8" PRIx64 " (%s; others at "
                    "#%" PRIu64 ")%s\n",
                    red, a, comm >> 32, at, theirs, off);
        } else {
            fprintf(f, "%swaiting for %s: not in a GPU library, while %s %s%s\n", red, a, b,
                    no > 1 ? "are" : "is", off);
        }
    }
    free(waited);
    free(others);
}

static void print_thread(FILE *f, const struct shp_snap_proc *p, const struct shp_snap_thread *t,
                         bool stack)
{
    fprintf(f, "  %s %d (%s): ", t->tid == p->pid ? "main thread" : "thread", (int)t->tid,
            t->name[0] ? t->name : "?");
    if (!t->stopped) {
        fprintf(f, "did not stop in time (in the kernel): no stack\n");
        return;
    }
    if (t->in)
        fprintf(f, "in %s", t->in);
    else
        fprintf(f, "in %s (not in a GPU library)", t->waiting ? t->waiting : "?");
    if (t->has_site)
        fprintf(f, " at %s", site_text(t));
    fputc('\n', f);
    for (size_t i = 0; stack && i < t->nframes; i++)
        fprintf(f, "      %s%s\n", t->frames[i], t->has_site && i == t->site ? "   <- site" : "");
}

static void print_process(FILE *f, const struct shp_snap_proc *p, bool full, const char *red,
                          const char *off)
{
    char rank[32] = "";
    if (p->rank >= 0)
        snprintf(rank, sizeof(rank), "rank %d, ", p->rank);
    fprintf(f, "\n%s%spid %d on %s (%s)", p->behind ? red : "", rank, (int)p->pid, p->host,
            p->name[0] ? p->name : "?");
    if (p->error) {
        fprintf(f, ": %s%s\n", p->error, p->behind ? off : "");
        return;
    }
    fprintf(f, ": %zu thread%s, stopped %.1f ms", p->nthreads, p->nthreads == 1 ? "" : "s",
            (double)p->stats.stopped_ns / 1e6);
    if (p->python[0])
        fprintf(f, ", Python %s", p->python);
    fprintf(f, "%s\n", p->behind ? off : "");
    if (p->python_note)
        fprintf(f, "  (%s)\n", p->python_note);
    if (p->late)
        fprintf(f, "  (%u thread%s did not stop within the deadline)\n", p->late,
                p->late == 1 ? "" : "s");
    if (p->trace) {
        fprintf(f, "  trace %s%s:", p->trace, p->dormant ? " (dormant: recording off)" : "");
        for (size_t k = 0; k < p->ncomms; k++) {
            const struct shp_snap_comm *c = &p->comms[k];
            if (c->seq == UINT64_MAX)
                fprintf(f, " %.8" PRIx64 " -", c->id >> 32);
            else
                fprintf(f, " %.8" PRIx64 " #%" PRIu64 " %s%s", c->id >> 32, c->seq, c->op,
                        c->in_flight ? " [in flight]" : "");
        }
        for (size_t k = 0; k < p->ninflight; k++)
            fprintf(f, "%s thread %d in %s", k ? "," : ";", (int)p->inflight[k].tid,
                    p->inflight[k].op);
        fputc('\n', f);
    }
    const struct shp_snap_thread *focus = focus_of(p);
    if (focus)
        print_thread(f, p, focus, true);
    for (size_t k = 0; k < p->nthreads; k++)
        if (&p->threads[k] != focus)
            print_thread(f, p, &p->threads[k], full);
}

void shp_snap_print_text(FILE *f, struct shp_snap_job *job, bool full, bool color)
{
    const char *red = color ? "\033[1;31m" : "", *off = color ? "\033[0m" : "";
    size_t ng;
    const char *reason;
    struct group *gs = make_groups(job, &ng, &reason);
    print_headline(f, job, gs, ng, reason ? reason : "", red, off);
    for (size_t k = 0; k < ng; k++) {
        char who_text[512], place[1024];
        members_text(job, gs[k].members, gs[k].n, who_text, sizeof(who_text));
        place_text(&gs[k], place, sizeof(place));
        fprintf(f, "%s  %s: %s%s\n", gs[k].waited ? red : "", who_text, place,
                gs[k].waited ? off : "");
    }
    for (size_t i = 0; i < job->n; i++)
        print_process(f, &job->procs[i], full, red, off);
    free_groups(gs, ng);
}

/* ---- JSON out ---- */

static void key(struct shp_out *o, const char *k, bool first)
{
    if (!first)
        shp_out_char(o, ',');
    shp_out_json_str(o, k);
    shp_out_char(o, ':');
}

static void int_or_null(struct shp_out *o, long long v)
{
    if (v < 0)
        shp_out_cstr(o, "null");
    else
        shp_out_u64(o, (uint64_t)v);
}

static void seq_or_null(struct shp_out *o, uint64_t v)
{
    if (v == UINT64_MAX)
        shp_out_cstr(o, "null");
    else
        shp_out_u64(o, v);
}

static void comm_id(struct shp_out *o, uint64_t id)
{
    if (!id) {
        shp_out_cstr(o, "null");
        return;
    }
    shp_out_char(o, '"');
    shp_out_hex(o, id, 16);
    shp_out_char(o, '"');
}

static void json_comm(struct shp_out *o, const struct shp_snap_comm *c)
{
    key(o, "id", true);
    comm_id(o, c->id);
    key(o, "seq", false);
    seq_or_null(o, c->seq);
    key(o, "op", false);
    shp_out_json_str(o, c->seq == UINT64_MAX ? NULL : c->op);
    key(o, "in_flight", false);
    shp_out_cstr(o, c->in_flight ? "true" : "false");
}

static void json_trace(struct shp_out *o, const struct shp_snap_proc *p)
{
    if (!p->trace) {
        shp_out_cstr(o, "null");
        return;
    }
    shp_out_char(o, '{');
    key(o, "file", true);
    shp_out_json_str(o, p->trace);
    key(o, "armed", false);
    shp_out_cstr(o, p->dormant ? "false" : "true");
    key(o, "comms", false);
    shp_out_char(o, '[');
    for (size_t k = 0; k < p->ncomms; k++) {
        shp_out_cstr(o, k ? ",{" : "{");
        json_comm(o, &p->comms[k]);
        shp_out_char(o, '}');
    }
    shp_out_char(o, ']');
    key(o, "in_flight", false);
    shp_out_char(o, '[');
    for (size_t k = 0; k < p->ninflight; k++) {
        const struct shp_snap_call *c = &p->inflight[k];
        shp_out_cstr(o, k ? ",{" : "{");
        key(o, "tid", true);
        shp_out_u64(o, (uint64_t)c->tid);
        key(o, "op", false);
        shp_out_json_str(o, c->op);
        key(o, "comm", false);
        comm_id(o, c->comm);
        key(o, "seq", false);
        seq_or_null(o, c->seq);
        shp_out_char(o, '}');
    }
    shp_out_char(o, ']');
    key(o, "last", false);
    if (p->last.seq == UINT64_MAX) {
        shp_out_cstr(o, "null");
    } else {
        shp_out_char(o, '{');
        json_comm(o, &p->last);
        shp_out_char(o, '}');
    }
    shp_out_char(o, '}');
}

static void json_thread(struct shp_out *o, const struct shp_snap_proc *p,
                        const struct shp_snap_thread *t)
{
    shp_out_char(o, '{');
    key(o, "tid", true);
    shp_out_u64(o, (uint64_t)t->tid);
    key(o, "name", false);
    shp_out_json_str(o, t->name);
    key(o, "main", false);
    shp_out_cstr(o, t->tid == p->pid ? "true" : "false");
    key(o, "stopped", false);
    shp_out_cstr(o, t->stopped ? "true" : "false");
    key(o, "in", false);
    shp_out_json_str(o, t->in);
    key(o, "collective", false);
    shp_out_cstr(o, t->collective ? "true" : "false");
    key(o, "waiting_in", false);
    shp_out_json_str(o, t->waiting);
    key(o, "python", false);
    shp_out_cstr(o, t->python ? "true" : "false");
    key(o, "site", false);
    shp_out_json_str(o, t->has_site ? t->frames[t->site] : NULL);
    key(o, "site_index", false);
    int_or_null(o, t->has_site ? (long long)t->site : -1);
    key(o, "stack", false);
    shp_out_char(o, '[');
    for (size_t i = 0; i < t->nframes; i++) {
        if (i)
            shp_out_char(o, ',');
        shp_out_json_str(o, t->frames[i]);
    }
    shp_out_cstr(o, "]}");
}

static void json_stats(struct shp_out *o, const struct shp_snap_stats *s)
{
    const struct {
        const char *name;
        uint64_t v;
    } f[] = {{"prepare_ns", s->prepare_ns}, {"stopped_ns", s->stopped_ns},
             {"unwind_ns", s->unwind_ns},   {"symbols_ns", s->symbols_ns},
             {"trace_ns", s->trace_ns},     {"stack_bytes", s->stack_bytes},
             {"py_reads", s->py_reads}};
    shp_out_char(o, '{');
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        key(o, f[i].name, i == 0);
        shp_out_u64(o, f[i].v);
    }
    shp_out_char(o, '}');
}

static void json_process(struct shp_out *o, const struct shp_snap_proc *p)
{
    shp_out_char(o, '{');
    key(o, "host", true);
    shp_out_json_str(o, p->host);
    key(o, "pid", false);
    shp_out_u64(o, (uint64_t)p->pid);
    key(o, "rank", false);
    int_or_null(o, p->rank);
    key(o, "rank_from", false);
    shp_out_json_str(o, p->rank_from);
    key(o, "local_rank", false);
    int_or_null(o, p->local_rank);
    key(o, "world_size", false);
    int_or_null(o, p->world_size);
    key(o, "name", false);
    shp_out_json_str(o, p->name);
    key(o, "exe", false);
    shp_out_json_str(o, p->exe);
    key(o, "python", false);
    shp_out_json_str(o, p->python[0] ? p->python : NULL);
    key(o, "python_note", false);
    shp_out_json_str(o, p->python_note);
    key(o, "behind", false);
    shp_out_cstr(o, p->behind ? "true" : "false");
    key(o, "late_threads", false);
    shp_out_u64(o, p->late);
    key(o, "focus", false);
    const struct shp_snap_thread *ft = focus_of(p);
    int_or_null(o, ft ? (long long)ft->tid : -1);
    key(o, "trace", false);
    json_trace(o, p);
    key(o, "stats", false);
    json_stats(o, &p->stats);
    key(o, "threads", false);
    shp_out_char(o, '[');
    for (size_t k = 0; k < p->nthreads; k++) {
        if (k)
            shp_out_char(o, ',');
        json_thread(o, p, &p->threads[k]);
    }
    shp_out_cstr(o, "]}");
}

static void json_ranks(struct shp_out *o, const struct shp_snap_job *job, const size_t *m, size_t n,
                       bool pids)
{
    shp_out_char(o, '[');
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        const struct shp_snap_proc *p = &job->procs[m[i]];
        if (!pids && p->rank < 0)
            continue;
        if (!first)
            shp_out_char(o, ',');
        first = false;
        shp_out_u64(o, pids ? (uint64_t)p->pid : (uint64_t)p->rank);
    }
    shp_out_char(o, ']');
}

void shp_snap_print_json(FILE *f, struct shp_snap_job *job)
{
    size_t ng;
    const char *reason;
    struct group *gs = make_groups(job, &ng, &reason);
    struct shp_out *o = malloc(sizeof(*o));
    if (!o) {
        free_groups(gs, ng);
        return;
    }
    shp_out_init(o, f);
    shp_out_char(o, '{');
    key(o, "kind", true);
    shp_out_json_str(o, SNAP_KIND);
    key(o, "version", false);
    shp_out_u64(o, SNAP_VERSION);
    key(o, "t_ns", false);
    shp_out_u64(o, job->t_ns);
    key(o, "groups", false);
    shp_out_char(o, '[');
    for (size_t k = 0; k < ng; k++) {
        struct group *g = &gs[k];
        qsort_r(g->members, g->n, sizeof(*g->members), cmp_member, job);
        char place[1024];
        place_text(g, place, sizeof(place));
        shp_out_cstr(o, k ? ",{" : "{");
        key(o, "ranks", true);
        json_ranks(o, job, g->members, g->n, false);
        key(o, "pids", false);
        json_ranks(o, job, g->members, g->n, true);
        key(o, "thread", false);
        shp_out_json_str(o, g->who);
        key(o, "in", false);
        shp_out_json_str(o, g->what);
        key(o, "gpu", false);
        shp_out_cstr(o, g->gpu ? "true" : "false");
        key(o, "collective", false);
        shp_out_cstr(o, g->collective ? "true" : "false");
        key(o, "site", false);
        shp_out_json_str(o, g->site[0] ? g->site : NULL);
        key(o, "position", false);
        shp_out_json_str(o, g->pos[0] ? g->pos : NULL);
        key(o, "waited_for", false);
        shp_out_cstr(o, g->waited ? "true" : "false");
        key(o, "why", false);
        shp_out_json_str(o, !g->waited                  ? NULL
                            : !strcmp(reason, "behind") ? "behind on a communicator"
                                                        : "not in a GPU library while others are");
        key(o, "text", false);
        shp_out_json_str(o, place);
        shp_out_char(o, '}');
    }
    shp_out_char(o, ']');
    key(o, "processes", false);
    shp_out_char(o, '[');
    bool first = true;
    for (size_t i = 0; i < job->n; i++) {
        if (job->procs[i].error)
            continue;
        if (!first)
            shp_out_char(o, ',');
        first = false;
        json_process(o, &job->procs[i]);
    }
    shp_out_char(o, ']');
    key(o, "skipped", false);
    shp_out_char(o, '[');
    first = true;
    for (size_t i = 0; i < job->n; i++) {
        const struct shp_snap_proc *p = &job->procs[i];
        if (!p->error)
            continue;
        shp_out_cstr(o, first ? "{" : ",{");
        first = false;
        key(o, "host", true);
        shp_out_json_str(o, p->host);
        key(o, "pid", false);
        shp_out_u64(o, (uint64_t)p->pid);
        key(o, "exited", false);
        shp_out_cstr(o, p->gone ? "true" : "false");
        key(o, "why", false);
        shp_out_json_str(o, p->error);
        shp_out_char(o, '}');
    }
    shp_out_cstr(o, "]}\n");
    shp_out_flush(o);
    free(o);
    free_groups(gs, ng);
}

/* ---- JSON in (--merge) ---- */

struct loader {
    const char *path;
    char *err;
    size_t errlen;
    bool bad;
};

static void bad(struct loader *L, const char *where, const char *what)
{
    if (!L->bad)
        snprintf(L->err, L->errlen, "%s: %s %s", L->path, where, what);
    L->bad = true;
}

static char *get_str(struct loader *L, json_t *o, const char *k, const char *where)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_string(v)) {
        char w[WHERE_MAX + 64];
        snprintf(w, sizeof(w), "%s.%s", where, k);
        bad(L, w, "is not a string");
        return NULL;
    }
    char *copy = strdup(json_string_value(v));
    shp_snap_scrub(copy);
    return copy;
}

static void get_buf(struct loader *L, json_t *o, const char *k, const char *where, char *out,
                    size_t len)
{
    char *s = get_str(L, o, k, where);
    snprintf(out, len, "%s", s ? s : "");
    free(s);
}

/* An integer in [lo, hi], dflt when absent or null. */
static long long get_int(struct loader *L, json_t *o, const char *k, const char *where,
                         long long lo, long long hi, long long dflt)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char w[WHERE_MAX + 64];
        snprintf(w, sizeof(w), "%s.%s", where, k);
        bad(L, w, "is not a number in range");
        return dflt;
    }
    return json_integer_value(v);
}

static bool get_bool(json_t *o, const char *k)
{
    return json_is_true(json_object_get(o, k));
}

static uint64_t get_comm_id(struct loader *L, json_t *o, const char *k, const char *where)
{
    char *s = get_str(L, o, k, where);
    char *end = NULL;
    uint64_t id = s ? strtoull(s, &end, 16) : 0;
    if (s && (*end || !*s)) {
        char w[WHERE_MAX + 64];
        snprintf(w, sizeof(w), "%s.%s", where, k);
        bad(L, w, "is not a communicator id");
    }
    free(s);
    return id;
}

static void load_comm(struct loader *L, json_t *o, const char *where, struct shp_snap_comm *c)
{
    c->id = get_comm_id(L, o, "id", where);
    c->seq = (uint64_t)get_int(L, o, "seq", where, 0, INT64_MAX, -1);
    get_buf(L, o, "op", where, c->op, sizeof(c->op));
    c->in_flight = get_bool(o, "in_flight");
}

static json_t *get_array(struct loader *L, json_t *o, const char *k, const char *where)
{
    json_t *v = json_object_get(o, k);
    if (v && !json_is_array(v)) {
        char w[WHERE_MAX + 64];
        snprintf(w, sizeof(w), "%s.%s", where, k);
        bad(L, w, "is not an array");
        return NULL;
    }
    return v;
}

static void load_trace(struct loader *L, json_t *tr, const char *where, struct shp_snap_proc *p)
{
    if (!tr || json_is_null(tr))
        return;
    if (!json_is_object(tr)) {
        bad(L, where, "trace is not an object");
        return;
    }
    p->trace = get_str(L, tr, "file", where);
    if (!p->trace)
        p->trace = strdup("?");
    json_t *armed = json_object_get(tr, "armed");
    p->dormant = armed && json_is_false(armed);
    json_t *a = get_array(L, tr, "comms", where);
    size_t n = a ? json_array_size(a) : 0;
    p->comms = calloc(n + 1, sizeof(*p->comms));
    for (size_t i = 0; p->comms && i < n; i++) {
        char w[WHERE_MAX];
        snprintf(w, sizeof(w), "%.96s.trace.comms[%zu]", where, i);
        load_comm(L, json_array_get(a, i), w, &p->comms[p->ncomms++]);
    }
    a = get_array(L, tr, "in_flight", where);
    n = a ? json_array_size(a) : 0;
    p->inflight = calloc(n + 1, sizeof(*p->inflight));
    for (size_t i = 0; p->inflight && i < n; i++) {
        char w[WHERE_MAX];
        json_t *c = json_array_get(a, i);
        struct shp_snap_call *call = &p->inflight[p->ninflight++];
        snprintf(w, sizeof(w), "%.96s.trace.in_flight[%zu]", where, i);
        call->tid = (pid_t)get_int(L, c, "tid", w, 0, INT32_MAX, 0);
        get_buf(L, c, "op", w, call->op, sizeof(call->op));
        call->comm = get_comm_id(L, c, "comm", w);
        call->seq = (uint64_t)get_int(L, c, "seq", w, 0, INT64_MAX, -1);
    }
    json_t *last = json_object_get(tr, "last");
    if (last && json_is_object(last))
        load_comm(L, last, where, &p->last);
}

static void load_thread(struct loader *L, json_t *o, const char *where, struct shp_snap_thread *t)
{
    t->tid = (pid_t)get_int(L, o, "tid", where, 1, INT32_MAX, 0);
    get_buf(L, o, "name", where, t->name, sizeof(t->name));
    t->stopped = get_bool(o, "stopped");
    t->in = get_str(L, o, "in", where);
    t->collective = get_bool(o, "collective");
    t->waiting = get_str(L, o, "waiting_in", where);
    t->python = get_bool(o, "python");
    json_t *st = get_array(L, o, "stack", where);
    size_t n = st ? json_array_size(st) : 0;
    t->frames = calloc(n + 1, sizeof(*t->frames));
    for (size_t i = 0; t->frames && i < n; i++) {
        json_t *fr = json_array_get(st, i);
        t->frames[t->nframes] = strdup(json_is_string(fr) ? json_string_value(fr) : "?");
        shp_snap_scrub(t->frames[t->nframes++]);
    }
    long long site = get_int(L, o, "site_index", where, 0, (long long)n - 1, -1);
    t->has_site = site >= 0;
    t->site = t->has_site ? (size_t)site : 0;
}

static void load_process(struct loader *L, json_t *o, const char *where, struct shp_snap_proc *p)
{
    get_buf(L, o, "host", where, p->host, sizeof(p->host));
    p->pid = (pid_t)get_int(L, o, "pid", where, 1, INT32_MAX, 0);
    if (!p->pid)
        bad(L, where, "has no pid");
    p->rank = (int)get_int(L, o, "rank", where, 0, INT32_MAX, -1);
    char *from = get_str(L, o, "rank_from", where);
    p->rank_from = !from ? NULL : !strcmp(from, "env") ? "env" : "trace";
    free(from);
    p->local_rank = (int)get_int(L, o, "local_rank", where, 0, INT32_MAX, -1);
    p->world_size = (int)get_int(L, o, "world_size", where, 0, INT32_MAX, -1);
    get_buf(L, o, "name", where, p->name, sizeof(p->name));
    p->exe = get_str(L, o, "exe", where);
    get_buf(L, o, "python", where, p->python, sizeof(p->python));
    p->python_note = get_str(L, o, "python_note", where);
    p->late = (unsigned)get_int(L, o, "late_threads", where, 0, INT32_MAX, 0);
    load_trace(L, json_object_get(o, "trace"), where, p);
    json_t *s = json_object_get(o, "stats");
    if (s && json_is_object(s)) {
        p->stats.stopped_ns = (uint64_t)get_int(L, s, "stopped_ns", where, 0, INT64_MAX, 0);
        p->stats.stack_bytes = (uint64_t)get_int(L, s, "stack_bytes", where, 0, INT64_MAX, 0);
    }
    json_t *th = get_array(L, o, "threads", where);
    size_t n = th ? json_array_size(th) : 0;
    p->threads = calloc(n + 1, sizeof(*p->threads));
    long long focus = get_int(L, o, "focus", where, 0, INT32_MAX, -1);
    for (size_t i = 0; p->threads && i < n && !L->bad; i++) {
        char w[WHERE_MAX];
        snprintf(w, sizeof(w), "%.96s.threads[%zu]", where, i);
        json_t *t = json_array_get(th, i);
        if (!json_is_object(t)) {
            bad(L, w, "is not an object");
            break;
        }
        load_thread(L, t, w, &p->threads[p->nthreads]);
        if (p->threads[p->nthreads].tid == focus)
            p->focus = p->nthreads;
        p->nthreads++;
    }
    if (focus < 0)
        p->focus = shp_snap_focus(p);
}

static json_t *read_json(const char *path, char *err, size_t errlen, int *rc)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        FILE *f = fopen(path, "re");
        if (!f) {
            *rc = -errno;
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return NULL;
        }
        fclose(f);
        snprintf(err, errlen, "%s: not JSON (line %d: %s)", path, je.line, je.text);
        *rc = -EINVAL;
    }
    return root;
}

int shp_snap_load_json(struct shp_snap_job *job, const char *path, char *err, size_t errlen)
{
    int rc = 0;
    json_t *root = read_json(path, err, errlen, &rc);
    if (!root)
        return rc;
    struct loader L = {.path = path, .err = err, .errlen = errlen};
    json_t *kind = json_is_object(root) ? json_object_get(root, "kind") : NULL;
    if (!kind || !json_is_string(kind) || strcmp(json_string_value(kind), SNAP_KIND) != 0) {
        snprintf(err, errlen, "%s: not a snapshot file (no \"kind\": \"%s\")", path, SNAP_KIND);
        json_decref(root);
        return -EINVAL;
    }
    uint64_t t = (uint64_t)get_int(&L, root, "t_ns", "the file's", 0, INT64_MAX, 0);
    if (t && (!job->t_ns || t < job->t_ns))
        job->t_ns = t;
    size_t first = job->n;
    const char *lists[] = {"processes", "skipped"};
    for (int l = 0; l < 2 && !L.bad; l++) {
        json_t *a = get_array(&L, root, lists[l], "the file's");
        for (size_t i = 0; a && i < json_array_size(a) && !L.bad; i++) {
            char w[WHERE_MAX];
            snprintf(w, sizeof(w), "%s[%zu]", lists[l], i);
            json_t *o = json_array_get(a, i);
            struct shp_snap_proc *p = json_is_object(o) ? shp_snap_job_add(job) : NULL;
            if (!p) {
                bad(&L, w,
                    json_is_object(o) ? "cannot be held (out of memory)" : "is not an object");
                break;
            }
            if (l == 0) {
                load_process(&L, o, w, p);
            } else {
                get_buf(&L, o, "host", w, p->host, sizeof(p->host));
                p->pid = (pid_t)get_int(&L, o, "pid", w, 1, INT32_MAX, 0);
                p->error = get_str(&L, o, "why", w);
                if (!p->error)
                    p->error = strdup("skipped");
                p->gone = get_bool(o, "exited");
            }
        }
    }
    json_decref(root);
    if (L.bad) {
        /* Nothing of a bad file is kept. */
        for (size_t i = first; i < job->n; i++)
            free_proc(&job->procs[i]);
        job->n = first;
        return -EINVAL;
    }
    return 0;
}
