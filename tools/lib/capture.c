/* shapetrace tools: one process's picture for shapetrace snapshot (snapshot.h). In three phases,
 * so that each process is stopped only while its registers, stacks and Python frames are
 * copied: what needs no stop is read first, for every process; then each is stopped, copied and
 * let go in turn (the pictures of a hung job are then milliseconds apart); then the copies are
 * unwound, symbolized and merged, and the traces read, while every process runs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "include/shapetrace/env.h"
#include "tools/lib/event.h"
#include "tools/lib/out.h"
#include "tools/lib/ptrace.h"
#include "tools/lib/pyremote.h"
#include "tools/lib/reader.h"
#include "tools/lib/site.h"
#include "tools/lib/snapshot.h"
#include "tools/lib/stacks.h"
#include "tools/lib/symbolize.h"
#include "tools/lib/unwind.h"

#define STACK_COPY_MAX (512u << 10) /* bytes of one thread's stack copied while stopped */
#define MAX_FRAMES 512              /* native frames unwound per thread */
#define MODULE_SPACE (1ull << 35)   /* the room each module takes in the shared symbolizer */
#define MAX_SLOTS 4000              /* modules that fit below 2^47 */

/* One module file as the shared symbolizer knows it. */
struct slot {
    char *path;
    uint8_t build_id[64];
    size_t build_id_len;
    uint64_t dev, ino;
    uint64_t base;                /* its load bias in the shared symbolizer */
    struct shp_symbolizer *alone; /* a non-PIE executable: at its own addresses, by itself */
};

struct shp_snap_ctx {
    const struct shp_site_rule *rule;
    struct shp_symbolizer *sym;
    struct slot *slots;
    size_t nslots, capslots;
};

struct shp_snap_ctx *shp_snap_ctx_new(const struct shp_site_rule *rule)
{
    struct shp_snap_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->rule = rule;
    c->sym = shp_symbolizer_new();
    if (!c->sym) {
        free(c);
        return NULL;
    }
    return c;
}

void shp_snap_ctx_free(struct shp_snap_ctx *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nslots; i++) {
        free(c->slots[i].path);
        shp_symbolizer_free(c->slots[i].alone);
    }
    free(c->slots);
    shp_symbolizer_free(c->sym);
    free(c);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The slot of module m, made (and registered) on first sight; NULL when out of room. */
static struct slot *slot_of(struct shp_snap_ctx *c, const struct shp_module_info *m)
{
    size_t blen = m->build_id_len <= 64 ? m->build_id_len : 0;
    for (size_t i = 0; i < c->nslots; i++) {
        struct slot *s = &c->slots[i];
        if (s->dev == m->dev && s->ino == m->ino && s->build_id_len == blen &&
            !memcmp(s->build_id, m->build_id, blen) && !strcmp(s->path, m->path))
            return s;
    }
    if (c->nslots >= MAX_SLOTS ||
        !shp_grow((void **)&c->slots, &c->capslots, c->nslots, sizeof(*c->slots)))
        return NULL;
    struct slot *s = &c->slots[c->nslots];
    *s = (struct slot){.path = strdup(m->path), .build_id_len = blen, .dev = m->dev, .ino = m->ino};
    if (!s->path)
        return NULL;
    memcpy(s->build_id, m->build_id, blen);
    const uint8_t *bid = blen ? s->build_id : NULL;
    if (m->bias == 0) {
        /* A non-PIE executable: libdwfl places it at its link address whatever bias it is
         * given, and two of them may share that address, so each gets a symbolizer. */
        s->alone = shp_symbolizer_new();
        if (!s->alone ||
            shp_symbolizer_add_module(s->alone, m->path, 0, m->lo, m->hi, bid, blen) < 0) {
            shp_symbolizer_free(s->alone);
            free(s->path);
            return NULL;
        }
    } else {
        s->base = (c->nslots + 1) * MODULE_SPACE;
        if (m->hi - m->lo >= MODULE_SPACE ||
            shp_symbolizer_add_module(c->sym, m->path, s->base, s->base + (m->lo - m->bias),
                                      s->base + (m->hi - m->bias), bid, blen) < 0) {
            free(s->path);
            return NULL;
        }
    }
    c->nslots++;
    return s;
}

/* The text of one frame (malloc'd) and the path of its module (the slot's, or NULL). */
static char *frame_text(struct shp_snap_ctx *c, struct shp_unwinder *u, uint64_t pc, bool ret,
                        const char **path)
{
    struct shp_module_info m;
    char buf[1024];
    *path = NULL;
    if (shp_unwinder_vdso_frame(u, pc, ret, buf, sizeof(buf))) {
        *path = SHP_VDSO_MODULE;
        return strdup(buf);
    }
    struct slot *s = shp_unwinder_module(u, ret && pc ? pc - 1 : pc, &m) ? slot_of(c, &m) : NULL;
    if (!s) {
        snprintf(buf, sizeof(buf), "0x%" PRIx64, pc);
        return strdup(buf);
    }
    *path = s->path;
    if (s->alone)
        shp_symbolize(s->alone, pc, ret, buf, sizeof(buf));
    else
        shp_symbolize(c->sym, pc - m.bias + s->base, ret, buf, sizeof(buf));
    return shp_frame_demangle(buf);
}

/* ---- what needs no stop ---- */

/* The whole of a small /proc file (NUL-terminated, *len its length), or NULL. */
static char *slurp(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static void read_line_file(const char *path, char *out, size_t len)
{
    char *s = slurp(path, len - 1, NULL);
    snprintf(out, len, "%s", s ? s : "");
    out[strcspn(out, "\n")] = '\0';
    free(s);
}

/* An integer environment value, -1 when absent or not one. */
static int env_int(const char *env, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < len; i += strlen(env + i) + 1) {
        if (!strncmp(env + i, name, nl) && env[i + nl] == '=') {
            char *end;
            long v = strtol(env + i + nl + 1, &end, 10);
            return end == env + i + nl + 1 || *end || v < 0 || v > INT32_MAX ? -1 : (int)v;
        }
    }
    return -1;
}

static const char *env_str(const char *env, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < len; i += strlen(env + i) + 1)
        if (!strncmp(env + i, name, nl) && env[i + nl] == '=')
            return env + i + nl + 1;
    return NULL;
}

/* One process between the phases. */
struct live {
    struct shp_snap_proc *out;
    struct shp_unwinder *u;
    struct shp_py_proc py;
    struct shp_pt_proc pt;
    struct shp_thread_image *img; /* one per pt.t */
    char trace_dir[PATH_MAX];     /* SHAPETRACE_DIR, expanded, when set */
};

static void fail(struct live *l, int e, const char *why)
{
    struct shp_snap_proc *p = l->out;
    if (!p->error)
        p->error = strdup(why);
    p->gone |= e == ESRCH;
}

/* SHAPETRACE_DIR with %h, %p and %r expanded as the preload expands them, relative to the
 * process's working directory. */
static void expand_dir(struct live *l, const char *pat)
{
    char out[PATH_MAX], buf[32];
    size_t n = 0;
    if (pat[0] != '/')
        n = (size_t)snprintf(out, sizeof(out), "/proc/%d/cwd/", (int)l->out->pid);
    for (const char *p = pat; *p && n + 1 < sizeof(out); p++) {
        const char *ins = NULL;
        if (*p == '%' && (p[1] == 'h' || p[1] == 'p' || p[1] == 'r' || p[1] == '%')) {
            p++;
            if (*p == 'h')
                ins = l->out->host;
            else if (*p == 'p')
                snprintf(buf, sizeof(buf), "%d", (int)l->out->pid), ins = buf;
            else if (*p == 'r')
                ins =
                    l->out->rank >= 0 ? (snprintf(buf, sizeof(buf), "%d", l->out->rank), buf) : "x";
            else
                ins = "%";
            size_t m = strlen(ins);
            if (n + m >= sizeof(out))
                break;
            memcpy(out + n, ins, m);
            n += m;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
    snprintf(l->trace_dir, sizeof(l->trace_dir), "%s", out);
}

static void prepare(struct shp_snap_ctx *c, struct live *l)
{
    (void)c;
    struct shp_snap_proc *p = l->out;
    char path[64], err[256];
    uint64_t t0 = now_ns();
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)p->pid);
    read_line_file(path, p->name, sizeof(p->name));
    shp_snap_scrub(p->name);
    char exe[PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)p->pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    p->exe = strdup(exe);
    shp_snap_scrub(p->exe);
    size_t elen = 0;
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)p->pid);
    char *env = slurp(path, 1u << 20, &elen);
    if (env) {
        static const char *const ranks[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                            "SLURM_PROCID"};
        for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]) && p->rank < 0; i++)
            p->rank = env_int(env, elen, ranks[i]);
        if (p->rank >= 0)
            p->rank_from = "env";
        p->local_rank = env_int(env, elen, "LOCAL_RANK");
        p->world_size = env_int(env, elen, "WORLD_SIZE");
        const char *dir = env_str(env, elen, SHP_ENV_DIR);
        if (dir && *dir)
            expand_dir(l, dir);
        free(env);
    }
    l->u = shp_unwinder_new(p->pid, err, sizeof(err));
    if (!l->u) {
        struct shp_pt_facts f;
        shp_pt_facts(p->pid, &f);
        int e = kill(p->pid, 0) == 0 || errno == EPERM ? EPERM : ESRCH;
        char why[512];
        if (e == ESRCH || f.uid != f.our_uid)
            shp_pt_refusal(p->pid, e, &f, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "%s", err);
        fail(l, e, why);
    } else if (shp_py_find(&l->py, p->pid, l->u) < 0) {
        fail(l, ESRCH, "exited before it could be read (skipped)");
    }
    p->stats.prepare_ns = now_ns() - t0;
}

/* ---- while stopped ---- */

/* The test's window (SHAPETRACE_SNAPSHOT_HOLD_MS): hold_ms more with the process stopped, cut
 * short by a signal that ends the command (blocked meanwhile; it takes effect once the process
 * is let go), so that a test that sends one need not wait out the window. */
static void hold(unsigned hold_ms)
{
    const struct timespec step = {0, 10 * 1000 * 1000};
    for (unsigned waited = 0; waited < hold_ms; waited += 10) {
        sigset_t pending;
        if (sigpending(&pending) == 0 &&
            (sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1 ||
             sigismember(&pending, SIGHUP) == 1 || sigismember(&pending, SIGQUIT) == 1))
            return;
        nanosleep(&step, NULL);
    }
}

static void stop_and_copy(struct live *l, unsigned hold_ms)
{
    struct shp_snap_proc *p = l->out;
    char err[512];
    if (p->error)
        return;
    int rc = shp_pt_attach(&l->pt, p->pid, err, sizeof(err));
    if (rc < 0) {
        fail(l, -rc, err);
        return;
    }
    l->img = calloc(l->pt.n ? l->pt.n : 1, sizeof(*l->img));
    for (size_t i = 0; l->img && i < l->pt.n; i++) {
        const struct shp_pt_thread *t = &l->pt.t[i];
        struct shp_thread_image *im = &l->img[i];
        im->tid = t->tid;
        im->regs_ok = t->stopped && !t->gone && t->regs_ok;
        im->regs = t->regs;
        ssize_t got = im->regs_ok ? shp_unwinder_copy_stack(l->u, im, STACK_COPY_MAX) : 0;
        if (got > 0)
            p->stats.stack_bytes += (uint64_t)got;
    }
    if (shp_py_read(&l->py) < 0)
        l->py.found = false;
    hold(hold_ms);
    shp_pt_detach(&l->pt);
    p->late = l->pt.late;
    p->stats.stopped_ns = l->pt.resume_ns - l->pt.stop_ns;
    p->stats.py_reads = l->py.reads;
    if (!l->img)
        fail(l, ENOMEM, "out of memory");
}

/* ---- after: unwinding, names, the view of each thread ---- */

static bool glob_any(const char *const *globs, const char *s)
{
    for (size_t i = 0; globs[i]; i++)
        if (!fnmatch(globs[i], s, 0))
            return true;
    return false;
}

/* Whether a native frame is NCCL's or the CUDA runtime's or driver's: by its module, or (a
 * static copy) by its function's name. The preload's wrappers are not: they pass the call on,
 * and the library's own entry point is the next frame. */
static bool gpu_frame(const char *path, const char *fn)
{
    static const char *const mods[] = {"libnccl*.so*", "libcudart*.so*", "libcuda.so*", NULL};
    static const char *const fns[] = {"nccl[A-Z]*", "pnccl[A-Z]*", "cuda[A-Z]*", "cu[A-Z]*", NULL};
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path;
    if (base && !fnmatch("libshapetrace.so*", base, 0))
        return false;
    return (base && glob_any(mods, base)) || glob_any(fns, fn);
}

/* A frame's function as the view names it: without the symbol version glibc's names carry
 * ("clock_nanosleep@GLIBC_2.2.5"). */
static void function_of(const char *frame, char *out, size_t len)
{
    shp_frame_function(frame, out, len);
    char *at = strchr(out, '@');
    if (at && at != out)
        *at = '\0';
}

/* The Python thread state of thread tid (fs_base: its pthread_t on x86-64 glibc), or NULL. */
static const struct shp_py_thread *py_thread_of(const struct shp_py_proc *py, pid_t tid,
                                                uint64_t fs_base)
{
    for (size_t i = 0; i < py->nthreads; i++)
        if (py->threads[i].native_tid == (uint64_t)tid)
            return &py->threads[i];
    for (size_t i = 0; i < py->nthreads; i++)
        if (fs_base && py->threads[i].thread_id == fs_base)
            return &py->threads[i];
    return NULL;
}

static int native_class(const struct shp_py_proc *py, uint64_t pc, bool ret, const char *text)
{
    uint64_t at = ret && pc ? pc - 1 : pc;
    if (py->found &&
        ((at >= py->eval_lo && at < py->eval_hi) || !strncmp(text, "_PyEval_EvalFrameDefault", 24)))
        return SHP_NATIVE_EVAL;
    return py->found && at >= py->interp_lo && at < py->interp_hi ? SHP_NATIVE_INTERP
                                                                  : SHP_NATIVE_OTHER;
}

/* The thread's frames: native ones symbolized, Python ones merged in their place. */
static int build_thread(struct shp_snap_ctx *c, struct live *l, const struct shp_thread_image *im,
                        struct shp_snap_thread *t)
{
    uint64_t pcs[MAX_FRAMES];
    bool ret[MAX_FRAMES];
    size_t nn = shp_unwind(l->u, im, pcs, ret, MAX_FRAMES);
    const struct shp_py_thread *pt =
        l->py.found ? py_thread_of(&l->py, im->tid, im->regs_ok ? im->regs.fs_base : 0) : NULL;
    size_t np = pt ? pt->n : 0;
    char **ntext = calloc(nn + 1, sizeof(*ntext));
    const char **npath = calloc(nn + 1, sizeof(*npath));
    int *cls = calloc(nn + 1, sizeof(*cls));
    bool *entry = calloc(np + 1, sizeof(*entry));
    struct shp_merged_frame *order = calloc(nn + np + 1, sizeof(*order));
    struct shp_site_frame *where = calloc(nn + np + 1, sizeof(*where));
    t->frames = calloc(nn + np + 1, sizeof(*t->frames));
    int rc = -ENOMEM;
    if (!ntext || !npath || !cls || !entry || !order || !where || !t->frames)
        goto out;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < nn; i++) {
        ntext[i] = frame_text(c, l->u, pcs[i], ret[i], &npath[i]);
        if (!ntext[i])
            goto out;
        cls[i] = native_class(&l->py, pcs[i], ret[i], ntext[i]);
    }
    for (size_t i = 0; i < np; i++)
        entry[i] = pt->frames[i].lasti & SHP_PYFRAME_ENTRY;
    size_t k = shp_py_merge(cls, nn, entry, np, order);
    for (size_t i = 0; i < k; i++) {
        uint32_t x = order[i].index;
        if (order[i].python) {
            char buf[8192];
            const struct shp_py_code *code = &l->py.codes[pt->frames[x].code];
            shp_py_frame_text(&l->py, &pt->frames[x], buf, sizeof(buf));
            t->frames[i] = strdup(buf);
            where[i] = (struct shp_site_frame){
                .python = true, .path = code->file, .path_len = strlen(code->file)};
            t->python = true;
        } else {
            t->frames[i] = ntext[x];
            ntext[x] = NULL;
            where[i] = (struct shp_site_frame){.path = npath[x],
                                               .path_len = npath[x] ? strlen(npath[x]) : 0};
        }
        if (!t->frames[i])
            goto out;
        shp_snap_scrub(t->frames[i]);
        where[i].text = t->frames[i];
        t->nframes = i + 1;
    }
    char fn[512];
    for (size_t i = k; i-- > 0;) {
        if (where[i].python)
            continue;
        function_of(t->frames[i], fn, sizeof(fn));
        if (!gpu_frame(where[i].path, fn))
            continue;
        /* NCCL's pncclX is the strong alias of its ncclX */
        t->in = strdup(!strncmp(fn, "pnccl", 5) ? fn + 1 : fn);
        t->collective = t->in && !strncmp(t->in, "nccl", 4);
        break;
    }
    if (k) {
        function_of(t->frames[0], fn, sizeof(fn));
        t->waiting = strdup(fn);
        t->site = shp_site_pick(c->rule, where, k);
        t->has_site = !shp_site_skipped(c->rule, &where[t->site]);
    }
    l->out->stats.symbols_ns += now_ns() - t0;
    rc = 0;
out:
    for (size_t i = 0; ntext && i < nn; i++)
        free(ntext[i]);
    free(ntext);
    free(npath);
    free(cls);
    free(entry);
    free(order);
    free(where);
    return rc;
}

/* ---- the trace of a process that runs the preload ---- */

/* The trace the process has open (a descriptor of 512 or above, where the preload keeps it,
 * naming a *.shptrace), else the one of its pid in its SHAPETRACE_DIR. */
static char *find_trace(struct live *l, char *open_path, size_t len)
{
    char dir[64], link[2 * PATH_MAX + 160];
    pid_t pid = l->out->pid;
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char *end;
        long fd = strtol(de->d_name, &end, 10);
        if (*end || fd < 512)
            continue;
        char target[PATH_MAX];
        snprintf(link, sizeof(link), "%s/%ld", dir, fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        char *del = strstr(target, " (deleted)");
        if (del && !del[10])
            *del = '\0';
        size_t tl = strlen(target);
        if (tl < 9 || strcmp(target + tl - 9, SHP_TRACE_SUFFIX) != 0)
            continue;
        closedir(d);
        /* Through the descriptor: the file opens even when its name is not ours to see. */
        snprintf(open_path, len, "%s", link);
        return strdup(target);
    }
    if (d)
        closedir(d);
    if (!l->trace_dir[0])
        return NULL;
    snprintf(link, sizeof(link), "%s/%s-%d%s", l->trace_dir, l->out->host, (int)pid,
             SHP_TRACE_SUFFIX);
    if (access(link, R_OK) != 0)
        return NULL;
    snprintf(open_path, len, "%s", link);
    return strdup(link);
}

static struct shp_snap_comm *comm_pos(struct shp_snap_proc *p, size_t *cap, uint64_t id)
{
    for (size_t i = 0; i < p->ncomms; i++)
        if (p->comms[i].id == id)
            return &p->comms[i];
    if (!shp_grow((void **)&p->comms, cap, p->ncomms, sizeof(*p->comms)))
        return NULL;
    p->comms[p->ncomms] = (struct shp_snap_comm){.id = id, .seq = UINT64_MAX};
    return &p->comms[p->ncomms++];
}

/* Each thread's last call, with whether it had returned: one that has not is where the thread
 * is now. */
struct last_call {
    struct shp_snap_call call;
    bool in_flight;
};

static void read_trace(struct live *l)
{
    struct shp_snap_proc *p = l->out;
    char open_path[2 * PATH_MAX + 160], err[256];
    uint64_t t0 = now_ns();
    char *name = find_trace(l, open_path, sizeof(open_path));
    struct shp_trace t;
    if (!name || shp_trace_open(&t, open_path, err, sizeof(err)) < 0) {
        free(name);
        return;
    }
    if (t.hdr->pid != (uint64_t)p->pid) { /* an older process's file of the same name */
        shp_trace_close(&t);
        free(name);
        return;
    }
    p->trace = name;
    shp_snap_scrub(p->trace);
    p->dormant = !__atomic_load_n(&t.hdr->ctl[SHP_CTL_ARMED], __ATOMIC_RELAXED);
    p->last = (struct shp_snap_comm){.seq = UINT64_MAX};
    struct last_call *calls = NULL;
    size_t ncalls = 0, capcalls = 0, capcomms = 0;
    struct shp_cursor cur = {.live = true};
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    while ((r = shp_trace_next(&t, &cur, &type, &size))) {
        struct shp_event e;
        if (!shp_event_decode(&t, r, type, &e) || e.mark)
            continue;
        struct last_call *lc = NULL;
        for (size_t i = 0; i < ncalls && !lc; i++)
            if (calls[i].call.tid == (pid_t)e.tid)
                lc = &calls[i];
        if (!lc && shp_grow((void **)&calls, &capcalls, ncalls, sizeof(*calls)))
            lc = &calls[ncalls++];
        if (lc) {
            lc->call = (struct shp_snap_call){.tid = (pid_t)e.tid, .comm = e.comm, .seq = e.seq};
            snprintf(lc->call.op, sizeof(lc->call.op), "%s", shp_op_name(e.op));
            lc->in_flight = e.dur_ns == SHP_NONE;
        }
        if (type == SHP_REC_COLL) {
            struct shp_snap_comm *c = comm_pos(p, &capcomms, e.comm);
            if (c) {
                c->seq = e.seq;
                snprintf(c->op, sizeof(c->op), "%s", shp_op_name(e.op));
                c->in_flight = e.dur_ns == SHP_NONE;
                p->last = *c;
            }
        } else if (type == SHP_REC_COMM && e.comm_kind <= SHP_COMM_SHRINK) {
            comm_pos(p, &capcomms, e.comm);
        }
    }
    size_t capin = 0;
    for (size_t i = 0; i < ncalls; i++)
        if (calls[i].in_flight &&
            shp_grow((void **)&p->inflight, &capin, p->ninflight, sizeof(*p->inflight)))
            p->inflight[p->ninflight++] = calls[i].call;
    free(calls);
    if (p->rank < 0 && (p->rank = shp_trace_rank(&t)) >= 0)
        p->rank_from = "trace";
    shp_trace_close(&t);
    p->stats.trace_ns = now_ns() - t0;
}

static void finish(struct shp_snap_ctx *c, struct live *l)
{
    struct shp_snap_proc *p = l->out;
    if (p->error)
        return;
    if (l->py.found && l->py.micro_known)
        snprintf(p->python, sizeof(p->python), "%u.%u.%u", l->py.version >> 24,
                 (l->py.version >> 16) & 0xff, (l->py.version >> 8) & 0xff);
    else if (l->py.found)
        snprintf(p->python, sizeof(p->python), "%u.%u", l->py.version >> 24,
                 (l->py.version >> 16) & 0xff);
    if (l->py.why[0])
        p->python_note = strdup(l->py.why);
    p->threads = calloc(l->pt.n ? l->pt.n : 1, sizeof(*p->threads));
    if (!p->threads) {
        fail(l, ENOMEM, "out of memory");
        return;
    }
    uint64_t t0 = now_ns(), sym0 = p->stats.symbols_ns;
    for (size_t i = 0; i < l->pt.n; i++) {
        const struct shp_pt_thread *pt = &l->pt.t[i];
        if (pt->gone)
            continue;
        struct shp_snap_thread *t = &p->threads[p->nthreads++];
        t->tid = pt->tid;
        char path[96];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)p->pid, (int)pt->tid);
        read_line_file(path, t->name, sizeof(t->name));
        shp_snap_scrub(t->name);
        t->stopped = l->img[i].regs_ok;
        if (t->stopped && build_thread(c, l, &l->img[i], t) < 0) {
            fail(l, ENOMEM, "out of memory");
            return;
        }
    }
    p->stats.unwind_ns = now_ns() - t0 - (p->stats.symbols_ns - sym0);
    read_trace(l);
    p->focus = shp_snap_focus(p);
}

static void release(struct live *l)
{
    for (size_t i = 0; l->img && i < l->pt.n; i++)
        free(l->img[i].stack);
    free(l->img);
    shp_pt_free(&l->pt);
    shp_py_free(&l->py);
    shp_unwinder_free(l->u);
}

int shp_snap_capture(struct shp_snap_ctx *c, const pid_t *pids, size_t n, unsigned hold_ms,
                     struct shp_snap_job *job)
{
    struct live *ls = calloc(n ? n : 1, sizeof(*ls));
    if (!ls)
        return -ENOMEM;
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    job->t_ns = (uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec;
    size_t first = job->n;
    for (size_t i = 0; i < n; i++) {
        struct shp_snap_proc *p = shp_snap_job_add(job);
        if (!p) {
            free(ls);
            return -ENOMEM;
        }
        snprintf(p->host, sizeof(p->host), "%s", host);
        p->pid = pids[i];
        p->rank = p->local_rank = p->world_size = -1;
    }
    for (size_t i = 0; i < n; i++) {
        ls[i].out = &job->procs[first + i];
        prepare(c, &ls[i]);
    }
    for (size_t i = 0; i < n; i++)
        stop_and_copy(&ls[i], hold_ms);
    for (size_t i = 0; i < n; i++) {
        finish(c, &ls[i]);
        release(&ls[i]);
    }
    free(ls);
    return 0;
}

/* ---- every GPU process of the caller ---- */

static bool maps_gpu_library(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, f) > 0) {
        char *slash = strrchr(line, '/');
        if (!slash)
            continue;
        slash[1 + strcspn(slash + 1, "\n")] = '\0';
        found = !fnmatch("libnccl*.so*", slash + 1, 0) || !fnmatch("libcudart*.so*", slash + 1, 0);
    }
    free(line);
    fclose(f);
    return found;
}

int shp_snap_find_gpu_processes(pid_t **pids, size_t *n)
{
    *pids = NULL;
    *n = 0;
    size_t cap = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return -errno;
    struct dirent *de;
    uid_t me = getuid();
    while ((de = readdir(d))) {
        char *end, path[64];
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid())
            continue;
        snprintf(path, sizeof(path), "/proc/%ld/status", pid);
        char *st = slurp(path, 4096, NULL);
        const char *u = st ? strstr(st, "\nUid:") : NULL;
        bool mine = u && strtol(u + 5, NULL, 10) == (long)me;
        free(st);
        if (!mine || !maps_gpu_library((pid_t)pid))
            continue;
        if (!shp_grow((void **)pids, &cap, *n, sizeof(**pids))) {
            closedir(d);
            return -ENOMEM;
        }
        (*pids)[(*n)++] = (pid_t)pid;
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++)
        for (size_t j = i; j > 0 && (*pids)[j - 1] > (*pids)[j]; j--) {
            pid_t x = (*pids)[j];
            (*pids)[j] = (*pids)[j - 1];
            (*pids)[j - 1] = x;
        }
    return 0;
}
