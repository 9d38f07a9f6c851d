/* shapetrace tools: the native stacks of another process's threads, unwound with libdw's CFI
 * unwinder from copies of their registers and stack memory taken while they were stopped, so
 * that the process runs again before any unwinding starts; and the process's modules, for the
 * symbolizer and for finding the interpreter's symbols. */
#ifndef SHAPETRACE_UNWIND_H
#define SHAPETRACE_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

/* One thread as it was when stopped. */
struct shp_thread_image {
    pid_t tid;
    bool regs_ok;
    struct user_regs_struct regs;
    uint64_t stack_lo;    /* the address stack[0] was copied from */
    unsigned char *stack; /* the copy (the caller's) */
    size_t stack_len;
};

/* One process's modules and a libdwfl session over them. Opaque. Not thread-safe. */
struct shp_unwinder;

/* Reads the modules of process pid from /proc/PID/maps and reports them to libdwfl; nothing of it
 * needs the process stopped, so call it before the stop. Returns NULL (and one line in err)
 * when the maps cannot be read or libdwfl refuses them. */
struct shp_unwinder *shp_unwinder_new(pid_t pid, char *err, size_t errlen);
void shp_unwinder_free(struct shp_unwinder *u);

/* Where the stack of a thread whose stack pointer is sp ends (the top of the mapping that holds
 * sp), for the copy: false when no mapping of the process holds sp. */
bool shp_unwinder_stack_top(const struct shp_unwinder *u, uint64_t sp, uint64_t *top);

/* Copies the stack of a stopped thread into img (stack, stack_lo, stack_len; malloc'd, the caller
 * frees img->stack): from 128 bytes below its stack pointer (the red zone) up to the top of its
 * mapping, at most max bytes. Returns the bytes copied, or a negative errno. */
ssize_t shp_unwinder_copy_stack(const struct shp_unwinder *u, struct shp_thread_image *img,
                                size_t max);

/* Unwinds img's thread: its frames' addresses, innermost first, into pcs (at most max):
 * pcs[0] is where it stopped; ret[i] says whether pcs[i] is a return address (to be looked up
 * at pcs[i] - 1). Memory outside the copied stack is read from the live process, which may have
 * changed it since. Returns the number of frames (0 when not even the first is known). */
size_t shp_unwind(struct shp_unwinder *u, const struct shp_thread_image *img, uint64_t *pcs,
                  bool *ret, size_t max);

/* A module of the process, as the symbolizer registers it. */
struct shp_module_info {
    const char *path; /* as the maps name it; owned by the unwinder */
    uint64_t bias;    /* its load bias */
    uint64_t lo, hi;  /* the range its mappings cover */
    const uint8_t *build_id;
    size_t build_id_len;
    uint64_t dev, ino; /* of the file mapped, from the maps */
};

/* The module that holds addr (opening its file to know its bias and build id), false when no
 * module does. */
bool shp_unwinder_module(struct shp_unwinder *u, uint64_t addr, struct shp_module_info *m);

/* The name frames of the vDSO give as their module (the maps' name, without libdwfl's pid). */
#define SHP_VDSO_MODULE "[vdso]"

/* When pc is in the process's vDSO (the kernel's clock_gettime, gettimeofday, time: no file),
 * writes its frame's text into out as dump writes frames ("__vdso_clock_gettime+0x56 ([vdso])",
 * from the symbols of the copy read before the stop; "0x956 ([vdso])" without one) and returns
 * true; ret as for shp_unwind. False when pc is elsewhere, or the vDSO could not be copied. */
bool shp_unwinder_vdso_frame(struct shp_unwinder *u, uint64_t pc, bool ret, char *out, size_t len);

/* Looks the n symbols names[] up in the interpreter's object: the first libpython3.* module
 * that defines names[0], else the process's executable. Writes each one's address in the process
 * and size (0, 0 for one it does not define) and that module. Returns false when neither
 * defines names[0]. Only those objects' symbol tables are read (never libtorch's). */
bool shp_unwinder_find_symbols(struct shp_unwinder *u, const char *const *names, size_t n,
                               uint64_t *addr, uint64_t *size, struct shp_module_info *where);

#endif
