/* shapetrace: logging shared by the preload and the tools. One printf-checked emitter, one
 * write(2) per line, every line prefixed with who is speaking. The level is tested before any
 * formatting happens (SHP_LOG), so a disabled level costs one comparison. */
#ifndef SHAPETRACE_LOG_H
#define SHAPETRACE_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum shp_log_level { SHP_LOG_NONE = 0, SHP_LOG_WARN = 1, SHP_LOG_INFO = 2, SHP_LOG_TRACE = 3 };

/* Subsystems, for SHAPETRACE_DEBUG_SUBSYS (comma-separated names, ALL by default). */
#define SHP_SUB_INIT 0x1u
#define SHP_SUB_RESOLVE 0x2u
#define SHP_SUB_TRACE 0x4u
#define SHP_SUB_STACK 0x8u
#define SHP_SUB_COMM 0x10u
#define SHP_SUB_TOOL 0x20u
#define SHP_SUB_ALL 0xffffffffu

struct shp_log {
    int level;        /* enum shp_log_level */
    uint32_t subsys;  /* SHP_SUB_* mask */
    int fd;           /* where lines go (2), unless path; -1: nowhere but divert */
    char prefix[128]; /* "shapetrace[r3 host:pid]" */
    /* The preload's: fd is written only while it is still the file (dev, ino) it was when it
     * was checked; path, when set, is opened (append, created 0600) for each line and closed
     * again; quiet: no write raises SIGPIPE or SIGXFSZ. A warning that could not be written
     * that way is given to divert (without the prefix), when set. */
    bool checked, quiet;
    uint64_t dev, ino;
    const char *path;
    void (*divert)(const char *text);
};

/* Parse "WARN", "INFO", "TRACE", "NONE" (case-insensitive); unknown or NULL gives `dflt`. */
int shp_log_parse_level(const char *s, int dflt);

/* Parse a comma-separated subsystem list ("INIT,COMM", "^STACK" for all but); NULL gives ALL. */
uint32_t shp_log_parse_subsys(const char *s);

/* Format one line (prefix, level tag, text, newline) and write it with a single write(2), as
 * log says (see struct shp_log). No allocation; lines longer than 1 KiB are cut. Thread-safe. */
void shp_log_emit(const struct shp_log *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define SHP_LOG(log, lvl, sub, ...)                                                                \
    do {                                                                                           \
        if ((log)->level >= (lvl) && ((log)->subsys & (sub)))                                      \
            shp_log_emit((log), (lvl), __VA_ARGS__);                                               \
    } while (0)

/* Warn once per call site (the flag is per site, process-wide). */
#define SHP_WARN_ONCE(log, sub, ...)                                                               \
    do {                                                                                           \
        static int shp_warned_;                                                                    \
        if (!__atomic_exchange_n(&shp_warned_, 1, __ATOMIC_RELAXED))                               \
            SHP_LOG(log, SHP_LOG_WARN, sub, __VA_ARGS__);                                          \
    } while (0)

#endif
