/* shapetrace tools: unwinding a live process's threads from copies (unwind.h). libdwfl's own
 * process attach (dwfl_linux_proc_attach) reads registers and memory from the stopped process
 * as it unwinds, and unwinding through libtorch takes far longer than the 50 ms a stop may take;
 * so the stop copies registers and stacks, and dwfl_attach_state's callbacks serve them. The
 * vDSO, which is no file, is copied out of the process before the stop and served from the
 * copy. */
#define _GNU_SOURCE
#include "tools/lib/unwind.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tools/lib/out.h"
#include "tools/lib/ptrace.h"

struct mapping {
    uint64_t lo, hi, dev, ino;
    char *path; /* NULL for anonymous memory */
};

struct shp_unwinder {
    pid_t pid;
    Dwfl_Callbacks cb;
    char *debuginfo_path;
    Dwfl *dwfl;
    bool attached; /* dwfl_attach_state done */
    struct mapping *maps;
    size_t nmaps, capmaps;
    char exe[PATH_MAX];
    const struct shp_thread_image *cur; /* the thread being unwound */
    /* The vDSO's ELF image, copied from its mapping: the kernel's clock_gettime, gettimeofday
     * and time, where CUDA's spin-waits spend their time (seen on an H200: a rank stopped in
     * cudaStreamSynchronize had "0xb66 ([vdso: PID])" for its site). */
    unsigned char *vdso;
    size_t vdso_len;
    uint64_t vdso_lo, vdso_hi;
};

static void free_maps(struct shp_unwinder *u)
{
    for (size_t i = 0; i < u->nmaps; i++)
        free(u->maps[i].path);
    free(u->maps);
}

static int read_maps(struct shp_unwinder *u)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)u->pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? -ESRCH : -errno;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (getline(&line, &cap, f) > 0) {
        unsigned long long lo, hi, off, ino;
        unsigned maj, min;
        int at = 0;
        if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu %n", &lo, &hi, &off, &maj, &min, &ino,
                   &at) < 6)
            continue;
        if (!shp_grow((void **)&u->maps, &u->capmaps, u->nmaps, sizeof(*u->maps))) {
            rc = -ENOMEM;
            break;
        }
        char *name = line + at;
        name[strcspn(name, "\n")] = '\0';
        u->maps[u->nmaps++] = (struct mapping){.lo = lo,
                                               .hi = hi,
                                               .dev = (uint64_t)maj << 32 | min,
                                               .ino = ino,
                                               .path = *name ? strdup(name) : NULL};
    }
    free(line);
    fclose(f);
    return rc;
}

#define VDSO_MAX (64u << 10) /* 8 KiB on x86-64 kernels; a larger mapping is not the vDSO */

/* Copies the [vdso] mapping: its ELF image, section headers and .eh_frame included, lies whole
 * in it. Without one (vdso=0), or when it cannot be read, libdwfl reads it itself. */
static void copy_vdso(struct shp_unwinder *u)
{
    const struct mapping *m = NULL;
    for (size_t i = 0; i < u->nmaps && !m; i++)
        if (u->maps[i].path && !strcmp(u->maps[i].path, "[vdso]"))
            m = &u->maps[i];
    if (!m || m->hi - m->lo > VDSO_MAX || m->hi - m->lo < sizeof(Elf64_Ehdr))
        return;
    size_t len = (size_t)(m->hi - m->lo);
    unsigned char *buf = malloc(len);
    if (!buf)
        return;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)buf;
    if (shp_pt_read(u->pid, m->lo, buf, len) != (ssize_t)len || memcmp(buf, ELFMAG, SELFMAG) ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shoff > len ||
        (uint64_t)eh->e_shnum * eh->e_shentsize > len - eh->e_shoff) {
        free(buf);
        return;
    }
    u->vdso = buf;
    u->vdso_len = len;
    u->vdso_lo = m->lo;
    u->vdso_hi = m->hi;
}

/* Every module's userdata is its unwinder, for find_elf. */
static int set_userdata(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
                        void *arg)
{
    (void)mod;
    (void)name;
    (void)start;
    *userdata = arg;
    return DWARF_CB_OK;
}

/* libdwfl's own, but the vDSO from the copy: dwfl_linux_proc_find_elf would read it from
 * /proc/PID/mem when the unwinder first needs it, after the stop, if that can be opened. */
static int find_elf(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr base,
                    char **file_name, Elf **elfp)
{
    const struct shp_unwinder *u = *userdata;
    if (u && u->vdso && base == u->vdso_lo && name[0] == '[') {
        *file_name = NULL;
        *elfp = elf_memory((char *)u->vdso, u->vdso_len);
        if (*elfp)
            return -1;
    }
    return dwfl_linux_proc_find_elf(mod, userdata, name, base, file_name, elfp);
}

struct shp_unwinder *shp_unwinder_new(pid_t pid, char *err, size_t errlen)
{
    struct shp_unwinder *u = calloc(1, sizeof(*u));
    if (!u) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    u->pid = pid;
    int rc = read_maps(u);
    if (rc < 0) {
        snprintf(err, errlen, "cannot read /proc/%d/maps: %s", (int)pid, strerror(-rc));
        shp_unwinder_free(u);
        return NULL;
    }
    char link[64];
    snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, u->exe, sizeof(u->exe) - 1);
    u->exe[n > 0 ? n : 0] = '\0';
    elf_version(EV_CURRENT);
    copy_vdso(u);
    u->cb.find_elf = find_elf;
    u->cb.find_debuginfo = dwfl_standard_find_debuginfo;
    u->cb.debuginfo_path = &u->debuginfo_path;
    u->dwfl = dwfl_begin(&u->cb);
    if (!u->dwfl) {
        snprintf(err, errlen, "libdwfl: %s", dwfl_errmsg(-1));
        shp_unwinder_free(u);
        return NULL;
    }
    dwfl_report_begin(u->dwfl);
    rc = dwfl_linux_proc_report(u->dwfl, pid);
    dwfl_report_end(u->dwfl, NULL, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "cannot read the modules of pid %d: %s", (int)pid,
                 rc > 0 ? strerror(rc) : dwfl_errmsg(-1));
        shp_unwinder_free(u);
        return NULL;
    }
    dwfl_getmodules(u->dwfl, set_userdata, u, 0);
    return u;
}

void shp_unwinder_free(struct shp_unwinder *u)
{
    if (!u)
        return;
    if (u->dwfl)
        dwfl_end(u->dwfl); /* before the vDSO copy its Elf reads */
    free(u->vdso);
    free_maps(u);
    free(u);
}

static const struct mapping *mapping_of(const struct shp_unwinder *u, uint64_t addr)
{
    for (size_t i = 0; i < u->nmaps; i++)
        if (addr >= u->maps[i].lo && addr < u->maps[i].hi)
            return &u->maps[i];
    return NULL;
}

bool shp_unwinder_stack_top(const struct shp_unwinder *u, uint64_t sp, uint64_t *top)
{
    const struct mapping *m = mapping_of(u, sp);
    if (!m)
        return false;
    *top = m->hi;
    return true;
}

ssize_t shp_unwinder_copy_stack(const struct shp_unwinder *u, struct shp_thread_image *img,
                                size_t max)
{
    img->stack = NULL;
    img->stack_len = 0;
    if (!img->regs_ok)
        return -EINVAL;
    uint64_t sp = img->regs.rsp, lo = sp >= 128 ? sp - 128 : 0, top;
    if (!shp_unwinder_stack_top(u, sp, &top))
        top = lo + max; /* a mapping made after the maps were read: read what is there */
    if (top - lo > max)
        top = lo + max;
    size_t len = (size_t)(top - lo);
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    /* One remote piece per page: a transfer stops at the first page that is not mapped, and
     * never splits a piece, so the copy is as long as the stack is. */
    struct iovec local = {buf, len}, remote[64];
    size_t done = 0;
    while (done < len) {
        size_t k = 0, chunk = 0;
        for (uint64_t a = lo + done; k < 64 && done + chunk < len; k++) {
            size_t piece = 4096 - (size_t)(a & 4095);
            if (piece > len - done - chunk)
                piece = len - done - chunk;
            remote[k] = (struct iovec){(void *)(uintptr_t)a, piece};
            a += piece;
            chunk += piece;
        }
        local = (struct iovec){buf + done, chunk};
        ssize_t got = process_vm_readv(u->pid, &local, 1, remote, k, 0);
        if (got < 0 && done == 0) {
            int e = errno;
            free(buf);
            return -e;
        }
        if (got <= 0)
            break;
        done += (size_t)got;
        if ((size_t)got < chunk)
            break;
    }
    img->stack = buf;
    img->stack_lo = lo;
    img->stack_len = done;
    return (ssize_t)done;
}

/* ---- the unwinder's callbacks: the copied thread ---- */

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_arg)
{
    (void)dwfl;
    struct shp_unwinder *u = arg;
    if (*thread_arg || !u->cur)
        return 0;
    *thread_arg = (void *)u->cur;
    return u->cur->tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_arg)
{
    (void)dwfl;
    struct shp_unwinder *u = arg;
    if (!u->cur || u->cur->tid != tid)
        return false;
    *thread_arg = (void *)u->cur;
    return true;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    (void)dwfl;
    struct shp_unwinder *u = arg;
    const struct shp_thread_image *img = u->cur;
    if (img && addr >= img->stack_lo && addr - img->stack_lo + 8 <= img->stack_len) {
        memcpy(result, img->stack + (addr - img->stack_lo), 8);
        return true;
    }
    return shp_pt_read(u->pid, addr, result, 8) == 8;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *thread_arg)
{
    const struct shp_thread_image *img = thread_arg;
    const struct user_regs_struct *r = &img->regs;
    /* The DWARF numbering of x86-64 (the psABI's): rax rdx rcx rbx rsi rdi rbp rsp r8-r15, then
     * the return address column, which holds the pc. */
    Dwarf_Word regs[17] = {r->rax, r->rdx, r->rcx, r->rbx, r->rsi, r->rdi, r->rbp, r->rsp, r->r8,
                           r->r9,  r->r10, r->r11, r->r12, r->r13, r->r14, r->r15, r->rip};
    return dwfl_thread_state_registers(thread, 0, 17, regs);
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

struct frames {
    uint64_t *pcs;
    bool *ret;
    size_t n, max;
};

static int take_frame(Dwfl_Frame *state, void *arg)
{
    struct frames *f = arg;
    Dwarf_Addr pc;
    bool activation;
    if (!dwfl_frame_pc(state, &pc, &activation) || pc == 0)
        return DWARF_CB_ABORT;
    f->pcs[f->n] = pc;
    f->ret[f->n] = !activation;
    return ++f->n < f->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

size_t shp_unwind(struct shp_unwinder *u, const struct shp_thread_image *img, uint64_t *pcs,
                  bool *ret, size_t max)
{
    if (!img->regs_ok || max == 0)
        return 0;
    if (!u->attached) {
        u->attached = dwfl_attach_state(u->dwfl, NULL, u->pid, &thread_callbacks, u);
        if (!u->attached) {
            pcs[0] = img->regs.rip;
            ret[0] = false;
            return 1;
        }
    }
    struct frames f = {.pcs = pcs, .ret = ret, .max = max};
    u->cur = img;
    dwfl_getthread_frames(u->dwfl, img->tid, take_frame, &f);
    u->cur = NULL;
    if (f.n == 0) {
        pcs[0] = img->regs.rip;
        ret[0] = false;
        f.n = 1;
    }
    return f.n;
}

static void module_info(struct shp_unwinder *u, Dwfl_Module *mod, struct shp_module_info *m)
{
    Dwarf_Addr lo = 0, hi = 0, bias = 0;
    const char *name = dwfl_module_info(mod, NULL, &lo, &hi, NULL, NULL, NULL, NULL);
    *m = (struct shp_module_info){.path = name, .lo = lo, .hi = hi};
    if (dwfl_module_getelf(mod, &bias))
        m->bias = bias;
    const unsigned char *bits;
    GElf_Addr vaddr;
    int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len > 0) {
        m->build_id = bits;
        m->build_id_len = (size_t)len;
    }
    const struct mapping *map = mapping_of(u, lo);
    if (map) {
        m->dev = map->dev;
        m->ino = map->ino;
    }
}

bool shp_unwinder_module(struct shp_unwinder *u, uint64_t addr, struct shp_module_info *m)
{
    Dwfl_Module *mod = dwfl_addrmodule(u->dwfl, addr);
    if (!mod)
        return false;
    module_info(u, mod, m);
    return m->path != NULL;
}

bool shp_unwinder_vdso_frame(struct shp_unwinder *u, uint64_t pc, bool ret, char *out, size_t len)
{
    uint64_t at = ret && pc ? pc - 1 : pc;
    if (!u->vdso || at < u->vdso_lo || at >= u->vdso_hi)
        return false;
    Dwfl_Module *mod = dwfl_addrmodule(u->dwfl, at);
    GElf_Off off = 0;
    GElf_Sym sym;
    const char *name = mod ? dwfl_module_addrinfo(mod, at, &off, &sym, NULL, NULL, NULL) : NULL;
    if (name)
        snprintf(out, len, "%s+0x%" PRIx64 " (" SHP_VDSO_MODULE ")", name, off + (pc - at));
    else
        snprintf(out, len, "0x%" PRIx64 " (" SHP_VDSO_MODULE ")", pc - u->vdso_lo);
    return true;
}

struct sym_search {
    struct shp_unwinder *u;
    bool libpython; /* this pass: libpython3.* modules, else the executable */
    const char *const *names;
    size_t n;
    uint64_t *addr, *size;
    Dwfl_Module *found;
};

static int search_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
                         void *arg)
{
    (void)userdata;
    (void)start;
    struct sym_search *s = arg;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    bool is_lib = !strncmp(base, "libpython3.", 11);
    if (s->libpython ? !is_lib : strcmp(name, s->u->exe) != 0)
        return DWARF_CB_OK;
    int nsyms = dwfl_module_getsymtab(mod);
    bool first = false;
    for (int i = 1; i < nsyms; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *sn = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
        if (!sn || sym.st_shndx == SHN_UNDEF)
            continue;
        for (size_t k = 0; k < s->n; k++) {
            if (s->addr[k] || strcmp(sn, s->names[k]) != 0)
                continue;
            s->addr[k] = addr;
            s->size[k] = sym.st_size;
            first |= k == 0;
        }
    }
    if (!first) {
        memset(s->addr, 0, s->n * sizeof(*s->addr));
        memset(s->size, 0, s->n * sizeof(*s->size));
        return DWARF_CB_OK;
    }
    s->found = mod;
    return DWARF_CB_ABORT;
}

bool shp_unwinder_find_symbols(struct shp_unwinder *u, const char *const *names, size_t n,
                               uint64_t *addr, uint64_t *size, struct shp_module_info *where)
{
    struct sym_search s = {.u = u, .names = names, .n = n, .addr = addr, .size = size};
    memset(addr, 0, n * sizeof(*addr));
    memset(size, 0, n * sizeof(*size));
    for (int pass = 0; pass < 2 && !s.found; pass++) {
        s.libpython = pass == 0;
        dwfl_getmodules(u->dwfl, search_module, &s, 0);
    }
    if (!s.found)
        return false;
    module_info(u, s.found, where);
    return true;
}
