/* shapetrace analyze: what a CUDA-graph replay executes, as the per-process passes (lineage,
 * expectations) see it: a captured call at each launch of its graph, not at its capture. */
#ifndef SHAPETRACE_REPLAY_H
#define SHAPETRACE_REPLAY_H

#include "tools/analyze/pass.h"

/* One process's graphs, as its walk has seen them so far. Zero it before the walk. */
struct an_replay {
    struct an_graphs graphs;
};

/* Hand fn the steps that the event of s executes, in order: s itself, unless it is a copy,
 * collective or p2p call recorded during a capture (kept for the launches of its graph: it
 * executes nothing by itself); then, for a cudaGraphLaunch, each call captured into the graph
 * of its executable, in capture order, as a step whose e and ref are the captured call's, with
 * e->t_ns the launch's, s's ref as launch and the launch's number among the process's graph
 * launches (from 1) as replay. Out of memory loses captured calls silently. */
void an_replay_step(struct an_replay *r, struct an_step *s,
                    void (*fn)(void *arg, struct an_step *s), void *arg);
/* Whether s's event executes itself and nothing else (neither a call recorded during a capture
 * nor a graph record): an_replay_step would hand fn s alone. Most events are; the caller takes
 * them straight to its passes. */
static inline bool an_replay_plain(const struct an_step *s)
{
    return !(s->e->flags & SHP_EV_CAPTURED) && s->e->type != SHP_REC_GRAPH;
}
/* Frees what r holds; r is zeroed for another walk. */
void an_replay_free(struct an_replay *r);

#endif
