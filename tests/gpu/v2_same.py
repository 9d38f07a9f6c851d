"""shapetrace GPU checks: real traces of format version 6 read as the version 2 they replace.

  v2_same.py CRAFT DIR...
      Each run directory DIR (torch, CuPy, Llama runs of tests/gpu/run.sh) is rewritten as a
      version 2 writer would have written it (tests/format_v2.py: whole stacks, full records of
      2-D copies, communicators' ends, allocations, frees and modules), and `dump --json` and `analyze --json` must print the same for both. CRAFT is
      the build's tests/shp_craft. One summary line a directory, with what versions 4 and 6
      saved: 'PASS|FAIL NAME: N traces, S stacks with shared frames, C compact 2-D copies, R
      other compact records (version 6), B4 bytes of records against B2 (x%)'. Exits 1 if any differ.
The tool is $SHP_TOOL, run with LD_LIBRARY_PATH=$SHP_TOOL_LD when set."""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from format_v2 import COPY2D_C, NEW, STACK_TAIL, as_version_2  # noqa: E402
from verdict import tool  # noqa: E402


def same(d, craft, tmp):
    name = os.path.basename(d.rstrip("/"))
    d2 = os.path.join(tmp, name)
    os.makedirs(d2)
    tails = copies = rare = b4 = b2 = traces = 0
    for f in sorted(os.listdir(d)):
        if f.endswith(".symbols"):
            shutil.copy(os.path.join(d, f), d2)
        elif f.endswith(".shptrace"):
            n, x4, x2 = as_version_2(os.path.join(d, f), os.path.join(d2, f), craft)
            tails, copies, b4, b2 = tails + n[STACK_TAIL], copies + n[COPY2D_C], b4 + x4, b2 + x2
            rare += sum(n[k] for k in NEW if k not in (STACK_TAIL, COPY2D_C))
            traces += 1
    strip = lambda text, root: re.sub(r'"file": ?"[^"]*"', "", text).replace(root, "")
    differ = []
    for cmd in (["dump", "--json"], ["analyze", "--json"]):
        ra, a, _ = tool(*cmd, d)
        rb, b, _ = tool(*cmd, d2)
        if ra != rb or not a or strip(a, d) != strip(b, d2):
            differ.append(" ".join(cmd))
    saved = f"{100 * (b2 - b4) / b2:.1f}%" if b2 else "-"
    what = (f"{traces} traces, {tails} stacks with shared frames, {copies} compact 2-D copies, "
            f"{rare} other compact records (version 6), {b4} bytes of records against {b2} ({saved} fewer)")
    print(f"{'FAIL' if differ else 'PASS'} format {name}: {what}"
          + (f"; {', '.join(differ)} differ" if differ else ""))
    return not differ


def main():
    craft, dirs = sys.argv[1], sys.argv[2:]
    tmp = tempfile.mkdtemp(prefix="shapetrace-v2-")
    try:
        ok = all([same(d, craft, tmp) for d in dirs if os.path.isdir(d)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
