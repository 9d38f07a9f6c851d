/* shapetrace export and report: run the analyzer in-process and read its JSON report. Going
 * through the printed contract rather than the analyzer's structs keeps the pictures working
 * however the passes change inside. */
#define _GNU_SOURCE
#include "tools/cmd/analysis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"

json_t *shp_analysis_run(int nargs, char **args, int *status)
{
    char **argv = calloc((size_t)nargs + 3, sizeof(*argv));
    char *buf = NULL;
    size_t len = 0;
    *status = SHP_EXIT_USAGE;
    if (!argv)
        return NULL;
    argv[0] = "analyze";
    argv[1] = "--json";
    for (int i = 0; i < nargs; i++)
        argv[i + 2] = args[i];
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) {
        free(argv);
        shp_err("cannot run the analysis: out of memory");
        return NULL;
    }
    *status = shp_cmd_analyze_to(nargs + 2, argv, mem);
    fclose(mem);
    free(argv);
    json_t *report = NULL;
    if (*status == SHP_EXIT_OK || *status == SHP_EXIT_FINDINGS) {
        json_error_t err;
        report = json_loadb(buf ? buf : "", len, 0, &err);
        if (!report)
            shp_err("the analysis printed a report that does not parse (line %d: %s)", err.line,
                    err.text);
    }
    free(buf);
    return report;
}

long long shp_json_int(const json_t *obj, const char *key, long long dflt)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

const char *shp_json_text(const json_t *obj, const char *key, const char *dflt)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

static void close_inputs(struct shp_input *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        shp_trace_close(&in[i].t);
        free(in[i].path);
    }
    free(in);
}

int shp_inputs_open(char **paths, int npaths, struct shp_input **in, size_t *n)
{
    size_t cap = 0;
    *in = NULL;
    *n = 0;
    for (int i = 0; i < npaths; i++) {
        char **files = NULL;
        size_t nf = 0, k = 0;
        int rc = shp_trace_collect(paths[i], &files, &nf);
        if (rc < 0)
            shp_err("%s: %s", paths[i],
                    rc == -ENOENT && nf == 0 ? "no such file, or no traces in it" : strerror(-rc));
        for (; rc >= 0 && k < nf; k++) {
            if (*n == cap) {
                cap = cap ? cap * 2 : 16;
                struct shp_input *grown = realloc(*in, cap * sizeof(**in));
                if (!grown) {
                    shp_err("out of memory");
                    rc = -ENOMEM;
                    break;
                }
                *in = grown;
            }
            struct shp_input *x = &(*in)[*n];
            char err[256];
            if (shp_trace_open(&x->t, files[k], err, sizeof(err)) < 0) {
                shp_err("%s: %s", files[k], err);
                rc = -EINVAL;
                break;
            }
            x->path = files[k];
            x->rank = shp_trace_rank(&x->t);
            ++*n;
        }
        for (; k < nf; k++)
            free(files[k]);
        free(files);
        if (rc < 0) {
            close_inputs(*in, *n);
            *in = NULL;
            *n = 0;
            return -1;
        }
    }
    return 0;
}
