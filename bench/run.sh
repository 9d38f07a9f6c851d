#!/bin/sh
# shapetrace bench (make bench): every figure of issues 15's and 27's targets, with the target, met
# or missed, and the machine's 1-minute load average when it was taken (figures, never asserts);
# under a missed figure, a "why:" line measured in the same run. bench/RESULTS.md keeps them with
# the machine and the date.
set -eu
B=${1:-build}
N=${N:-100000}
ROUNDS=${ROUNDS:-7}
TOOL=$B/bin/shapetrace
prog=$B/bench/overhead
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
# verdict VALUE TARGET le|ge: met or missed.
verdict() {
    awk -v v="$1" -v t="$2" -v op="$3" 'BEGIN {
        if (v == "") { print "missed"; exit }
        print ((op == "le" && v + 0 <= t + 0) || (op == "ge" && v + 0 >= t + 0)) ? "met" : "missed" }'
}
# figure LABEL VALUE UNIT TARGET le|ge: one line of the table.
figure() {
    printf "%-50s %10s %-9s target %s %-9s %-6s load %s\n" "$1" "$2" "$3" \
        "$([ "$5" = le ] && echo '<=' || echo '>=')" "$4" "$(verdict "$2" "$4" "$5")" "$(load)"
}
# info LABEL VALUE UNIT: a line without a target.
info() { printf "%-50s %10s %-9s %-23s load %s\n" "$1" "$2" "$3" "(no target)" "$(load)"; }
# The bytes of records in a trace (its tail field, offset 72 of the header, less the header).
record_bytes() {
    python3 -c 'import sys, struct
d = open(sys.argv[1], "rb").read(80)
print(struct.unpack_from("<Q", d, 72)[0] - struct.unpack_from("<I", d, 16)[0])' "$1"
}
events_of() { "$TOOL" dump --json --no-stacks "$@" | wc -l; }

echo "shapetrace bench: $N calls of each kind a run (10x that of graph launches), $ROUNDS"
echo "interleaved rounds of untraced, stacks none, native, python and dormant runs, and of native"
echo "runs with and without --values over the driver double. On the test doubles (SIMULATED GPU:"
echo "the doubles' own cost is in the untraced column; the differences are shapetrace's). 'added'"
echo "is bench/overhead's NAME_added: in one process, the whole run's mean CPU time of the calling"
echo "thread a call (page faults and file growth included) less that of the same calls made"
echo "direct, past the preload, in alternating batches; the median over the rounds, less the"
echo "untraced run's (its method noise; for --values: less the run without it). 'wall' is the"
echo "whole run's wall-clock mean less the untraced run's, as info: on a shared machine it is"
echo "mostly other processes' time."
echo "machine: $(nproc) cores, $(uname -m), load at start $(cut -d' ' -f1-3 /proc/loadavg)"
configs="untraced none native python dormant drv values"
# --values needs a driver: the doubles' runtime then goes through the driver double, as a real
# runtime does (SHP_DOUBLE_VIA_DRIVER), in both of the runs compared.
drv="env SHP_DOUBLE_VIA_DRIVER=1 LD_LIBRARY_PATH=$B/tests"
run_cfg() { # config round
    rm -rf "$tmp/run"
    case $1 in
    untraced) set -- env ;;
    dormant) set -- "$TOOL" run --dir "$tmp/run" --dormant -- ;;
    drv) set -- $drv "$TOOL" run --dir "$tmp/run" --stacks native -- ;;
    values) set -- $drv "$TOOL" run --dir "$tmp/run" --stacks native --values all -- ;;
    *) set -- "$TOOL" run --dir "$tmp/run" --stacks "$1" -- ;;
    esac
    "$@" "$prog" "$N" 2>/dev/null
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for c in $configs; do
        run_cfg "$c" >"$tmp/$c.$r"
    done
    r=$((r + 1))
done
# diffs CONFIG KEY [BASE]: each round's CONFIG figure KEY minus BASE's (untraced), one a line.
diffs() {
    for r in $(seq 1 "$ROUNDS"); do
        t=$(awk -v k="$2" '$1 == k {print $2}' "$tmp/$1.$r")
        u=$(awk -v k="$2" '$1 == k {print $2}' "$tmp/${3:-untraced}.$r")
        echo "$t $u" | awk '{printf "%.1f\n", $1 - $2}'
    done
}
# rounds CONFIG KEY: each round's figure KEY, one a line.
rounds() { for r in $(seq 1 "$ROUNDS"); do awk -v k="$2" '$1 == k {print $2}' "$tmp/$1.$r"; done; }
# minmax: the smallest and the largest of the numbers read, "MIN..MAX".
minmax() { sort -n | awk 'NR == 1 {a = $1} {b = $1} END {print a ".." b}'; }
# added CONFIG KEY [BASE]: the median over rounds of CONFIG's KEY minus BASE's (untraced).
added() { diffs "$1" "$2" "${3:-}" | median; }
spread() { diffs "$1" "$2" "${3:-}" | minmax; }
untraced() { rounds untraced "$1" | median; }
echo
echo "untraced ns a call (the doubles): copy $(untraced copy), all-reduce $(untraced allreduce)," \
    "graph launch $(untraced launch); the method's own noise (untraced, added): copy" \
    "$(rounds untraced copy_added | minmax), all-reduce $(rounds untraced allreduce_added | minmax)," \
    "launch $(rounds untraced launch_added | minmax) ns"
echo
printf "%-50s %10s %-9s %-23s %s\n" "figure" "value" "unit" "target" "load"
# why TEXT: the measured reason under a figure that missed its target.
why() { echo "    why: $*"; }
tsc=$(untraced rdtsc)
# percall CONFIG CALL LABEL TARGET: the figure, and under a miss where its time went.
percall() {
    v=$(added "$1" "${2}_added")
    figure "added, $3" "$v" "ns/call" "$4" le
    [ "$(verdict "$v" "$4" le)" = missed ] || return 0
    sys=$(added "$1" "${2}_sys")
    # The kernel's figure is this thread's time in the calls, the batches' mean: the first
    # stores to new trace pages that no helper faulted in first.
    why "$(echo "$v $sys $tsc" | awk '{printf "kernel time %.1f ns a call on average (first" \
        " stores to new trace pages: the kernel zeroes each one), two TSC reads %.1f ns (%.1f" \
        " each here)", $2, 2 * $3, $3; r = $1 - $2 - 2 * $3; if (r >= 0) printf ", the rest" \
        " %.1f ns", r}'); rounds ranged $(spread "$1" "${2}_added") ns"
}
percall none launch "stacks none, graph launch" 40
percall none copy "stacks none, copy" 50
percall none allreduce "stacks none, all-reduce" 60
for k in launch copy allreduce; do
    info "wall, stacks none, $k" "$(added none "${k}_mean")" "ns/call"
done
info "helper thread's CPU, stacks none, a call" "$(rounds none other_threads_cpu | median)" "ns/call"
for k in launch copy allreduce; do
    percall native "$k" "native stacks, $k" 400
done
for k in launch copy allreduce; do
    info "added, python stacks (a C program), $k" "$(added python "${k}_added")" "ns/call"
done
# A call in a capture: on the capturing stream the preload's own table says so; on a stream that
# joined the capture through an event it asks CUDA (cudaStreamGetCaptureInfo), only while some
# capture of the process is in progress. The difference of the two is that query's cost.
for k in allreduce_captured allreduce_joined; do
    info "added, stacks none, $k" "$(added none "${k}_added")" "ns/call"
done
info "of which the capture query of a joined stream" "$(for r in $(seq 1 "$ROUNDS"); do
    j=$(awk '$1 == "allreduce_joined_added" {print $2}' "$tmp/none.$r")
    c=$(awk '$1 == "allreduce_captured_added" {print $2}' "$tmp/none.$r")
    ju=$(awk '$1 == "allreduce_joined_added" {print $2}' "$tmp/untraced.$r")
    cu=$(awk '$1 == "allreduce_captured_added" {print $2}' "$tmp/untraced.$r")
    echo "$j $c $ju $cu" | awk '{printf "%.1f\n", ($1 - $3) - ($2 - $4)}'
done | median)" "ns/call"
for k in launch copy allreduce; do
    v=$(added dormant "${k}_added")
    figure "added, dormant, $k" "$v" "ns/call" 5 le
    if [ "$(verdict "$v" 5 le)" = missed ]; then
        extra=""
        [ "$k" = allreduce ] && extra="a dormant collective still counts its seq (a compare, \
a load and a store on its thread's last communicator), so that ranks armed apart line up; "
        why "${extra}rounds ranged $(spread dormant "${k}_added") ns, untraced's own noise" \
            "$(rounds untraced "${k}_added" | minmax) ns"
    fi
done

# --values (issue 26): what a fingerprinted call adds (the kernel's launch and event, the value
# record, its read-back; on the driver double the "kernel" is the hash in C, run when its event
# is queried), and what a call adds that has nothing to fingerprint (a graph launch): the two
# tests of the switch and the poll of fingerprints in flight.
for k in copy allreduce; do
    info "added by --values, $k (fingerprinted)" "$(added values "${k}_added" drv)" "ns/call"
    echo "    rounds ranged $(spread values "${k}_added" drv) ns"
done
v=$(added values launch_added drv)
figure "added by --values, graph launch (none taken)" "$v" "ns/call" 10 le
[ "$(verdict "$v" 10 le)" = missed ] && why "rounds ranged $(spread values launch_added drv) ns"
# Without --values nothing is written that was not before: format version 6, no value record.
rm -rf "$tmp/run"
"$TOOL" run --dir "$tmp/run" -- "$prog" "$N" >/dev/null 2>&1
nv=$(python3 -c 'import sys, struct
d = open(sys.argv[1], "rb").read()
off, tail, n = 4096, struct.unpack_from("<Q", d, 72)[0], 0
while off + 8 <= tail:
    w = struct.unpack_from("<I", d, off)[0]
    if w >> 24 != 0xA7 or not w & 0xFFFF:
        break
    n += (w >> 16) & 0xFF == 18
    off += (w & 0xFFFF) * 8
print(n if struct.unpack_from("<I", d, 8)[0] == 6 else 999999)' "$(ls "$tmp"/run/*.shptrace)")
figure "value records without --values (format 6)" "$nv" "records" 0 le

# The same calls counted in instructions (bench/instr.sh, valgrind): exact where the timings are
# within the machine's noise (a dormant wrapper).
bench/instr.sh "$B" | sed 's/^/    /'

# Bytes per event: bench/overhead's trace (default stacks) and the examples' (make demo's).
rm -rf "$tmp/run"
"$TOOL" run --dir "$tmp/run" -- "$prog" "$N" >/dev/null 2>&1
f=$(ls "$tmp"/run/*.shptrace)
bytes=$(record_bytes "$f")
t0=$(date +%s%N)
events=$("$TOOL" dump --json "$f" | wc -l)
t1=$(date +%s%N)
# The same again for its CPU time, which a loaded machine does not stretch as it does the wall.
cpu=$( (/usr/bin/time -f '%U %S' "$TOOL" dump --json "$f" >/dev/null) 2>&1 | tail -n 1)
figure "bytes per event, bench/overhead ($events ev)" "$((bytes / events))" "B/event" 64 le
# The bytes of one type of record in a trace: one pass over its records.
type_bytes() {
    python3 -c 'import sys, struct
names = {1: "communicators", 6: "allocations", 5: "full-copies", 8: "stacks", 9: "modules",
         14: "compact-calls", 15: "compact-calls", 16: "compact-calls", 17: "compact-calls",
         19: "compact-calls", 20: "stacks", 21: "communicators", 22: "allocations",
         23: "modules"}
tot = {}
for f in sys.argv[1:]:
    d = open(f, "rb").read()
    tail, off = min(struct.unpack_from("<Q", d, 72)[0], len(d)), 4096
    while off + 8 <= tail:
        w = struct.unpack_from("<I", d, off)[0]
        t, n = (w >> 16) & 0xff, (w & 0xffff) * 8
        if w >> 24 != 0xA7 or n == 0:
            break
        k = names.get(t, "other")
        tot[k] = tot.get(k, 0) + n
        off += n
print(" ".join("%s=%d" % kv for kv in sorted(tot.items())))' "$@"
}
for ex in hidden_states desync pipeline stall; do
    rm -rf "$tmp/ex"
    "$TOOL" run --dir "$tmp/ex" -- "$B/tests/shp_launch" -n 4 -- "$B/examples/$ex" \
        >/dev/null 2>&1 || true
    eb=0
    for g in "$tmp"/ex/*.shptrace; do eb=$((eb + $(record_bytes "$g"))); done
    ee=$(events_of "$tmp/ex")
    figure "bytes per event, examples/$ex ($ee ev)" "$((eb / ee))" "B/event" 100 le
    [ "$(verdict "$((eb / ee))" 100 le)" = missed ] || continue
    # What the bytes are: the call sites' stack and module records (written once per distinct
    # stack and module), the full records of communicators, allocations and 2-D copies.
    parts=$(type_bytes "$tmp"/ex/*.shptrace | awk -v e="$ee" '{for (i = 1; i <= NF; i++) {
        split($i, kv, "="); printf "%s%s %.0f", (i > 1 ? ", " : ""), kv[1], kv[2] / e}}')
    legend=""
    case $parts in *full-copies*) legend=" (full copies: the 144-byte records of 2-D copies)" ;; esac
    why "$parts B/event$legend; the stack and module records are written once per distinct" \
        "stack and module used, over only $((ee / 4)) events a process"
done

# dump --json, with stacks, of bench/overhead's trace (the events were counted by this run).
ms=$(((t1 - t0) / 1000000))
figure "dump --json, bench/overhead's trace" "$((events * 1000 / (ms ? ms : 1)))" "events/s" \
    1000000 ge
info "dump --json, the same, per CPU second" \
    "$(echo "$cpu" | awk -v e="$events" '$1 + $2 > 0 {printf "%d", e / ($1 + $2)}')" "events/s"

# export of many small traces: 10,000 copies (bench/copies.py) of one trace of 2 events with
# native call sites (tests/load/hostile), beside its run's symbol file. The session symbolizes
# each module once for the command; per trace, export took 16 MiB and 60 ms before.
rm -rf "$tmp/small" "$tmp/many"
"$TOOL" run --dir "$tmp/small" -- "$B/tests/hostile" calls 1 >/dev/null 2>&1
python3 bench/copies.py "$(ls "$tmp"/small/*.shptrace)" "$tmp/many" 10000
cp "$tmp"/small/*.symbols "$tmp/many/" 2>/dev/null || true
# rss_s CMD...: "MAX_RSS_MIB WALL_S" of the command, its output thrown away: the medians of 3
# runs.
rss_s() {
    runs=$(for i in 1 2 3; do /usr/bin/time -f '%M %e' "$@" 2>&1 >/dev/null | tail -n 1; done)
    echo "$(($(echo "$runs" | awk '{print $1}' | median) / 1024))" \
        "$(echo "$runs" | awk '{print $2}' | median)"
}
set -- $(rss_s "$TOOL" export -o "$tmp/many.json" "$tmp/many")
figure "export of 10,000 two-event traces, max RSS" "$1" "MiB" 512 le
[ "$(verdict "$1" 512 le)" = missed ] && why "without the analysis (--no-findings)" \
    "$(rss_s "$TOOL" export --no-findings -o "$tmp/many.json" "$tmp/many" | cut -d' ' -f1) MiB;" \
    "dump --json of the same traces $(rss_s "$TOOL" dump --json "$tmp/many" | cut -d' ' -f1) MiB"
info "export of 10,000 two-event traces, wall" "$2" "s"
rm -rf "$tmp/small" "$tmp/many" "$tmp/many.json"

# export at scale: 8 ranks x 1,000,000 events, Perfetto and Chrome JSON (bench/export.sh).
bench/export.sh "$B"


# The analyzer at scale, on synthetic traces (bench/analyze.sh: its targets, each thread's CPU
# and callgrind's instructions an event).
echo
bench/analyze.sh "$B"

# Python call sites: cudaMemcpyAsync through ctypes from 20 Python frames (bench/pystack.py).
PY=${PYTHON:-python3}
PN=${PYN:-$((N / 2))}
if "$PY" -c 'import ctypes' 2>/dev/null; then
    echo
    echo "Python call sites ($("$PY" -c 'import sys; print(sys.version.split()[0])'), ctypes," \
        "20 Python frames; $PN calls a run, added as above (bench/pystack.py), median of 5 runs;" \
        "batch pairs: the median of each run's back-to-back batch pairs, then of the runs)"
    pyruns() { # NAME then the command prefix: 5 runs' outputs into $tmp/py.NAME
        k=$1
        shift
        for i in 1 2 3 4 5; do
            rm -rf "$tmp/run"
            "$@" "$PY" bench/pystack.py "$B/tests/libcudart.so.13" "$PN" 2>/dev/null
        done >"$tmp/py.$k"
    }
    pykey() { # NAME KEY: the median of KEY over NAME's runs
        awk -v k="$2" '$1 == k {print $2}' "$tmp/py.$1" | median
    }
    pyruns untraced env
    pyruns native "$TOOL" run --dir "$tmp/run" --stacks native --
    pyruns python "$TOOL" run --dir "$tmp/run" --stacks python --
    pu=$(pykey untraced pycopy)
    pn=$(pykey native pycopy_added)
    pp=$(pykey python pycopy_added)
    printf "%-28s %12s %12s\n" "configuration" "copy ns/call" "batch pairs"
    printf "%-28s %12s\n" "untraced (wall)" "$pu"
    printf "%-28s %12s %12s\n" "untraced, added (noise)" "$(pykey untraced pycopy_added)" \
        "$(pykey untraced pycopy_added_pairs)" "traced native, added" "$pn" \
        "$(pykey native pycopy_added_pairs)" "traced python, added" "$pp" \
        "$(pykey python pycopy_added_pairs)"
    figure "Python frames over native stacks" "$(echo "$pp $pn" | awk '{printf "%.0f", $1 - $2}')" \
        "ns/call" 2000 le
    # The same call sites timed inside the process (--debug INFO's exit line): each part of a
    # call's stack on its own, with no batch of direct calls to subtract; medians of 5 runs.
    for i in 1 2 3 4 5; do
        rm -rf "$tmp/run"
        "$TOOL" run --dir "$tmp/run" --stacks python --debug INFO -- "$PY" bench/pystack.py \
            "$B/tests/libcudart.so.13" "$PN" 2>&1 >/dev/null |
            sed -n 's/.*call sites took [0-9]* ns a call: native \([0-9]*\), Python \([0-9]*\).*/\1 \2/p'
    done >"$tmp/timed"
    info "call sites timed in the process: native part" \
        "$(cut -d' ' -f1 "$tmp/timed" | median)" "ns/call"
    info "call sites timed in the process: Python part" \
        "$(cut -d' ' -f2 "$tmp/timed" | median)" "ns/call"
fi
# shapetrace snapshot (issue 25): how long each process is stopped (target: 50 ms on average)
# and the command's wall time, on the doubles (SIMULATED ranks): 4 C ranks, one sleeping while
# the others wait in an all-reduce, and 2 Python ranks; the median of SNAP_ROUNDS snapshots.
SR=${SNAP_ROUNDS:-9}
echo
echo "snapshot: medians of $SR snapshots of a hung job on the doubles (SIMULATED ranks)"
snap_bench() { # label, ranks, then the rank's command (RELEASE is replaced by the release file)
    label=$1 n=$2
    shift 2
    rm -f "$tmp/release" "$tmp/snap.out"
    cmd=$(echo "$*" | sed "s|RELEASE|$tmp/release|")
    # shellcheck disable=SC2086
    SHAPETRACE_DOUBLE_TIMEOUT=120 "$B/tests/shp_launch" -n "$n" --timeout 120 -- $cmd \
        >"$tmp/snap.out" 2>&1 &
    job=$!
    for _ in $(seq 600); do
        [ "$(grep -c 'blocking, pid' "$tmp/snap.out")" -ge "$n" ] && break
        sleep 0.05
    done
    pids=$(sed -n 's/.*blocking, pid \([0-9]*\).*/\1/p' "$tmp/snap.out")
    : >"$tmp/snap.stats"
    for _ in $(seq "$SR"); do
        # shellcheck disable=SC2086
        "$TOOL" snapshot --stats $pids 2>&1 >/dev/null | sed -n \
            's/.* in \([0-9.]*\) s; stopped \([0-9.]*\) ms on average, \([0-9.]*\) ms at most.*/\1 \2 \3/p' \
            >>"$tmp/snap.stats"
    done
    touch "$tmp/release"
    wait "$job" || true
    figure "snapshot, stopped a process, $label" "$(awk '{print $2}' "$tmp/snap.stats" | median)" \
        "ms" 50 le
    info "snapshot, stopped the longest, $label" "$(awk '{print $3}' "$tmp/snap.stats" | median)" "ms"
    info "snapshot, the command's wall time, $label" \
        "$(awk '{print $1}' "$tmp/snap.stats" | median)" "s"
}
snap_bench "4 C ranks" 4 "$B/tests/snap_ranks 60 RELEASE"
snap_bench "2 Python ranks" 2 "$PY tests/load/snap_py.py $B/tests/libnccl.so.2 \
$B/tests/libcudart.so.13 60 RELEASE"
echo "load at end $(cut -d' ' -f1-3 /proc/loadavg)"
