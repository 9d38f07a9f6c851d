#!/bin/sh
# shapetrace bench: export at scale (issue 27 item 6). 8 ranks x 1,000,000 events
# (tests/gen/gen_traces.c, one planted divergence) to Perfetto and to Chrome JSON, analysis
# included: the median wall time, CPU time and max RSS of ROUNDS runs, interleaved, each figure
# with its target, met or missed, and the load average; under a miss, where the time went (CPU
# time, and a run with --stats or without the analysis). Usage: bench/export.sh BUILD_DIR [TOOL
# [BEFORE]]; run.sh calls it. BEFORE, another build's shapetrace, is run in the same rounds,
# interleaved with TOOL, and its figures printed beside (for bench/RESULTS.md's before and after).
set -eu
B=${1:-build}
TOOL=${2:-$B/bin/shapetrace}
BEFORE=${3:-}
ROUNDS=${EXPORT_ROUNDS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
verdict() { awk -v v="$1" -v t="$2" 'BEGIN {print (v != "" && v + 0 <= t + 0) ? "met" : "missed"}'; }
figure() {
    printf "%-50s %10s %-9s target <= %-9s %-6s load %s\n" "$1" "$2" "$3" "$4" \
        "$(verdict "$2" "$4")" "$(load)"
}
info() { printf "%-50s %10s %-9s %-23s load %s\n" "$1" "$2" "$3" "(no target)" "$(load)"; }
"$B/tests/gen_traces" "$tmp/in" 8 1000000 --diverge count:3:5000 >/dev/null
# one TOOL FORMAT [ARGS]: "WALL_S MAX_RSS_MIB USER_S SYS_S" of one export, its output thrown away
one() {
    t=$1
    f=$2
    shift 2
    /usr/bin/time -f '%e %M %U %S' "$t" export --format "$f" "$@" -o "$tmp/out" "$tmp/in" \
        2>&1 >/dev/null | tail -n 1 | awk '{printf "%s %d %s %s\n", $1, $2 / 1024, $3, $4}'
    rm -f "$tmp/out"
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for f in perfetto chrome; do
        [ -n "$BEFORE" ] && one "$BEFORE" "$f" >>"$tmp/before-$f"
        one "$TOOL" "$f" >>"$tmp/$f"
    done
    r=$((r + 1))
done
col() { awk -v c="$2" '{print $c}' "$1" | median; }
cpu() { awk '{print $3 + $4}' "$1" | median; }
pw=$(col "$tmp/perfetto" 1)
figure "export 8x1M to Perfetto, wall" "$pw" "s" 5
if [ "$(verdict "$pw" 5)" = missed ]; then
    # One more run with --stats: each part's wall and CPU time, the analysis's threads included.
    "$TOOL" export --stats --format perfetto -o "$tmp/out" "$tmp/in" 2>"$tmp/stats" >/dev/null
    rm -f "$tmp/out"
    echo "    why: CPU $(col "$tmp/perfetto" 3) s user + $(col "$tmp/perfetto" 4) s system" \
        "(medians) on $(nproc) cores, at load $(load); without writing the file (-o /dev/null)" \
        "$(/usr/bin/time -f '%e' "$TOOL" export --format perfetto -o /dev/null "$tmp/in" 2>&1 \
            >/dev/null | tail -n 1) s; a run with --stats:"
    grep -E 'export scan|export took|merge|worker' "$tmp/stats" | sed 's/^shapetrace: /      /'
fi
pm=$(col "$tmp/perfetto" 2)
figure "export 8x1M to Perfetto, max RSS" "$pm" "MiB" 512
[ "$(verdict "$pm" 512)" = missed ] &&
    echo "    why: without the analysis $(one "$TOOL" perfetto --no-findings | cut -d' ' -f2) MiB;" \
        "the 8 traces map $(du -sm "$tmp/in" | cut -f1) MiB"
info "export 8x1M to Perfetto, CPU (user + system)" "$(cpu "$tmp/perfetto")" "s"
info "export 8x1M to Chrome JSON, wall" "$(col "$tmp/chrome" 1)" "s"
info "export 8x1M to Chrome JSON, max RSS" "$(col "$tmp/chrome" 2)" "MiB"
info "export 8x1M to Chrome JSON, CPU (user + system)" "$(cpu "$tmp/chrome")" "s"
if [ -n "$BEFORE" ]; then
    echo "before: $BEFORE, in the same rounds"
    for f in perfetto chrome; do
        info "  export 8x1M to $f, wall" "$(col "$tmp/before-$f" 1)" "s"
        info "  export 8x1M to $f, max RSS" "$(col "$tmp/before-$f" 2)" "MiB"
        info "  export 8x1M to $f, CPU (user + system)" "$(cpu "$tmp/before-$f")" "s"
    done
fi
