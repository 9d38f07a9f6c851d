/* shapetrace symbols: resolve, on the traced host, every distinct native frame of a run's traces
 * and store the texts in the run directory (tools/lib/symfile.h), so that the traces read with
 * function names on a machine that lacks the modules. `run` calls it when the job ends. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"
#include "tools/lib/out.h"
#include "tools/lib/reader.h"
#include "tools/lib/session.h"
#include "tools/lib/symbolize.h"
#include "tools/lib/symfile.h"

struct frame_key {
    uint64_t off;
    bool is_ret;
};

/* One module of the run, by build id: resolved with the first trace's view of it. */
struct run_module {
    uint8_t build_id[32];
    size_t build_id_len;
    char *path;
    uint64_t base, lo, hi;
    struct shp_symbolizer *sym; /* this module alone, at its first base */
    struct frame_key *frames;
    size_t nframes, capframes;
};

/* One trace's module, pointing at its run module. */
struct local_module {
    uint64_t base, lo, hi;
    size_t mod;
};

struct run_modules {
    struct run_module *mods;
    size_t n, cap;
};

static long module_of(struct run_modules *rm, const struct shp_module_view *m, const char *path)
{
    for (size_t i = 0; i < rm->n; i++)
        if (rm->mods[i].build_id_len == m->build_id_len &&
            !memcmp(rm->mods[i].build_id, m->build_id, m->build_id_len))
            return (long)i;
    if (!shp_grow((void **)&rm->mods, &rm->cap, rm->n, sizeof(*rm->mods)))
        return -1;
    struct run_module *r = &rm->mods[rm->n];
    memset(r, 0, sizeof(*r));
    memcpy(r->build_id, m->build_id, m->build_id_len);
    r->build_id_len = m->build_id_len;
    r->base = m->base;
    r->lo = m->lo;
    r->hi = m->hi;
    r->path = strdup(path);
    if (!r->path)
        return -1;
    return (long)rm->n++;
}

static int add_frame(struct run_module *r, uint64_t off, bool is_ret)
{
    if (!shp_grow((void **)&r->frames, &r->capframes, r->nframes, sizeof(*r->frames)))
        return -ENOMEM;
    r->frames[r->nframes++] = (struct frame_key){off, is_ret};
    return 0;
}

/* The frames of one trace's stacks, each by the module that holds it. One walk over the records
 * (a trace can be a GiB); the stacks are looked at after it, once every module is known. */
static int gather(struct run_modules *rm, const struct shp_trace *t)
{
    struct local_module *loc = NULL;
    /* each stack's own frames (a SHP_REC_STACK_TAIL's outer ones are another stack's) */
    struct own {
        const uint64_t *frames;
        uint32_t n;
    } *stacks = NULL;
    size_t nloc = 0, caploc = 0, nstacks = 0, capstacks = 0;
    struct shp_cursor cur = {0};
    unsigned type;
    size_t size;
    const struct shp_rec *rec;
    int rc = 0;
    while (rc == 0 && (rec = shp_trace_next(t, &cur, &type, &size))) {
        if (type == SHP_REC_STACK || type == SHP_REC_STACK_TAIL) {
            size_t head = type == SHP_REC_STACK ? sizeof(struct shp_rec_stack)
                                                : sizeof(struct shp_rec_stack_tail);
            /* nframes is at the same place in both */
            uint32_t n = ((const struct shp_rec_stack *)rec)->nframes;
            if (head + (size_t)n * 8 > size)
                continue;
            if (!shp_grow((void **)&stacks, &capstacks, nstacks, sizeof(*stacks)))
                rc = -ENOMEM;
            else
                stacks[nstacks++] =
                    (struct own){(const uint64_t *)(const void *)((const char *)rec + head), n};
            continue;
        }
        struct shp_module_view m;
        if ((type != SHP_REC_MODULE && type != SHP_REC_MODULE_C) ||
            !shp_module_view(rec, type, size, &m) || m.build_id_len == 0 || m.lo >= m.hi)
            continue;
        char *path = strndup(m.path, m.path_len);
        long idx = path ? module_of(rm, &m, path) : -1;
        free(path);
        if (idx < 0 || !shp_grow((void **)&loc, &caploc, nloc, sizeof(*loc)))
            rc = -ENOMEM;
        else
            loc[nloc++] = (struct local_module){m.base, m.lo, m.hi, (size_t)idx};
    }
    for (size_t j = 0; rc == 0 && j < nstacks; j++) {
        const uint64_t *fr = stacks[j].frames;
        for (uint32_t i = 0; i < stacks[j].n && rc == 0; i++) {
            bool is_ret = i > 0;
            uint64_t pc = is_ret && fr[i] ? fr[i] - 1 : fr[i];
            /* As the symbolizer does: where ranges overlap, the module recorded last. */
            for (size_t k = nloc; k-- > 0;)
                if (loc[k].lo <= pc && pc < loc[k].hi) {
                    rc = add_frame(&rm->mods[loc[k].mod], fr[i] - loc[k].base, is_ret);
                    break;
                }
        }
    }
    free(stacks);
    free(loc);
    return rc;
}

static int cmp_key(const void *a, const void *b)
{
    const struct frame_key *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return (int)x->is_ret - (int)y->is_ret;
}

/* A text that names nothing ("0xOFF (module)") is what the reader prints anyway. */
static bool worth_keeping(const char *text)
{
    return strncmp(text, "0x", 2) != 0 || strstr(text, ", ") != NULL;
}

static int write_module(FILE *out, struct run_module *r, uint64_t *written)
{
    if (r->nframes > 1)
        qsort(r->frames, r->nframes, sizeof(*r->frames), cmp_key);
    r->sym = shp_symbolizer_new();
    if (!r->sym || shp_symbolizer_add_module(r->sym, r->path, r->base, r->lo, r->hi, r->build_id,
                                             r->build_id_len) != 0)
        return -ENOMEM;
    bool header = false;
    for (size_t i = 0; i < r->nframes; i++) {
        if (i && !cmp_key(&r->frames[i], &r->frames[i - 1]))
            continue;
        char text[1024];
        shp_symbolize(r->sym, r->base + r->frames[i].off, r->frames[i].is_ret, text, sizeof(text));
        if (!worth_keeping(text))
            continue;
        if (!header) {
            const char *slash = strrchr(r->path, '/');
            int rc = shp_symfile_write_module(out, r->build_id, r->build_id_len,
                                              slash ? slash + 1 : r->path);
            if (rc)
                return rc;
            header = true;
        }
        int rc = shp_symfile_write_frame(out, r->frames[i].off, r->frames[i].is_ret, text);
        if (rc)
            return rc;
        (*written)++;
    }
    /* Each module's debug info is dropped once written: a torch job maps hundreds. */
    shp_symbolizer_free(r->sym);
    r->sym = NULL;
    return 0;
}

int shp_symbols_write(const char *dir, struct shp_symbols_stats *stats)
{
    memset(stats, 0, sizeof(*stats));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* As the preload names its host, so that the header's field compares equal. */
    char host[sizeof(((struct shp_file_header *)0)->host)];
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = 0;
    /* A file that is not a readable trace is skipped, as every command skips it; run names it
     * in its own words, so the session keeps quiet here. */
    struct shp_session s;
    char *paths[] = {(char *)dir};
    int rc = shp_session_open(&s, paths, 1, SHP_SESSION_EMPTY | SHP_SESSION_RAW | SHP_SESSION_QUIET,
                              "the symbol file");
    if (rc == 0 && !s.nprocs && !s.nunreadable)
        rc = -ENOENT;
    else if (rc < 0)
        rc = -EINVAL;
    stats->unreadable = s.nunreadable;
    struct run_modules rm = {0};
    for (size_t i = 0; rc == 0 && i < s.nprocs; i++) {
        const struct shp_trace *t = &s.procs[i].t;
        /* Another node's modules are not here (or are other builds): its own run writes its. */
        if (!strncmp(t->hdr->host, host, sizeof(t->hdr->host))) {
            rc = gather(&rm, t);
            stats->traces++;
        }
        shp_session_release(&s, i);
    }
    shp_session_close(&s);
    if (rc == 0 && stats->traces == 0)
        rc = -ESRCH;

    FILE *out = NULL;
    char path[4096], tmp[4096 + 32];
    if (rc == 0 && !shp_symfile_path(path, sizeof(path), dir, host, sizeof(host)))
        rc = -ENAMETOOLONG;
    snprintf(stats->path, sizeof(stats->path), "%s", rc == 0 ? path : "");
    /* Mode 0600, as the traces: the names say what the job ran. A name of its own, created
     * exclusively: a link planted under the old fixed name (<host>.symbols.tmp) got the text
     * written through it, into a file outside the run directory. */
    int fd = rc == 0 ? shp_create_private(dir, strrchr(path, '/') + 1, tmp, sizeof(tmp)) : -1;
    if (rc == 0 && fd < 0)
        rc = fd;
    if (rc == 0 && !(out = fdopen(fd, "w"))) {
        rc = -errno;
        close(fd);
        unlink(tmp);
        fd = -1;
    }
    if (rc == 0)
        rc = shp_symfile_write_header(out);
    for (size_t i = 0; rc == 0 && i < rm.n; i++)
        rc = write_module(out, &rm.mods[i], &stats->frames);
    if (rc == 0)
        rc = shp_symfile_write_end(out, stats->frames);
    if (out && fclose(out) != 0 && rc == 0)
        rc = -errno;
    /* Renamed into place only whole, so a reader never sees half a file under the name (a
     * link there is replaced, not followed). */
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0 && fd >= 0)
        unlink(tmp);
    struct stat st;
    if (rc == 0 && stat(path, &st) == 0)
        stats->bytes = (uint64_t)st.st_size;
    for (size_t i = 0; i < rm.n; i++) {
        shp_symbolizer_free(rm.mods[i].sym);
        free(rm.mods[i].frames);
        free(rm.mods[i].path);
        stats->modules += rm.mods[i].nframes != 0;
    }
    free(rm.mods);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    stats->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return rc;
}

/* symbols takes no option but -h (tools/cmd/options.h). */
static const struct shp_opts symbols_opts = {
    .cmd = "symbols",
    .synopsis =
        "usage: shapetrace symbols RUN_DIR\n"
        "\n"
        "Resolves every distinct native frame of the traces in RUN_DIR into function names\n"
        "(and file:line where the debug info has them) with the modules on this machine, and\n"
        "stores them in RUN_DIR/HOST" SHP_SYMFILE_SUFFIX
        ", keyed by build id. dump, analyze, export\n"
        "and report read it when a module is missing or is another build where they run.\n"
        "Run it on the traced host; `run` does it when the job ends.\n"
        "Only the traces of this host are read.\n",
    .epilogue =
        "Exit status: 0, or 2 when RUN_DIR holds no trace of this host or the file cannot be\n"
        "written.\n",
};

int shp_cmd_symbols(int argc, char **argv)
{
    struct shp_optparse p;
    shp_opts_begin(&p, &symbols_opts);
    if (shp_opts_next(&p, argc, argv) == SHP_OPT_STOP)
        return p.status;
    if (optind != argc - 1)
        return shp_usage_error("symbols", "give one RUN_DIR");
    const char *dir = argv[optind];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        shp_err("symbols: %s is not a run directory", dir);
        return SHP_EXIT_USAGE;
    }
    struct shp_symbols_stats s;
    int rc = shp_symbols_write(dir, &s);
    if (rc != 0) {
        shp_err("symbols: %s: %s", dir,
                rc == -ENOENT  ? "no traces"
                : rc == -ESRCH ? "no traces of this host (symbols are resolved where the job ran)"
                               : strerror(-rc));
        return SHP_EXIT_USAGE;
    }
    fprintf(stderr,
            "shapetrace: %" PRIu64 " frames of %" PRIu64 " modules symbolized in %.2f s (%" PRIu64
            " bytes) into %s\n",
            s.frames, s.modules, s.seconds, s.bytes, s.path);
    if (s.unreadable)
        fprintf(stderr, "shapetrace: %s: skipped %" PRIu64 " file%s that %s not a readable trace\n",
                dir, s.unreadable, s.unreadable == 1 ? "" : "s", s.unreadable == 1 ? "is" : "are");
    return SHP_EXIT_OK;
}
