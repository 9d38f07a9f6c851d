/* shapetrace tools: offline symbolization of the return addresses a trace recorded, from the
 * module records of the same process, with elfutils' libdwfl (link with -ldw -lelf). */
#ifndef SHAPETRACE_SYMBOLIZE_H
#define SHAPETRACE_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One process's address space: its modules, a libdwfl session built on first use, and a cache
 * of the texts already produced. Opaque.
 *
 * Thread-safety: none inside. Calls on one symbolizer must be serialised by the caller. Distinct
 * symbolizers share no state of ours; libelf/libdw handles are per symbolizer. */
struct shp_symbolizer;

/* Creates an empty symbolizer for one process's address space.
 * Returns it (free with shp_symbolizer_free), or NULL when out of memory. */
struct shp_symbolizer *shp_symbolizer_new(void);

/* Frees s, its libdwfl session, its cache and every copy it holds. s may be NULL. */
void shp_symbolizer_free(struct shp_symbolizer *s);

/* Frame texts shared by the symbolizers of one command (dump of two thousand traces of one
 * program): a text is a function of the module's file, its recorded build id and path, the symbol
 * file, and the address's offset in the module, so a later process's symbolizer takes it from
 * here without opening the module again. A module file counts as the same while its device,
 * inode, size and mtime are. Opaque.
 *
 * Thread-safety: none. The symbolizers that use one cache must be used from one thread. */
struct shp_symcache;

/* Creates an empty cache. Returns NULL when out of memory. */
struct shp_symcache *shp_symcache_new(void);

/* Frees c, its texts and the symbol files it loaded. Every symbolizer that used c must have been
 * freed before. c may be NULL. */
void shp_symcache_free(struct shp_symcache *c);

struct shp_symfile;

/* The symbol file shp_symfile_load_near(trace_path, host, host_max) would load, loaded once per
 * file (same path, device, inode, size and mtime) for all the traces of c. Owned by c; NULL when
 * there is none. */
const struct shp_symfile *shp_symcache_symfile_near(struct shp_symcache *c, const char *trace_path,
                                                    const char *host, size_t host_max);

/* Lets s take its texts from c and put its new ones there; c (which may be NULL: none) must
 * outlive s. With c, give s its symbol file with shp_symbolizer_use_symfile. */
void shp_symbolizer_set_cache(struct shp_symbolizer *s, struct shp_symcache *c);

/* As shp_symbolizer_set_symfile, but s does not own f: f must outlive s (a file from
 * shp_symcache_symfile_near). */
void shp_symbolizer_use_symfile(struct shp_symbolizer *s, const struct shp_symfile *f);

/* Gives s the symbol file f (symfile.h), which s now owns and frees; f may be NULL (none). A
 * registered module whose file is missing here or carries another build id then takes its
 * frame texts from f, by build id and offset, where f has them; other frames of it print as
 * offsets, as without f. Drops the cached texts. */
void shp_symbolizer_set_symfile(struct shp_symbolizer *s, struct shp_symfile *f);

/* Registers one loaded ELF object of the traced process.
 *   path:     the object's path on the traced machine; need not exist here. Copied.
 *   base:     its load bias (dl_iterate_phdr's dlpi_addr; 0 for a non-PIE executable).
 *   lo, hi:   the range [lo, hi) its PT_LOAD segments covered in the process; lo < hi.
 *   build_id: its GNU build id as recorded, copied; NULL or build_id_len 0 when unknown.
 * The file at path is used for symbols only if it exists and, when a build id was recorded,
 * carries the same one; otherwise addresses in [lo, hi) print as "0xOFF (module)". Where ranges
 * of registered modules overlap, the module registered last wins. Registering the same module
 * (same path, base, range and build id) twice is harmless. Nothing is opened until the first
 * shp_symbolize that falls in the module. Adding a module drops the cached texts.
 * Returns 0, -EINVAL for a NULL s or path, lo >= hi, or build_id NULL with a nonzero length,
 * -ENOMEM when out of memory. */
int shp_symbolizer_add_module(struct shp_symbolizer *s, const char *path, uint64_t base,
                              uint64_t lo, uint64_t hi, const uint8_t *build_id,
                              size_t build_id_len);

/* Writes the text for one frame into out, NUL-terminated, cut to outlen bytes:
 *   "function (file:line)"       debug info gives a source line (file as DWARF records it)
 *   "function+0xOFF (module)"    only a symbol is known; OFF = addr - symbol start
 *   "0xOFF (module, file:line)"  a line but no symbol (rare: DWARF without any symbol table)
 *   "0xOFF (module)"             the module is known but no symbol; OFF = addr - base
 *   "0xADDR"                     no registered module contains addr
 * module is the basename of the registered path. Function names are the ELF symbol names,
 * not demangled; in inlined code the name is the function the code was inlined into, while the
 * line is the inlined source's.
 *   is_return_address: true for every frame but the innermost; then the module, symbol and
 *   line are looked up at addr - 1 (inside the call instruction), and offsets are still
 *   printed for addr.
 * The first call that falls in a module opens its file and debug info (found by build id or
 * debuglink under /usr/lib/debug, as elfutils' standard search does; with DEBUGINFOD_URLS set
 * in the environment libdw also asks those servers, which may take a while); texts are cached
 * per (addr, is_return_address), so repeated addresses cost a hash lookup.
 * Returns 0; -EINVAL for a NULL s or out or outlen 0 (out untouched); -ENOMEM when out of
 * memory, with a degraded but valid text (at least "0xADDR") in out. */
int shp_symbolize(struct shp_symbolizer *s, uint64_t addr, bool is_return_address, char *out,
                  size_t outlen);

#endif
