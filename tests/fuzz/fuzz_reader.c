/* shapetrace tests: a libFuzzer harness over the trace reader, the `dump --json` path (stacks
 * loaded, every record decoded and printed) and `analyze`, text and --json, with the mutated trace
 * next to a valid peer (SHP_FUZZ_PEER) so that alignment, p2p and lineage have a rank to compare
 * with. Its mutator keeps the record checks valid, so that mutated records reach the decoders
 * instead of being stopped as torn. Built by `make fuzz`. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/rec.h"
#include "tools/analyze/analyze.h"
#include "tools/lib/event.h"
#include "tools/lib/reader.h"
#include "tools/lib/session.h"
#include "tools/lib/stacks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed);

static FILE *sink;
static char expect_path[64];

/* An expectation file that selects copies and collectives, so that the expectation pass runs. */
static void make_expect(void)
{
    static const char text[] =
        "{\"dims\": {\"hidden\": 64, \"tp\": 2},\n"
        " \"expect\": [{\"name\": \"rows\", \"match\": {\"op\": \"cudaMemcpy*\"},\n"
        "             \"shape\": [\"*\", \"hidden/tp\"]},\n"
        "            {\"name\": \"gathers\", \"match\": {\"op\": \"nccl*\"},\n"
        "             \"shape\": [\"*\", \"hidden\"], \"dtype\": \"fp32\"}]}\n";
    int fd = memfd_create("fuzz.expect.json", 0);
    if (fd >= 0 && write(fd, text, sizeof(text) - 1) == (ssize_t)(sizeof(text) - 1))
        snprintf(expect_path, sizeof(expect_path), "/proc/self/fd/%d", fd);
}

/* analyze PATH [PEER], as the command runs it: the session, the run, the report (text or
 * JSON) and its errors into the sink. */
static void analyze(const char *path, bool json, bool expect)
{
    const char *peer = getenv("SHP_FUZZ_PEER");
    char *paths[] = {(char *)path, (char *)peer};
    struct an_options o;
    memset(&o, 0, sizeof(o));
    o.dims.n = 2;
    snprintf(o.dims.v[0].name, sizeof(o.dims.v[0].name), "hidden");
    o.dims.v[0].value = 64;
    snprintf(o.dims.v[1].name, sizeof(o.dims.v[1].name), "tp");
    o.dims.v[1].value = 2;
    if (expect && expect_path[0])
        o.expect = expect_path;
    FILE *out = stdout, *err = stderr;
    stdout = stderr = sink;
    struct shp_session s;
    struct an_result *res = NULL;
    if (shp_session_open(&s, paths, peer && *peer ? 2 : 1, SHP_SESSION_UNIQUE, "the analysis") >=
            0 &&
        an_run(&o, &s, &res) == 0) {
        if (json)
            an_print_json(res, sink);
        else
            an_print_text(res, sink, false);
    }
    an_result_free(res);
    shp_session_close(&s);
    an_options_free(&o);
    fflush(sink);
    stdout = out;
    stderr = err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sink) {
        sink = fopen("/dev/null", "w");
        make_expect();
    }
    /* The reader maps a file: give it one, in memory. */
    int fd = memfd_create("fuzz.shptrace", MFD_CLOEXEC);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char path[64], err[256];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct shp_trace t;
    if (shp_trace_open(&t, path, err, sizeof(err)) == 0) {
        struct shp_stacks *st = shp_stacks_load(&t, false);
        struct shp_cursor cur = {0};
        unsigned type;
        size_t rsize;
        const struct shp_rec *r;
        while ((r = shp_trace_next(&t, &cur, &type, &rsize))) {
            struct shp_event e;
            if (shp_event_decode(&t, r, type, &e)) {
                struct shp_span rd, wr;
                shp_event_spans(&e, &rd, &wr);
                shp_event_json(sink, &t, st, &e);
            }
        }
        shp_trace_complete(&t, &cur);
        shp_trace_incomplete_why(&t, &cur);
        shp_stacks_free(st);
        shp_trace_close(&t);
        analyze(path, true, size & 8);
        analyze(path, false, !(size & 8));
    }
    close(fd);
    return 0;
}

/* Publishes again every record of the chain that still has a record word, so that its check
 * matches what it now holds. The one place that knows how checks are made. */
static void refresh_checks(uint8_t *data, size_t size)
{
    for (size_t off = SHP_HEADER_SIZE; off + 8 <= size;) {
        uint32_t w;
        memcpy(&w, data + off, 4);
        size_t rs = SHP_REC_WORD_SIZE(w);
        if (SHP_REC_WORD_MAGIC(w) != SHP_REC_MAGIC || rs < 8 || off + rs > size || off % 8 != 0)
            break;
        uint8_t *rec = data + off;
        shp_rec_publish(rec, SHP_REC_WORD_TYPE(w), rs);
        off += rs;
    }
}

/* Mutates the bytes, then makes the records' checks match again. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    size = LLVMFuzzerMutate(data, size, max_size);
    if (size < SHP_HEADER_SIZE)
        return size;
    struct shp_file_header *h = (struct shp_file_header *)data;
    if (seed & 1)
        h->tail = size; /* most of the time, the records reach the end */
    refresh_checks(data, size);
    return size;
}
