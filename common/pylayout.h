/* shapetrace: where CPython 3.10 to 3.13 keep what a stack reader needs, for both readers: the
 * preload's, which walks the calling thread's own frames in place, and the snapshot's, which
 * copies another process's thread states and frames out of its memory. */
#ifndef SHAPETRACE_COMMON_PYLAYOUT_H
#define SHAPETRACE_COMMON_PYLAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where things are in one CPython minor version, in bytes, from that version's headers
 * (internal/pycore_runtime.h, internal/pycore_interp.h, cpython/pystate.h,
 * internal/pycore_frame.h, cpython/code.h, cpython/unicodeobject.h); 3.13 takes them from the
 * _Py_DebugOffsets it exports at the start of _PyRuntime. Offsets every version shares: ob_type
 * 8, ob_size 16; a str's length 16, hash 24, state 32; a bytes' data 32. */
struct shp_py_layout {
    unsigned minor;
    uint32_t ts_frame;   /* thread state -> 3.10 frame, 3.11/3.12 cframe, 3.13 frame */
    int32_t cf_current;  /* 3.11/3.12: _PyCFrame -> current frame; -1 otherwise */
    uint32_t fr_back;    /* frame -> the calling frame */
    uint32_t fr_code;    /* frame -> code object (3.13: f_executable) */
    uint32_t fr_instr;   /* 3.10: int f_lasti (code units); later: instruction pointer */
    int32_t fr_owner;    /* char owner; -1 on 3.10 */
    int32_t fr_is_entry; /* 3.11: bool is_entry; -1 otherwise */
    int owner_generator; /* FRAME_OWNED_BY_GENERATOR; -1 on 3.10 */
    int owner_cstack;    /* FRAME_OWNED_BY_CSTACK (3.12+: an eval call's entry); -1 */
    uint32_t co_filename, co_name, co_qualname, co_linetable, co_firstlineno;
    int32_t co_firsttraceable; /* frames before it have not started; -1: not checked */
    int32_t co_version;        /* 3.12+: uint32_t co_version, which no other code object of the
                                * interpreter got (0 once the numbers ran out); -1: not known */
    uint32_t co_code;          /* 3.11+: co_code_adaptive, the bytecode inside the object */
    uint32_t str_ascii;        /* sizeof(PyASCIIObject): an ASCII str's data */
    uint32_t str_compact;      /* sizeof(PyCompactUnicodeObject): other compact strs' data */
    uint32_t rt_finalizing;    /* _PyRuntime._finalizing */
    /* What only a reader from outside needs: the way from _PyRuntime to every thread state. */
    uint32_t rt_interp_head; /* _PyRuntime.interpreters.head */
    uint32_t interp_next;    /* PyInterpreterState.next */
    uint32_t interp_threads; /* PyInterpreterState -> its first thread state */
    uint32_t ts_next;        /* PyThreadState.next */
    uint32_t ts_interp;      /* PyThreadState.interp */
    uint32_t ts_thread_id;   /* PyThreadState.thread_id: the thread's pthread_t */
    int32_t ts_native_tid;   /* PyThreadState.native_thread_id (3.11+); -1 on 3.10 */
};

/* Frames and code objects as 3.12 and 3.13.0 both lay them out (the fields they share, in the
 * order of struct shp_py_layout). */
#define SHP_PY_FRAMES_312                                                                          \
    .fr_back = 8, .fr_code = 0, .fr_instr = 56, .fr_owner = 70, .fr_is_entry = -1,                 \
    .owner_generator = 1, .owner_cstack = 3, .co_filename = 112, .co_name = 120,                   \
    .co_qualname = 128, .co_linetable = 136, .co_firstlineno = 68

/* The layout of CPython 3.minor for minor 10 to 12, NULL for any other (3.13's comes from its
 * debug offsets, shp_py_layout_from_debug). Inline, so that a reader given a constant minor gets
 * the offsets as constants (the preload's walk of 3.12 frames). The offsets a reader from outside
 * needs (rt_interp_head to ts_native_tid) were checked with offsetof against each version's
 * installed internal headers (3.10.13, 3.11.7, 3.12.1); the code object's and the thread state's
 * fields are checked against every installed CPython's headers by
 * test_python_layouts_are_the_headers (tests/test_preload.py). */
static inline const struct shp_py_layout *shp_py_layout_table(unsigned minor)
{
    static const struct shp_py_layout layouts[] = {
        {.minor = 10,
         .ts_frame = 24,
         .cf_current = -1,
         .fr_back = 24,
         .fr_code = 32,
         .fr_instr = 96,
         .fr_owner = -1,
         .fr_is_entry = -1,
         .owner_generator = -1,
         .owner_cstack = -1,
         .co_filename = 104,
         .co_name = 112,
         .co_qualname = 0,
         .co_linetable = 120,
         .co_firstlineno = 40,
         .co_firsttraceable = -1,
         .co_version = -1,
         .co_code = 0,
         .str_ascii = 48,
         .str_compact = 72,
         .rt_finalizing = 16,
         .rt_interp_head = 32,
         .interp_next = 0,
         .interp_threads = 8,
         .ts_next = 8,
         .ts_interp = 16,
         .ts_thread_id = 176,
         .ts_native_tid = -1},
        {.minor = 11,
         .ts_frame = 56,
         .cf_current = 8,
         .fr_back = 48,
         .fr_code = 32,
         .fr_instr = 56,
         .fr_owner = 69,
         .fr_is_entry = 68,
         .owner_generator = 1,
         .owner_cstack = -1,
         .co_filename = 112,
         .co_name = 120,
         .co_qualname = 128,
         .co_linetable = 136,
         .co_firstlineno = 72,
         .co_firsttraceable = 168,
         .co_version = -1,
         .co_code = 184,
         .str_ascii = 48,
         .str_compact = 72,
         .rt_finalizing = 24,
         .rt_interp_head = 40,
         .interp_next = 0,
         .interp_threads = 16,
         .ts_next = 8,
         .ts_interp = 16,
         .ts_thread_id = 152,
         .ts_native_tid = 160},
        {.minor = 12,
         .ts_frame = 56,
         .cf_current = 0,
         SHP_PY_FRAMES_312,
         .co_firsttraceable = 176,
         .co_version = 92,
         .co_code = 192,
         .str_ascii = 40,
         .str_compact = 56,
         .rt_finalizing = 24,
         .rt_interp_head = 40,
         .interp_next = 0,
         .interp_threads = 72,
         .ts_next = 8,
         .ts_interp = 16,
         .ts_thread_id = 136,
         .ts_native_tid = 144},
    };
    return minor >= 10 && minor <= 12 ? &layouts[minor - 10] : NULL;
}

/* What the debug offsets of CPython 3.13.0 give (shp_py_layout_from_debug): the preload walks a
 * 3.13 whose layout is this one with these offsets as constants.
 * test_python_layouts_are_the_headers checks them against 3.13.0's. */
static inline const struct shp_py_layout *shp_py_layout_313(void)
{
    static const struct shp_py_layout l = {
        .minor = 13,
        .ts_frame = 72,
        .cf_current = -1,
        SHP_PY_FRAMES_312,
        .co_firsttraceable = 184,
        .co_version = 92,
        .co_code = 200,
        .str_ascii = 40,
        .str_compact = 56,
        .rt_finalizing = 608,
        .rt_interp_head = 632,
        .interp_next = 7264,
        .interp_threads = 7344,
        .ts_next = 8,
        .ts_interp = 16,
        .ts_thread_id = 152,
        .ts_native_tid = 160,
    };
    return &l;
}

/* The beginning of 3.13's _Py_DebugOffsets (internal/pycore_runtime.h), up to what the readers
 * use: the first bytes of _PyRuntime. */
struct shp_py_debug_offsets {
    char cookie[8]; /* "xdebugpy" */
    uint64_t version;
    uint64_t free_threaded;
    uint64_t runtime_size, runtime_finalizing, runtime_interpreters_head;
    uint64_t interp_size, interp_id, interp_next, interp_threads_head, interp_rest[9];
    uint64_t ts_size, ts_prev, ts_next, ts_interp, ts_current_frame, ts_thread_id,
        ts_native_thread_id, ts_datastack_chunk, ts_status;
    uint64_t fr_size, fr_previous, fr_executable, fr_instr_ptr, fr_localsplus, fr_owner;
    uint64_t co_size, co_filename, co_name, co_qualname, co_linetable, co_firstlineno, co_argcount,
        co_localsplusnames, co_localspluskinds, co_code_adaptive;
    uint64_t ob_size, ob_type;
    uint64_t type_object[4], tuple_object[3], list_object[3], dict_object[3], float_object[2],
        long_object[3];
    uint64_t bytes_size, bytes_ob_size, bytes_ob_sval;
    uint64_t str_size, str_state, str_length, str_asciiobject_size;
};

/* Fills *L from d, the debug offsets of a CPython whose PY_VERSION_HEX is `version` (3.13), in
 * this process's memory or copied from another's. False, *L untouched, when they are not what
 * this reader understands: another cookie or version, a free-threaded build, offsets outside the
 * structures they describe. */
bool shp_py_layout_from_debug(const struct shp_py_debug_offsets *d, uint32_t version,
                              struct shp_py_layout *L);

/* The text of a compact str's characters as UTF-8 into out (NULL: only measure), at most cap
 * bytes, cut at a character: len characters of `kind` bytes each (1, 2 or 4, from the str's state
 * bits; ascii, its ascii bit, copies them as they are) at data. A lone surrogate (a
 * surrogateescape'd file name) becomes '?'. Returns the bytes written (or that would be). */
size_t shp_py_str_utf8(const unsigned char *data, unsigned kind, bool ascii, size_t len, char *out,
                       size_t cap);

#endif
