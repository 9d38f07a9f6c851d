/* shapetrace tools: stopping every thread of another process for as short a time as possible
 * (PTRACE_SEIZE and PTRACE_INTERRUPT: no signal is sent to it), reading its registers and memory,
 * and letting it go on every path. */
#ifndef SHAPETRACE_PTRACE_H
#define SHAPETRACE_PTRACE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

/* One thread of a stopped process. */
struct shp_pt_thread {
    pid_t tid;
    bool seized;     /* traced by us (PTRACE_SEIZE succeeded) */
    bool stopped;    /* in a ptrace stop now: its registers and memory hold still */
    bool gone;       /* it exited while we looked */
    bool group_stop; /* it reported a group stop (a SIGSTOP from someone else): it stays stopped
                      * after we let go, as it would have without us */
    int sig;         /* the signal it was about to take when it stopped: passed on at detach */
    bool regs_ok;
    struct user_regs_struct regs;
};

/* One process, from shp_pt_attach to shp_pt_detach. Zero-initialize before shp_pt_attach. */
struct shp_pt_proc {
    pid_t pid;
    struct shp_pt_thread *t; /* owned; shp_pt_free frees it */
    size_t n, cap;
    uint64_t stop_ns, resume_ns; /* CLOCK_MONOTONIC: the first interrupt and the last detach */
    unsigned late;               /* threads that had not stopped by the deadline */
    sigset_t saved_mask;
    bool masked;
};

/* How long shp_pt_attach waits for every thread to stop before it goes on without the late ones
 * (a thread in an uninterruptible sleep stops only when it leaves it). */
#define SHP_PT_STOP_DEADLINE_MS 200

/* Stops every thread of process pid: seizes and interrupts each thread of /proc/PID/task, and
 * lists it again until no new thread appears, then reads each stopped thread's registers. A
 * thread that exits meanwhile is marked gone; one that has not stopped after
 * SHP_PT_STOP_DEADLINE_MS is left out (p->late counts them; shp_pt_detach lets it go once it
 * stops). From the first seize until shp_pt_detach, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE,
 * SIGTSTP, SIGTTIN and SIGTTOU are blocked in the calling thread, so that none of them can end or
 * stop it while the target is stopped: they take effect when shp_pt_detach restores the mask.
 * Returns 0 with at least one thread stopped; else, with every seized thread let go again and
 * one line on why in err: -ESRCH (the process exited), -EPERM (refused: shp_pt_refusal's text),
 * or another negative errno. Not thread-safe: one process at a time per thread. */
int shp_pt_attach(struct shp_pt_proc *p, pid_t pid, char *err, size_t errlen);

/* Lets every thread of p go on (passing on the signals they were about to take), waits a little
 * for late ones to stop so that they can be let go too, and restores the signal mask. Safe on a
 * p that shp_pt_attach refused, and twice. */
void shp_pt_detach(struct shp_pt_proc *p);

/* Frees p's thread table (after shp_pt_detach). */
void shp_pt_free(struct shp_pt_proc *p);

/* Copies len bytes at addr of process pid into buf with process_vm_readv (no stop needed).
 * Returns the bytes copied, fewer at the end of a mapping, or a negative errno (-ESRCH: gone,
 * -EFAULT: nothing mapped at addr, -EPERM). */
ssize_t shp_pt_read(pid_t pid, uint64_t addr, void *buf, size_t len);

/* What a refusal to trace depends on, as read from /proc (shp_pt_facts) or set by a test. */
struct shp_pt_facts {
    pid_t tracer; /* TracerPid: 0 when none */
    char tracer_comm[32];
    long uid, our_uid; /* the target's real uid, ours (effective); -1 when unknown */
    char owner[64];    /* the target's user name, "" when unknown */
    int yama;          /* kernel.yama.ptrace_scope; -1 without Yama */
    bool privileged;   /* we hold CAP_SYS_PTRACE */
};

/* Reads the facts about pid from /proc. */
void shp_pt_facts(pid_t pid, struct shp_pt_facts *f);

/* The one line that says why attaching to pid failed with errno e (EPERM, ESRCH, ...) and what
 * to do about it, from f: a debugger already tracing it, another user's process, Yama's
 * ptrace_scope (which value, and what it allows), a process that exited. */
void shp_pt_refusal(pid_t pid, int e, const struct shp_pt_facts *f, char *out, size_t len);

#endif
