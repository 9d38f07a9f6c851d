/* shapetrace preload: the dlsym hook. vLLM's pynccl (and any ctypes user) looks each NCCL
 * function up with dlsym(handle, name), which a plain preload never sees: for the names we
 * trace, our dlsym returns the wrapper bound to that library's slot (resolve.c); for the
 * driver's cuGetProcAddress, ours (cuda.c), which wraps what a static runtime looks up. It sits
 * above the wrappers, whose per-slot tables it hands out. It works the same inside an intercepted
 * call: a library that looks its helpers up during init still gets working functions. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "preload/preload.h"

extern void *const shp_nccl_variants[SHP_SLOTS][SHP_OP_COUNT];
extern void *const shp_cudart_variants[SHP_SLOTS][SHP_OP_COUNT];
extern void *const shp_cuda_variants[SHP_SLOTS][SHP_OP_COUNT];

/* dlsym on libcuda (cuda-python, CuPy, JAX, and every CUDA runtime looking up cuGetProcAddress):
 * the driver is one library per process, so its wrappers are slot 0's. */
static void *driver_symbol(void *p, const char *name)
{
    if (!strncmp(name, "cuGetProcAddress", 16)) {
        void *w = NULL;
        if (!strcmp(name + 16, "_v2"))
            w = shp_cu_proc_wrapper(p, true);
        else if (!name[16])
            w = shp_cu_proc_wrapper(p, false);
        return w ? w : p;
    }
    unsigned op = shp_op_lookup(name);
    if (op == SHP_OP_NONE || shp_op_lib(op) != SHP_LIB_CUDA || shp_is_self(p))
        return p;
    atomic_store_explicit(&shp_real_tab[0][op], p, memory_order_release);
    return shp_cuda_variants[0][op];
}

/* dlsym on a real handle: return a wrapper bound to the library's slot for the names we trace. */
__attribute__((visibility("hidden"))) void *shp_dlsym_handle(void *handle, const char *name);
void *shp_dlsym_handle(void *handle, const char *name)
{
    void *p = shp_libc_dlsym(handle, name);
    if (!p || !name || (strncmp(name, "nccl", 4) && strncmp(name, "cu", 2)))
        return p;
    if (name[0] == 'c' && strncmp(name, "cuda", 4))
        return driver_symbol(p, name);
    unsigned op = shp_op_lookup(name);
    if (op == SHP_OP_NONE || shp_is_self(p))
        return p;
    int slot = shp_slot_for(p, handle);
    if (slot < 0) {
        SHP_WARN_ONCE(&shp_log, SHP_SUB_RESOLVE,
                      "more than %d libraries looked up with dlsym; %s from another is not traced",
                      SHP_SLOTS - 1, name);
        return p;
    }
    atomic_store_explicit(&shp_real_tab[slot][op], p, memory_order_release);
    void *w = shp_nccl_variants[slot][op];
    return w ? w : shp_cudart_variants[slot][op];
}

/* dlsym itself. glibc gives RTLD_NEXT (and, for versioned lookups, RTLD_DEFAULT) its meaning
 * from the caller's return address, so those lookups must reach libc's dlsym as a true tail
 * call: a jump that leaves our caller's return address in place. Written in assembly so that
 * no optimisation level can turn the jump into a call (a test checks the behaviour). */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    cmpq $-1, %rdi\n" /* RTLD_NEXT */
        "    je 1f\n"
        "    testq %rdi, %rdi\n" /* RTLD_DEFAULT */
        "    je 1f\n"
        "    jmp shp_dlsym_handle\n"
        "1:  movq shp_libc_dlsym_ptr(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    je 2f\n"
        "    jmp *%rax\n"
        "2:  pushq %rdi\n"
        "    pushq %rsi\n"
        "    subq $8, %rsp\n"
        "    call shp_libc_dlsym_resolve\n"
        "    addq $8, %rsp\n"
        "    popq %rsi\n"
        "    popq %rdi\n"
        "    testq %rax, %rax\n"
        "    je 3f\n"
        "    jmp *%rax\n"
        "3:  xorl %eax, %eax\n"
        "    ret\n"
        ".size dlsym, .-dlsym\n");
#else
#error "the dlsym tail call is written for x86-64; port the stub in preload/resolve.c"
#endif
