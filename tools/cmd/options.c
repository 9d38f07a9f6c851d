/* shapetrace tools: a command's option table made into getopt_long's arrays, its help lines and
 * its one-line errors (tools/cmd/options.h). */
#include "tools/cmd/options.h"

#include <string.h>

#include "tools/cmd/cmd.h"

/* getopt_long returns this plus the row's index for a long option; letters stay below it. */
#define LONG_BASE 256

static const struct shp_opt help_row = {-1, "help", 'h', NULL, "this help"};

static int has_arg(const struct shp_opt *r)
{
    if (!r->value)
        return no_argument;
    return r->value[0] == '[' ? optional_argument : required_argument;
}

void shp_opts_begin(struct shp_optparse *p, const struct shp_opts *o)
{
    size_t nl = 0, ns = 0;
    memset(p, 0, sizeof(*p));
    p->o = o;
    /* '+': stop at the first operand, so that a command run by `run` keeps its options. */
    if (o->in_order)
        p->shorts[ns++] = '+';
    p->shorts[ns++] = 'h';
    for (size_t i = 0; i < o->n && i < SHP_OPTS_MAX; i++) {
        const struct shp_opt *r = &o->v[i];
        if (r->name)
            p->longs[nl++] = (struct option){r->name, has_arg(r), NULL, LONG_BASE + (int)i};
        if (r->letter) {
            p->shorts[ns++] = r->letter;
            if (has_arg(r) != no_argument)
                p->shorts[ns++] = ':';
            if (has_arg(r) == optional_argument)
                p->shorts[ns++] = ':';
        }
    }
    p->longs[nl] = (struct option){"help", no_argument, NULL, 'h'};
    /* 0, not 1: glibc then starts afresh, '+' included, even after another command line. */
    optind = 0;
    opterr = 0;
}

/* The one line for the option getopt_long just refused: unknown, missing its value, or given one
 * it does not take. Returns SHP_EXIT_USAGE. */
static int bad_option(const struct shp_opts *o, int argc, char **argv)
{
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    bool needs = false;
    if (optopt && !strncmp(arg, "--", 2)) {
        if (strchr(arg, '='))
            return shp_usage_error(o->cmd, "option '%s' takes no value", arg);
        /* getopt_long names the option by its value: its row's index past LONG_BASE */
        needs = optopt >= LONG_BASE && (size_t)(optopt - LONG_BASE) < o->n &&
                has_arg(&o->v[optopt - LONG_BASE]) == required_argument;
    } else if (optopt) {
        for (size_t i = 0; i < o->n; i++)
            needs |= o->v[i].letter == optopt && has_arg(&o->v[i]) == required_argument;
    }
    if (needs)
        return shp_usage_error(o->cmd, "option '%s' needs a value", arg);
    if (optopt && strncmp(arg, "--", 2))
        return shp_usage_error(o->cmd, "unknown option '-%c'", optopt);
    return shp_usage_error(o->cmd, "unknown option '%s'", arg);
}

int shp_opts_next(struct shp_optparse *p, int argc, char **argv)
{
    const struct shp_opts *o = p->o;
    int c = getopt_long(argc, argv, p->shorts, p->longs, NULL);
    p->arg = optarg;
    if (c == -1)
        return SHP_OPT_END;
    if (c == 'h') {
        shp_opts_help(o, stdout);
        p->status = SHP_EXIT_OK;
        return SHP_OPT_STOP;
    }
    if (c >= LONG_BASE && (size_t)(c - LONG_BASE) < o->n)
        return o->v[c - LONG_BASE].id;
    for (size_t i = 0; c != '?' && c != ':' && i < o->n; i++)
        if (o->v[i].letter == c)
            return o->v[i].id;
    p->status = bad_option(o, argc, argv);
    return SHP_OPT_STOP;
}

/* "-o, --output FILE": the option's part of its help line, into buf. */
static void left_part(const struct shp_opt *r, char *buf, size_t len)
{
    char letter[8] = "";
    if (r->letter)
        snprintf(letter, sizeof(letter), "-%c%s", r->letter, r->name ? ", " : "");
    snprintf(buf, len, "%s%s%s%s%s", letter, r->name ? "--" : "", r->name ? r->name : "",
             r->value ? " " : "", r->value ? r->value : "");
}

static void print_row(const struct shp_opt *r, int column, FILE *f)
{
    char left[128];
    left_part(r, left, sizeof(left));
    fprintf(f, "  %-*s", column - 2, left);
    for (const char *line = r->help;;) {
        size_t len = strcspn(line, "\n");
        fprintf(f, "%.*s\n", (int)len, line);
        if (!line[len])
            break;
        line += len + 1;
        fprintf(f, "%*s", column, "");
    }
}

void shp_opts_help(const struct shp_opts *o, FILE *f)
{
    char left[128];
    size_t width = strlen("-h, --help");
    for (size_t i = 0; i < o->n; i++) {
        left_part(&o->v[i], left, sizeof(left));
        width = strlen(left) > width ? strlen(left) : width;
    }
    int column = 2 + (int)width + 2;
    fputs(o->synopsis, f);
    for (size_t i = 0; i < o->n; i++)
        print_row(&o->v[i], column, f);
    print_row(&help_row, column, f);
    if (o->epilogue)
        fputs(o->epilogue, f);
}
