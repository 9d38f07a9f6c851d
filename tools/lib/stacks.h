/* shapetrace tools: a trace's call stacks, symbolized on demand against its module map. */
#ifndef SHAPETRACE_STACKS_H
#define SHAPETRACE_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/lib/reader.h"

struct shp_stacks;

/* Read the stack and module records of t (one walk of its own: t is not changed, so other
 * threads may read t meanwhile). With symbolize false, frames print as raw addresses. Returns
 * NULL only when out of memory, and the functions below accept NULL. One shp_stacks is not
 * thread-safe. */
struct shp_stacks *shp_stacks_load(const struct shp_trace *t, bool symbolize);
void shp_stacks_free(struct shp_stacks *st);

struct shp_symcache;
/* As shp_stacks_load, with the frame texts and symbol files shared through cache (symbolize.h;
 * NULL: none), which must outlive the result: for a command that reads many traces of the same
 * programs in one thread. */
struct shp_stacks *shp_stacks_load_shared(const struct shp_trace *t, bool symbolize,
                                          struct shp_symcache *cache);

/* The frames of stack `id`, innermost first, as "function (file:line)" or
 * "function+0xoff (module)"; *n is 0 for an unknown id. Owned by st. A stack recorded with
 * Python frames (SHAPETRACE_STACKS=python) has them as "py: function (file.py:line)" (or
 * "py: function (file.py)" when the line is unknown), in place of the interpreter's native frames
 * that ran them: a native frame never starts with "py: ". */
const char *const *shp_stacks_frames(struct shp_stacks *st, uint32_t id, size_t *n);

struct shp_site_frame;
struct shp_site_rule;
/* Beside shp_stacks_frames' texts, what the site rule (site.h) needs of each frame: a native
 * frame's module path, a Python frame's file name. The same *n; owned by st; NULL for an unknown
 * id. */
const struct shp_site_frame *shp_stacks_where(struct shp_stacks *st, uint32_t id, size_t *n);

/* The index of stack `id`'s site under rule (NULL: the built-in list alone) among
 * shp_stacks_frames' frames: the frames before it are framework and runtime code (site.h). 0 for
 * an unknown id. Cached per stack for the rule of shp_stacks_set_rule, or else the first rule st
 * is asked about. */
size_t shp_stacks_site_index(struct shp_stacks *st, uint32_t id, const struct shp_site_rule *rule);

/* The rule of the command that reads st (NULL: the built-in list alone), which must outlive st:
 * shp_stacks_site and the JSON of an event use it. Call it before any site is asked for. */
void shp_stacks_set_rule(struct shp_stacks *st, const struct shp_site_rule *rule);

/* Print stack `id` as a JSON array of strings, or null. */
void shp_stacks_json(FILE *f, struct shp_stacks *st, uint32_t id);
struct shp_out;
/* The same through the writer o (out.h); the text is made once per stack and kept in st. */
void shp_stacks_json_out(struct shp_out *o, struct shp_stacks *st, uint32_t id);

/* The call site as one line, under st's rule (shp_stacks_set_rule): the first frame of the
 * application's or the model's own code ("" if the stack has none). */
void shp_stacks_site(struct shp_stacks *st, uint32_t id, char *out, size_t len);
/* The same as a JSON string through o, or null when the stack has no frame; made once per
 * stack. */
void shp_stacks_site_json_out(struct shp_out *o, struct shp_stacks *st, uint32_t id);

/* A symbolizer's frame text as people read it (a new string; NULL when out of memory): the C++
 * name demangled and GCC's clone suffixes (".constprop.0", ".isra.0", ".cold") dropped,
 * "_ZN4ncclX+0x10 (libnccl.so.2)" -> "nccl::X()+0x10 (libnccl.so.2)". */
char *shp_frame_demangle(const char *text);

/* What a native frame is to the Python interpreter, for shp_py_merge: a frame of
 * _PyEval_EvalFrameDefault, another frame of the interpreter's own object, or anything else. */
enum { SHP_NATIVE_OTHER, SHP_NATIVE_INTERP, SHP_NATIVE_EVAL };

/* One frame of a merged stack: native frame `index`, or Python frame `index`. */
struct shp_merged_frame {
    bool python;
    uint32_t index;
};

/* Where a thread's Python frames go among its native frames, both innermost first (the rule
 * shp_stacks_frames follows): each _PyEval_EvalFrameDefault in a run of interpreter frames
 * stands for the next group of Python frames (up to one whose entry[] is set: the frame an eval
 * call started with), and the whole run is replaced by them; C code between two runs stays
 * between them. Without any eval frame (unwinding stopped early) the Python frames go after the
 * innermost native frames outside the interpreter. cls holds the nn native frames' classes
 * (SHP_NATIVE_*), entry the np Python frames' entry marks. Writes the merged order into out, which
 * has room for nn + np, and returns how many it wrote (nn + np). */
size_t shp_py_merge(const int *cls, size_t nn, const bool *entry, size_t np,
                    struct shp_merged_frame *out);

/* The line of the instruction at byte `offset` of a code object, from a copy of its co_linetable
 * in the format of CPython `py_version` (PY_VERSION_HEX: 3.10's PEP 626 pairs, or the location
 * table of 3.11 and later), as PyCode_Addr2Line computes it. SHP_PYFRAME_NO_OFFSET gives
 * firstlineno. Returns -1 when the table has no line there. */
int shp_py_addr2line(const uint8_t *table, size_t len, int firstlineno, uint32_t py_version,
                     uint32_t offset);

#endif
