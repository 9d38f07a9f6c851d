/* shapetrace: per-op facts shared by the preload and the tools, from the one call list. */
#ifndef SHAPETRACE_OPS_H
#define SHAPETRACE_OPS_H

#include <stdint.h>

#include "include/shapetrace/calls.h"

/* The API name of an op ("ncclAllGather"), "?" for an unknown number. */
const char *shp_op_name(unsigned op);

/* The op's SHP_CLS_* class, 0 for an unknown number. */
int shp_op_class(unsigned op);

/* The op's library (SHP_LIB_*, the call list's lib column), -1 for an unknown number. */
int shp_op_lib(unsigned op);

/* The op number for an exact API name, SHP_OP_NONE if it is not in the list. */
unsigned shp_op_lookup(const char *name);

/* Bytes of one element of NCCL datatype number `dtype`, 0 if unknown. */
unsigned shp_dtype_size(unsigned dtype);

/* The dump name of a datatype ("bf16") or reduction ("sum"); "?" if unknown. */
const char *shp_dtype_name(unsigned dtype);
const char *shp_redop_name(unsigned redop);

/* Elements a rank sends and receives for a collective or p2p op given its count argument and the
 * communicator size (NCCL's rule for each op: all-gather receives count x nranks, reduce-scatter
 * sends count x nranks, ...). Both 0 for ops that are not collectives or p2p. */
void shp_op_elems(unsigned op, uint64_t count, int nranks, uint64_t *send, uint64_t *recv);

/* Dump names of copy kinds (SHP_KIND_*, "default" for an unresolved cudaMemcpyDefault) and of
 * communicator record kinds (SHP_COMM_*, "?" for 0). */
extern const char *const shp_kind_names[5];
extern const char *const shp_comm_kind_names[7];

#endif
