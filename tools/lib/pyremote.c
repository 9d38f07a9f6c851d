/* shapetrace tools: reading another process's Python stacks (pyremote.h). Every read is a copy
 * (process_vm_readv) of a few hundred bytes into a buffer of ours, checked before use: a thread
 * state, a frame or a code object that is not what this version's layout says ends the walk,
 * never a read outside what was copied. Code objects are read once per process. */
#define _GNU_SOURCE
#include "tools/lib/pyremote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/shapetrace/trace.h"
#include "tools/lib/out.h"
#include "tools/lib/ptrace.h"
#include "tools/lib/stacks.h"
#include "tools/lib/unwind.h"

#define MAX_INTERPS 64
#define MAX_TSTATES 4096
#define MAX_HOPS (4 * SHP_PY_MAX_FRAMES)
#define NAME_CHARS 1024
#define FILE_CHARS 4096
#define LINETABLE_MAX (256u << 10)

enum {
    SYM_RUNTIME,
    SYM_VERSION,
    SYM_CODE,
    SYM_UNICODE,
    SYM_BYTES,
    SYM_NONE,
    SYM_TYPE,
    SYM_EVAL,
    SYM_COUNT,
};

static const char *const sym_names[SYM_COUNT] = {
    [SYM_RUNTIME] = "_PyRuntime", [SYM_VERSION] = "Py_Version",
    [SYM_CODE] = "PyCode_Type",   [SYM_UNICODE] = "PyUnicode_Type",
    [SYM_BYTES] = "PyBytes_Type", [SYM_NONE] = "_Py_NoneStruct",
    [SYM_TYPE] = "PyType_Type",   [SYM_EVAL] = "_PyEval_EvalFrameDefault",
};

/* len bytes at addr, whole or not at all. */
static bool rd(struct shp_py_proc *p, uint64_t addr, void *buf, size_t len)
{
    p->reads++;
    return addr >= 4096 && shp_pt_read(p->pid, addr, buf, len) == (ssize_t)len;
}

static uint64_t u64_at(const unsigned char *b, uint32_t off)
{
    uint64_t v;
    memcpy(&v, b + off, 8);
    return v;
}

static bool ok_ptr(uint64_t v)
{
    return v >= 4096 && v < (1ull << 47) && !(v & 7);
}

/* The minor version from an object's file name ("libpython3.10.so.1.0", "python3.10"), for 3.10,
 * which exports no Py_Version; 0 when it names none. */
static unsigned minor_from_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *v = strstr(base, "python3.");
    return v ? (unsigned)strtoul(v + 8, NULL, 10) : 0;
}

int shp_py_find(struct shp_py_proc *p, pid_t pid, struct shp_unwinder *u)
{
    uint64_t addr[SYM_COUNT], size[SYM_COUNT];
    struct shp_module_info where;
    p->pid = pid;
    p->found = false;
    p->why[0] = '\0';
    if (!shp_unwinder_find_symbols(u, sym_names, SYM_COUNT, addr, size, &where))
        return 0; /* no interpreter */
    unsigned minor = 0;
    if (addr[SYM_VERSION]) {
        uint64_t v = 0;
        if (!rd(p, addr[SYM_VERSION], &v, sizeof(v)))
            return -ESRCH;
        p->version = (uint32_t)v;
        p->micro_known = true;
        minor = (p->version >> 16) & 0xff;
        if ((p->version >> 24) != 3)
            minor = 0;
    } else {
        minor = minor_from_name(where.path);
        p->version = 3u << 24 | minor << 16;
    }
    if (minor < 10 || minor > 13) {
        snprintf(p->why, sizeof(p->why),
                 "Python %u.%u: Python stacks cover 3.10 to 3.13; native stacks only",
                 p->version >> 24, minor);
        return 0;
    }
    for (int i = 0; i < SYM_COUNT; i++) {
        if (!addr[i] && i != SYM_VERSION) {
            snprintf(p->why, sizeof(p->why), "Python 3.%u has no %s: native stacks only", minor,
                     sym_names[i]);
            return 0;
        }
    }
    /* A debug (trace-refs) or free-threaded build has another object header. */
    uint64_t code_type_type = 0, str_type_type = 0;
    if (!rd(p, addr[SYM_CODE] + 8, &code_type_type, 8) ||
        !rd(p, addr[SYM_UNICODE] + 8, &str_type_type, 8))
        return -ESRCH;
    if (code_type_type != addr[SYM_TYPE] || str_type_type != addr[SYM_TYPE]) {
        snprintf(p->why, sizeof(p->why),
                 "Python 3.%u has an object layout of its own (a debug or free-threaded build?): "
                 "native stacks only",
                 minor);
        return 0;
    }
    if (minor == 13) {
        struct shp_py_debug_offsets d;
        if (!rd(p, addr[SYM_RUNTIME], &d, sizeof(d)))
            return -ESRCH;
        if (!shp_py_layout_from_debug(&d, p->version, &p->L)) {
            snprintf(p->why, sizeof(p->why),
                     "Python 3.13's debug offsets are not as expected: native stacks only");
            return 0;
        }
    } else {
        p->L = *shp_py_layout_table(minor);
    }
    p->runtime = addr[SYM_RUNTIME];
    p->code_type = addr[SYM_CODE];
    p->unicode_type = addr[SYM_UNICODE];
    p->bytes_type = addr[SYM_BYTES];
    p->none = addr[SYM_NONE];
    p->eval_lo = addr[SYM_EVAL];
    p->eval_hi = addr[SYM_EVAL] + (size[SYM_EVAL] ? size[SYM_EVAL] : 1);
    p->interp_lo = where.lo;
    p->interp_hi = where.hi;
    p->found = true;
    return 0;
}

/* A compact str at addr as UTF-8 (malloc'd; "" when it is not one), at most chars characters. */
static char *read_str(struct shp_py_proc *p, uint64_t addr, size_t chars)
{
    unsigned char h[64];
    const struct shp_py_layout *L = &p->L;
    if (!ok_ptr(addr) || !rd(p, addr, h, 40) || u64_at(h, 8) != p->unicode_type)
        return strdup("");
    uint32_t state;
    int64_t len;
    memcpy(&state, h + 32, 4);
    memcpy(&len, h + 16, 8);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || len < 0 || (kind != 1 && kind != 2 && kind != 4))
        return strdup("");
    size_t n = (size_t)len < chars ? (size_t)len : chars;
    unsigned char *data = malloc(n * kind + 1);
    char *out = malloc(n * 4 + 1);
    if (!data || !out || !rd(p, addr + (ascii ? L->str_ascii : L->str_compact), data, n * kind)) {
        free(data);
        free(out);
        return strdup("");
    }
    size_t m = shp_py_str_utf8(data, kind, ascii, n, out, n * 4);
    out[m] = '\0';
    free(data);
    return out;
}

static size_t max_u32(const uint32_t *v, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] > m)
            m = v[i];
    return m;
}

/* The index in p->codes of the code object at addr, read on first sight (code objects are
 * immutable, and none is freed while the process is stopped). -1 when addr is no code object. */
static long code_index(struct shp_py_proc *p, uint64_t addr)
{
    const struct shp_py_layout *L = &p->L;
    for (size_t i = 0; i < p->ncodes; i++)
        if (p->codes[i].addr == addr)
            return (long)i;
    uint32_t co_fields[] = {L->co_filename,
                            L->co_name,
                            L->co_qualname,
                            L->co_linetable,
                            L->co_firstlineno + 4,
                            L->co_firsttraceable >= 0 ? (uint32_t)L->co_firsttraceable + 4 : 0,
                            24};
    unsigned char blk[512];
    size_t blen = max_u32(co_fields, sizeof(co_fields) / sizeof(co_fields[0])) + 8;
    if (blen > sizeof(blk) || !ok_ptr(addr) || !rd(p, addr, blk, blen) ||
        u64_at(blk, 8) != p->code_type ||
        !shp_grow((void **)&p->codes, &p->capcodes, p->ncodes, sizeof(*p->codes)))
        return -1;
    struct shp_py_code *c = &p->codes[p->ncodes];
    int32_t first, traceable = 0;
    memcpy(&first, blk + L->co_firstlineno, 4);
    if (L->co_firsttraceable >= 0)
        memcpy(&traceable, blk + L->co_firsttraceable, 4);
    *c = (struct shp_py_code){
        .addr = addr, .firstlineno = first, .units = u64_at(blk, 16), .firsttraceable = traceable};
    c->name = read_str(p, u64_at(blk, L->co_name), NAME_CHARS);
    c->file = read_str(p, u64_at(blk, L->co_filename), FILE_CHARS);
    uint64_t lt = u64_at(blk, L->co_linetable);
    unsigned char h[32];
    if (ok_ptr(lt) && rd(p, lt, h, 32) && u64_at(h, 8) == p->bytes_type) {
        int64_t len;
        memcpy(&len, h + 16, 8);
        size_t n = len > 0 ? ((uint64_t)len > LINETABLE_MAX ? LINETABLE_MAX : (size_t)len) : 0;
        c->linetable = n ? malloc(n) : NULL;
        if (c->linetable && rd(p, lt + 32, c->linetable, n))
            c->linetable_len = n;
    }
    p->ncodes++;
    return (long)(p->ncodes - 1);
}

/* The frames of the thread state whose frame pointer field holds f. False when what was read
 * does not look like this version's frames. */
static bool walk(struct shp_py_proc *p, uint64_t f, struct shp_py_thread *t)
{
    const struct shp_py_layout *L = &p->L;
    unsigned char fb[256];
    uint32_t fr_fields[] = {L->fr_back, L->fr_code, L->fr_instr,
                            L->fr_owner >= 0 ? (uint32_t)L->fr_owner : 0,
                            L->fr_is_entry >= 0 ? (uint32_t)L->fr_is_entry : 0};
    size_t flen = max_u32(fr_fields, sizeof(fr_fields) / sizeof(fr_fields[0])) + 8;
    if (flen > sizeof(fb))
        return false;
    if (L->cf_current >= 0) {
        if (!f)
            return true;
        if (!ok_ptr(f) || !rd(p, f + (uint32_t)L->cf_current, &f, 8))
            return false;
    }
    size_t cap = 0;
    for (int hops = 0; f; hops++, f = u64_at(fb, L->fr_back)) {
        if (hops == MAX_HOPS) {
            t->truncated = true;
            break;
        }
        if (!ok_ptr(f) || !rd(p, f, fb, flen))
            return false;
        int owner = L->fr_owner >= 0 ? (signed char)fb[L->fr_owner] : -1;
        if (owner >= 0 && owner == L->owner_cstack) {
            /* 3.12+: an eval call's own entry frame, below the first frame it runs. */
            if (t->n)
                t->frames[t->n - 1].lasti |= SHP_PYFRAME_ENTRY;
            continue;
        }
        uint64_t co = u64_at(fb, L->fr_code);
        long ci = code_index(p, co);
        if (ci < 0) {
            if (co == p->none) /* 3.13 shim frames run None */
                continue;
            return false;
        }
        uint32_t lasti;
        if (L->minor == 10) {
            int32_t l;
            memcpy(&l, fb + L->fr_instr, 4);
            lasti = (l < 0 ? SHP_PYFRAME_NO_OFFSET : (uint32_t)l * 2) | SHP_PYFRAME_ENTRY;
        } else {
            const struct shp_py_code *c = &p->codes[ci];
            int64_t off = (int64_t)(u64_at(fb, L->fr_instr) - (co + L->co_code));
            /* Pushed but not started: CPython's own tracebacks leave it out. */
            if (L->co_firsttraceable >= 0 && owner != L->owner_generator &&
                off < (int64_t)c->firsttraceable * 2)
                continue;
            uint64_t units = c->units;
            lasti = off >= 0 && (uint64_t)off < units * 2 && off < SHP_PYFRAME_NO_OFFSET
                        ? (uint32_t)off
                        : SHP_PYFRAME_NO_OFFSET;
            if (L->fr_is_entry >= 0 && fb[L->fr_is_entry])
                lasti |= SHP_PYFRAME_ENTRY;
        }
        if (t->n == SHP_PY_MAX_FRAMES) {
            t->truncated = true;
            break;
        }
        if (!shp_grow((void **)&t->frames, &cap, t->n, sizeof(*t->frames)))
            return false;
        t->frames[t->n++] = (struct shp_py_frame){.code = (uint32_t)ci, .lasti = lasti};
    }
    return true;
}

int shp_py_read(struct shp_py_proc *p)
{
    const struct shp_py_layout *L = &p->L;
    if (!p->found)
        return 0;
    uint64_t fin = 0, interp = 0;
    if (!rd(p, p->runtime + L->rt_finalizing, &fin, 8) ||
        !rd(p, p->runtime + L->rt_interp_head, &interp, 8))
        return -ESRCH;
    if (fin) {
        snprintf(p->why, sizeof(p->why), "the interpreter is finalizing: native stacks only");
        return 0;
    }
    uint32_t ts_fields[] = {L->ts_next, L->ts_thread_id, L->ts_frame,
                            L->ts_native_tid >= 0 ? (uint32_t)L->ts_native_tid : 0};
    size_t tlen = max_u32(ts_fields, sizeof(ts_fields) / sizeof(ts_fields[0])) + 8;
    unsigned char tb[1024];
    if (tlen > sizeof(tb))
        return 0;
    size_t cap = 0;
    for (int ni = 0; ok_ptr(interp) && ni < MAX_INTERPS; ni++) {
        uint64_t ts = 0, next_interp = 0;
        if (!rd(p, interp + L->interp_threads, &ts, 8) ||
            !rd(p, interp + L->interp_next, &next_interp, 8))
            break;
        for (int nt = 0; ok_ptr(ts) && nt < MAX_TSTATES; nt++, ts = u64_at(tb, L->ts_next)) {
            if (!rd(p, ts, tb, tlen) ||
                !shp_grow((void **)&p->threads, &cap, p->nthreads, sizeof(*p->threads)))
                break;
            struct shp_py_thread *t = &p->threads[p->nthreads++];
            *t = (struct shp_py_thread){.thread_id = u64_at(tb, L->ts_thread_id)};
            if (L->ts_native_tid >= 0)
                t->native_tid = u64_at(tb, (uint32_t)L->ts_native_tid);
            if (!walk(p, u64_at(tb, L->ts_frame), t))
                snprintf(p->why, sizeof(p->why),
                         "Python 3.%u frames are not laid out as expected: some Python stacks "
                         "are cut short",
                         L->minor);
        }
        interp = next_interp;
    }
    return 0;
}

void shp_py_frame_text(const struct shp_py_proc *p, const struct shp_py_frame *f, char *out,
                       size_t len)
{
    const struct shp_py_code *c = f->code < p->ncodes ? &p->codes[f->code] : NULL;
    if (!c) {
        snprintf(out, len, "py: ?");
        return;
    }
    int line = shp_py_addr2line(c->linetable, c->linetable_len, c->firstlineno, p->version,
                                SHP_PYFRAME_OFFSET(f->lasti));
    if (line > 0)
        snprintf(out, len, "py: %s (%s:%d)", c->name, c->file, line);
    else
        snprintf(out, len, "py: %s (%s)", c->name, c->file);
}

void shp_py_free(struct shp_py_proc *p)
{
    for (size_t i = 0; i < p->nthreads; i++)
        free(p->threads[i].frames);
    free(p->threads);
    for (size_t i = 0; i < p->ncodes; i++) {
        free(p->codes[i].name);
        free(p->codes[i].file);
        free(p->codes[i].linetable);
    }
    free(p->codes);
    p->threads = NULL;
    p->codes = NULL;
    p->nthreads = p->ncodes = p->capcodes = 0;
}
