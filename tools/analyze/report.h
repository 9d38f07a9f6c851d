/* shapetrace analyze: the report on stdout, for the driver. */
#ifndef SHAPETRACE_REPORT_H
#define SHAPETRACE_REPORT_H

#include <stdbool.h>

#include "tools/analyze/pass.h"

/* Call after an_findings_order. color: ANSI bold and red for a terminal. */
void an_report_text(struct an_ctx *ctx, bool color);
void an_report_json(struct an_ctx *ctx);

#endif
