/* shapetrace test equipment: synthetic but valid trace files, one per rank, for the analyzer's
 * tests and benchmarks at sizes no test machine can record (8 ranks x 1,000,000 events, 512
 * ranks x 10,000).
 *
 * Usage: gen_traces DIR NRANKS NEVENTS [--seed S] [--diverge KIND:RANK:SEQ]...
 *
 * Writes DIR/gen-<rank>.shptrace (mode 0600; DIR made if missing), each a complete trace as the
 * preload would leave it: pid 10000 + rank, host gen-host-<rank / 8>, env_rank = rank,
 * world_size = NRANKS, exe /opt/gen/serve, stacks native. Records, in time order:
 *   - a module record for /opt/gen/serve (no build id) and stacks 1..8 of 6 frames inside it;
 *   - ncclCommInitRank of the world communicator (id from the seed alone, the same on every
 *     rank) and ncclCommSplit of the tensor-parallel child, color rank / 8, key rank: groups of 8
 *     ranks (the last group smaller when NRANKS is not a multiple of 8), id derived from the
 *     parent's id, split index 0 and the color by shp_comm_child_id (include/shapetrace/env.h);
 *   - cudaMalloc of three 1 GiB device segments and cudaMallocHost of one pinned 1 GiB segment
 *     (the D2H copies' destination), at 0x7f0000000000 + k GiB;
 *   - then a step of 8 calls, repeated: TP all-reduce (bf16 sum, 4096 x tokens), D2D copy, TP
 *     all-reduce, TP all-gather (bf16, 4008 x tokens), D2H copy, TP all-reduce, D2D copy, and a
 *     last call that is a world all-reduce (fp32 sum, 1024) every 16th step and a D2D copy
 *     otherwise. `tokens` (1..64) changes from step to step, the same on every rank. The calls
 *     of a step take compact records (format 2), as the preload writes them.
 * NEVENTS counts every call record (the 6 above included), which is what `shapetrace dump`
 * lists. The k-th call of every rank starts 25 us apart from the (k-1)-th, plus up to 4 us of
 * per-rank jitter; clocks differ by host and start times by rank, as real ones do. The same
 * arguments give the same bytes (a golden test may rely on it).
 *
 * --diverge KIND:RANK:SEQ (repeatable) changes RANK's TP collective number SEQ, SEQ as every
 * other rank numbers it (0-based):
 *   count  a count 256 lower (higher when the count is 256 or less)
 *   dtype  fp32 instead of bf16
 *   skip   no call: the rank numbers its later TP collectives one lower, and its trace has one
 *          event fewer
 *   stop   the trace ends just before that call and is left incomplete (no SHP_FILE_COMPLETE),
 *          as if the process had hung before it and been killed
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/rec.h"
#include "include/shapetrace/calls.h"
#include "include/shapetrace/env.h"
#include "include/shapetrace/trace.h"

#define DTYPE_FP32 7
#define DTYPE_BF16 9
#define REDOP_SUM 0

#define TP_MAX 8
#define NALLOCS 4
#define PROLOGUE_EVENTS (2 + NALLOCS)
#define NSTACKS 8
#define NFRAMES 6
#define STEP_CALLS 8
#define WORLD_EVERY 16 /* steps per world all-reduce */
#define HIDDEN 4096
#define VOCAB_SHARD 4008
#define WORLD_COUNT 1024

#define GIB (1ull << 30)
#define MIB (1ull << 20)
#define ALLOC_BASE 0x7f0000000000ull
#define MODULE_BASE 0x555555554000ull
#define MODULE_SIZE 0x400000ull
#define EXE_PATH "/opt/gen/serve"
#define MAX_REC_SIZE 144 /* the largest record a call may take (a full coll or copy) */
/* The communicator table's entries (the header's comm_off), as the preload numbers them. */
#define COMM_WORLD 0
#define COMM_TP 1

/* Times on the common wall clock, in ns after WALL0. */
#define WALL0_NS 1735689600000000000ull /* 2025-01-01T00:00:00Z */
#define SEC 1000000000ull
#define CALLS_START (3 * SEC)
#define CALL_NS 25000ull
#define JITTER_NS 4000ull

enum { ST_COMM = 1, ST_ALLOC, ST_AR_ATTN, ST_AR_MLP, ST_AG, ST_D2D, ST_D2H, ST_WORLD };

enum { DV_COUNT, DV_DTYPE, DV_SKIP, DV_STOP, DV_KINDS };
static const char *const dv_names[DV_KINDS] = {"count", "dtype", "skip", "stop"};

struct diverge {
    int kind;
    int rank;
    uint64_t seq;
    bool hit;
};

/* What one rank's generation needs. */
struct gen {
    uint64_t seed;
    int nranks;
    uint64_t nevents;
    struct diverge *dv;
    size_t ndv;
    uint64_t world_id;
};

/* One rank's process: identity, clocks and the write cursor into its file image. */
struct proc {
    int rank, tp_rank, tp_size, device;
    uint32_t tid;
    uint64_t tp_id;
    uint64_t start;      /* process start, on the common clock */
    uint64_t mono0;      /* CLOCK_MONOTONIC at start */
    unsigned char *base; /* the file's first byte */
    unsigned char *p;    /* where the next record goes */
    uint64_t world_seq;  /* this rank's collectives on the world communicator */
    uint64_t tp_seq;     /* ... on its TP communicator, as it numbers them */
    uint64_t tp_nominal; /* ... as every rank numbers them: the --diverge SEQ */
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("gen_traces: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void usage(void)
{
    fputs("usage: gen_traces DIR NRANKS NEVENTS [--seed S] [--diverge KIND:RANK:SEQ]...\n"
          "  KIND is count, dtype, skip or stop; SEQ numbers the collectives on RANK's\n"
          "  tensor-parallel communicator from 0. See the top of tests/gen/gen_traces.c.\n",
          stderr);
    exit(2);
}

/* A deterministic "random" number per (seed, a, b): no generator state, so a rank's values do
 * not depend on what other ranks drew, and every rank agrees on the values meant to be shared. */
static uint64_t rnd(uint64_t seed, uint64_t a, uint64_t b)
{
    return shp_mix64(seed ^ shp_mix64(a * 0x9e3779b97f4a7c15ull + b + 1));
}

static uint64_t t_ns(const struct proc *pr, uint64_t at)
{
    return pr->mono0 + (at - pr->start);
}

static void emit(struct proc *pr, const void *rec, unsigned type, size_t size)
{
    memcpy(pr->p, rec, size);
    shp_rec_publish(pr->p, type, size);
    pr->p += size;
}

/* The head of a compact record, as preload/record.c writes it for a call that returned 0. */
static struct shp_head head_at(const struct proc *pr, uint64_t at, uint64_t dur, unsigned op)
{
    return (struct shp_head){
        .t = t_ns(pr, at), .tid = pr->tid, .op = (uint8_t)op, .done = shp_done(0, dur)};
}

/* Index the communicator record about to be emitted, as the preload does for compact records. */
static void index_comm(struct proc *pr, unsigned idx)
{
    struct shp_file_header *hd = (struct shp_file_header *)pr->base;
    hd->comm_off[idx] = (uint64_t)(pr->p - pr->base);
    hd->ncomms = idx + 1;
}

static struct shp_ev ev_at(const struct proc *pr, uint64_t at, uint64_t dur, unsigned op,
                           uint32_t stack, int device)
{
    return (struct shp_ev){
        .t = t_ns(pr, at),
        .tid = pr->tid,
        .op = (uint16_t)op,
        .stack = stack,
        .result = 0,
        .device = device,
        .dur = dur,
        .aux = {-1, -1},
    };
}

static void emit_module(struct proc *pr)
{
    union {
        struct shp_rec_module m;
        unsigned char bytes[(sizeof(struct shp_rec_module) + sizeof(EXE_PATH) + 7) & ~7ul];
    } r;
    size_t plen = sizeof(EXE_PATH) - 1;
    size_t size = (sizeof(r.m) + plen + 7) & ~(size_t)7;
    memset(&r, 0, sizeof(r));
    r.m.base = MODULE_BASE;
    r.m.lo = MODULE_BASE;
    r.m.hi = MODULE_BASE + MODULE_SIZE;
    r.m.path_len = (uint16_t)plen;
    memcpy(r.bytes + sizeof(r.m), EXE_PATH, plen);
    emit(pr, &r, SHP_REC_MODULE, size);
}

/* Innermost frame first: call sites differ per stack, the outer frames (step, serve loop, main)
 * are shared, as in a real server. All return addresses lie inside the module. */
static void emit_stacks(struct proc *pr)
{
    for (uint32_t id = 1; id <= NSTACKS; id++) {
        struct {
            struct shp_rec_stack s;
            uint64_t frames[NFRAMES];
        } r;
        memset(&r, 0, sizeof(r));
        r.s.id = id;
        r.s.nframes = NFRAMES;
        r.frames[0] = MODULE_BASE + 0x10000 + id * 0x1000 + 0x2a;
        r.frames[1] = MODULE_BASE + 0x20000 + id * 0x800 + 0x51;
        r.frames[2] = MODULE_BASE + 0x30000 + (id % 3) * 0x400 + 0x13;
        r.frames[3] = MODULE_BASE + 0x40000 + 0x77;
        r.frames[4] = MODULE_BASE + 0x50000 + 0x1c;
        r.frames[5] = MODULE_BASE + 0x60000 + 0x9d;
        emit(pr, &r, SHP_REC_STACK, sizeof(r));
    }
}

static void emit_comms(struct proc *pr, const struct gen *g)
{
    uint64_t world_handle = 0x55556a3f2000ull, tp_handle = 0x55556b1d4000ull;
    /* NCCL init is collective: ranks enter over a spread and leave together. */
    uint64_t at = 1 * SEC + rnd(g->seed, (uint64_t)pr->rank, 1u << 20) % 50000000;
    uint64_t done = 2 * SEC + rnd(g->seed, (uint64_t)pr->rank, 1u << 21) % 1000000;
    struct shp_rec_comm w = {
        .ev = ev_at(pr, at, done - at, SHP_OP_ncclCommInitRank, ST_COMM, pr->device),
        .id = g->world_id,
        .rank = pr->rank,
        .nranks = g->nranks,
        .kind = SHP_COMM_INIT,
    };
    w.ev.out = world_handle;
    w.ev.aux[0] = pr->rank;
    w.ev.aux[1] = g->nranks;
    index_comm(pr, COMM_WORLD);
    emit(pr, &w, SHP_REC_COMM, sizeof(w));

    /* As preload/record.c writes a split: the call takes no rank, so rank and nranks are -1 and
     * what the library reported is in aux. */
    at = 2 * SEC + 100000000 + rnd(g->seed, (uint64_t)pr->rank, 1u << 22) % 5000000;
    done = 2 * SEC + 400000000 + rnd(g->seed, (uint64_t)pr->rank, 1u << 23) % 1000000;
    struct shp_rec_comm s = {
        .ev = ev_at(pr, at, done - at, SHP_OP_ncclCommSplit, ST_COMM, pr->device),
        .id = pr->tp_id,
        .parent = g->world_id,
        .rank = -1,
        .nranks = -1,
        .color = pr->rank / TP_MAX,
        .key = pr->rank,
        .index = 0,
        .kind = SHP_COMM_SPLIT,
    };
    s.ev.out = tp_handle;
    s.ev.aux[0] = pr->tp_rank;
    s.ev.aux[1] = pr->tp_size;
    index_comm(pr, COMM_TP);
    emit(pr, &s, SHP_REC_COMM, sizeof(s));
}

static void emit_allocs(struct proc *pr, const struct gen *g)
{
    for (unsigned k = 0; k < NALLOCS; k++) {
        bool pinned = k == NALLOCS - 1;
        uint64_t at = 2 * SEC + 500000000 + k * 2000000 +
                      rnd(g->seed, (uint64_t)pr->rank, (1u << 24) + k) % 100000;
        struct shp_rec_alloc r = {
            .ev = ev_at(pr, at, 200000 + rnd(g->seed, (uint64_t)pr->rank, (1u << 25) + k) % 100000,
                        pinned ? SHP_OP_cudaMallocHost : SHP_OP_cudaMalloc, ST_ALLOC,
                        pinned ? -1 : pr->device),
            .size = GIB,
            .kind = pinned ? SHP_ALLOC_PINNED : SHP_ALLOC_DEVICE,
        };
        r.ev.out = ALLOC_BASE + k * GIB;
        emit(pr, &r, SHP_REC_ALLOC, sizeof(r));
    }
}

/* What --diverge asks of this rank's TP collective number `nominal`; bit per DV_* kind. */
static unsigned diverge_at(struct gen *g, int rank, uint64_t nominal)
{
    unsigned m = 0;
    for (size_t i = 0; i < g->ndv; i++) {
        if (g->dv[i].rank == rank && g->dv[i].seq == nominal) {
            m |= 1u << g->dv[i].kind;
            g->dv[i].hit = true;
        }
    }
    return m;
}

/* Where the buffers of a step live, inside the allocations, sized so that the largest count
 * (64 tokens) in fp32 (--diverge dtype) still fits:
 *   alloc 0: all-reduce activations, 8 MiB a step slot x 64; token ids at 1000 MiB; the world
 *            all-reduce's 4 KiB at 1023 MiB
 *   alloc 1: D2D copy destinations and all-gather inputs, 32 MiB x 16
 *   alloc 2: all-gather outputs (x TP size), 64 MiB x 16
 *   alloc 3: pinned host buffer for the D2H token ids, 4 KiB x 64 */
#define A(k) (ALLOC_BASE + (k)*GIB)

/* One collective of a step, as emit_coll writes it. */
struct coll {
    unsigned op, comm, dtype, redop;
    uint32_t stack;
    uint64_t seq, count, sendbuf, recvbuf;
};

static void emit_coll(struct proc *pr, uint64_t at, uint64_t dur, uint64_t stream,
                      const struct coll *c)
{
    struct shp_rec_coll_c r = {
        .h = head_at(pr, at, dur, c->op),
        .count_dt = c->count | (uint64_t)c->dtype << 48 | (uint64_t)c->redop << 56,
        .send_comm = SHP_P48(c->sendbuf, c->comm),
        .recv_rp = SHP_P48(c->recvbuf, -1),
        .stream_slo = SHP_P48(stream, c->stack),
        .seq_shi = SHP_P48(c->seq, c->stack >> 16),
    };
    emit(pr, &r, SHP_REC_COLL_C, sizeof(r));
}

/* Returns false when the rank stops here (--diverge stop). */
static bool emit_call(struct proc *pr, struct gen *g, uint64_t i)
{
    uint64_t step = i / STEP_CALLS;
    unsigned slot = (unsigned)(i % STEP_CALLS);
    uint64_t tokens = 1 + rnd(g->seed, UINT64_MAX, step) % 64;
    uint64_t at = CALLS_START + i * CALL_NS + rnd(g->seed, (uint64_t)pr->rank, i) % JITTER_NS;
    uint64_t h = rnd(g->seed ^ 0xd1b54a32d192ed03ull, (uint64_t)pr->rank, i);
    uint64_t stream = 0x55556c8e0000ull;
    bool world = slot == STEP_CALLS - 1 && step % WORLD_EVERY == WORLD_EVERY - 1;

    if (slot == 1 || slot == 4 || (slot == STEP_CALLS - 1 && !world)) {
        bool d2h = slot == 4;
        uint64_t bytes = d2h ? tokens * 4 : tokens * HIDDEN * 2;
        uint64_t src = d2h ? A(0) + 1000 * MIB + (step % 64) * 4096 : A(0) + (step % 64) * 8 * MIB;
        uint64_t dst = d2h ? A(3) + (step % 64) * 4096 : A(1) + (step % 16) * 32 * MIB;
        uint32_t stack = d2h ? ST_D2H : ST_D2D;
        struct shp_rec_copy_c r = {
            .h = head_at(pr, at, 1500 + h % 2000, SHP_OP_cudaMemcpyAsync),
            .dst_dev = SHP_P48(dst, pr->device),
            .src_kind = SHP_P48(src, d2h ? SHP_KIND_D2H : SHP_KIND_D2D),
            .stream_slo = SHP_P48(stream, stack),
            .bytes_shi = SHP_P48(bytes, stack >> 16),
        };
        emit(pr, &r, SHP_REC_COPY_C, sizeof(r));
        return true;
    }

    /* Collectives: compact records (the communicator by its index), as the preload writes them;
     * the device, rank and size are the communicator record's. */
    struct coll r = {.op = SHP_OP_ncclAllReduce, .redop = REDOP_SUM, .stack = ST_WORLD};
    if (world) {
        r.comm = COMM_WORLD;
        r.seq = pr->world_seq++;
        r.count = WORLD_COUNT;
        r.dtype = DTYPE_FP32;
        r.sendbuf = r.recvbuf = A(0) + 1023 * MIB;
        emit_coll(pr, at, 6000 + h % 8000, stream, &r);
        return true;
    }

    unsigned dv = diverge_at(g, pr->rank, pr->tp_nominal++);
    if (dv & (1u << DV_STOP))
        return false;
    if (dv & (1u << DV_SKIP))
        return true;
    r.comm = COMM_TP;
    r.seq = pr->tp_seq++;
    r.dtype = DTYPE_BF16;
    if (slot == 3) {
        r.op = SHP_OP_ncclAllGather;
        r.stack = ST_AG;
        r.redop = SHP_REDOP_NONE;
        r.count = tokens * VOCAB_SHARD;
        r.sendbuf = A(1) + (step % 16) * 32 * MIB;
        r.recvbuf = A(2) + (step % 16) * 64 * MIB;
    } else {
        r.stack = slot == 0 ? ST_AR_ATTN : ST_AR_MLP;
        r.count = tokens * HIDDEN;
        r.sendbuf = r.recvbuf = A(0) + (step % 64) * 8 * MIB;
    }
    if (dv & (1u << DV_COUNT))
        r.count = r.count > 256 ? r.count - 256 : r.count + 256;
    if (dv & (1u << DV_DTYPE))
        r.dtype = r.dtype == DTYPE_BF16 ? DTYPE_FP32 : DTYPE_BF16;
    emit_coll(pr, at, 6000 + h % 8000, stream, &r);
    return true;
}

/* Fill `buf` with rank's whole file; returns its size. */
static size_t gen_rank(struct gen *g, int rank, unsigned char *buf)
{
    int color = rank / TP_MAX;
    int host = rank / 8;
    struct proc pr = {
        .rank = rank,
        .tp_rank = rank % TP_MAX,
        .tp_size = g->nranks - color * TP_MAX < TP_MAX ? g->nranks - color * TP_MAX : TP_MAX,
        .device = rank % 8,
        .tid = (uint32_t)(10000 + rank),
        .tp_id = shp_comm_child_id(g->world_id, 0, color),
        /* Processes start within half a second of each other; each host's monotonic clock
         * has its own origin (its boot). */
        .start = rnd(g->seed, (uint64_t)rank, 1u << 26) % (SEC / 2),
        .mono0 = (uint64_t)(1 + host % 5) * 86400 * SEC +
                 rnd(g->seed, (uint64_t)host, 1u << 27) % (3600 * SEC),
        .base = buf,
        .p = buf + SHP_HEADER_SIZE,
    };
    pr.mono0 += pr.start;

    memset(buf, 0, SHP_HEADER_SIZE);
    emit_module(&pr);
    emit_stacks(&pr);
    emit_comms(&pr, g);
    emit_allocs(&pr, g);
    bool complete = true;
    for (uint64_t i = 0; i < g->nevents - PROLOGUE_EVENTS; i++) {
        if (!emit_call(&pr, g, i)) {
            complete = false;
            break;
        }
    }

    struct shp_file_header *hd = (struct shp_file_header *)buf;
    uint64_t size = (uint64_t)(pr.p - buf);
    hd->version = SHP_TRACE_VERSION;
    hd->byte_order = SHP_BYTE_ORDER_MARK;
    hd->header_size = SHP_HEADER_SIZE;
    hd->flags = complete ? SHP_FILE_COMPLETE : 0;
    hd->pid = (uint64_t)(10000 + rank);
    hd->ppid = 9999;
    hd->realtime_ns = WALL0_NS + pr.start;
    hd->monotonic_ns = pr.mono0;
    hd->env_rank = rank;
    hd->first_comm_rank = rank;
    hd->local_rank = rank % 8;
    hd->world_size = g->nranks;
    hd->tail = size;
    hd->allocated = size;
    /* The preload's default cap (1 GiB of records), or more when this file needs it. */
    hd->cap = SHP_HEADER_SIZE + (size - SHP_HEADER_SIZE > GIB ? size - SHP_HEADER_SIZE : GIB);
    hd->ctl[SHP_CTL_ARMED] = 1;
    snprintf(hd->host, sizeof(hd->host), "gen-host-%d", host);
    snprintf(hd->exe, sizeof(hd->exe), "%s", EXE_PATH);
    hd->stacks_mode = SHP_STACKS_NATIVE;
    memcpy(hd->magic, SHP_TRACE_MAGIC, 8);
    return (size_t)size;
}

static void make_dirs(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
        die("%s: path too long", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            die("cannot create %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
        die("cannot create %s: %s", buf, strerror(errno));
}

static void write_file(const char *path, const unsigned char *buf, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        die("cannot create %s: %s", path, strerror(errno));
    /* An existing file keeps its mode through O_TRUNC. */
    if (fchmod(fd, 0600) != 0)
        die("%s: %s", path, strerror(errno));
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, buf + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die("cannot write %s: %s", path, n < 0 ? strerror(errno) : "short write");
        done += (size_t)n;
    }
    if (close(fd) != 0)
        die("cannot write %s: %s", path, strerror(errno));
}

/* Files of an earlier, larger run would be read with this one's as the same run. */
static void warn_stale(const char *dir, int nranks)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    int stale = 0;
    while ((de = readdir(d))) {
        int r, len = 0;
        if (sscanf(de->d_name, "gen-%d.shptrace%n", &r, &len) == 1 && len > 0 &&
            de->d_name[len] == 0 && r >= nranks)
            stale++;
    }
    closedir(d);
    if (stale)
        fprintf(stderr,
                "gen_traces: warning: %s holds %d gen-*.shptrace file%s of ranks >= %d from "
                "an earlier run; tools reading %s will take them for part of this one\n",
                dir, stale, stale == 1 ? "" : "s", nranks, dir);
}

static uint64_t parse_u64(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || *s == '-')
        die("%s: not a number: %s", what, s);
    return v;
}

static void parse_diverge(const char *arg, struct diverge *d, int nranks)
{
    const char *c1 = strchr(arg, ':');
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
        die("--diverge %s: expected KIND:RANK:SEQ", arg);
    d->kind = -1;
    for (int k = 0; k < DV_KINDS; k++)
        if ((size_t)(c1 - arg) == strlen(dv_names[k]) && !strncmp(arg, dv_names[k], c1 - arg))
            d->kind = k;
    if (d->kind < 0)
        die("--diverge %s: KIND is count, dtype, skip or stop", arg);
    char rank[32];
    if ((size_t)(c2 - c1 - 1) >= sizeof(rank))
        die("--diverge %s: bad RANK", arg);
    memcpy(rank, c1 + 1, (size_t)(c2 - c1 - 1));
    rank[c2 - c1 - 1] = 0;
    uint64_t r = parse_u64(rank, "--diverge RANK");
    if (r >= (uint64_t)nranks)
        die("--diverge %s: RANK must be below NRANKS (%d)", arg, nranks);
    d->rank = (int)r;
    d->seq = parse_u64(c2 + 1, "--diverge SEQ");
    d->hit = false;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"seed", required_argument, 0, 's'},
        {"diverge", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    uint64_t seed = 1;
    const char **dv_args = calloc((size_t)argc, sizeof(*dv_args));
    size_t ndv = 0;
    int c;
    if (!dv_args)
        die("out of memory");
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 's')
            seed = parse_u64(optarg, "--seed");
        else if (c == 'd')
            dv_args[ndv++] = optarg;
        else
            usage();
    }
    if (argc - optind != 3)
        usage();
    const char *dir = argv[optind];
    uint64_t nranks = parse_u64(argv[optind + 1], "NRANKS");
    uint64_t nevents = parse_u64(argv[optind + 2], "NEVENTS");
    if (nranks < 1 || nranks > 1000000)
        die("NRANKS must be 1 to 1000000");
    if (nevents < PROLOGUE_EVENTS || nevents > (1ull << 32))
        die("NEVENTS must be %d (communicators and allocations) to 2^32", PROLOGUE_EVENTS);

    struct gen g = {
        .seed = seed,
        .nranks = (int)nranks,
        .nevents = nevents,
        .dv = calloc(ndv ? ndv : 1, sizeof(*g.dv)),
        .ndv = ndv,
        /* The same on every rank, as the hash of a shared ncclUniqueId would be; never 0. */
        .world_id = shp_mix64(seed ^ 0x5348505452414345ull) | 1,
    };
    if (!g.dv)
        die("out of memory");
    for (size_t i = 0; i < ndv; i++)
        parse_diverge(dv_args[i], &g.dv[i], g.nranks);

    size_t cap = SHP_HEADER_SIZE + 4096 + (size_t)nevents * MAX_REC_SIZE;
    unsigned char *buf = malloc(cap);
    if (!buf)
        die("cannot allocate %zu bytes", cap);
    make_dirs(dir);
    warn_stale(dir, g.nranks);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t total = 0;
    for (int r = 0; r < g.nranks; r++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/gen-%d%s", dir, r, SHP_TRACE_SUFFIX) >=
            (int)sizeof(path))
            die("%s: path too long", dir);
        size_t size = gen_rank(&g, r, buf);
        write_file(path, buf, size);
        total += size;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);

    for (size_t i = 0; i < ndv; i++)
        if (!g.dv[i].hit)
            fprintf(stderr,
                    "gen_traces: warning: --diverge %s: rank %d has no TP collective %" PRIu64
                    " (or it stopped earlier)\n",
                    dv_args[i], g.dv[i].rank, g.dv[i].seq);
    printf("gen_traces: %d files, %" PRIu64 " bytes, in %.2f s, under %s\n", g.nranks, total,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, dir);
    free(buf);
    free(g.dv);
    free(dv_args);
    return 0;
}
