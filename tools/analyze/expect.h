/* shapetrace analyze: reading --expect FILE, for the driver (the pass itself is
 * an_pass_expect). */
#ifndef SHAPETRACE_EXPECT_H
#define SHAPETRACE_EXPECT_H

#include "tools/analyze/findings.h"

struct an_expect;

/* Read the expectation file at path; its "dims" are added to dims (a name dims already has
 * keeps its value). NULL after printing one line on error. */
struct an_expect *an_expect_load(const char *path, struct an_dims *dims);
void an_expect_free(struct an_expect *e);

#endif
