/* shapetrace unit tests: a command's option table (tools/cmd/options.c) as the parser, the help
 * lines and the one-line errors it makes; tests/test_options.py checks every real command. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"
#include "tools/cmd/cmd.h"
#include "tools/cmd/options.h"

/* clang-format off */
#define T_OPTIONS(X) \
X(T_JSON, "json", 0, NULL, "one line") \
X(T_OUT, "output", 'o', "FILE", "first line\nsecond line\n  indented") \
X(T_WATCH, "watch", 0, "[S]", "an optional value") \
X(T_LETTER, NULL, 'n', "N", "a letter only")
/* clang-format on */
enum { T_OPTIONS(SHP_OPT_ENUM) };
static const struct shp_opt rows[] = {T_OPTIONS(SHP_OPT_ROW)};
static const struct shp_opts opts = {
    .cmd = "t",
    .synopsis = "usage: shapetrace t [OPTIONS] X\n",
    .epilogue = "Exit status: 0.\n",
    .v = rows,
    .n = SHP_OPTS_N(rows),
};
static const struct shp_opts in_order = {
    .cmd = "t", .synopsis = "", .v = rows, .n = SHP_OPTS_N(rows), .in_order = true};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])) - 1)

/* What fd 2 (or 1) received while fn ran, into buf. */
static void capture(int fd, char *buf, size_t len, void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/test_optparse.XXXXXX";
    int tmp = mkstemp(path), saved = dup(fd);
    fflush(NULL);
    dup2(tmp, fd);
    fn(arg);
    fflush(NULL);
    dup2(saved, fd);
    close(saved);
    ssize_t n = pread(tmp, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    close(tmp);
    unlink(path);
}

static void print_help(void *arg)
{
    (void)arg;
    shp_opts_help(&opts, stdout);
}

static void test_help(void)
{
    test_group("help lines");
    char got[2048];
    capture(1, got, sizeof(got), print_help, NULL);
    test_str("one column, continuation lines under the first, -h last", got,
             "usage: shapetrace t [OPTIONS] X\n"
             "  --json             one line\n"
             "  -o, --output FILE  first line\n"
             "                     second line\n"
             "                       indented\n"
             "  --watch [S]        an optional value\n"
             "  -n N               a letter only\n"
             "  -h, --help         this help\n"
             "Exit status: 0.\n");
}

static void test_parse(void)
{
    test_group("parse");
    char *argv[] = {"t",  "--json", "-o", "f",       "--output=g", "--watch", "--watch=2",
                    "-n", "3",      "x",  "--wat=1", "-of",        NULL};
    int want[] = {T_JSON, T_OUT, T_OUT, T_WATCH, T_WATCH, T_LETTER, T_WATCH, T_OUT, SHP_OPT_END};
    const char *vals[] = {NULL, "f", "g", NULL, "2", "3", "1", "f", NULL};
    struct shp_optparse p;
    shp_opts_begin(&p, &opts);
    int i = 0, c;
    bool same = true;
    do {
        c = shp_opts_next(&p, N(argv), argv);
        same &= i < (int)(sizeof(want) / sizeof(want[0])) && c == want[i] &&
                (c < 0 || (vals[i] ? p.arg && !strcmp(p.arg, vals[i]) : !p.arg));
        i++;
    } while (c >= 0);
    test_cond("long, short, =value, optional, a letter only, an abbreviation, -oVALUE", same);
    test_cond("the operand is left, after the options (permuted)",
              optind == N(argv) - 1 && !strcmp(argv[optind], "x"));

    char *argv2[] = {"t", "x", "--json", NULL};
    shp_opts_begin(&p, &in_order);
    test_cond("in order: the first operand ends the options",
              shp_opts_next(&p, 3, argv2) == SHP_OPT_END && optind == 1);
}

struct bad {
    char **argv;
    int argc, c, status;
};

static void run_bad(void *arg)
{
    struct bad *b = arg;
    struct shp_optparse p;
    shp_opts_begin(&p, &opts);
    while ((b->c = shp_opts_next(&p, b->argc, b->argv)) >= 0)
        ;
    b->status = p.status;
}

static void test_bad(void)
{
    test_group("bad options");
    static const struct {
        const char *arg, *line;
    } cases[] = {
        {"--bogus", "shapetrace t: unknown option '--bogus'; see shapetrace help t\n"},
        {"-q", "shapetrace t: unknown option '-q'; see shapetrace help t\n"},
        {"--output", "shapetrace t: option '--output' needs a value; see shapetrace help t\n"},
        {"-o", "shapetrace t: option '-o' needs a value; see shapetrace help t\n"},
        {"-n", "shapetrace t: option '-n' needs a value; see shapetrace help t\n"},
        {"--json=1", "shapetrace t: option '--json=1' takes no value; see shapetrace help t\n"},
        {"--help=1", "shapetrace t: option '--help=1' takes no value; see shapetrace help t\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[] = {"t", (char *)cases[i].arg, NULL};
        struct bad b = {argv, 2, 0, 0};
        char got[512];
        capture(2, got, sizeof(got), run_bad, &b);
        test_str(cases[i].arg, got, cases[i].line);
        test_cond("stops with the usage status", b.c == SHP_OPT_STOP && b.status == SHP_EXIT_USAGE);
    }
    char *argv[] = {"t", "-h", NULL};
    struct bad b = {argv, 2, 0, -1};
    char got[2048];
    capture(1, got, sizeof(got), run_bad, &b);
    test_cond("-h prints the help and stops with status 0",
              b.c == SHP_OPT_STOP && b.status == SHP_EXIT_OK &&
                  !strncmp(got, "usage: shapetrace t", 19));
}

int main(void)
{
    test_help();
    test_parse();
    test_bad();
    return test_report();
}
