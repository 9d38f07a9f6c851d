/* shapetrace tools: a command's options, listed once. The one table drives the parser
 * (getopt_long's arrays), the option lines of --help and `shapetrace help CMD` (and so the man
 * page's), and the one-line error of a bad option, so that what a command accepts and what its
 * help shows cannot drift (perf's parse-options.c does the same). */
#ifndef SHAPETRACE_OPTIONS_H
#define SHAPETRACE_OPTIONS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* A command lists its options as an X-macro of rows X(ID, NAME, LETTER, VALUE, HELP):
 *   ID      the enum constant that shp_opts_next returns for it (file-local: OPT_JSON)
 *   NAME    the long name without "--" ("json"), or NULL when the option is a letter only
 *   LETTER  the short option ('o'; not 'h', which is -h's), or 0 for none
 *   VALUE   NULL when it takes no value; the value's name in the help ("FILE") when it needs
 *           one; in brackets ("[SECONDS]") when the value is optional (--watch=2)
 *   HELP    the help text; '\n' starts a new line, indented under the first
 * and makes the enum of its IDs and its rows from it with SHP_OPTS_ROWS(rows, LIST). -h and
 * --help are every command's: they need no row. */
#define SHP_OPT_ENUM(id, name, letter, value, help) id,
#define SHP_OPT_ROW(id, name, letter, value, help) {id, name, letter, value, help},

struct shp_opt {
    int id;
    const char *name;
    char letter;
    const char *value;
    const char *help;
};

/* The most rows a command may have (-h/--help aside). */
#define SHP_OPTS_MAX 24
#define SHP_OPTS_N(rows) (sizeof(rows) / sizeof((rows)[0]))
#define SHP_OPTS_ROWS(rows, LIST)                                                                  \
    enum { LIST(SHP_OPT_ENUM) };                                                                   \
    static const struct shp_opt rows[] = {LIST(SHP_OPT_ROW)};                                      \
    _Static_assert(SHP_OPTS_N(rows) <= SHP_OPTS_MAX, #rows ": too many options")

/* A command's options and the text of its help around their lines. */
struct shp_opts {
    const char *cmd;         /* "analyze", as the one-line errors name it */
    const char *synopsis;    /* the usage lines and the description, printed before the options */
    const char *epilogue;    /* printed after them: notes and the exit status; may be NULL */
    const struct shp_opt *v; /* the rows (NULL when there are none) */
    size_t n;                /* at most SHP_OPTS_MAX */
    bool in_order;           /* stop at the first operand: `run`'s CMD keeps its own options */
};

/* The parser's state for one command line: getopt_long's arrays made from a table. */
struct shp_optparse {
    const struct shp_opts *o;
    char *arg;  /* the value of the option shp_opts_next returned, argv's (NULL: none given) */
    int status; /* after SHP_OPT_STOP: the exit status the command returns */
    struct option longs[SHP_OPTS_MAX + 2];
    char shorts[3 * SHP_OPTS_MAX + 4];
};

#define SHP_OPT_END (-1)  /* no more options: optind is the first operand */
#define SHP_OPT_STOP (-2) /* --help was printed, or a bad option's line: return p->status */

/* What a command's parse step returns when the command is to run; else it returns the exit
 * status to return at once (SHP_EXIT_OK after --help, SHP_EXIT_USAGE after one line). */
#define SHP_PARSED (-1)

/* Starts parsing a command line with o (static: it must outlive p), from argv[1] (resets
 * getopt's state, and its opterr to 0: the errors are ours). */
void shp_opts_begin(struct shp_optparse *p, const struct shp_opts *o);

/* The next option of argv: its row's ID (its value in p->arg); SHP_OPT_END; or SHP_OPT_STOP
 * after printing the help on stdout for -h/--help (p->status SHP_EXIT_OK) or the one-line error
 * on stderr for an unknown option, one missing its value or given one it does not take
 * (p->status SHP_EXIT_USAGE). Not thread-safe (getopt's globals). */
int shp_opts_next(struct shp_optparse *p, int argc, char **argv);

/* Prints o's whole help on f: the synopsis, a line per option (then -h, --help) with the help
 * texts in one column, and the epilogue. */
void shp_opts_help(const struct shp_opts *o, FILE *f);

#endif
