/* shapetrace preload: call sites. Raw return addresses, deduplicated into stack records, plus a
 * module map; the tools symbolize offline (dladdr costs about 1.7 us an address, an unwind about
 * 250 ns for 35 frames). libunwind is loaded RTLD_LOCAL: linked normally it took over the
 * process's _Unwind_* and made C++ exceptions about 10x slower, and it exports a weak
 * `backtrace` that would replace glibc's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "include/shapetrace/env.h"
#include "preload/preload.h"

typedef int (*unw_backtrace_fn)(void **, int);

static struct {
    pthread_once_t once;
    unw_backtrace_fn unwind;
    bool use_glibc;
} uw = {.once = PTHREAD_ONCE_INIT};

/* Modules already written to this process's trace. */
#define MAX_MODULES 2048
static struct {
    pthread_mutex_t mu;
    uint64_t adds; /* dlpi_adds when last synced */
    uint64_t key[MAX_MODULES];
    unsigned n;
} mods = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void load_unwinder(void)
{
    char path[PATH_MAX + 32];
    const char *tries[4] = {0};
    int n = 0;
    if (shp_cfg.libunwind[0])
        tries[n++] = shp_cfg.libunwind;
    snprintf(path, sizeof(path), "%s/libunwind.so.8", shp_cfg.self_dir);
    tries[n++] = path;
    tries[n++] = "libunwind.so.8";
    tries[n++] = "libunwind.so";
    for (int i = 0; i < n && !uw.unwind; i++) {
        void *h = dlopen(tries[i], RTLD_LAZY | RTLD_LOCAL);
        if (!h)
            continue;
        uw.unwind = (unw_backtrace_fn)shp_libc_dlsym(h, "unw_backtrace");
        if (uw.unwind)
            SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK, "stacks through %s", tries[i]);
    }
    if (!uw.unwind) {
        uw.use_glibc = true;
        SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK,
                "libunwind not found (" SHP_ENV_LIBUNWIND " names it); stacks through glibc");
    }
}

static uint64_t hash_frames(void *const *f, int n)
{
    uint64_t h = SHP_FNV_OFFSET;
    for (int i = 0; i < n; i++)
        h = shp_hash_word(h, (uint64_t)(uintptr_t)f[i]);
    return h ? h : 1;
}

struct native_frames {
    void *const *frames;
    int n;
};

static uint32_t store_stack(void *arg)
{
    const struct native_frames *nf = arg;
    shp_modules_sync();
    uint32_t id = shp_stack_new_id();
    size_t size = sizeof(struct shp_rec_stack) + (size_t)nf->n * 8;
    struct shp_rec_stack *r = shp_reserve(SHP_REC_STACK, size);
    if (!r)
        return 0;
    r->id = id;
    r->nframes = (uint32_t)nf->n;
    uint64_t *out = (uint64_t *)(r + 1);
    for (int i = 0; i < nf->n; i++)
        out[i] = (uint64_t)(uintptr_t)nf->frames[i];
    shp_rec_publish(r, SHP_REC_STACK, size);
    return id;
}

uint32_t shp_stack_here(void)
{
    if (shp_cfg.stacks == SHP_STACKS_NONE)
        return 0;
    pthread_once(&uw.once, load_unwinder);
    void *buf[SHP_STACK_MAX_FRAMES + 8];
    int n = uw.unwind ? uw.unwind(buf, (int)(sizeof(buf) / sizeof(buf[0])))
                      : backtrace(buf, (int)(sizeof(buf) / sizeof(buf[0])));
    int skip = 0;
    while (skip < n && shp_is_self(buf[skip]))
        skip++;
    n -= skip;
    if (n > SHP_STACK_MAX_FRAMES)
        n = SHP_STACK_MAX_FRAMES;
    uint32_t id = 0;
    if (n > 0) {
        struct native_frames nf = {buf + skip, n};
        id = shp_stack_intern(hash_frames(nf.frames, n), store_stack, &nf);
    }
    return shp_cfg.stacks == SHP_STACKS_PYTHON ? shp_py_stack(id) : id;
}

static int adds_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(uint64_t *)data = info->dlpi_adds;
    return 1;
}

static void note_build_id(const struct dl_phdr_info *info, struct shp_rec_module *r)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        const unsigned char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t namesz = (nh->n_namesz + 3) & ~3u, descsz = (nh->n_descsz + 3) & ~3u;
            const unsigned char *name = p + sizeof(*nh), *desc = name + namesz;
            if (desc + descsz > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
                size_t len =
                    nh->n_descsz < sizeof(r->build_id) ? nh->n_descsz : sizeof(r->build_id);
                memcpy(r->build_id, desc, len);
                r->build_id_len = (uint8_t)len;
                return;
            }
            p = desc + descsz;
        }
    }
}

static int module_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    uintptr_t lo, hi;
    shp_load_range(info, &lo, &hi);
    if (!hi)
        return 0;
    uint64_t key = lo ^ (hi << 1);
    for (unsigned i = 0; i < mods.n; i++)
        if (mods.key[i] == key)
            return 0;
    if (mods.n == MAX_MODULES)
        return 0;
    char exe[PATH_MAX];
    const char *path = info->dlpi_name;
    if (!path || !*path) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[n > 0 ? n : 0] = 0;
        path = exe;
    }
    size_t plen = strnlen(path, 4000);
    size_t rsize = (sizeof(struct shp_rec_module) + plen + 7) & ~(size_t)7;
    struct shp_rec_module *r = shp_reserve(SHP_REC_MODULE, rsize);
    if (!r)
        return 0;
    memset((char *)r + sizeof(r->h), 0, rsize - sizeof(r->h));
    r->base = info->dlpi_addr;
    r->lo = lo;
    r->hi = hi;
    r->path_len = (uint16_t)plen;
    note_build_id(info, r);
    memcpy(r + 1, path, plen);
    shp_rec_publish(r, SHP_REC_MODULE, rsize);
    mods.key[mods.n++] = key;
    return 0;
}

void shp_modules_sync(void)
{
    uint64_t adds = 0;
    dl_iterate_phdr(adds_cb, &adds);
    pthread_mutex_lock(&mods.mu);
    bool changed = adds != mods.adds;
    if (changed || mods.n == 0) {
        dl_iterate_phdr(module_cb, NULL);
        mods.adds = adds;
    }
    pthread_mutex_unlock(&mods.mu);
    if (changed && shp_cfg.stacks == SHP_STACKS_PYTHON)
        shp_py_modules_changed();
}

void shp_stacks_atfork_child(void)
{
    /* The child's trace starts empty: its stacks and modules must be written again. */
    shp_stackid_atfork_child();
    shp_py_atfork_child();
    pthread_mutex_init(&mods.mu, NULL);
    mods.n = 0;
    mods.adds = 0;
}
