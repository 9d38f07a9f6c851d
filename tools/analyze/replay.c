/* shapetrace analyze: the per-process passes' view of CUDA graphs (see replay.h). The links
 * capture id -> graph -> executable -> launch are pass.c's, shared with the alignment and p2p
 * passes; here every call that moves bytes is kept, since lineage and expectations follow
 * copies as well as collectives. */
#include "tools/analyze/replay.h"

void an_replay_step(struct an_replay *r, struct an_step *s,
                    void (*fn)(void *arg, struct an_step *s), void *arg)
{
    if (an_graphs_event(&r->graphs, s, AN_KEEP_CALLS))
        return;
    fn(arg, s);
    uint64_t replay = 0;
    const struct an_graph *g = an_graphs_launch(&r->graphs, s, &replay);
    for (size_t i = 0; g && i < g->n; i++) {
        /* A copy: a pass may keep pointers to the step only while fn runs. */
        struct shp_event e = g->calls[i].e;
        e.t_ns = s->e->t_ns;
        struct an_step rs = {
            .proc = s->proc, .e = &e, .ref = &g->calls[i].ref, .launch = s->ref, .replay = replay};
        fn(arg, &rs);
    }
}

void an_replay_free(struct an_replay *r)
{
    an_graphs_free(&r->graphs);
}
