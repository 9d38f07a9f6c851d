/* shapetrace C tests: a harness in the manner of Redis's testhelp.h, used by every C test
 * program, the product's unit tests and the doubles' own. A test file includes it once, groups
 * checks under test_group(), and ends main with `return test_report();`, which prints "N passed,
 * M failed" like every other suite. */
#ifndef SHAPETRACE_HARNESS_H
#define SHAPETRACE_HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int test_passed, test_failed;
static const char *test_current = "";

/* The name printed before the checks that follow ("" for none). */
#define test_group(name) (test_current = (name))

/* Counts one check and prints its line, "ok   GROUP: DESCR" or "FAIL GROUP: DESCR [EXPR]
 * (FILE:LINE)", in one write(2) after stdout is flushed: processes that share an output file
 * (the ranks of a multi-process test) never split each other's lines. Use the macros below. */
__attribute__((format(printf, 5, 6), unused)) static void
test_check_(int ok, const char *expr, const char *file, int line, const char *fmt, ...)
{
    char buf[1024];
    size_t n;
    int k;
    va_list ap;

    k = snprintf(buf, sizeof(buf), "%s %s%s", ok ? "ok  " : "FAIL", test_current,
                 *test_current ? ": " : "");
    n = k > 0 ? (size_t)k : 0;
    va_start(ap, fmt);
    if (n < sizeof(buf) && (k = vsnprintf(buf + n, sizeof(buf) - n, fmt, ap)) > 0)
        n += (size_t)k;
    va_end(ap);
    if (!ok && n < sizeof(buf) &&
        (k = snprintf(buf + n, sizeof(buf) - n, " [%s] (%s:%d)", expr, file, line)) > 0)
        n += (size_t)k;
    if (n > sizeof(buf) - 2)
        n = sizeof(buf) - 2;
    buf[n++] = '\n';
    fflush(stdout);
    (void)!write(STDOUT_FILENO, buf, n);
    if (ok)
        test_passed++;
    else
        test_failed++;
}

/* One check with a plain description. */
#define test_cond(descr, cond) test_check_(!!(cond), #cond, __FILE__, __LINE__, "%s", (descr))

/* One check whose description is printf-formatted from the arguments after cond. */
#define test_condf(cond, ...) test_check_(!!(cond), #cond, __FILE__, __LINE__, __VA_ARGS__)

/* Two strings equal, printing both when they are not. */
#define test_str(descr, got, want)                                                                 \
    do {                                                                                           \
        const char *got_ = (got), *want_ = (want);                                                 \
        int same_ = got_ && want_ && !strcmp(got_, want_);                                         \
        test_cond(descr, same_);                                                                   \
        if (!same_)                                                                                \
            printf("     got  \"%s\"\n     want \"%s\"\n", got_ ? got_ : "(null)",                 \
                   want_ ? want_ : "(null)");                                                      \
    } while (0)

/* Prints "N passed, M failed"; returns the exit status, 1 if a check failed. */
static inline int test_report(void)
{
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
