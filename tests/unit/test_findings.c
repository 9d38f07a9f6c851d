/* Unit tests of the analyzer's finding store (tools/analyze/findings.c), linked without the
 * command's main: adding findings, their culprits and calls, the causal order, merging a
 * worker's findings, the naming of counts as shapes, and the list of kinds against
 * docs/CONTRACTS.md and docs/analyzer.md (read from the top of the tree, where make check runs
 * the tests). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "tools/analyze/findings.h"

static struct an_finding *add(struct an_findings *fs, uint64_t comm, uint64_t seq, uint64_t t)
{
    struct an_finding *f = an_finding_add(fs, AN_COUNT_MISMATCH);
    f->comm = comm;
    f->seq = f->position = seq; /* a collective finding: executed position as seq here */
    f->t_ns = t;
    return f;
}

static size_t at(const struct an_findings *fs, size_t order)
{
    return (size_t)(an_findings_nth(fs, order) - fs->v);
}

static void test_add(void)
{
    test_group("add");
    struct an_findings fs = {0};
    struct an_finding *f = an_finding_add(&fs, AN_P2P_DTYPE_MISMATCH);
    test_cond("a finding is added", f && fs.n == 1);
    test_cond("with its kind and its kind's severity",
              f->kind == AN_P2P_DTYPE_MISMATCH && !f->error);
    test_cond("and no seq", f->seq == SHP_NONE && f->comm == 0 && f->nranks == 0);
    for (int i = 0; i < 20; i++)
        an_finding_rank(f, i % 18);
    test_cond("culprits are kept once each, up to the limit", f->nranks == AN_MAX_RANKS);
    test_cond("in the order given", f->ranks[0] == 0 && f->ranks[15] == 15);
    struct an_ref r = {.proc = 1, .index = 9};
    an_finding_event(f, &r, 500);
    an_finding_event(f, &r, 300);
    an_finding_event(f, &r, 400);
    test_cond("calls are kept", f->nevents == 3 && f->events[0].index == 9);
    test_cond("the finding's time is its earliest call's", f->t_ns == 300);
    for (int i = 0; i < 10; i++)
        an_finding_event(f, &r, 600);
    test_cond("calls past the limit are not kept", f->nevents == AN_MAX_EVENTS);
    for (int i = 0; i < 40; i++)
        an_finding_add(&fs, AN_OP_MISMATCH);
    test_cond("the store grows", fs.n == 41 && fs.v[0].kind == AN_P2P_DTYPE_MISMATCH);
    an_findings_free(&fs);
    test_cond("and is empty after free", fs.n == 0 && fs.v == NULL);
}

static void test_order(void)
{
    test_group("order");
    struct an_findings fs = {0};
    add(&fs, 7, 40, 900);     /* 0: later seq on comm 7, earlier clock than 1 */
    add(&fs, 7, 10, 950);     /* 1 */
    add(&fs, 8, 5, 920);      /* 2: another communicator: time decides */
    add(&fs, 0, SHP_NONE, 0); /* 3: no time: last */
    add(&fs, 9, 1, 920);      /* 4: same time as 2: the order added */
    an_findings_order(&fs);
    test_cond("on one communicator the lower position comes first, whatever the clocks",
              fs.v[1].order < fs.v[0].order);
    test_cond("across communicators, time decides", fs.v[0].order < fs.v[2].order);
    test_cond("equal times keep the order they were added in", fs.v[2].order < fs.v[4].order);
    test_cond("a finding without a time comes last", fs.v[3].order == 4);
    test_cond("nth gives the first", at(&fs, 0) == 1);
    test_cond("nth past the end is NULL", an_findings_nth(&fs, 5) == NULL);

    /* An unanswered receive waiting on a rank that a later-clocked finding names comes
     * after it: the rank was held up there. */
    struct an_findings h = {0};
    struct an_finding *u = an_finding_add(&h, AN_P2P_UNMATCHED);
    u->t_ns = 100;
    u->waits_on = 2;
    an_finding_rank(u, 2);
    an_finding_rank(u, 3);
    struct an_finding *m = an_finding_add(&h, AN_P2P_SIZE_MISMATCH);
    m->t_ns = 200;
    an_finding_rank(m, 1);
    an_finding_rank(m, 2);
    an_findings_order(&h);
    test_cond("an unmatched p2p comes after the finding that names the rank it waits on",
              h.v[1].order == 0 && h.v[0].order == 1);
    h.v[1].ranks[1] = 5; /* names another rank: time decides again */
    an_findings_order(&h);
    test_cond("and by time when no finding names that rank", h.v[0].order == 0);
    an_findings_free(&h);

    struct an_findings w = {0};
    add(&w, 3, 1, 100);
    add(&w, 3, 2, 200);
    size_t base = an_findings_append(&fs, &w);
    test_cond("a worker's findings are appended after the others", base == 5 && fs.n == 7);
    test_cond("whole", fs.v[6].seq == 2 && fs.v[6].comm == 3);
    fs.v[0].kind = AN_KIND_COUNT;
    fs.v[6].kind = AN_KIND_COUNT;
    an_findings_compact(&fs);
    test_cond("compact drops the marked ones and keeps the order",
              fs.n == 5 && fs.v[0].seq == 10 && fs.v[4].seq == 1);
    an_findings_free(&w);
    an_findings_free(&fs);
}

static void test_naming(void)
{
    test_group("naming");
    struct an_dims d = {.v = {{"hidden", 7168}, {"tp", 8}}, .n = 2};
    char s[96];
    an_shape(&d, 511ull * 7168, s, sizeof(s));
    test_str("a count made of a dim", s, "[511, hidden]");
    an_shape(&d, 7168, s, sizeof(s));
    test_str("a count that is a dim", s, "[hidden]");
    an_shape(&d, 3 * 896, s, sizeof(s));
    test_str("a quotient of two dims", s, "[3, hidden/tp]");
    an_shape(&d, 2ull * 7168 * 8, s, sizeof(s));
    test_str("the largest extent wins: a product", s, "[2, hidden*tp]");
    an_shape(&d, 1001, s, sizeof(s));
    test_str("a count the dims do not divide has no shape", s, "");
    an_shape(&d, SHP_NONE, s, sizeof(s));
    test_str("an unknown count has no shape", s, "");
    struct an_dims none = {.n = 0};
    an_shape(&none, 7168, s, sizeof(s));
    test_str("without dims, no shape", s, "");
    uint64_t best;
    char name[64];
    an_factor(&d, 896 * 5, &best, name, sizeof(name));
    test_cond("factor gives the extent", best == 896);
    test_str("and its name", name, "hidden/tp");

    int ranks[3] = {1, 5, 7};
    char rl[64];
    an_rank_list(ranks, 3, false, rl, sizeof(rl));
    test_str("a rank list", rl, "1, 5, 7");
    an_rank_list(ranks, 2, true, rl, sizeof(rl));
    test_str("a rank list with more", rl, "1, 5, ...");
    test_str("kinds have their contract names", an_kind_names[AN_EXPECTATION_VIOLATION],
             "expectation_violation");
    test_str("missing_rank keeps its place", an_kind_names[AN_MISSING_RANK], "missing_rank");
    test_str("the last kind", an_kind_names[AN_STALE_READ], "stale_read");
    test_cond("every kind has a name", an_kind_names[AN_KIND_COUNT - 1] != NULL);

    /* A culprit's comm rank is kept beside its global rank, once. */
    struct an_findings fs = {0};
    struct an_finding *f = an_finding_add(&fs, AN_P2P_UNMATCHED);
    an_finding_rank_in(f, 5, 1);
    an_finding_rank(f, 6);
    an_finding_rank_in(f, 5, 3);
    test_cond("comm ranks beside global ranks",
              f->nranks == 2 && f->comm_ranks[0] == 1 && f->comm_ranks[1] == -1);
    an_findings_free(&fs);
}

/* The list of kinds: each enum constant is its name in capitals, and docs/CONTRACTS.md's table
 * of kinds says, row by row in the list's order, each kind's name, severity and what. */
static void test_kinds(void)
{
    test_group("kinds");
    static const char *const constants[AN_KIND_COUNT] = {
#define AN_X_CONSTANT(kind, name, severity, what) #kind,
        AN_KINDS(AN_X_CONSTANT)
#undef AN_X_CONSTANT
    };
    bool upper = true;
    for (int k = 0; k < AN_KIND_COUNT; k++) {
        const char *n = an_kind_names[k], *c = constants[k];
        while (*n && toupper((unsigned char)*n) == *c)
            n++, c++;
        upper = upper && !*n && !*c;
    }
    test_cond("each enum constant is its kind's name in capitals", upper);

    struct an_findings fs = {0};
    test_cond("a finding takes its kind's severity",
              an_finding_add(&fs, AN_COUNT_MISMATCH)->error &&
                  !an_finding_add(&fs, AN_UNTIED_CALLS)->error &&
                  an_finding_add(&fs, AN_IMPOSSIBLE_SIZE)->error);
    an_findings_free(&fs);

    FILE *in = fopen("docs/CONTRACTS.md", "r");
    test_cond("docs/CONTRACTS.md is there to read", in != NULL);
    if (!in)
        return;
    char line[4096], want[4096];
    bool table = false;
    int k = 0, rows = 0;
    while (fgets(line, sizeof(line), in)) {
        line[strcspn(line, "\n")] = 0;
        if (!table) {
            table = !strcmp(line, "| kind | severity | what |");
            continue;
        }
        if (!strncmp(line, "|---", 4))
            continue;
        if (line[0] != '|')
            break;
        rows++;
        if (k < AN_KIND_COUNT) {
            snprintf(want, sizeof(want), "| `%s` | %s | %s |", an_kind_names[k],
                     an_kind_is_error[k] ? "error" : "warning", an_kind_whats[k]);
            test_str(an_kind_names[k], line, want);
            k++;
        }
    }
    fclose(in);
    test_cond("the contract has the table of kinds", table);
    test_cond("one row for each kind, no more", rows == AN_KIND_COUNT);
}

/* Every rule is stated: docs/analyzer.md names each kind in its text, outside its index table
 * (whose rows start with '|'), as the rule that gives it. */
static void test_kinds_have_rules(void)
{
    test_group("kinds have rules");
    FILE *in = fopen("docs/analyzer.md", "r");
    test_cond("docs/analyzer.md is there to read", in != NULL);
    if (!in)
        return;
    static int stated[AN_KIND_COUNT];
    char line[4096], quoted[128];
    while (fgets(line, sizeof(line), in)) {
        if (line[0] == '|')
            continue;
        for (int k = 0; k < AN_KIND_COUNT; k++) {
            snprintf(quoted, sizeof(quoted), "`%s`", an_kind_names[k]);
            stated[k] += strstr(line, quoted) != NULL;
        }
    }
    fclose(in);
    for (int k = 0; k < AN_KIND_COUNT; k++) {
        char what[160];
        snprintf(what, sizeof(what), "docs/analyzer.md states the rule of %s", an_kind_names[k]);
        test_cond(what, stated[k] > 0);
    }
}

int main(void)
{
    test_add();
    test_order();
    test_naming();
    test_kinds();
    test_kinds_have_rules();
    return test_report();
}
