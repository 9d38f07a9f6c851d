/* The NCCL double's ranks of one process: a clique of communicators made together
 * (ncclCommInitAll, a clique's split or shrink), whose calls meet at the end of their group on
 * one thread and move their data with every rank's buffers in hand. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/doubles/nccl_double.h"

/* A set of calls that run together: a collective's calls by rank, a split's or shrink's by rank
 * (NULL for ranks a shrink leaves out), or {send, recv}. */
struct job {
    enum op_kind kind;
    size_t first; /* queue index of the earliest call: jobs run in that order */
    struct clique *clique;
    enum family family;
    size_t seq;
    int nmembers;
    struct op **members;
};

static ncclResult_t reduce_to(struct op *const *m, int n, size_t count, void **result)
{
    const void **in = malloc((size_t)n * sizeof(*in));
    void *res = malloc(count * elem_size(m[0]));

    if (!in || !res) {
        free(in);
        free(res);
        return no_memory("reduction");
    }
    for (int r = 0; r < n; r++)
        in[r] = m[r]->sendbuff;
    shp_nd_reduce(res, in, n, count, m[0]->dtype, m[0]->redop);
    free(in);
    *result = res;
    return ncclSuccess;
}

static ncclResult_t run_all_reduce(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);
    ncclResult_t r;
    void *res;

    if (bytes == 0)
        return ncclSuccess;
    if ((r = reduce_to(m, n, m[0]->count, &res)) != ncclSuccess)
        return r;
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, res, bytes);
    free(res);
    return ncclSuccess;
}

static ncclResult_t run_reduce(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);
    ncclResult_t r;
    void *res;

    if (bytes == 0)
        return ncclSuccess;
    if ((r = reduce_to(m, n, m[0]->count, &res)) != ncclSuccess)
        return r;
    memcpy(m[m[0]->root]->recvbuff, res, bytes);
    free(res);
    return ncclSuccess;
}

static ncclResult_t run_reduce_scatter(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    ncclResult_t r;
    void *res;

    if (chunk == 0)
        return ncclSuccess;
    if ((r = reduce_to(m, n, m[0]->count * (size_t)n, &res)) != ncclSuccess)
        return r;
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, (char *)res + (size_t)i * chunk, chunk);
    free(res);
    return ncclSuccess;
}

/* Copies go through a staging buffer holding every input before any output is written, so
 * in-place calls (output overlapping some rank's input) see the inputs as they were. */
static ncclResult_t run_broadcast(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);
    void *stage;

    if (bytes == 0)
        return ncclSuccess;
    if (!(stage = malloc(bytes)))
        return no_memory("ncclBroadcast");
    memcpy(stage, m[m[0]->root]->sendbuff, bytes);
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, stage, bytes);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_all_gather(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(chunk * (size_t)n)))
        return no_memory("ncclAllGather");
    for (int i = 0; i < n; i++)
        memcpy(stage + (size_t)i * chunk, m[i]->sendbuff, chunk);
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, stage, chunk * (size_t)n);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_alltoall(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    size_t row = chunk * (size_t)n;
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(row * (size_t)n)))
        return no_memory("ncclAlltoAll");
    for (int i = 0; i < n; i++)
        memcpy(stage + (size_t)i * row, m[i]->sendbuff, row);
    /* Rank j receives, at block i, what rank i sent from its block j. */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            memcpy((char *)m[j]->recvbuff + (size_t)i * chunk,
                   stage + (size_t)i * row + (size_t)j * chunk, chunk);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_gather(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(chunk * (size_t)n)))
        return no_memory("ncclGather");
    for (int i = 0; i < n; i++)
        memcpy(stage + (size_t)i * chunk, m[i]->sendbuff, chunk);
    memcpy(m[m[0]->root]->recvbuff, stage, chunk * (size_t)n);
    free(stage);
    return ncclSuccess;
}

static ncclResult_t run_scatter(struct op *const *m, int n)
{
    size_t chunk = m[0]->count * elem_size(m[0]);
    char *stage;

    if (chunk == 0)
        return ncclSuccess;
    if (!(stage = malloc(chunk * (size_t)n)))
        return no_memory("ncclScatter");
    memcpy(stage, m[m[0]->root]->sendbuff, chunk * (size_t)n);
    for (int i = 0; i < n; i++)
        memcpy(m[i]->recvbuff, stage + (size_t)i * chunk, chunk);
    free(stage);
    return ncclSuccess;
}

/* members[0] is the send, members[1] its recv. */
static ncclResult_t run_send_recv(struct op *const *m, int n)
{
    size_t bytes = m[0]->count * elem_size(m[0]);

    (void)n;
    if (bytes)
        memmove(m[1]->recvbuff, m[0]->sendbuff, bytes);
    return ncclSuccess;
}

/* One new clique of k ranks: new rank i is the caller at old rank order[i]. On failure nothing is
 * left allocated. */
static bool make_clique(int k, const int *order, struct op *const *m, ncclComm_t *made)
{
    struct clique *c = shp_nd_new_clique(k);

    if (!c)
        return false;
    for (int i = 0; i < k; i++) {
        made[order[i]] = shp_nd_new_comm(c, i, m[order[i]]->comm->device);
        if (!made[order[i]]) {
            for (int j = 0; j < i; j++) {
                shp_nd_free_comm(made[order[j]]);
                made[order[j]] = NULL;
            }
            if (i == 0)
                free(c);
            return false;
        }
    }
    return true;
}

static ncclResult_t hand_out(struct op *const *m, int n, ncclComm_t *made, bool ok,
                             const char *what)
{
    if (!ok) {
        for (int r = 0; r < n; r++)
            if (made[r])
                shp_nd_free_comm(made[r]);
        free(made);
        return no_memory(what);
    }
    for (int r = 0; r < n; r++)
        if (m[r])
            *m[r]->newcomm = made[r];
    free(made);
    return ncclSuccess;
}

/* Each color becomes a clique whose ranks are ordered by key, then by old rank. */
static ncclResult_t run_split(struct op *const *m, int n)
{
    ncclComm_t *made = calloc((size_t)n, sizeof(*made));
    int *order = malloc((size_t)n * sizeof(*order));
    bool ok = made && order;

    for (int r = 0; ok && r < n; r++) {
        int k = 0;

        if (m[r]->color == NCCL_SPLIT_NOCOLOR || made[r])
            continue;
        for (int s = r; s < n; s++) {
            int j;

            if (m[s]->color != m[r]->color)
                continue;
            for (j = k; j > 0 && m[order[j - 1]]->key > m[s]->key; j--)
                order[j] = order[j - 1];
            order[j] = s;
            k++;
        }
        ok = make_clique(k, order, m, made);
    }
    free(order);
    if (!made)
        return no_memory("ncclCommSplit");
    return hand_out(m, n, made, ok, "ncclCommSplit");
}

/* The survivors keep their order; the excluded ranks (NULL members) get nothing. */
static ncclResult_t run_shrink(struct op *const *m, int n)
{
    ncclComm_t *made = calloc((size_t)n, sizeof(*made));
    int *order = malloc((size_t)n * sizeof(*order));
    bool ok = made && order;
    int k = 0;

    for (int r = 0; ok && r < n; r++)
        if (m[r])
            order[k++] = r;
    if (ok)
        ok = make_clique(k, order, m, made);
    free(order);
    if (!made)
        return no_memory("ncclCommShrink");
    return hand_out(m, n, made, ok, "ncclCommShrink");
}

/* The data movement, one function per operation, each seeing every rank's call at once. The
 * multi-process transport (nccl_shm.c) has its own, which exchange each rank's part. */
typedef ncclResult_t (*run_fn)(struct op *const *members, int n);

static const run_fn runners[OP_KINDS] = {
    [OP_ALL_REDUCE] = run_all_reduce,
    [OP_BROADCAST] = run_broadcast,
    [OP_REDUCE] = run_reduce,
    [OP_ALL_GATHER] = run_all_gather,
    [OP_REDUCE_SCATTER] = run_reduce_scatter,
    [OP_ALLTOALL] = run_alltoall,
    [OP_GATHER] = run_gather,
    [OP_SCATTER] = run_scatter,
    [OP_SEND] = run_send_recv,
    [OP_SPLIT] = run_split,
    [OP_SHRINK] = run_shrink,
};

static enum family family_of(const struct op *op)
{
    return shp_nd_ops[op->kind].family;
}

static bool same_call(const struct op *a, const struct op *b)
{
    const struct op_info *info = &shp_nd_ops[a->kind];

    if (a->kind != b->kind)
        return false;
    if (info->family == FAM_SPLIT)
        return true;
    if (info->family == FAM_SHRINK)
        return a->nexclude == b->nexclude &&
               !memcmp(a->exclude, b->exclude, (size_t)a->nexclude * sizeof(*a->exclude));
    return a->count == b->count && a->dtype == b->dtype &&
           (!info->has_redop || a->redop == b->redop) && (!info->has_root || a->root == b->root);
}

static void free_jobs(struct job *jobs, size_t njobs)
{
    for (size_t i = 0; i < njobs; i++)
        free(jobs[i].members);
    free(jobs);
}

static ncclResult_t add_job(struct job **jobs, size_t *njobs, const struct job *j, int nmembers)
{
    struct job *grown = realloc(*jobs, (*njobs + 1) * sizeof(**jobs));

    if (!grown)
        return no_memory("ncclGroupEnd");
    *jobs = grown;
    grown[*njobs] = *j;
    grown[*njobs].members = calloc((size_t)nmembers, sizeof(struct op *));
    if (!grown[*njobs].members)
        return no_memory("ncclGroupEnd");
    (*njobs)++;
    return ncclSuccess;
}

/* Gathers the calls of every rank of a clique that must run together: the k-th collective (or
 * split, or shrink) of each rank. Quadratic in the group's length, which is small in tests. */
static ncclResult_t match_collectives(struct op *queue, size_t queue_len, struct job **jobs,
                                      size_t *njobs)
{
    for (size_t i = 0; i < queue_len; i++) {
        struct op *op = &queue[i];
        struct clique *c = op->comm->clique;
        enum family fam = family_of(op);
        struct job *j = NULL;
        size_t seq = 0;
        ncclResult_t r;

        if (fam == FAM_P2P)
            continue;
        for (size_t k = 0; k < i; k++)
            if (queue[k].comm == op->comm && family_of(&queue[k]) == fam)
                seq++;
        for (size_t k = 0; k < *njobs && !j; k++)
            if ((*jobs)[k].clique == c && (*jobs)[k].family == fam && (*jobs)[k].seq == seq)
                j = &(*jobs)[k];
        if (!j) {
            struct job nj = {.kind = op->kind, .first = i, .clique = c, .family = fam, .seq = seq};

            if ((r = add_job(jobs, njobs, &nj, c->nranks)) != ncclSuccess)
                return r;
            j = &(*jobs)[*njobs - 1];
        }
        j->members[op->comm->rank] = op;
        j->nmembers++;
        op->matched = true;
    }
    return ncclSuccess;
}

/* The i-th send from a to b meets the i-th recv that b posted from a. */
static ncclResult_t match_p2p(struct op *queue, size_t queue_len, struct job **jobs, size_t *njobs)
{
    char what[160];

    for (size_t i = 0; i < queue_len; i++) {
        struct op *s = &queue[i];
        struct job nj = {.kind = OP_SEND, .family = FAM_P2P};
        size_t seq = 0, k = 0;
        struct op *recv = NULL;
        ncclResult_t r;

        if (s->kind != OP_SEND)
            continue;
        for (size_t p = 0; p < i; p++)
            if (queue[p].kind == OP_SEND && queue[p].comm == s->comm && queue[p].root == s->root)
                seq++;
        for (size_t p = 0; p < queue_len && !recv; p++) {
            struct op *q = &queue[p];

            if (q->kind == OP_RECV && q->comm->clique == s->comm->clique &&
                q->comm->rank == s->root && q->root == s->comm->rank && k++ == seq)
                recv = q;
        }
        shp_nd_describe(what, sizeof(what), s);
        if (!recv)
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : rank %d's %s has no matching ncclRecv from rank %d in "
                        "this group (the double never waits for a call that has not been made)",
                        s->comm->rank, what, s->root);
        if (recv->count * elem_size(recv) != s->count * elem_size(s)) {
            char rwhat[160];

            shp_nd_describe(rwhat, sizeof(rwhat), recv);
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : rank %d's %s sends %zu bytes but rank %d's %s expects "
                        "%zu",
                        s->comm->rank, what, s->count * elem_size(s), recv->comm->rank, rwhat,
                        recv->count * elem_size(recv));
        }
        s->matched = recv->matched = true;
        nj.first = i < (size_t)(recv - queue) ? i : (size_t)(recv - queue);
        nj.clique = s->comm->clique;
        if ((r = add_job(jobs, njobs, &nj, 2)) != ncclSuccess)
            return r;
        (*jobs)[*njobs - 1].members[0] = s;
        (*jobs)[*njobs - 1].members[1] = recv;
        (*jobs)[*njobs - 1].nmembers = 2;
    }
    for (size_t i = 0; i < queue_len; i++) {
        if (!queue[i].matched) {
            shp_nd_describe(what, sizeof(what), &queue[i]);
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : rank %d's %s has no matching ncclSend from rank %d in "
                        "this group (the double never waits for a call that has not been made)",
                        queue[i].comm->rank, what, queue[i].root);
        }
    }
    return ncclSuccess;
}

/* Every rank present (for a shrink, every rank not excluded), all making the same call. */
static ncclResult_t check_job(const struct job *j)
{
    struct op *const *m = j->members;
    int n = j->clique->nranks, any = 0, missing = -1;
    char a[160], b[160];

    while (!m[any])
        any++;
    for (int r = 0; r < n && missing < 0; r++)
        if (!m[r] && !(j->family == FAM_SHRINK && shp_nd_excludes(m[any], r)))
            missing = r;
    if (missing >= 0) {
        shp_nd_describe(a, sizeof(a), m[any]);
        if (j->family == FAM_COLL)
            return fail(ncclInvalidUsage,
                        "ncclGroupEnd : collective %llu on a %d-rank communicator: rank %d called "
                        "%s but rank %d made no collective call in this group. The double runs "
                        "the ranks of one process together: every rank's call must be inside "
                        "one ncclGroupStart/ncclGroupEnd on one thread",
                        m[any]->comm->ncoll + j->seq, n, any, a, missing);
        return fail(ncclInvalidUsage,
                    "ncclGroupEnd : rank %d called %s but rank %d of its %d-rank communicator "
                    "did not, in this group",
                    any, a, missing, n);
    }
    for (int r = 0; r < n; r++) {
        if (!m[r] || same_call(m[any], m[r]))
            continue;
        shp_nd_describe(a, sizeof(a), m[any]);
        shp_nd_describe(b, sizeof(b), m[r]);
        return fail(ncclInvalidUsage,
                    "ncclGroupEnd : ranks disagree at call %llu of a %d-rank communicator: rank "
                    "%d called %s, rank %d called %s",
                    m[any]->comm->ncoll + j->seq, n, any, a, r, b);
    }
    return ncclSuccess;
}

static int by_first(const void *a, const void *b)
{
    const struct job *x = a, *y = b;

    return (x->first > y->first) - (x->first < y->first);
}

ncclResult_t shp_nd_local_run(struct op *calls, size_t n)
{
    struct job *jobs = NULL;
    size_t njobs = 0;
    ncclResult_t r = match_collectives(calls, n, &jobs, &njobs);

    if (r == ncclSuccess)
        r = match_p2p(calls, n, &jobs, &njobs);
    for (size_t i = 0; r == ncclSuccess && i < njobs; i++)
        if (jobs[i].family != FAM_P2P)
            r = check_job(&jobs[i]);
    if (r == ncclSuccess && njobs > 1)
        qsort(jobs, njobs, sizeof(*jobs), by_first);
    for (size_t i = 0; r == ncclSuccess && i < njobs; i++) {
        struct job *j = &jobs[i];

        r = runners[j->kind](j->members, j->family == FAM_P2P ? 2 : j->clique->nranks);
        for (int k = 0; j->family == FAM_COLL && k < j->clique->nranks; k++)
            j->members[k]->comm->ncoll++;
    }
    free_jobs(jobs, njobs);
    return r;
}
