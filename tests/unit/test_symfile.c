/* shapetrace unit tests: the symbol file (tools/lib/symfile.c): what is written reads back, and
 * every cut or flipped byte of a good file is refused whole or read within bounds. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"
#include "tools/lib/symfile.h"

static const uint8_t id_a[20] = {0x53, 0x0e, 0xde, 0xb9, 1,  2,  3,  4,  5,  6,
                                 7,    8,    9,    10,   11, 12, 13, 14, 15, 16};
static const uint8_t id_b[4] = {0xab, 0xcd, 0xef, 0x01};

static char dir[] = "/tmp/shapetrace-symfile-XXXXXX";

static void put(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}

/* The file the writer makes for two modules, frames out of order on purpose. */
static char *good_file(size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    shp_symfile_write_header(f);
    shp_symfile_write_module(f, id_a, sizeof(id_a), "libtorch_cuda.so");
    shp_symfile_write_frame(f, 0xf1c02a, true, "_ZN2at6native5copy_Ev (copy.cpp:42)");
    shp_symfile_write_frame(f, 0x10, false, "first+0x10 (libtorch_cuda.so)");
    shp_symfile_write_frame(f, 0x10, true, "first+0xf (libtorch_cuda.so)");
    shp_symfile_write_module(f, id_b, sizeof(id_b), "mod\nwith a newline");
    shp_symfile_write_frame(f, 0x116a, false, "mod_run (mod.c:12)\nnot a line");
    shp_symfile_write_end(f, 4);
    fclose(f);
    return buf;
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    char path[256];
    snprintf(path, sizeof(path), "%s/h.symbols", dir);
    size_t len;
    char *good = good_file(&len);

    test_group("symfile: round trip");
    put(path, good, len);
    struct shp_symfile *f = shp_symfile_load(path);
    test_cond("a written file loads", f != NULL);
    test_str("a return address", shp_symfile_find(f, id_a, sizeof(id_a), 0xf1c02a, true),
             "_ZN2at6native5copy_Ev (copy.cpp:42)");
    test_str("the innermost frame at the same offset is its own entry",
             shp_symfile_find(f, id_a, sizeof(id_a), 0x10, false), "first+0x10 (libtorch_cuda.so)");
    test_str("and the return address there", shp_symfile_find(f, id_a, sizeof(id_a), 0x10, true),
             "first+0xf (libtorch_cuda.so)");
    test_str("a newline in a text is written as ?", shp_symfile_find(f, id_b, 4, 0x116a, false),
             "mod_run (mod.c:12)?not a line");
    test_cond("another offset: none", !shp_symfile_find(f, id_a, sizeof(id_a), 0x11, false));
    test_cond("another build id: none", !shp_symfile_find(f, id_a, 19, 0xf1c02a, true));
    test_cond("no build id: none", !shp_symfile_find(f, NULL, 0, 0x10, false));
    shp_symfile_free(f);
    test_cond("NULL file: none", !shp_symfile_find(NULL, id_a, sizeof(id_a), 0x10, false));
    test_cond("a long build id is not written",
              shp_symfile_write_module(stdout, id_a, 33, "x") != 0);

    test_group("symfile: damaged");
    /* stderr would get one warning; quiet it for the loops below. */
    fflush(stderr);
    if (!freopen("/dev/null", "w", stderr))
        return 1;
    size_t loaded = 0;
    for (size_t cut = 0; cut < len; cut++) {
        put(path, good, cut);
        f = shp_symfile_load(path);
        loaded += f != NULL;
        shp_symfile_free(f);
    }
    test_cond("every cut of the file is refused", loaded == 0);
    size_t magic_loaded = 0, flips_wrong = 0;
    for (size_t at = 0; at < len; at++) {
        char *bad = malloc(len);
        memcpy(bad, good, len);
        bad[at] ^= 0x41;
        put(path, bad, len);
        f = shp_symfile_load(path);
        if (f) {
            magic_loaded += at < strlen(SHP_SYMFILE_MAGIC);
            const char *t = shp_symfile_find(f, id_a, sizeof(id_a), 0xf1c02a, true);
            flips_wrong += t && strlen(t) > len;
        }
        shp_symfile_free(f);
        free(bad);
    }
    test_cond("a flipped byte is refused or read within the file", flips_wrong == 0);
    test_cond("a flipped byte of the first line is refused", magic_loaded == 0);
    put(path, "shapetrace symbols 1\nend 0\n", 27);
    f = shp_symfile_load(path);
    test_cond("an empty but whole file loads", f != NULL);
    shp_symfile_free(f);
    snprintf(path, sizeof(path), "%s/none.symbols", dir);
    test_cond("a missing file: none", shp_symfile_load(path) == NULL);

    test_group("symfile: names");
    char p[64];
    test_cond("a host", shp_symfile_path(p, sizeof(p), "/d", "node-1", 64) &&
                            !strcmp(p, "/d/node-1.symbols"));
    test_cond("the host field's 64 bytes without a NUL",
              shp_symfile_path(p, sizeof(p), "d", "abcdefgh", 3) && !strcmp(p, "d/abc.symbols"));
    test_cond("an empty host", !shp_symfile_path(p, sizeof(p), "/d", "", 64));
    test_cond("a host with a slash", !shp_symfile_path(p, sizeof(p), "/d", "../x", 64));
    test_cond("a dot host", !shp_symfile_path(p, sizeof(p), "/d", ".hidden", 64));
    test_cond("a control character", !shp_symfile_path(p, sizeof(p), "/d", "a\tb", 64));
    test_cond("too long for out", !shp_symfile_path(p, 8, "/d", "node-1", 64));

    free(good);
    snprintf(path, sizeof(path), "%s/h.symbols", dir);
    unlink(path);
    rmdir(dir);
    return test_report();
}
