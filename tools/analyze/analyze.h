/* shapetrace analyze: the analyzer as the commands call it. A run reads the session's traces
 * once and returns its result; the reporters print a result (text, JSON), and export and report
 * draw it. */
#ifndef SHAPETRACE_ANALYZE_H
#define SHAPETRACE_ANALYZE_H

#include <stdbool.h>
#include <stdio.h>

#include "tools/analyze/findings.h"
#include "tools/analyze/pass.h"

struct an_expect;

struct an_options {
    struct an_dims dims;    /* --dim values; the expectation file's dims join them */
    const char *expect;     /* --expect FILE, or NULL */
    struct an_expect *spec; /* the file as read (an_options_expect); NULL before */
    bool stats;             /* --stats: each thread's time on stderr */
    unsigned threads;       /* --threads N: how many threads the run may use; 0: the cores
                               this process may run on (sched_getaffinity) */
    bool matches;           /* keep every matched send and receive in the result (export) */
};

/* Reads o->expect, when it is set and not read yet, into o->spec (its dims join o->dims).
 * Returns 0, or -1 after one line (a malformed file). */
int an_options_expect(struct an_options *o);
/* Frees what an_options_expect read. */
void an_options_free(struct an_options *o);

/* One call a finding names, decoded once, as every reporter prints it. */
struct an_call {
    bool ok;            /* false: the finding's reference holds no call (printed as null) */
    uint32_t proc;      /* the process: an index of the session's procs */
    struct shp_event e; /* e.index is its index in its file, as dump numbers it */
    char shape[96];    /* its count as the dims factor it, in the factoring it shares with the count
                          it is compared with; "" when they do not factor it */
    const char *label; /* what it is to the finding (static text); NULL for a plain call */
};

/* A finding with its calls decoded. */
struct an_result_finding {
    struct an_finding f;                    /* kind, severity, comm, seq, ranks and comm_ranks,
                                               summary, consequences; f.nevents, f.nlineage */
    struct an_call events[AN_MAX_EVENTS];   /* the diverging calls first */
    struct an_call lineage[AN_MAX_LINEAGE]; /* the producers, nearest first */
    struct an_call expected;                /* what the others did (f.has_expected) */
};

/* One side of a matched send and receive: the call, or the graph launch that executed it. */
struct an_match_end {
    uint32_t proc;         /* an index of the session's procs */
    uint64_t index;        /* its index in its file */
    uint64_t t_ns, dur_ns; /* dur_ns SHP_NONE: it never returned */
};
struct an_result_match {
    struct an_match_end send, recv;
};

/* What a run found, for the reporters: it names processes by the session's index, so the
 * session must outlive it. */
struct an_result {
    struct shp_session *session;   /* the processes and the unreadable files */
    uint64_t events, collectives;  /* events merged; collectives aligned */
    struct an_call *last;          /* by process: its last call (ok false: none) */
    struct an_comm_summary *comms; /* the communicators the alignment saw */
    size_t ncomms;
    struct an_result_finding *findings; /* in causal order: the first finding is findings[0] */
    size_t nfindings;
    struct an_result_match *matches; /* with o->matches: every send and the receive it matched,
                                        in the order the p2p pass matched them */
    size_t nmatches;
    struct an_values_counts values; /* the fingerprints compared (--values); all 0 without */
};

/* Runs every pass over the session's traces (reading o->expect first when an_options_expect
 * has not) and returns the result in *out. Returns 0, or -1 after one line (a malformed
 * expectation file, out of memory). With o->stats, a line per thread on stderr. Uses threads
 * inside; call it from one thread. */
int an_run(struct an_options *o, struct shp_session *s, struct an_result **out);

/* The report for a person: the first finding first, next to what the majority did, then the
 * others one line each, then a summary line. color: ANSI bold and red for a terminal. */
void an_print_text(const struct an_result *r, FILE *out, bool color);
/* The JSON object of docs/CONTRACTS.md, one line. */
void an_print_json(const struct an_result *r, FILE *out);
void an_result_free(struct an_result *r);

#endif
