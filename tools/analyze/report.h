/* shapetrace analyze: the report, for the driver. */
#ifndef SHAPETRACE_REPORT_H
#define SHAPETRACE_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "tools/analyze/pass.h"

/* Print the report on out; call after an_findings_order. color: ANSI bold and red for a
 * terminal. */
void an_report_text(struct an_ctx *ctx, FILE *out, bool color);
void an_report_json(struct an_ctx *ctx, FILE *out);

#endif
