/* shapetrace render: the analysis as one self-contained HTML page, for a bug report: the finding
 * in words with its calls, where its bytes came from, a grid of ranks by collectives around it,
 * a timeline of the same stretch, the other findings, the processes, the command line. */
#ifndef SHAPETRACE_PAGE_H
#define SHAPETRACE_PAGE_H

#include <stddef.h>
#include <stdio.h>

struct an_result;
struct shp_session;
struct shp_page;

struct shp_page_options {
    const char *title; /* a line under the heading, or NULL */
    size_t finding;    /* the finding the page is drawn around: an index of the result's */
    int argc;          /* the command line the page shows, after "shapetrace" */
    char *const *argv;
};

/* Reads what the page shows of the session's traces (one scan of each) for the result r of an
 * analysis of them. s, r and o must outlive the page. Returns 0; -ERANGE when o->finding is not
 * one of r's findings (and r has some); -ENOMEM. *out is NULL on error. */
int shp_page_open(struct shp_session *s, const struct an_result *r,
                  const struct shp_page_options *o, struct shp_page **out);

/* Writes the page onto f. Returns 0, or -ENOMEM when a part of it could not be drawn (the page
 * is still well formed). Write errors are f's to report (ferror). */
int shp_page_write(struct shp_page *page, FILE *f);

void shp_page_close(struct shp_page *page);

#endif
