/* shapetrace unit test: the fingerprint of include/shapetrace/values.h. Its bits are pinned (the
 * numbers come from tests/ptx_sim.py's port of the definition, which the suite also runs the
 * kernel's PTX against), it does not depend on how the words are split between blocks and
 * threads, and it tells apart what it must: one bit, one byte moved, trailing zeros, a word
 * moved. Also the value record's layout and check. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "include/shapetrace/trace.h"
#include "include/shapetrace/values.h"
#include "tests/unit/harness.h"

/* The sums a grid of `blocks` x `threads` computes, added as the preload adds them. */
static uint64_t grid(const void *p, size_t n, unsigned blocks, unsigned threads)
{
    uint64_t a = 0, b = 0;
    for (unsigned bl = 0; bl < blocks; bl++)
        for (unsigned t = 0; t < threads; t++)
            shp_values_sums(p, n, (uint64_t)bl * threads + t, n / 8, (uint64_t)blocks * threads, &a,
                            &b);
    shp_values_tail_sums(p, n, &a, &b);
    return shp_values_final(a, b, n);
}

int main(void)
{
    unsigned char buf[1000], other[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (unsigned char)((i * 7 + 3) & 255);

    test_group("pinned bits");
    unsigned char seq[13], zeros[64] = {0};
    for (int i = 0; i < 13; i++)
        seq[i] = (unsigned char)i;
    test_cond("no bytes", shp_values_hash(NULL, 0) == 0x58e0906e2edc56f0ull);
    test_cond("13 bytes 0..12", shp_values_hash(seq, 13) == 0x1e77cdf446b6ebd4ull);
    test_cond("1000 bytes", shp_values_hash(buf, 1000) == 0xba3624bc690d1112ull);
    test_cond("64 zero bytes", shp_values_hash(zeros, 64) == 0x84a2fa48f917bb0eull);

    test_group("the launch does not matter");
    bool same = true;
    for (size_t n = 0; n <= 200; n += 7)
        for (unsigned bl = 1; bl <= 5; bl++)
            for (unsigned t = 1; t <= 9; t += 4)
                same &= grid(buf, n, bl, t) == shp_values_hash(buf, n);
    test_cond("every grid of up to 5 x 9 gives the host's bits, for 0 to 200 bytes", same);
    same = true;
    for (unsigned off = 0; off < 8; off++) {
        memcpy(other + off, buf, 100);
        same &= shp_values_hash(other + off, 100) == shp_values_hash(buf, 100);
    }
    test_cond("the bytes' address does not matter", same);
    test_cond("blocks: 1 for a few bytes, at most the maximum",
              shp_values_blocks(0) == 1 && shp_values_blocks(8) == 1 &&
                  shp_values_blocks(1ull << 30) == SHP_VALUES_MAX_BLOCKS);

    test_group("what it tells apart");
    memcpy(other, buf, 1000);
    other[500] ^= 1;
    test_cond("one bit", shp_values_hash(other, 1000) != shp_values_hash(buf, 1000));
    memcpy(other, buf, 1000);
    other[998] ^= 0x80;
    test_cond("one bit of the tail", shp_values_hash(other, 1000) != shp_values_hash(buf, 1000));
    test_cond("trailing zeros", shp_values_hash(zeros, 8) != shp_values_hash(zeros, 16) &&
                                    shp_values_hash(zeros, 3) != shp_values_hash(zeros, 4));
    memcpy(other, buf, 1000);
    memcpy(other, buf + 8, 8);
    memcpy(other + 8, buf, 8);
    test_cond("two words swapped", shp_values_hash(other, 1000) != shp_values_hash(buf, 1000));

    test_group("the value record");
    struct shp_rec_value r;
    memset(&r, 0, sizeof(r));
    r.fp = 1;
    r.status = SHP_VALUE_PENDING;
    uint32_t c0 = shp_rec_check(&r, SHP_REC_VALUE, sizeof(r));
    r.fp = 0x1234;
    r.status = SHP_VALUE_DONE;
    test_cond("completing it leaves its check", shp_rec_check(&r, SHP_REC_VALUE, sizeof(r)) == c0);
    r.bytes = 7;
    test_cond("its other fields are checked", shp_rec_check(&r, SHP_REC_VALUE, sizeof(r)) != c0);
    test_cond("its type is known, of its size",
              shp_rec_min_size(SHP_REC_VALUE) == sizeof(r) && shp_rec_as(SHP_REC_VALUE) == 18 &&
                  SHP_REC_VALUE == 18 && !shp_rec_is_call(SHP_REC_VALUE));
    test_cond("versions 2 to 7 are read, 1 and 8 not",
              shp_trace_version_known(2) && shp_trace_version_known(3) &&
                  shp_trace_version_known(4) && shp_trace_version_known(5) &&
                  shp_trace_version_known(6) && shp_trace_version_known(7) &&
                  !shp_trace_version_known(1) && !shp_trace_version_known(8));
    test_cond("versions 3, 5 and 7 may hold value records, 2, 4, 6 and 9 not",
              shp_trace_version_values(3) && shp_trace_version_values(5) &&
                  shp_trace_version_values(7) && !shp_trace_version_values(2) &&
                  !shp_trace_version_values(4) && !shp_trace_version_values(6) &&
                  !shp_trace_version_values(9));
    return test_report();
}
