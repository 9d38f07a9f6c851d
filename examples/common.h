/* shapetrace examples: what every example shares. Ranks come from the launcher's environment
 * (torchrun's names: RANK, WORLD_SIZE, LOCAL_RANK) and meet through a unique id passed in a file
 * (uid_exchange.h), so the same program runs on the test doubles and on real NCCL and CUDA. */
#ifndef SHAPETRACE_EXAMPLES_COMMON_H
#define SHAPETRACE_EXAMPLES_COMMON_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/doubles/uid_exchange.h"

#define EX_CHECK(x)                                                                                \
    do {                                                                                           \
        long ex_rc_ = (long)(x);                                                                   \
        if (ex_rc_ != 0) {                                                                         \
            fprintf(stderr, "rank %d: %s:%d: %s returned %ld\n", ex_rank(), __FILE__, __LINE__,    \
                    #x, ex_rc_);                                                                   \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

static inline int ex_env(const char *name, int dflt)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

static inline int ex_rank(void)
{
    return ex_env("RANK", 0);
}

static inline int ex_world(void)
{
    return ex_env("WORLD_SIZE", 1);
}

/* The world communicator, on this rank's device. */
static inline ncclComm_t ex_world_comm(void)
{
    ncclUniqueId id;
    ncclComm_t comm;
    EX_CHECK(cudaSetDevice(ex_env("LOCAL_RANK", 0)));
    EX_CHECK(shp_uid_exchange(&id, ex_rank()));
    EX_CHECK(ncclCommInitRank(&comm, ex_world(), id, ex_rank()));
    return comm;
}

/* bf16 from a float, rounding to nearest even; and back. */
static inline uint16_t ex_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline float ex_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
