/* shapetrace preload: call sites. Raw return addresses, deduplicated into stack records, plus a
 * module map; the tools symbolize offline (dladdr costs about 1.7 us an address, an unwind about
 * 250 ns for 35 frames). libunwind is loaded RTLD_LOCAL: linked normally it took over the
 * process's _Unwind_* and made C++ exceptions about 10x slower, and it exports a weak
 * `backtrace` that would replace glibc's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/hash.h"
#include "include/shapetrace/env.h"
#include "preload/preload.h"

typedef int (*unw_backtrace_fn)(void **, int);
typedef int (*unw_getcontext_fn)(void *);
typedef int (*unw_init_local_fn)(void *, void *);
typedef int (*unw_step_fn)(void *);
typedef int (*unw_get_reg_fn)(void *, int, uintptr_t *);
/* libunwind's register numbers on x86-64 (UNW_X86_64_RIP, UNW_X86_64_RSP). */
#define UW_REG_IP 16
#define UW_REG_SP 7

static struct {
    pthread_once_t once;
    unw_backtrace_fn unwind;
    /* Its cursor, for the stacks that are kept to be checked (see the call-site cache). */
    unw_getcontext_fn getcontext;
    unw_init_local_fn init_local;
    unw_step_fn step;
    unw_get_reg_fn get_reg;
    bool use_glibc;
    bool validate_all; /* a libunwind before 1.6: its accessor cannot be told what to check */
} uw = {.once = PTHREAD_ONCE_INIT};

/* The loaded objects as last seen (rebuilt when the loader's dlpi_adds or dlpi_subs move),
 * sorted by address, and which of them this trace has a module record of: only those that a
 * stored stack has a frame in are written (a torch process maps hundreds of objects; a stack
 * touches a few dozen). Static: stacks are stored with the guard held, maybe inside an
 * allocator's own call, so nothing here allocates. */
#define MAX_MODULES 2048
struct mod {
    uint64_t lo, hi; /* [lo, hi) of its PT_LOAD segments */
    uint64_t key;    /* lo, hi and the path's hash: another object at the same place differs */
    bool written;    /* this trace has its record */
    bool wanted;     /* a stack being stored has a frame in it */
};
static struct {
    pthread_mutex_t mu;
    uint64_t adds, subs; /* dlpi_adds and dlpi_subs when m[] was made */
    bool made;
    struct mod m[MAX_MODULES];
    unsigned n;
    uint64_t written[MAX_MODULES]; /* keys of the modules written to this trace */
    unsigned nwritten;
} mods = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* libunwind checks that memory is readable, where unwind information is missing or doubtful,
 * by writing it into a pipe of its own: two descriptors, held for good from its first unwind
 * (1.6, 1.7) or its first check (1.8), that an application closing and reusing descriptors
 * turned into its own files (2 bytes read from one, 2 bytes of stack written into the other).
 * So its pipe(2) calls fail, and its reads of memory go through an accessor of ours that checks
 * with no descriptor at all. */

/* The beginning of libunwind's unw_accessors_t (libunwind-common.h), which its local address
 * space starts with; unchanged from 0.99 to 1.8. */
struct uw_accessors {
    void *find_proc_info, *put_unwind_info, *get_dyn_info_list_addr;
    int (*access_mem)(void *as, uintptr_t addr, uintptr_t *val, int write, void *arg);
};

static int no_pipe2(int fds[2], int flags)
{
    (void)fds;
    (void)flags;
    errno = EMFILE;
    return -1;
}

static int no_pipe(int fds[2])
{
    return no_pipe2(fds, 0);
}

/* True if the 8 bytes at addr can be read. rt_sigprocmask copies its new set in before it looks
 * at `how`: with a `how` that does not exist it fails with EFAULT for memory it cannot read and
 * EINVAL otherwise, and changes nothing. No descriptor, no signal, about 100 ns. */
static bool readable(uintptr_t addr)
{
    if (addr < 4096)
        return false;
    return !(syscall(SYS_rt_sigprocmask, ~0, (void *)addr, NULL, 8) < 0 && errno == EFAULT);
}

/* The pages this thread found readable last (libunwind keeps four the same way). */
#define GOOD_PAGES 8
static SHP_TLS uintptr_t good[GOOD_PAGES];
static SHP_TLS unsigned good_next;

static bool checked_readable(uintptr_t addr)
{
    uintptr_t page = addr & ~(uintptr_t)4095;
    if (((addr + 7) & ~(uintptr_t)4095) == page)
        for (unsigned i = 0; i < GOOD_PAGES; i++)
            if (good[i] == page)
                return true;
    if (!readable(addr))
        return false;
    good[good_next++ % GOOD_PAGES] = page;
    return true;
}

/* libunwind 1.6 and later pass the address space's argument with its lowest bit set when the
 * memory is to be checked; older ones pass the cursor, so everything is checked. The words read
 * are other frames' (saved registers, return addresses): not instrumented, as libunwind's own
 * accessor is not, so that AddressSanitizer does not take them for overflows. */
__attribute__((no_sanitize("address", "undefined"))) static int
access_mem(void *as, uintptr_t addr, uintptr_t *val, int write, void *arg)
{
    (void)as;
    if (write) {
        *(volatile uintptr_t *)addr = *val;
        return 0;
    }
    if ((uw.validate_all || ((uintptr_t)arg & 1)) && !checked_readable(addr))
        return -1;
    *val = *(const volatile uintptr_t *)addr;
    return 0;
}

static uintptr_t probe_arg;
static bool probing;

static int access_mem_probe(void *as, uintptr_t addr, uintptr_t *val, int write, void *arg)
{
    if (probing && !probe_arg)
        probe_arg = (uintptr_t)arg;
    return access_mem(as, addr, val, write, arg);
}

static uintptr_t dyn_ptr(const struct link_map *lm, uintptr_t p)
{
    /* glibc relocates these entries of .dynamic in place; a loader that does not leaves them
     * relative to the load address. */
    return p < lm->l_addr ? lm->l_addr + p : p;
}

struct relro {
    uintptr_t base, lo, hi;
};

static int relro_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct relro *r = data;
    if (info->dlpi_addr != r->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            r->lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            r->hi = r->lo + info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}

/* Point the object's imports of `name` (its PLT and GOT slots) at `to`. The object is one we
 * loaded with RTLD_LOCAL; the slots are written once, before it runs. Returns how many, or -1
 * when one of them could not be written (or the object's tables not be read). */
static int redirect_import(void *handle, const char *name, void *to)
{
    struct link_map *lm;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_ld)
        return -1;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) * rel[2] = {NULL, NULL};
    size_t relsz[2] = {0, 0};
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_SYMTAB)
            symtab = (const void *)dyn_ptr(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_STRTAB)
            strtab = (const void *)dyn_ptr(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_JMPREL)
            rel[0] = (const void *)dyn_ptr(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_PLTRELSZ)
            relsz[0] = d->d_un.d_val;
        else if (d->d_tag == DT_RELA)
            rel[1] = (const void *)dyn_ptr(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_RELASZ)
            relsz[1] = d->d_un.d_val;
    }
    if (!symtab || !strtab)
        return -1;
    struct relro ro = {lm->l_addr, 0, 0};
    dl_iterate_phdr(relro_cb, &ro);
    int n = 0;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; rel[k] && i < relsz[k] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &rel[k][i];
            unsigned type = ELF64_R_TYPE(r->r_info);
            if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) ||
                strcmp(strtab + symtab[ELF64_R_SYM(r->r_info)].st_name, name))
                continue;
            void **slot = (void **)(lm->l_addr + r->r_offset);
            uintptr_t page = (uintptr_t)slot & ~(uintptr_t)4095;
            bool ro_slot = (uintptr_t)slot >= ro.lo && (uintptr_t)slot < ro.hi;
            if (ro_slot && mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0)
                return -1;
            __atomic_store_n(slot, to, __ATOMIC_RELEASE);
            if (ro_slot)
                mprotect((void *)page, 4096, PROT_READ);
            n++;
        }
    }
    return n;
}

/* libunwind as loaded at h, made to hold no descriptor and to check memory our way; false when
 * that cannot be done (it is then not used). */
static bool tame_unwinder(void *h)
{
    void **local_as = shp_libc_dlsym(h, "_ULx86_64_local_addr_space");
    int (*getcontext_fn)(void *) = (int (*)(void *))shp_libc_dlsym(h, "_Ux86_64_getcontext");
    int (*init_local)(void *, void *) =
        (int (*)(void *, void *))shp_libc_dlsym(h, "_ULx86_64_init_local");
    if (!local_as || !getcontext_fn || !init_local)
        return false;
    if (redirect_import(h, "pipe2", (void *)no_pipe2) < 0 ||
        redirect_import(h, "pipe", (void *)no_pipe) < 0)
        return false;
    /* Its first cursor initialises it, pipe and local address space included; the probe
     * tells the accessor's argument apart: the context (1.6 on) or the cursor (before). The
     * sizes are libunwind's unw_context_t (a ucontext_t) and unw_cursor_t (127 words), with
     * room to spare. */
    static _Alignas(64) unsigned char ctx[4096], cursor[4096];
    if (getcontext_fn(ctx) != 0 || init_local(cursor, ctx) != 0)
        return false;
    struct uw_accessors *acc = *local_as;
    if (!acc)
        return false;
    __atomic_store_n(&acc->access_mem, access_mem_probe, __ATOMIC_RELEASE);
    probing = true;
    int rc = init_local(cursor, ctx);
    probing = false;
    uw.validate_all = rc != 0 || (probe_arg & ~(uintptr_t)1) != (uintptr_t)ctx;
    __atomic_store_n(&acc->access_mem, access_mem, __ATOMIC_RELEASE);
    uw.step = (unw_step_fn)shp_libc_dlsym(h, "_ULx86_64_step");
    uw.get_reg = (unw_get_reg_fn)shp_libc_dlsym(h, "_ULx86_64_get_reg");
    if (uw.step && uw.get_reg) {
        uw.getcontext = (unw_getcontext_fn)getcontext_fn;
        uw.init_local = (unw_init_local_fn)init_local;
    }
    return true;
}

/* A candidate file to dlopen: a regular file, or a bare name the loader looks up. A FIFO or a
 * device would hold the application inside dlopen. */
static bool loadable(const char *path)
{
    struct stat st;
    return !strchr(path, '/') || (stat(path, &st) == 0 && S_ISREG(st.st_mode));
}

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
        if (!loadable(tries[i]))
            continue;
        void *h = dlopen(tries[i], RTLD_LAZY | RTLD_LOCAL);
        if (!h)
            continue;
        uw.unwind = (unw_backtrace_fn)shp_libc_dlsym(h, "unw_backtrace");
        if (uw.unwind && !tame_unwinder(h)) {
            uw.unwind = NULL;
            SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK,
                    "%s is not a libunwind whose memory checks can be made ours: not used",
                    tries[i]);
        }
        if (uw.unwind)
            SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK, "stacks through %s%s", tries[i],
                    uw.validate_all ? " (checking every read)" : "");
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

static void modules_for(void *const *frames, int n);

/* ---- shared outer frames ----
 *
 * The stacks of one program share their outer frames (main, the interpreter's, the framework's
 * dispatch: 30 to 60 of torch's), so a new stack is stored with its own inner frames only and a
 * reference to a stored stack that holds the rest (SHP_REC_STACK_TAIL). Every stored stack's
 * outer parts, frames[k..n) for k >= 1, are kept here by hash with where they start in it; a new
 * stack takes the longest part it shares. Frame 0 is never shared: the tools read it as the
 * call's own address and the others as return addresses, and a shared frame must be read alike
 * in both stacks. Only stores come here (a new stack: rare), under a lock; nothing allocates. */
#define TAIL_SLOTS (1u << 14)
#define TAIL_PROBES 32
struct tail_slot {
    uint64_t hash; /* 0: free */
    uint32_t id;   /* the stack that holds these frames */
    uint32_t from; /* at this index of its whole list */
};
static struct {
    pthread_mutex_t mu;
    struct tail_slot *tab;
    bool tried;
} tails = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct tail_slot *tail_slot(uint64_t h, bool claim)
{
    for (uint32_t i = 0; i < TAIL_PROBES; i++) {
        struct tail_slot *s = &tails.tab[(h + i) & (TAIL_SLOTS - 1)];
        if (s->hash == h)
            return s;
        if (!s->hash)
            return claim ? s : NULL;
    }
    return NULL;
}

/* hs[k] (1 <= k < n): the hash of frames[k..n), counted from the outermost, with its length. */
static void outer_hashes(void *const *f, int n, uint64_t *hs)
{
    uint64_t h = 0x6a09e667f3bcc909ull;
    for (int k = n - 1; k >= 1; k--) {
        h = shp_hash_word(h, (uint64_t)(uintptr_t)f[k]);
        uint64_t x = shp_hash_word(h, (uint64_t)(n - k));
        hs[k] = x ? x : 1;
    }
}

static uint32_t store_stack(void *arg)
{
    const struct native_frames *nf = arg;
    /* The modules of its frames first: a trace cut right after the stack still names them. */
    modules_for(nf->frames, nf->n);
    pthread_mutex_lock(&tails.mu);
    if (!tails.tried) {
        tails.tried = true;
        void *p = mmap(NULL, sizeof(struct tail_slot) * TAIL_SLOTS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        tails.tab = p == MAP_FAILED ? NULL : p;
    }
    uint64_t hs[SHP_STACK_MAX_FRAMES];
    int own = nf->n; /* frames stored in the record; the rest are a stored stack's */
    const struct tail_slot *shared = NULL;
    if (tails.tab) {
        outer_hashes(nf->frames, nf->n, hs);
        for (int k = 1; k < nf->n && !shared; k++)
            if ((shared = tail_slot(hs[k], false)))
                own = k;
    }
    /* Its id after the lookup: the stack it refers to has a smaller one. */
    uint32_t id = shp_stack_new_id();
    size_t head = shared ? sizeof(struct shp_rec_stack_tail) : sizeof(struct shp_rec_stack);
    size_t size = head + (size_t)own * 8;
    unsigned type = shared ? SHP_REC_STACK_TAIL : SHP_REC_STACK;
    void *r = shp_reserve(type, size);
    if (!r) {
        pthread_mutex_unlock(&tails.mu);
        return 0;
    }
    if (shared) {
        struct shp_rec_stack_tail *t = r;
        t->id = id;
        t->nframes = (uint32_t)own;
        t->tail = shared->id;
        t->from = shared->from;
    } else {
        struct shp_rec_stack *t = r;
        t->id = id;
        t->nframes = (uint32_t)own;
    }
    uint64_t *out = (uint64_t *)((char *)r + head);
    for (int i = 0; i < own; i++)
        out[i] = (uint64_t)(uintptr_t)nf->frames[i];
    shp_rec_publish(r, type, size);
    /* Its own outer parts, for the stacks to come (those past `own` are the shared stack's). */
    for (int k = 1; tails.tab && k < own; k++) {
        struct tail_slot *s = tail_slot(hs[k], true);
        if (s && !s->hash)
            *s = (struct tail_slot){hs[k], id, (uint32_t)k};
    }
    pthread_mutex_unlock(&tails.mu);
    return id;
}

/* Up to `max` return addresses of the calling thread, ours skipped; their number. */
static int unwind_here(void **buf, int max, int *skip)
{
    int n = uw.unwind ? uw.unwind(buf, max) : backtrace(buf, max);
    int k = 0;
    while (k < n && shp_is_self(buf[k]))
        k++;
    *skip = k;
    return n - k;
}

/* The whole native stack, deduplicated into a SHP_REC_STACK; its id (0: none). */
static uint32_t native_stack(void)
{
    void *buf[SHP_STACK_MAX_FRAMES + 8];
    int skip;
    int n = unwind_here(buf, (int)(sizeof(buf) / sizeof(buf[0])), &skip);
    if (n > SHP_STACK_MAX_FRAMES)
        n = SHP_STACK_MAX_FRAMES;
    if (n <= 0)
        return 0;
    struct native_frames nf = {buf + skip, n};
    return shp_stack_intern(hash_frames(nf.frames, n), store_stack, &nf);
}

/* ---- the call-site cache ----
 *
 * An unwind costs about 17 ns a frame, and torch puts 40 to 80 native frames between a Python
 * line and CUDA. Most calls come again from where an earlier one came from, so the stack of a
 * call made from a return address and a stack depth (shp_site_hint) by a thread is kept with
 * where each of its return addresses lies on that thread's stack; a later call from the same
 * place by the same thread reads those words and, if every one still holds the same return
 * address, has the same stack: no unwind. A place keeps up to CACHE_WAYS stacks (the paths that
 * reach it, as a layer's attention and MLP reach one all-reduce), each in a slot of its own; a
 * call whose words match none of them is unwound and kept in place of the oldest. The words
 * read are the caller's own live stack, between this frame and the outermost frame's return
 * address, whose page is checked readable first. Kept only with libunwind's cursor, and never
 * under RLIMIT_AS (2 MiB of address space for the table). */
#define CACHE_SLOTS 2048
#define CACHE_WAYS 4
struct cached {
    _Atomic uint64_t key; /* claimed once; the rest only ever used by the thread of the key */
    _Atomic uint32_t id;  /* 0: none kept (yet); CACHE_NEVER: this place is always unwound */
    uint16_t n;
    uint16_t next; /* a place's first way: the way its next new path replaces */
    uintptr_t at[SHP_STACK_MAX_FRAMES]; /* where frame i's return address lies */
    void *ret[SHP_STACK_MAX_FRAMES];
};
#define CACHE_NEVER UINT32_MAX
static struct cached *cache;
/* Native stacks unwound in full (the cache's first call from a place, a place it cannot keep,
 * or no cache), for the log line at exit (shp_stacks_report); only unwinds add to it. */
static _Atomic uint64_t full_unwinds;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static _Atomic uint32_t cache_gen; /* a forked child's keys differ from its parent's */

static void make_cache(void)
{
    struct rlimit rl;
    if (!uw.step || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur != RLIM_INFINITY)
        return;
    void *p = mmap(NULL, sizeof(struct cached) * CACHE_SLOTS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    cache = p == MAP_FAILED ? NULL : p;
}

/* The slot of `key`, claimed for it if none had it (*fresh); NULL when the table is full. */
static struct cached *cache_slot(uint64_t key, bool *fresh)
{
    *fresh = false;
    for (uint32_t i = 0; i < 16; i++) {
        struct cached *c = &cache[(key + i) & (CACHE_SLOTS - 1)];
        uint64_t cur = atomic_load_explicit(&c->key, memory_order_acquire);
        if (cur == 0 && atomic_compare_exchange_strong(&c->key, &cur, key)) {
            *fresh = true;
            return c;
        }
        if (cur == key)
            return c;
    }
    return NULL;
}

/* True if this thread's stack still holds the kept stack's return addresses where they were.
 * Not instrumented: the words are other frames' (as libunwind's reads are). */
__attribute__((no_sanitize("address", "undefined"))) static bool still_there(const struct cached *c,
                                                                             uintptr_t here)
{
    if (!c->n || c->at[0] <= here || !checked_readable(c->at[c->n - 1]))
        return false;
    for (uint32_t i = 0; i < c->n; i++)
        if (*(const volatile uintptr_t *)c->at[i] != (uintptr_t)c->ret[i])
            return false;
    return true;
}

/* Unwinds with the cursor into c->ret (ours skipped) and c->at; false if a frame's return
 * address was not where the cursor says (a signal frame): such a stack is not kept. */
__attribute__((no_sanitize("address", "undefined"))) static bool unwind_kept(struct cached *c)
{
    /* libunwind's unw_context_t (a ucontext_t) and unw_cursor_t (127 words), with room. */
    _Alignas(64) unsigned char ctx[1536], cursor[1536];
    c->n = 0;
    if (uw.getcontext(ctx) != 0 || uw.init_local(cursor, ctx) != 0)
        return false;
    bool ok = true, ours = true;
    uintptr_t last = 0;
    for (int depth = 0; depth < SHP_STACK_MAX_FRAMES + 16 && uw.step(cursor) > 0; depth++) {
        uintptr_t ip, sp;
        if (uw.get_reg(cursor, UW_REG_IP, &ip) != 0 || uw.get_reg(cursor, UW_REG_SP, &sp) != 0)
            return false;
        if (ours && shp_is_self((void *)ip))
            continue;
        ours = false;
        if (c->n == SHP_STACK_MAX_FRAMES)
            break;
        uintptr_t at = sp - 8;
        if (at <= last || !checked_readable(at) || *(const volatile uintptr_t *)at != ip)
            ok = false;
        last = at;
        c->at[c->n] = at;
        c->ret[c->n++] = (void *)ip;
    }
    return ok && c->n > 0;
}

static uint32_t store_kept(const struct cached *c)
{
    struct native_frames nf = {c->ret, (int)c->n};
    return shp_stack_intern(hash_frames(nf.frames, nf.n), store_stack, &nf);
}

/* The native stack of a call from `hint`, through the cache; 0 and *done false when the cache
 * cannot serve it (the caller unwinds as usual). The place's ways are looked at in turn; the
 * first one that is free, or else the oldest, takes the stack that none of them held. */
static uint32_t cached_stack(struct shp_site_hint hint, bool *done)
{
    *done = false;
    pthread_once(&cache_once, make_cache);
    if (!cache || !hint.pc)
        return 0;
    uint64_t key = shp_hash_word(
        shp_hash_word(shp_hash_word(0x52dce729da3ed12bull, hint.pc), hint.sp),
        (uint64_t)pthread_self() ^ atomic_load_explicit(&cache_gen, memory_order_relaxed));
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    struct cached *way[CACHE_WAYS], *c = NULL;
    uint32_t ways = 0;
    for (; ways < CACHE_WAYS; ways++) {
        uint64_t k = ways ? shp_hash_word(key, ways) : key;
        bool fresh;
        struct cached *w = cache_slot(k ? k : 1, &fresh);
        if (!w)
            break; /* the table is full: the ways found so far take turns */
        if (fresh) {
            c = w;
            break;
        }
        uint32_t id = atomic_load_explicit(&w->id, memory_order_acquire);
        if (id == CACHE_NEVER)
            return 0;
        if (id && still_there(w, here)) {
            *done = true;
            return id;
        }
        way[ways] = w;
    }
    if (!c) {
        if (!ways)
            return 0;
        c = way[way[0]->next % ways];
        way[0]->next = (uint16_t)((way[0]->next + 1) % CACHE_WAYS);
    }
    if (!unwind_kept(c)) {
        atomic_store_explicit(&c->id, CACHE_NEVER, memory_order_release);
        return 0;
    }
    uint32_t id = store_kept(c);
    atomic_store_explicit(&c->id, id ? id : CACHE_NEVER, memory_order_release);
    /* Counted here only when it serves the call: else the caller unwinds it, and counts it. */
    if (id)
        atomic_fetch_add_explicit(&full_unwinds, 1, memory_order_relaxed);
    *done = id != 0;
    return id;
}

SHP_TLS struct shp_site_hint shp_site_hint;

/* With --debug INFO, what call sites cost: the trace clock's ticks in the native part and in the
 * Python part of every call that took a stack, and a clock pair read at the first, to give them
 * in ns at exit (shp_stacks_report). Shared counters: a cost of the debug level only. */
static struct {
    _Atomic uint64_t calls, native, python;
    _Atomic int started;
    uint64_t tsc0, ns0;
} cost;

static inline bool timing(void)
{
    return __builtin_expect(shp_log.level >= SHP_LOG_INFO, 0) && (shp_log.subsys & SHP_SUB_STACK);
}

static void cost_add(uint64_t t0, uint64_t t1, uint64_t t2)
{
    if (!atomic_exchange(&cost.started, 1))
        shp_clock_pair_now(&cost.tsc0, &cost.ns0);
    atomic_fetch_add_explicit(&cost.calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost.native, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost.python, t2 - t1, memory_order_relaxed);
}

uint32_t shp_stack_here(void)
{
    struct shp_site_hint hint = shp_site_hint;
    shp_site_hint.pc = 0;
    if (shp_cfg.stacks == SHP_STACKS_NONE)
        return 0;
    /* The unwinder's memory checks and the records' growth set errno: the caller's is kept. */
    int saved = errno;
    bool timed = timing();
    uint64_t t0 = timed ? shp_clock_now() : 0;
    pthread_once(&uw.once, load_unwinder);
    bool done;
    uint32_t id = cached_stack(hint, &done);
    if (!done) {
        atomic_fetch_add_explicit(&full_unwinds, 1, memory_order_relaxed);
        id = native_stack();
    }
    uint64_t t1 = timed ? shp_clock_now() : 0;
    if (shp_cfg.stacks == SHP_STACKS_PYTHON)
        id = shp_py_stack(id);
    if (timed)
        cost_add(t0, t1, shp_clock_now());
    errno = saved;
    return id;
}

struct counts {
    uint64_t adds, subs;
};

static int counts_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct counts *c = data;
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
    return 1;
}

static const char *module_path(const struct dl_phdr_info *info, char *exe, size_t len)
{
    const char *path = info->dlpi_name;
    if (path && *path)
        return path;
    ssize_t n = readlink("/proc/self/exe", exe, len - 1);
    exe[n > 0 ? n : 0] = 0;
    return exe;
}

static uint64_t module_key(const struct dl_phdr_info *info, uintptr_t lo, uintptr_t hi)
{
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    return shp_mix64(shp_hash_bytes(lo ^ (hi << 1), name, strnlen(name, 4000))) | 1;
}

static int collect_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    uintptr_t lo, hi;
    shp_load_range(info, &lo, &hi);
    if (!hi || mods.n == MAX_MODULES)
        return 0;
    uint64_t key = module_key(info, lo, hi);
    bool written = false;
    for (unsigned i = 0; i < mods.nwritten && !written; i++)
        written = mods.written[i] == key;
    mods.m[mods.n++] = (struct mod){.lo = lo, .hi = hi, .key = key, .written = written};
    return 0;
}

/* m[] sorted by lo, in place (qsort may allocate). A shell sort: a few hundred objects, sorted
 * again only when the loader's list changed. */
static void sort_modules(void)
{
    unsigned gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};
    for (unsigned g = 0; g < sizeof(gaps) / sizeof(gaps[0]); g++)
        for (unsigned i = gaps[g]; i < mods.n; i++) {
            struct mod t = mods.m[i];
            unsigned j = i;
            for (; j >= gaps[g] && mods.m[j - gaps[g]].lo > t.lo; j -= gaps[g])
                mods.m[j] = mods.m[j - gaps[g]];
            mods.m[j] = t;
        }
}

/* The module whose range holds pc (a return address: pc - 1 is in the call), or NULL. */
static struct mod *module_at(uintptr_t pc)
{
    unsigned lo = 0, hi = mods.n;
    uint64_t a = pc - 1;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (mods.m[mid].lo <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (unsigned i = lo; i-- > 0;)
        if (a < mods.m[i].hi)
            return &mods.m[i];
    return NULL;
}

/* The module's GNU build id, at most 32 bytes of it, into id; its length (0 if none). */
static size_t note_build_id(const struct dl_phdr_info *info, uint8_t id[32])
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
                size_t len = nh->n_descsz < 32 ? nh->n_descsz : 32;
                memcpy(id, desc, len);
                return len;
            }
            p = desc + descsz;
        }
    }
    return 0;
}

/* A module's record: the compact one (SHP_REC_MODULE_C) when its range is within 32-bit offsets
 * of its base, else the full one. False when there was no room. */
static bool write_module(uint64_t base, uint64_t lo, uint64_t hi, const uint8_t *id, size_t idlen,
                         const char *path, size_t plen)
{
    if (lo >= base && lo - base <= UINT32_MAX && hi - lo <= UINT32_MAX) {
        size_t rsize = (sizeof(struct shp_rec_module_c) + idlen + plen + 7) & ~(size_t)7;
        struct shp_rec_module_c *r = shp_reserve(SHP_REC_MODULE_C, rsize);
        if (!r)
            return false;
        memset((char *)r + sizeof(r->h), 0, rsize - sizeof(r->h));
        r->base_lo = (uint32_t)base;
        r->base_hi = (uint32_t)(base >> 32);
        r->lo_off = (uint32_t)(lo - base);
        r->len = (uint32_t)(hi - lo);
        r->path_len = (uint16_t)plen;
        r->build_id_len = (uint8_t)idlen;
        memcpy((char *)(r + 1), id, idlen);
        memcpy((char *)(r + 1) + idlen, path, plen);
        shp_rec_publish(r, SHP_REC_MODULE_C, rsize);
        return true;
    }
    size_t rsize = (sizeof(struct shp_rec_module) + plen + 7) & ~(size_t)7;
    struct shp_rec_module *r = shp_reserve(SHP_REC_MODULE, rsize);
    if (!r)
        return false;
    memset((char *)r + sizeof(r->h), 0, rsize - sizeof(r->h));
    r->base = base;
    r->lo = lo;
    r->hi = hi;
    r->path_len = (uint16_t)plen;
    memcpy(r->build_id, id, idlen);
    r->build_id_len = (uint8_t)idlen;
    memcpy(r + 1, path, plen);
    shp_rec_publish(r, SHP_REC_MODULE, rsize);
    return true;
}

/* Writes the record of each wanted module that has none in this trace. */
static int write_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    uintptr_t lo, hi;
    shp_load_range(info, &lo, &hi);
    if (!hi)
        return 0;
    struct mod *m = module_at(lo + 1);
    uint64_t key = module_key(info, lo, hi);
    if (!m || m->key != key || !m->wanted || m->written || mods.nwritten == MAX_MODULES)
        return 0;
    m->wanted = false;
    char exe[PATH_MAX];
    const char *path = module_path(info, exe, sizeof(exe));
    uint8_t id[32];
    size_t idlen = note_build_id(info, id);
    if (!write_module(info->dlpi_addr, lo, hi, id, idlen, path, strnlen(path, 4000)))
        return 0;
    m->written = true;
    mods.written[mods.nwritten++] = key;
    return 0;
}

/* Module records for the objects that frames[0..n) lie in and that this trace has none of yet:
 * what offline symbolization needs for this stack, and no more. An object loaded since the last
 * look (dlopen) is seen because the loader's counts moved. */
static void modules_for(void *const *frames, int n)
{
    struct counts now = {0, 0};
    dl_iterate_phdr(counts_cb, &now);
    pthread_mutex_lock(&mods.mu);
    bool changed = !mods.made || now.adds != mods.adds || now.subs != mods.subs;
    if (changed) {
        mods.n = 0;
        dl_iterate_phdr(collect_cb, NULL);
        sort_modules();
        mods.adds = now.adds;
        mods.subs = now.subs;
        mods.made = true;
    }
    bool want = false;
    for (int i = 0; i < n; i++) {
        struct mod *m = module_at((uintptr_t)frames[i]);
        if (m && !m->written) {
            m->wanted = true;
            want = true;
        }
    }
    if (want)
        dl_iterate_phdr(write_cb, NULL);
    pthread_mutex_unlock(&mods.mu);
    if (changed && shp_cfg.stacks == SHP_STACKS_PYTHON)
        shp_py_modules_changed();
}

void shp_stacks_report(void)
{
    if (shp_cfg.stacks == SHP_STACKS_NONE)
        return;
    uint64_t n = atomic_load_explicit(&full_unwinds, memory_order_relaxed);
    if (!n)
        return; /* no native stack taken: nothing to say */
    const char *how = cache      ? "the call-site cache served the others"
                      : !uw.step ? "no call-site cache: glibc's unwinder"
                                 : "no call-site cache: an address-space limit";
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK, "native stacks unwound in full: %llu (%s)",
            (unsigned long long)n, how);
    uint64_t calls = atomic_load(&cost.calls);
    if (!calls)
        return;
    /* Ticks to ns: the trace clock's rate since the first timed call (1 where it is in ns). */
    double per_tick = 1.0;
    if (shp_clock_kind == SHP_CLOCK_TSC) {
        uint64_t tsc, ns;
        shp_clock_pair_now(&tsc, &ns);
        per_tick = tsc > cost.tsc0 ? (double)(ns - cost.ns0) / (double)(tsc - cost.tsc0) : 0.0;
    }
    double nat = (double)atomic_load(&cost.native) * per_tick / (double)calls,
           py = (double)atomic_load(&cost.python) * per_tick / (double)calls;
    SHP_LOG(&shp_log, SHP_LOG_INFO, SHP_SUB_STACK,
            "call sites took %.0f ns a call: native %.0f, Python %.0f (%llu calls, timed)",
            nat + py, nat, py, (unsigned long long)calls);
}

void shp_stacks_atfork_child(void)
{
    /* The child's trace starts empty: its stacks and modules must be written again. */
    shp_stackid_atfork_child();
    shp_py_atfork_child();
    atomic_fetch_add(&cache_gen, 0x9e3779b9u);
    atomic_store_explicit(&full_unwinds, 0, memory_order_relaxed);
    atomic_store(&cost.calls, 0);
    atomic_store(&cost.native, 0);
    atomic_store(&cost.python, 0);
    atomic_store(&cost.started, 0);
    pthread_mutex_init(&mods.mu, NULL);
    pthread_mutex_init(&tails.mu, NULL);
    if (tails.tab)
        memset(tails.tab, 0, sizeof(*tails.tab) * TAIL_SLOTS);
    mods.n = 0;
    mods.nwritten = 0;
    mods.made = false;
}
