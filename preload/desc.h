/* shapetrace preload: the helpers that the call list's desc column is written with. A desc is
 * the preload's description of a call to its recorder (struct shp_desc, preload.h); the list in
 * include/shapetrace/calls.h names these, and only the preload's wrappers (wrap.h) expand them. */
#ifndef SHAPETRACE_DESC_H
#define SHAPETRACE_DESC_H

#include <stdint.h>

/* A runtime copy of n bytes from s to d, of kind k (cudaMemcpyKind) on stream st. */
#define SHP_COPY_DESC(d, s, n, k, st)                                                              \
    .a = (s), .b = (d), .width = (n), .height = 1, .spitch = (n), .dpitch = (n), .kind = (k),      \
    .stream = (st)
/* A 2-D copy: h rows of w bytes, rows dp bytes apart at d and sp bytes apart at s. */
#define SHP_COPY2D_DESC(d, dp, s, sp, w, h, k, st)                                                 \
    .a = (s), .b = (d), .width = (w), .height = (h), .spitch = (sp), .dpitch = (dp), .kind = (k),  \
    .stream = (st)
/* A copy between devices, which the runtime's peer calls name by number. */
#define SHP_PEER_DESC(d, dd, s, sd, n, st)                                                         \
    .a = (s), .b = (d), .width = (n), .height = 1, .spitch = (n), .dpitch = (n),                   \
    .kind = cudaMemcpyDeviceToDevice, .src_dev = (sd), .dst_dev = (dd), .stream = (st)

/* Driver copies: the direction is in the name, cuMemcpy and cuMemcpyAsync infer it (Default). */
#define SHP_CU_COPY_DESC(d, s, n, k, st)                                                           \
    SHP_COPY_DESC((const void *)(uintptr_t)(d), (const void *)(uintptr_t)(s), n, k, st)
/* A CUDA_MEMCPY2D: preload/cuda.c reads it (NULL-safe). */
#define SHP_CU_2D_DESC(p, st)                                                                      \
    .a = shp_cu2d_src(p), .b = shp_cu2d_dst(p), .width = (p) ? (p)->WidthInBytes : 0,              \
    .height = (p) ? (p)->Height : 0, .spitch = (p) ? (p)->srcPitch : 0,                            \
    .dpitch = (p) ? (p)->dstPitch : 0, .kind = shp_cu2d_kind(p), .stream = (st)
/* Peer copies name contexts, not device numbers: the devices stay unknown (-1). */
#define SHP_CU_PEER_DESC(d, s, n, st)                                                              \
    SHP_COPY_DESC((const void *)(uintptr_t)(d), (const void *)(uintptr_t)(s), n, 3, st)

#endif
