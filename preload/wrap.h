/* shapetrace preload: the generated wrapper. One body for every function of the call list; a
 * function needing more than the body gives it through its class (record.c), not its own code.
 *
 * Each function gets SHP_SLOTS copies: the exported one (slot 0, reached by symbol binding) and
 * hidden ones that the dlsym hook hands out for libraries looked up by handle (resolve.c). */
#ifndef SHAPETRACE_WRAP_H
#define SHAPETRACE_WRAP_H

#include "preload/desc.h"
#include "preload/preload.h"

#define SHP_UNPAREN(...) __VA_ARGS__

#define SHP_RET_NCCL ncclResult_t
#define SHP_RET_CUDART cudaError_t
#define SHP_RET_CUDA CUresult
/* What a wrapper returns when the real function cannot be found. */
#define SHP_ERR_NCCL ncclSystemError
#define SHP_ERR_CUDART cudaErrorSharedObjectSymbolNotFound
/* "named symbol not found" says what happened; CUDA_ERROR_NOT_INITIALIZED would send a caller to
 * cuInit, which cannot help. */
#define SHP_ERR_CUDA CUDA_ERROR_NOT_FOUND
/* Calls that are a library's own business wherever they run: the driver calls of NCCL and of a
 * shared runtime, made on their own threads and in functions we do not trace as well as inside
 * traced calls (where the guard already keeps them out). */
#define SHP_FOREIGN_NCCL(pc) 0
#define SHP_FOREIGN_CUDART(pc) 0
#define SHP_FOREIGN_CUDA(pc) shp_called_from_library(pc)
/* The address SHP_FOREIGN_* tests, for the count of calls lost while tracing is off. */
#define SHP_CALLER_NCCL NULL
#define SHP_CALLER_CUDART NULL
#define SHP_CALLER_CUDA __builtin_return_address(0)

/* The real function, called with the guard held: what it calls of ours passes straight through,
 * so that only the outermost intercepted call of a thread is recorded (NCCL's ncclBcast calls
 * ncclBroadcast through its exported symbol; NCCL and the runtime make copies and allocations
 * of their own). errno and the result are the real function's. */
#define SHP_CALL_REAL(r, real, args)                                                               \
    do {                                                                                           \
        shp_guard++;                                                                               \
        (r) = real args;                                                                           \
        shp_guard--;                                                                               \
    } while (0)

/* The recording half: out of line, so that the exported wrapper stays a few loads and a jump
 * when nothing is recorded (inside our own code or another intercepted call). */
#define SHP_RECORD(slot_, lib, cls_, name, params, args, desc)                                     \
    static __attribute__((noinline)) SHP_RET_##lib name##_rec##slot_ params                        \
    {                                                                                              \
        name##_fn real = (name##_fn)shp_real(SHP_OP_##name, slot_);                                \
        shp_site_hint.sp = (uintptr_t)__builtin_frame_address(0);                                  \
        struct shp_call c; /* the description whole, the recorder's part left to shp_enter */      \
        c.d =                                                                                      \
            (struct shp_desc){.op = SHP_OP_##name, .cls = cls_, .slot = slot_, SHP_UNPAREN desc};  \
        SHP_RET_##lib r;                                                                           \
        shp_enter_cls(&c, cls_);                                                                   \
        SHP_CALL_REAL(r, real, args);                                                              \
        shp_leave(&c, (int)r);                                                                     \
        return r;                                                                                  \
    }

/* The wrapper proper. While dormant, a call that is not kept calls the real function here, with
 * the guard held all the same (an unrecorded call is still the outermost one); after it, a
 * collective or p2p call counts its seq (none if NCCL refused it) and a group call its depth,
 * from the description built here of which only the communicator and the peer are used (the
 * compiler drops the rest). */
#define SHP_BODY(slot_, lib, cls_, name, args, desc)                                               \
    {                                                                                              \
        name##_fn real = (name##_fn)shp_real(SHP_OP_##name, slot_);                                \
        if (__builtin_expect(!real, 0))                                                            \
            return (SHP_RET_##lib)shp_missing(SHP_OP_##name, SHP_ERR_##lib);                       \
        if (!shp_active(SHP_CALLER_##lib))                                                         \
            return real args;                                                                      \
        if (SHP_FOREIGN_##lib(__builtin_return_address(0))) {                                      \
            SHP_RET_##lib r;                                                                       \
            SHP_CALL_REAL(r, real, args);                                                          \
            return r;                                                                              \
        }                                                                                          \
        if (!shp_kept_dormant(cls_) && __builtin_expect(!shp_armed(), 0)) {                        \
            SHP_RET_##lib r;                                                                       \
            SHP_CALL_REAL(r, real, args);                                                          \
            if (cls_ == SHP_CLS_COLL || cls_ == SHP_CLS_P2P) {                                     \
                struct shp_desc d_ = {SHP_UNPAREN desc};                                           \
                shp_dormant_count(SHP_OP_##name, cls_, slot_, d_.comm, d_.peer, (int)r);           \
            }                                                                                      \
            if (cls_ == SHP_CLS_GROUP)                                                             \
                shp_dormant_group(SHP_OP_##name, (int)r);                                          \
            return r;                                                                              \
        }                                                                                          \
        shp_site_hint.pc = (uintptr_t)__builtin_return_address(0);                                 \
        return name##_rec##slot_ args;                                                             \
    }

/* Types and prototypes: the compiler checks each against the library's own declaration. */
#define SHP_DECLARE(num, lib, cls, name, facts, params, args, desc)                                \
    typedef SHP_RET_##lib(*name##_fn) params;                                                      \
    __attribute__((visibility("default"))) SHP_RET_##lib name params;

/* clang-format off */
#define SHP_DEFINE(num, lib, cls, name, facts, params, args, desc)                                      \
    SHP_RECORD(0, lib, cls, name, params, args, desc)                                              \
    SHP_RECORD(1, lib, cls, name, params, args, desc)                                              \
    SHP_RECORD(2, lib, cls, name, params, args, desc)                                              \
    SHP_RECORD(3, lib, cls, name, params, args, desc)                                              \
    SHP_RET_##lib name params SHP_BODY(0, lib, cls, name, args, desc)                              \
    static SHP_RET_##lib name##_s1 params SHP_BODY(1, lib, cls, name, args, desc)                  \
    static SHP_RET_##lib name##_s2 params SHP_BODY(2, lib, cls, name, args, desc)                  \
    static SHP_RET_##lib name##_s3 params SHP_BODY(3, lib, cls, name, args, desc)

_Static_assert(SHP_SLOTS == 4, "SHP_DEFINE makes four copies");

#define SHP_VARIANT0(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name,
#define SHP_VARIANT1(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name##_s1,
#define SHP_VARIANT2(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name##_s2,
#define SHP_VARIANT3(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name##_s3,
#define SHP_VARIANTS(list) \
    {{list(SHP_VARIANT0)}, {list(SHP_VARIANT1)}, {list(SHP_VARIANT2)}, {list(SHP_VARIANT3)}}
/* clang-format on */

#endif
