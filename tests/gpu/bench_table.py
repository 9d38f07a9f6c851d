"""shapetrace GPU bench: the Markdown table of bench_attach.py's results.
Usage: bench_table.py RESULTS"""
import json
import statistics
import sys


def table(path):
    """Traced configurations: median of the per-round differences on minus off, in one process.
    Separate processes: median of all their batches, and its difference to the untraced one."""
    rows = [json.loads(line) for line in open(path)]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    batches = {}
    for r in rows:
        batches.setdefault((r["config"], r["op"], r["state"]), []).extend(r["us"])
    attached = [c for c in dict.fromkeys(r["config"] for r in rows if r["state"] != "plain")]
    apart = [c for c in ("untraced", "nccl_debug", "flight_recorder")
             if any(r["config"] == c for r in rows)]
    head = ["op"] + [f"{c}: off, on (+diff)" for c in attached] + apart
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for op in ops:
        cells = [op]
        for c in attached:
            off, on = batches.get((c, op, "off"), []), batches.get((c, op, "on"), [])
            diff = statistics.median(b - a for a, b in zip(off, on)) if off and on else 0
            cells.append(f"{statistics.median(off):.2f}, {statistics.median(on):.2f} "
                         f"({diff:+.2f})" if off and on else "-")
        base = batches.get(("untraced", op, "plain"))
        for c in apart:
            us = batches.get((c, op, "plain"))
            if not us:
                cells.append("-")
                continue
            m = statistics.median(us)
            extra = f" ({m - statistics.median(base):+.2f})" if base and c != "untraced" else ""
            cells.append(f"{m:.2f}{extra}")
        print("| " + " | ".join(cells) + " |")
    print("us per call; off = dormant, on = recording, in the same process")


if __name__ == "__main__":
    table(sys.argv[1])
