/* shapetrace preload: compile-time checks of the call list's facts against what only the
 * libraries' headers and the preload's descriptions can say: an NCCL row's root and redop facts
 * say whether its params take `int root` and `ncclRedOp_t op`, and its desc passes them on; a
 * driver row's base name means, in the legacy stream mode, an entry point of its params (the
 * per-thread mode is check_ptds.c's). Produces no code. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "preload/desc.h"
#include "preload/preload.h"

#define SHP_UNPAREN(...) __VA_ARGS__

/* Stand-ins for the parameters that nccl.h names root and op: inside a row's function the names
 * are its parameters where it has them, else these, of a type that no parameter has. */
extern const struct not_a_parameter {
    char c;
} root, op;
#define TAKES(x, type) _Generic((x), type : 1, default : 0)

#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic error "-Wunused-variable"

/* The desc reads the parameter: in a block where its name is a fresh local, the desc must use
 * the local. An "unused variable 'root'" (or 'op') error here is a row that says it takes a root
 * (a reduction) and whose desc does not pass it to the recorder. */
#define DESC_READS(type, x, zero, desc)                                                            \
    {                                                                                              \
        type x = zero;                                                                             \
        struct shp_desc d_ = {SHP_UNPAREN desc};                                                   \
        (void)d_;                                                                                  \
    }
#define ROOT_DESC_NONE(desc)
#define ROOT_DESC_SENDS(desc) DESC_READS(int, root, 0, desc)
#define ROOT_DESC_RECVS(desc) DESC_READS(int, root, 0, desc)
#define RED_DESC_NONE(desc)
#define RED_DESC_REDUCES(desc) DESC_READS(ncclRedOp_t, op, ncclSum, desc)

/* clang-format off */
#define NCCL_ROW(...) NCCL_ROW_(__VA_ARGS__)
#define NCCL_ROW_(name, desc, send, recv, root_, redop_, alias) \
    _Static_assert(TAKES(root, int) == (SHP_ROOT_##root_ != SHP_ROOT_NONE), \
                   #name ": its root fact says whether it takes `int root`"); \
    _Static_assert(TAKES(op, ncclRedOp_t) == SHP_RED_##redop_, \
                   #name ": its redop fact says whether it takes `ncclRedOp_t op`"); \
    ROOT_DESC_##root_(desc) \
    RED_DESC_##redop_(desc)
#define SHP_X_NCCL(num, lib, cls, name, facts, params, args, desc) \
    static inline __attribute__((unused)) void check_##name params \
    { NCCL_ROW(name, desc, SHP_UNPAREN facts) }
SHP_NCCL_CALLS(SHP_X_NCCL)
#undef SHP_X_NCCL

/* The driver's: in this mode cuda.h's cuMemcpyHtoD is cuMemcpyHtoD_v2, and so on. */
#define SHP_X_TYPE(num, lib, cls, name, facts, params, args, desc) \
    typedef CUresult(check_##name##_t) params;
SHP_CUDA_CALLS(SHP_X_TYPE)
#undef SHP_X_TYPE
#define SAME(a, b) _Static_assert(__builtin_types_compatible_p(__typeof__(a), check_##b##_t), #b)
#define LEGACY_ROW(...) LEGACY_ROW_(__VA_ARGS__)
#define LEGACY_ROW_(name, base, since, mode) LEGACY_##mode(base, name)
#define LEGACY_LEGACY(base, name) SAME(base, name);
#define LEGACY_PER_THREAD(base, name)
#define LEGACY_BOTH(base, name) SAME(base, name);
#define SHP_X_LEGACY(num, lib, cls, name, facts, params, args, desc) \
    LEGACY_ROW(name, SHP_UNPAREN facts)
SHP_CUDA_CALLS(SHP_X_LEGACY)
#undef SHP_X_LEGACY
/* clang-format on */
