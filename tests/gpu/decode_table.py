"""shapetrace GPU bench: bench_decode.py's results as a table. For a process that alternated
armed and dormant blocks, the added time of a step is the median of the per-pair differences
(each pair of consecutive blocks holds one of each), with their range; for the other
configurations, the median block against the untraced processes' median. The interval is where
95% of the medians of 2,000 resamplings of the pairs fall (a fixed seed): what the run can
resolve.
Usage: decode_table.py RESULTS.jsonl"""
import json
import random
import statistics
import sys


def interval(diffs):
    rnd = random.Random(1)
    meds = sorted(statistics.median(rnd.choices(diffs, k=len(diffs))) for _ in range(2000))
    return meds[50], meds[1949]


def paired_row(label, states, key):
    """One line for a process that alternated armed and dormant blocks: the median of the pair
    differences of KEY (ms a step), its range and interval; nothing if the results lack KEY."""
    on = [m for r in states["on"] for m in r.get(key, [])]
    off = [m for r in states["off"] for m in r.get(key, [])]
    if not on or not off:
        return
    diffs = [a - b for a, b in zip(on, off)]
    d, mo = statistics.median(diffs), statistics.median(off)
    lo, hi = interval(diffs)
    print(f"| {label} | off {mo:.3f}, on {statistics.median(on):.3f} | {d * 1e3:+.1f} us | "
          f"{d / mo * 100:+.2f}% | {min(diffs) * 1e3:+.1f} to {max(diffs) * 1e3:+.1f} us "
          f"({len(diffs)} pairs) | {lo / mo * 100:+.2f} to {hi / mo * 100:+.2f}% |")


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    by = {}
    for r in rows:
        by.setdefault(r["config"], {}).setdefault(r["state"], []).append(r)
    plain = [m for r in by.get("untraced", {}).get("plain", []) for m in r["ms"]]
    base = statistics.median(plain) if plain else None
    print("| configuration | ms a step (median of blocks) | added a step | added % | range of "
          "pair differences | 95% interval of the added % |")
    print("|---|---|---|---|---|---|")
    for cfg, states in by.items():
        if "on" in states and "off" in states:
            paired_row(cfg, states, "ms")
            # The calling thread's CPU time a step, paired the same way (the waits on the GPU
            # spin on a CPU too, so it is no lower bound; it moves less than the wall).
            paired_row(f"{cfg}, thread CPU", states, "cpu_ms")
        elif "plain" in states:
            ms = [m for r in states["plain"] for m in r["ms"]]
            m = statistics.median(ms)
            added = f"{(m - base) * 1e3:+.1f} us" if base and cfg != "untraced" else ""
            pct = f"{(m - base) / base * 100:+.2f}%" if base and cfg != "untraced" else ""
            print(f"| {cfg} | {m:.3f} | {added} | {pct} | blocks {min(ms):.3f} to {max(ms):.3f} | |")
    calls = rows[0]["calls_per_step"] if rows else 0
    print(f"\n{calls} traced calls a step.")


if __name__ == "__main__":
    main()
