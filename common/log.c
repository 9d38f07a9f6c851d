/* shapetrace: the one log emitter (see log.h). */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

void shp_log_emit(const struct shp_log *log, int level, const char *fmt, ...)
{
    static const char *const tags[] = {"", "WARN", "INFO", "TRACE"};
    char line[1024];
    int saved = errno;
    int n = snprintf(line, sizeof(line), "%s %s ", log->prefix,
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
    ssize_t w = write(log->fd, line, (size_t)n);
    (void)w;
    errno = saved;
}
