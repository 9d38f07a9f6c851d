#!/bin/sh
# shapetrace bench: does `analyze` use the cores it is given? The same traces (tests/gen/gen_traces.c,
# 64 ranks x 1,000,000 events with one planted count divergence by default) analysed with every
# core this shell may run on, and pinned to 2 of them with taskset, interleaved, RUNS times
# each; prints a table: the plan the run chose (--stats), the median wall time, its CPU by
# thread kind, max RSS, and the speedup; the two configurations' --json reports must be the
# same, byte for byte (exit 1 otherwise). For a machine with more cores than the 2-core one
# (the H200 host's 16): bench/cores.sh [BUILD]. Needs about 66 MB of disk a million events a
# rank, under CORES_WORK (default: a new directory under TMPDIR, removed at the end).
#   NRANKS, NEVENTS, RUNS (default 64, 1000000, 3); CORES_FORCE=1 runs it on 2 cores too
set -eu
B=${1:-build}
TOOL=$B/bin/shapetrace
GEN=$B/tests/gen_traces
NRANKS=${NRANKS:-64}
NEVENTS=${NEVENTS:-1000000}
RUNS=${RUNS:-3}
for x in "$TOOL" "$GEN"; do
    [ -x "$x" ] || { echo "cores.sh: $x is missing: build it first (make, make bench)"; exit 2; }
done
command -v taskset >/dev/null || { echo "cores.sh: NOT RUN: no taskset"; exit 2; }
if [ -n "${CORES_WORK:-}" ]; then
    W=$CORES_WORK
    mkdir -p "$W"
else
    W=$(mktemp -d "${TMPDIR:-/tmp}/shapetrace-cores.XXXXXX")
    trap 'rm -rf "$W"' EXIT
fi
# The CPUs this shell may run on, and the first two of them.
cpus=$(taskset -pc $$ | sed 's/.*: //')
all=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || nproc)
two=$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0))[:2])))' \
    2>/dev/null || echo 0,1)
if [ "$all" -le 2 ] && [ -z "${CORES_FORCE:-}" ]; then
    echo "cores.sh: NOT RUN: this shell may run on $all cores ($cpus); the check compares more with 2"
    exit 2
fi
echo "shapetrace analyze on $all cores ($cpus) and pinned to 2 ($two): $NRANKS ranks x" \
    "$NEVENTS events, $RUNS interleaved runs each; load at start $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -f "$W/traces/gen-0.shptrace" ]; then
    "$GEN" "$W/traces" "$NRANKS" "$NEVENTS" --diverge "count:$((NRANKS / 2)):5000" >"$W/gen.log"
fi
cat "$W"/traces/*.shptrace >/dev/null # in the page cache, as for every run after the first
# one CONFIG RUN: a run, its --stats and report kept as $W/CONFIG.RUN.*
one() {
    case $1 in
    all) set -- "$1" "$2" ;;
    *) set -- "$1" "$2" taskset -c "$two" ;;
    esac
    c=$1 r=$2
    shift 2
    "$@" "$TOOL" analyze --json --stats "$W/traces" >"$W/$c.$r.json" 2>"$W/$c.$r.stats" || true
}
r=1
while [ "$r" -le "$RUNS" ]; do
    one all "$r"
    one two "$r"
    r=$((r + 1))
done
# row CONFIG: "WALL RUN" of the median run, then its line of the table.
median_run() {
    for r in $(seq "$RUNS"); do
        sed -n "s/.*analyze took \([0-9.]*\) s.*/\1 $r/p" "$W/$1.$r.stats"
    done | sort -n | awk '{a[NR] = $0} END {print a[int((NR + 1) / 2)]}'
}
row() { # CONFIG LABEL BASE_WALL
    label=$2 base_wall=$3
    set -- "$1" $(median_run "$1")
    s=$W/$1.$3.stats
    awk -v label="$label" -v wall="$2" -v base="$base_wall" '
        /threads: the merge/ {sub(/^shapetrace: /, ""); plan = $0}
        /main thread, merge/ {for (i = 1; i <= NF; i++) if ($i == "CPU") m = $(i + 1) + 0}
        /reader [0-9]+ / {for (i = 1; i <= NF; i++) if ($i == "CPU") rd += $(i + 1)}
        /worker [0-9]+ / {for (i = 1; i <= NF; i++) if ($i == "CPU") w += $(i + 1)}
        /analyze took/ {for (i = 1; i <= NF; i++) if ($i == "RSS") rss = $(i + 1)}
        END {printf "%-10s %9.2f %8.2f %8.2f %8.2f %8.2f %8s %8.2f  %s\n", label, wall, m, rd, w,
            m + rd + w, rss, base / wall, plan}' "$s"
}
echo
printf "%-10s %9s %8s %8s %8s %8s %8s %8s  %s\n" "cores" "wall s" "merge" "readers" \
    "workers" "CPU s" "RSS MiB" "speedup" "plan (--stats)"
base=$(median_run two | cut -d' ' -f1)
row two "2" "$base"
row all "$all" "$base"
echo "(wall: the median of $RUNS; CPU: that run's, by thread kind; speedup: the pinned run's wall" \
    "over this one's)"
echo "load at end $(cut -d' ' -f1-3 /proc/loadavg)"
bad=0
for r in $(seq "$RUNS"); do
    for c in all two; do
        cmp -s "$W/all.1.json" "$W/$c.$r.json" || { echo "DIFFERS: $c run $r"; bad=1; }
    done
done
[ "$bad" = 0 ] && echo "the $((2 * RUNS)) reports are the same, byte for byte:" \
    "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); f=r["findings"]
print(len(f), "finding(s), first:", f[r["first"]]["kind"] if f else None)' "$W/all.1.json" 2>/dev/null)"
exit "$bad"
