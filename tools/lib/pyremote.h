/* shapetrace tools: the Python stacks of another process's threads, read from its memory while
 * it is stopped, with the frame layout the preload walks in-process (common/pylayout.h). The
 * interpreter is found from _PyRuntime's address in the libpython (or python executable) symbol
 * table and the load bias from the process's maps. */
#ifndef SHAPETRACE_PYREMOTE_H
#define SHAPETRACE_PYREMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/pylayout.h"

struct shp_unwinder;

/* A code object as read from the process: what a frame's text and line need. */
struct shp_py_code {
    uint64_t addr;
    char *name, *file; /* UTF-8; "" when unreadable */
    int firstlineno;
    unsigned char *linetable;
    size_t linetable_len;
    uint64_t units;         /* 3.11+: the bytecode's size in code units (the object's ob_size) */
    int32_t firsttraceable; /* 3.11+: frames before it have not started */
};

/* One Python frame: codes[code], and the offset of its instruction (SHP_PYFRAME_ENTRY set on
 * the first frame an eval call ran, as in a trace's shp_pyframe). */
struct shp_py_frame {
    uint32_t code;
    uint32_t lasti;
};

/* One thread state, innermost frame first. */
struct shp_py_thread {
    uint64_t native_tid; /* PyThreadState.native_thread_id (0 on 3.10) */
    uint64_t thread_id;  /* PyThreadState.thread_id: its pthread_t */
    struct shp_py_frame *frames;
    size_t n;
    bool truncated; /* more frames than SHP_PY_MAX_FRAMES: the outermost are missing */
};

#define SHP_PY_MAX_FRAMES 1024

/* One process's interpreter. Zero-initialize; shp_py_free releases it. */
struct shp_py_proc {
    bool found;                /* the process runs a CPython we can read */
    uint32_t version;          /* PY_VERSION_HEX */
    bool micro_known;          /* false on 3.10: the version is its file name's, without micro */
    char why[160];             /* why not, when the process runs a Python we cannot read; else "" */
    uint64_t eval_lo, eval_hi; /* _PyEval_EvalFrameDefault */
    uint64_t interp_lo, interp_hi; /* the object that holds it */
    struct shp_py_thread *threads;
    size_t nthreads;
    struct shp_py_code *codes;
    size_t ncodes, capcodes;
    uint64_t reads; /* process_vm_readv calls made while stopped */
    /* what the reader found */
    pid_t pid;
    struct shp_py_layout L;
    uint64_t runtime, code_type, unicode_type, bytes_type, none;
};

/* Finds the interpreter of process pid among u's modules; needs no stop. Sets p->found, or
 * p->why when the process runs a CPython that this reader cannot read (another version, a debug
 * or free-threaded build); neither when it runs no Python. Returns 0, or a negative errno. */
int shp_py_find(struct shp_py_proc *p, pid_t pid, struct shp_unwinder *u);

/* While the process is stopped: every thread state of every interpreter, with its frames and
 * the code objects they run. Frames that do not look like this version's (the layout is not what
 * it should be) end that thread's stack and set p->why. Nothing is read once the interpreter
 * is finalizing. Returns 0, or a negative errno when the process is gone. */
int shp_py_read(struct shp_py_proc *p);

/* The text of frame f as dump prints a Python frame: "py: name (file:line)", or
 * "py: name (file)" when the line is unknown. */
void shp_py_frame_text(const struct shp_py_proc *p, const struct shp_py_frame *f, char *out,
                       size_t len);

void shp_py_free(struct shp_py_proc *p);

#endif
