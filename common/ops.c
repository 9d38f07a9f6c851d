/* shapetrace: name and class tables generated from the call list. */
#include "common/ops.h"

#include <string.h>

#include "include/shapetrace/trace.h"

#define SHP_X_NAME(num, lib, cls, name, params, args, desc) [num] = #name,
static const char *const op_names[SHP_OP_COUNT] = {[SHP_OP_NONE] = "none", SHP_CALLS(SHP_X_NAME)};
#undef SHP_X_NAME

#define SHP_X_CLASS(num, lib, cls, name, params, args, desc) [num] = cls,
static const int op_classes[SHP_OP_COUNT] = {SHP_CALLS(SHP_X_CLASS)};
#undef SHP_X_CLASS

#define SHP_X_LIB(num, lib, cls, name, params, args, desc) [num] = SHP_LIB_##lib,
static const unsigned char op_libs[SHP_OP_COUNT] = {SHP_CALLS(SHP_X_LIB)};
#undef SHP_X_LIB

const char *const shp_kind_names[5] = {"H2H", "H2D", "D2H", "D2D", "default"};
const char *const shp_comm_kind_names[7] = {"?",        "init",    "split", "shrink",
                                            "finalize", "destroy", "abort"};

const char *shp_op_name(unsigned op)
{
    return op < SHP_OP_COUNT ? op_names[op] : "?";
}

int shp_op_class(unsigned op)
{
    return op < SHP_OP_COUNT ? op_classes[op] : 0;
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

static const unsigned char dtype_sizes[SHP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char *const dtype_names[SHP_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64",   "uint64",
    "fp16", "fp32",  "fp64",  "bf16",   "fp8e4m3", "fp8e5m2",
};
static const char *const redop_names[] = {"sum", "prod", "max", "min", "avg"};

unsigned shp_dtype_size(unsigned dtype)
{
    return dtype < SHP_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

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

/* How each op's send and receive sizes follow from its count: factor of nranks or not. */
enum { ONE = 1, ALL = 2 };
static const unsigned char elem_rule[SHP_OP_COUNT][2] = {
    [SHP_OP_ncclAllReduce] = {ONE, ONE}, [SHP_OP_ncclBroadcast] = {ONE, ONE},
    [SHP_OP_ncclBcast] = {ONE, ONE},     [SHP_OP_ncclReduce] = {ONE, ONE},
    [SHP_OP_ncclAllGather] = {ONE, ALL}, [SHP_OP_ncclReduceScatter] = {ALL, ONE},
    [SHP_OP_ncclAlltoAll] = {ALL, ALL},  [SHP_OP_ncclGather] = {ONE, ALL},
    [SHP_OP_ncclScatter] = {ALL, ONE},   [SHP_OP_ncclSend] = {ONE, 0},
    [SHP_OP_ncclRecv] = {0, ONE},
};

void shp_op_elems(unsigned op, uint64_t count, int nranks, uint64_t *send, uint64_t *recv)
{
    uint64_t n = nranks > 0 ? (uint64_t)nranks : 1;
    const unsigned char *r = op < SHP_OP_COUNT ? elem_rule[op] : elem_rule[0];
    *send = r[0] == ONE ? count : r[0] == ALL ? count * n : 0;
    *recv = r[1] == ONE ? count : r[1] == ALL ? count * n : 0;
}
