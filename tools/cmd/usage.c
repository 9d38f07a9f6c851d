/* shapetrace tools: the one line a subcommand prints for bad usage (the whole usage text is for
 * --help and `shapetrace help CMD`). */
#include <stdarg.h>
#include <stdio.h>

#include "tools/cmd/cmd.h"

int shp_usage_error(const char *cmd, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(stderr, "shapetrace %s: %s; see shapetrace help %s\n", cmd, what, cmd);
    return SHP_EXIT_USAGE;
}
