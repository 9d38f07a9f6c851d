#!/bin/sh
# shapetrace bench: two builds of `analyze` side by side (before and after a change to the
# analyzer), on bench/analyze.sh's inputs (tests/gen/gen_traces.c). For each input, ROUNDS rounds in
# which OLD and NEW run in turn (the first of the pair alternating), each under /usr/bin/time:
# the median and range of the wall time, the CPU time (user + system, every thread) and the max
# RSS, with the load average at the start and end of the input's rounds; the two --json reports
# must be the same, byte for byte (DIFFERS otherwise, and exit 1). Last, callgrind's
# instructions an event of each on 8 x 100,000 (NEW with --threads 1, OLD as it runs by
# default), which do not depend on the load.
# Usage: bench/analyze_ab.sh OLD_TOOL NEW_TOOL [BUILD [ROUNDS]]   (BUILD has tests/gen_traces;
# SHAPES="8x1000000:count:3:5000 ..." picks inputs, RANKSxEVENTS:DIVERGENCE or :none)
set -eu
OLD=$1
NEW=$2
B=${3:-build}
R=${4:-5}
GEN=$B/tests/gen_traces
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shapes=${SHAPES:-"8x1000000:count:3:5000 8x1000000:none 512x10000:count:300:500
    2048x2500:count:1000:100 8x4000000:none 1x2750000:none"}
load() { cut -d' ' -f1-3 /proc/loadavg; }
# stat FILE COLUMN: "median min..max" of a column of FILE.
stat() {
    awk -v c="$2" '{print $c}' "$1" | sort -n |
        awk '{a[NR] = $1} END {printf "%s %s..%s", a[int((NR + 1) / 2)], a[1], a[NR]}'
}
bad=0
echo "analyze, $OLD (old) against $NEW (new): $R interleaved rounds an input, $(nproc) cores"
printf "%-28s %-4s %-22s %-22s %-22s %s\n" input side "wall s (range)" "CPU s (range)" \
    "max RSS MiB (range)" "load start / end"
for shape in $shapes; do
    ranks=${shape%%x*}
    rest=${shape#*x}
    events=${rest%%:*}
    div=${rest#*:}
    rm -rf "$tmp/in"
    if [ "$div" = none ]; then
        "$GEN" "$tmp/in" "$ranks" "$events" >/dev/null
    else
        "$GEN" "$tmp/in" "$ranks" "$events" --diverge "$div" >/dev/null
    fi
    cat "$tmp/in"/* >/dev/null # in the page cache, as for every run after the first
    : >"$tmp/old.t"
    : >"$tmp/new.t"
    l0=$(load)
    for r in $(seq "$R"); do
        order="old new"
        [ $((r % 2)) = 0 ] && order="new old"
        for side in $order; do
            tool=$OLD
            [ "$side" = new ] && tool=$NEW
            /usr/bin/time -f "%e %U %S %M" -o "$tmp/time" "$tool" analyze --json "$tmp/in" \
                >"$tmp/$side.json" 2>/dev/null || true
            # (time's last line: a status of 1, findings, adds a line before it)
            tail -n 1 "$tmp/time" |
                awk '{printf "%s %.2f %.0f\n", $1, $2 + $3, $4 / 1024}' >>"$tmp/$side.t"
        done
        if ! cmp -s "$tmp/old.json" "$tmp/new.json"; then
            echo "DIFFERS: $shape, round $r"
            bad=1
        fi
    done
    l1=$(load)
    for side in old new; do
        printf "%-28s %-4s %-22s %-22s %-22s %s / %s\n" "$ranks x $events, $div" "$side" \
            "$(stat "$tmp/$side.t" 1)" "$(stat "$tmp/$side.t" 2)" "$(stat "$tmp/$side.t" 3)" \
            "$l0" "$l1"
    done
done
rm -rf "$tmp/in"
if command -v valgrind >/dev/null 2>&1; then
    "$GEN" "$tmp/cg" 8 100000 >/dev/null
    for side in old new; do
        tool=$OLD
        th=
        [ "$side" = new ] && tool=$NEW && th="--threads 1"
        valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$side" "$tool" analyze $th \
            "$tmp/cg" >/dev/null 2>&1 || true
        awk -v s="$side" '/^summary:/ {printf "callgrind 8 x 100,000, %s: %.0f instructions, %.0f an event\n",
            s, $2, $2 / 800000}' "$tmp/cg.$side"
    done
fi
[ "$bad" = 0 ] && echo "the old and new reports are the same, byte for byte, on every input and round"
exit "$bad"
