/* Unit tests of tools/lib, linked without the command's main: the reader on traces built here
 * (whole, torn, cut, still being written, read by two walks at once), events and the byte ranges
 * they read and write, stacks, the session's policy and its stacks from several threads, the
 * allocation tracker and the output helpers; and common/fs.c, which the preload and `run` share
 * (the run directory, private files, writes without signals). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/ops.h"
#include "include/shapetrace/trace.h"
#include "tests/unit/harness.h"
#include "tools/lib/allocs.h"
#include "tools/lib/event.h"
#include "tools/lib/out.h"
#include "tools/lib/outfile.h"
#include "tools/lib/reader.h"
#include "tools/lib/session.h"
#include "tools/lib/site.h"
#include "tools/lib/stacks.h"

/* ---- building traces ---- */

struct buf {
    unsigned char *p;
    size_t n;
};

static void put(struct buf *b, const void *rec, unsigned type, size_t size, int publish)
{
    b->p = realloc(b->p, b->n + size);
    memcpy(b->p + b->n, rec, size);
    struct shp_rec *h = (struct shp_rec *)(b->p + b->n);
    h->check = shp_rec_check(h, type, size);
    h->word = publish ? SHP_REC_WORD(type, size) : SHP_REC_WORD(SHP_REC_RESERVED, size);
    b->n += size;
}

/* A module record covering [lo, hi) at load bias 0. */
static void put_module(struct buf *b, const char *mpath, uint64_t lo, uint64_t hi)
{
    size_t plen = strlen(mpath), size = (sizeof(struct shp_rec_module) + plen + 7) & ~(size_t)7;
    struct shp_rec_module *m = calloc(1, size);
    m->lo = lo;
    m->hi = hi;
    m->path_len = (uint16_t)plen;
    memcpy(m + 1, mpath, plen);
    put(b, m, SHP_REC_MODULE, size, 1);
    free(m);
}

static void start(struct buf *b)
{
    b->p = calloc(1, SHP_HEADER_SIZE);
    b->n = SHP_HEADER_SIZE;
}

static struct shp_ev ev(unsigned op, uint64_t t, uint32_t stack)
{
    return (struct shp_ev){.t = t,
                           .tid = 7,
                           .op = (uint16_t)op,
                           .stack = stack,
                           .device = 0,
                           .dur = 5,
                           .aux = {-1, -1}};
}

static struct shp_rec_coll coll(unsigned op, uint64_t seq, uint64_t count, uint64_t send,
                                uint64_t recv)
{
    return (struct shp_rec_coll){.ev = ev(op, 1000 + seq, 0),
                                 .comm = 0xabcd,
                                 .seq = seq,
                                 .count = count,
                                 .sendbuf = send,
                                 .recvbuf = recv,
                                 .root = -1,
                                 .peer = -1,
                                 .comm_rank = 1,
                                 .nranks = 4,
                                 .dtype = 9 /* bf16 */,
                                 .redop = 0};
}

/* Write b as a trace file with the given header flags; returns its path (static storage). */
static const char *finish(struct buf *b, uint32_t flags, uint64_t tail)
{
    static char path[64];
    struct shp_file_header *h = (struct shp_file_header *)b->p;
    memcpy(h->magic, SHP_TRACE_MAGIC, 8);
    h->version = SHP_TRACE_VERSION;
    h->byte_order = SHP_BYTE_ORDER_MARK;
    h->header_size = SHP_HEADER_SIZE;
    h->flags = flags;
    h->pid = 42;
    h->env_rank = 3;
    h->first_comm_rank = 1;
    h->realtime_ns = 1000000;
    h->monotonic_ns = 1000;
    h->tail = tail ? tail : b->n;
    snprintf(h->host, sizeof(h->host), "unit");
    snprintf(path, sizeof(path), "/tmp/shp-unit-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, b->p, b->n) != (ssize_t)b->n)
        abort();
    close(fd);
    free(b->p);
    b->p = NULL;
    return path;
}

static int count_records(const struct shp_trace *t, struct shp_cursor *c)
{
    unsigned type;
    size_t size;
    int n = 0;
    while (shp_trace_next(t, c, &type, &size))
        n++;
    return n;
}

/* Stack 5: two frames, 0x1234 then 0x5678. */
static void put_stack5(struct buf *b)
{
    struct {
        struct shp_rec_stack s;
        uint64_t frames[2];
    } st = {.s = {.id = 5, .nframes = 2}, .frames = {0x1234, 0x5678}};
    put(b, &st, SHP_REC_STACK, sizeof(st), 1);
}

/* ---- tests ---- */

static void test_reader(void)
{
    test_group("reader");
    struct buf b;
    start(&b);
    struct shp_rec_coll c0 = coll(SHP_OP_ncclAllReduce, 0, 64, 0x1000, 0x1000);
    put(&b, &c0, SHP_REC_COLL, sizeof(c0), 1);
    struct shp_rec_coll c1 = coll(SHP_OP_ncclAllReduce, 1, 64, 0x1000, 0x1000);
    put(&b, &c1, SHP_REC_COLL, sizeof(c1), 1);
    const char *path = finish(&b, SHP_FILE_COMPLETE, 0);
    struct shp_trace t;
    char err[128];
    test_cond("a whole trace opens", shp_trace_open(&t, path, err, sizeof(err)) == 0);
    test_cond("the rank is the environment's", shp_trace_rank(&t) == 3);
    test_cond("wall clock from the header", shp_trace_wall_ns(&t, 1500) == 1000500);
    struct shp_cursor a = {0}, c = {0};
    test_cond("a walk finds both records", count_records(&t, &a) == 2);
    test_cond("and ends at the end", a.off == t.end);
    test_cond("it is complete", shp_trace_complete(&t, &a));
    test_cond("a second walk of the same trace is its own", count_records(&t, &c) == 2);
    shp_trace_close(&t);
    unlink(path);

    /* A writer that died between reserving and publishing: the walk steps over it. */
    start(&b);
    put(&b, &c0, SHP_REC_COLL, sizeof(c0), 1);
    put(&b, &c1, SHP_REC_COLL, sizeof(c1), 0);
    struct shp_rec_coll c2 = coll(SHP_OP_ncclAllReduce, 2, 64, 0x1000, 0x1000);
    put(&b, &c2, SHP_REC_COLL, sizeof(c2), 1);
    path = finish(&b, SHP_FILE_COMPLETE, 0);
    test_cond("a torn trace opens", shp_trace_open(&t, path, err, sizeof(err)) == 0);
    a = (struct shp_cursor){0};
    test_cond("the torn record is stepped over", count_records(&t, &a) == 2);
    test_cond("and counted on the walk", a.torn == 1);
    test_cond("a torn trace is not complete", !shp_trace_complete(&t, &a));
    struct shp_cursor live = {.live = true};
    test_cond("a live walk stops before an unpublished record", count_records(&t, &live) == 1);
    test_cond("where a later walk resumes", live.off == SHP_HEADER_SIZE + sizeof(c0));
    test_cond("and counts nothing torn", live.torn == 0);
    shp_trace_close(&t);
    unlink(path);

    /* The header says more than the file holds. */
    start(&b);
    put(&b, &c0, SHP_REC_COLL, sizeof(c0), 1);
    size_t n = b.n;
    path = finish(&b, SHP_FILE_COMPLETE, n + 4096);
    test_cond("a cut trace opens", shp_trace_open(&t, path, err, sizeof(err)) == 0);
    a = (struct shp_cursor){0};
    test_cond("its records are read", count_records(&t, &a) == 1);
    test_cond("a cut trace is not complete", t.truncated && !shp_trace_complete(&t, &a));
    shp_trace_close(&t);
    unlink(path);

    /* Foreign files. */
    start(&b);
    path = finish(&b, 0, 0);
    FILE *f = fopen(path, "r+");
    fputs("NOTATRACE", f);
    fclose(f);
    test_cond("bad magic is refused", shp_trace_open(&t, path, err, sizeof(err)) == -EINVAL);
    test_cond("with a reason", strstr(err, "bad magic") != NULL);
    f = fopen(path, "w");
    fputs("short", f);
    fclose(f);
    test_cond("a short file is refused", shp_trace_open(&t, path, err, sizeof(err)) == -EINVAL);
    test_cond("saying so", strstr(err, "shorter than a header") != NULL);
    unlink(path);
    test_cond("a missing file gives its errno",
              shp_trace_open(&t, path, err, sizeof(err)) == -ENOENT);
}

static void test_events(void)
{
    test_group("events");
    struct buf b;
    start(&b);
    struct shp_rec_coll ar = coll(SHP_OP_ncclAllReduce, 0, 100, 0x1000, 0x1000);
    put(&b, &ar, SHP_REC_COLL, sizeof(ar), 1);
    struct shp_rec_coll ag = coll(SHP_OP_ncclAllGather, 1, 10, 0x2000, 0x3000);
    put(&b, &ag, SHP_REC_COLL, sizeof(ag), 1);
    struct shp_rec_coll send = coll(SHP_OP_ncclSend, 0, 8, 0x4000, 0x9999);
    send.peer = 2;
    put(&b, &send, SHP_REC_P2P, sizeof(send), 1);
    struct shp_rec_copy cp = {.ev = ev(SHP_OP_cudaMemcpy2D, 2000, 0),
                              .dst = 0x5000,
                              .src = 0x6000,
                              .width = 16,
                              .height = 3,
                              .spitch = 64,
                              .dpitch = 32,
                              .kind = SHP_KIND_D2D};
    put(&b, &cp, SHP_REC_COPY, sizeof(cp), 1);
    /* The same copy in its compact record (version 4), with 2^16 + 3 rows. */
    struct shp_rec_copy2d_c cc = {
        .row = {.h = {.t = 2000, .tid = 7, .op = SHP_OP_cudaMemcpy2D, .done = shp_done(0, 5)},
                .dst_dev = SHP_P48(0x5000, 0),
                .src_kind = SHP_P48(0x6000, SHP_KIND_D2D),
                .stream_slo = SHP_P48(0, 0),
                .bytes_shi = SHP_P48(16, 0)},
        .spitch_hlo = SHP_P48(64, 3),
        .dpitch_hhi = SHP_P48(32, 1)};
    put(&b, &cc, SHP_REC_COPY2D_C, sizeof(cc), 1);
    cp.height = 65539;
    put(&b, &cp, SHP_REC_COPY, sizeof(cp), 1);
    const char *path = finish(&b, SHP_FILE_COMPLETE, 0);
    struct shp_trace t;
    char err[128];
    shp_trace_open(&t, path, err, sizeof(err));
    struct shp_cursor c = {0};
    struct shp_event e[6];
    unsigned type;
    size_t size;
    int n = 0;
    const struct shp_rec *r;
    while (n < 6 && (r = shp_trace_next(&t, &c, &type, &size)))
        test_cond("a call decodes", shp_event_decode(&t, r, type, &e[n++]));
    test_cond("six events", n == 6);
    test_cond("a compact 2-D copy is read as a copy", e[4].type == SHP_REC_COPY);
    test_cond("it says what its full record says (height in two halves)",
              !memcmp(&e[4], &e[5], offsetof(struct shp_event, mark_text)) &&
                  e[4].height == 65539 && e[4].bytes == 16 * 65539);
    struct shp_span rd, wr;
    shp_event_spans(&e[0], &rd, &wr);
    test_cond("all-reduce: bytes by the dtype's size", e[0].bytes == 200);
    test_cond("all-reduce reads its send buffer", rd.start == 0x1000 && rd.len == 200);
    test_cond("and writes its receive buffer, contiguous",
              wr.start == 0x1000 && wr.len == 200 && wr.pitch == 0 && wr.rows == 1);
    shp_event_spans(&e[1], &rd, &wr);
    test_cond("all-gather reads one piece", rd.start == 0x2000 && rd.len == 20);
    test_cond("and writes nranks pieces as rows of one piece",
              wr.start == 0x3000 && wr.len == 80 && wr.pitch == 20 && wr.width == 20);
    shp_event_spans(&e[2], &rd, &wr);
    test_cond("a send reads", rd.start == 0x4000 && rd.len == 16);
    test_cond("and writes nothing", wr.len == 0);
    test_cond("nor has a receive buffer", e[2].dst == SHP_NONE);
    shp_event_spans(&e[3], &rd, &wr);
    test_cond("a 2-D copy reads its rows at the source pitch",
              rd.start == 0x6000 && rd.len == 2 * 64 + 16 && rd.pitch == 64 && rd.width == 16 &&
                  rd.rows == 3);
    test_cond("and writes them at the destination pitch",
              wr.start == 0x5000 && wr.len == 2 * 32 + 16 && wr.pitch == 32 && wr.rows == 3);
    struct shp_event mark = {.type = SHP_REC_MARK};
    shp_event_spans(&mark, &rd, &wr);
    test_cond("a mark reads and writes nothing", rd.len == 0 && wr.len == 0);

    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    shp_event_json(f, &t, NULL, &e[0]);
    fclose(f);
    test_cond("JSON names the op", strstr(out, "\"op\":\"ncclAllReduce\"") != NULL);
    test_cond("and the communicator as 16 hex digits",
              strstr(out, "\"comm\":\"000000000000abcd\"") != NULL);
    test_cond("an unknown stack is null", strstr(out, "\"stack\":null}") != NULL);
    free(out);
    shp_trace_close(&t);
    unlink(path);
}

static void test_stacks(void)
{
    test_group("stacks");
    struct buf b;
    start(&b);
    put_stack5(&b);
    struct shp_rec_coll c0 = coll(SHP_OP_ncclAllReduce, 0, 64, 0x1000, 0x1000);
    c0.ev.stack = 5;
    put(&b, &c0, SHP_REC_COLL, sizeof(c0), 1);
    const char *path = finish(&b, SHP_FILE_COMPLETE, 0);
    struct shp_trace t;
    char err[128];
    shp_trace_open(&t, path, err, sizeof(err));
    struct shp_stacks *s = shp_stacks_load(&t, false);
    size_t n;
    const char *const *fr = shp_stacks_frames(s, 5, &n);
    test_cond("a stack's frames, innermost first", fr && n == 2);
    test_str("unsymbolized frames are addresses", fr ? fr[0] : NULL, "0x1234");
    test_cond("an unknown id has none", !shp_stacks_frames(s, 6, &n) && n == 0);
    char site[64];
    shp_stacks_site(s, 5, site, sizeof(site));
    test_str("the site is the innermost frame", site, "0x1234");
    test_cond("without module records no frame is framework code",
              shp_stacks_site_index(s, 5, NULL) == 0);
    shp_stacks_free(s);
    shp_trace_close(&t);
    unlink(path);

    /* Shared outer frames (SHP_REC_STACK_TAIL): stack 6 is 0x99 then stack 5 from frame 1;
     * stack 7 is 0x77 then stack 6 from frame 1 (its tail's tail); the others are damage. */
    start(&b);
    put_stack5(&b);
    struct {
        struct shp_rec_stack_tail s;
        uint64_t frames[1];
    } t6 = {.s = {.id = 6, .nframes = 1, .tail = 5, .from = 1}, .frames = {0x99}},
      t7 = {.s = {.id = 7, .nframes = 1, .tail = 6, .from = 1}, .frames = {0x77}},
      t8 = {.s = {.id = 8, .nframes = 1, .tail = 9, .from = 0}, .frames = {0x88}},
      t9 = {.s = {.id = 9, .nframes = 1, .tail = 9, .from = 0}, .frames = {0x66}},
      t10 = {.s = {.id = 10, .nframes = 1, .tail = 5, .from = 2}, .frames = {0x55}};
    put(&b, &t6, SHP_REC_STACK_TAIL, sizeof(t6), 1);
    put(&b, &t7, SHP_REC_STACK_TAIL, sizeof(t7), 1);
    put(&b, &t8, SHP_REC_STACK_TAIL, sizeof(t8), 1);
    put(&b, &t9, SHP_REC_STACK_TAIL, sizeof(t9), 1);
    put(&b, &t10, SHP_REC_STACK_TAIL, sizeof(t10), 1);
    path = finish(&b, SHP_FILE_COMPLETE, 0);
    shp_trace_open(&t, path, err, sizeof(err));
    s = shp_stacks_load(&t, false);
    fr = shp_stacks_frames(s, 6, &n);
    test_cond("a stack with a shared tail: its own frames, then the tail's", fr && n == 2);
    test_str("its own first", fr ? fr[0] : NULL, "0x99");
    test_str("then the tail's from `from`", fr && n == 2 ? fr[1] : NULL, "0x5678");
    fr = shp_stacks_frames(s, 7, &n);
    test_cond("a tail's tail is joined too", fr && n == 2);
    test_str("through the stack it names", fr && n == 2 ? fr[1] : NULL, "0x5678");
    fr = shp_stacks_frames(s, 8, &n);
    test_cond("a tail stored after its stack is not followed (its own frames only)", fr && n == 1);
    fr = shp_stacks_frames(s, 9, &n);
    test_cond("nor one that names itself", fr && n == 1);
    fr = shp_stacks_frames(s, 10, &n);
    test_cond("nor a `from` past the stack's end", fr && n == 1);
    shp_stacks_free(s);
    shp_trace_close(&t);
    unlink(path);

    /* The same stack with its modules: the innermost frame is NCCL's, the next the program's. */
    start(&b);
    put_module(&b, "/usr/lib/x86_64-linux-gnu/libnccl.so.2", 0x1000, 0x2000);
    put_module(&b, "/app/serve", 0x5000, 0x6000);
    put_stack5(&b);
    put(&b, &c0, SHP_REC_COLL, sizeof(c0), 1);
    path = finish(&b, SHP_FILE_COMPLETE, 0);
    shp_trace_open(&t, path, err, sizeof(err));
    s = shp_stacks_load(&t, false);
    size_t nw;
    const struct shp_site_frame *w = shp_stacks_where(s, 5, &nw);
    test_cond("each frame has its module", w && nw == 2 && w[0].path && w[1].path);
    test_cond("the site skips NCCL's frame", shp_stacks_site_index(s, 5, NULL) == 1);
    struct shp_site_rule rule = {0};
    shp_site_rule_add(&rule, "/app/*");
    test_cond("a rule of the user's that skips the program too falls back to frame 0",
              shp_stacks_site_index(s, 5, &rule) == 0);
    test_cond("and the cached site of the first rule stays",
              shp_stacks_site_index(s, 5, NULL) == 1);
    shp_site_rule_free(&rule);
    shp_stacks_free(s);
    shp_trace_close(&t);
    unlink(path);

    char fn[128];
    shp_frame_function("generate (x.c:3)", fn, sizeof(fn));
    test_str("function of a frame with a line", fn, "generate");
    shp_frame_function("generate+0x1f (mod.so)", fn, sizeof(fn));
    test_str("function of a frame with an offset", fn, "generate");
    shp_frame_function("py: generate (serve.py:88)", fn, sizeof(fn));
    test_str("function of a Python frame", fn, "generate");
    shp_frame_function("std::function<void (int)>::operator()(int) const (f.cc:9)", fn, sizeof(fn));
    test_str("a C++ name keeps its parentheses", fn,
             "std::function<void (int)>::operator()(int) const");
    shp_frame_function("0x7f12", fn, sizeof(fn));
    test_str("a bare address is returned whole", fn, "0x7f12");
}

/* ---- the session ---- */

/* A trace of pid with a stacked all-reduce, written as dir/name, cut to its first `keep` bytes
 * when keep is not 0. */
static void trace_at(const char *dir, const char *name, uint64_t pid, size_t keep)
{
    struct buf b;
    start(&b);
    put_stack5(&b);
    for (uint64_t seq = 0; seq < 4; seq++) {
        struct shp_rec_coll c = coll(SHP_OP_ncclAllReduce, seq, 64, 0x1000, 0x1000);
        c.ev.stack = 5;
        put(&b, &c, SHP_REC_COLL, sizeof(c), 1);
    }
    size_t n = b.n;
    const char *tmp = finish(&b, SHP_FILE_COMPLETE, 0);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(tmp, "r+b");
    if (!f || fseek(f, offsetof(struct shp_file_header, pid), SEEK_SET) ||
        fwrite(&pid, sizeof(pid), 1, f) != 1 || fclose(f) || rename(tmp, path) ||
        (keep && truncate(path, (off_t)(keep < n ? keep : n))))
        abort();
}

struct sites {
    struct shp_session *s;
    char site[4][64];
};

static void *sites_of(void *arg)
{
    struct sites *x = arg;
    /* Both processes, in turns: each one's stacks load on the first call of any thread. */
    for (int round = 0; round < 200; round++)
        for (size_t i = 0; i < x->s->nprocs; i++) {
            size_t n;
            shp_session_site(x->s, i, 5, x->site[i], sizeof(x->site[i]));
            if (!shp_session_frames(x->s, i, 5, &n) || n != 2)
                x->site[i][0] = 0;
        }
    return NULL;
}

static void test_session(void)
{
    test_group("session");
    char top[] = "/tmp/shp_session.XXXXXX", dir[64], empty[64], one[128], junk[128], cmd[128];
    if (!mkdtemp(top)) {
        test_cond("a temporary directory", 0);
        return;
    }
    snprintf(dir, sizeof(dir), "%s/run", top);
    snprintf(empty, sizeof(empty), "%s/empty", top);
    mkdir(dir, 0700);
    mkdir(empty, 0700);
    trace_at(dir, "a.shptrace", 100, 0);
    trace_at(dir, "b.shptrace", 101, 0);
    snprintf(one, sizeof(one), "%s/a.shptrace", dir);
    snprintf(junk, sizeof(junk), "%s/zero.shptrace", dir);
    fclose(fopen(junk, "w"));
    snprintf(junk, sizeof(junk), "%s/fifo.shptrace", dir);
    mkfifo(junk, 0600);
    snprintf(junk, sizeof(junk), "%s/junk.shptrace", dir);
    FILE *f = fopen(junk, "w");
    for (int i = 0; i < 5000; i++)
        fputc('x', f); /* longer than a header: refused by its magic */
    fclose(f);

    struct shp_session s;
    char *run[] = {dir}, *named[] = {junk}, *none[] = {empty}, *both[] = {empty, dir},
         *twice[] = {dir, one}, *missing[] = {top, dir};
    snprintf(cmd, sizeof(cmd), "%s/nowhere", top);
    missing[0] = cmd;
    test_cond("a run directory opens", shp_session_open(&s, run, 1, 0, "the test") == 0);
    test_cond("its two traces are processes", s.nprocs == 2 && s.procs[0].t.hdr->pid == 100);
    test_cond("the empty, junk and FIFO files are named and skipped, never processes",
              s.nunreadable == 3 && strstr(s.unreadable[0].file, "fifo") &&
                  strstr(s.unreadable[1].why, "bad magic") && strstr(s.unreadable[2].why, "0 "));
    test_cond("the global rank is the header's", s.procs[1].rank == 3);
    test_cond("not walked yet: no events", !s.procs[0].walked && s.procs[0].events == 0);

    /* The analyzer's threads ask for call sites at once: one lock, one load of each. */
    struct sites x[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        memset(&x[i], 0, sizeof(x[i]));
        x[i].s = &s;
        pthread_create(&th[i], NULL, sites_of, &x[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    test_cond("three threads read the same sites", !strcmp(x[0].site[0], "0x1234") &&
                                                       !strcmp(x[1].site[1], "0x1234") &&
                                                       !strcmp(x[2].site[0], x[2].site[1]));
    shp_session_close(&s);

    test_cond("a named junk file is refused", shp_session_open(&s, named, 1, 0, "t") < 0);
    shp_session_close(&s);
    test_cond("an empty directory alone is refused", shp_session_open(&s, none, 1, 0, "t") < 0);
    shp_session_close(&s);
    test_cond("an empty directory beside traces is a note",
              shp_session_open(&s, both, 2, 0, "t") == 0 && s.nprocs == 2);
    shp_session_close(&s);
    test_cond("the same trace twice is refused when asked",
              shp_session_open(&s, twice, 2, SHP_SESSION_UNIQUE, "t") < 0);
    shp_session_close(&s);
    test_cond("and kept otherwise", shp_session_open(&s, twice, 2, 0, "t") == 0 && s.nprocs == 3);
    shp_session_close(&s);
    test_cond("a missing PATH refuses the whole set", shp_session_open(&s, missing, 2, 0, "t") < 0);
    shp_session_close(&s);
    test_cond("or, partial, leaves the others open",
              shp_session_open(&s, missing, 2, SHP_SESSION_PARTIAL, "t") == 1 && s.nprocs == 2);
    shp_session_close(&s);
    test_cond("a missing PATH is no refusal when no trace yet is fine",
              shp_session_open(&s, missing, 1, SHP_SESSION_EMPTY, "t") == 0 && s.nprocs == 0);
    shp_session_close(&s);

    /* status --watch: a file being created joins once it is a trace, a new trace is added, and
     * neither is named again. */
    test_cond("a run directory is watched",
              shp_session_open(&s, run, 1, SHP_SESSION_EMPTY, "t") == 0 && s.nprocs == 2);
    trace_at(dir, "zero.shptrace", 103, 0);
    trace_at(dir, "c.shptrace", 104, 0);
    test_cond("it is looked at again", shp_session_update(&s) == 0);
    test_cond("the file now a trace, and the new one, are processes",
              s.nprocs == 4 && s.procs[2].t.hdr->pid == 104 && s.procs[3].t.hdr->pid == 103);
    test_cond("what is still unreadable stays listed once", s.nunreadable == 2);
    shp_session_close(&s);

    /* One rule of completeness: a file cut short of its header's tail is incomplete, walked
     * or not, whatever its header's flag says. */
    trace_at(empty, "cut.shptrace", 102, SHP_HEADER_SIZE + 400);
    test_cond("a cut trace opens", shp_session_open(&s, none, 1, 0, "t") == 0 && s.nprocs == 1);
    test_cond("a cut trace is incomplete before a walk",
              s.nprocs && !shp_proc_complete(&s.procs[0]));
    struct shp_cursor cur = {0};
    uint64_t events = 0;
    unsigned type;
    size_t size;
    const struct shp_rec *r;
    while (s.nprocs && (r = shp_trace_next(&s.procs[0].t, &cur, &type, &size))) {
        struct shp_event e;
        if (shp_event_decode(&s.procs[0].t, r, type, &e)) {
            events++;
            shp_proc_saw(&s.procs[0], &e);
        }
    }
    if (s.nprocs)
        shp_proc_walked(&s.procs[0], &cur, events);
    test_cond("and after it, with its events and time span",
              s.nprocs && !shp_proc_complete(&s.procs[0]) && s.procs[0].events == events &&
                  s.procs[0].first_ns && s.procs[0].last_ns >= s.procs[0].first_ns);
    test_cond("its reason names the cut", s.nprocs && strstr(shp_proc_incomplete_why(&s.procs[0]),
                                                             "shorter than its header says"));
    shp_session_close(&s);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
    test_cond("clean up", system(cmd) == 0);
}

static void test_allocs(void)
{
    test_group("allocs");
    struct shp_allocs a = {0};
    struct shp_event e = {.type = SHP_REC_ALLOC, .cls = SHP_CLS_ALLOC, .ptr = 0x1000, .size = 256};
    shp_allocs_event(&a, &e);
    e.ptr = 0x100;
    e.size = 16;
    shp_allocs_event(&a, &e);
    test_cond("two blocks, sorted", a.n == 2 && a.v[0].ptr == 0x100 && a.v[1].ptr == 0x1000);
    test_cond("an address inside a block finds it", shp_allocs_find(&a, 0x10ff) == &a.v[1]);
    test_cond("the end of a block is outside it", shp_allocs_find(&a, 0x1100) == NULL);
    test_cond("below every block: none", shp_allocs_find(&a, 0x10) == NULL);
    test_cond("at: only a block's start", shp_allocs_at(&a, 0x1000) && !shp_allocs_at(&a, 0x1001));
    e.ptr = 0x1000;
    e.size = 512;
    shp_allocs_event(&a, &e);
    test_cond("an address handed out again takes the new size", a.n == 2 && a.v[1].size == 512);
    e.result = 2;
    e.ptr = 0x9000;
    shp_allocs_event(&a, &e);
    test_cond("a failed allocation is not tracked", a.n == 2);
    struct shp_event fr = {.type = SHP_REC_ALLOC, .cls = SHP_CLS_FREE, .ptr = 0x100};
    shp_allocs_event(&a, &fr);
    test_cond("a free removes its block", a.n == 1 && !shp_allocs_find(&a, 0x100));
    fr.ptr = 0x1010;
    shp_allocs_event(&a, &fr);
    test_cond("a free of an inner address removes nothing", a.n == 1);
    shp_allocs_clear(&a);
    test_cond("clear forgets every block", a.n == 0);
    /* Past the few blocks kept inline: out of order, then every one found again. */
    bool all = true;
    for (uint64_t k = 0; k < 100; k++) {
        struct shp_event b = {.type = SHP_REC_ALLOC,
                              .cls = SHP_CLS_ALLOC,
                              .ptr = 0x100000 + (k * 37 % 100) * 0x1000,
                              .size = 0x800};
        shp_allocs_event(&a, &b);
    }
    for (uint64_t k = 0; k < 100; k++) {
        const struct shp_alloc *x = shp_allocs_find(&a, 0x100000 + k * 0x1000 + 0x7ff);
        all = all && x && x->ptr == 0x100000 + k * 0x1000 && !shp_allocs_find(&a, x->ptr + 0x800);
    }
    test_cond("a hundred blocks, past those kept inline: each found", a.n == 100 && all);
    shp_allocs_free(&a);
}

/* shp_make_dirs, which the preload and `shapetrace run` both use for the run directory. */
static void test_make_dirs(void)
{
    test_group("make_dirs");
    char top[] = "/tmp/shp_make_dirs.XXXXXX", path[PATH_MAX];
    struct stat st;
    if (!mkdtemp(top)) {
        test_cond("a temporary directory", 0);
        return;
    }
    snprintf(path, sizeof(path), "%s/a/b/c", top);
    test_cond("missing parents are made", shp_make_dirs(path) == 0);
    test_cond("the last part is a directory", stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    test_cond("new directories are 0700", (st.st_mode & 07777) == 0700);
    test_cond("an existing path is fine", shp_make_dirs(path) == 0);
    snprintf(path, sizeof(path), "%s/a/b/c/", top);
    test_cond("a trailing slash is fine", shp_make_dirs(path) == 0);
    snprintf(path, sizeof(path), "%s/file", top);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    test_cond("a file as the last part", shp_make_dirs(path) == -ENOTDIR);
    snprintf(path, sizeof(path), "%s/file/sub", top);
    test_cond("a file in the way", shp_make_dirs(path) == -ENOTDIR);
    test_cond("nothing made under the file", stat(path, &st) != 0);
    char longp[PATH_MAX + 8];
    memset(longp, 'x', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = 0;
    test_cond("a path longer than PATH_MAX", shp_make_dirs(longp) == -ENAMETOOLONG);
    snprintf(path, sizeof(path), "rm -rf '%s'", top);
    test_cond("clean up", system(path) == 0);
}

static volatile sig_atomic_t got_pipe, got_xfsz;
static void on_pipe(int sig)
{
    (void)sig;
    got_pipe++;
}
static void on_xfsz(int sig)
{
    (void)sig;
    got_xfsz++;
}

/* The rest of common/fs.c: what may hold traces, files created for a rename, and the writes
 * that raise no signal in the traced application (issue 22). */
static void test_fs_private(void)
{
    test_group("fs");
    char top[] = "/tmp/shp_fs.XXXXXX", path[PATH_MAX], tmp[PATH_MAX + 32];
    struct stat st;
    if (!mkdtemp(top)) {
        test_cond("a temporary directory", 0);
        return;
    }
    mode_t old = umask(0777);
    snprintf(path, sizeof(path), "%s/u/v", top);
    test_cond("under umask 0777 new directories are still made", shp_make_dirs(path) == 0);
    test_cond("and are 0700", stat(path, &st) == 0 && (st.st_mode & 07777) == 0700);
    const char *why = NULL;
    test_cond("a private directory is a run directory", shp_run_dir(path, &why) == 0 && !why);
    int fd = shp_create_private(path, "name", tmp, sizeof(tmp));
    test_cond("a private file is made", fd >= 0);
    test_cond("mode 0600 whatever the umask",
              fd >= 0 && fstat(fd, &st) == 0 && (st.st_mode & 07777) == 0600);
    char want[PATH_MAX + 8];
    snprintf(want, sizeof(want), "%s/.name.", path);
    test_cond("under a name of its own", !strncmp(tmp, want, strlen(want)));
    if (fd >= 0)
        close(fd);
    umask(old);
    chmod(path, 0777);
    why = NULL;
    test_cond("a directory others can write is refused", shp_run_dir(path, &why) == -EPERM);
    test_str("and says why", why, "writable by others");
    chmod(path, 01777);
    test_cond("sticky makes no difference", shp_run_dir(path, &why) == -EPERM);

    int p[2];
    struct sigaction sa = {.sa_handler = on_pipe}, saved_pipe, saved_xfsz;
    sigaction(SIGPIPE, &sa, &saved_pipe);
    if (pipe(p) == 0) {
        close(p[0]);
        errno = 0;
        test_cond("a write to a pipe nobody reads fails",
                  shp_write_quiet(p[1], "x", 1) < 0 && errno == EPIPE);
        test_cond("and raises no SIGPIPE", got_pipe == 0);
        close(p[1]);
    }
    sigaction(SIGPIPE, &saved_pipe, NULL);

    sa.sa_handler = on_xfsz;
    sigaction(SIGXFSZ, &sa, &saved_xfsz);
    struct rlimit lim, small = {65536, 65536};
    getrlimit(RLIMIT_FSIZE, &lim);
    snprintf(path, sizeof(path), "%s/big", top);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && setrlimit(RLIMIT_FSIZE, &small) == 0) {
        small.rlim_max = lim.rlim_max;
        test_cond("growing past RLIMIT_FSIZE fails", shp_fallocate_quiet(fd, 0, 1 << 20) == EFBIG);
        test_cond("and raises no SIGXFSZ", got_xfsz == 0);
        lseek(fd, 65536, SEEK_SET);
        test_cond("a quiet write past it neither",
                  shp_write_quiet(fd, "x", 1) < 0 && errno == EFBIG && got_xfsz == 0);
        sigset_t block, before, pending;
        sigemptyset(&block);
        sigaddset(&block, SIGXFSZ);
        pthread_sigmask(SIG_BLOCK, &block, &before);
        raise(SIGXFSZ);
        shp_fallocate_quiet(fd, 0, 1 << 20);
        sigpending(&pending);
        test_cond("a SIGXFSZ of the caller's own, pending, stays", sigismember(&pending, SIGXFSZ));
        pthread_sigmask(SIG_SETMASK, &before, NULL);
        test_cond("and is delivered when it unblocks it", got_xfsz == 1);
        test_cond("the caller's own write still raises its SIGXFSZ",
                  write(fd, "x", 1) < 0 && got_xfsz == 2);
        setrlimit(RLIMIT_FSIZE, &lim);
    }
    if (fd >= 0)
        close(fd);
    sigaction(SIGXFSZ, &saved_xfsz, NULL);
    snprintf(path, sizeof(path), "rm -rf '%s'", top);
    test_cond("clean up", system(path) == 0);
}

static void test_out(void)
{
    test_group("out");
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    shp_json_str(f, "a\"b\\c\nd\te\x01");
    fputc(' ', f);
    shp_json_str(f, NULL);
    fclose(f);
    test_str("JSON strings are escaped, NULL is null", out, "\"a\\\"b\\\\c\\nd\\te\\u0001\" null");
    free(out);

    /* The writer's numbers against printf's, and a run longer than its buffer. */
    f = open_memstream(&out, &len);
    static struct shp_out o;
    shp_out_init(&o, f);
    char want[4096] = "";
    const uint64_t u[] = {0, 9, 10, 99, 100, 101, 999, 1000, 12345678901234567890u, UINT64_MAX};
    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
        shp_out_u64(&o, u[i]);
        shp_out_char(&o, ' ');
        shp_out_hex(&o, u[i], 1);
        shp_out_char(&o, ' ');
        shp_out_hex(&o, u[i], 16);
        shp_out_char(&o, ' ');
        size_t w = strlen(want);
        snprintf(want + w, sizeof(want) - w, "%" PRIu64 " %" PRIx64 " %016" PRIx64 " ", u[i], u[i],
                 u[i]);
    }
    const int v[] = {0, -1, 7, -10, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        shp_out_int(&o, v[i]);
        shp_out_char(&o, ' ');
        size_t w = strlen(want);
        snprintf(want + w, sizeof(want) - w, "%d ", v[i]);
    }
    shp_out_flush(&o);
    fflush(f);
    test_str("the writer's decimal and hex are printf's", out, want);
    for (int i = 0; i < 3 * SHP_OUT_BUF / 8; i++)
        shp_out_mem(&o, "abcdefg\n", 8);
    shp_out_flush(&o);
    fclose(f);
    size_t head = strlen(want), bad = 0;
    for (size_t i = 0; i < 3 * SHP_OUT_BUF; i++)
        bad += out[head + i] != "abcdefg\n"[i % 8];
    test_cond("a run three buffers long comes out whole and in order",
              len == head + 3 * SHP_OUT_BUF && bad == 0);
    free(out);
}

static struct shp_clock_pair pair(uint64_t tsc, uint64_t ns)
{
    return (struct shp_clock_pair){tsc, ns, shp_clock_pair_check(tsc, ns)};
}

static void test_clock(void)
{
    test_group("clock");
    static struct shp_file_header h;
    struct shp_trace t = {.hdr = &h};
    h.clock = SHP_CLOCK_MONOTONIC;
    shp_trace_clock_setup(&t, &h);
    test_cond("a monotonic trace's times are nanoseconds already",
              shp_trace_mono_ns(&t, 123456789) == 123456789 && shp_trace_dur_ns(&t, 77) == 77);
    h.clock = SHP_CLOCK_TSC;
    h.clock_first = pair(1000000, 5000000);
    h.clock_pairs[0] = pair(3000000, 6000000); /* 0.5 ns a tick */
    h.clock_pairs[1] = pair(9000000, 7000000);
    h.clock_pairs[1].check ^= 2; /* torn: its writer died between the stores */
    shp_trace_clock_setup(&t, &h);
    test_cond("the rate of the latest pair that holds",
              !t.clock_guessed && shp_trace_mono_ns(&t, 2000000) == 5500000 &&
                  shp_trace_dur_ns(&t, 1000) == 500);
    test_cond("a time before the first pair converts backwards",
              shp_trace_mono_ns(&t, 0) == 4500000);
    h.clock_pairs[2] = pair(5000000, 8000000); /* 0.75 ns a tick, later than pairs[0] */
    shp_trace_clock_setup(&t, &h);
    test_cond("a later pair wins", shp_trace_mono_ns(&t, 3000000) == 6500000);
    memset(h.clock_pairs, 0, sizeof(h.clock_pairs));
    shp_trace_clock_setup(&t, &h);
    test_cond("without a pair that holds: one tick taken as one ns, and said so",
              t.clock_guessed && shp_trace_dur_ns(&t, 42) == 42);
    h.clock_pairs[0] = pair(500, 6000000); /* before the first pair: damage */
    shp_trace_clock_setup(&t, &h);
    test_cond("a pair older than the first is not trusted", t.clock_guessed);
}

/* ---- outputs replaced whole (outfile.c) ---- */

/* The names in dir besides "out", in one string (hidden ones included). */
static void others_in(const char *dir, char *buf, size_t cap)
{
    buf[0] = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "out"))
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s ", e->d_name);
    if (d)
        closedir(d);
}

static void put_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void read_into(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
}

/* One output through each way of making the new file: named from the start (a .part beside
 * FILE while it is written), or, where the filesystem makes one, without a name until commit. */
static void test_outfile(void)
{
    test_group("outfile");
    char dir[] = "/tmp/shapetrace-outfile-XXXXXX", path[64], others[512], text[64];
    if (!mkdtemp(dir)) {
        test_cond("a directory for the outputs", 0);
        return;
    }
    snprintf(path, sizeof(path), "%s/out", dir);
    put_text(path, "old");
    chmod(path, 0640);
    int probe = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (probe >= 0)
        close(probe);
    for (int named = 1; named >= 0; named--) {
        const char *how = named ? "named" : "unnamed";
        if (!named && probe < 0) {
            printf("NOT RUN outfile: unnamed: %s makes no file without a name (O_TMPFILE)\n", dir);
            break;
        }
        /* abort: the old file as it was, nothing beside it */
        struct shp_outfile o = {0};
        int fd = named ? shp_outfile_open_named(&o, path) : shp_outfile_open(&o, path);
        test_condf(fd >= 0, "%s: a descriptor", how);
        others_in(dir, others, sizeof(others));
        size_t n = strlen(others);
        if (named)
            test_condf(n > 6 && !strncmp(others, ".out.", 5) && !strcmp(others + n - 6, ".part "),
                       "named: a hidden .part beside FILE while it is written (%s)", others);
        else
            test_condf(n == 0, "unnamed: nothing beside FILE while it is written (%s)", others);
        test_condf(write(fd, "half", 4) == 4, "%s: written", how);
        close(fd);
        shp_outfile_abort(&o);
        read_into(path, text, sizeof(text));
        others_in(dir, others, sizeof(others));
        test_condf(!strcmp(text, "old") && !others[0],
                   "%s: abort leaves FILE (%s) and nothing "
                   "beside it (%s)",
                   how, text, others);
        /* commit: the new bytes in FILE's place, with its mode, nothing beside it */
        fd = named ? shp_outfile_open_named(&o, path) : shp_outfile_open(&o, path);
        char want[32];
        snprintf(want, sizeof(want), "new %s", how);
        test_condf(fd >= 0 && write(fd, want, strlen(want)) == (ssize_t)strlen(want), "%s: written",
                   how);
        close(fd);
        test_condf(shp_outfile_commit(&o) == 0, "%s: committed", how);
        read_into(path, text, sizeof(text));
        others_in(dir, others, sizeof(others));
        struct stat st;
        test_condf(!strcmp(text, want) && !others[0] && !stat(path, &st) &&
                       (st.st_mode & 0777) == 0640 && st.st_nlink == 1,
                   "%s: commit puts the new bytes (%s) in FILE's place with its mode, nothing "
                   "beside it (%s)",
                   how, text, others);
        put_text(path, "old");
    }
    /* a FILE that did not exist, named without a directory: made in the current one */
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) && chdir(dir) == 0) {
        unlink("out");
        struct shp_outfile o = {0};
        int fd = shp_outfile_open(&o, "out");
        test_cond("a new FILE in the current directory: written and committed",
                  fd >= 0 && write(fd, "x", 1) == 1 && !close(fd) && !shp_outfile_commit(&o));
        read_into("out", text, sizeof(text));
        test_str("a new FILE in the current directory: its bytes", text, "x");
        (void)!chdir(cwd);
    }
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_clock();
    test_reader();
    test_events();
    test_stacks();
    test_allocs();
    test_out();
    test_outfile();
    test_make_dirs();
    test_fs_private();
    test_session();
    return test_report();
}
