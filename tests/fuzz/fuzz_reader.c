/* shapetrace tests: a libFuzzer harness over the trace reader and the `dump --json` path (stacks
 * loaded, every record decoded and printed). Its mutator keeps the record checks valid, so that
 * mutated records reach the decoders instead of being stopped as torn. Built by `make fuzz`. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/rec.h"
#include "tools/lib/event.h"
#include "tools/lib/reader.h"
#include "tools/lib/stacks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed);

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sink)
        sink = fopen("/dev/null", "w");
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
    }
    close(fd);
    return 0;
}

/* Mutates the bytes, then publishes again every record of the chain that still has a record
 * word, so that its check matches what it now holds. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    size = LLVMFuzzerMutate(data, size, max_size);
    if (size < SHP_HEADER_SIZE)
        return size;
    struct shp_file_header *h = (struct shp_file_header *)data;
    if (seed & 1)
        h->tail = size; /* most of the time, the records reach the end */
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
    return size;
}
