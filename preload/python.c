/* shapetrace preload: Python call sites. The calling thread's Python frames, read straight from
 * CPython's structures without the GIL, deduplicated into PYSTACK records next to the native
 * stack; code objects' names and line tables are stored once (PYCODE) and lines found offline. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "common/hash.h"
#include "common/pylayout.h"
#include "preload/preload.h"

/* Why no GIL: torch releases it before it reaches cudaMemcpyAsync or ncclAllReduce, and taking
 * it back from inside the wrapper costs microseconds and can deadlock (a thread holding the GIL
 * may wait for this one's collective). Reading without it is sound for the calling thread's own
 * frames: only that thread pushes or pops them, and it is inside our wrapper. Each frame holds a
 * strong reference to its code object, and code objects, their names and line tables are
 * immutable. The thread state comes from PyGILState_GetThisThreadState (the GIL-state TSS slot,
 * set for every thread that ever ran Python and kept while it releases the GIL; 3.12's
 * thread-local current state is cleared on release, so it cannot serve). */

enum { PY_UNRESOLVED, PY_READY, PY_ABSENT, PY_OFF };

#define CODE_SLOTS (1u << 16)
#define MEMO_SLOTS (1u << 14) /* a Python stack's fingerprint -> its stack id (3.12+) */
#define MEMO_PROBES 8
#define MAX_HOPS (4 * SHP_PYSTACK_MAX_FRAMES) /* frames looked at, skipped ones included */
#define NAME_MAX_BYTES 1024
#define FILE_MAX_BYTES 4096
#define LINETABLE_MAX_BYTES (256u << 10)

typedef void *(*this_tstate_fn)(void);
typedef int (*is_initialized_fn)(void);

static struct {
    _Atomic int state; /* PY_* */
    pthread_mutex_t mu;
    struct shp_py_layout L;
    bool layout_313;  /* L is shp_py_layout_313(): walked with constant offsets */
    uint32_t version; /* PY_VERSION_HEX */
    this_tstate_fn this_tstate;
    is_initialized_fn is_initialized;
    const char *runtime; /* &_PyRuntime */
    const void *code_type, *unicode_type, *bytes_type, *none;
    uint64_t eval_lo, eval_hi, interp_lo, interp_hi;
    struct shp_intern_slot *code_tab; /* code object identity -> PYCODE id */
    struct shp_intern_slot *memo;     /* after code_tab's slots, in its mapping */
    _Atomic uint32_t next_code_id;
    _Atomic int info_written;
} py = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- reading the interpreter's memory ---- */

static inline const char *ld_ptr(const char *p, uint32_t off)
{
    const char *v;
    memcpy(&v, p + off, sizeof(v));
    return v;
}

static inline int64_t ld_i64(const char *p, uint32_t off)
{
    int64_t v;
    memcpy(&v, p + off, sizeof(v));
    return v;
}

static inline int32_t ld_i32(const char *p, uint32_t off)
{
    int32_t v;
    memcpy(&v, p + off, sizeof(v));
    return v;
}

/* A cheap sanity check before a dereference: aligned, in user space, not in the zero page. The
 * type checks that follow catch a pointer that passes this and still is not what we expect. */
static inline bool ok_ptr(const void *p)
{
    /* One compare: rotated right by 3, a pointer off by 1 to 7 bytes from alignment, or below
     * 4096 (wrapped around by the subtraction), is at least 2^61. */
    uint64_t v = (uint64_t)(uintptr_t)p - 4096;
    return (v >> 3 | v << 61) < ((1ull << 47) - 4096) >> 3;
}

/* What identifies a code object beyond its address: a freed one leaves its address for the next,
 * and code generated at run time (torch.fx, exec) can get the very addresses of the last one's
 * code, names and line table too (seen: four threads exec'ing functions in a loop). From 3.12 a
 * code object carries a number that no other code object of its interpreter got (co_version,
 * counted up as each is made): with the interpreter's address it is the key, and nothing outside
 * the code object's first lines is read. Where the number is unknown (3.10, 3.11) or the
 * interpreter ran out of them (0), the key holds the name's hash (interned, so computed), the file
 * name's hash when it has one, the line table's address, length and first 8 bytes, the first line
 * and the bytecode's size: functions generated alike in all of that and the addresses can still
 * be taken for each other there (docs/limits.md). Independent multiplies, then one mix: this runs
 * for every frame of every call. */
static inline uint64_t str_hash(const char *s)
{
    return ok_ptr(s) ? (uint64_t)ld_i64(s, 24) : 0;
}

/* A line table's length and its first 8 bytes (a bytes object's data is at 32), mixed: most often
 * on its header's line. A table of 1 to 7 bytes is read as the 8 bytes that end with it (the rest
 * are the object's header) and shifted down to its own: nothing past its end is read. */
static inline uint64_t table_sample(const char *lt)
{
    if (!ok_ptr(lt) || ld_ptr(lt, 8) != py.bytes_type)
        return 0;
    int64_t len = ld_i64(lt, 16);
    uint64_t first = 0;
    if (len >= 8)
        first = (uint64_t)ld_i64(lt, 32);
    else if (len > 0)
        first = (uint64_t)ld_i64(lt + len, 24) >> (64 - 8 * len);
    return (uint64_t)len * 0x9e3779b97f4a7c15ull + first * 0xd6e8feb86659fd93ull;
}

static inline __attribute__((always_inline)) uint64_t
code_key(const struct shp_py_layout *L, const char *co, uint64_t units, uint64_t interp)
{
    uint64_t h = (uintptr_t)co * 0x9e3779b97f4a7c15ull;
    uint32_t version = L->co_version >= 0 ? (uint32_t)ld_i32(co, (uint32_t)L->co_version) : 0;
    if (__builtin_expect(version != 0, 1)) {
        h += (uint64_t)version * 0xc2b2ae3d27d4eb4full + interp;
    } else {
        const char *file = ld_ptr(co, L->co_filename), *name = ld_ptr(co, L->co_name);
        const char *lt = ld_ptr(co, L->co_linetable);
        h += (uintptr_t)file * 0xc2b2ae3d27d4eb4full + (uintptr_t)name * 0x165667b19e3779f9ull +
             (uintptr_t)lt * 0x27d4eb2f165667c5ull + table_sample(lt) +
             (uint64_t)(uint32_t)ld_i32(co, L->co_firstlineno) * 0xff51afd7ed558ccdull +
             str_hash(name) * 0xc4ceb9fe1a85ec53ull + str_hash(file) * 0x94d049bb133111ebull +
             units * 0xbf58476d1ce4e5b9ull;
    }
    h = shp_hash_word(h, h >> 31);
    return h ? h : 1;
}

struct raw_frame {
    const char *code;
    uint64_t key; /* code_key(code) */
    uint32_t lasti;
};

struct py_walk {
    uint32_t native;
    uint32_t flags; /* SHP_PYSTACK_* */
    int n;
    struct raw_frame f[SHP_PYSTACK_MAX_FRAMES];
};

/* The frames of thread state `ts`, innermost first, for the frames of CPython 3.`minor` (12
 * stands for 12 and later). False when what we read does not look like this version's frames (a
 * code slot that holds no code object): the layout is not what we think, and the caller stops
 * reading Python frames. The layout is copied in, and each version family gets a walk of its own
 * (walk), so that the offsets stay in registers across the stores into *w and the other
 * versions' tests drop out (bench/pystack.py's 20 frames on 3.12: 2,578 to 1,381 instructions
 * a walk, with code_key's number). */
static inline __attribute__((always_inline)) bool
walk_as(const char *ts, struct py_walk *w, const struct shp_py_layout *layout, const unsigned minor)
{
    const struct shp_py_layout L = *layout;
    const char *const code_type = py.code_type, *const none = py.none;
    /* The interpreter's part of a code object's key (code_key). */
    const uint64_t interp =
        L.co_version >= 0 ? (uintptr_t)ld_ptr(ts, L.ts_interp) * 0x165667b19e3779f9ull : 0;
    const char *f = ld_ptr(ts, L.ts_frame);
    if (L.cf_current >= 0) {
        if (!f)
            return true;
        if (!ok_ptr(f))
            return false;
        f = ld_ptr(f, (uint32_t)L.cf_current);
    }
    int n = 0;
    for (int hops = 0; f; hops++, f = ld_ptr(f, L.fr_back)) {
        if (hops == MAX_HOPS) {
            w->flags |= SHP_PYSTACK_TRUNCATED;
            break;
        }
        if (!ok_ptr(f))
            return false;
        int owner = minor >= 11 ? *(const signed char *)(f + L.fr_owner) : -1;
        if (minor >= 12 && owner == L.owner_cstack) {
            /* 3.12+: each _PyEval_EvalFrameDefault call pushes an entry frame of its own
             * below the first frame it runs: the frame before it ends that call's group. */
            if (n)
                w->f[n - 1].lasti |= SHP_PYFRAME_ENTRY;
            continue;
        }
        const char *co = ld_ptr(f, L.fr_code);
        if (!ok_ptr(co) || ld_ptr(co, 8) != code_type) {
            if (co == none) /* 3.13 shim frames run None */
                continue;
            return false;
        }
        uint32_t lasti;
        uint64_t units = 0; /* bytecode size in code units (3.11+: the code object's ob_size) */
        if (minor == 10) {
            /* Every 3.10 frame is run by an eval call of its own. */
            int32_t l = ld_i32(f, L.fr_instr);
            lasti = (l < 0 ? SHP_PYFRAME_NO_OFFSET : (uint32_t)l * 2) | SHP_PYFRAME_ENTRY;
        } else {
            intptr_t off = ld_ptr(f, L.fr_instr) - (co + L.co_code);
            /* A frame pushed but not started (its arguments are still being set up): CPython's
             * own tracebacks leave it out. */
            if (L.co_firsttraceable >= 0 && owner != L.owner_generator &&
                off < (intptr_t)ld_i32(co, (uint32_t)L.co_firsttraceable) * 2)
                continue;
            units = (uint64_t)ld_i64(co, 16);
            lasti = off >= 0 && (uint64_t)off < units * 2 && off < SHP_PYFRAME_NO_OFFSET
                        ? (uint32_t)off
                        : SHP_PYFRAME_NO_OFFSET;
            if (minor == 11 && *(f + L.fr_is_entry))
                lasti |= SHP_PYFRAME_ENTRY;
        }
        if (n == SHP_PYSTACK_MAX_FRAMES) {
            w->flags |= SHP_PYSTACK_TRUNCATED;
            break;
        }
        w->f[n].code = co;
        w->f[n].key = code_key(&L, co, units, interp);
        w->f[n].lasti = lasti;
        n++;
    }
    w->n = n;
    return true;
}

static bool walk(const char *ts, struct py_walk *w)
{
    switch (py.L.minor) {
    case 10:
        return walk_as(ts, w, shp_py_layout_table(10), 10);
    case 11:
        return walk_as(ts, w, shp_py_layout_table(11), 11);
    case 12:
        return walk_as(ts, w, shp_py_layout_table(12), 12);
    default: /* 3.13, from its debug offsets */
        return py.layout_313 ? walk_as(ts, w, shp_py_layout_313(), 12) : walk_as(ts, w, &py.L, 12);
    }
}

/* ---- records ---- */

/* A str object's text as UTF-8 into out (NULL: only measure), at most cap bytes, cut at a
 * character. Compact strs only (code objects' names always are); 0 for anything else. */
static size_t str_utf8(const char *s, char *out, size_t cap)
{
    if (!ok_ptr(s) || ld_ptr(s, 8) != py.unicode_type)
        return 0;
    uint32_t state = (uint32_t)ld_i32(s, 32);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    int64_t len = ld_i64(s, 16);
    if (!compact || len < 0 || (kind != 1 && kind != 2 && kind != 4))
        return 0;
    const unsigned char *data =
        (const unsigned char *)s + (ascii ? py.L.str_ascii : py.L.str_compact);
    return shp_py_str_utf8(data, kind, ascii, (size_t)len, out, cap);
}

static uint32_t store_code(void *arg)
{
    const char *co = arg;
    const struct shp_py_layout *L = &py.L;
    const char *name = ld_ptr(co, L->co_name), *file = ld_ptr(co, L->co_filename);
    const char *qual = L->co_qualname ? ld_ptr(co, L->co_qualname) : NULL;
    const char *lt = ld_ptr(co, L->co_linetable);
    size_t nlen = str_utf8(name, NULL, NAME_MAX_BYTES);
    size_t qlen = qual ? str_utf8(qual, NULL, NAME_MAX_BYTES) : 0;
    size_t flen = str_utf8(file, NULL, FILE_MAX_BYTES);
    size_t ltlen = 0;
    uint16_t flags = 0;
    if (ok_ptr(lt) && ld_ptr(lt, 8) == py.bytes_type && ld_i64(lt, 16) > 0) {
        ltlen = (size_t)ld_i64(lt, 16);
        if (ltlen > LINETABLE_MAX_BYTES) {
            ltlen = LINETABLE_MAX_BYTES;
            flags |= SHP_PYCODE_LINETABLE_CUT;
        }
    }
    size_t size = (sizeof(struct shp_rec_pycode) + nlen + qlen + flen + ltlen + 7) & ~(size_t)7;
    uint32_t id = atomic_fetch_add(&py.next_code_id, 1) + 1;
    struct shp_rec_pycode *r = shp_reserve(SHP_REC_PYCODE, size);
    if (!r)
        return 0;
    memset((char *)r + sizeof(r->h), 0, size - sizeof(r->h));
    r->id = id;
    r->py_version = py.version;
    r->firstlineno = ld_i32(co, L->co_firstlineno);
    r->flags = flags;
    char *p = (char *)(r + 1);
    r->name_len = (uint16_t)str_utf8(name, p, nlen);
    p += r->name_len;
    r->qualname_len = qual ? (uint16_t)str_utf8(qual, p, qlen) : 0;
    p += r->qualname_len;
    r->filename_len = (uint16_t)str_utf8(file, p, flen);
    p += r->filename_len;
    if (ltlen)
        memcpy(p, lt + 32, ltlen);
    r->linetable_len = (uint32_t)ltlen;
    shp_rec_publish(r, SHP_REC_PYCODE, size);
    return id;
}

static void write_info(void)
{
    if (atomic_exchange(&py.info_written, 1))
        return;
    struct shp_rec_pyinfo *r = shp_reserve(SHP_REC_PYINFO, sizeof(*r));
    if (!r)
        return;
    memset((char *)r + sizeof(r->h), 0, sizeof(*r) - sizeof(r->h));
    r->py_version = py.version;
    r->eval_lo = py.eval_lo;
    r->eval_hi = py.eval_hi;
    r->interp_lo = py.interp_lo;
    r->interp_hi = py.interp_hi;
    shp_rec_publish(r, SHP_REC_PYINFO, sizeof(*r));
}

static uint32_t store_pystack(void *arg)
{
    const struct py_walk *w = arg;
    write_info();
    uint32_t codes[SHP_PYSTACK_MAX_FRAMES];
    for (int i = 0; i < w->n; i++)
        codes[i] = shp_intern(py.code_tab, CODE_SLOTS, w->f[i].key, store_code,
                              (void *)(uintptr_t)w->f[i].code);
    uint32_t id = shp_stack_new_id();
    size_t size = sizeof(struct shp_rec_pystack) + (size_t)w->n * sizeof(struct shp_pyframe);
    struct shp_rec_pystack *r = shp_reserve(SHP_REC_PYSTACK, size);
    if (!r)
        return 0;
    r->id = id;
    r->native = w->native;
    r->nframes = (uint32_t)w->n;
    r->flags = w->flags;
    struct shp_pyframe *out = (struct shp_pyframe *)(r + 1);
    for (int i = 0; i < w->n; i++) {
        out[i].code = codes[i];
        out[i].lasti = w->f[i].lasti;
    }
    shp_rec_publish(r, SHP_REC_PYSTACK, size);
    return id;
}

/* ---- finding the interpreter ---- */

struct find_obj {
    uintptr_t addr;   /* in: an address inside the object (0: find libpython by name) */
    uintptr_t lo, hi; /* out: its PT_LOAD range */
    char path[PATH_MAX];
};

static int find_obj_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct find_obj *f = data;
    uintptr_t lo, hi;
    shp_load_range(info, &lo, &hi);
    if (f->addr) {
        if (f->addr < lo || f->addr >= hi)
            return 0;
    } else {
        const char *name = info->dlpi_name, *base = name ? strrchr(name, '/') : NULL;
        base = base ? base + 1 : name;
        if (!base || strncmp(base, "libpython3.", 11) != 0)
            return 0;
        snprintf(f->path, sizeof(f->path), "%s", name);
    }
    f->lo = lo;
    f->hi = hi;
    return 1;
}

/* Where the interpreter's symbols are: the global scope (python links libpython, or is it), else
 * a libpython that a program embedding Python opened RTLD_LOCAL. False when neither has them. */
static bool interpreter_handle(void **h)
{
    *h = RTLD_DEFAULT;
    if (shp_libc_dlsym(*h, "PyGILState_GetThisThreadState"))
        return true;
    struct find_obj f = {0};
    if (!dl_iterate_phdr(find_obj_cb, &f))
        return false;
    *h = dlopen(f.path, RTLD_LAZY | RTLD_NOLOAD);
    return *h && shp_libc_dlsym(*h, "PyGILState_GetThisThreadState");
}

static uint32_t interpreter_version(void *h)
{
    const unsigned long *v = shp_libc_dlsym(h, "Py_Version"); /* 3.11+ */
    if (v)
        return (uint32_t)*v;
    const char *(*get)(void) = (const char *(*)(void))shp_libc_dlsym(h, "Py_GetVersion");
    unsigned major = 0, minor = 0, micro = 0;
    if (!get || sscanf(get(), "%u.%u.%u", &major, &minor, &micro) < 2)
        return 0;
    return major << 24 | minor << 16 | micro << 8;
}

static int resolve(void)
{
    void *h;
    if (!interpreter_handle(&h)) {
        SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK, "no Python in this process");
        return PY_ABSENT;
    }
    py.version = interpreter_version(h);
    unsigned major = py.version >> 24, minor = (py.version >> 16) & 0xff;
    if (major != 3 || minor < 10 || minor > 13) {
        SHP_WARN_ONCE(&shp_log, SHP_SUB_STACK,
                      "Python %u.%u: Python call sites support 3.10 to 3.13; native stacks only",
                      major, minor);
        return PY_OFF;
    }
    static const char *const names[] = {
        "PyGILState_GetThisThreadState",
        "Py_IsInitialized",
        "_PyRuntime",
        "PyCode_Type",
        "PyUnicode_Type",
        "PyBytes_Type",
        "_Py_NoneStruct",
        "PyType_Type",
        "_PyEval_EvalFrameDefault",
    };
    void *sym[sizeof(names) / sizeof(names[0])];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        sym[i] = shp_libc_dlsym(h, names[i]);
        if (!sym[i]) {
            SHP_WARN_ONCE(&shp_log, SHP_SUB_STACK, "Python %u.%u has no %s: native stacks only",
                          major, minor, names[i]);
            return PY_OFF;
        }
    }
    py.this_tstate = (this_tstate_fn)sym[0];
    py.is_initialized = (is_initialized_fn)sym[1];
    py.runtime = sym[2];
    py.code_type = sym[3];
    py.unicode_type = sym[4];
    py.bytes_type = sym[5];
    py.none = sym[6];
    /* A debug (trace-refs) or free-threaded build has another object header. */
    if (ld_ptr(sym[3], 8) != sym[7] || ld_ptr(sym[4], 8) != sym[7]) {
        SHP_WARN_ONCE(&shp_log, SHP_SUB_STACK,
                      "Python %u.%u has an object layout of its own (a debug or free-threaded "
                      "build?): native stacks only",
                      major, minor);
        return PY_OFF;
    }
    if (minor == 13) {
        if (!shp_py_layout_from_debug((const void *)py.runtime, py.version, &py.L)) {
            SHP_WARN_ONCE(&shp_log, SHP_SUB_STACK,
                          "Python 3.13's debug offsets are not as expected: native stacks only");
            return PY_OFF;
        }
        py.layout_313 = memcmp(&py.L, shp_py_layout_313(), sizeof(py.L)) == 0;
    } else {
        py.L = *shp_py_layout_table(minor);
    }

    /* Return addresses inside _PyEval_EvalFrameDefault mark where the tools put Python frames. */
    Dl_info info;
    const ElfW(Sym) *es = NULL;
    py.eval_lo = (uintptr_t)sym[8];
    py.eval_hi = py.eval_lo;
    if (dladdr1(sym[8], &info, (void **)&es, RTLD_DL_SYMENT) && es)
        py.eval_hi = py.eval_lo + es->st_size;
    struct find_obj f = {.addr = (uintptr_t)sym[8]};
    if (dl_iterate_phdr(find_obj_cb, &f)) {
        py.interp_lo = f.lo;
        py.interp_hi = f.hi;
    }

    void *tab = mmap(NULL, sizeof(struct shp_intern_slot) * (CODE_SLOTS + MEMO_SLOTS),
                     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tab == MAP_FAILED) {
        SHP_WARN_ONCE(&shp_log, SHP_SUB_STACK, "no memory for Python code objects: native stacks");
        return PY_OFF;
    }
    py.code_tab = tab;
    py.memo = py.code_tab + CODE_SLOTS;
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK, "Python %u.%u.%u call sites", major, minor,
            (py.version >> 8) & 0xff);
    return PY_READY;
}

static int setup(void)
{
    pthread_mutex_lock(&py.mu);
    int st = atomic_load(&py.state);
    if (st == PY_UNRESOLVED) {
        st = resolve();
        atomic_store_explicit(&py.state, st, memory_order_release);
    }
    pthread_mutex_unlock(&py.mu);
    return st;
}

/* The stack of thread state ts's frames over native stack `native`, walked in full. */
static inline __attribute__((always_inline)) uint32_t walked_stack(const char *ts, uint32_t native)
{
    struct py_walk w;
    w.native = native;
    w.flags = 0;
    w.n = 0;
    if (!ok_ptr(ts) || !walk(ts, &w)) {
        atomic_store(&py.state, PY_OFF);
        SHP_WARN_ONCE(&shp_log, SHP_SUB_STACK,
                      "Python %u.%u frames are not laid out as expected; Python call sites are "
                      "off, native stacks only",
                      py.version >> 24, (py.version >> 16) & 0xff);
        return native;
    }
    if (!w.n)
        return native;
    uint64_t h = shp_hash_word(0x3c6ef372fe94f82bull, native);
    for (int i = 0; i < w.n; i++)
        h = shp_hash_word(h, w.f[i].key ^ ((uint64_t)w.f[i].lasti << 32 | w.f[i].lasti));
    uint32_t id = shp_stack_intern(h ? h : 1, store_pystack, &w);
    return id ? id : native;
}

/* From 3.12, what a walk's stack depends on, read cheaply: for each frame its code object's
 * address and number (code_key), its instruction pointer and owner (lasti, the entry marks, a
 * frame not started), or that it is an entry or shim frame; with the native stack and the
 * interpreter. Equal prints, equal stacks: a print seen before gives its stack from the memo,
 * without the code objects' other fields, the keys and the record's hash (walk). 0: no print
 * (a frame without a number, a pointer that is not one, too many frames): walk in full. */
static inline __attribute__((always_inline)) uint64_t print_as(const char *ts, uint32_t native,
                                                               const struct shp_py_layout *layout)
{
    const struct shp_py_layout L = *layout;
    const char *const none = py.none;
    uint64_t h = shp_hash_word(0x8f1bbcdcca62c1d6ull ^ (uintptr_t)ld_ptr(ts, L.ts_interp), native);
    const char *f = ld_ptr(ts, L.ts_frame);
    if (L.cf_current >= 0) {
        if (!ok_ptr(f))
            return 0;
        f = ld_ptr(f, (uint32_t)L.cf_current);
    }
    for (int hops = 0; f; hops++, f = ld_ptr(f, L.fr_back)) {
        if (hops == MAX_HOPS || !ok_ptr(f))
            return 0;
        const char *co = ld_ptr(f, L.fr_code);
        int owner = *(const signed char *)(f + L.fr_owner);
        uint64_t v;
        if (owner == L.owner_cstack || co == none) {
            v = (uint64_t)owner + 1;
        } else {
            if (!ok_ptr(co))
                return 0;
            uint32_t version = (uint32_t)ld_i32(co, (uint32_t)L.co_version);
            if (!version)
                return 0;
            v = (uintptr_t)co * 0x9e3779b97f4a7c15ull + (uint64_t)version * 0xc2b2ae3d27d4eb4full +
                (uintptr_t)ld_ptr(f, L.fr_instr) * 0x165667b19e3779f9ull + (uint64_t)owner;
        }
        h = shp_hash_word(h, v);
    }
    return h ? h : 1;
}

static uint64_t print_of(const char *ts, uint32_t native)
{
    if (py.L.minor == 12)
        return print_as(ts, native, shp_py_layout_table(12));
    if (py.layout_313)
        return print_as(ts, native, shp_py_layout_313());
    return print_as(ts, native, &py.L);
}

/* The stack for `print` from the memo, or walked in full and kept there (in the first free slot
 * of its probes, claimed; none free: not kept). A slot claimed by another thread that has not
 * published yet is not waited for: this call walks on its own. */
static uint32_t memo_stack(uint64_t print, const char *ts, uint32_t native)
{
    struct shp_intern_slot *claimed = NULL;
    for (uint32_t i = 0; i < MEMO_PROBES; i++) {
        struct shp_intern_slot *s = &py.memo[(print + i) & (MEMO_SLOTS - 1)];
        uint64_t cur = atomic_load_explicit(&s->hash, memory_order_acquire);
        if (cur == 0 && atomic_compare_exchange_strong(&s->hash, &cur, print)) {
            claimed = s;
            break;
        }
        if (cur == print) {
            uint32_t id = atomic_load_explicit(&s->id, memory_order_acquire);
            if (id)
                return id == UINT32_MAX ? 0 : id;
            break;
        }
    }
    uint32_t id = walked_stack(ts, native);
    if (claimed)
        atomic_store_explicit(&claimed->id, id ? id : UINT32_MAX, memory_order_release);
    return id;
}

uint32_t shp_py_stack(uint32_t native)
{
    int st = atomic_load_explicit(&py.state, memory_order_acquire);
    if (__builtin_expect(st != PY_READY, 0) && (st != PY_UNRESOLVED || setup() != PY_READY))
        return native;
    /* Not yet, or no longer, a running interpreter: at finalization the main thread frees other
     * threads' states, and a daemon thread may be in here. */
    if (!py.is_initialized() || ld_ptr(py.runtime, py.L.rt_finalizing))
        return native;
    const char *ts = py.this_tstate();
    if (!ts)
        return native;
    uint64_t print = py.L.co_version >= 0 && ok_ptr(ts) ? print_of(ts, native) : 0;
    return print ? memo_stack(print, ts, native) : walked_stack(ts, native);
}

void shp_py_modules_changed(void)
{
    int expect = PY_ABSENT;
    atomic_compare_exchange_strong(&py.state, &expect, PY_UNRESOLVED);
}

void shp_py_atfork_child(void)
{
    /* The child's trace starts empty: code objects and the interpreter are written again. */
    if (py.code_tab)
        memset(py.code_tab, 0, sizeof(*py.code_tab) * (CODE_SLOTS + MEMO_SLOTS));
    atomic_store(&py.next_code_id, 0);
    atomic_store(&py.info_written, 0);
    pthread_mutex_init(&py.mu, NULL);
}

int shp_py_frames(void (*fn)(void *arg, const struct shp_py_frame *f), void *arg)
{
    int st = atomic_load_explicit(&py.state, memory_order_acquire);
    if (st != PY_READY && (st != PY_UNRESOLVED || setup() != PY_READY))
        return 0;
    if (!py.is_initialized() || ld_ptr(py.runtime, py.L.rt_finalizing))
        return 0;
    const char *ts = py.this_tstate();
    struct py_walk w;
    w.native = 0;
    w.flags = 0;
    w.n = 0;
    if (!ts || !ok_ptr(ts) || !walk(ts, &w))
        return 0;
    const struct shp_py_layout *L = &py.L;
    for (int i = 0; i < w.n; i++) {
        const char *co = w.f[i].code;
        char name[NAME_MAX_BYTES + 1], qual[NAME_MAX_BYTES + 1], file[FILE_MAX_BYTES + 1];
        name[str_utf8(ld_ptr(co, L->co_name), name, NAME_MAX_BYTES)] = 0;
        qual[L->co_qualname ? str_utf8(ld_ptr(co, L->co_qualname), qual, NAME_MAX_BYTES) : 0] = 0;
        file[str_utf8(ld_ptr(co, L->co_filename), file, FILE_MAX_BYTES)] = 0;
        struct shp_py_frame f = {.name = name,
                                 .qualname = qual,
                                 .file = file,
                                 .firstlineno = ld_i32(co, L->co_firstlineno),
                                 .lasti = SHP_PYFRAME_OFFSET(w.f[i].lasti)};
        fn(arg, &f);
    }
    return w.n;
}
