"""shapetrace tests: a trace of format version 4 (or 5) rewritten as a writer of version 2 (or
3) would have written it, for the checks that the two read alike (test_preload.py, and
tests/gpu/v2_same.py on real torch traces). Version 4 stores a stack that shares its outer
frames with a stored one as its own frames and a reference (SHP_REC_STACK_TAIL), and a 2-D copy
in a compact record (SHP_REC_COPY2D_C); version 2 stores the whole stack and the full copy
record. Everything else is copied as it is; the header's communicator offsets and the value
records' call offsets follow the records that move. Not a test file: run.sh runs test_*.py."""
import struct
import subprocess

COMM_OFF = 816  # offsetof(struct shp_file_header, comm_off), 384 entries
STACK, COPY, VALUE, COPY2D_C, STACK_TAIL = 8, 5, 18, 19, 20


def word_of(rtype, size):
    return struct.pack("<II", (0xA7 << 24) | (rtype << 16) | (size // 8), 0)


def _full_copy(rec):
    """A SHP_REC_COPY2D_C as the SHP_REC_COPY it replaces (trace.h)."""
    t, tid, op, flags, group, done = struct.unpack_from("<QIBBHQ", rec, 8)
    dst_dev, src_kind, stream_slo, width_shi, sp_hlo, dp_hhi = struct.unpack_from("<6Q", rec, 32)
    p48, top = (lambda v: v & ((1 << 48) - 1)), (lambda v: v >> 48)
    i16 = lambda v: struct.unpack("<h", struct.pack("<H", v & 0xFFFF))[0]
    result = i16(done) if done else 0
    dur = (done >> 16) - 1 if done else (1 << 64) - 1
    ev = struct.pack("<QIHHIIiiQQii", t, tid, op, flags, top(stream_slo) | top(width_shi) << 16,
                     group, result, i16(top(dst_dev)), dur, 0, -1, -1)
    body = struct.pack("<8QiiB7x", p48(dst_dev), p48(src_kind), p48(width_shi),
                       top(sp_hlo) | top(dp_hhi) << 16, p48(sp_hlo), p48(dp_hhi),
                       p48(stream_slo), 0, -1, -1, top(src_kind))
    return word_of(COPY, 144) + ev + body


def as_version_2(src, dst, craft):
    """Rewrite trace src into dst; craft is tests/craft's shp_craft, which makes the checks of
    the records written here. Returns how many records of each new type it rewrote
    ({SHP_REC_COPY2D_C: n, SHP_REC_STACK_TAIL: m}) and the bytes of records before and after.
    Stops rewriting at a record that is not published (a writer killed mid-way): the rest is
    copied as it is."""
    data = open(src, "rb").read()
    tail = min(struct.unpack_from("<Q", data, 72)[0], len(data))
    out, whole, moved, n = bytearray(data[:4096]), {}, {}, {COPY2D_C: 0, STACK_TAIL: 0}
    off = 4096
    while off + 8 <= tail:
        w = struct.unpack_from("<I", data, off)[0]
        rtype, size = (w >> 16) & 0xFF, (w & 0xFFFF) * 8
        if w >> 24 != 0xA7 or not size or off + size > tail:
            break
        rec = data[off:off + size]
        moved[off] = len(out)
        if rtype == STACK:
            sid, nf = struct.unpack_from("<II", rec, 8)
            whole[sid] = list(struct.unpack_from(f"<{nf}Q", rec, 16))
        elif rtype == STACK_TAIL:
            sid, nf, of, start = struct.unpack_from("<IIII", rec, 8)
            assert of < sid and 1 <= start < len(whole[of]), (sid, of, start)
            fr = (list(struct.unpack_from(f"<{nf}Q", rec, 24)) + whole[of][start:])[:64]
            whole[sid] = fr
            rec = word_of(STACK, 16 + 8 * len(fr)) + struct.pack(f"<II{len(fr)}Q", sid, len(fr),
                                                                *fr)
        elif rtype == COPY2D_C:
            rec = _full_copy(rec)
        elif rtype == VALUE:
            call = struct.unpack_from("<Q", rec, 16)[0]
            rec = bytearray(rec)
            struct.pack_into("<Q", rec, 16, moved.get(call, call))
        if rtype in n:
            n[rtype] += 1
        out += rec
        off += size
    rest = len(out) - off  # where the records copied as they are moved by
    out += data[off:tail]
    for i in range(384):
        o = struct.unpack_from("<Q", out, COMM_OFF + 8 * i)[0]
        if o:
            struct.pack_into("<Q", out, COMM_OFF + 8 * i, moved[o] if o < off else o + rest)
    version = struct.unpack_from("<I", out, 8)[0]
    struct.pack_into("<I", out, 8, {4: 2, 5: 3}[version])
    struct.pack_into("<QQ", out, 72, len(out), len(out))  # tail, allocated
    open(dst, "wb").write(out)
    p = subprocess.run([craft, dst], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return n, tail - 4096, len(out) - 4096
