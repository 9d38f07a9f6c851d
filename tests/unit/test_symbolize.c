/* Unit test of tools/lib/symbolize.c: registers this process's own modules the way the preload does
 * and symbolizes addresses whose names and lines are known here. Build with -g -O0, without
 * -rdynamic, so that static functions are found only through .symtab and DWARF. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/harness.h"
#include "tools/lib/symbolize.h"

struct self_module {
    char path[4096];
    uint64_t base;
    uint64_t lo;
    uint64_t hi;
    uint8_t build_id[32];
    size_t build_id_len;
};

static struct self_module exe; /* the test program itself, for (f) */
static int nmodules;

/* The NT_GNU_BUILD_ID note from a PT_NOTE segment mapped at seg, or 0 bytes. */
static size_t find_build_id(const unsigned char *seg, size_t size, size_t align, uint8_t *out)
{
    size_t pos = 0;

    if (align != 8)
        align = 4;
    while (pos + sizeof(ElfW(Nhdr)) <= size) {
        const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(seg + pos);
        size_t name_at = pos + sizeof(*nh);
        size_t desc_at = name_at + ((nh->n_namesz + align - 1) & ~(align - 1));
        size_t next = desc_at + ((nh->n_descsz + align - 1) & ~(align - 1));

        if (next > size)
            break;
        if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
            memcmp(seg + name_at, "GNU", 4) == 0 && nh->n_descsz <= 32) {
            memcpy(out, seg + desc_at, nh->n_descsz);
            return nh->n_descsz;
        }
        pos = next;
    }
    return 0;
}

static int add_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct shp_symbolizer *s = arg;
    struct self_module m;

    (void)size;
    memset(&m, 0, sizeof(m));
    if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0') {
        /* The main program is listed first, with an empty name. */
        ssize_t n = readlink("/proc/self/exe", m.path, sizeof(m.path) - 1);

        if (n <= 0)
            return 0;
        m.path[n] = '\0';
    } else {
        snprintf(m.path, sizeof(m.path), "%s", info->dlpi_name);
    }
    m.base = info->dlpi_addr;
    m.lo = UINT64_MAX;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t start = info->dlpi_addr + ph->p_vaddr;

        if (ph->p_type == PT_LOAD) {
            if (start < m.lo)
                m.lo = start;
            if (start + ph->p_memsz > m.hi)
                m.hi = start + ph->p_memsz;
        } else if (ph->p_type == PT_NOTE && m.build_id_len == 0) {
            m.build_id_len = find_build_id((const unsigned char *)(uintptr_t)start, ph->p_memsz,
                                           ph->p_align, m.build_id);
        }
    }
    if (m.lo >= m.hi)
        return 0;
    if (shp_symbolizer_add_module(s, m.path, m.base, m.lo, m.hi, m.build_id, m.build_id_len) == 0)
        nmodules++;
    if (nmodules == 1 && exe.path[0] == '\0')
        exe = m;
    return 0;
}

/* Line numbers bracketing target_fn, for (b). */
static const int target_first_line = __LINE__;
static __attribute__((noinline)) int target_fn(int x)
{
    return x * 3 + 1;
}
static const int target_last_line = __LINE__;

/* A function with a symbol but no line: top-level asm gets no line rows, and its own section
 * keeps it outside the address range of this file's DWARF unit. Never called. */
__asm__(".pushsection .text.shp_no_lines,\"ax\",@progbits\n"
        ".type no_lines_fn, @function\n"
        "no_lines_fn:\n"
        "    nop; nop; nop; nop; nop; nop; nop; ret\n"
        ".size no_lines_fn, . - no_lines_fn\n"
        ".popsection\n");
void no_lines_fn(void);

static __attribute__((noinline)) uintptr_t return_address(void)
{
    return (uintptr_t)__builtin_return_address(0);
}

static __attribute__((noinline)) uintptr_t caller_fn(int *line)
{
    uintptr_t ra = return_address();
    *line = __LINE__ - 1;

    return ra;
}

/* The line number after the last ':' of text, or -1. */
static int line_of(const char *text)
{
    const char *colon = strrchr(text, ':');

    if (colon == NULL || colon[1] < '0' || colon[1] > '9')
        return -1;
    return atoi(colon + 1);
}

static bool starts_with(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

static bool ends_with(const char *text, const char *suffix)
{
    size_t n = strlen(text), k = strlen(suffix);

    return n >= k && strcmp(text + n - k, suffix) == 0;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    char buf[1024];
    char want[4200];
    int rc;
    struct shp_symbolizer *s = shp_symbolizer_new();

    if (s == NULL) {
        test_cond("shp_symbolizer_new", s != NULL);
        return test_report();
    }

    /* (a) every loaded module, as the preload records them */
    dl_iterate_phdr(add_one, s);
    snprintf(buf, sizeof(buf), "%d modules, exe %.200s, build id %zu bytes", nmodules, exe.path,
             exe.build_id_len);
    test_condf(nmodules >= 3 && exe.build_id_len > 0, "%s: %s", "(a) register own modules", buf);

    /* (b) a static function, found through .symtab and DWARF only */
    rc = shp_symbolize(s, (uintptr_t)&target_fn + 4, false, buf, sizeof(buf));
    int line = line_of(buf);
    test_condf(rc == 0 && starts_with(buf, "target_fn (") && strstr(buf, "test_symbolize.c:") &&
                   line > target_first_line && line < target_last_line,
               "%s: %s", "(b) static function", buf);

    /* (c) a return address: the caller's name and the line of the call */
    int call_line = 0;
    uintptr_t ra = caller_fn(&call_line);
    rc = shp_symbolize(s, ra, true, buf, sizeof(buf));
    snprintf(want, sizeof(want), "test_symbolize.c:%d)", call_line);
    test_condf(rc == 0 && starts_with(buf, "caller_fn (") && ends_with(buf, want), "%s: %s",
               "(c) return address", buf);

    /* a symbol without a line: "name+0xOFF (module)"; a return address prints the offset of
     * addr itself although addr - 1 is looked up */
    const char *exe_name = strrchr(exe.path, '/') ? strrchr(exe.path, '/') + 1 : exe.path;
    rc = shp_symbolize(s, (uintptr_t)&no_lines_fn + 2, false, buf, sizeof(buf));
    snprintf(want, sizeof(want), "no_lines_fn+0x2 (%s)", exe_name);
    test_condf(rc == 0 && strcmp(buf, want) == 0, "%s: %s", "symbol without line", buf);
    rc = shp_symbolize(s, (uintptr_t)&no_lines_fn + 3, true, buf, sizeof(buf));
    snprintf(want, sizeof(want), "no_lines_fn+0x3 (%s)", exe_name);
    test_condf(rc == 0 && strcmp(buf, want) == 0, "%s: %s", "return address offset", buf);

    /* (d) libc: "write+0x10 (libc.so.6)" from its symbols, or a line when its detached debug
     * info is installed (libc6-dbg puts it under /usr/lib/debug/.build-id). write is taken
     * from libc itself: under a sanitizer &write is the sanitizer's interceptor. */
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    uintptr_t libc_write = libc ? (uintptr_t)dlsym(libc, "write") : 0;
    if (libc_write == 0)
        libc_write = (uintptr_t)&write;
    rc = shp_symbolize(s, libc_write + 0x10, false, buf, sizeof(buf));
    const char *tail = strstr(buf, "+0x10 (libc.so.6)");
    const char *paren = strstr(buf, " (");
    bool symbol_form = tail != NULL && strcmp(tail, "+0x10 (libc.so.6)") == 0 &&
                       memmem(buf, (size_t)(tail - buf), "write", 5) != NULL;
    bool line_form = paren != NULL && memmem(buf, (size_t)(paren - buf), "write", 5) != NULL &&
                     ends_with(buf, ")") && line_of(buf) > 0;
    test_condf(rc == 0 && (symbol_form || line_form), "%s: %s", "(d) libc function", buf);

    /* (g) an address in no module */
    rc = shp_symbolize(s, 0x10, false, buf, sizeof(buf));
    test_condf(rc == 0 && strcmp(buf, "0x10") == 0, "%s: %s", "(g) address in no module", buf);

    /* (e) a module whose file does not exist here */
    struct shp_symbolizer *t = shp_symbolizer_new();
    const uint64_t fake = 0x7f1234560000ull;
    rc = shp_symbolizer_add_module(t, "/nonexistent/dir/libfoo.so.1", fake, fake, fake + 0x20000,
                                   NULL, 0);
    rc = rc ? rc : shp_symbolize(t, fake + 0x1234, false, buf, sizeof(buf));
    test_condf(rc == 0 && strcmp(buf, "0x1234 (libfoo.so.1)") == 0, "%s: %s", "(e) missing file",
               buf);

    /* (f) the right file with the wrong build id: offsets only */
    uint8_t wrong[20];
    memset(wrong, 0xab, sizeof(wrong));
    rc = shp_symbolizer_add_module(t, exe.path, exe.base, exe.lo, exe.hi, wrong, sizeof(wrong));
    uint64_t addr = (uintptr_t)&target_fn + 4;
    rc = rc ? rc : shp_symbolize(t, addr, false, buf, sizeof(buf));
    snprintf(want, sizeof(want), "0x%" PRIx64 " (%s)", addr - exe.base, exe_name);
    test_condf(rc == 0 && strcmp(buf, want) == 0, "%s: %s", "(f) wrong build id", buf);

    /* the same file with its real build id, added later, takes over and drops the cache */
    rc = shp_symbolizer_add_module(t, exe.path, exe.base, exe.lo, exe.hi, exe.build_id,
                                   exe.build_id_len);
    rc = rc ? rc : shp_symbolize(t, addr, false, buf, sizeof(buf));
    test_condf(rc == 0 && starts_with(buf, "target_fn ("), "%s: %s",
               "(f) right build id added later", buf);
    shp_symbolizer_free(t);

    /* bad input is refused, output is cut and terminated */
    rc = shp_symbolize(NULL, addr, false, buf, sizeof(buf));
    test_condf(rc == -EINVAL, "%s: %s", "NULL symbolizer", "-EINVAL");
    rc = shp_symbolize(s, addr, false, NULL, 10);
    test_condf(rc == -EINVAL, "%s: %s", "NULL output", "-EINVAL");
    rc = shp_symbolizer_add_module(s, "/x", 0, 0x2000, 0x1000, NULL, 0);
    test_condf(rc == -EINVAL, "%s: %s", "empty range", "-EINVAL");
    rc = shp_symbolizer_add_module(s, "/x", 0, 0x1000, 0x2000, NULL, 4);
    test_condf(rc == -EINVAL, "%s: %s", "NULL build id with a length", "-EINVAL");
    memset(buf, 'x', sizeof(buf));
    rc = shp_symbolize(s, addr, false, buf, 7);
    test_condf(rc == 0 && strcmp(buf, "target") == 0, "%s: %s", "output cut to outlen", buf);

    /* repeated addresses come from the cache: 100,000 calls over 200 distinct addresses */
    static char first[200][256];
    uint64_t addrs[200];
    double t0 = now_s();
    for (int i = 0; i < 200; i++) {
        addrs[i] = i < 100 ? (uintptr_t)&target_fn + (uint64_t)i : libc_write + (uint64_t)(i - 100);
        shp_symbolize(s, addrs[i], i % 2, first[i], sizeof(first[i]));
    }
    double t1 = now_s();
    int same = 0;
    for (int i = 0; i < 100000; i++) {
        int k = (i * 7919) % 200;

        if (shp_symbolize(s, addrs[k], k % 2, buf, sizeof(buf)) == 0 && !strcmp(buf, first[k]))
            same++;
    }
    double t2 = now_s();
    snprintf(buf, sizeof(buf),
             "%d of 100000 identical; first 200 calls %.3f ms, 100000 calls %.3f ms", same,
             (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    test_condf(same == 100000 && t2 - t1 < 2.0, "%s: %s", "100k repeated calls", buf);

    /* a shared cache: a second process with the module at another base gets the same texts by
     * offset; a file changed between the two is not taken for the one cached */
    struct shp_symcache *cache = shp_symcache_new();
    char copy[64], text[1024];
    snprintf(copy, sizeof(copy), "/tmp/shp_test_symcache.%d", (int)getpid());
    snprintf(want, sizeof(want), "cp '%s' %s", exe.path, copy);
    const uint64_t shift = 0x100000000ull;
    rc = cache && system(want) == 0 ? 0 : -1;
    struct shp_symbolizer *p1 = shp_symbolizer_new(), *p2 = shp_symbolizer_new(),
                          *p3 = shp_symbolizer_new();
    shp_symbolizer_set_cache(p1, cache);
    shp_symbolizer_set_cache(p2, cache);
    shp_symbolizer_set_cache(p3, cache);
    rc = rc ? rc
            : shp_symbolizer_add_module(p1, copy, exe.base, exe.lo, exe.hi, exe.build_id,
                                        exe.build_id_len);
    rc = rc ? rc : shp_symbolize(p1, addr, false, text, sizeof(text));
    rc = rc ? rc
            : shp_symbolizer_add_module(p2, copy, exe.base + shift, exe.lo + shift, exe.hi + shift,
                                        exe.build_id, exe.build_id_len);
    rc = rc ? rc : shp_symbolize(p2, addr + shift, false, buf, sizeof(buf));
    test_condf(rc == 0 && starts_with(text, "target_fn (") && !strcmp(buf, text), "%s: %s",
               "shared cache: another base, the same text", buf);
    FILE *f = fopen(copy, "w");
    rc = f && fputs("not ELF", f) >= 0 && fclose(f) == 0 ? 0 : -1;
    rc = rc ? rc
            : shp_symbolizer_add_module(p3, copy, exe.base, exe.lo, exe.hi, exe.build_id,
                                        exe.build_id_len);
    rc = rc ? rc : shp_symbolize(p3, addr, false, buf, sizeof(buf));
    snprintf(want, sizeof(want), "0x%" PRIx64 " (%s)", addr - exe.base, strrchr(copy, '/') + 1);
    test_condf(rc == 0 && !strcmp(buf, want), "%s: %s",
               "shared cache: a changed file is symbolized again", buf);
    unlink(copy);
    shp_symbolizer_free(p1);
    shp_symbolizer_free(p2);
    shp_symbolizer_free(p3);
    shp_symcache_free(cache);

    shp_symbolizer_free(s);
    shp_symbolizer_free(NULL);
    if (libc)
        dlclose(libc);
    return test_report();
}
