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
measure "traced, stacks native" "$TOOL" run --dir "$tmp/run" --
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
