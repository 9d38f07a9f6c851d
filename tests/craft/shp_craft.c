/* shapetrace tests: gives a crafted trace valid record checks, with common/'s publishing
 * function, so that a test's malformed records reach the readers instead of being stopped as torn.
 * Usage: shp_craft FILE [OFFSET...]: publishes the records at the OFFSETs, or, without any, every
 * record of the chain from the header on (each found by the size in its first word). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rec.h"

static int publish(unsigned char *m, size_t len, uint64_t off)
{
    if (off + 8 > len)
        return -1;
    uint32_t w = ((struct shp_rec *)(m + off))->word;
    size_t size = SHP_REC_WORD_SIZE(w);
    if (SHP_REC_WORD_MAGIC(w) != SHP_REC_MAGIC || size < 8 || off + size > len)
        return -1;
    shp_rec_publish(m + off, SHP_REC_WORD_TYPE(w), size);
    return (int)(size / 8);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: shp_craft FILE [OFFSET...]\n");
        return 2;
    }
    int fd = open(argv[1], O_RDWR);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < SHP_HEADER_SIZE) {
        perror(argv[1]);
        return 2;
    }
    size_t len = (size_t)st.st_size;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return 2;
    int n = 0;
    if (argc > 2) {
        for (int i = 2; i < argc; i++)
            if (publish(m, len, strtoull(argv[i], NULL, 0)) < 0) {
                fprintf(stderr, "shp_craft: no record word at %s\n", argv[i]);
                return 1;
            } else {
                n++;
            }
    } else {
        for (uint64_t off = SHP_HEADER_SIZE; off + 8 <= len; n++) {
            int words = publish(m, len, off);
            if (words < 0)
                break;
            off += (uint64_t)words * 8;
        }
    }
    munmap(m, len);
    close(fd);
    printf("%d\n", n);
    return 0;
}
