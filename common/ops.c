/* shapetrace: the per-op tables generated from the call list (names, classes, libraries and the
 * facts columns), and the compile-time checks that make a row fill its facts consistently. */
#include "common/ops.h"

#include <stdbool.h>
#include <string.h>

#include "include/shapetrace/trace.h"

#define SHP_X_NAME(num, lib, cls, name, facts, params, args, desc) [num] = #name,
static const char *const op_names[SHP_OP_COUNT] = {[SHP_OP_NONE] = "none", SHP_CALLS(SHP_X_NAME)};
#undef SHP_X_NAME

#define SHP_X_CLASS(num, lib, cls, name, facts, params, args, desc) [num] = cls,
const int shp_op_classes[SHP_OP_COUNT] = {SHP_CALLS(SHP_X_CLASS)};
#undef SHP_X_CLASS

#define SHP_X_LIB(num, lib, cls, name, facts, params, args, desc) [num] = SHP_LIB_##lib,
static const unsigned char op_libs[SHP_OP_COUNT] = {SHP_CALLS(SHP_X_LIB)};
#undef SHP_X_LIB

const char *const shp_kind_names[5] = {"H2H", "H2D", "D2H", "D2D", "default"};
const char *const shp_comm_kind_names[7] = {"?",        "init",    "split", "shrink",
                                            "finalize", "destroy", "abort"};

const char *shp_op_name(unsigned op)
{
    return op < SHP_OP_COUNT ? op_names[op] : "?";
}

int shp_op_lib(unsigned op)
{
    return op > SHP_OP_NONE && op < SHP_OP_COUNT ? op_libs[op] : -1;
}

unsigned shp_op_lookup(const char *name)
{
    for (unsigned op = 1; op < SHP_OP_COUNT; op++)
        if (!strcmp(op_names[op], name))
            return op;
    return SHP_OP_NONE;
}

const unsigned char shp_dtype_sizes[SHP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char *const dtype_names[SHP_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64",   "uint64",
    "fp16", "fp32",  "fp64",  "bf16",   "fp8e4m3", "fp8e5m2",
};
static const char *const redop_names[] = {"sum", "prod", "max", "min", "avg"};

const char *shp_dtype_name(unsigned dtype)
{
    return dtype < SHP_DTYPE_COUNT ? dtype_names[dtype] : "?";
}

const char *shp_redop_name(unsigned redop)
{
    if (redop < sizeof(redop_names) / sizeof(redop_names[0]))
        return redop_names[redop];
    /* NCCL numbers user-created operations (ncclRedOpCreatePreMulSum) from ncclNumOps on. */
    return redop == 255 ? "?" : "premulsum";
}

/* ---- the NCCL facts: (send, recv, root, redop, alias) ---- */

#define SHP_X_SIZE(num, lib, cls, name, facts, params, args, desc)                                 \
    [num] = {SHP_NCCL_SEND facts, SHP_NCCL_RECV facts},
const unsigned char shp_op_elem_rules[SHP_OP_COUNT][2] = {SHP_NCCL_CALLS(SHP_X_SIZE)};
#undef SHP_X_SIZE

#define SHP_X_ROOT(num, lib, cls, name, facts, params, args, desc) [num] = SHP_NCCL_ROOT facts,
const unsigned char shp_op_roots[SHP_OP_COUNT] = {SHP_NCCL_CALLS(SHP_X_ROOT)};
#undef SHP_X_ROOT

#define SHP_X_REDOP(num, lib, cls, name, facts, params, args, desc) [num] = SHP_NCCL_REDOP facts,
static const unsigned char op_redops[SHP_OP_COUNT] = {SHP_NCCL_CALLS(SHP_X_REDOP)};
#undef SHP_X_REDOP

#define SHP_X_ALIAS(num, lib, cls, name, facts, params, args, desc) [num] = SHP_NCCL_ALIAS facts,
static const unsigned char op_aliases[SHP_OP_COUNT] = {SHP_NCCL_CALLS(SHP_X_ALIAS)};
#undef SHP_X_ALIAS

/* clang-format off */
/* What a row must say for its class: a collective both sizes, a send or a receive its one
 * buffer's, anything else none; only a collective a root, a reduction or an alias. */
#define SHP_X_CHECK(num, lib, cls, name, facts, params, args, desc) \
    _Static_assert(cls != SHP_CLS_COLL || \
                   (SHP_NCCL_SEND facts != SHP_SIZE_NONE && SHP_NCCL_RECV facts != SHP_SIZE_NONE), \
                   #name ": a collective has a size rule for its send and its receive buffer"); \
    _Static_assert(cls != SHP_CLS_P2P || \
                   (SHP_NCCL_SEND facts == SHP_SIZE_NONE) != (SHP_NCCL_RECV facts == SHP_SIZE_NONE), \
                   #name ": a send or a receive has a size rule for its one buffer"); \
    _Static_assert(cls == SHP_CLS_COLL || cls == SHP_CLS_P2P || \
                   (SHP_NCCL_SEND facts == SHP_SIZE_NONE && SHP_NCCL_RECV facts == SHP_SIZE_NONE), \
                   #name ": only collectives, sends and receives have a size rule"); \
    _Static_assert(cls == SHP_CLS_COLL || \
                   (SHP_NCCL_ROOT facts == SHP_ROOT_NONE && SHP_NCCL_REDOP facts == SHP_RED_NONE && \
                    SHP_NCCL_ALIAS facts == SHP_OP_NONE), \
                   #name ": only a collective has a root, a reduction or an alias");
SHP_NCCL_CALLS(SHP_X_CHECK)
#undef SHP_X_CHECK

/* Each op's facts as one number (SIG) and its alias (ALIAS_OF), as constants named after the op,
 * so that a row's alias can be looked up by the name it gives. */
#define SHP_X_SIG(num, lib, cls, name, facts, params, args, desc) \
    SIG_##name = ((((cls) * 4 + SHP_NCCL_SEND facts) * 4 + SHP_NCCL_RECV facts) * 4 + \
                  SHP_NCCL_ROOT facts) * 2 + SHP_NCCL_REDOP facts, \
    ALIAS_OF_##name = SHP_NCCL_ALIAS facts,
enum { SIG_NONE = -1, ALIAS_OF_NONE = 0, SHP_NCCL_CALLS(SHP_X_SIG) }; /* 0: no alias */
#undef SHP_X_SIG

/* An alias names an op that is no alias itself, of the same class and facts. */
#define ALIAS_TOKEN(send, recv, root, redop, alias) alias
#define ALIAS_CHECK(name, alias) ALIAS_CHECK_(name, alias)
#define ALIAS_CHECK_(name, alias) \
    _Static_assert(!ALIAS_OF_##name || \
                   (!ALIAS_OF_##alias && SIG_##alias == SIG_##name), \
                   #name ": its alias " #alias " is an op of its own with the same class and facts");
#define SHP_X_ALIAS_CHECK(num, lib, cls, name, facts, params, args, desc) \
    ALIAS_CHECK(name, ALIAS_TOKEN facts)
SHP_NCCL_CALLS(SHP_X_ALIAS_CHECK)
#undef SHP_X_ALIAS_CHECK

/* Two collectives with the same facts are one operation, so one names the other as its alias: a
 * "duplicate case value" in this function is a collective whose facts another one has (both rows
 * are in the notes), and neither names the other. The function's name is what the error says. */
#define SHP_X_SIG_CASE(num, lib, cls, name, facts, params, args, desc) \
    case cls == SHP_CLS_COLL && !ALIAS_OF_##name ? SIG_##name : -(num):
static inline __attribute__((unused)) void collectives_alike_name_one_as_alias(int sig)
{
    switch (sig) {
    SHP_NCCL_CALLS(SHP_X_SIG_CASE)
        break;
    }
}
/* Each op number once (a "duplicate case value" in this function): the sum in calls.h misses a
 * number twice where another one is missing. */
#define SHP_X_NUM_CASE(num, lib, cls, name, facts, params, args, desc) case num:
static inline __attribute__((unused)) void op_numbers_are_used_once(int num)
{
    switch (num) {
    SHP_CALLS(SHP_X_NUM_CASE)
        break;
    }
}
#undef SHP_X_SIG_CASE
#undef SHP_X_NUM_CASE
/* clang-format on */

bool shp_op_redop(unsigned op)
{
    return op < SHP_OP_COUNT && op_redops[op];
}

unsigned shp_op_same(unsigned op)
{
    return op < SHP_OP_COUNT && op_aliases[op] ? op_aliases[op] : op;
}

/* ---- the driver facts: (base, since, mode) ---- */

static const struct proc_fact {
    const char *base;
    int since;
    int mode;
} proc_facts[SHP_OP_COUNT] = {
#define SHP_X_PROC(num, lib, cls, name, facts, params, args, desc)                                 \
    [num] = {SHP_CU_BASE facts, SHP_CU_SINCE facts, SHP_CU_MODE facts},
    SHP_CUDA_CALLS(SHP_X_PROC)
#undef SHP_X_PROC
};

/* clang-format off */
/* One entry point for each base and mode, at one `since`: a base's legacy and per-thread entry
 * points declare LEGACY_base and PER_THREAD_base (an entry point twice in a mode is a
 * redeclared enumerator), and each checks the other's (an undeclared one is missing). */
#define PROC_ENUM(base, since, mode) PROC_ENUM_##mode(base, since)
#define PROC_ENUM_LEGACY(base, since) LEGACY_##base = since,
#define PROC_ENUM_PER_THREAD(base, since) PER_THREAD_##base = since,
#define PROC_ENUM_BOTH(base, since) LEGACY_##base = since, PER_THREAD_##base = since,
#define SHP_X_PROC_ENUM(num, lib, cls, name, facts, params, args, desc) PROC_ENUM facts
enum { SHP_CUDA_CALLS(SHP_X_PROC_ENUM) };
#undef SHP_X_PROC_ENUM

#define PROC_PAIR(base, since, mode) PROC_PAIR_##mode(base, since)
#define PROC_PAIR_LEGACY(base, since) \
    _Static_assert(PER_THREAD_##base == (since), #base ": its per-thread entry point has its since");
#define PROC_PAIR_PER_THREAD(base, since) \
    _Static_assert(LEGACY_##base == (since), #base ": its legacy entry point has its since");
#define PROC_PAIR_BOTH(base, since)
#define SHP_X_PROC_PAIR(num, lib, cls, name, facts, params, args, desc) PROC_PAIR facts
SHP_CUDA_CALLS(SHP_X_PROC_PAIR)
#undef SHP_X_PROC_PAIR
/* clang-format on */

const char *shp_op_proc_base(unsigned op, int *since, int *mode)
{
    if (op >= SHP_OP_COUNT || !proc_facts[op].base)
        return NULL;
    *since = proc_facts[op].since;
    *mode = proc_facts[op].mode;
    return proc_facts[op].base;
}

unsigned shp_op_proc(const char *base, int cuda_version, bool per_thread)
{
    int bit = per_thread ? SHP_PROC_PER_THREAD : SHP_PROC_LEGACY;
    for (unsigned op = 1; op < SHP_OP_COUNT; op++) {
        const struct proc_fact *p = &proc_facts[op];
        if (p->base && (p->mode & bit) && !strcmp(p->base, base))
            return cuda_version < p->since ? SHP_OP_NONE : op;
    }
    return SHP_OP_NONE;
}
