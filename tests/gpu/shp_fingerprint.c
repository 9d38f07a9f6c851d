/* shapetrace GPU checks: the fingerprint (include/shapetrace/values.h) of each FILE's bytes, one
 * "0x%016x FILE" line each, for the checks that compare the preload's kernel with the host.
 * Test equipment. Usage: shp_fingerprint FILE... (exit 2 when a file cannot be read). */
#include <stdio.h>
#include <stdlib.h>

#include "include/shapetrace/values.h"

int main(int argc, char **argv)
{
    int status = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        char *buf = NULL;
        size_t n = 0, cap = 0;
        for (;;) {
            if (!f)
                break;
            if (n == cap) {
                char *nb = realloc(buf, cap = cap ? 2 * cap : 1 << 20);
                if (!nb)
                    break;
                buf = nb;
            }
            size_t k = fread(buf + n, 1, cap - n, f);
            if (!k)
                break;
            n += k;
        }
        if (!f || ferror(f)) {
            fprintf(stderr, "shp_fingerprint: cannot read %s\n", argv[i]);
            status = 2;
        } else {
            printf("0x%016llx %s\n", (unsigned long long)shp_values_hash(buf, n), argv[i]);
        }
        if (f)
            fclose(f);
        free(buf);
    }
    return status;
}
