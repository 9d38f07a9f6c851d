/* shapetrace tools: reading and writing the run directory's symbol file (symfile.h). The reader
 * trusts nothing in the file: every line is checked, and any fault drops the whole file. */
#define _GNU_SOURCE
#include "tools/lib/symfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/lib/out.h"

struct sym_entry {
    uint32_t mod;
    bool is_ret;
    uint64_t off;
    const char *text; /* inside buf */
};

struct sym_module {
    uint8_t build_id[32];
    size_t build_id_len;
    size_t first; /* its entries: entries[first, first + n) once sorted */
    size_t n;
};

struct shp_symfile {
    char *buf;
    struct sym_module *mods;
    size_t nmods;
    struct sym_entry *entries;
    size_t nentries;
};

void shp_symfile_free(struct shp_symfile *f)
{
    if (!f)
        return;
    free(f->buf);
    free(f->mods);
    free(f->entries);
    free(f);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* "m HEX NAME": the build id, at most 32 bytes. */
static const char *parse_module(struct shp_symfile *f, const char *line, size_t *capmods)
{
    const char *p = line + 2;
    size_t digits = strspn(p, "0123456789abcdef");
    if (digits < 2 || digits > 64 || digits % 2 || p[digits] != ' ' || !p[digits + 1])
        return "a module line needs a build id of 1 to 32 bytes in hex and a name";
    if (!shp_grow((void **)&f->mods, capmods, f->nmods, sizeof(*f->mods)))
        return "out of memory";
    struct sym_module *m = &f->mods[f->nmods++];
    memset(m, 0, sizeof(*m));
    m->build_id_len = digits / 2;
    for (size_t i = 0; i < m->build_id_len; i++)
        m->build_id[i] = (uint8_t)(hexval(p[2 * i]) << 4 | hexval(p[2 * i + 1]));
    return NULL;
}

/* "OFF r|c TEXT". */
static const char *parse_frame(struct shp_symfile *f, const char *line, size_t *capentries)
{
    size_t digits = strspn(line, "0123456789abcdef");
    if (digits < 1 || digits > 16 || line[digits] != ' ' ||
        (line[digits + 1] != 'r' && line[digits + 1] != 'c') || line[digits + 2] != ' ' ||
        !line[digits + 3])
        return "a frame line is OFFSET (hex), r or c, and a text";
    if (f->nmods == 0)
        return "a frame line before any module line";
    if (!shp_grow((void **)&f->entries, capentries, f->nentries, sizeof(*f->entries)))
        return "out of memory";
    uint64_t off = 0;
    for (size_t i = 0; i < digits; i++)
        off = off << 4 | (uint64_t)hexval(line[i]);
    f->entries[f->nentries++] = (struct sym_entry){
        .mod = (uint32_t)(f->nmods - 1),
        .is_ret = line[digits + 1] == 'r',
        .off = off,
        .text = line + digits + 3,
    };
    return NULL;
}

/* "end N": the number of frame lines, so that a file cut at a line boundary is noticed. */
static const char *parse_end(const struct shp_symfile *f, const char *line)
{
    const char *p = line + 4;
    if (!*p || strspn(p, "0123456789") != strlen(p) || strlen(p) > 19)
        return "the end line needs a count";
    if (strtoull(p, NULL, 10) != f->nentries)
        return "the end line's count differs from the frame lines (truncated?)";
    return NULL;
}

static int cmp_entry(const void *a, const void *b)
{
    const struct sym_entry *x = a, *y = b;
    if (x->mod != y->mod)
        return x->mod < y->mod ? -1 : 1;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return (int)x->is_ret - (int)y->is_ret;
}

/* Parses f->buf (size bytes, NUL-terminated). Returns NULL or the reason it is refused; *lineno
 * is the line at fault. */
static const char *parse(struct shp_symfile *f, size_t size, size_t *lineno)
{
    size_t capmods = 0, capentries = 0;
    bool ended = false;
    char *p = f->buf, *end = f->buf + size;
    for (*lineno = 1; p < end; (*lineno)++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return "truncated: the last line has no newline";
        *nl = '\0';
        if (strlen(p) != (size_t)(nl - p))
            return "a NUL byte inside a line";
        const char *why = NULL;
        if (ended)
            why = "lines after the end line";
        else if (*lineno == 1)
            why = strcmp(p, SHP_SYMFILE_MAGIC) ? "not a shapetrace symbol file (or another "
                                                 "version)"
                                               : NULL;
        else if (!strncmp(p, "m ", 2))
            why = parse_module(f, p, &capmods);
        else if (!strncmp(p, "end ", 4)) {
            why = parse_end(f, p);
            ended = true;
        } else
            why = parse_frame(f, p, &capentries);
        if (why)
            return why;
        p = nl + 1;
    }
    if (!ended)
        return "truncated: no end line";
    if (f->nentries > 1)
        qsort(f->entries, f->nentries, sizeof(*f->entries), cmp_entry);
    for (size_t i = 0; i < f->nentries; i++) {
        struct sym_module *m = &f->mods[f->entries[i].mod];
        if (m->n++ == 0)
            m->first = i;
    }
    return NULL;
}

static atomic_int warned;

static void warn(const char *path, size_t lineno, const char *why)
{
    if (atomic_exchange(&warned, 1))
        return;
    if (lineno)
        shp_err("%s: line %zu: %s; frames of modules absent here print as offsets", path, lineno,
                why);
    else
        shp_err("%s: %s; frames of modules absent here print as offsets", path, why);
}

struct shp_symfile *shp_symfile_load(const char *path)
{
    /* O_NONBLOCK and the S_ISREG test: the name may be a FIFO or a device. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT)
            warn(path, 0, strerror(errno));
        return NULL;
    }
    struct stat st;
    struct shp_symfile *f = NULL;
    const char *why = NULL;
    size_t lineno = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        why = "not a regular file";
    else if ((uint64_t)st.st_size > SHP_SYMFILE_MAX_BYTES)
        why = "larger than 256 MiB";
    else if (!(f = calloc(1, sizeof(*f))) || !(f->buf = malloc((size_t)st.st_size + 1)))
        why = "out of memory";
    size_t got = 0;
    while (!why && got < (size_t)st.st_size) {
        ssize_t n = read(fd, f->buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            why = n < 0 ? strerror(errno) : "shorter than its size";
            break;
        }
        got += (size_t)n;
    }
    close(fd);
    if (!why) {
        f->buf[got] = '\0';
        why = got ? parse(f, got, &lineno) : "empty";
    }
    if (why) {
        warn(path, lineno, why);
        shp_symfile_free(f);
        return NULL;
    }
    return f;
}

bool shp_symfile_path(char *out, size_t len, const char *dir, const char *host, size_t host_max)
{
    size_t n = strnlen(host, host_max);
    if (n == 0 || host[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (host[i] == '/' || (unsigned char)host[i] < 0x20 || host[i] == 0x7f)
            return false;
    int w = snprintf(out, len, "%s/%.*s%s", dir, (int)n, host, SHP_SYMFILE_SUFFIX);
    return w >= 0 && (size_t)w < len;
}

bool shp_symfile_path_near(char *out, size_t len, const char *trace_path, const char *host,
                           size_t host_max)
{
    const char *slash = strrchr(trace_path, '/');
    char *dir = slash ? strndup(trace_path, (size_t)(slash - trace_path)) : strdup(".");
    bool ok = dir && shp_symfile_path(out, len, slash == trace_path ? "" : dir, host, host_max);
    free(dir);
    return ok;
}

struct shp_symfile *shp_symfile_load_near(const char *trace_path, const char *host, size_t host_max)
{
    char path[4096];
    return shp_symfile_path_near(path, sizeof(path), trace_path, host, host_max)
               ? shp_symfile_load(path)
               : NULL;
}

const char *shp_symfile_find(const struct shp_symfile *f, const uint8_t *build_id,
                             size_t build_id_len, uint64_t off, bool is_return_address)
{
    if (!f || !build_id || build_id_len == 0)
        return NULL;
    for (size_t i = 0; i < f->nmods; i++) {
        const struct sym_module *m = &f->mods[i];
        if (m->build_id_len != build_id_len || memcmp(m->build_id, build_id, build_id_len))
            continue;
        struct sym_entry key = {.mod = (uint32_t)i, .is_ret = is_return_address, .off = off};
        const struct sym_entry *hit =
            m->n ? bsearch(&key, f->entries + m->first, m->n, sizeof(key), cmp_entry) : NULL;
        if (hit)
            return hit->text;
    }
    return NULL;
}

/* Control characters would break the line structure; the rest is written as it is. */
static void put_clean(FILE *out, const char *s)
{
    for (; *s; s++)
        fputc((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s, out);
}

int shp_symfile_write_header(FILE *out)
{
    return fprintf(out, "%s\n", SHP_SYMFILE_MAGIC) < 0 ? -EIO : 0;
}

int shp_symfile_write_module(FILE *out, const uint8_t *build_id, size_t build_id_len,
                             const char *name)
{
    if (build_id_len == 0 || build_id_len > 32)
        return -EINVAL;
    fputs("m ", out);
    for (size_t i = 0; i < build_id_len; i++)
        fprintf(out, "%02x", build_id[i]);
    fputc(' ', out);
    put_clean(out, name && *name ? name : "?");
    return fputc('\n', out) == EOF ? -EIO : 0;
}

int shp_symfile_write_frame(FILE *out, uint64_t off, bool is_return_address, const char *text)
{
    if (!text || !*text)
        return -EINVAL;
    fprintf(out, "%" PRIx64 " %c ", off, is_return_address ? 'r' : 'c');
    put_clean(out, text);
    return fputc('\n', out) == EOF ? -EIO : 0;
}

int shp_symfile_write_end(FILE *out, uint64_t nframes)
{
    return fprintf(out, "end %" PRIu64 "\n", nframes) < 0 ? -EIO : 0;
}
