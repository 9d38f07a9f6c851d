#!/bin/sh
# shapetrace bench: the analyzer at scale (issue 27 item 5), on synthetic traces
# (tests/gen/gen_traces.c), each with a planted divergence it must find or clean: the wall time
# (median of 3 runs) against its target, max RSS, each thread's CPU time from --stats, and
# callgrind's instructions an event, which do not depend on the load of a shared machine.
# Under a miss, a "why:" line measured in the same run. Called by bench/run.sh (make bench);
# alone: bench/analyze.sh [BUILD].
set -eu
B=${1:-build}
TOOL=$B/bin/shapetrace
GEN=$B/tests/gen_traces
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
verdict() {
    awk -v v="$1" -v t="$2" 'BEGIN { if (v == "") { print "missed"; exit }
        print (v + 0 <= t + 0) ? "met" : "missed" }'
}
figure() { # LABEL VALUE UNIT TARGET: a line of the table (at most TARGET)
    printf "%-50s %10s %-9s target <= %-9s %-6s load %s\n" "$1" "$2" "$3" "$4" \
        "$(verdict "$2" "$4")" "$(load)"
}
info() { printf "%-50s %10s %-9s %-23s load %s\n" "$1" "$2" "$3" "(no target)" "$(load)"; }
why() { echo "    why: $*"; }
cores=$(nproc)
# cpu STATS: "merge M readers R workers W" CPU seconds from analyze --stats.
cpu() {
    awk '/main thread, merge/ {for (i = 1; i <= NF; i++) if ($i == "CPU") m = $(i + 1) + 0}
        /reader [0-9]+ / {for (i = 1; i <= NF; i++) if ($i == "CPU") r += $(i + 1)}
        /worker [0-9]+ / {for (i = 1; i <= NF; i++) if ($i == "CPU") w += $(i + 1)}
        END {printf "%.2f %.2f %.2f\n", m, r, w}' "$1"
}
# instructions NRANKS NEVENTS: callgrind's instructions an event of the analysis with one
# thread (the same work as with several, without their waits, which depend on the machine);
# empty without valgrind.
instructions() {
    command -v valgrind >/dev/null 2>&1 || return 0
    rm -rf "$tmp/cg" && mkdir "$tmp/cg"
    "$GEN" "$tmp/cg/t" "$1" "$2" >/dev/null
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg/out" \
        "$TOOL" analyze --threads 1 "$tmp/cg/t" >/dev/null 2>&1 || true
    awk -v e="$(($1 * $2))" '/^summary:/ {printf "%.0f\n", $2 / e}' "$tmp/cg/out"
}

echo "analyze at scale: $cores cores, load at start $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-50s %10s %-9s %-23s %s\n" "figure" "value" "unit" "target" "load"
# ranks events divergence wall-target rss-target (- for none)
for shape in "8 1000000 count:3:5000 1.0 -" "8 1000000 none 1.0 -" \
    "512 10000 count:300:500 1.5 -" "2048 2500 count:1000:100 2.0 -" \
    "8 4000000 none - 256" "1 2750000 none - -"; do
    set -- $shape
    rm -rf "$tmp/scale"
    if [ "$3" = none ]; then
        "$GEN" "$tmp/scale" "$1" "$2" >/dev/null
    else
        "$GEN" "$tmp/scale" "$1" "$2" --diverge "$3" >/dev/null
    fi
    what="analyze $1x$2, $3"
    runs=1
    [ "$4" = - ] || runs=3
    for r in $(seq "$runs"); do
        "$TOOL" analyze --stats "$tmp/scale" 2>"$tmp/stats.$r" >"$tmp/report" || true
        sed -n 's/.*analyze took \([0-9.]*\) s, max RSS \([0-9]*\) MiB.*/\1 \2 '"$r"'/p' \
            "$tmp/stats.$r"
    done >"$tmp/walls"
    set -- "$@" $(sort -n "$tmp/walls" | awk '{a[NR] = $0} END {print a[int((NR + 1) / 2)]}')
    # $6: the median wall, $7: its max RSS, $8: its run
    if [ "$4" = - ]; then
        info "$what, wall" "$6" "s"
    else
        figure "$what, wall (median of 3)" "$6" "s" "$4"
    fi
    set -- "$@" $(cpu "$tmp/stats.$8")
    # $9: merge, ${10}: readers, ${11}: workers (CPU s)
    plan=$(sed -n 's/^shapetrace: \([0-9]* threads: .*\)$/\1/p' "$tmp/stats.$8")
    echo "    CPU: merge $9 s, readers ${10} s, workers ${11} s; $plan"
    if [ "$4" != - ] && [ "$(verdict "$6" "$4")" = missed ]; then
        why "$(echo "$9 ${10} ${11} $cores $(load)" | awk '{t = $1 + $2 + $3
            printf "%.2f s of CPU on %d cores is %.2f s at best", t, $4, t / $4
            if ($1 > t / $4) printf ", and the merge alone takes %.2f s", $1
            if ($5 > 1) printf "; the machine was busy (load %s, the target is for 1 at most)", $5}')"
    fi
    [ "$5" = - ] || figure "$what, max RSS" "$7" "MiB" "$5"
    if [ "$1" = 8 ] && [ "$2" = 1000000 ] && [ "$3" = none ]; then
        ins=$(instructions 8 100000)
        if [ -n "$ins" ]; then
            info "callgrind 8x100000, --threads 1" "$ins" "ins/event"
            echo "    $(echo "$ins" | awk '{printf "x 8,000,000 events: %.1f G instructions", \
                $1 * 8e6 / 1e9}')"
        fi
    fi
    echo "    $(tail -n 1 "$tmp/report")"
done
