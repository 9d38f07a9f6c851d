/* shapetrace tools: attaching to a live process without harming it (ptrace.h). PTRACE_SEIZE
 * sends no SIGSTOP, so no group stop is started that could outlive us: when this command dies
 * (even by SIGKILL) the kernel detaches its tracees and a thread in a ptrace stop runs on.
 * PTRACE_O_EXITKILL is never set, nor any option that would make the target's fate ours. */
#define _GNU_SOURCE
#include "tools/lib/ptrace.h"

#include <dirent.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/lib/out.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct shp_pt_thread *find_thread(struct shp_pt_proc *p, pid_t tid)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].tid == tid)
            return &p->t[i];
    return NULL;
}

/* The signals that would end or stop this command while a target is stopped under it; and
 * SIGCHLD, which the kernel sends as each tracee stops, and which wait_stops waits for. */
static void block_signals(struct shp_pt_proc *p)
{
    sigset_t s;
    sigemptyset(&s);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU, SIGCHLD};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaddset(&s, sigs[i]);
    if (!p->masked && sigprocmask(SIG_BLOCK, &s, &p->saved_mask) == 0)
        p->masked = true;
}

/* Whether thread tid of pid has exited and waits to be reaped (state Z in its stat). */
static bool is_zombie(pid_t pid, pid_t tid)
{
    char path[64], text[512];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return true; /* gone altogether */
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *paren = strrchr(text, ')'); /* the name may hold spaces and parentheses */
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* Seizes and interrupts each thread of /proc/PID/task not seen yet. Returns the number of new
 * threads, or a negative errno when the task list cannot be read or the first seize fails. */
static int seize_new(struct shp_pt_proc *p)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)p->pid);
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? -ESRCH : -errno;
    int added = 0, first_err = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long tid = strtol(de->d_name, &end, 10);
        if (*end || tid <= 0 || find_thread(p, (pid_t)tid))
            continue;
        if (!shp_grow((void **)&p->t, &p->cap, p->n, sizeof(*p->t))) {
            first_err = -ENOMEM;
            break;
        }
        struct shp_pt_thread *t = &p->t[p->n];
        *t = (struct shp_pt_thread){.tid = (pid_t)tid};
        if (ptrace(PTRACE_SEIZE, (pid_t)tid, NULL, NULL) != 0) {
            int e = errno;
            /* This thread exited (or is a zombie whose process lives on, a main thread that
             * called pthread_exit): the others may still be there. */
            if (e == ESRCH || (e == EPERM && is_zombie(p->pid, (pid_t)tid)))
                continue;
            if (!first_err)
                first_err = -e;
            break;
        }
        t->seized = true;
        p->n++;
        added++;
        if (!p->stop_ns)
            p->stop_ns = now_ns();
        if (ptrace(PTRACE_INTERRUPT, (pid_t)tid, NULL, NULL) != 0 && errno == ESRCH)
            t->gone = true;
    }
    closedir(d);
    return first_err ? first_err : added;
}

/* Takes what waitpid said about t. */
static void took_status(struct shp_pt_thread *t, int st)
{
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
        t->gone = true;
        t->seized = false;
        return;
    }
    if (!WIFSTOPPED(st))
        return;
    int sig = WSTOPSIG(st), event = st >> 16;
    t->stopped = true;
    if (event == PTRACE_EVENT_STOP) {
        /* A group stop reports its stop signal; our interrupt reports SIGTRAP. */
        t->group_stop = sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
    } else if (event == 0) {
        /* A signal arrived before our interrupt (ours reports as PTRACE_EVENT_STOP): the
         * thread stopped to deliver it, and takes it when we let go. */
        t->sig = sig;
    }
}

/* Waits until every seized thread has stopped or exited, or until the deadline. Returns the
 * number still running. */
static unsigned wait_stops(struct shp_pt_proc *p, uint64_t deadline)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    for (;;) {
        unsigned running = 0;
        for (size_t i = 0; i < p->n; i++) {
            struct shp_pt_thread *t = &p->t[i];
            if (!t->seized || t->stopped || t->gone)
                continue;
            int st;
            pid_t r = waitpid(t->tid, &st, __WALL | WNOHANG);
            if (r == t->tid)
                took_status(t, st);
            else if (r < 0 && errno == ECHILD)
                t->gone = true, t->seized = false;
            running += t->seized && !t->stopped && !t->gone;
        }
        uint64_t now = now_ns();
        if (!running || now >= deadline)
            return running;
        /* Woken by the next stop's SIGCHLD (blocked, so none is lost between the polls), or
         * after a millisecond at most to look again. */
        uint64_t wait = deadline - now < 1000000 ? deadline - now : 1000000;
        struct timespec ts = {0, (long)wait};
        sigtimedwait(&chld, NULL, &ts);
    }
}

int shp_pt_attach(struct shp_pt_proc *p, pid_t pid, char *err, size_t errlen)
{
    struct shp_pt_facts facts;
    int rc;
    p->pid = pid;
    p->n = 0;
    p->late = 0;
    p->stop_ns = p->resume_ns = 0;
    block_signals(p);
    uint64_t deadline = now_ns() + SHP_PT_STOP_DEADLINE_MS * 1000000ull;
    /* Threads made before their maker stopped show in the next listing; once every listed
     * thread is stopped, none can make another. */
    for (int round = 0; round < 16; round++) {
        rc = seize_new(p);
        if (rc < 0)
            goto out;
        if (rc == 0 && round > 0)
            break;
        wait_stops(p, deadline);
    }
    p->late = wait_stops(p, deadline);
    rc = -ESRCH;
    for (size_t i = 0; i < p->n; i++) {
        struct shp_pt_thread *t = &p->t[i];
        if (!t->stopped || t->gone)
            continue;
        t->regs_ok = ptrace(PTRACE_GETREGS, t->tid, NULL, &t->regs) == 0;
        rc = 0;
    }
out:
    if (rc < 0) {
        shp_pt_facts(pid, &facts);
        shp_pt_refusal(pid, -rc, &facts, err, errlen);
        shp_pt_detach(p);
    }
    return rc;
}

void shp_pt_detach(struct shp_pt_proc *p)
{
    /* A late thread still owes us its stop; give it a moment, then leave it to the kernel,
     * which lets it go when this command exits. */
    if (p->late)
        wait_stops(p, now_ns() + 50 * 1000000ull);
    for (size_t i = 0; i < p->n; i++) {
        struct shp_pt_thread *t = &p->t[i];
        if (!t->seized || !t->stopped)
            continue;
        /* A thread that took a signal while stopped (SIGKILL aside) is still ours to let go;
         * ESRCH here means it is gone. */
        ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(intptr_t)t->sig);
        t->seized = false;
        t->stopped = false;
    }
    if (p->stop_ns && !p->resume_ns)
        p->resume_ns = now_ns();
    if (p->masked) {
        sigprocmask(SIG_SETMASK, &p->saved_mask, NULL);
        p->masked = false;
    }
}

void shp_pt_free(struct shp_pt_proc *p)
{
    free(p->t);
    p->t = NULL;
    p->n = p->cap = 0;
}

ssize_t shp_pt_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    struct iovec local = {buf, len}, remote = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    return n < 0 ? -errno : n;
}

/* The value after "Name:" in /proc/PID/status, or -1. */
static long status_field(const char *text, const char *name)
{
    const char *p = strstr(text, name);
    return p ? strtol(p + strlen(name), NULL, 10) : -1;
}

static void read_small(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

void shp_pt_facts(pid_t pid, struct shp_pt_facts *f)
{
    char path[64], text[4096];
    *f = (struct shp_pt_facts){.uid = -1, .our_uid = (long)geteuid(), .yama = -1};
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    read_small(path, text, sizeof(text));
    long tracer = status_field(text, "\nTracerPid:");
    f->tracer = tracer > 0 ? (pid_t)tracer : 0;
    f->uid = status_field(text, "\nUid:");
    if (f->tracer) {
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)f->tracer);
        read_small(path, f->tracer_comm, sizeof(f->tracer_comm));
        f->tracer_comm[strcspn(f->tracer_comm, "\n")] = '\0';
    }
    if (f->uid >= 0) {
        struct passwd pw, *res = NULL;
        char buf[1024];
        if (getpwuid_r((uid_t)f->uid, &pw, buf, sizeof(buf), &res) == 0 && res)
            snprintf(f->owner, sizeof(f->owner), "%s", pw.pw_name);
    }
    read_small("/proc/sys/kernel/yama/ptrace_scope", text, sizeof(text));
    if (text[0] >= '0' && text[0] <= '9')
        f->yama = atoi(text);
    read_small("/proc/self/status", text, sizeof(text));
    const char *cap = strstr(text, "\nCapEff:");
    unsigned long long eff = cap ? strtoull(cap + 8, NULL, 16) : 0;
    f->privileged = (eff >> 19) & 1; /* CAP_SYS_PTRACE */
}

void shp_pt_refusal(pid_t pid, int e, const struct shp_pt_facts *f, char *out, size_t len)
{
    if (e == ESRCH) {
        snprintf(out, len, "pid %d exited before it could be read (skipped)", (int)pid);
    } else if (e == EPERM && f->tracer) {
        snprintf(out, len,
                 "pid %d is already traced by pid %d (%s), a debugger or another snapshot: "
                 "detach it first",
                 (int)pid, (int)f->tracer, f->tracer_comm[0] ? f->tracer_comm : "?");
    } else if (e == EPERM && f->uid >= 0 && f->uid != f->our_uid && !f->privileged) {
        snprintf(out, len,
                 "pid %d belongs to user %s (uid %ld), not to you: run shapetrace snapshot as "
                 "that user, or as root",
                 (int)pid, f->owner[0] ? f->owner : "?", f->uid);
    } else if (e == EPERM && f->yama == 1 && !f->privileged) {
        snprintf(out, len,
                 "pid %d: kernel.yama.ptrace_scope is 1, so only a process's ancestors may "
                 "trace it: run shapetrace snapshot as root, or allow it with "
                 "'sysctl kernel.yama.ptrace_scope=0'",
                 (int)pid);
    } else if (e == EPERM && f->yama == 2 && !f->privileged) {
        snprintf(out, len,
                 "pid %d: kernel.yama.ptrace_scope is 2, so only root (CAP_SYS_PTRACE) may "
                 "trace: run shapetrace snapshot as root",
                 (int)pid);
    } else if (e == EPERM && f->yama == 3) {
        snprintf(out, len,
                 "pid %d: kernel.yama.ptrace_scope is 3, so no process may be traced until the "
                 "machine reboots",
                 (int)pid);
    } else if (e == EPERM) {
        snprintf(out, len,
                 "pid %d cannot be traced (EPERM): it is not dumpable (setuid, or "
                 "PR_SET_DUMPABLE 0), or this container lacks CAP_SYS_PTRACE",
                 (int)pid);
    } else {
        snprintf(out, len, "pid %d cannot be traced: %s", (int)pid, strerror(e));
    }
}
