/* shapetrace: per-op facts shared by the preload and the tools, from the one call list. */
#ifndef SHAPETRACE_OPS_H
#define SHAPETRACE_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "include/shapetrace/calls.h"
#include "include/shapetrace/trace.h"

/* The API name of an op ("ncclAllGather"), "?" for an unknown number. */
const char *shp_op_name(unsigned op);

/* The tables of the call list's columns, by op number (ops.c), for the inline look-ups below:
 * the analyzer's readers ask them of every record. */
extern const int shp_op_classes[SHP_OP_COUNT];
extern const unsigned char shp_op_elem_rules[SHP_OP_COUNT][2]; /* send, recv: SHP_SIZE_* */
extern const unsigned char shp_op_roots[SHP_OP_COUNT];

/* The op's SHP_CLS_* class, 0 for an unknown number. */
static inline int shp_op_class(unsigned op)
{
    return op < SHP_OP_COUNT ? shp_op_classes[op] : 0;
}

/* The op's library (SHP_LIB_*, the call list's lib column), -1 for an unknown number. */
int shp_op_lib(unsigned op);

/* The op number for an exact API name, SHP_OP_NONE if it is not in the list. */
unsigned shp_op_lookup(const char *name);

/* Bytes of one element of each NCCL datatype (ops.c), for the inline look-up below. */
extern const unsigned char shp_dtype_sizes[SHP_DTYPE_COUNT];

/* Bytes of one element of NCCL datatype number `dtype`, 0 if unknown. Inline: the analyzer's
 * readers ask it of every collective they decode and every region lineage writes. */
static inline unsigned shp_dtype_size(unsigned dtype)
{
    return dtype < SHP_DTYPE_COUNT ? shp_dtype_sizes[dtype] : 0;
}

/* The dump name of a datatype ("bf16") or reduction ("sum"); "?" if unknown. */
const char *shp_dtype_name(unsigned dtype);
const char *shp_redop_name(unsigned redop);

/* Elements a rank sends and receives for a collective or p2p op given its count argument and the
 * communicator size (the call list's send and recv facts, NCCL's rule for each op: all-gather
 * receives count x nranks, reduce-scatter sends count x nranks, ...). Both 0 for ops that are
 * not collectives or p2p, and for unknown numbers. */
static inline void shp_op_elems(unsigned op, uint64_t count, int nranks, uint64_t *send,
                                uint64_t *recv)
{
    uint64_t n = nranks > 0 ? (uint64_t)nranks : 1;
    const unsigned char *r = shp_op_elem_rules[op < SHP_OP_COUNT ? op : 0];
    *send = r[0] == SHP_SIZE_ONE ? count : r[0] == SHP_SIZE_ALL ? count * n : 0;
    *recv = r[1] == SHP_SIZE_ONE ? count : r[1] == SHP_SIZE_ALL ? count * n : 0;
}

/* The op's root fact: SHP_ROOT_SENDS (only the root's send buffer is read), SHP_ROOT_RECVS
 * (only the root's receive buffer is written), SHP_ROOT_NONE (no root, or an unknown number). */
static inline int shp_op_root(unsigned op)
{
    return op < SHP_OP_COUNT ? shp_op_roots[op] : SHP_ROOT_NONE;
}

/* True if the op takes a reduction (the redop fact). */
bool shp_op_redop(unsigned op);

/* The op that `op` is one operation with for its peers: its alias (ncclBroadcast for ncclBcast),
 * else op itself, unknown numbers included. */
unsigned shp_op_same(unsigned op);

/* The driver entry point that cuGetProcAddress answers for `base` ("cuMemcpyHtoD") at
 * `cuda_version` in the per-thread or the legacy stream mode: the op of our wrapper for it, or
 * SHP_OP_NONE when base is not traced or the version predates the signature traced. */
unsigned shp_op_proc(const char *base, int cuda_version, bool per_thread);

/* A driver op's facts: its base name (NULL for an op not looked up by cuGetProcAddress, and then
 * since and mode are left alone), its since version and its SHP_PROC_* mode. */
const char *shp_op_proc_base(unsigned op, int *since, int *mode);

/* Dump names of copy kinds (SHP_KIND_*, "default" for an unresolved cudaMemcpyDefault) and of
 * communicator record kinds (SHP_COMM_*, "?" for 0). */
extern const char *const shp_kind_names[5];
extern const char *const shp_comm_kind_names[7];

#endif
