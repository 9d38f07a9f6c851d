/* shapetrace unit tests: a harness in the manner of Redis's testhelp.h. A test file includes
 * it once, groups checks under test_group(), and ends main with `return test_report();`, which
 * prints "N passed, M failed" like every other suite. */
#ifndef SHAPETRACE_HARNESS_H
#define SHAPETRACE_HARNESS_H

#include <stdio.h>

static int test_passed, test_failed;
static const char *test_current = "";

/* The name printed before the checks that follow. */
#define test_group(name) (test_current = (name))

/* One check: prints "ok   GROUP: DESCR" or "FAIL GROUP: DESCR [cond] (file:line)". */
#define test_cond(descr, cond)                                                                     \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
            printf("ok   %s: %s\n", test_current, (descr));                                        \
        } else {                                                                                   \
            test_failed++;                                                                         \
            printf("FAIL %s: %s [%s] (%s:%d)\n", test_current, (descr), #cond, __FILE__,           \
                   __LINE__);                                                                      \
        }                                                                                          \
    } while (0)

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

static inline int test_report(void)
{
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
