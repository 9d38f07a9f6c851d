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
/* A call of the CUDA runtime's (shp_enter_cls). */
#define SHP_RT_NCCL 0
#define SHP_RT_CUDART 1
#define SHP_RT_CUDA 0
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
        if (__builtin_expect(!real, 0)) { /* the wrapper's armed path does not look */             \
            shp_site_hint.pc = 0;                                                                  \
            return (SHP_RET_##lib)shp_missing(SHP_OP_##name, SHP_ERR_##lib);                       \
        }                                                                                          \
        struct shp_call c; /* the description whole, the recorder's part left to shp_enter */      \
        /* The frame's depth, as c's place in it: __builtin_frame_address gave the function a      \
         * frame pointer, saved, set and restored on every call. */                                \
        shp_site_hint.sp = (uintptr_t)&c;                                                          \
        c.d =                                                                                      \
            (struct shp_desc){.op = SHP_OP_##name, .cls = cls_, .slot = slot_, SHP_UNPAREN desc};  \
        SHP_RET_##lib r;                                                                           \
        shp_enter_cls(&c, cls_, SHP_RT_##lib); /* returns with the guard held (SHP_CALL_REAL) */   \
        r = real args;                                                                             \
        shp_guard--;                                                                               \
        shp_leave(&c, (int)r);                                                                     \
        return r;                                                                                  \
    }

/* Where the wrapper goes when its first test fails: the slow half, as a tail call (1), or the
 * same code inline (0) for the driver's wrappers, which must see their own caller's address
 * (SHP_FOREIGN_CUDA), and a call that is not a tail call (an -O0 build) would hide it. */
#define SHP_SLOW_TAIL_NCCL 1
#define SHP_SLOW_TAIL_CUDART 1
#define SHP_SLOW_TAIL_CUDA 0

/* A dormant call that is not kept: the real function, with the guard held all the same (an
 * unrecorded call is still the outermost one); after it, a collective or p2p call counts its seq
 * (none if NCCL refused it) and a group call its depth, from the description built here of which
 * only the communicator and the peer are used (the compiler drops the rest). */
#define SHP_DORMANT_CALL(slot_, lib, cls_, name, args, desc)                                       \
    {                                                                                              \
        SHP_RET_##lib r;                                                                           \
        SHP_CALL_REAL(r, real, args);                                                              \
        if (cls_ == SHP_CLS_COLL || cls_ == SHP_CLS_P2P) {                                         \
            struct shp_desc d_ = {SHP_UNPAREN desc};                                               \
            shp_dormant_count(SHP_OP_##name, cls_, slot_, d_.comm, d_.peer, (int)r);               \
        }                                                                                          \
        if (cls_ == SHP_CLS_GROUP)                                                                 \
            shp_dormant_group(SHP_OP_##name, (int)r);                                              \
        return r;                                                                                  \
    }

/* The wrapper's dormant path, when its first test found tracing on, the thread outside our code
 * and the process dormant: nothing of that is asked again. The real function not yet found, or
 * the trace not yet made (shp_armed_slow), go to the slow half, which asks all of it: this one
 * calls nothing but the real function, and saves only what it needs after it. A collective on
 * the thread's last communicator takes its seq before the real call and gives it back if NCCL
 * refused the call (shp_dormant_take): nothing of the call is kept across the real one, so no
 * register is saved; one on another communicator goes to the slow half, which counts after. */
#define SHP_DORMANT(slot_, lib, cls_, name, params, args, desc)                                    \
    static __attribute__((noinline, unused)) SHP_RET_##lib name##_dormant##slot_ params            \
    {                                                                                              \
        name##_fn real = (name##_fn)shp_real_loaded(SHP_OP_##name, slot_);                         \
        if (__builtin_expect(!real, 0) ||                                                          \
            __builtin_expect(!atomic_load_explicit(&shp_armed_tried, memory_order_relaxed), 0))    \
            return name##_slow##slot_ args;                                                        \
        if (cls_ == SHP_CLS_COLL) {                                                                \
            struct shp_desc d_ = {SHP_UNPAREN desc};                                               \
            if (__builtin_expect(!shp_dormant_take(d_.comm), 0))                                   \
                return name##_slow##slot_ args;                                                    \
            SHP_RET_##lib r;                                                                       \
            SHP_CALL_REAL(r, real, args);                                                          \
            if (__builtin_expect(r != 0, 0))                                                       \
                shp_dormant_refused((int)r);                                                       \
            return r;                                                                              \
        }                                                                                          \
        SHP_DORMANT_CALL(slot_, lib, cls_, name, args, desc)                                       \
    }

/* Everything but the wrapper's common case, the real function first. A call recorded from here
 * (the first one, which starts the tracer; one armed by shp_armed_slow) gives the stack cache
 * pc_, which SHP_SLOW passes as 0 (unwound in full: where the tail call was not made, its return
 * address would be the wrapper's). */
#define SHP_SLOW_BODY(slot_, lib, cls_, name, args, desc, pc_)                                     \
    name##_fn real = (name##_fn)shp_real(SHP_OP_##name, slot_);                                    \
    if (__builtin_expect(!real, 0))                                                                \
        return (SHP_RET_##lib)shp_missing(SHP_OP_##name, SHP_ERR_##lib);                           \
    if (!shp_active(SHP_CALLER_##lib))                                                             \
        return real args;                                                                          \
    if (SHP_FOREIGN_##lib(__builtin_return_address(0))) {                                          \
        SHP_RET_##lib r;                                                                           \
        SHP_CALL_REAL(r, real, args);                                                              \
        return r;                                                                                  \
    }                                                                                              \
    if (!shp_kept_dormant(cls_) && __builtin_expect(!shp_armed(), 0))                              \
        SHP_DORMANT_CALL(slot_, lib, cls_, name, args, desc)                                       \
    shp_site_hint.pc = (pc_);                                                                      \
    return name##_rec##slot_ args;

#define SHP_SLOW(slot_, lib, cls_, name, params, args, desc)                                       \
    static __attribute__((noinline, unused)) SHP_RET_##lib name##_slow##slot_ params               \
    {                                                                                              \
        SHP_SLOW_BODY(slot_, lib, cls_, name, args, desc, 0)                                       \
    }

/* A call of a library's own (SHP_FOREIGN_*): the real function, with the guard held. */
#define SHP_FOREIGN_CALL(slot_, lib, name, args)                                                   \
    {                                                                                              \
        name##_fn real = (name##_fn)shp_real(SHP_OP_##name, slot_);                                \
        if (__builtin_expect(!real, 0))                                                            \
            return (SHP_RET_##lib)shp_missing(SHP_OP_##name, SHP_ERR_##lib);                       \
        SHP_RET_##lib r;                                                                           \
        SHP_CALL_REAL(r, real, args);                                                              \
        return r;                                                                                  \
    }

/* The wrapper proper. The armed call of a thread outside our code comes first: three loads and
 * tests, then a tail call of the recording half, which finds the real function itself. The
 * other paths are elsewhere (SHP_SLOW_TAIL_*), so that this one saves no register: while they
 * were here, every call pushed and popped five or six registers, and loaded the real function
 * twice. */
#define SHP_BODY(slot_, lib, cls_, name, args, desc)                                               \
    {                                                                                              \
        if (__builtin_expect(shp_on_outside(), 1)) {                                               \
            if (shp_kept_dormant(cls_) || __builtin_expect(shp_ctl_armed(), 1)) {                  \
                if (SHP_FOREIGN_##lib(__builtin_return_address(0)))                                \
                    SHP_FOREIGN_CALL(slot_, lib, name, args)                                       \
                shp_site_hint.pc = (uintptr_t)__builtin_return_address(0);                         \
                return name##_rec##slot_ args;                                                     \
            }                                                                                      \
            if (SHP_SLOW_TAIL_##lib)                                                               \
                return name##_dormant##slot_ args;                                                 \
        }                                                                                          \
        if (SHP_SLOW_TAIL_##lib)                                                                   \
            return name##_slow##slot_ args;                                                        \
        SHP_SLOW_BODY(slot_, lib, cls_, name, args, desc, (uintptr_t)__builtin_return_address(0))  \
    }

/* Types and prototypes: the compiler checks each against the library's own declaration. */
#define SHP_DECLARE(num, lib, cls, name, facts, params, args, desc)                                \
    typedef SHP_RET_##lib(*name##_fn) params;                                                      \
    __attribute__((visibility("default"))) SHP_RET_##lib name params;

/* clang-format off */
#define SHP_FOUR(m, ...) m(0, __VA_ARGS__) m(1, __VA_ARGS__) m(2, __VA_ARGS__) m(3, __VA_ARGS__)
#define SHP_DEFINE(num, lib, cls, name, facts, params, args, desc)                                      \
    SHP_FOUR(SHP_RECORD, lib, cls, name, params, args, desc)                                       \
    SHP_FOUR(SHP_SLOW, lib, cls, name, params, args, desc)                                         \
    SHP_FOUR(SHP_DORMANT, lib, cls, name, params, args, desc)                                      \
    SHP_RET_##lib name params SHP_BODY(0, lib, cls, name, args, desc)                              \
    static SHP_RET_##lib name##_s1 params SHP_BODY(1, lib, cls, name, args, desc)                  \
    static SHP_RET_##lib name##_s2 params SHP_BODY(2, lib, cls, name, args, desc)                  \
    static SHP_RET_##lib name##_s3 params SHP_BODY(3, lib, cls, name, args, desc)

_Static_assert(SHP_SLOTS == 4, "SHP_FOUR makes four copies");

#define SHP_VARIANT0(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name,
#define SHP_VARIANT1(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name##_s1,
#define SHP_VARIANT2(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name##_s2,
#define SHP_VARIANT3(num, lib, cls, name, facts, params, args, desc) [SHP_OP_##name] = (void *)name##_s3,
#define SHP_VARIANTS(list) \
    {{list(SHP_VARIANT0)}, {list(SHP_VARIANT1)}, {list(SHP_VARIANT2)}, {list(SHP_VARIANT3)}}
/* clang-format on */

#endif
