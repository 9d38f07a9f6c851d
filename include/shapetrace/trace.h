/* shapetrace: the on-disk trace format, shared by the preload (writer) and the tools (reader).
 *
 * A trace is one file per process: a 4096-byte header page, then records. Every field has a fixed
 * width, every record a size that is a multiple of 8, and no struct has implicit padding (each
 * size is asserted below). Integers are in the writer's byte order, which the header states;
 * the reader refuses the other one. SHP_TRACE_VERSION changes with any change of layout.
 *
 * Crash safety: the writer maps the file MAP_SHARED and reserves space by advancing `tail` in
 * the mapped header, so the header always says how far records may go even after SIGKILL. A record
 * is filled, then published by storing its first word (magic, type, size) last, with release
 * order; `check` is a sum over the rest of the record. A reader that finds a word of zero or a bad
 * check where a record should be has found a record whose writer died mid-way: it skips it (by
 * its reserved size, or by scanning to the next valid record) and reports the trace incomplete.
 *
 * Version 2 (version 1 is refused): times are in the header's clock (`clock`: CLOCK_MONOTONIC
 * nanoseconds, or TSC ticks with calibration pairs in the header, see shp_clock_pair); the
 * frequent calls (1-D copies, collectives, p2p, graph launches) have compact records of 48 to
 * 72 bytes that pack pointers into 48 bits and name their communicator by an index into the
 * header's table (SHP_REC_COPY_C and after); the check is an additive sum (shp_rec_check).
 *
 * Version 3 is version 2 with one more record type, SHP_REC_VALUE (SHAPETRACE_VALUES). A writer
 * stamps 3 only on a trace that may hold value records: a reader of version 2 then refuses the
 * trace with its one-line error instead of taking every value record for a torn one and calling
 * the trace incomplete. A trace without them is still version 2, byte for byte, and readers of
 * either version read it.
 *
 * Versions 4 and 5 are versions 2 and 3 with two more record types: SHP_REC_COPY2D_C, the compact
 * record of a 2-D copy, and SHP_REC_STACK_TAIL, a stack whose outer frames are another stack's.
 * A writer of this tree stamps 4 (5 on a trace that may hold value records); a reader reads all
 * four versions, and one that knows only 2 and 3 refuses a trace of 4 or 5 with its one-line
 * error instead of taking the new records for torn ones.
 *
 * Versions 6 and 7 are versions 4 and 5 with three more record types, for the records a process
 * writes once or a few times: SHP_REC_COMM_END_C, the compact record of a communicator's end;
 * SHP_REC_ALLOC_C, of an allocation or a free; SHP_REC_MODULE_C, a module record whose build id
 * takes its own length. A writer of this tree stamps 6 (7 with value records); readers of this
 * tree read versions 2 to 7.
 */
#ifndef SHAPETRACE_TRACE_H
#define SHAPETRACE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define SHP_TRACE_MAGIC "SHPTRACE"
#define SHP_TRACE_VERSION 6u        /* what a writer stamps on a trace without value records */
#define SHP_TRACE_VERSION_VALUES 7u /* ... and on one that may hold them (SHP_REC_VALUE) */
#define SHP_TRACE_VERSION_OLDEST 2u /* versions 2 to 5 are still read (written by older trees) */
#define SHP_BYTE_ORDER_MARK 0x01020304u
#define SHP_HEADER_SIZE 4096u
#define SHP_TRACE_SUFFIX ".shptrace"

/* True for the format versions this tree reads (2 to 7; it writes 6 and 7). */
static inline int shp_trace_version_known(uint32_t v)
{
    return v >= SHP_TRACE_VERSION_OLDEST && v <= SHP_TRACE_VERSION_VALUES;
}

/* True for the versions whose traces may hold value records (3, 5 and 7: the odd ones). */
static inline int shp_trace_version_values(uint32_t v)
{
    return shp_trace_version_known(v) && v % 2 == 1;
}

/* Header flags. */
#define SHP_FILE_COMPLETE 0x1u /* the writer closed the trace at process exit */
#define SHP_FILE_DISABLED 0x2u /* the writer switched itself off after an error of its own */

/* Control words (ctl[]) that a tool may write into a live process's header (see attach). */
#define SHP_CTL_ARMED 0    /* 1: record calls; 0: dormant (communicators and allocations only) */
#define SHP_CTL_MARK_SEQ 1 /* bumped by a tool after writing mark_text; the writer emits a mark */

/* Clocks of a trace's times (header `clock`). */
#define SHP_CLOCK_MONOTONIC 0u /* CLOCK_MONOTONIC nanoseconds */
#define SHP_CLOCK_TSC 1u       /* the invariant TSC's ticks; clock pairs convert them */

/* A (TSC, CLOCK_MONOTONIC) pair read together. The writer stores one when the trace is created
 * (clock_first), then rewrites clock_pairs[] in turn as the file grows and at exit: `check` is
 * zeroed first and stored last (shp_clock_pair_check), so that a reader of a live or killed
 * trace takes the latest pair whose check holds and converts a time t as
 *   ns = first.ns + (t - first.tsc) * (latest.ns - first.ns) / (latest.tsc - first.tsc).
 * With the monotonic clock the pairs are unused (zero). */
struct shp_clock_pair {
    uint64_t tsc;
    uint64_t ns;
    uint64_t check;
};
_Static_assert(sizeof(struct shp_clock_pair) == 24, "clock pair layout");
#define SHP_CLOCK_PAIRS 4

static inline uint64_t shp_clock_pair_check(uint64_t tsc, uint64_t ns)
{
    uint64_t c = (tsc ^ (ns * 0x9e3779b97f4a7c15ull)) + 0x5348505452414345ull;
    return c ? c : 1;
}

/* Communicators a trace can index for compact records; later ones get full records. */
#define SHP_COMM_INDEX_MAX 384

struct shp_file_header {
    char magic[8];        /* SHP_TRACE_MAGIC, no terminating NUL */
    uint32_t version;     /* SHP_TRACE_VERSION */
    uint32_t byte_order;  /* SHP_BYTE_ORDER_MARK as the writer stores it */
    uint32_t header_size; /* SHP_HEADER_SIZE: records start here */
    uint32_t flags;       /* SHP_FILE_* */
    uint64_t pid;
    uint64_t ppid;
    uint64_t realtime_ns;    /* CLOCK_REALTIME when the trace was created */
    uint64_t monotonic_ns;   /* CLOCK_MONOTONIC at the same moment */
    int32_t env_rank;        /* RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID; -1 */
    int32_t first_comm_rank; /* rank in the first communicator joined; -1 */
    int32_t local_rank;      /* LOCAL_RANK; -1 */
    int32_t world_size;      /* WORLD_SIZE; -1 */
    uint64_t tail;           /* end of reserved record space (file offset); updated atomically */
    uint64_t allocated;      /* bytes of file allocated so far */
    uint64_t cap;            /* event records stop here; bookkeeping may use cap + cap/16 */
    uint64_t dropped;        /* records not written because of the cap or an error */
    uint64_t dropped_bytes;
    uint64_t stacks_dropped; /* stacks not stored (table full); the events keep stack 0 */
    uint64_t ctl[8];         /* SHP_CTL_* words */
    char mark_text[128];     /* text of the pending mark, NUL-terminated */
    char host[64];           /* NUL-terminated */
    char exe[256];           /* /proc/self/exe at creation, NUL-terminated, may be cut */
    uint32_t stacks_mode;    /* SHP_STACKS_* */
    uint32_t clock;          /* SHP_CLOCK_*: the unit of every record's time and duration */
    /* From here on, version 2. */
    struct shp_clock_pair clock_first;                  /* taken when the trace was created */
    struct shp_clock_pair clock_pairs[SHP_CLOCK_PAIRS]; /* later ones, rewritten in turn */
    uint32_t ncomms;     /* entries of comm_off claimed (some may still be 0: not stored yet) */
    uint32_t off_reason; /* SHP_OFF_*: why tracing switched itself off; 0 while it is on */
    uint64_t off_ns;     /* when it switched off, in nanoseconds of the monotonic clock, or 0 */
    uint64_t calls_lost; /* the application's calls passed through untraced since then */
    /* What set `cap` (SHP_CAP_*): SHAPETRACE_MAX_MB, or a resource limit of the process that
     * lowered it, when the trace was made or later; cap_limit is that limit in bytes, else 0.
     * Zero in a trace of a writer that did not say (its cap is SHAPETRACE_MAX_MB's). */
    uint32_t cap_why;
    uint32_t pad2;
    uint64_t cap_limit;
    uint64_t reserved2[2];
    /* File offset of the communicator record that compact records name by index; 0 if none. */
    uint64_t comm_off[SHP_COMM_INDEX_MAX];
};
_Static_assert(offsetof(struct shp_file_header, clock_first) == 640, "header layout");
_Static_assert(sizeof(struct shp_file_header) == 816 + 8 * SHP_COMM_INDEX_MAX, "header layout");
/* Why tracing switched itself off: off_reason (with SHP_FILE_DISABLED), 0 in a trace of a
 * writer that did not say why. X(name, number, key, phrase): `key` is the name the JSON outputs
 * give it, `phrase` what dump and analyze say. Never renumber one. */
/* clang-format off */
#define SHP_OFF_REASONS(X) \
    X(NO_SPACE, 1, "no_space", "no space left for the trace") \
    X(FD_CLOSED, 2, "fd_closed", "the application closed the trace's file descriptor") \
    X(GROW, 3, "cannot_grow", "the trace could not grow") \
    X(FILE_GONE, 4, "file_gone", "the trace file was moved, removed or replaced, or could no " \
      "longer be opened to grow it") \
    X(NO_FD, 5, "no_descriptor", "the application had no file descriptor to spare for growing " \
      "the trace")
/* What set the cap (cap_why), as X(name, number, key, phrase). */
#define SHP_CAP_REASONS(X) \
    X(MAX_MB, 0, "max_mb", "the trace's cap (SHAPETRACE_MAX_MB)") \
    X(FSIZE, 1, "fsize", "the process's file-size limit (RLIMIT_FSIZE)") \
    X(AS, 2, "address_space", "the process's address-space limit (RLIMIT_AS)")
/* clang-format on */
#define SHP_REASON_ENUM(name, num, key, phrase) SHP_OFF_##name = num,
enum { SHP_OFF_REASONS(SHP_REASON_ENUM) SHP_OFF_COUNT };
#undef SHP_REASON_ENUM
#define SHP_REASON_ENUM(name, num, key, phrase) SHP_CAP_##name = num,
enum { SHP_CAP_REASONS(SHP_REASON_ENUM) SHP_CAP_COUNT };
#undef SHP_REASON_ENUM
_Static_assert(sizeof(struct shp_file_header) <= SHP_HEADER_SIZE, "header fits its page");

#define SHP_STACKS_NONE 0u
#define SHP_STACKS_NATIVE 1u
#define SHP_STACKS_PYTHON 2u /* native frames, plus the calling thread's Python frames */

/* Record types: the list, its numbers, sizes and roles are after the structs (SHP_REC_TYPES). */

/* First word of every record: magic in the top byte, then the type, then size / 8. */
#define SHP_REC_MAGIC 0xA7u
#define SHP_REC_WORD(type, size) ((SHP_REC_MAGIC << 24) | ((uint32_t)(type) << 16) | ((size) / 8))
#define SHP_REC_WORD_MAGIC(w) ((w) >> 24)
#define SHP_REC_WORD_TYPE(w) (((w) >> 16) & 0xffu)
#define SHP_REC_WORD_SIZE(w) (((w)&0xffffu) * 8)
#define SHP_REC_MAX_SIZE (0xffffu * 8)

struct shp_rec {
    uint32_t word;  /* SHP_REC_WORD(type, size), stored last */
    uint32_t check; /* shp_rec_check() of the bytes after this header */
};
_Static_assert(sizeof(struct shp_rec) == 8, "record header");

/* Event flags. */
#define SHP_EV_CAPTURED 0x1u      /* issued on a stream that was being captured into a graph */
#define SHP_EV_KIND_DEFAULT 0x2u  /* copy asked for cudaMemcpyDefault; `kind` was resolved */
#define SHP_EV_COMM_UNKNOWN 0x4u  /* communicator was never seen being created */
#define SHP_EV_DROPPED_STACK 0x8u /* a stack was asked for but not stored */
/* A communicator record written when NCCL could first tell the rank and size of a communicator
 * made non-blocking (its creation returned ncclInProgress, and its record says -1 of -1): same
 * id and handle as that record; calls after it name it. */
#define SHP_EV_COMM_LEARNED 0x10u

/* What every full call record starts with. A call is published when it is entered, so that a
 * trace shows the calls a process was inside when it hung or died; the fields from `result` on
 * are completed when the real function returns, `dur` last, and are not covered by `check`. */
#define SHP_DUR_PENDING UINT64_MAX /* dur of a call that had not returned */
#define SHP_EV_CHECK_SKIP_LO 32    /* bytes [32, 64) of a full call record are completed later */
#define SHP_EV_CHECK_SKIP_HI 64
struct shp_ev {
    struct shp_rec h;
    uint64_t t; /* at entry, in the header's clock */
    uint32_t tid;
    uint16_t op;    /* enum shp_op */
    uint16_t flags; /* SHP_EV_* */
    uint32_t stack; /* stack id (SHP_REC_STACK), 0 if none */
    uint32_t group; /* NCCL group depth of the calling thread at entry */
    /* completed after the call */
    int32_t result; /* the real function's return value */
    int32_t device; /* current CUDA device (communicator's device for NCCL), -1 if unknown */
    uint64_t dur;   /* time inside the real function, header's clock; SHP_DUR_PENDING until then */
    uint64_t out;   /* what the call produced: pointer, communicator handle, graph, exec */
    int32_t aux[2]; /* communicator records: rank and nranks as the library reports them */
};
_Static_assert(sizeof(struct shp_ev) == 64, "event layout");

/* Compact call records (SHP_ROLE_COMPACT): the frequent calls, in 48 to 72 bytes, each readable
 * on its own (no field depends on another record but the communicator it indexes). They start
 * with struct shp_head, whose `done` word holds the whole completion, stored by the writer in
 * one 8-byte store when the call returns and left out of `check`. Pointers, streams, counts and
 * sizes are stored in 48 bits (x86-64 and CUDA's unified addresses use 47) with a 16-bit field
 * in the top bits (SHP_P48); a call with a value that does not fit, a stack id of more than 32
 * bits split over two of these tops, a group depth over 65535, or a capture, gets its full
 * record instead, so every compact record decodes to exactly what the full one would. */
#define SHP_DONE_PENDING 0                  /* done of a call that had not returned */
#define SHP_DONE_MAX_DUR ((1ull << 48) - 2) /* longer durations are stored as this */
/* done: (dur + 1) << 16 | result as a 16-bit two's complement number (a result outside int16,
 * which no NCCL or CUDA error code is, is stored as INT16_MIN). Never 0 once completed. */
static inline uint64_t shp_done(int result, uint64_t dur)
{
    int16_t r = result < INT16_MIN || result > INT16_MAX ? INT16_MIN : (int16_t)result;
    if (dur > SHP_DONE_MAX_DUR)
        dur = SHP_DONE_MAX_DUR;
    return (dur + 1) << 16 | (uint16_t)r;
}
#define SHP_DONE_RESULT(d) ((int)(int16_t)(uint16_t)((d)&0xffffu))
#define SHP_DONE_DUR(d) (((d) >> 16) - 1)
#define SHP_CHECK_SKIP_DONE 24 /* bytes [24, 32) of a compact record: `done` */

struct shp_head {
    struct shp_rec h;
    uint64_t t; /* at entry, in the header's clock */
    uint32_t tid;
    uint8_t op;     /* enum shp_op (SHP_OP_COUNT <= 256) */
    uint8_t flags;  /* SHP_EV_* */
    uint16_t group; /* NCCL group depth of the calling thread at entry */
    uint64_t done;  /* shp_done(result, dur), SHP_DONE_PENDING until the call returns */
};
_Static_assert(sizeof(struct shp_head) == 32, "compact head layout");

/* A 48-bit value v and a 16-bit field x in one word. */
#define SHP_P48_LIMIT (1ull << 48)
#define SHP_P48(v, x) ((uint64_t)(v) | (uint64_t)(uint16_t)(x) << 48)
#define SHP_P48_VAL(w) ((w) & (SHP_P48_LIMIT - 1))
#define SHP_P48_TOP(w) ((uint16_t)((w) >> 48))

/* SHP_REC_COPY_C: a 1-D copy, not captured (height 1, pitches equal to the size, no peers). */
struct shp_rec_copy_c {
    struct shp_head h;
    uint64_t dst_dev;    /* dst | device (int16, -1 unknown) << 48: the device at entry */
    uint64_t src_kind;   /* src | kind (SHP_KIND_*, resolved) << 48 */
    uint64_t stream_slo; /* stream | stack id's low 16 bits << 48 */
    uint64_t bytes_shi;  /* bytes | stack id's high 16 bits << 48 */
};
_Static_assert(sizeof(struct shp_rec_copy_c) == 64, "compact copy layout");

/* SHP_REC_COPY2D_C (version 4): a 2-D copy, not captured, no peers, at most 2^32 - 1 rows: the
 * record of a 1-D copy of one row (`bytes` is the row's width), then the pitches and the height. */
struct shp_rec_copy2d_c {
    struct shp_rec_copy_c row;
    uint64_t spitch_hlo; /* spitch | height's low 16 bits << 48 */
    uint64_t dpitch_hhi; /* dpitch | height's high 16 bits << 48 */
};
_Static_assert(sizeof(struct shp_rec_copy2d_c) == 80, "compact 2-D copy layout");

/* SHP_REC_COLL_C and SHP_REC_P2P_C: a collective or p2p call on a communicator whose record the
 * header's comm_off[] indexes; its rank, size and device are that record's. Not captured. */
struct shp_rec_coll_c {
    struct shp_head h;
    uint64_t count_dt;   /* count | dtype << 48 | redop (SHP_REDOP_NONE if none) << 56 */
    uint64_t send_comm;  /* sendbuf | communicator index << 48 */
    uint64_t recv_rp;    /* recvbuf | root (collectives) or peer (p2p), int16, -1 none, << 48 */
    uint64_t stream_slo; /* stream | stack id's low 16 bits << 48 */
    uint64_t seq_shi;    /* seq | stack id's high 16 bits << 48 */
};
_Static_assert(sizeof(struct shp_rec_coll_c) == 72, "compact collective layout");

/* SHP_REC_LAUNCH_C: a graph launch (device -1, no out). */
struct shp_rec_launch_c {
    struct shp_head h;
    uint64_t stream_slo; /* stream | stack id's low 16 bits << 48 */
    uint64_t exec_shi;   /* exec | stack id's high 16 bits << 48 */
};
_Static_assert(sizeof(struct shp_rec_launch_c) == 48, "compact launch layout");

/* SHP_REC_ALLOC_C (version 6): an allocation or a free with no stream and no flags, its size in
 * 48 bits, its group depth in 16 (else the full SHP_REC_ALLOC). `ptr` is a free's pointer,
 * stored before the record is published; an allocation's, stored when the call returns, before
 * `done` (left out of `check` with it, and read only once `done` is). The device is taken at
 * entry (an allocation does not change it); a free's is -1, as in its full record. */
struct shp_rec_alloc_c {
    struct shp_head h;
    uint64_t ptr;
    uint64_t size_dev; /* size (0 for a free) | device (int16, -1 unknown) << 48 */
    uint32_t stack;
    uint8_t kind; /* SHP_ALLOC_* */
    uint8_t pad[3];
};
_Static_assert(sizeof(struct shp_rec_alloc_c) == 56 && offsetof(struct shp_rec_alloc_c, kind) == 52,
               "compact alloc layout");
#define SHP_CHECK_SKIP_OUT 40 /* a SHP_ROLE_OUT record leaves [24, 40) out of `check` */

/* Communicator kinds. */
#define SHP_COMM_INIT 1
#define SHP_COMM_SPLIT 2
#define SHP_COMM_SHRINK 3
#define SHP_COMM_FINALIZE 4
#define SHP_COMM_DESTROY 5
#define SHP_COMM_ABORT 6

/* SHP_REC_COMM: a communicator created (the handle is ev.out) or ended (the handle is `handle`).
 * A call that creates several communicators (ncclCommInitAll) writes one record for each. */
struct shp_rec_comm {
    struct shp_ev ev;
    uint64_t id;     /* hash of the unique id(s); for a child, of parent, index and color */
    uint64_t parent; /* parent id for a split or shrink, else 0 */
    uint64_t handle; /* the ncclComm_t an ending call was given; creation: 0 (see ev.out) */
    int32_t rank;    /* rank argument (-1 if the call takes none; see ev.aux[0]) */
    int32_t nranks;  /* nranks argument (-1 if the call takes none; see ev.aux[1]) */
    int32_t color;   /* split color; -2 for shrink */
    int32_t key;     /* split key; excluded-rank count for shrink */
    uint32_t index;  /* for a child: index of this split/shrink among the parent's */
    uint8_t kind;    /* SHP_COMM_* */
    uint8_t pad[3];
};
_Static_assert(sizeof(struct shp_rec_comm) == 112, "comm layout");

/* What a communicator record says of its handle, rank and size, as every reader takes them (and
 * as the writer checks a compact end against them): what the library reported after creation
 * (ev.out, ev.aux) wins over the arguments. */
static inline uint64_t shp_comm_rec_handle(const struct shp_rec_comm *r)
{
    return r->handle ? r->handle : r->ev.out;
}
static inline int32_t shp_comm_rec_rank(const struct shp_rec_comm *r)
{
    return r->ev.aux[0] >= 0 ? r->ev.aux[0] : r->rank;
}
static inline int32_t shp_comm_rec_nranks(const struct shp_rec_comm *r)
{
    return r->ev.aux[1] > 0 ? r->ev.aux[1] : r->nranks;
}

/* SHP_REC_COMM_END_C (version 6): a communicator's end (finalize, destroy, abort) whose record
 * the header's comm_off[] indexes, and whose id, handle, rank and size are that record's (as a
 * reader decodes them); its device -1 and no `out`, as in the full record. */
struct shp_rec_comm_end_c {
    struct shp_head h;
    uint32_t stack;
    uint16_t comm; /* communicator index (comm_off[]) */
    uint8_t kind;  /* SHP_COMM_* */
    uint8_t pad;
};
_Static_assert(sizeof(struct shp_rec_comm_end_c) == 40 &&
                   offsetof(struct shp_rec_comm_end_c, comm) == 36 &&
                   offsetof(struct shp_rec_comm_end_c, kind) == 38,
               "compact communicator end layout");

/* Datatypes, as NCCL numbers them (ncclInt8 = 0 ... ncclFloat8e5m2 = 11). */
#define SHP_DTYPE_COUNT 12
/* Reduction operations, as NCCL numbers them; premulsum and beyond are user-created. */
#define SHP_REDOP_NONE 255

/* SHP_REC_COLL and SHP_REC_P2P. */
struct shp_rec_coll {
    struct shp_ev ev;
    uint64_t comm;  /* communicator id */
    uint64_t seq;   /* COLL: index among this rank's collectives on comm;
                       P2P: index among this rank's sends (or receives) to (from) peer */
    uint64_t count; /* the count argument as passed */
    uint64_t sendbuf;
    uint64_t recvbuf;
    uint64_t stream;
    uint64_t graph;    /* capture id when captured, else 0 */
    int32_t root;      /* -1 when the op has none */
    int32_t peer;      /* -1 when the op has none */
    int32_t comm_rank; /* -1 if unknown */
    int32_t nranks;    /* -1 if unknown */
    uint8_t dtype;     /* NCCL datatype number */
    uint8_t redop;     /* NCCL reduction number, SHP_REDOP_NONE when the op has none */
    uint8_t pad[6];
};
_Static_assert(sizeof(struct shp_rec_coll) == 144, "coll layout");

/* Copy kinds, as cudaMemcpyKind numbers them (H2H 0, H2D 1, D2H 2, D2D 3, default 4). */
#define SHP_KIND_H2H 0
#define SHP_KIND_H2D 1
#define SHP_KIND_D2H 2
#define SHP_KIND_D2D 3
#define SHP_KIND_DEFAULT 4

/* SHP_REC_COPY: a 1-D copy has height 1 and pitches equal to width. */
struct shp_rec_copy {
    struct shp_ev ev;
    uint64_t dst;
    uint64_t src;
    uint64_t width;  /* bytes per row */
    uint64_t height; /* rows */
    uint64_t spitch;
    uint64_t dpitch;
    uint64_t stream;
    uint64_t graph;  /* capture id when captured, else 0 */
    int32_t src_dev; /* for peer copies, else -1 */
    int32_t dst_dev;
    uint8_t kind; /* SHP_KIND_*, resolved when the caller passed Default */
    uint8_t pad[7];
};
_Static_assert(sizeof(struct shp_rec_copy) == 144, "copy layout");

#define SHP_ALLOC_DEVICE 1
#define SHP_ALLOC_PINNED 2

/* SHP_REC_ALLOC: an allocation (the pointer is ev.out) or a free (op is a free; `ptr`). */
struct shp_rec_alloc {
    struct shp_ev ev;
    uint64_t ptr;
    uint64_t size;
    uint64_t stream;
    uint32_t flags;
    uint8_t kind; /* SHP_ALLOC_* */
    uint8_t pad[3];
};
_Static_assert(sizeof(struct shp_rec_alloc) == 96, "alloc layout");

/* SHP_REC_GRAPH: capture begin/end (the graph is ev.out), instantiate (the exec is ev.out),
 * launch. */
struct shp_rec_graph {
    struct shp_ev ev;
    uint64_t stream;
    uint64_t graph;   /* instantiate: the graph instantiated */
    uint64_t exec;    /* launch: the exec launched */
    uint64_t capture; /* capture id of begin/end capture */
    uint32_t flags;   /* capture mode or instantiate flags */
    uint32_t pad;
};
_Static_assert(sizeof(struct shp_rec_graph) == 104, "graph layout");

/* SHP_REC_GROUP uses struct shp_ev alone; op says start or end, ev.group the depth at entry. */

/* SHP_REC_STACK: a call stack, stored once; events refer to it by id. Frames are return
 * addresses (innermost first), symbolized offline with the module records. */
struct shp_rec_stack {
    struct shp_rec h;
    uint32_t id;
    uint32_t nframes;
    /* uint64_t frames[nframes]; */
};
_Static_assert(sizeof(struct shp_rec_stack) == 16, "stack layout");
#define SHP_STACK_MAX_FRAMES 64

/* SHP_REC_STACK_TAIL (version 4): a call stack whose innermost `nframes` frames follow, and whose
 * outer frames are those of stack `tail` (a SHP_REC_STACK or SHP_REC_STACK_TAIL stored before it,
 * with a smaller id) from its frame `from` on, innermost first: stacks of one program share their
 * outer frames (main, the interpreter, the framework's dispatch), which are stored once. The
 * whole stack has at most SHP_STACK_MAX_FRAMES frames. */
struct shp_rec_stack_tail {
    struct shp_rec h;
    uint32_t id;
    uint32_t nframes; /* its own frames, which follow (0 when the whole stack is the tail's) */
    uint32_t tail;    /* the stack its outer frames are taken from */
    uint32_t from;    /* the first of them in that stack's whole list */
    /* uint64_t frames[nframes]; */
};
_Static_assert(sizeof(struct shp_rec_stack_tail) == 24, "stack tail layout");
_Static_assert(offsetof(struct shp_rec_stack_tail, id) == offsetof(struct shp_rec_stack, id) &&
                   offsetof(struct shp_rec_stack_tail, nframes) ==
                       offsetof(struct shp_rec_stack, nframes),
               "a stack's id and frame count are read alike in both records");

/* SHP_REC_MODULE: a loaded object, for offline symbolization. */
struct shp_rec_module {
    struct shp_rec h;
    uint64_t base; /* load bias (dlpi_addr) */
    uint64_t lo;   /* lowest mapped address of its PT_LOAD segments */
    uint64_t hi;   /* end of the highest */
    uint8_t build_id_len;
    uint8_t pad[5];
    uint16_t path_len; /* bytes of path that follow build_id, without NUL */
    uint8_t build_id[32];
    /* char path[path_len], then zero padding to a multiple of 8 */
};
_Static_assert(sizeof(struct shp_rec_module) == 72, "module layout");

/* SHP_REC_MODULE_C (version 6): a module record in fewer bytes: its range as 32-bit offsets from
 * its base, its build id in its own length. No 8-byte field, so that the fixed part is 28 bytes;
 * the record, padded with zeros, is still a multiple of 8. */
struct shp_rec_module_c {
    struct shp_rec h;
    uint32_t base_lo, base_hi; /* load bias (dlpi_addr), low and high halves */
    uint32_t lo_off;           /* lowest mapped address of its PT_LOAD segments, less base */
    uint32_t len;              /* end of the highest, less that lowest address */
    uint16_t path_len;         /* bytes of path that follow the build id, without NUL */
    uint8_t build_id_len;      /* at most 32 */
    uint8_t pad;
    /* uint8_t build_id[build_id_len], char path[path_len], then zero padding to a multiple of 8 */
};
_Static_assert(sizeof(struct shp_rec_module_c) == 28, "compact module layout");

/* SHP_REC_MARK: a text a user attached to the timeline (shapetrace attach --mark). */
struct shp_rec_mark {
    struct shp_rec h;
    uint64_t t_ns; /* CLOCK_MONOTONIC nanoseconds, whatever the header's clock (a tool writes it) */
    char text[128]; /* NUL-terminated */
};
_Static_assert(sizeof(struct shp_rec_mark) == 144, "mark layout");

/* Python call sites (SHAPETRACE_STACKS=python). An event's `stack` id then names either a
 * SHP_REC_STACK (no Python frames on that thread at that moment) or a SHP_REC_PYSTACK: one id
 * space for both, so that a reader that finds a PYSTACK id knows the call had Python frames. A
 * PYSTACK holds the id of the native stack plus (code, instruction offset) pairs; each code
 * object's names and line table are stored once in a PYCODE record, and the line is computed
 * offline (computing it at record time would walk the line table on every call). */

/* SHP_REC_PYINFO: the interpreter, once per trace before the first PYSTACK. Native return
 * addresses in [eval_lo, eval_hi) are _PyEval_EvalFrameDefault calls: each ran the Python frames
 * of one group (see SHP_PYFRAME_ENTRY), and a reader shows that group in its place. The other
 * frames in [interp_lo, interp_hi) (libpython, or a python executable that links it statically)
 * in the same unbroken run are the interpreter's own plumbing: the run's groups replace it. */
struct shp_rec_pyinfo {
    struct shp_rec h;
    uint32_t py_version; /* PY_VERSION_HEX of the interpreter, e.g. 0x030b07f0 */
    uint32_t flags;      /* 0 */
    uint64_t eval_lo, eval_hi;
    uint64_t interp_lo, interp_hi;
};
_Static_assert(sizeof(struct shp_rec_pyinfo) == 48, "pyinfo layout");

/* SHP_REC_PYCODE: one code object, stored the first time a stack holds it. A code object that
 * takes the address of a freed one gets a record of its own: the writer's key covers, beyond the
 * address, those of its names and line table, its names' hashes, first line and size. */
struct shp_rec_pycode {
    struct shp_rec h;
    uint32_t id;            /* referred to by shp_pyframe.code; ids start at 1 */
    uint32_t py_version;    /* PY_VERSION_HEX: the line table's format (3.10: PEP 626 pairs;
                               3.11 and later: the location table of Objects/locations.md) */
    int32_t firstlineno;    /* co_firstlineno */
    uint16_t name_len;      /* co_name, UTF-8, no NUL */
    uint16_t qualname_len;  /* co_qualname (3.11+; 0 on 3.10) */
    uint16_t filename_len;  /* co_filename */
    uint16_t flags;         /* SHP_PYCODE_* */
    uint32_t linetable_len; /* bytes of co_linetable copied */
    /* char name[], qualname[], filename[]; uint8_t linetable[]; zero padding to 8 */
};
_Static_assert(sizeof(struct shp_rec_pycode) == 32, "pycode layout");
#define SHP_PYCODE_LINETABLE_CUT 0x1u /* the line table was longer than what was copied */

/* One Python frame. `lasti` is the byte offset of the instruction the frame is executing (the
 * call that led here), from the start of the code's bytecode, as PyCode_Addr2Line takes it. */
struct shp_pyframe {
    uint32_t code;  /* PYCODE id; 0 if the code record could not be stored */
    uint32_t lasti; /* offset | SHP_PYFRAME_ENTRY, or SHP_PYFRAME_NO_OFFSET */
};
_Static_assert(sizeof(struct shp_pyframe) == 8, "pyframe layout");
/* In lasti: the outermost frame of the group that one native _PyEval_EvalFrameDefault call ran
 * (on 3.10, every frame). */
#define SHP_PYFRAME_ENTRY 0x80000000u
/* lasti of a frame not started yet: its line is co_firstlineno. */
#define SHP_PYFRAME_NO_OFFSET 0x7fffffffu
#define SHP_PYFRAME_OFFSET(lasti) ((lasti) & ~SHP_PYFRAME_ENTRY)

/* SHP_REC_PYSTACK: a call's Python frames, innermost first, and its native stack. */
struct shp_rec_pystack {
    struct shp_rec h;
    uint32_t id;      /* in the SHP_REC_STACK id space: what events' `stack` refers to */
    uint32_t native;  /* SHP_REC_STACK id of the same call's native frames; 0 if none */
    uint32_t nframes; /* at most SHP_PYSTACK_MAX_FRAMES */
    uint32_t flags;   /* SHP_PYSTACK_* */
    /* struct shp_pyframe frames[nframes]; */
};
_Static_assert(sizeof(struct shp_rec_pystack) == 24, "pystack layout");
#define SHP_PYSTACK_MAX_FRAMES 64
/* Flags: more frames than SHP_PYSTACK_MAX_FRAMES; the outermost ones are not stored. */
#define SHP_PYSTACK_TRUNCATED 0x1u

/* SHP_REC_VALUE (version 3): the fingerprint (include/shapetrace/values.h) of the bytes a call
 * produced: a collective's receive buffer, or the bytes a copy moved. Written right after its
 * call returns, by the calling thread, so that it follows its call closely in the file; `fp` and
 * `status` are completed when the fingerprint has been read back (a kernel on the call's stream,
 * read without synchronizing it), `status` last, and are not covered by `check`
 * (SHP_ROLE_LATE). A record still SHP_VALUE_PENDING was never read back: the process ended
 * first (killed, or exited without running its exit handlers). */
struct shp_rec_value {
    struct shp_rec h;
    uint64_t t;     /* when the fingerprint was asked for, in the header's clock */
    uint64_t call;  /* file offset of the call's record */
    uint64_t comm;  /* collectives: the communicator's id; copies: that of the last collective
                       the process issued before the copy; 0 if none */
    uint64_t seq;   /* collectives: the call's seq; copies: that last collective's; UINT64_MAX
                       if none */
    uint64_t occ;   /* copies: how many copies from this site came before (every one counted,
                       fingerprinted or not); collectives: 0 */
    uint64_t bytes; /* bytes fingerprinted */
    uint64_t site;  /* copies: a hash of the call site that every process running the same code
                       computes alike (its frames' names, files and offsets; not addresses);
                       collectives: 0 */
    uint32_t stack; /* the call's stack id, 0 if none */
    uint16_t op;    /* the call's op (enum shp_op) */
    uint8_t what;   /* SHP_VALUE_OUTPUT or SHP_VALUE_COPIED */
    uint8_t how;    /* SHP_VALUE_DEVICE (a kernel after the call) or SHP_VALUE_HOST */
    /* completed later */
    uint64_t fp;     /* the fingerprint, once status is SHP_VALUE_DONE */
    uint32_t status; /* SHP_VALUE_*, stored last */
    uint32_t pad;
};
_Static_assert(sizeof(struct shp_rec_value) == 88, "value layout");
#define SHP_VALUE_LATE_BYTES 16 /* fp, status, pad: completed after the record is published */
/* what */
#define SHP_VALUE_OUTPUT 1 /* the receive buffer of an all-reduce, all-gather or broadcast */
#define SHP_VALUE_COPIED 2 /* the bytes a copy moved */
/* how */
#define SHP_VALUE_DEVICE 1 /* a kernel on the call's stream, right after it */
#define SHP_VALUE_HOST 2   /* on the host as the call returned (a synchronous copy) */
/* status */
#define SHP_VALUE_PENDING 0 /* asked for, not read back */
#define SHP_VALUE_DONE 1    /* fp holds the fingerprint */
#define SHP_VALUE_CAPTURED                                                                         \
    2                    /* skipped: the call was captured into a CUDA graph (it ran nothing)      \
                          */
#define SHP_VALUE_BUSY 3 /* skipped: every slot for fingerprints in flight was taken */
#define SHP_VALUE_LOST 4 /* not read back: fingerprints were switched off after an error */

/* Every record type, once: X(name, number, min_size, role, as).
 *   number    stored in each record's first word: never renumber one
 *   min_size  the record's size when it has no variable part; else the size of its fixed part
 *   role      SHP_ROLE_CALL: starts with struct shp_ev, completed after the call (see `check`);
 *             SHP_ROLE_META: bookkeeping that later records cannot be read without, allowed in
 *             the reserve beyond the cap (header `cap`); SHP_ROLE_VAR: a variable part follows;
 *             SHP_ROLE_COMPACT: starts with struct shp_head, completed by its `done` word;
 *             SHP_ROLE_LATE: its last SHP_VALUE_LATE_BYTES are completed after it is published;
 *             SHP_ROLE_OUT (with SHP_ROLE_COMPACT): the word after `done` is completed too
 *   as        the type a reader reports it as: a compact record's full type, else its own */
#define SHP_ROLE_CALL 0x1u
#define SHP_ROLE_META 0x2u
#define SHP_ROLE_VAR 0x4u
#define SHP_ROLE_COMPACT 0x8u
#define SHP_ROLE_LATE 0x10u
#define SHP_ROLE_OUT 0x20u
/* clang-format off */
#define SHP_REC_TYPES(X) \
    X(RESERVED, 0, 8, 0, 0) /* space reserved by a writer that had not published it yet */ \
    X(COMM, 1, sizeof(struct shp_rec_comm), SHP_ROLE_CALL | SHP_ROLE_META, 1) \
    X(COLL, 2, sizeof(struct shp_rec_coll), SHP_ROLE_CALL, 2) \
    X(P2P, 3, sizeof(struct shp_rec_coll), SHP_ROLE_CALL, 3) \
    X(GROUP, 4, sizeof(struct shp_ev), SHP_ROLE_CALL, 4) \
    X(COPY, 5, sizeof(struct shp_rec_copy), SHP_ROLE_CALL, 5) \
    X(ALLOC, 6, sizeof(struct shp_rec_alloc), SHP_ROLE_CALL, 6) \
    X(GRAPH, 7, sizeof(struct shp_rec_graph), SHP_ROLE_CALL, 7) \
    X(STACK, 8, sizeof(struct shp_rec_stack), SHP_ROLE_META | SHP_ROLE_VAR, 8) \
    X(MODULE, 9, sizeof(struct shp_rec_module), SHP_ROLE_META | SHP_ROLE_VAR, 9) \
    X(MARK, 10, sizeof(struct shp_rec_mark), SHP_ROLE_META, 10) \
    X(PYINFO, 11, sizeof(struct shp_rec_pyinfo), SHP_ROLE_META, 11) \
    X(PYCODE, 12, sizeof(struct shp_rec_pycode), SHP_ROLE_META | SHP_ROLE_VAR, 12) \
    X(PYSTACK, 13, sizeof(struct shp_rec_pystack), SHP_ROLE_META | SHP_ROLE_VAR, 13) \
    X(COPY_C, 14, sizeof(struct shp_rec_copy_c), SHP_ROLE_COMPACT, 5) \
    X(COLL_C, 15, sizeof(struct shp_rec_coll_c), SHP_ROLE_COMPACT, 2) \
    X(P2P_C, 16, sizeof(struct shp_rec_coll_c), SHP_ROLE_COMPACT, 3) \
    X(LAUNCH_C, 17, sizeof(struct shp_rec_launch_c), SHP_ROLE_COMPACT, 7) \
    X(VALUE, 18, sizeof(struct shp_rec_value), SHP_ROLE_LATE, 18) \
    X(COPY2D_C, 19, sizeof(struct shp_rec_copy2d_c), SHP_ROLE_COMPACT, 5) \
    X(STACK_TAIL, 20, sizeof(struct shp_rec_stack_tail), SHP_ROLE_META | SHP_ROLE_VAR, 20) \
    X(COMM_END_C, 21, sizeof(struct shp_rec_comm_end_c), SHP_ROLE_COMPACT, 1) \
    X(ALLOC_C, 22, sizeof(struct shp_rec_alloc_c), SHP_ROLE_COMPACT | SHP_ROLE_OUT, 6) \
    X(MODULE_C, 23, sizeof(struct shp_rec_module_c), SHP_ROLE_META | SHP_ROLE_VAR, 23)
/* clang-format on */

enum shp_rec_type {
#define SHP_X_REC_ENUM(name, num, min, role, as) SHP_REC_##name = num,
    SHP_REC_TYPES(SHP_X_REC_ENUM)
#undef SHP_X_REC_ENUM
        SHP_REC_TYPE_COUNT
};
#define SHP_X_REC_DENSE(name, num, min, role, as) +1
_Static_assert(SHP_REC_TYPE_COUNT == 0 SHP_REC_TYPES(SHP_X_REC_DENSE),
               "record types numbered densely");
#undef SHP_X_REC_DENSE

/* What the list says of a record type: its minimum size (its exact size unless SHP_ROLE_VAR), its
 * role bits (SHP_ROLE_*), the type it is read as, and the bytes [skip_lo, skip_hi) that are
 * completed after the record is published, which `check` leaves out (none: 0, 0); all 0 for an
 * unknown type. */
struct shp_rec_info {
    size_t min_size;
    unsigned role;
    unsigned as;
    unsigned skip_lo, skip_hi;
};

/* The completed-later bytes by role: [32, 64) of a full call record, `done` of a compact one
 * (and the word after it: SHP_ROLE_OUT), the last SHP_VALUE_LATE_BYTES of a SHP_ROLE_LATE one (of a
 * fixed size). */
#define SHP_REC_SKIP_LO(role, min)                                                                 \
    ((role)&SHP_ROLE_CALL      ? SHP_EV_CHECK_SKIP_LO                                              \
     : (role)&SHP_ROLE_COMPACT ? SHP_CHECK_SKIP_DONE                                               \
     : (role)&SHP_ROLE_LATE    ? (min)-SHP_VALUE_LATE_BYTES                                        \
                               : 0)
#define SHP_REC_SKIP_HI(role, min)                                                                 \
    ((role)&SHP_ROLE_CALL      ? SHP_EV_CHECK_SKIP_HI                                              \
     : (role)&SHP_ROLE_OUT     ? SHP_CHECK_SKIP_OUT                                                \
     : (role)&SHP_ROLE_COMPACT ? SHP_CHECK_SKIP_DONE + 8                                           \
     : (role)&SHP_ROLE_LATE    ? (min)                                                             \
                               : 0)

/* The list as a table indexed by type (a lookup: the switch it replaces was 5% of analyze's
 * instructions). */
static const struct shp_rec_info shp_rec_table[] = {
#define SHP_X_REC_INFO(name, num, min, role, as)                                                   \
    [num] = {min, role, as, SHP_REC_SKIP_LO(role, min), SHP_REC_SKIP_HI(role, min)},
    SHP_REC_TYPES(SHP_X_REC_INFO)
#undef SHP_X_REC_INFO
};

static inline struct shp_rec_info shp_rec_info(unsigned type)
{
    if (type < sizeof(shp_rec_table) / sizeof(shp_rec_table[0]))
        return shp_rec_table[type];
    return (struct shp_rec_info){0, 0, 0, 0, 0};
}

static inline unsigned shp_rec_role(unsigned type)
{
    return shp_rec_info(type).role;
}

static inline size_t shp_rec_min_size(unsigned type)
{
    return shp_rec_info(type).min_size;
}

/* The type a reader reports a record of `type` as (a compact record's full type); 0 if unknown. */
static inline unsigned shp_rec_as(unsigned type)
{
    return shp_rec_info(type).as;
}

/* True for record types that start with struct shp_ev. */
static inline int shp_rec_is_call(unsigned type)
{
    return (shp_rec_role(type) & SHP_ROLE_CALL) != 0;
}

/* What a module record (SHP_REC_MODULE or SHP_REC_MODULE_C) of `size` bytes says; false when it
 * says more than it holds (its path or build id past its end, a build id over 32 bytes). */
struct shp_module_view {
    uint64_t base, lo, hi;
    const uint8_t *build_id;
    unsigned build_id_len;
    const char *path;
    size_t path_len;
};
static inline int shp_module_view(const void *rec, unsigned type, size_t size,
                                  struct shp_module_view *v)
{
    if (type == SHP_REC_MODULE) {
        const struct shp_rec_module *m = (const struct shp_rec_module *)rec;
        if (size < sizeof(*m) || m->path_len > size - sizeof(*m) ||
            m->build_id_len > sizeof(m->build_id))
            return 0;
        v->base = m->base;
        v->lo = m->lo;
        v->hi = m->hi;
        v->build_id = m->build_id;
        v->build_id_len = m->build_id_len;
        v->path = (const char *)(m + 1);
        v->path_len = m->path_len;
        return 1;
    }
    const struct shp_rec_module_c *m = (const struct shp_rec_module_c *)rec;
    if (type != SHP_REC_MODULE_C || size < sizeof(*m) || m->build_id_len > 32 ||
        (size_t)m->build_id_len + m->path_len > size - sizeof(*m))
        return 0;
    v->base = (uint64_t)m->base_hi << 32 | m->base_lo;
    v->lo = v->base + m->lo_off;
    v->hi = v->lo + m->len;
    v->build_id = (const uint8_t *)(m + 1);
    v->build_id_len = m->build_id_len;
    v->path = (const char *)(m + 1) + m->build_id_len;
    v->path_len = m->path_len;
    return 1;
}

/* The ids' mixer (a 64-bit finalizer). Communicator ids are built with it, and a reader that
 * derives one (a split child's, see env.h) must mix exactly the same way. */
static inline uint64_t shp_mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* The check stored in shp_rec.check: a Fletcher-style pair of additive sums over the record's
 * 8-byte words after the first, leaving out what a record completes after it is published (bytes
 * [32, 64) of a full call record, `done` of a compact one and the word after it of a SHP_ROLE_OUT
 * one, the last SHP_VALUE_LATE_BYTES of a SHP_ROLE_LATE one). Additive (two adds a word, no
 * multiply chain to wait on) and still position-dependent: a torn record (words left zero, or from
 * an older record) or a damaged word changes it. Inline so that writer and reader compute exactly
 * the same thing. */
static inline uint32_t shp_rec_check(const void *rec, unsigned type, size_t size)
{
    const unsigned char *p = (const unsigned char *)rec;
    struct shp_rec_info ri = shp_rec_info(type);
    size_t lo = ri.skip_lo, hi = ri.skip_hi;
    uint64_t a = 0x9e3779b97f4a7c15ull ^ size ^ ((uint64_t)type << 40), b = a;
    for (size_t i = 8; i < size; i += 8) {
        uint64_t w;
        if (i >= lo && i < hi)
            continue;
        __builtin_memcpy(&w, p + i, 8);
        a += w;
        b += a;
    }
    uint64_t h = (a ^ (b << 17 | b >> 47)) * 0xff51afd7ed558ccdull;
    return (uint32_t)(h ^ (h >> 32)) | 1u; /* never 0: a zero check marks an unwritten record */
}

#endif
