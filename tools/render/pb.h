/* shapetrace render: the protobuf wire format, as much of it as a Perfetto trace needs (varints,
 * fixed64, length-delimited fields), written into growable byte buffers. No dependency. The
 * small writes are inline: a Perfetto export makes a few hundred million of them. */
#ifndef SHAPETRACE_PB_H
#define SHAPETRACE_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A growable byte buffer. Start zeroed; `oom` is set once an allocation failed, after which
 * appends do nothing (check it once, at the end). Not thread-safe. */
struct shp_pb {
    uint8_t *p;
    size_t len, cap;
    bool oom;
};

void shp_pb_free(struct shp_pb *b);
/* Forget the contents, keep the memory. */
static inline void shp_pb_reset(struct shp_pb *b)
{
    b->len = 0;
}

/* Makes room for `more` bytes; false when out of memory (then b->oom). Not for direct use. */
bool shp_pb_grow(struct shp_pb *b, size_t more);

static inline bool shp_pb_room(struct shp_pb *b, size_t more)
{
    return __builtin_expect(b->len + more <= b->cap, 1) || shp_pb_grow(b, more);
}

/* Raw bytes, and a base-128 varint. */
void shp_pb_raw(struct shp_pb *b, const void *data, size_t len);

static inline void shp_pb_varint(struct shp_pb *b, uint64_t v)
{
    if (!shp_pb_room(b, 10))
        return;
    uint8_t *p = b->p + b->len;
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    b->len = (size_t)(p - b->p);
}

/* Fields: field number `field` with wire type varint (0), fixed64 (1) or length-delimited (2).
 * shp_pb_msg appends the contents of `sub` as an embedded message. */
static inline void shp_pb_uint(struct shp_pb *b, unsigned field, uint64_t v)
{
    shp_pb_varint(b, (uint64_t)field << 3);
    shp_pb_varint(b, v);
}

void shp_pb_fixed64(struct shp_pb *b, unsigned field, uint64_t v);
void shp_pb_bytes(struct shp_pb *b, unsigned field, const void *data, size_t len);
void shp_pb_str(struct shp_pb *b, unsigned field, const char *s);
void shp_pb_msg(struct shp_pb *b, unsigned field, const struct shp_pb *sub);

/* An embedded message written in place: shp_pb_begin writes its key and a one-byte length, and
 * returns where that length is; shp_pb_end, once the message's fields are written, sets it
 * (moving the fields along when the length takes more than one byte, over 127). */
static inline size_t shp_pb_begin(struct shp_pb *b, unsigned field)
{
    shp_pb_varint(b, (uint64_t)field << 3 | 2);
    if (!shp_pb_room(b, 1))
        return 0;
    b->p[b->len] = 0;
    return b->len++;
}

void shp_pb_end_long(struct shp_pb *b, size_t at, size_t len);

static inline void shp_pb_end(struct shp_pb *b, size_t at)
{
    if (b->oom)
        return;
    size_t len = b->len - at - 1;
    if (__builtin_expect(len < 0x80, 1))
        b->p[at] = (uint8_t)len;
    else
        shp_pb_end_long(b, at, len);
}

#endif
