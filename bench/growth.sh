#!/bin/sh
# shapetrace bench: what each SHAPETRACE_FILE_GROWTH strategy adds per call (bench/RESULTS.md,
# "Format 2: page faults"). Interleaved rounds of bench/overhead untraced and under
# `shapetrace run --stacks none` with each strategy; prints batch medians and the load average.
# Usage: bench/growth.sh [BUILD [N [ROUNDS [DIR]]]]; DIR (default BUILD) holds the traces, so put
# it on the disk a real run directory would use.
set -eu
B=${1:-build}
N=${2:-100000}
R=${3:-9}
tmp=$(mktemp -d "${4:-$B}/growth.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$R"); do
    "$B/bench/overhead" "$N" 2>/dev/null | awk '{print "untraced", $1, $2}' >>"$tmp/all"
    for g in chunk populate large full; do
        rm -rf "$tmp/run"
        SHAPETRACE_FILE_GROWTH=$g "$B/bin/shapetrace" run --dir "$tmp/run" --stacks none -- \
            "$B/bench/overhead" "$N" 2>/dev/null | awk -v g="$g" '{print g, $1, $2}' >>"$tmp/all"
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $R rounds of $N calls, batch medians"
printf "%-10s %12s %14s %16s\n" growth "copy +ns" "allreduce +ns" "graph launch +ns"
med() { awk -v t="$1" -v k="$2" '$1 == t && $2 == k {print $3}' "$tmp/all" | sort -n |
    awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for g in chunk populate large full; do
    line=$g
    for k in copy allreduce launch; do
        line="$line $(echo "$(med "$g" "$k") $(med untraced "$k")" | awk '{printf "%.1f", $1 - $2}')"
    done
    echo "$line" | awk '{printf "%-10s %12s %14s %16s\n", $1, $2, $3, $4}'
done
