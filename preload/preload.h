/* shapetrace preload: what the preload's files share, one section per file, bottom layer first;
 * a file calls only into the sections above its own. Nothing here is exported from the shared
 * object except the wrappers and dlsym (see exports.map.c); everything else is hidden. */
#ifndef SHAPETRACE_PRELOAD_H
#define SHAPETRACE_PRELOAD_H

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"
#include "common/ops.h"
#include "common/rec.h"
#include "include/shapetrace/calls.h"
#include "include/shapetrace/trace.h"

#define SHP_TLS __thread __attribute__((tls_model("initial-exec")))

/* Library slots: slot 0 is the library reached by ordinary symbol binding; slots 1.. are
 * libraries whose functions a program looked up with dlsym(handle, name) (vLLM's pynccl, ctypes),
 * each with its own copy of every wrapper so that two loaded copies of NCCL stay apart. */
#define SHP_SLOTS 4

/* One intercepted call, as the wrapper describes it (calls.h `desc`). Kept to 80 bytes, so that
 * the wrapper's zero-initialisation of it is five vector stores, not a `rep stos` (7 ns a call
 * when it was 232 bytes; gcc 12 still chose `rep stos` at 88): fields that no call sets together
 * share storage, and small numbers take small types. */
#define SHP_DESC_FIELDS                                                                            \
    uint8_t op; /* enum shp_op: SHP_OP_COUNT <= 256 (record.c) */                                  \
    uint8_t cls;                                                                                   \
    uint8_t slot;                                                                                  \
    int8_t kind;              /* copy kind, allocation kind */                                     \
    int16_t src_dev, dst_dev; /* peer copies */                                                    \
    union {                                                                                        \
        const void *a;   /* collective send buffer, copy source, pointer freed */                  \
        const void *uid; /* communicator creation: the unique id(s) */                             \
    };                                                                                             \
    const void *b; /* collective receive buffer, copy destination */                               \
    void *comm;                                                                                    \
    void *stream;                                                                                  \
    void **out; /* where the call stores what it creates */                                        \
    union {                                                                                        \
        size_t count;       /* collectives, p2p */                                                 \
        size_t width;       /* copies */                                                           \
        size_t size;        /* allocations */                                                      \
        const int *devlist; /* ncclCommInitAll */                                                  \
    };                                                                                             \
    union {                                                                                        \
        struct {                                                                                   \
            int32_t dtype, redop, root, peer;                                                      \
        };                                                                                         \
        struct {                                                                                   \
            size_t height, spitch, dpitch;                                                         \
        };                                                                                         \
        struct {                                                                                   \
            void *graph, *exec;                                                                    \
            uint32_t flags; /* also an allocation's */                                             \
        };                                                                                         \
        struct {                                                                                   \
            int32_t nuid, nranks, rank, color, key;                                                \
        };                                                                                         \
    };
struct shp_desc {
    SHP_DESC_FIELDS
};
_Static_assert(sizeof(struct shp_desc) == 80, "the wrapper zeroes this: keep it small");

/* The call as the recorder sees it: the description (written whole by the wrapper, as `d`, and
 * read field by field), then the recorder's own state, which shp_enter fills and nothing zeroes. */
struct shp_call {
    union {
        struct shp_desc d;
        struct {
            SHP_DESC_FIELDS
        };
    };
    struct shp_ev *ev;     /* the full record, or NULL */
    struct shp_head *head; /* the compact record, or NULL */
    struct shp_head *late; /* an allocation's compact record, which shp_leave_full completes */
    void *cstate;          /* the communicator's state (struct comm_state), or NULL */
    uint64_t t0;           /* shp_clock_now() at entry */
    uint64_t id;           /* communicator id being created */
    uint64_t seq;          /* collectives, p2p: the seq taken (given back if NCCL refuses it) */
    uint32_t index;
};

/* ---- config.c: configuration, state, logging (the bottom layer) ---- */

enum { SHP_STATE_UNINIT, SHP_STATE_INITIALIZING, SHP_STATE_ON, SHP_STATE_OFF };

struct shp_config {
    char dir[PATH_MAX]; /* run directory, %h %p %r expanded */
    char host[64];
    unsigned stacks; /* SHP_STACKS_* */
    uint64_t cap;    /* bytes of event records per process */
    int env_rank, local_rank, world_size;
    char libunwind[PATH_MAX]; /* SHAPETRACE_LIBUNWIND, may be empty */
    char self_dir[PATH_MAX];  /* directory holding libshapetrace.so */
    bool dormant;             /* SHAPETRACE_DORMANT: start with recording off */
    bool refused;             /* a path in the environment cannot be used: no tracing at all */
    unsigned growth;          /* SHP_GROWTH_*: how the trace file gets its pages */
    bool prefault;            /* SHAPETRACE_PREFAULT: a helper thread faults them in ahead */
    char log_path[PATH_MAX];  /* SHAPETRACE_DEBUG_FILE, expanded; may be empty */
};

/* How the writer makes the file's pages exist (SHAPETRACE_FILE_GROWTH; bench/RESULTS.md). */
#define SHP_GROWTH_CHUNK 0    /* fallocate chunks as the tail reaches them */
#define SHP_GROWTH_POPULATE 1 /* the same, and fault the next chunk in ahead of the tail */
#define SHP_GROWTH_FULL 2     /* fallocate the whole cap at creation */
#define SHP_GROWTH_LARGE 3    /* chunks of 64 MiB from the first one on */

extern struct shp_config shp_cfg;
extern struct shp_log shp_log;
extern _Atomic int shp_state;
/* >0 while this thread runs shapetrace's own code, or the real function of an intercepted call:
 * a wrapper entered meanwhile passes straight through, unrecorded. The second half is the
 * outermost-call rule: libraries call their own exported functions (NCCL's ncclBcast calls
 * ncclBroadcast through its symbol table), and only the call that reached the library from
 * outside it is the application's. */
extern SHP_TLS int shp_guard;

/* Enter shapetrace's own code: wrappers pass straight through until shp_own_leave, which gives
 * errno back to the application as it was. Returns what shp_own_leave takes. Pairs nest. */
static inline int shp_own_enter(void)
{
    shp_guard++;
    return errno;
}

static inline void shp_own_leave(int saved_errno)
{
    errno = saved_errno;
    shp_guard--;
}

/* Read the environment into shp_cfg and shp_log (once, from shp_init). A path there that
 * cannot be used sets shp_cfg.refused, with one warning. */
void shp_config_load(void);

/* Switch tracing off for good after an error of ours; logs `why` once. */
void shp_disable(const char *why);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t shp_now_ns(void);
/* The calling thread's id (gettid), kept per thread. */
extern SHP_TLS uint32_t shp_tls_tid;
uint32_t shp_tid_slow(void);
static inline uint32_t shp_tid(void)
{
    uint32_t t = shp_tls_tid;
    return __builtin_expect(t != 0, 1) ? t : shp_tid_slow();
}

/* The trace's clock (SHP_CLOCK_*, chosen at start-up: the TSC where it is invariant and the
 * kernel's own clocksource, unless SHAPETRACE_CLOCK=monotonic) and a reading of it: what records
 * store as times and durations. */
extern unsigned shp_clock_kind;
static inline uint64_t shp_clock_now(void)
{
#if defined(__x86_64__)
    if (__builtin_expect(shp_clock_kind == SHP_CLOCK_TSC, 1))
        return __builtin_ia32_rdtsc();
#endif
    return shp_now_ns();
}
/* A (TSC, CLOCK_MONOTONIC) pair read as close together as this thread can (see trace.h). */
void shp_clock_pair_now(uint64_t *tsc, uint64_t *ns);

/* Update the log prefix: the environment's rank, else `comm_rank` (-1: none known); the pid
 * changes at fork. */
void shp_log_prefix_update(int comm_rank);

/* Control words (SHP_CTL_*): the trace header's once the file is open, so that `shapetrace
 * attach` can flip them from outside; a process-local copy before that. */
extern volatile uint64_t *shp_ctl;
/* True while the control words are the process-local copy (no trace open). */
bool shp_ctl_is_local(void);
/* Use `ctl` (an open trace header's words) from now on; NULL: back to the local copy. */
void shp_ctl_use(volatile uint64_t *ctl);
void shp_config_atfork_child(void);

/* ---- writer.c: the trace file ---- */

/* Open the trace if it is not open. Returns 1 if this call opened it, 0 if it was open, or a
 * negative errno when it cannot be made (logged once; later calls return -EIO). */
int shp_writer_open(void);
/* Reserve `size` bytes for a record of `type` in the open trace, growing the file as needed;
 * bookkeeping records (SHP_ROLE_META) may use the reserve beyond the cap. Returns NULL when the
 * record cannot be written, counted in the header as a drop: *why is left NULL when the trace is
 * not open or the cap is reached (tracing goes on), and set to the reason when the trace can take
 * no more records (the header is then marked disabled; the caller switches tracing off). Fill the
 * record, then shp_rec_publish it. Thread-safe, lock-free but for file growth. */
void *shp_writer_reserve(unsigned type, size_t size, const char **why);
/* A warning the application's standard error could not take (shp_log.divert): written into
 * the trace as a mark record, or kept (the first one) until the trace is made. */
void shp_writer_note(const char *text);
/* The mapped header, NULL until the trace is open. */
struct shp_file_header *shp_writer_header(void);
/* Give the published communicator record `rec` (in the open trace) the next index of the
 * header's table, for compact records to name it by. Returns the index, or -1 when the table is
 * full or rec is not in the trace (that communicator's calls then get full records). */
int shp_writer_comm_index(const void *rec);
/* The offset in the open trace of `rec`, a record in it (its segments are mapped apart, so not
 * its distance from the header); 0 if it is not in the trace. */
uint64_t shp_writer_offset(const void *rec);
/* The communicator record that index idx of the open trace's table names, NULL if none. */
const void *shp_writer_comm_record(unsigned idx);
void shp_writer_close(void);
void shp_writer_atfork_child(void);

/* Before fork, in the parent: the helper thread that faults the trace's next pages in is
 * stopped and joined, so that the fork finds none of our threads (Python's os.fork counts them
 * and warns of any), and the child starts without one. */
void shp_writer_atfork_prepare(void);
void shp_writer_atfork_parent(void);

/* shp_writer_reserve, switching tracing off when the trace can take no more records. */
static inline void *shp_reserve(unsigned type, size_t size)
{
    const char *why = NULL;
    void *r = shp_writer_reserve(type, size, &why);
    if (__builtin_expect(why != NULL, 0)) {
        int saved = errno; /* the warning is written */
        shp_disable(why);
        errno = saved;
    }
    return r;
}

/* What a call record's reservation reads of the writer (writer.c keeps it). `fast_end` is 0
 * while no trace is open, else at most the end of what exists and is mapped and where the
 * helper that faults pages in ahead of the tail must be asked to go on: below it, a record
 * takes one CAS and no call. */
#define SHP_SEG_MAX 1024
struct shp_writer_hot {
    _Atomic uint64_t fast_end;
    struct shp_file_header *hdr;
    unsigned shift; /* a segment maps 2^shift bytes of file (and an overlap) */
    uint32_t gen;   /* bumped at fork: communicator indexes name this file's records only */
    uint64_t mask;
    unsigned char *seg[SHP_SEG_MAX]; /* mapping of segment i, or NULL; published before use */
};
extern struct shp_writer_hot shp_wh;

/* Which trace file indexes belong to: changes when a forked child starts its own. Inline: each
 * collective's compact record asks. */
static inline uint32_t shp_writer_gen(void)
{
    return shp_wh.gen;
}

/* shp_reserve for a call record (not SHP_ROLE_META) of a constant size: a CAS on the tail when
 * the record ends below fast_end and the cap, else the whole of shp_reserve (growth, the
 * helper, drops). */
static inline void *shp_reserve_call(unsigned type, size_t size)
{
    uint64_t fast = atomic_load_explicit(&shp_wh.fast_end, memory_order_acquire);
    if (__builtin_expect(fast != 0, 1)) {
        struct shp_file_header *h = shp_wh.hdr;
        uint64_t off = __atomic_load_n(&h->tail, __ATOMIC_RELAXED), end = off + size;
        if (__builtin_expect(end <= fast && end <= __atomic_load_n(&h->cap, __ATOMIC_RELAXED), 1) &&
            __atomic_compare_exchange_n(&h->tail, &off, end, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            void *r = shp_wh.seg[off >> shp_wh.shift] + (off & shp_wh.mask);
            /* The line a few records on, asked for now: a record is stored into a line no one
             * has touched since the helper faulted its page in, and each such store waited for
             * the line (on the 2-core machine, bench/ab.sh: a copy 13.5 to 14.2 ns less, a
             * launch 6.3 to 9.4). A prefetch never faults, past the mapping too. */
            __builtin_prefetch((char *)r + 1024, 1, 3);
            shp_rec_mark_reserved(r, size);
            return r;
        }
    }
    return shp_reserve(type, size);
}

/* ---- resolve.c: the real functions ---- */

extern _Atomic(void *) shp_real_tab[SHP_SLOTS][SHP_OP_COUNT];

/* Resolve op for slot 0 (RTLD_NEXT, then the loaded library, pnccl* first). NULL if absent. */
void *shp_real_slow(unsigned op, int slot);

/* The real function if it was found already, else NULL. */
static inline void *shp_real_loaded(unsigned op, int slot)
{
    return atomic_load_explicit(&shp_real_tab[slot][op], memory_order_acquire);
}

static inline void *shp_real(unsigned op, int slot)
{
    void *p = shp_real_loaded(op, slot);
    return __builtin_expect(p != NULL, 1) ? p : shp_real_slow(op, slot);
}

/* Helpers of the library behind `slot` that are not intercepted. */
enum shp_aux {
    SHP_AUX_COMM_USER_RANK,
    SHP_AUX_COMM_COUNT,
    SHP_AUX_COMM_CU_DEVICE,
    SHP_AUX_COMM_GET_ASYNC_ERROR,
    SHP_AUX_GET_DEVICE,
    SHP_AUX_POINTER_ATTRIBUTES,
    SHP_AUX_PEEK_ERROR,
    SHP_AUX_GET_ERROR,
    SHP_AUX_STREAM_CAPTURE_INFO, /* cudaStreamGetCaptureInfo: a stream joined to a capture */
    SHP_AUX_STREAM_CAPTURE_INFO_PTSZ,
    SHP_AUX_CU_POINTER_ATTRIBUTE, /* the driver's: copies seen at the driver level */
    SHP_AUX_CU_CTX_GET_DEVICE,
    SHP_AUX_CU_STREAM_CAPTURE_INFO, /* cuStreamGetCaptureInfo_v2 */
    SHP_AUX_COUNT
};
extern _Atomic(void *) shp_aux_tab[SHP_SLOTS][SHP_AUX_COUNT];
void *shp_real_aux_slow(int slot, enum shp_aux aux);
/* The helper aux of the library behind `slot`, NULL if it has none. Inline: a copy asks for
 * cudaGetDevice on every call, and the call into resolve.c was 24 instructions of it. */
static inline void *shp_real_aux(int slot, enum shp_aux aux)
{
    void *p = atomic_load_explicit(&shp_aux_tab[slot][aux], memory_order_acquire);
    return __builtin_expect(p != NULL, 1) ? p : shp_real_aux_slow(slot, aux);
}

/* A driver function (`name`, exact) by ordinary binding or in the loaded libcuda; NULL if none. */
void *shp_cu_real_lookup(const char *name);

/* True if pc lies in a loaded NCCL or shared CUDA runtime: a driver call from their code is theirs
 * (NCCL's buffers and proxy threads; the runtime's work for a runtime call, recorded as that call
 * when it is traced), never the application's. Lock-free once the calling object was seen. */
bool shp_called_from_library(const void *pc);

/* A wrapper's real function was not found: warn once for op, return `err`. */
int shp_missing(unsigned op, int err);

/* libc's dlsym (dlvsym'd once; the preload's own dlsym is the hook in dlsym.c). */
void *shp_libc_dlsym(void *handle, const char *name);

/* The slot (1..SHP_SLOTS-1) of the library that defines p, found through `handle`, taken on
 * first sight; -1 when all are taken. */
int shp_slot_for(void *p, void *handle);

/* The address range [lo, hi) of a loaded object's PT_LOAD segments; hi 0 if it has none. */
struct dl_phdr_info;
void shp_load_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi);

/* True if addr lies in libshapetrace.so itself. */
bool shp_is_self(const void *addr);

/* ---- cuda.c (with the wrappers): cuGetProcAddress ---- */

/* Our cuGetProcAddress (v2: cuGetProcAddress_v2's signature) calling `real`; NULL if real is
 * NULL or ours. What it hands out for the traced driver functions are our wrappers. */
void *shp_cu_proc_wrapper(void *real, bool v2);

/* ---- stackid.c: records stored once, and the stack id table ---- */

/* A lock-free table from a 64-bit key hash to a record id, for records stored once (stacks,
 * Python code objects). A slot is claimed by its hash; its id is published after its record. */
struct shp_intern_slot {
    _Atomic uint64_t hash;
    _Atomic uint32_t id;
    uint32_t pad;
};

/* The id for hash `h` in `tab` (`nslots`, a power of two, zeroed memory). On first sight calls
 * store(arg), which writes the record and returns its id (0 if it could not); threads that meet
 * the same hash meanwhile wait for that id. Returns 0 when the record could not be stored or
 * the table is full (counted in the header's stacks_dropped). No allocation, no lock. */
uint32_t shp_intern(struct shp_intern_slot *tab, uint32_t nslots, uint64_t h,
                    uint32_t (*store)(void *arg), void *arg);
/* shp_intern on the stack table, whose ids events carry (native and Python stacks share it).
 * Returns 0 if the table could not be made. */
uint32_t shp_stack_intern(uint64_t h, uint32_t (*store)(void *arg), void *arg);
/* A new id in the stack table's id space, for the record a store callback writes. */
uint32_t shp_stack_new_id(void);
/* The child's trace starts empty: forget the stored stacks. */
void shp_stackid_atfork_child(void);

/* ---- python.c: Python call sites (SHP_STACKS_PYTHON) ---- */

/* The calling thread's Python frames deduplicated into a SHP_REC_PYSTACK that refers to the
 * native stack `native`; returns its id, or `native` when the thread runs no Python, the process
 * has no Python, or its version is not supported (warned once). Reads only the calling thread's
 * own frames, without the GIL. Call from a wrapper with the guard held; no allocation, no lock
 * but on first use. */
uint32_t shp_py_stack(uint32_t native);
/* Objects were loaded or unloaded: a process found without Python looks again. */
void shp_py_modules_changed(void);
void shp_py_atfork_child(void);

/* One Python frame as shp_py_frames hands it out; the texts are NUL-terminated UTF-8 that holds
 * until the callback returns. */
struct shp_py_frame {
    const char *name, *qualname, *file; /* qualname is "" on 3.10 */
    int firstlineno;
    uint32_t lasti; /* instruction offset (SHP_PYFRAME_OFFSET), SHP_PYFRAME_NO_OFFSET if none */
};
/* Call fn for each Python frame of the calling thread, innermost first; returns how many (0:
 * the thread runs no Python, or Python call sites are not available). For what is computed once
 * per distinct stack (preload/values.c): it converts every name. */
int shp_py_frames(void (*fn)(void *arg, const struct shp_py_frame *f), void *arg);

/* ---- stacks.c: native call sites and the module map ---- */

/* The id of the calling thread's stack (stored on first sight), 0 if stacks are off or the
 * stack could not be stored. With SHP_STACKS_PYTHON it names a Python stack (SHP_REC_PYSTACK)
 * when the thread runs Python. Call from a wrapper with the guard held. */
uint32_t shp_stack_here(void);
/* Where the application called the wrapper being recorded: the return address into its code and
 * the recording function's frame (its stack depth). Set by each generated wrapper just before it
 * records, taken (and cleared) by shp_stack_here: it finds the stack of an earlier call from the
 * same place, which is then checked against this one's instead of unwinding (stacks.c). */
struct shp_site_hint {
    uintptr_t pc, sp;
};
extern SHP_TLS struct shp_site_hint shp_site_hint;
/* At exit: how many native stacks were unwound in full (an INFO line of the log). */
void shp_stacks_report(void);
void shp_stacks_atfork_child(void);

/* ---- values.c: fingerprints of values (its calls are in values.h) ---- */

/* What is fingerprinted (SHP_VALUES_* of values.h); 0 when off, and set to 0 for good after an
 * error of ours (one warning). Written at start-up and when switched off; read by every traced
 * call, here so that the wrapper's inline completion can test it. */
extern unsigned shp_values_mask;

/* ---- record.c: calls to records ---- */

/* Classes still recorded while dormant: later records cannot be understood without them. */
static inline bool shp_kept_dormant(int cls)
{
    return cls == SHP_CLS_COMM_INIT || cls == SHP_CLS_COMM_SPLIT || cls == SHP_CLS_COMM_END ||
           cls == SHP_CLS_ALLOC || cls == SHP_CLS_FREE || cls == SHP_CLS_CAPTURE ||
           cls == SHP_CLS_GRAPH;
}

/* Dormant and no trace yet: make the file now, once, so that attach can find this process.
 * True if the new trace's control words say armed. Sets shp_armed_tried. */
bool shp_armed_slow(void);
/* shp_armed_slow has run in this process (a forked child runs it again). */
extern _Atomic bool shp_armed_tried;

/* The trace's control word says armed (tracing must be on: the control words exist). */
static inline __attribute__((always_inline)) bool shp_ctl_armed(void)
{
    volatile uint64_t *ctl = __atomic_load_n(&shp_ctl, __ATOMIC_ACQUIRE);
    return ctl[SHP_CTL_ARMED] != 0;
}

/* True when calls are being recorded (not dormant). Two loads on the fast path, one more while
 * dormant. */
static inline __attribute__((always_inline)) bool shp_armed(void)
{
    return __builtin_expect(shp_ctl_armed(), 1) ||
           (__builtin_expect(!atomic_load_explicit(&shp_armed_tried, memory_order_relaxed), 0) &&
            shp_armed_slow());
}

/* A communicator's next seq. NCCL forbids issuing calls on one communicator from two threads at
 * once (its Thread Safety page: "it is not allowed to issue NCCL operations to a single
 * communicator in parallel with multiple threads"; threads that take turns are ordered by their
 * own synchronization), so a load and a store count it, with no locked add: on a dormant
 * collective that add was a third of what the wrapper cost. */
static inline __attribute__((always_inline)) uint64_t shp_seq_next(_Atomic uint64_t *n)
{
    uint64_t v = atomic_load_explicit(n, memory_order_relaxed);
    atomic_store_explicit(n, v + 1, memory_order_relaxed);
    return v;
}

/* The calling thread's last communicator (record.c): its handle, its state and its seq counter,
 * valid while shp_comm_gen is still `gen` (any communicator inserted changes it). The handle is
 * NULL while the communicator is still being made, and never set without a counter. */
struct shp_comm_last {
    const void *handle;
    void *st; /* struct comm_state */
    _Atomic uint64_t *seq;
    uint32_t gen;
};
extern SHP_TLS struct shp_comm_last shp_comm_last;
extern _Atomic uint32_t shp_comm_gen;
/* The calling thread's NCCL group depth (ncclGroupStart minus ncclGroupEnd). */
extern SHP_TLS uint32_t shp_group_depth;

/* While dormant: count a collective's or p2p call's seq once the real function has returned
 * `result`, so that ranks armed at different moments still line up (a call NCCL refused takes
 * none); op and cls are the call's, slot its library's. Looks the communicator up (and records
 * one never seen created, or one whose size NCCL can tell now). Keeps errno. */
void shp_dormant_seq(unsigned op, unsigned cls, int slot, void *comm, int peer, int result);

/* shp_dormant_seq, inline for a collective that succeeded on the thread's last communicator: a
 * compare, a load and a store, no call, errno untouched. */
static inline __attribute__((always_inline)) void
shp_dormant_count(unsigned op, unsigned cls, int slot, void *comm, int peer, int result)
{
    if (result == 0 && cls == SHP_CLS_COLL && comm && comm == shp_comm_last.handle &&
        shp_comm_last.seq &&
        shp_comm_last.gen == atomic_load_explicit(&shp_comm_gen, memory_order_acquire)) {
        shp_seq_next(shp_comm_last.seq);
        return;
    }
    shp_dormant_seq(op, cls, slot, comm, peer, result);
}

/* While dormant, before a collective's real call: take its seq if comm is the thread's last
 * communicator (true), else nothing (false: count it after the call, shp_dormant_count). A
 * compare or two, a load and a store, no call, errno untouched. */
static inline __attribute__((always_inline)) bool shp_dormant_take(void *comm)
{
    /* A cached handle has a counter: its state's, or one that nobody reads (record.c). */
    if (comm && comm == shp_comm_last.handle &&
        shp_comm_last.gen == atomic_load_explicit(&shp_comm_gen, memory_order_acquire)) {
        shp_seq_next(shp_comm_last.seq);
        return true;
    }
    return false;
}

/* After shp_dormant_take's real call returned `result` (not 0): a call NCCL refused gives its
 * seq back (the thread's last communicator is still the one it took it from: every wrapper the
 * real call reached passed through). Keeps errno. */
void shp_dormant_refused(int result);

/* While dormant: the calling thread's group depth follows ncclGroupStart and ncclGroupEnd. */
static inline void shp_dormant_group(unsigned op, int result)
{
    if (op == SHP_OP_ncclGroupStart && result == 0)
        shp_group_depth++;
    else if (op == SHP_OP_ncclGroupEnd && shp_group_depth > 0)
        shp_group_depth--;
}

/* Before the real call: reserve and publish the call's record (or note why not). Returns with
 * the guard held (shp_guard one higher), so that the caller calls the real function under it
 * and then drops it, with no second increment. */
void shp_enter(struct shp_call *c);
/* shp_enter for a call whose class is known to be that one: each its own straight path. */
void shp_enter_launch(struct shp_call *c);
void shp_enter_copy(struct shp_call *c);
/* shp_enter_copy for a copy of the runtime's (not the driver's): its device is asked of the
 * runtime with no test of which library the call is of. */
void shp_enter_copy_rt(struct shp_call *c);
void shp_enter_coll(struct shp_call *c);
void shp_enter_p2p(struct shp_call *c);

/* shp_enter, picked by the class and the library (rt: the CUDA runtime) that the wrapper knows at
 * compile time. */
static inline void shp_enter_cls(struct shp_call *c, int cls, bool rt)
{
    if (cls == SHP_CLS_LAUNCH)
        shp_enter_launch(c);
    else if (cls == SHP_CLS_COPY && rt)
        shp_enter_copy_rt(c);
    else if (cls == SHP_CLS_COPY)
        shp_enter_copy(c);
    else if (cls == SHP_CLS_COLL)
        shp_enter_coll(c);
    else if (cls == SHP_CLS_P2P)
        shp_enter_p2p(c);
    else
        shp_enter(c);
}
/* After it: bookkeeping (communicators, allocations, graphs), then complete the record. */
void shp_leave_full(struct shp_call *c, int result);
/* What a compact record's completion may still have to do, out of line: give a refused call's
 * seq back (ncclInvalidArgument, ncclInvalidUsage: NCCL enqueued nothing), and the values hook
 * (values.h). Keeps errno. */
void shp_leave_more(struct shp_call *c, int result);
static inline void shp_leave(struct shp_call *c, int result)
{
    if (__builtin_expect(c->head != NULL, 1)) {
        /* Compact: the device was taken at entry, the communicator's is its record's. A clock
         * read and a store call nothing and set no errno: no guard, nothing to restore. */
        shp_rec_done(c->head, result, shp_clock_now() - c->t0);
        if (__builtin_expect(result != 0 || shp_values_mask != 0, 0))
            shp_leave_more(c, result);
        return;
    }
    shp_leave_full(c, result);
}
/* Forget per-process state that a forked child must not inherit. */
void shp_record_atfork_child(void);

/* ---- init.c: the once-only start, fork and exit (below the wrappers, which call it) ---- */

/* Run the once-only initialisation if nobody has; safe from any thread and from constructors
 * of other libraries. */
void shp_init(void);

/* A call of the application's passed through because tracing switched itself off: counted in
 * the trace's header (calls_lost) while it is mapped. caller: the wrapper's return address where
 * the call may be a library's own (SHP_FOREIGN_*), which is not counted; NULL otherwise. */
__attribute__((cold)) void shp_call_lost(const void *caller);

/* shp_active's common case alone, for the wrapper's first test: tracing on and this thread in
 * neither our code nor another intercepted call. Calls nothing; false only means "ask
 * shp_active". */
static inline __attribute__((always_inline)) bool shp_on_outside(void)
{
    return __builtin_expect(!shp_guard, 1) &&
           atomic_load_explicit(&shp_state, memory_order_acquire) == SHP_STATE_ON;
}

/* True when this call should be recorded: tracing on, and neither shapetrace's own code nor the
 * real function of another intercepted call is running on this thread. caller: as for
 * shp_call_lost, read only when tracing is off. */
static inline __attribute__((always_inline)) bool shp_active(const void *caller)
{
    if (__builtin_expect(shp_guard, 0))
        return false;
    int st = atomic_load_explicit(&shp_state, memory_order_acquire);
    if (__builtin_expect(st != SHP_STATE_ON, 0)) {
        if (st == SHP_STATE_OFF) {
            shp_call_lost(caller);
            return false;
        }
        if (st != SHP_STATE_UNINIT)
            return false;
        shp_init();
        return atomic_load_explicit(&shp_state, memory_order_acquire) == SHP_STATE_ON;
    }
    return true;
}

#endif
