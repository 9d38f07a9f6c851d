/* shapetrace: the one log emitter (see log.h). */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"

int shp_log_parse_level(const char *s, int dflt)
{
    if (!s || !*s)
        return dflt;
    if (!strcasecmp(s, "NONE") || !strcasecmp(s, "VERSION"))
        return SHP_LOG_NONE;
    if (!strcasecmp(s, "WARN"))
        return SHP_LOG_WARN;
    if (!strcasecmp(s, "INFO"))
        return SHP_LOG_INFO;
    if (!strcasecmp(s, "TRACE"))
        return SHP_LOG_TRACE;
    return dflt;
}

static const struct {
    const char *name;
    uint32_t bit;
} subsys_names[] = {
    {"INIT", SHP_SUB_INIT},   {"RESOLVE", SHP_SUB_RESOLVE}, {"TRACE", SHP_SUB_TRACE},
    {"STACK", SHP_SUB_STACK}, {"COMM", SHP_SUB_COMM},       {"TOOL", SHP_SUB_TOOL},
    {"ALL", SHP_SUB_ALL},
};

uint32_t shp_log_parse_subsys(const char *s)
{
    if (!s || !*s)
        return SHP_SUB_ALL;
    bool invert = *s == '^';
    uint32_t mask = 0;
    if (invert)
        s++;
    while (*s) {
        size_t n = strcspn(s, ",");
        for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
            if (strlen(subsys_names[i].name) == n && !strncasecmp(s, subsys_names[i].name, n))
                mask |= subsys_names[i].bit;
        s += n;
        if (*s == ',')
            s++;
    }
    return invert ? ~mask : mask;
}

/* The descriptor a line goes to, or -1; *opened when it was opened for this line. */
static int log_fd(const struct shp_log *log, bool *opened)
{
    *opened = false;
    if (!log->path)
        return log->checked && !shp_fd_is(log->fd, log->dev, log->ino) ? -1 : log->fd;
    int fd = open(log->path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) {
        fd = open(log->path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0)
            fchmod(fd, 0600); /* whatever the umask */
    }
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
    }
    *opened = fd >= 0;
    return fd;
}

void shp_log_emit(const struct shp_log *log, int level, const char *fmt, ...)
{
    static const char *const tags[] = {"", "WARN", "INFO", "TRACE"};
    char line[1024];
    int saved = errno;
    int n = snprintf(line, sizeof(line), "%s ", log->prefix);
    int text = n > 0 && (size_t)n < sizeof(line) ? n : 0;
    n = text + snprintf(line + text, sizeof(line) - (size_t)text, "%s ",
                        tags[level >= 0 && level <= SHP_LOG_TRACE ? level : 0]);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof(line) - 1) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - 1 - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    bool opened;
    int fd = log_fd(log, &opened);
    ssize_t w = -1;
    if (fd >= 0)
        w = log->quiet ? shp_write_quiet(fd, line, (size_t)n) : write(fd, line, (size_t)n);
    if (opened)
        close(fd);
    if (w < 0 && log->divert && level <= SHP_LOG_WARN) {
        line[n - 1] = 0;
        log->divert(line + text);
    }
    errno = saved;
}
