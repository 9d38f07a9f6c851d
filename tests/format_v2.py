"""shapetrace tests: a trace of format version 4 or 6 (5 or 7) rewritten as a writer of version 2
(or 3) would have written it, for the checks that the two read alike (test_preload.py, and
tests/gpu/v2_same.py on real torch traces). Version 4 stores a stack that shares its outer
frames with a stored one as its own frames and a reference (SHP_REC_STACK_TAIL), and a 2-D copy
in a compact record (SHP_REC_COPY2D_C); version 6 adds compact records of a communicator's end
(SHP_REC_COMM_END_C, whose id, handle, rank and size are its communicator's record's), of an
allocation or a free (SHP_REC_ALLOC_C), and of a module (SHP_REC_MODULE_C). Version 2 stores the
whole stack and the full records. Everything else is copied as it is; the header's communicator
offsets and the value records' call offsets follow the records that move. Not a test file:
run.sh runs test_*.py."""
import os
import re
import struct
import subprocess

COMM_OFF = 816  # offsetof(struct shp_file_header, comm_off), 384 entries
STACK, COPY, VALUE, COPY2D_C, STACK_TAIL = 8, 5, 18, 19, 20
COMM, ALLOC, MODULE, COMM_END_C, ALLOC_C, MODULE_C = 1, 6, 9, 21, 22, 23
NEW = (COPY2D_C, STACK_TAIL, COMM_END_C, ALLOC_C, MODULE_C)
P48 = (1 << 48) - 1
# The ops of the frees, from the call list (a free's record holds its argument, not an out).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "shapetrace",
                       "calls.h")) as _f:
    FREES = {int(n) for n in re.findall(r"X\((\d+), \w+, SHP_CLS_FREE,", _f.read())}


def word_of(rtype, size):
    return struct.pack("<II", (0xA7 << 24) | (rtype << 16) | (size // 8), 0)


def _i16(v):
    return struct.unpack("<h", struct.pack("<H", v & 0xFFFF))[0]


def _ev(rec, stack, device, out=0, aux=(-1, -1)):
    """The struct shp_ev of a compact record's head (trace.h), completed as the full one is."""
    t, tid, op, flags, group, done = struct.unpack_from("<QIBBHQ", rec, 8)
    result = _i16(done) if done else 0
    dur = (done >> 16) - 1 if done else (1 << 64) - 1
    return struct.pack("<QIHHIIiiQQii", t, tid, op, flags, stack, group, result, device, dur,
                       out if done else 0, *aux), done


def _full_comm_end(rec, data):
    """A SHP_REC_COMM_END_C as the SHP_REC_COMM it replaces: its communicator's id, handle, rank
    and size, as a reader takes them from the record the header's table indexes."""
    stack, idx, kind = struct.unpack_from("<IHB", rec, 32)
    c = struct.unpack_from("<Q", data, COMM_OFF + 8 * idx)[0]
    out, aux0, aux1 = struct.unpack_from("<Qii", data, c + 48)
    cid, _, handle, rank, nranks = struct.unpack_from("<QQQii", data, c + 64)
    ev, _ = _ev(rec, stack, -1)
    body = struct.pack("<QQQiiiiIB3x", cid, 0, handle or out, aux0 if aux0 >= 0 else rank,
                       aux1 if aux1 > 0 else nranks, 0, 0, 0, kind)
    return word_of(COMM, 112) + ev + body


def _full_alloc(rec):
    """A SHP_REC_ALLOC_C as the SHP_REC_ALLOC it replaces (an allocation's pointer is its out)."""
    ptr, size_dev, stack, kind = struct.unpack_from("<QQIB", rec, 32)
    op = struct.unpack_from("<B", rec, 20)[0]
    is_free = op in FREES
    ev, _ = _ev(rec, stack, _i16(size_dev >> 48), 0 if is_free else ptr)
    body = struct.pack("<QQQIB3x", ptr if is_free else 0, size_dev & P48, 0, 0, kind)
    return word_of(ALLOC, 96) + ev + body


def _full_module(rec):
    """A SHP_REC_MODULE_C as the SHP_REC_MODULE it replaces."""
    blo, bhi, lo_off, length, plen, idlen = struct.unpack_from("<IIIIHB", rec, 8)
    base = bhi << 32 | blo
    bid, path = rec[28:28 + idlen], rec[28 + idlen:28 + idlen + plen]
    size = (72 + plen + 7) & ~7
    body = struct.pack("<QQQB5xH", base, base + lo_off, base + lo_off + length, idlen, plen)
    return (word_of(MODULE, size) + body + bid.ljust(32, b"\0") + path).ljust(size, b"\0")


def _full_copy(rec):
    """A SHP_REC_COPY2D_C as the SHP_REC_COPY it replaces (trace.h)."""
    dst_dev, src_kind, stream_slo, width_shi, sp_hlo, dp_hhi = struct.unpack_from("<6Q", rec, 32)
    p48, top = (lambda v: v & P48), (lambda v: v >> 48)
    ev, _ = _ev(rec, top(stream_slo) | top(width_shi) << 16, _i16(top(dst_dev)))
    body = struct.pack("<8QiiB7x", p48(dst_dev), p48(src_kind), p48(width_shi),
                       top(sp_hlo) | top(dp_hhi) << 16, p48(sp_hlo), p48(dp_hhi),
                       p48(stream_slo), 0, -1, -1, top(src_kind))
    return word_of(COPY, 144) + ev + body


def as_version_2(src, dst, craft):
    """Rewrite trace src into dst; craft is tests/craft's shp_craft, which makes the checks of
    the records written here. Returns how many records of each new type it rewrote
    (by type: SHP_REC_COPY2D_C, SHP_REC_STACK_TAIL and version 6's three) and the bytes of
    records before and after.
    Stops rewriting at a record that is not published (a writer killed mid-way): the rest is
    copied as it is."""
    data = open(src, "rb").read()
    tail = min(struct.unpack_from("<Q", data, 72)[0], len(data))
    out, whole, moved, n = bytearray(data[:4096]), {}, {}, {k: 0 for k in NEW}
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
        elif rtype == COMM_END_C:
            rec = _full_comm_end(rec, data)
        elif rtype == ALLOC_C:
            rec = _full_alloc(rec)
        elif rtype == MODULE_C:
            rec = _full_module(rec)
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
    struct.pack_into("<I", out, 8, {4: 2, 5: 3, 6: 2, 7: 3}[version])
    struct.pack_into("<QQ", out, 72, len(out), len(out))  # tail, allocated
    open(dst, "wb").write(out)
    p = subprocess.run([craft, dst], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return n, tail - 4096, len(out) - 4096
