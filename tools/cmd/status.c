/* shapetrace status: which rank is where, while the job runs. Reads the trace files as they are
 * written (shared mappings of the page cache, so a record is visible as soon as it is stored)
 * and never touches the processes; --watch redraws and reads only what was added since. */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "tools/cmd/cmd.h"
#include "tools/lib/event.h"
#include "tools/lib/out.h"
#include "tools/lib/reader.h"
#include "tools/lib/session.h"

struct comm_pos {
    uint64_t id;
    uint64_t seq;
    unsigned op;
    bool in_flight;
};

/* What status follows of one process, beside the session's description of it (the same index
 * in the session's procs). */
struct proc {
    uint64_t off; /* where the next read resumes */
    uint64_t events, torn;
    uint64_t last_t_ns; /* monotonic, the writer's clock */
    unsigned last_op;
    bool last_in_flight;
    bool exited, alive_known, alive, execd, behind;
    char last_mark[128];
    struct comm_pos *comms;
    size_t ncomms;
};

static void status_usage(FILE *f)
{
    fputs("usage: shapetrace status [--json] [--watch [SECONDS]] RUN_DIR\n"
          "\n"
          "Per process: rank, whether it is alive, seconds since its last call, its last call,\n"
          "and per communicator the last collective it entered (seq, op). A rank whose seq on a\n"
          "communicator is lower than another member's is BEHIND.\n"
          "  --json           one JSON object (keys in docs/CONTRACTS.md)\n"
          "  --watch [S]      refresh every S seconds (default 1) until interrupted or\n"
          "                   every process exited; piped, one block per refresh\n",
          f);
}

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct comm_pos *comm_of(struct proc *p, uint64_t id)
{
    for (size_t i = 0; i < p->ncomms; i++)
        if (p->comms[i].id == id)
            return &p->comms[i];
    struct comm_pos *n = realloc(p->comms, (p->ncomms + 1) * sizeof(*n));
    if (!n)
        return NULL;
    p->comms = n;
    n[p->ncomms] = (struct comm_pos){.id = id, .seq = SHP_NONE};
    return &n[p->ncomms++];
}

static bool same_host(const char *host)
{
    char me[64] = "";
    gethostname(me, sizeof(me) - 1);
    return !strcmp(me, host);
}

/* Read what was added to sp's trace since the last call. */
static void refresh(struct proc *p, struct shp_proc *sp)
{
    const struct shp_trace *t = &sp->t;
    const struct shp_file_header *h = t->hdr;
    p->exited = h->flags & SHP_FILE_COMPLETE;
    p->alive_known = same_host(h->host);
    /* A pid alive is this process only if it started before the trace; after an exec, the pid
     * is the new image's, which has a trace of its own. */
    enum shp_fate fate = p->exited ? SHP_FATE_EXITED : shp_proc_fate(sp);
    p->execd = fate == SHP_FATE_EXECD;
    p->alive = !p->exited && !p->execd && (!p->alive_known || fate == SHP_FATE_RUNNING);
    /* A process still writing may have records half-stored at the end: stop before them. */
    struct shp_cursor cur = {.off = p->off, .live = p->alive};
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    while ((r = shp_trace_next(t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(t, r, type, &e))
            continue;
        p->events++;
        if (e.mark) {
            snprintf(p->last_mark, sizeof(p->last_mark), "%s", e.mark);
            continue;
        }
        p->last_t_ns = e.t_ns - h->realtime_ns + h->monotonic_ns; /* from wall to monotonic */
        p->last_op = e.op;
        p->last_in_flight = e.dur_ns == SHP_NONE;
        if (type == SHP_REC_COLL) {
            struct comm_pos *c = comm_of(p, e.comm);
            if (c) {
                c->seq = e.seq;
                c->op = e.op;
                c->in_flight = e.dur_ns == SHP_NONE;
            }
        } else if (type == SHP_REC_COMM && e.comm_kind <= SHP_COMM_SHRINK) {
            comm_of(p, e.comm);
        }
    }
    p->off = cur.off;
    p->torn += cur.torn;
    /* What the walks found so far is the session's description: one rule of completeness. */
    struct shp_cursor all = {.off = cur.off, .torn = p->torn};
    shp_proc_walked(sp, &all, p->events);
}

static double idle_s(const struct proc *p, const struct shp_proc *sp)
{
    const struct shp_file_header *h = sp->t.hdr;
    uint64_t last = p->last_t_ns ? p->last_t_ns : h->monotonic_ns;
    if (p->alive_known) {
        uint64_t now = clock_ns(CLOCK_MONOTONIC);
        return now > last ? (double)(now - last) / 1e9 : 0;
    }
    uint64_t wall = h->realtime_ns + (last - h->monotonic_ns), now = clock_ns(CLOCK_REALTIME);
    return now > wall ? (double)(now - wall) / 1e9 : 0;
}

static void mark_behind(struct proc *ps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ps[i].behind = false;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < ps[i].ncomms; k++) {
            const struct comm_pos *c = &ps[i].comms[k];
            uint64_t mine = c->seq == SHP_NONE ? 0 : c->seq + 1;
            for (size_t j = 0; j < n && !ps[i].behind; j++) {
                for (size_t m = 0; m < ps[j].ncomms; m++) {
                    const struct comm_pos *o = &ps[j].comms[m];
                    if (o->id == c->id && o->seq != SHP_NONE && o->seq + 1 > mine) {
                        ps[i].behind = true;
                        break;
                    }
                }
            }
        }
    }
}

static void print_json(const struct shp_session *s, struct proc *ps)
{
    fputs("{\"processes\":[", stdout);
    for (size_t i = 0; i < s->nprocs; i++) {
        struct proc *p = &ps[i];
        const struct shp_proc *sp = &s->procs[i];
        if (i)
            fputc(',', stdout);
        fputs("{\"file\":", stdout);
        shp_json_str(stdout, sp->t.path);
        fputs(",\"host\":", stdout);
        shp_json_str(stdout, sp->t.hdr->host);
        fprintf(stdout, ",\"pid\":%" PRIu64 ",\"rank\":", sp->t.hdr->pid);
        if (sp->rank >= 0)
            fprintf(stdout, "%d", sp->rank);
        else
            fputs("null", stdout);
        fprintf(stdout, ",\"alive\":%s,\"idle_s\":%.3f,\"comms\":[",
                p->alive_known || p->exited || p->execd ? (p->alive ? "true" : "false") : "null",
                idle_s(p, sp));
        for (size_t k = 0; k < p->ncomms; k++) {
            const struct comm_pos *c = &p->comms[k];
            fprintf(stdout, "%s{\"id\":\"%016" PRIx64 "\",\"seq\":", k ? "," : "", c->id);
            if (c->seq == SHP_NONE)
                fputs("null,\"op\":null", stdout);
            else
                fprintf(stdout, "%" PRIu64 ",\"op\":\"%s\",\"in_flight\":%s", c->seq,
                        shp_op_name(c->op), c->in_flight ? "true" : "false");
            fputc('}', stdout);
        }
        fprintf(stdout, "],\"behind\":%s,\"complete\":%s,\"events\":%" PRIu64 ",\"last_op\":",
                p->behind ? "true" : "false", shp_proc_complete(sp) ? "true" : "false", p->events);
        shp_json_str(stdout, p->last_op ? shp_op_name(p->last_op) : NULL);
        fprintf(stdout, ",\"in_flight\":%s,\"mark\":", p->last_in_flight ? "true" : "false");
        shp_json_str(stdout, p->last_mark[0] ? p->last_mark : NULL);
        fputc('}', stdout);
    }
    fputs("]", stdout);
    /* Files of the run directory that are not readable traces: the list is partial. */
    if (s->nunreadable) {
        fputs(",\"unreadable\":[", stdout);
        for (size_t i = 0; i < s->nunreadable; i++) {
            fputs(i ? ",{\"file\":" : "{\"file\":", stdout);
            shp_json_str(stdout, s->unreadable[i].file);
            fputs(",\"error\":", stdout);
            shp_json_str(stdout, s->unreadable[i].why);
            fputc('}', stdout);
        }
        fputs("]", stdout);
    }
    fputs("}\n", stdout);
}

static void print_table(const char *dir, const struct shp_session *s, struct proc *ps, bool color)
{
    const char *red = color ? "\033[1;31m" : "", *off = color ? "\033[0m" : "";
    size_t behind = 0, n = s->nprocs;
    for (size_t i = 0; i < n; i++)
        behind += ps[i].behind;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char when[16], unreadable[48] = "";
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    if (s->nunreadable)
        snprintf(unreadable, sizeof(unreadable), ", %zu file%s unreadable", s->nunreadable,
                 s->nunreadable == 1 ? "" : "s");
    printf("shapetrace status  %s  %zu process%s, %zu behind%s  %s\n", dir, n, n == 1 ? "" : "es",
           behind, unreadable, when);
    printf("%5s  %-24s %-5s %8s  %-34s %s\n", "rank", "host:pid", "alive", "idle(s)", "last call",
           "communicator: seq op");
    for (size_t i = 0; i < n; i++) {
        struct proc *p = &ps[i];
        const struct shp_proc *sp = &s->procs[i];
        char who[96], last[64], rank[16];
        snprintf(who, sizeof(who), "%s:%" PRIu64, sp->t.hdr->host, sp->t.hdr->pid);
        snprintf(last, sizeof(last), "%s%s", p->last_op ? shp_op_name(p->last_op) : "-",
                 p->last_in_flight ? " [in flight]" : "");
        if (sp->rank >= 0)
            snprintf(rank, sizeof(rank), "%d", sp->rank);
        else
            snprintf(rank, sizeof(rank), "?");
        printf("%s%5s  %-24s %-5s %8.1f  %-34s", p->behind ? red : "", rank, who,
               p->exited         ? "exit"
               : p->execd        ? "exec"
               : !p->alive_known ? "?"
               : p->alive        ? "yes"
                                 : "DEAD",
               idle_s(p, sp), last);
        for (size_t k = 0; k < p->ncomms; k++) {
            const struct comm_pos *c = &p->comms[k];
            if (c->seq == SHP_NONE)
                printf(" %.8" PRIx64 ": -", c->id >> 32);
            else
                printf(" %.8" PRIx64 ": %" PRIu64 " %s", c->id >> 32, c->seq, shp_op_name(c->op));
        }
        printf("%s%s%s\n", p->behind ? "  BEHIND" : "", p->last_mark[0] ? "  mark: " : "",
               p->last_mark);
        if (p->behind)
            fputs(off, stdout);
    }
    fflush(stdout);
}

static volatile sig_atomic_t stop;
static void on_int(int sig)
{
    (void)sig;
    stop = 1;
}

/* A positive number of seconds, the whole of text. */
static bool seconds(const char *text, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !(v > 0) || v > 86400)
        return false;
    *out = v;
    return true;
}

/* A copy of argv, of *argc entries, where "--watch S" is "--watch=S" (the documented form:
 * getopt takes an optional value only after '='), when S is a number and another argument is
 * left for RUN_DIR, so that a run directory named "2" still reads as one. joined holds the new
 * argument. NULL when out of memory. */
static char **watch_seconds_joined(int *argc, char **argv, char *joined, size_t len)
{
    char **v = calloc((size_t)*argc + 1, sizeof(*v));
    if (!v)
        return NULL;
    int nonopts = 0, k = 0;
    for (int i = 1; i < *argc && strcmp(argv[i], "--"); i++)
        nonopts += argv[i][0] != '-';
    bool done = false;
    for (int i = 0; i < *argc; i++) {
        double sec;
        done |= !strcmp(argv[i], "--");
        if (!done && i + 1 < *argc && !strcmp(argv[i], "--watch") && nonopts >= 2 &&
            seconds(argv[i + 1], &sec)) {
            snprintf(joined, len, "--watch=%s", argv[++i]);
            v[k++] = joined;
            done = true;
            continue;
        }
        v[k++] = argv[i];
    }
    *argc = k;
    return v;
}

int shp_cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},
        {"watch", optional_argument, 0, 'w'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    bool json = false;
    double watch = 0;
    int c;
    char joined[64];
    char **args = watch_seconds_joined(&argc, argv, joined, sizeof(joined));
    if (!args)
        return SHP_EXIT_USAGE;
    argv = args;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
        } else if (c == 'w') {
            watch = 1.0;
            if (optarg && !seconds(optarg, &watch)) {
                free(args);
                return shp_usage_error("status", "--watch takes a positive number of seconds");
            }
        } else if (c == 'h') {
            status_usage(stdout);
            free(args);
            return SHP_EXIT_OK;
        } else {
            c = shp_bad_option("status", argc, argv, "h", opts);
            free(args);
            return c;
        }
    }
    if (optind != argc - 1) {
        free(args);
        return shp_usage_error("status", "give one RUN_DIR");
    }
    const char *dir = argv[optind];
    bool color = !json && isatty(1) && !getenv("NO_COLOR");
    struct shp_session s;
    memset(&s, 0, sizeof(s));
    struct proc *ps = NULL;
    size_t n = 0, cap = 0;
    bool opened = false;
    signal(SIGINT, on_int);
    int status = SHP_EXIT_OK;
    unsigned refreshes = 0;
    do {
        /* Opened once, then looked at again: what the writers appended, new traces, and a file
         * being created, which joins once it is a readable trace. */
        int rc = opened ? shp_session_update(&s)
                        : shp_session_open(&s, &argv[optind], 1,
                                           SHP_SESSION_EMPTY | SHP_SESSION_RAW, "the status");
        if (rc < 0) {
            status = SHP_EXIT_USAGE;
            break;
        }
        opened = true;
        if (s.nprocs == 0 && n == 0) {
            if (s.nunreadable)
                shp_err("no readable trace in %s (yet)", dir);
            else
                shp_err("%s: no traces in it (yet)", dir);
            status = SHP_EXIT_USAGE;
            if (!watch)
                break;
        }
        for (; n < s.nprocs && shp_grow((void **)&ps, &cap, n, sizeof(*ps)); n++)
            ps[n] = (struct proc){0};
        for (size_t i = 0; i < n; i++)
            refresh(&ps[i], &s.procs[i]);
        mark_behind(ps, n);
        if (n) {
            /* Piped, each refresh is one more block: escapes would only garble a log. */
            if (watch && !json && isatty(1))
                fputs("\033[H\033[2J", stdout);
            else if (watch && !json && refreshes)
                fputs("\n", stdout);
            if (json)
                print_json(&s, ps);
            else
                print_table(dir, &s, ps, color);
            fflush(stdout);
            refreshes++;
        }
        bool all_exited = n > 0;
        for (size_t i = 0; i < n; i++)
            all_exited &= !ps[i].alive;
        if (watch && all_exited)
            break; /* nothing more will change */
        if (watch)
            usleep((useconds_t)(watch * 1e6));
    } while (watch && !stop);
    for (size_t i = 0; i < n; i++)
        free(ps[i].comms);
    free(ps);
    shp_session_close(&s);
    free(args);
    return status;
}
