/* shapetrace tools: the site rule (site.h). A list of globs read in order, gitignore's way: the
 * last one that matches a frame decides, and a "!" before a glob keeps what it matches, so that
 * the standard library is skipped but site-packages is not, and torch inside site-packages is
 * skipped again. A user's globs come after the built-in list and so override it. */
#define _GNU_SOURCE
#include "tools/lib/site.h"

#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const shp_site_builtin[] = {
    /* the interpreter's standard library, but not what is installed beside it: first, so that
     * the globs below decide for site-packages */
    "*/lib/python3*/*", "!*/site-packages/*", "!*/dist-packages/*",
    /* shapetrace itself, NCCL, and the CUDA libraries (NVIDIA's pip packages live in nvidia/) */
    "libshapetrace.so*", "libnccl*.so*", "libcudart*.so*", "libcuda.so*", "libcublas*.so*",
    "libcudnn*.so*", "libnvrtc*.so*", "libnvJitLink*.so*", "libcupti*.so*", "nvidia/*",
    /* a CUDA runtime or NCCL linked statically into the program: its entry points by name */
    "fn:cuda[A-Z]*", "fn:__cuda*", "fn:cu[A-Z]*", "fn:nccl[A-Z]*", "fn:pnccl[A-Z]*",
    /* the C and C++ runtimes, and the kernel's vDSO below libc's clocks (snapshot names its
     * frames' module "[vdso]", libdwfl "[vdso: PID]"; CUDA's spin-waits stop there) */
    "libc.so*", "libstdc++.so*", "libgcc_s.so*", "ld-linux*.so*", "libpthread.so*", "libm.so*",
    "\\[vdso*\\]",
    /* the sanitizers' runtimes and their interceptors of libc (a sanitized build of the
     * application puts one between its call and libc's) */
    "libasan.so*", "libtsan.so*", "libubsan.so*", "liblsan.so*", "libhwasan.so*",
    "fn:__interceptor_*", "fn:___interceptor_*",
    /* the foreign-function layer under ctypes and cffi (vLLM's pynccl calls NCCL through it) */
    "libffi.so*", "_cffi_backend*",
    /* the interpreter */
    "libpython3*.so*", "python", "python3", "python3.[0-9]*", "<frozen *>",
    /* the frameworks: torch (Python, and C++ also where LibTorch is installed by hand), Triton,
     * CuPy's core, JAX, NumPy */
    "torch/*", "libtorch*.so*", "libc10*.so*", "functorch/*", "triton/*", "cupy/*", "cupyx/*",
    "cupy_backends/*", "jax/*", "jaxlib/*", "jax_plugins/*", "numpy/*",
    /* the layers and the communication of serving and training frameworks: the model's own
     * code calls them, and the model's line is the one to read */
    "vllm/distributed/*", "vllm/model_executor/layers/*", "sglang/srt/distributed/*",
    "sglang/srt/layers/*", "megatron/core/tensor_parallel/*", "megatron/core/parallel_state.py",
    "transformers/integrations/*", "transformers/utils/*", "transformers/modeling_utils.py",
    "transformers/modeling_layers.py", "transformers/generation/*", "accelerate/*", NULL};

void shp_frame_function(const char *frame, char *out, size_t len)
{
    if (!strncmp(frame, "py: ", 4)) {
        /* A Python name has no space; its file name may. */
        frame += 4;
        snprintf(out, len, "%.*s", (int)strcspn(frame, " "), frame);
        return;
    }
    /* The place is in the last " (...)": a C++ name may hold one ("std::function<void (int)>"),
     * a module path hardly ever. */
    size_t n = strlen(frame);
    for (const char *p = strstr(frame, " ("); p; p = strstr(p + 1, " ("))
        n = (size_t)(p - frame);
    const char *plus = NULL;
    for (const char *p = frame; (p = strstr(p, "+0x")) && (size_t)(p - frame) < n; p++)
        plus = p;
    if (plus && strspn(plus + 3, "0123456789abcdef") == n - (size_t)(plus - frame) - 3)
        n = (size_t)(plus - frame);
    snprintf(out, len, "%.*s", (int)n, frame);
}

int shp_site_rule_add(struct shp_site_rule *r, const char *glob)
{
    const char *body = glob + (glob[0] == '!');
    if (!*body || !strcmp(body, "fn:"))
        return -EINVAL;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        char **grown = realloc(r->globs, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        r->globs = grown;
        r->cap = cap;
    }
    char *copy = strdup(glob);
    if (!copy)
        return -ENOMEM;
    r->globs[r->n++] = copy;
    return 0;
}

int shp_site_rule_add_list(struct shp_site_rule *r, const char *list)
{
    while (list && *list) {
        size_t len = strcspn(list, ",");
        if (len) {
            char *item = strndup(list, len);
            int rc = item ? shp_site_rule_add(r, item) : -ENOMEM;
            free(item);
            if (rc < 0)
                return rc;
        }
        list += len + (list[len] == ',');
    }
    return 0;
}

void shp_site_rule_free(struct shp_site_rule *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->globs[i]);
    free(r->globs);
    *r = (struct shp_site_rule){0};
}

/* The frame's path, with a '/' put before a relative one so that a glob for a package folder
 * matches a file name recorded as "torch/_ops.py", and its last component; the function name. */
struct where {
    char buf[PATH_MAX + 2];
    const char *path, *base;
    const char *pkg; /* the part below site-packages/ or dist-packages/, or NULL */
    char fn[512];
};

static void where_of(const struct shp_site_frame *f, struct where *w)
{
    size_t len = f->path ? f->path_len : 0;
    if (len > PATH_MAX)
        len = PATH_MAX;
    size_t lead = len && f->path[0] != '/';
    w->buf[0] = '/';
    if (len)
        memcpy(w->buf + lead, f->path, len);
    w->buf[lead + len] = '\0';
    w->path = len ? w->buf : NULL;
    w->base = w->path ? strrchr(w->path, '/') + 1 : NULL;
    w->pkg = NULL;
    static const char *const roots[] = {"/site-packages/", "/dist-packages/"};
    for (size_t i = 0; w->path && i < 2; i++)
        for (const char *p = w->path; (p = strstr(p, roots[i])); p++)
            w->pkg = p + strlen(roots[i]); /* the last one: a venv inside another */
    w->fn[0] = '\0';
    if (f->text)
        shp_frame_function(f->text, w->fn, sizeof(w->fn));
}

/* Whether glob (without its "!") matches the frame. */
static bool matches(const char *glob, const struct where *w)
{
    if (!strncmp(glob, "fn:", 3))
        return w->fn[0] && !fnmatch(glob + 3, w->fn, 0);
    if (!w->path)
        return false;
    if (!strchr(glob, '/'))
        return !fnmatch(glob, w->base, 0);
    if (glob[0] == '/' || glob[0] == '*')
        return !fnmatch(glob, w->path, 0);
    /* A package's path: only below site-packages, so that a virtualenv in /opt/torch/ is not
     * torch (seen: every file of that environment, the model's included, matched a glob of
     * the package's name anywhere in the path). */
    return w->pkg && !fnmatch(glob, w->pkg, 0);
}

/* Applies one glob of the list: the last match decides. */
static void apply(const char *glob, const struct where *w, bool *skipped)
{
    bool keep = glob[0] == '!';
    if (matches(glob + keep, w))
        *skipped = !keep;
}

bool shp_site_skipped(const struct shp_site_rule *r, const struct shp_site_frame *f)
{
    struct where w;
    where_of(f, &w);
    bool skipped = false;
    for (size_t i = 0; shp_site_builtin[i]; i++)
        apply(shp_site_builtin[i], &w, &skipped);
    for (size_t i = 0; r && i < r->n; i++)
        apply(r->globs[i], &w, &skipped);
    return skipped;
}

size_t shp_site_pick(const struct shp_site_rule *r, const struct shp_site_frame *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!shp_site_skipped(r, &f[i]))
            return i;
    for (size_t i = 0; i < n; i++)
        if (f[i].python)
            return i;
    return 0;
}
