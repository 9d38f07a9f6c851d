#!/bin/sh
# shapetrace bench (make bench): what tracing adds per call, and how fast traces are read.
# Prints a table; bench/RESULTS.md keeps the figures with the machine and the date.
set -eu
B=${1:-build}
N=${N:-200000}
TOOL=$B/bin/shapetrace
prog=$B/bench/overhead
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "shapetrace bench: $N calls per figure, median of 5 runs, on the test doubles (simulated"
echo "GPU: the doubles' own cost is in every column; the differences are shapetrace's)"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
measure() { # label, then the command prefix
    label=$1
    shift
    for i in 1 2 3 4 5; do
        rm -rf "$tmp/run"
        "$@" "$prog" "$N" >"$tmp/out.$i" 2>/dev/null
    done
    c=$(for i in 1 2 3 4 5; do awk '/^copy/ {print $2}' "$tmp/out.$i"; done | median)
    a=$(for i in 1 2 3 4 5; do awk '/^allreduce/ {print $2}' "$tmp/out.$i"; done | median)
    l=$(for i in 1 2 3 4 5; do awk '/^launch/ {print $2}' "$tmp/out.$i"; done | median)
    printf "%-28s %12s %14s %16s\n" "$label" "$c" "$a" "$l"
}
printf "%-28s %12s %14s %16s\n" "configuration" "copy ns/call" "allreduce ns" "graph launch ns"
measure "untraced" env
measure "traced, stacks python" "$TOOL" run --dir "$tmp/run" --stacks python --
measure "traced, stacks native" "$TOOL" run --dir "$tmp/run" --stacks native --
measure "traced, stacks none" "$TOOL" run --dir "$tmp/run" --stacks none --
measure "dormant (not armed)" "$TOOL" run --dir "$tmp/run" --dormant --
rm -rf "$tmp/run"
"$TOOL" run --dir "$tmp/run" -- "$prog" "$N" >/dev/null 2>&1
f=$(ls "$tmp"/run/*.shptrace)
bytes=$(stat -c %s "$f")
events=$((14 * N + 8))
echo "trace size: $bytes bytes for $events events ($((bytes / events)) bytes/event, file grown in chunks)"
t0=$(date +%s%N)
"$TOOL" dump --json --no-stacks "$f" | wc -l >/dev/null
t1=$(date +%s%N)
echo "dump --json --no-stacks: $events events in $(((t1 - t0) / 1000000)) ms"

# Python call sites: cudaMemcpyAsync through ctypes from 20 Python frames (bench/pystack.py).
PY=${PYTHON:-python3}
PN=${PYN:-$((N / 2))}
if "$PY" -c 'import ctypes' 2>/dev/null; then
    echo
    echo "Python call sites ($("$PY" -c 'import sys; print(sys.version.split()[0])'), ctypes," \
        "20 Python frames; $PN calls per figure, median of 5 runs)"
    pymeasure() { # the command prefix; prints the median ns a call
        for i in 1 2 3 4 5; do
            rm -rf "$tmp/run"
            "$@" "$PY" bench/pystack.py "$B/tests/libcudart.so.13" "$PN" 2>/dev/null |
                awk '/^pycopy/ {print $2}'
        done | median
    }
    pu=$(pymeasure env)
    pn=$(pymeasure "$TOOL" run --dir "$tmp/run" --stacks native --)
    pp=$(pymeasure "$TOOL" run --dir "$tmp/run" --stacks python --)
    printf "%-28s %12s\n" "configuration" "copy ns/call"
    printf "%-28s %12s\n" "untraced" "$pu" "traced, stacks native" "$pn" \
        "traced, stacks python" "$pp"
    echo "Python frames add $(echo "$pp $pn" | awk '{printf "%.0f", $1 - $2}') ns a call" \
        "over native stacks (target: 2,000 ns or less)"
fi

# The analyzer at scale, on synthetic traces (bench/gen_traces): 8 ranks x 1,000,000 events and
# 512 ranks x 10,000 events, each with one planted divergence it must find.
echo
echo "analyze (synthetic traces; wall time and peak RSS as analyze --stats reports them)"
for shape in "8 1000000 count:3:5000" "8 1000000 none" "512 10000 count:300:500" \
    "1 2750000 none"; do
    set -- $shape
    rm -rf "$tmp/scale"
    if [ "$3" = none ]; then
        "$B/bench/gen_traces" "$tmp/scale" "$1" "$2" >/dev/null
    else
        "$B/bench/gen_traces" "$tmp/scale" "$1" "$2" --diverge "$3" >/dev/null
    fi
    size=$(du -sm "$tmp/scale" | cut -f1)
    stats=$("$TOOL" analyze --stats "$tmp/scale" 2>&1 >"$tmp/report" | tail -n 1)
    found=$(tail -n 1 "$tmp/report")
    copies=""
    if [ "$1" = 1 ]; then
        copies=", $("$TOOL" dump --json --no-stacks "$tmp/scale" | grep -c '"op":"cudaMemcpy') copies"
    fi
    echo "  $1 ranks x $2 events$copies ($size MiB): ${stats#shapetrace: }"
    echo "    $found"
done
