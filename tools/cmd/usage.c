/* shapetrace tools: the one line a subcommand prints for bad usage (the whole usage text is for
 * --help and `shapetrace help CMD`). */
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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

int shp_bad_option(const char *cmd, int argc, char **argv, const char *shorts,
                   const struct option *longs)
{
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    bool needs = false;
    if (optopt && !strncmp(arg, "--", 2)) {
        if (strchr(arg, '='))
            return shp_usage_error(cmd, "option '%s' takes no value", arg);
        for (const struct option *o = longs; o && o->name; o++)
            needs |= o->val == optopt && o->has_arg == required_argument;
    } else if (optopt && optopt != ':') {
        const char *s = strchr(shorts, optopt);
        needs = s && s[1] == ':';
    }
    if (needs)
        return shp_usage_error(cmd, "option '%s' needs a value", arg);
    if (optopt && strncmp(arg, "--", 2))
        return shp_usage_error(cmd, "unknown option '-%c'", optopt);
    return shp_usage_error(cmd, "unknown option '%s'", arg);
}
