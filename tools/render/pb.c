/* shapetrace render: protobuf wire-format writing for `export --format perfetto` (see pb.h). */
#include "tools/render/pb.h"

#include <stdlib.h>
#include <string.h>

void shp_pb_free(struct shp_pb *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

bool shp_pb_grow(struct shp_pb *b, size_t more)
{
    if (b->oom)
        return false;
    if (b->len + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void shp_pb_raw(struct shp_pb *b, const void *data, size_t len)
{
    if (!len || !shp_pb_room(b, len))
        return;
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

void shp_pb_fixed64(struct shp_pb *b, unsigned field, uint64_t v)
{
    shp_pb_varint(b, (uint64_t)field << 3 | 1);
    if (!shp_pb_room(b, 8))
        return;
    for (int i = 0; i < 8; i++)
        b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

void shp_pb_bytes(struct shp_pb *b, unsigned field, const void *data, size_t len)
{
    shp_pb_varint(b, (uint64_t)field << 3 | 2);
    shp_pb_varint(b, len);
    shp_pb_raw(b, data, len);
}

void shp_pb_str(struct shp_pb *b, unsigned field, const char *s)
{
    shp_pb_bytes(b, field, s, strlen(s));
}

void shp_pb_msg(struct shp_pb *b, unsigned field, const struct shp_pb *sub)
{
    if (sub->oom)
        b->oom = true;
    shp_pb_bytes(b, field, sub->p, sub->len);
}

void shp_pb_end_long(struct shp_pb *b, size_t at, size_t len)
{
    uint8_t v[10];
    size_t n = 0;
    for (uint64_t x = len; x >= 0x80; x >>= 7)
        v[n++] = (uint8_t)(x | 0x80);
    v[n] = (uint8_t)(len >> (7 * n));
    n++;
    if (!shp_pb_room(b, n - 1))
        return;
    memmove(b->p + at + n, b->p + at + 1, len);
    memcpy(b->p + at, v, n);
    b->len += n - 1;
}
