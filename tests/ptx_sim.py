"""shapetrace tests: a PTX interpreter for the fingerprint kernel (preload/values_ptx.h), so that
`make check` runs the very text the preload hands the driver, without a GPU, and compares its
bits with the hash's definition (include/shapetrace/values.h, ported below).

It knows the instructions that kernel uses and nothing more: an instruction it does not know is
an error, not a guess. Threads of a block run one at a time up to each bar.sync; memory is a map
of the bytes a test lays out, and a load outside them fails the run (the kernel must never read
past the aligned words that hold its bytes)."""
import re

M64 = (1 << 64) - 1
K1, K2, SEED = 0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93, 0x5348505F56414C31


# ---- the definition (include/shapetrace/values.h) ----

def mix64(h):
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def lane_a(w, i):
    return mix64(w ^ ((i * K1) & M64))


def lane_b(w, i):
    z = (w + (i + 1) * K2) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def sums(data):
    a = b = 0
    n = len(data)
    for i in range(n // 8):
        w = int.from_bytes(data[8 * i:8 * i + 8], "little")
        a, b = (a + lane_a(w, i)) & M64, (b + lane_b(w, i)) & M64
    r = n % 8
    if r:
        t = int.from_bytes(data[n - r:] + bytes(8 - r), "little") | r << 56
        a, b = (a + lane_a(t, n // 8)) & M64, (b + lane_b(t, n // 8)) & M64
    return a, b


def final(a, b, n):
    rot = ((b << 29) | (b >> 35)) & M64
    return mix64(a ^ rot ^ ((n * K1) & M64) ^ SEED)


def fingerprint(data):
    a, b = sums(data)
    return final(a, b, len(data))


# ---- the PTX text ----

def ptx_from_header(path):
    """The kernel's text: the C string literal of preload/values_ptx.h, unescaped."""
    text = open(path, encoding="utf-8").read()
    body = text[text.index("shp_values_ptx[] ="):text.index("/* clang-format on */")]
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', body)
    return "".join(p.encode().decode("unicode_escape") for p in parts)


class PtxError(Exception):
    pass


def parse(ptx):
    """(instructions, labels, shared symbols, parameter names) of the one .entry in ptx."""
    lines = [re.sub(r"//.*", "", l).strip() for l in ptx.splitlines()]
    start = lines.index("{")
    params = re.findall(r"\.param \.u64 (\w+)", ptx)
    code, labels, shared, off = [], {}, {}, 0
    for l in lines[start + 1:]:
        if not l or l == "}":
            continue
        if l.endswith(":"):
            labels[l[:-1]] = len(code)
            continue
        if l.startswith(".reg"):
            continue
        m = re.match(r"\.shared \.align (\d+) \.b64 (\w+)\[(\d+)\];", l)
        if m:
            shared[m.group(2)] = off
            off += 8 * int(m.group(3))
            continue
        if not l.endswith(";"):
            raise PtxError(f"cannot read: {l}")
        l = l[:-1]
        pred = None
        m = re.match(r"@(!?)(%\w+)\s+(.*)", l)
        if m:
            pred = (m.group(1) == "!", m.group(2))
            l = m.group(3)
        op, _, rest = l.partition(" ")
        args = [a.strip() for a in rest.split(",")] if rest.strip() else []
        code.append((pred, op, args))
    return code, labels, shared, off, params


class Memory:
    """Bytes at addresses a test chose; reading or writing anything else is an error."""

    def __init__(self):
        self.bytes = {}

    def place(self, addr, data):
        for i, b in enumerate(data):
            self.bytes[addr + i] = b

    def read(self, addr, size):
        try:
            return int.from_bytes(bytes(self.bytes[addr + i] for i in range(size)), "little")
        except KeyError:
            raise PtxError(f"load of {size} bytes at {addr:#x}: outside the memory laid out")

    def write(self, addr, size, v):
        for i in range(size):
            if addr + i not in self.bytes:
                raise PtxError(f"store at {addr + i:#x}: outside the memory laid out")
            self.bytes[addr + i] = (v >> (8 * i)) & 0xFF


WIDTH = {"u64": 64, "b64": 64, "s64": 64, "u32": 32, "b32": 32, "s32": 32, "u16": 16,
         "b16": 16, "u8": 8}


def run_grid(ptx, mem, args, blocks, threads):
    """Run the kernel on a grid of `blocks` x `threads` with parameter values `args`."""
    code, labels, shared_syms, shared_size, params = parse(ptx)
    if len(params) != len(args):
        raise PtxError(f"{len(params)} parameters, {len(args)} given")
    pvals = dict(zip(params, args))
    steps = 0
    for b in range(blocks):
        shared = bytearray(shared_size)
        ths = [{"pc": 0, "r": {"%tid.x": t, "%ctaid.x": b, "%ntid.x": threads,
                               "%nctaid.x": blocks}, "done": False} for t in range(threads)]

        def val(th, a, bits):
            if a.startswith("%"):
                return th["r"][a] & ((1 << bits) - 1) if bits else th["r"][a]
            m = re.fullmatch(r"(0[xX][0-9a-fA-F]+)U?|(-?\d+)U?", a)
            if not m:
                raise PtxError(f"operand {a}")
            v = int(a.rstrip("U"), 0)
            return v & ((1 << bits) - 1)

        def addr(th, a):
            m = re.fullmatch(r"\[([%\w]+)(?:\+(\d+))?\]", a)
            if not m:
                raise PtxError(f"address {a}")
            base, disp = m.group(1), int(m.group(2) or 0)
            if base in shared_syms:
                return ("shared", shared_syms[base] + disp)
            if base in pvals:
                return ("param", base)
            return ("reg", th["r"][base] + disp)

        while True:
            for th in ths:
                while not th["done"]:
                    steps += 1
                    if steps > 5_000_000:
                        raise PtxError("runaway kernel")
                    pred, op, a = code[th["pc"]]
                    th["pc"] += 1
                    if pred is not None:
                        neg, p = pred
                        if bool(th["r"].get(p, 0)) == neg:
                            continue
                    parts = op.split(".")
                    name, typ = parts[0], parts[-1]
                    bits = WIDTH.get(typ, 64)
                    mask = (1 << bits) - 1
                    r = th["r"]
                    if op in ("bar.sync", "barrier.sync"):
                        break
                    if name == "ret":
                        th["done"] = True
                        break
                    if name == "bra":
                        th["pc"] = labels[a[0]]
                    elif op == "ld.param.u64":
                        kind, where = addr(th, a[1])
                        r[a[0]] = pvals[where]
                    elif name == "mov":
                        r[a[0]] = val(th, a[1], bits)
                    elif name == "setp":
                        x, y = val(th, a[1], bits), val(th, a[2], bits)
                        r[a[0]] = {"ne": x != y, "eq": x == y, "ge": x >= y, "lt": x < y}[parts[1]]
                    elif op == "or.pred":
                        r[a[0]] = bool(r[a[1]]) or bool(r[a[2]])
                    elif name in ("and", "or", "xor", "add", "sub"):
                        x, y = val(th, a[1], bits), val(th, a[2], bits)
                        r[a[0]] = {"and": x & y, "or": x | y, "xor": x ^ y, "add": x + y,
                                   "sub": x - y}[name] & mask
                    elif op == "mul.lo.u64":
                        r[a[0]] = (val(th, a[1], 64) * val(th, a[2], 64)) & M64
                    elif op == "mul.wide.u32":
                        r[a[0]] = val(th, a[1], 32) * val(th, a[2], 32)
                    elif name in ("shl", "shr"):
                        x, s = val(th, a[1], bits), val(th, a[2], 32)
                        s = min(s, bits)  # PTX clamps a shift past the width
                        r[a[0]] = ((x << s) if name == "shl" else (x >> s)) & mask
                    elif op == "cvta.to.global.u64":
                        r[a[0]] = val(th, a[1], 64)
                    elif name == "cvt":
                        r[a[0]] = val(th, a[1], WIDTH[parts[2]]) & ((1 << WIDTH[parts[1]]) - 1)
                    elif name == "ld":
                        kind, where = addr(th, a[1])
                        if kind == "shared":
                            r[a[0]] = int.from_bytes(shared[where:where + bits // 8], "little")
                        else:
                            r[a[0]] = mem.read(where, bits // 8)
                    elif name == "st":
                        kind, where = addr(th, a[0])
                        v = val(th, a[1], bits)
                        if kind == "shared":
                            shared[where:where + bits // 8] = v.to_bytes(bits // 8, "little")
                        else:
                            mem.write(where, bits // 8, v)
                    elif op == "atom.shared.add.u64":
                        kind, where = addr(th, a[1])
                        old = int.from_bytes(shared[where:where + 8], "little")
                        shared[where:where + 8] = ((old + val(th, a[2], 64)) & M64).to_bytes(
                            8, "little")
                        r[a[0]] = old
                    else:
                        raise PtxError(f"instruction {op} is not known to this interpreter")
            if all(th["done"] for th in ths):
                break
            # every thread is at the barrier or done: release them
    return steps


def kernel_fingerprint(ptx, data, misalign, blocks, threads, base=0x7000_0000_1000):
    """The fingerprint as the preload computes it from the kernel: its blocks' sums added up on
    the host, then the final mix. The bytes sit at base + misalign; only the aligned words that
    hold them are readable."""
    mem = Memory()
    src = base + misalign
    lo, hi = src & ~7, (src + len(data) + 7) & ~7
    mem.place(lo, bytes(hi - lo))
    mem.place(src, data)
    out = 0x7100_0000_0000
    mem.place(out, bytes(16 * blocks))
    run_grid(ptx, mem, [src, len(data), out], blocks, threads)
    a = b = 0
    for k in range(blocks):
        a = (a + mem.read(out + 16 * k, 8)) & M64
        b = (b + mem.read(out + 16 * k + 8, 8)) & M64
    return final(a, b, len(data))
