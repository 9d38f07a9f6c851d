#!/bin/sh
# shapetrace bench: two preloads side by side (before and after a change to the preload).
# Interleaved rounds of bench/overhead untraced, then under `shapetrace run --preload` with each
# preload in turn, for every stacks mode, dormant, and every SHAPETRACE_FILE_GROWTH (stacks none);
# prints, per configuration and call, the median over the rounds of (traced - untraced) in the
# same round for each preload, with the range of the rounds, and the load average. Each call
# three ways (bench/overhead.c): NAME_added, the calling thread's CPU time a call over the whole
# run, page faults and file growth included, less the same process's direct calls (so the
# untraced run's figure, about 0, is taken off as well); NAME_mean, the whole run's wall-clock
# mean; NAME, the batch median.
# Usage: [CONFIGS="none dormant"] bench/ab.sh OLD_PRELOAD NEW_PRELOAD [BUILD [N [ROUNDS]]]
set -eu
A=$1
Bp=$2
B=${3:-build}
N=${4:-100000}
R=${5:-9}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prog=$B/bench/overhead
# CONFIGS picks some; nohelper is stacks none with SHAPETRACE_PREFAULT=0 (no helper thread).
configs=${CONFIGS:-"none native python dormant nohelper populate large full"}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $R rounds of $N calls"
for r in $(seq "$R"); do
    "$prog" "$N" 2>/dev/null | awk -v r="$r" '{print "untraced", "-", r, $1, $2}' >>"$tmp/all"
    for c in $configs; do
        for side in old new; do
            pre=$A
            [ "$side" = new ] && pre=$Bp
            rm -rf "$tmp/run"
            case $c in
            dormant) set -- --dormant ;;
            populate | large | full | nohelper) set -- --stacks none ;;
            *) set -- --stacks "$c" ;;
            esac
            g=chunk
            case $c in populate | large | full) g=$c ;; esac
            h=1
            [ "$c" = nohelper ] && h=0
            SHAPETRACE_FILE_GROWTH=$g SHAPETRACE_PREFAULT=$h "$B/bin/shapetrace" run --preload "$pre" --dir "$tmp/run" \
                "$@" -- "$prog" "$N" 2>/dev/null |
                awk -v c="$c" -v s="$side" -v r="$r" '{print c, s, r, $1, $2}' >>"$tmp/all"
        done
    done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-9s %-14s %9s %9s %9s %18s %18s %18s\n" config call "old +ns" "new +ns" "new-old" \
    "old rounds" "new rounds" "new-old rounds"
for c in $configs; do
    for k in copy_added allreduce_added launch_added copy_mean allreduce_mean launch_mean copy \
        allreduce launch; do
        line="$c $k"
        for side in old new; do
            awk -v c="$c" -v s="$side" -v k="$k" '
                $1 == "untraced" && $4 == k {u[$3] = $5}
                $1 == c && $2 == s && $4 == k {t[$3] = $5}
                END {for (r in t) printf "%.1f\n", t[r] - u[r]}' "$tmp/all" | sort -n >"$tmp/d"
            med=$(awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}' "$tmp/d")
            rng=$(awk 'NR == 1 {a = $1} {b = $1} END {print a ".." b}' "$tmp/d")
            line="$line $med $rng"
        done
        # The paired figure: each round's new minus the same round's old.
        awk -v c="$c" -v k="$k" '$1 == c && $4 == k {v[$2, $3] = $5; r[$3] = 1}
            END {for (x in r) printf "%.1f\n", v["new", x] - v["old", x]}' "$tmp/all" |
            sort -n >"$tmp/d"
        med=$(awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}' "$tmp/d")
        rng=$(awk 'NR == 1 {a = $1} {b = $1} END {print a ".." b}' "$tmp/d")
        echo "$line $med $rng" | awk '{printf "%-9s %-14s %9s %9s %9s %18s %18s %18s\n",
            $1, $2, $3, $5, $7, $4, $6, $8}'
    done
done
