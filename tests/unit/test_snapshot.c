/* shapetrace unit tests: what shapetrace snapshot says without a live process: the refusal lines
 * (Yama's scopes cannot be set on the test machine), the job view of made-up jobs (a vLLM-like
 * decode step where one rank left the loop, a desync of two call sites, ranks behind on a
 * communicator, a worker thread that makes the collectives), its JSON read back by --merge, the
 * merge rule of Python frames and the shared CPython layouts. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/pylayout.h"
#include "tests/unit/harness.h"
#include "tools/lib/ptrace.h"
#include "tools/lib/snapshot.h"
#include "tools/lib/stacks.h"

static void test_refusals(void)
{
    test_group("refusals");
    char out[512];
    struct shp_pt_facts f = {.uid = 1000, .our_uid = 1000, .yama = 0};
    shp_pt_refusal(42, ESRCH, &f, out, sizeof(out));
    test_str("a process that exited", out, "pid 42 exited before it could be read (skipped)");
    f.tracer = 7;
    snprintf(f.tracer_comm, sizeof(f.tracer_comm), "gdb");
    shp_pt_refusal(42, EPERM, &f, out, sizeof(out));
    test_str("a debugger holds it", out,
             "pid 42 is already traced by pid 7 (gdb), a debugger or another snapshot: detach it "
             "first");
    f = (struct shp_pt_facts){.uid = 0, .our_uid = 1000, .yama = 1};
    snprintf(f.owner, sizeof(f.owner), "root");
    shp_pt_refusal(42, EPERM, &f, out, sizeof(out));
    test_str("another user's process", out,
             "pid 42 belongs to user root (uid 0), not to you: run shapetrace snapshot as that "
             "user, or as root");
    f = (struct shp_pt_facts){.uid = 1000, .our_uid = 1000, .yama = 1};
    shp_pt_refusal(42, EPERM, &f, out, sizeof(out));
    test_str("ptrace_scope 1", out,
             "pid 42: kernel.yama.ptrace_scope is 1, so only a process's ancestors may trace it: "
             "run shapetrace snapshot as root, or allow it with 'sysctl "
             "kernel.yama.ptrace_scope=0'");
    f.yama = 2;
    shp_pt_refusal(42, EPERM, &f, out, sizeof(out));
    test_str("ptrace_scope 2", out,
             "pid 42: kernel.yama.ptrace_scope is 2, so only root (CAP_SYS_PTRACE) may trace: run "
             "shapetrace snapshot as root");
    f.yama = 3;
    f.privileged = true;
    shp_pt_refusal(42, EPERM, &f, out, sizeof(out));
    test_str("ptrace_scope 3, even for root", out,
             "pid 42: kernel.yama.ptrace_scope is 3, so no process may be traced until the machine "
             "reboots");
    f = (struct shp_pt_facts){.uid = 1000, .our_uid = 1000, .yama = -1};
    shp_pt_refusal(42, EPERM, &f, out, sizeof(out));
    test_cond("anything else names dumpable and the capability",
              strstr(out, "not dumpable") && strstr(out, "CAP_SYS_PTRACE"));
}

/* ---- made-up jobs ---- */

static void add_thread(struct shp_snap_proc *p, pid_t tid, const char *name, const char *in,
                       const char *waiting, const char *const *frames, size_t n, long site)
{
    p->threads = realloc(p->threads, (p->nthreads + 1) * sizeof(*p->threads));
    struct shp_snap_thread *t = &p->threads[p->nthreads++];
    *t = (struct shp_snap_thread){.tid = tid, .stopped = true};
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->in = in ? strdup(in) : NULL;
    t->collective = in && !strncmp(in, "nccl", 4);
    t->waiting = strdup(waiting);
    t->frames = calloc(n, sizeof(*t->frames));
    for (size_t i = 0; i < n; i++)
        t->frames[i] = strdup(frames[i]);
    t->nframes = n;
    t->has_site = site >= 0;
    t->site = site >= 0 ? (size_t)site : 0;
}

static const char *const decode[] = {
    "__futex_abstimed_wait_common (libc.so.6)",
    "cudaStreamSynchronize+0x5b (libcudart.so.13)",
    "at::native::_local_scalar_dense_cuda(at::Tensor const&)+0x1a (libtorch_cuda.so)",
    "py: decode_step (/app/serve.py:58)",
    "py: generate (/app/serve.py:71)",
};
static const char *const sleeping[] = {
    "clock_nanosleep (libc.so.6)",
    "py: warmup (/app/serve.py:40)",
    "py: generate (/app/serve.py:69)",
};
static const char *const watchdog[] = {
    "__futex_abstimed_wait_common (libc.so.6)",
    "cudaEventQuery+0x10 (libcudart.so.13)",
    "c10d::ProcessGroupNCCL::watchdogHandler()+0x30 (libtorch_cuda.so)",
};

static const char *const launcher[] = {
    "clock_nanosleep (libc.so.6)",
    "py: _invoke_run (/usr/lib/python3/site-packages/torch/distributed/elastic/agent/server/"
    "api.py:900)",
    "py: <module> (/usr/bin/torchrun:8)",
};

static struct shp_snap_proc *add_proc(struct shp_snap_job *job, int rank, pid_t pid)
{
    struct shp_snap_proc *p = shp_snap_job_add(job);
    snprintf(p->host, sizeof(p->host), "node%d", rank / 4);
    snprintf(p->name, sizeof(p->name), "python3");
    p->pid = pid;
    p->rank = rank;
    p->rank_from = "env";
    p->world_size = 8;
    return p;
}

/* The job view's text, into a malloc'd string. */
static char *view(struct shp_snap_job *job)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    shp_snap_print_text(f, job, false, false);
    fclose(f);
    return text;
}

static char *line(const char *text, int n)
{
    static char buf[1024];
    for (int i = 0; i < n && text; i++) {
        text = strchr(text, '\n');
        text = text ? text + 1 : NULL;
    }
    snprintf(buf, sizeof(buf), "%.*s", text ? (int)strcspn(text, "\n") : 0, text ? text : "");
    return buf;
}

static void test_decode_loop(void)
{
    test_group("a rank left the decode loop");
    struct shp_snap_job job = {0};
    for (int r = 0; r < 8; r++) {
        struct shp_snap_proc *p = add_proc(&job, r, 100 + r);
        if (r == 6)
            add_thread(p, p->pid, "python3", NULL, "clock_nanosleep", sleeping, 3, 1);
        else
            add_thread(p, p->pid, "python3", "cudaStreamSynchronize",
                       "__futex_abstimed_wait_common", decode, 5, 3);
        /* torch's watchdog thread: in CUDA, but in no code of the user's */
        add_thread(p, p->pid + 50, "pt_nccl_watchdg", "cudaEventQuery",
                   "__futex_abstimed_wait_common", watchdog, 3, -1);
        p->focus = shp_snap_focus(p);
    }
    /* torchrun's agent maps libnccl too, and has no rank */
    struct shp_snap_proc *agent = add_proc(&job, -1, 99);
    agent->rank_from = NULL;
    add_thread(agent, 99, "torchrun", NULL, "clock_nanosleep", launcher, 3, 2);
    test_cond("the main thread is read, not the watchdog", job.procs[0].focus == 0);
    char *text = view(&job);
    test_str("headline", line(text, 0), "shapetrace snapshot: 9 processes, 3 places");
    test_str("the rank the others wait for", line(text, 1),
             "waiting for rank 6: not in a GPU library, while ranks 0-5, 7 are");
    test_str("its place first", line(text, 2),
             "  rank 6: main thread in clock_nanosleep (not in a GPU library) at warmup "
             "(/app/serve.py:40)");
    test_str("then the others'", line(text, 3),
             "  ranks 0-5, 7: main thread in cudaStreamSynchronize at decode_step "
             "(/app/serve.py:58)");
    test_str("a process without a rank last, waited for by none", line(text, 4),
             "  pid 99: main thread in clock_nanosleep (not in a GPU library) at <module> "
             "(/usr/bin/torchrun:8)");
    free(text);

    /* --merge: what -o wrote reads back to the same view */
    char path[] = "/tmp/shapetrace-unit-snapXXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    shp_snap_print_json(f, &job);
    fclose(f);
    struct shp_snap_job back = {0};
    char err[256] = "";
    test_cond("the JSON reads back", shp_snap_load_json(&back, path, err, sizeof(err)) == 0);
    char *a = view(&job), *b = view(&back);
    test_str("to the same view", b, a);
    test_cond("with every thread and frame",
              back.n == 9 && back.procs[3].nthreads == 2 && back.procs[3].threads[0].nframes == 5);
    free(a);
    free(b);
    shp_snap_job_free(&back);
    f = fopen(path, "w");
    fputs("{\"kind\": \"shapetrace snapshot\", \"processes\": [{\"pid\": 1, \"threads\": "
          "[{\"tid\": \"x\"}]}]}",
          f);
    fclose(f);
    test_cond("a wrong type is refused",
              shp_snap_load_json(&back, path, err, sizeof(err)) == -EINVAL && back.n == 0);
    test_cond("naming the place", strstr(err, "processes[0].threads[0].tid is not a number"));
    shp_snap_job_free(&back);
    unlink(path);
    shp_snap_job_free(&job);
}

static const char *const at_a[] = {"pncclAllReduce (libnccl.so.2)", "py: row_parallel (tp.py:30)"};
static const char *const at_b[] = {"pncclAllReduce (libnccl.so.2)", "py: col_parallel (tp.py:21)"};

static void test_desync_and_behind(void)
{
    test_group("two call sites, no traces");
    struct shp_snap_job job = {0};
    for (int r = 0; r < 4; r++) {
        struct shp_snap_proc *p = add_proc(&job, r, 200 + r);
        add_thread(p, p->pid, "python3", "ncclAllReduce", "syscall", r == 2 ? at_b : at_a, 2, 1);
    }
    char *text = view(&job);
    test_str("no rank is named as waited for", line(text, 1),
             "  rank 2: main thread in ncclAllReduce at col_parallel (tp.py:21)");
    test_str("the minority first", line(text, 2),
             "  ranks 0, 1, 3: main thread in ncclAllReduce at row_parallel (tp.py:30)");
    free(text);

    test_group("traces: the rank behind");
    for (size_t i = 0; i < job.n; i++) {
        struct shp_snap_proc *p = &job.procs[i];
        p->trace = strdup("t.shptrace");
        p->comms = calloc(1, sizeof(*p->comms));
        p->ncomms = 1;
        p->comms[0] = (struct shp_snap_comm){
            .id = 0x1234abcd00000000ull, .seq = i == 2 ? 6 : 7, .in_flight = true};
        snprintf(p->comms[0].op, sizeof(p->comms[0].op), "ncclAllReduce");
        p->last = p->comms[0];
    }
    text = view(&job);
    test_str("named by its seq", line(text, 1),
             "waiting for rank 2: behind on communicator 1234abcd (its last collective #6; others "
             "at #7)");
    test_str("with the collective it is at", line(text, 2),
             "  rank 2: main thread in ncclAllReduce #6 at col_parallel (tp.py:21)");
    free(text);
    shp_snap_job_free(&job);
}

static const char *const joining[] = {
    "__futex_abstimed_wait_common (libc.so.6)",
    "py: _wait_for_tstate_lock (/usr/lib/python3.12/threading.py:1167)",
    "py: main (/app/worker.py:80)"};

static void test_focus(void)
{
    test_group("the thread the view reads");
    struct shp_snap_job job = {0};
    struct shp_snap_proc *p = add_proc(&job, 0, 300);
    add_thread(p, 300, "python3", NULL, "__futex_abstimed_wait_common", joining, 3, 2);
    add_thread(p, 305, "pt_nccl_watchdg", "cudaEventQuery", "x", watchdog, 3, -1);
    add_thread(p, 309, "python3", "ncclAllReduce", "syscall", at_a, 2, 1);
    test_cond("a thread in NCCL at the user's line, over a main thread that joins it",
              shp_snap_focus(p) == 2);
    p->threads[2].has_site = false;
    test_cond("else the main thread at the user's line", shp_snap_focus(p) == 0);
    shp_snap_job_free(&job);
}

static void test_merge_rule(void)
{
    test_group("Python frames among native ones");
    /* innermost first: libc, then an eval run (interp, eval, interp), a C extension, an eval */
    int cls[] = {SHP_NATIVE_OTHER,  SHP_NATIVE_INTERP, SHP_NATIVE_EVAL,
                 SHP_NATIVE_INTERP, SHP_NATIVE_OTHER,  SHP_NATIVE_EVAL};
    bool entry[] = {false, true, true};
    struct shp_merged_frame out[9];
    size_t n = shp_py_merge(cls, 6, entry, 3, out);
    char got[64] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%c%u", i ? " " : "",
                 out[i].python ? 'p' : 'n', out[i].index);
    test_str("each eval run gives way to its group", got, "n0 p0 p1 n4 p2");
    n = shp_py_merge(cls, 1, entry, 3, out);
    got[0] = '\0';
    for (size_t i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%c%u", i ? " " : "",
                 out[i].python ? 'p' : 'n', out[i].index);
    test_str("without eval frames, after the native ones", got, "n0 p0 p1 p2");
}

static void test_scrub(void)
{
    test_group("text from the processes");
    char name[] = "evil\033[2J\n\x7f";
    shp_snap_scrub(name);
    test_str("control characters become '?'", name, "evil?[2J??");
    shp_snap_scrub(NULL);
}

static void test_layouts(void)
{
    test_group("CPython layouts");
    test_cond("3.10 to 3.12 from the table", shp_py_layout_table(10) && shp_py_layout_table(12) &&
                                                 !shp_py_layout_table(13) &&
                                                 !shp_py_layout_table(9));
    test_cond("3.11 names native thread ids, 3.10 does not",
              shp_py_layout_table(11)->ts_native_tid == 160 &&
                  shp_py_layout_table(10)->ts_native_tid == -1);
    struct shp_py_debug_offsets d = {0};
    struct shp_py_layout L;
    test_cond("debug offsets without their cookie are refused",
              !shp_py_layout_from_debug(&d, 0x030d00f0, &L));
    const unsigned char latin[] = {'c', 0xe9};
    char out[8];
    size_t n = shp_py_str_utf8(latin, 1, false, 2, out, sizeof(out));
    test_cond("a latin-1 str as UTF-8", n == 3 && !memcmp(out, "c\xc3\xa9", 3));
    const uint16_t sur[] = {0xd800};
    n = shp_py_str_utf8((const unsigned char *)sur, 2, false, 1, out, sizeof(out));
    test_cond("a lone surrogate as '?'", n == 1 && out[0] == '?');
}

int main(void)
{
    test_refusals();
    test_decode_loop();
    test_desync_and_behind();
    test_focus();
    test_merge_rule();
    test_scrub();
    test_layouts();
    return test_report();
}
