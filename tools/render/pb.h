/* shapetrace render: the protobuf wire format, as much of it as a Perfetto trace needs (varints,
 * fixed64, length-delimited fields), written into growable byte buffers. No dependency. */
#ifndef SHAPETRACE_PB_H
#define SHAPETRACE_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Raw bytes, and a base-128 varint. */
void shp_pb_raw(struct shp_pb *b, const void *data, size_t len);
void shp_pb_varint(struct shp_pb *b, uint64_t v);

/* Fields: field number `field` with wire type varint (0), fixed64 (1) or length-delimited (2).
 * shp_pb_msg appends the contents of `sub` as an embedded message. */
void shp_pb_uint(struct shp_pb *b, unsigned field, uint64_t v);
void shp_pb_fixed64(struct shp_pb *b, unsigned field, uint64_t v);
void shp_pb_bytes(struct shp_pb *b, unsigned field, const void *data, size_t len);
void shp_pb_str(struct shp_pb *b, unsigned field, const char *s);
void shp_pb_msg(struct shp_pb *b, unsigned field, const struct shp_pb *sub);

#endif
