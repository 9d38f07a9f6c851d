/* shapetrace: per-op facts shared by the preload and the tools, from the one call list. */
#ifndef SHAPETRACE_OPS_H
#define SHAPETRACE_OPS_H

#include <stdint.h>

#include "shapetrace/calls.h"

/* The API name of an op ("ncclAllGather"), "?" for an unknown number. */
const char *shp_op_name(unsigned op);

/* The op's SHP_CLS_* class, 0 for an unknown number. */
int shp_op_class(unsigned op);

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

#endif
