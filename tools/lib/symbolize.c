/* shapetrace tools: turns recorded return addresses into "function (file:line)" texts with
 * libdwfl, opening each module's file (checked against its recorded build id) on first use. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "tools/lib/symbolize.h"

#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/lib/out.h"
#include "tools/lib/symfile.h"

enum mod_state {
    MOD_PENDING,  /* not opened yet */
    MOD_READY,    /* reported to libdwfl; dm is set */
    MOD_UNUSABLE, /* no file here, not ELF, or another build id: offsets only */
};

/* One address range of one DWARF unit, in the debug file's addresses. */
struct cu_range {
    Dwarf_Addr lo;
    Dwarf_Addr hi;
    Dwarf_Die cu;
};

struct module {
    char *path;
    const char *name; /* basename, inside path */
    uint64_t base;
    uint64_t lo;
    uint64_t hi;
    uint8_t *build_id;
    size_t build_id_len;
    enum mod_state state;
    Dwfl_Module *dm;
    /* Our own unit ranges, built on the first line libdwfl could not find (see find_line). */
    bool cu_ranges_built;
    struct cu_range *cu_ranges;
    size_t n_cu_ranges;
    int key; /* its identity in the shared cache; -1: not looked up yet */
};

struct cache_entry {
    uint64_t addr;
    bool is_ret;
    char *text; /* NULL: slot free */
};

struct shp_symbolizer {
    /* libdwfl keeps a pointer to its callbacks, so they live as long as the symbolizer. */
    Dwfl_Callbacks callbacks;
    char *debuginfo_path; /* NULL: elfutils' default search path */
    Dwfl *dwfl;
    struct module *mods;
    size_t nmods;
    size_t capmods;
    struct cache_entry *cache;
    size_t cache_cap; /* a power of two, or 0 */
    size_t cache_count;
    const struct shp_symfile *symfile; /* texts from the traced host, for modules unusable here */
    struct shp_symfile *own_symfile;   /* symfile when s owns it */
    struct shp_symcache *shared;
};

/* What makes a file the same one for the shared cache. */
struct file_id {
    bool present;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

/* A module as the shared cache knows it: everything its frame texts depend on but the offset. */
struct mod_key {
    char *path;
    uint8_t *build_id;
    size_t build_id_len;
    struct file_id file;
    const struct shp_symfile *symfile;
};

struct shared_text {
    uint64_t off; /* address minus load bias */
    uint32_t key;
    bool is_ret;
    char *text; /* NULL: slot free */
};

struct loaded_symfile {
    char *path;
    struct file_id file;
    struct shp_symfile *f; /* NULL: none there, or unreadable */
};

struct shp_symcache {
    struct mod_key *keys;
    size_t nkeys, capkeys;
    struct shared_text *tab;
    size_t cap, count; /* cap a power of two, or 0 */
    struct loaded_symfile *files;
    size_t nfiles, capfiles;
};

#define CACHE_MIN_CAP 1024

__attribute__((format(printf, 2, 3))) static int fmt_text(char **text, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    int n = vasprintf(text, fmt, ap);
    va_end(ap);
    if (n < 0) {
        *text = NULL;
        return -ENOMEM;
    }
    return 0;
}

static void copy_out(char *out, size_t outlen, const char *text)
{
    size_t n = strlen(text);

    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, text, n);
    out[n] = '\0';
}

static size_t cache_slot(uint64_t addr, bool is_ret, size_t cap)
{
    uint64_t h = (addr ^ (is_ret ? 0x5bd1e995u : 0)) * 0x9e3779b97f4a7c15ull;

    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static const char *cache_find(const struct shp_symbolizer *s, uint64_t addr, bool is_ret)
{
    if (s->cache_cap == 0)
        return NULL;
    for (size_t i = cache_slot(addr, is_ret, s->cache_cap);; i = (i + 1) & (s->cache_cap - 1)) {
        const struct cache_entry *e = &s->cache[i];

        if (e->text == NULL)
            return NULL;
        if (e->addr == addr && e->is_ret == is_ret)
            return e->text;
    }
}

static void cache_put(struct cache_entry *tab, size_t cap, uint64_t addr, bool is_ret, char *text)
{
    size_t i = cache_slot(addr, is_ret, cap);

    while (tab[i].text != NULL)
        i = (i + 1) & (cap - 1);
    tab[i].addr = addr;
    tab[i].is_ret = is_ret;
    tab[i].text = text;
}

/* Takes text on success. The table stays at most half full so that probes stay short. */
static int cache_insert(struct shp_symbolizer *s, uint64_t addr, bool is_ret, char *text)
{
    if (2 * (s->cache_count + 1) > s->cache_cap) {
        size_t cap = s->cache_cap ? 2 * s->cache_cap : CACHE_MIN_CAP;
        struct cache_entry *tab = calloc(cap, sizeof(*tab));

        if (tab == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < s->cache_cap; i++)
            if (s->cache[i].text != NULL)
                cache_put(tab, cap, s->cache[i].addr, s->cache[i].is_ret, s->cache[i].text);
        free(s->cache);
        s->cache = tab;
        s->cache_cap = cap;
    }
    cache_put(s->cache, s->cache_cap, addr, is_ret, text);
    s->cache_count++;
    return 0;
}

static void cache_clear(struct shp_symbolizer *s)
{
    for (size_t i = 0; i < s->cache_cap; i++) {
        free(s->cache[i].text);
        s->cache[i].text = NULL;
    }
    s->cache_count = 0;
}

struct shp_symbolizer *shp_symbolizer_new(void)
{
    struct shp_symbolizer *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    /* Offline callbacks: every module is reported with its file, so find_elf only serves
     * libdwfl's own fallbacks; debug info is searched by build id and debuglink. */
    s->callbacks.find_elf = dwfl_build_id_find_elf;
    s->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
    s->callbacks.section_address = dwfl_offline_section_address;
    s->callbacks.debuginfo_path = &s->debuginfo_path;
    return s;
}

void shp_symbolizer_free(struct shp_symbolizer *s)
{
    if (s == NULL)
        return;
    if (s->dwfl != NULL)
        dwfl_end(s->dwfl);
    for (size_t i = 0; i < s->nmods; i++) {
        free(s->mods[i].path);
        free(s->mods[i].build_id);
        free(s->mods[i].cu_ranges);
    }
    free(s->mods);
    cache_clear(s);
    free(s->cache);
    shp_symfile_free(s->own_symfile);
    free(s);
}

static bool same_module(const struct module *m, const char *path, uint64_t base, uint64_t lo,
                        uint64_t hi, const uint8_t *build_id, size_t build_id_len)
{
    return m->base == base && m->lo == lo && m->hi == hi && m->build_id_len == build_id_len &&
           (build_id_len == 0 || memcmp(m->build_id, build_id, build_id_len) == 0) &&
           strcmp(m->path, path) == 0;
}

void shp_symbolizer_set_symfile(struct shp_symbolizer *s, struct shp_symfile *f)
{
    if (s == NULL) {
        shp_symfile_free(f);
        return;
    }
    shp_symfile_free(s->own_symfile);
    s->symfile = s->own_symfile = f;
    cache_clear(s);
    for (size_t i = 0; i < s->nmods; i++)
        s->mods[i].key = -1;
}

void shp_symbolizer_use_symfile(struct shp_symbolizer *s, const struct shp_symfile *f)
{
    if (s == NULL)
        return;
    shp_symfile_free(s->own_symfile);
    s->own_symfile = NULL;
    s->symfile = f;
    cache_clear(s);
    for (size_t i = 0; i < s->nmods; i++)
        s->mods[i].key = -1;
}

void shp_symbolizer_set_cache(struct shp_symbolizer *s, struct shp_symcache *c)
{
    if (s != NULL)
        s->shared = c;
}

static struct file_id file_id_of(const char *path)
{
    struct stat st;
    struct file_id id = {0};

    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        id = (struct file_id){.present = true,
                              .dev = st.st_dev,
                              .ino = st.st_ino,
                              .size = st.st_size,
                              .mtime = st.st_mtim};
    return id;
}

static bool same_file_id(const struct file_id *a, const struct file_id *b)
{
    return a->present == b->present && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

struct shp_symcache *shp_symcache_new(void)
{
    return calloc(1, sizeof(struct shp_symcache));
}

void shp_symcache_free(struct shp_symcache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nkeys; i++) {
        free(c->keys[i].path);
        free(c->keys[i].build_id);
    }
    free(c->keys);
    for (size_t i = 0; i < c->cap; i++)
        free(c->tab[i].text);
    free(c->tab);
    for (size_t i = 0; i < c->nfiles; i++) {
        free(c->files[i].path);
        shp_symfile_free(c->files[i].f);
    }
    free(c->files);
    free(c);
}

const struct shp_symfile *shp_symcache_symfile_near(struct shp_symcache *c, const char *trace_path,
                                                    const char *host, size_t host_max)
{
    char path[4096];

    if (c == NULL || !shp_symfile_path_near(path, sizeof(path), trace_path, host, host_max))
        return NULL;

    struct file_id id = file_id_of(path);

    for (size_t i = 0; i < c->nfiles; i++)
        if (!strcmp(c->files[i].path, path) && same_file_id(&c->files[i].file, &id))
            return c->files[i].f;
    if (!shp_grow((void **)&c->files, &c->capfiles, c->nfiles, sizeof(*c->files)))
        return NULL;

    struct loaded_symfile *l = &c->files[c->nfiles];

    l->path = strdup(path);
    if (l->path == NULL)
        return NULL;
    l->file = id;
    /* Loaded whatever is there: what is wrong with it (a directory, say) is said once. */
    l->f = shp_symfile_load(path);
    c->nfiles++;
    return l->f;
}

/* m's index in the shared cache's module keys, added when new; -1 when out of memory. The stat
 * is once per module and process: a file rebuilt between two traces is another key. */
static int module_key(struct shp_symbolizer *s, struct module *m)
{
    struct shp_symcache *c = s->shared;

    if (m->key >= 0)
        return m->key;
    /* A symbol file of s's own could be freed and another loaded at its address. */
    if (s->own_symfile != NULL)
        return -1;

    struct file_id id = file_id_of(m->path);

    for (size_t i = 0; i < c->nkeys; i++) {
        const struct mod_key *k = &c->keys[i];

        if (k->symfile == s->symfile && k->build_id_len == m->build_id_len &&
            same_file_id(&k->file, &id) && !strcmp(k->path, m->path) &&
            (m->build_id_len == 0 || !memcmp(k->build_id, m->build_id, m->build_id_len)))
            return m->key = (int)i;
    }
    if (c->nkeys >= INT32_MAX ||
        !shp_grow((void **)&c->keys, &c->capkeys, c->nkeys, sizeof(*c->keys)))
        return -1;

    struct mod_key *k = &c->keys[c->nkeys];

    *k = (struct mod_key){.path = strdup(m->path),
                          .build_id_len = m->build_id_len,
                          .file = id,
                          .symfile = s->symfile};
    if (m->build_id_len != 0 && (k->build_id = malloc(m->build_id_len)) != NULL)
        memcpy(k->build_id, m->build_id, m->build_id_len);
    if (k->path == NULL || (m->build_id_len != 0 && k->build_id == NULL)) {
        free(k->path);
        free(k->build_id);
        return -1;
    }
    return m->key = (int)c->nkeys++;
}

static size_t shared_slot(uint32_t key, uint64_t off, bool is_ret, size_t cap)
{
    return cache_slot(off ^ ((uint64_t)key << 40), is_ret, cap);
}

static const char *shared_find(const struct shp_symcache *c, uint32_t key, uint64_t off,
                               bool is_ret)
{
    if (c->cap == 0)
        return NULL;
    for (size_t i = shared_slot(key, off, is_ret, c->cap);; i = (i + 1) & (c->cap - 1)) {
        const struct shared_text *e = &c->tab[i];

        if (e->text == NULL)
            return NULL;
        if (e->key == key && e->off == off && e->is_ret == is_ret)
            return e->text;
    }
}

static void shared_put(struct shared_text *tab, size_t cap, struct shared_text e)
{
    size_t i = shared_slot(e.key, e.off, e.is_ret, cap);

    while (tab[i].text != NULL)
        i = (i + 1) & (cap - 1);
    tab[i] = e;
}

/* Keeps a copy of text; out of memory only loses the saving. */
static void shared_insert(struct shp_symcache *c, uint32_t key, uint64_t off, bool is_ret,
                          const char *text)
{
    if (2 * (c->count + 1) > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : CACHE_MIN_CAP;
        struct shared_text *tab = calloc(cap, sizeof(*tab));

        if (tab == NULL)
            return;
        for (size_t i = 0; i < c->cap; i++)
            if (c->tab[i].text != NULL)
                shared_put(tab, cap, c->tab[i]);
        free(c->tab);
        c->tab = tab;
        c->cap = cap;
    }

    char *copy = strdup(text);

    if (copy == NULL)
        return;
    shared_put(c->tab, c->cap,
               (struct shared_text){.off = off, .key = key, .is_ret = is_ret, .text = copy});
    c->count++;
}

int shp_symbolizer_add_module(struct shp_symbolizer *s, const char *path, uint64_t base,
                              uint64_t lo, uint64_t hi, const uint8_t *build_id,
                              size_t build_id_len)
{
    if (s == NULL || path == NULL || lo >= hi || (build_id == NULL && build_id_len != 0))
        return -EINVAL;
    for (size_t i = 0; i < s->nmods; i++)
        if (same_module(&s->mods[i], path, base, lo, hi, build_id, build_id_len))
            return 0;

    if (s->nmods == s->capmods) {
        size_t cap = s->capmods ? 2 * s->capmods : 32;
        struct module *mods = realloc(s->mods, cap * sizeof(*mods));

        if (mods == NULL)
            return -ENOMEM;
        s->mods = mods;
        s->capmods = cap;
    }

    struct module *m = &s->mods[s->nmods];

    memset(m, 0, sizeof(*m));
    m->path = strdup(path);
    if (m->path == NULL)
        return -ENOMEM;
    if (build_id_len != 0) {
        m->build_id = malloc(build_id_len);
        if (m->build_id == NULL) {
            free(m->path);
            return -ENOMEM;
        }
        memcpy(m->build_id, build_id, build_id_len);
    }
    const char *slash = strrchr(m->path, '/');

    m->name = slash ? slash + 1 : m->path;
    m->base = base;
    m->lo = lo;
    m->hi = hi;
    m->build_id_len = build_id_len;
    m->state = MOD_PENDING;
    m->key = -1;
    s->nmods++;
    /* The new module may take over addresses that were "0xADDR" or another module's. */
    cache_clear(s);
    return 0;
}

/* The module registered last whose range holds addr, or NULL. */
static struct module *find_module(struct shp_symbolizer *s, uint64_t addr)
{
    for (size_t i = s->nmods; i-- > 0;)
        if (s->mods[i].lo <= addr && addr < s->mods[i].hi)
            return &s->mods[i];
    return NULL;
}

/* A file of the right name but from another build (the tools often run on another machine, or
 * after an upgrade) would give confidently wrong names, so it is not used at all. */
static bool build_id_matches(int fd, const struct module *m)
{
    if (m->build_id_len == 0)
        return true;

    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);

    if (elf == NULL)
        return false;

    const void *bits = NULL;
    ssize_t n = dwelf_elf_gnu_build_id(elf, &bits);
    bool ok = n > 0 && (size_t)n == m->build_id_len && memcmp(bits, m->build_id, (size_t)n) == 0;

    elf_end(elf);
    return ok;
}

/* Reports m to libdwfl, creating the session on first use. Leaves m READY or UNUSABLE, or
 * PENDING with -ENOMEM when the session could not be created. */
static int open_module(struct shp_symbolizer *s, struct module *m)
{
    if (s->dwfl == NULL) {
        elf_version(EV_CURRENT);
        s->dwfl = dwfl_begin(&s->callbacks);
        if (s->dwfl == NULL)
            return -ENOMEM;
    }
    m->state = MOD_UNUSABLE;

    /* O_NONBLOCK and the S_ISREG test: a path from another machine may name a FIFO or a
     * device here, whose open or read would block or never end. */
    int fd = open(m->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;

    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !build_id_matches(fd, m)) {
        close(fd);
        return 0;
    }

    /* A name of our own per module: libdwfl treats a second report under the same name and
     * range but another file as an overlap and frees the first module at dwfl_report_end,
     * which would leave a dangling dm in our table. */
    char name[32];

    snprintf(name, sizeof(name), "shp-module-%zu", (size_t)(m - s->mods));
    /* add_p_vaddr = true: base is the load bias (dlpi_addr). With false libdwfl takes base as
     * the address of the first PT_LOAD segment, which differs for objects linked at a nonzero
     * address. For ET_EXEC libdwfl ignores base either way. */
    dwfl_report_begin_add(s->dwfl);
    Dwfl_Module *dm = dwfl_report_elf(s->dwfl, name, m->path, fd, m->base, true);

    if (dm == NULL)
        close(fd); /* on success libdwfl owns fd; on failure it leaves it to us */
    dwfl_report_end(s->dwfl, NULL, NULL);
    if (dm != NULL) {
        m->dm = dm;
        m->state = MOD_READY;
    }
    return 0;
}

static int cmp_cu_range(const void *a, const void *b)
{
    const struct cu_range *x = a, *y = b;

    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int build_cu_ranges(struct module *m)
{
    Dwarf_Addr bias;
    Dwarf *dw = dwfl_module_getdwarf(m->dm, &bias);
    Dwarf_CU *unit = NULL;
    Dwarf_Half version;
    uint8_t unit_type;
    Dwarf_Die cudie;
    size_t cap = 0;

    m->cu_ranges_built = true;
    if (dw == NULL)
        return 0;
    while (dwarf_get_units(dw, unit, &unit, &version, &unit_type, &cudie, NULL) == 0) {
        Dwarf_Addr base, lo, hi;
        ptrdiff_t it = 0;

        while ((it = dwarf_ranges(&cudie, it, &base, &lo, &hi)) > 0) {
            if (lo >= hi)
                continue;
            if (m->n_cu_ranges == cap) {
                size_t ncap = cap ? 2 * cap : 64;
                struct cu_range *r = realloc(m->cu_ranges, ncap * sizeof(*r));

                if (r == NULL) {
                    free(m->cu_ranges);
                    m->cu_ranges = NULL;
                    m->n_cu_ranges = 0;
                    return -ENOMEM;
                }
                m->cu_ranges = r;
                cap = ncap;
            }
            m->cu_ranges[m->n_cu_ranges++] = (struct cu_range){.lo = lo, .hi = hi, .cu = cudie};
        }
    }
    if (m->n_cu_ranges > 1)
        qsort(m->cu_ranges, m->n_cu_ranges, sizeof(*m->cu_ranges), cmp_cu_range);
    return 0;
}

/* The source line of addr in m, or NULL. libdwfl of elfutils 0.188 finds a unit only through
 * .debug_aranges, which clang does not emit by default (a clang -g build gave no lines at all),
 * so when it finds nothing we look the unit up in ranges read from the units themselves. */
static const char *find_line(struct module *m, uint64_t addr, int *lineno)
{
    Dwfl_Line *line = dwfl_module_getsrc(m->dm, addr);

    if (line != NULL)
        return dwfl_lineinfo(line, NULL, lineno, NULL, NULL, NULL);

    Dwarf_Addr bias;

    if (dwfl_module_getdwarf(m->dm, &bias) == NULL)
        return NULL;
    if (!m->cu_ranges_built && build_cu_ranges(m) != 0)
        return NULL;

    Dwarf_Addr a = addr - bias;
    size_t lo = 0, hi = m->n_cu_ranges;

    /* The last range starting at or below a; units seldom overlap, so look back a little. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (m->cu_ranges[mid].lo <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo, back = 0; i-- > 0 && back < 8; back++) {
        struct cu_range *r = &m->cu_ranges[i];
        Dwarf_Line *dl;

        if (a >= r->hi || (dl = dwarf_getsrc_die(&r->cu, a)) == NULL)
            continue;
        if (dwarf_lineno(dl, lineno) != 0)
            return NULL;
        return dwarf_linesrc(dl, NULL, NULL);
    }
    return NULL;
}

/* Builds the text for addr into *text (malloc'd). On -ENOMEM *text may still hold a degraded
 * text, which must not be cached. */
static int describe(struct shp_symbolizer *s, uint64_t addr, bool is_ret, char **text)
{
    /* A return address points after the call, possibly past the end of the function or at
     * the next line; the call instruction itself ends at addr - 1. */
    uint64_t lookup = (is_ret && addr > 0) ? addr - 1 : addr;
    struct module *m = find_module(s, lookup);
    int rc = 0;

    *text = NULL;
    if (m == NULL)
        return fmt_text(text, "0x%" PRIx64, addr);
    if (m->state == MOD_PENDING)
        rc = open_module(s, m);

    const char *func = NULL;
    const char *file = NULL;
    GElf_Off off = 0;
    int lineno = 0;

    if (m->state == MOD_READY) {
        GElf_Sym sym;
        GElf_Word shndx;
        Elf *elf;
        Dwarf_Addr bias;

        func = dwfl_module_addrinfo(m->dm, lookup, &off, &sym, &shndx, &elf, &bias);
        if (func != NULL && func[0] == '\0')
            func = NULL;

        file = find_line(m, lookup, &lineno);
        /* Line 0 marks compiler-made code with no source line. */
        if (file == NULL || file[0] == '\0' || lineno <= 0)
            file = NULL;
    }

    int frc;
    const char *recorded = NULL;

    /* The module is not here, or is another build: what the traced host resolved, if it did. */
    if (m->state == MOD_UNUSABLE && s->symfile != NULL)
        recorded =
            shp_symfile_find(s->symfile, m->build_id, m->build_id_len, addr - m->base, is_ret);
    if (recorded != NULL)
        frc = fmt_text(text, "%s", recorded);
    else if (func != NULL && file != NULL)
        frc = fmt_text(text, "%s (%s:%d)", func, file, lineno);
    else if (func != NULL)
        frc =
            fmt_text(text, "%s+0x%" PRIx64 " (%s)", func, (uint64_t)off + (addr - lookup), m->name);
    else if (file != NULL)
        frc = fmt_text(text, "0x%" PRIx64 " (%s, %s:%d)", addr - m->base, m->name, file, lineno);
    else
        frc = fmt_text(text, "0x%" PRIx64 " (%s)", addr - m->base, m->name);
    return rc ? rc : frc;
}

int shp_symbolize(struct shp_symbolizer *s, uint64_t addr, bool is_return_address, char *out,
                  size_t outlen)
{
    if (s == NULL || out == NULL || outlen == 0)
        return -EINVAL;

    const char *hit = cache_find(s, addr, is_return_address);

    if (hit != NULL) {
        copy_out(out, outlen, hit);
        return 0;
    }

    /* Another process's symbolizer may have made this text already: same module, same offset. */
    int key = -1;
    uint64_t off = 0;

    if (s->shared != NULL) {
        struct module *m = find_module(s, is_return_address && addr > 0 ? addr - 1 : addr);

        if (m != NULL && (key = module_key(s, m)) >= 0) {
            off = addr - m->base;
            hit = shared_find(s->shared, (uint32_t)key, off, is_return_address);

            char *copy = hit ? strdup(hit) : NULL;

            if (copy != NULL) {
                copy_out(out, outlen, copy);
                if (cache_insert(s, addr, is_return_address, copy) != 0)
                    free(copy);
                return 0;
            }
        }
    }

    char *text;
    int rc = describe(s, addr, is_return_address, &text);

    if (text == NULL) {
        snprintf(out, outlen, "0x%" PRIx64, addr);
        return rc ? rc : -ENOMEM;
    }
    copy_out(out, outlen, text);
    if (rc == 0 && key >= 0)
        shared_insert(s->shared, (uint32_t)key, off, is_return_address, text);
    /* The cache only saves time: a text that cannot be cached is still a good answer. */
    if (rc != 0 || cache_insert(s, addr, is_return_address, text) != 0)
        free(text);
    return rc;
}
