/* shapetrace test doubles: what the libcudart double exports beyond CUDA's own API, for tests that
 * need to ask it where a pointer lives. */
#ifndef SHP_DOUBLES_SHP_DOUBLE_H
#define SHP_DOUBLES_SHP_DOUBLE_H

/* Returns 1 if p lies in the range the libcudart double hands device memory out of (allocated or
 * not), else 0. Thread-safe. Only the double defines it: do not call it against the real libcudart.
 */
int shp_double_is_device(const void *p);

#endif
