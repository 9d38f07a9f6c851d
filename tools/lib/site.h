/* shapetrace tools: the call site a person reads first. Of a call's frames, innermost first, it
 * is the first one in the application's or the model's own code: the frames of the frameworks
 * and runtimes below it (torch and its C++ libraries, CuPy's core, JAX, the interpreter and its
 * standard library, NCCL, the CUDA libraries, libc, shapetrace itself) are skipped, as Sentry's
 * "in-app frames" and py-spy's idle filters do. docs/tracing.md states the rule and its list ("Call
 * sites"). */
#ifndef SHAPETRACE_SITE_H
#define SHAPETRACE_SITE_H

#include <stdbool.h>
#include <stddef.h>

/* The rule: the built-in list, plus the globs a user added (--site-skip, SHAPETRACE_SITE_SKIP).
 * Zero-initialized, it is the built-in list alone. Read-only once built: one rule may be used by
 * many threads at once. */
struct shp_site_rule {
    char **globs; /* owned */
    size_t n, cap;
};

/* One frame, as the rule sees it. */
struct shp_site_frame {
    bool python;      /* a Python frame ("py: ...") */
    const char *path; /* native: the module's path as the trace recorded it; Python: the
                       * code object's file name; NULL when unknown */
    size_t path_len;  /* bytes of path (it need not be NUL-terminated) */
    const char *text; /* the frame's text, as shp_stacks_frames gives it (for fn: globs) */
};

/* Adds one glob to r. Its form says what it is matched against ('*' matches across '/'):
 *   no '/' ("libnccl*.so*"): the last component of the frame's path (a module, a file name);
 *   a '/', but not first ("torch/_ops.py", "vllm/distributed/" and a '*'): a package's path,
 *       matched against what follows the last "/site-packages/" or "/dist-packages/" of the
 *       frame's path, so that a virtualenv made in /opt/torch is not torch;
 *   starting with '/' or '*' ("/opt/app/lib.py", "*" "/mylib/" "*"): the whole path, a relative
 *       file name with a '/' put before it;
 *   "fn:GLOB": the frame's function name (shp_frame_function's);
 *   "!GLOB": keeps what GLOB matches, though an earlier glob skipped it.
 * Returns 0, -EINVAL for an empty glob (or "fn:" or "!" alone), -ENOMEM. */
int shp_site_rule_add(struct shp_site_rule *r, const char *glob);

/* Adds each glob of a comma-separated list (SHAPETRACE_SITE_SKIP's form); empty items are
 * ignored. Returns 0, or the first error of shp_site_rule_add (the items before it are kept). */
int shp_site_rule_add_list(struct shp_site_rule *r, const char *list);

/* Frees what r owns and leaves it zero (the built-in list alone). */
void shp_site_rule_free(struct shp_site_rule *r);

/* Whether f is framework or runtime code under r (NULL: the built-in list alone). */
bool shp_site_skipped(const struct shp_site_rule *r, const struct shp_site_frame *f);

/* The site among n frames, innermost first: the index of the first frame that is not skipped.
 * When every frame is (a call made from a framework's own thread), the innermost Python frame,
 * else 0: the index is always < n for n > 0, and 0 for n == 0. The frames before the index are
 * the ones a report folds ("<- 19 framework frames"). */
size_t shp_site_pick(const struct shp_site_rule *r, const struct shp_site_frame *f, size_t n);

/* The function part of a frame text, into out (NUL-terminated, cut to len bytes): "generate" for
 * "generate (x.c:3)", "generate+0x1f (mod.so)" and "py: generate (serve.py:88)"; a demangled C++
 * name keeps its arguments ("at::native::copy_(at::Tensor&, bool)"). A text without a place
 * ("0x7f12") is returned whole. */
void shp_frame_function(const char *frame, char *out, size_t len);

/* The built-in list, NULL-terminated, in the order it is read (for --help and tests). */
extern const char *const shp_site_builtin[];

#endif
