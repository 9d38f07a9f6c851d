/* shapetrace preload: finding the real functions, and the library slots of the dlsym hook.
 *
 * torch loads libnccl as a dependency of a module opened RTLD_LOCAL, so dlsym(RTLD_NEXT, ...)
 * from the preload finds nothing and a wrapper that trusted it crashed torch in
 * ncclCommInitRankConfig. We fall back to the object that really defines the symbol, found by
 * soname or by walking the loaded objects, and prefer NCCL's strong pncclX aliases there. vLLM's
 * pynccl looks each NCCL function up with dlsym(handle, name), which a plain preload never sees:
 * our dlsym (dlsym.c) returns a wrapper bound to that library's slot instead. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "preload/preload.h"

_Atomic(void *) shp_real_tab[SHP_SLOTS][SHP_OP_COUNT];

/* Per slot: the library's load base and a handle to it (NULL for slot 0: RTLD_NEXT first). */
static void *slot_base[SHP_SLOTS];
static void *slot_handle[SHP_SLOTS];
_Atomic(void *) shp_aux_tab[SHP_SLOTS][SHP_AUX_COUNT];
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;

typedef void *(*dlsym_fn)(void *, const char *);

/* libc's dlsym; read by the assembly stub below, so not static. */
__attribute__((visibility("hidden"))) _Atomic(dlsym_fn) shp_libc_dlsym_ptr;

/* Called (from the stub) when libc's dlsym is not known yet. We must not define dlvsym ourselves:
 * NCCL and cudart import it, and defining it recursed. */
__attribute__((visibility("hidden"))) dlsym_fn shp_libc_dlsym_resolve(void);
dlsym_fn shp_libc_dlsym_resolve(void)
{
    dlsym_fn f = atomic_load(&shp_libc_dlsym_ptr);
    if (f)
        return f;
    f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    atomic_store(&shp_libc_dlsym_ptr, f);
    return f;
}

void *shp_libc_dlsym(void *handle, const char *name)
{
    dlsym_fn f = shp_libc_dlsym_resolve();
    return f ? f(handle, name) : NULL;
}

void shp_load_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
    *lo = UINTPTR_MAX;
    *hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        *lo = a < *lo ? a : *lo;
        *hi = a + ph->p_memsz > *hi ? a + ph->p_memsz : *hi;
    }
}

static uintptr_t self_lo, self_hi;

static int self_range_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t want = (uintptr_t)data;
    uintptr_t lo, hi;
    shp_load_range(info, &lo, &hi);
    if (want >= lo && want < hi) {
        self_lo = lo;
        self_hi = hi;
        return 1;
    }
    return 0;
}

bool shp_is_self(const void *addr)
{
    if (!self_hi)
        dl_iterate_phdr(self_range_cb, (void *)(uintptr_t)shp_is_self);
    return (uintptr_t)addr >= self_lo && (uintptr_t)addr < self_hi;
}

static const char *const nccl_sonames[] = {"libnccl.so.2", "libnccl.so", NULL};
static const char *const cudart_sonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
                                             NULL};
static const char *const cuda_sonames[] = {"libcuda.so.1", "libcuda.so", NULL};
static const char *const *const lib_sonames[] = {[SHP_LIB_NCCL] = nccl_sonames,
                                                 [SHP_LIB_CUDART] = cudart_sonames,
                                                 [SHP_LIB_CUDA] = cuda_sonames};
static const char *const lib_prefixes[] = {
    [SHP_LIB_NCCL] = "libnccl.", [SHP_LIB_CUDART] = "libcudart.", [SHP_LIB_CUDA] = "libcuda."};

struct find_lib {
    const char *prefix;
    char path[PATH_MAX];
};

static int find_lib_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct find_lib *f = data;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    if (base && !strncmp(base, f->prefix, strlen(f->prefix))) {
        snprintf(f->path, sizeof(f->path), "%s", name);
        return 1;
    }
    return 0;
}

/* A handle to the already-loaded library `lib`, without loading anything. */
static void *loaded_lib(int lib)
{
    static _Atomic(void *) cache[3];
    void *h = atomic_load(&cache[lib]);
    if (h)
        return h;
    for (const char *const *s = lib_sonames[lib]; *s && !h; s++)
        h = dlopen(*s, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) {
        struct find_lib f = {.prefix = lib_prefixes[lib]};
        if (dl_iterate_phdr(find_lib_cb, &f))
            h = dlopen(f.path, RTLD_LAZY | RTLD_NOLOAD);
    }
    if (h)
        atomic_store(&cache[lib], h);
    return h;
}

/* Look `name` up in library `lib` for `slot`: RTLD_NEXT (slot 0), then the library itself,
 * NCCL's pnccl alias first. Never returns one of our own functions. */
static void *lookup(int slot, int lib, const char *name)
{
    void *p = NULL;
    if (slot == 0) {
        p = shp_libc_dlsym(RTLD_NEXT, name);
        if (p && !shp_is_self(p))
            return p;
        p = NULL;
    }
    void *h = slot == 0 ? loaded_lib(lib) : slot_handle[slot];
    if (!h)
        return NULL;
    if (lib == SHP_LIB_NCCL) {
        char pname[96];
        snprintf(pname, sizeof(pname), "p%s", name);
        p = shp_libc_dlsym(h, pname);
    }
    if (!p)
        p = shp_libc_dlsym(h, name);
    return p && !shp_is_self(p) ? p : NULL;
}

void *shp_real_slow(unsigned op, int slot)
{
    if (slot != 0 || op == SHP_OP_NONE || op >= SHP_OP_COUNT)
        return NULL;
    int saved = shp_own_enter();
    void *p = lookup(0, shp_op_lib(op), shp_op_name(op));
    if (p) {
        atomic_store_explicit(&shp_real_tab[0][op], p, memory_order_release);
        SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_RESOLVE, "%s resolved at %p", shp_op_name(op), p);
    }
    /* Not found is not cached: the library may be loaded later. */
    shp_own_leave(saved);
    return p;
}

static const char *const aux_names[SHP_AUX_COUNT] = {
    [SHP_AUX_COMM_USER_RANK] = "ncclCommUserRank",
    [SHP_AUX_COMM_COUNT] = "ncclCommCount",
    [SHP_AUX_COMM_CU_DEVICE] = "ncclCommCuDevice",
    [SHP_AUX_COMM_GET_ASYNC_ERROR] = "ncclCommGetAsyncError",
    [SHP_AUX_GET_DEVICE] = "cudaGetDevice",
    [SHP_AUX_POINTER_ATTRIBUTES] = "cudaPointerGetAttributes",
    [SHP_AUX_PEEK_ERROR] = "cudaPeekAtLastError",
    [SHP_AUX_GET_ERROR] = "cudaGetLastError",
    [SHP_AUX_STREAM_CAPTURE_INFO] = "cudaStreamGetCaptureInfo",
    [SHP_AUX_STREAM_CAPTURE_INFO_PTSZ] = "cudaStreamGetCaptureInfo_ptsz",
    [SHP_AUX_CU_POINTER_ATTRIBUTE] = "cuPointerGetAttribute",
    [SHP_AUX_CU_CTX_GET_DEVICE] = "cuCtxGetDevice",
    [SHP_AUX_CU_STREAM_CAPTURE_INFO] = "cuStreamGetCaptureInfo_v2",
};

void *shp_cu_real_lookup(const char *name)
{
    return lookup(0, SHP_LIB_CUDA, name);
}

void *shp_real_aux_slow(int slot, enum shp_aux aux)
{
    void *p = atomic_load_explicit(&shp_aux_tab[slot][aux], memory_order_acquire);
    if (p)
        return p;
    int lib = aux <= SHP_AUX_COMM_GET_ASYNC_ERROR   ? SHP_LIB_NCCL
              : aux >= SHP_AUX_CU_POINTER_ATTRIBUTE ? SHP_LIB_CUDA
                                                    : SHP_LIB_CUDART;
    /* The driver is one library per process: its helpers always come from slot 0. */
    if (lib == SHP_LIB_CUDA)
        slot = 0;
    /* A slot from dlsym(handle) is an NCCL or a cudart; its helpers of the other library come
     * from the default binding. */
    int from = slot;
    if (slot != 0 && slot_handle[slot]) {
        void *probe = shp_libc_dlsym(slot_handle[slot],
                                     lib == SHP_LIB_NCCL ? "ncclGetVersion" : "cudaGetDevice");
        if (!probe)
            from = 0;
    }
    p = lookup(from, lib, aux_names[aux]);
    if (p)
        atomic_store_explicit(&shp_aux_tab[slot][aux], p, memory_order_release);
    return p;
}

int shp_missing(unsigned op, int err)
{
    static _Atomic uint64_t warned;
    uint64_t bit = 1ull << (op % 64);
    if (!(atomic_fetch_or(&warned, bit) & bit))
        SHP_LOG(&shp_log, SHP_LOG_WARN, SHP_SUB_RESOLVE,
                "%s: the real function was not found in any loaded library; returning error %d",
                shp_op_name(op), err);
    return err;
}

int shp_slot_for(void *p, void *handle)
{
    Dl_info info;
    if (!dladdr(p, &info) || !info.dli_fbase)
        return -1;
    int slot = -1;
    pthread_mutex_lock(&slot_mu);
    for (int s = 1; s < SHP_SLOTS; s++) {
        if (slot_base[s] == info.dli_fbase) {
            slot = s;
            break;
        }
        if (!slot_base[s]) {
            slot_base[s] = info.dli_fbase;
            slot_handle[s] = handle;
            slot = s;
            SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_RESOLVE, "slot %d: %s (via dlsym)", s,
                    info.dli_fname);
            break;
        }
    }
    pthread_mutex_unlock(&slot_mu);
    return slot;
}

/* Objects that called a driver wrapper, each once: its address range and whether it is NCCL or
 * the shared runtime. Entries are filled before the count that publishes them, and never change. */
#define CALLERS 16
static struct {
    uintptr_t lo, hi;
    bool library;
} callers[CALLERS];
static _Atomic int ncallers;

struct caller_find {
    uintptr_t pc, lo, hi;
};

static int caller_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct caller_find *f = data;
    uintptr_t lo, hi;
    shp_load_range(info, &lo, &hi);
    if (f->pc < lo || f->pc >= hi)
        return 0;
    f->lo = lo;
    f->hi = hi;
    return 1;
}

bool shp_called_from_library(const void *pc)
{
    uintptr_t a = (uintptr_t)pc;
    int n = atomic_load_explicit(&ncallers, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (a >= callers[i].lo && a < callers[i].hi)
            return callers[i].library;
    Dl_info info;
    if (!dladdr(pc, &info) || !info.dli_fname)
        return false;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    bool library = !strncmp(base, "libnccl.", 8) || !strncmp(base, "libcudart.", 10);
    struct caller_find f = {.pc = a};
    if (!dl_iterate_phdr(caller_cb, &f))
        return library;
    pthread_mutex_lock(&slot_mu);
    n = atomic_load(&ncallers);
    bool known = false;
    for (int i = 0; i < n; i++)
        known |= callers[i].lo == f.lo;
    if (!known && n < CALLERS) {
        callers[n].lo = f.lo;
        callers[n].hi = f.hi;
        callers[n].library = library;
        atomic_store_explicit(&ncallers, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&slot_mu);
    return library;
}
