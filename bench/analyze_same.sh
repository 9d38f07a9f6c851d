#!/bin/sh
# shapetrace bench: two builds of the command give the same analysis, byte for byte. For a
# change to the analyzer's speed: `analyze` text and --json (and their exit statuses) of OLD and
# NEW on the examples (planted and clean, with and without their dims and expectation files),
# the patterns of real stacks (tests/load/stacks.c, clean and planted), the scenario's cases, the
# fingerprints of values (tests/load/values.c under --values, each mode) and generated traces of
# every divergence kind (tests/gen/gen_traces.c). Prints one line per difference
# and a last line "analyze_same: N outputs compared, D differ"; exits 1 when some differ.
#
# Usage: bench/analyze_same.sh OLD_TOOL NEW_TOOL [BUILD]   (BUILD: the tree with the test
# programs, default build; CORPUS=DIR keeps the traces there and reuses them on the next run;
# THREADS="1 2 5" runs NEW with each --threads N, against OLD as it runs by default)
set -u
OLD=$1
NEW=$2
B=${3:-build}
T=$B/tests
if [ -n "${CORPUS:-}" ]; then
    dir=$CORPUS
    mkdir -p "$dir"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
else
    dir=$(mktemp -d)
    tmp=$dir
    trap 'rm -rf "$dir"' EXIT
fi
export NO_COLOR=1 SHAPETRACE_DOUBLE_TIMEOUT=2
# trace NAME [RUN_OPTION...] -- CMD...: the traces of CMD under `run`, once per corpus.
trace() {
    name=$1
    shift
    [ -d "$dir/$name" ] && return 0
    "$B/bin/shapetrace" run --dir "$dir/$name" "$@" >/dev/null 2>&1 || true
}
# gen NAME ARGS...: generated traces, once per corpus.
gen() {
    name=$1
    shift
    [ -d "$dir/$name" ] || "$B/tests/gen_traces" "$dir/$name" "$@" >/dev/null 2>&1
}

for ex in hidden_states desync pipeline stall; do
    planted=
    [ "$ex" = hidden_states ] && planted=--buggy
    clean=--clean
    [ "$ex" = hidden_states ] && clean=--fixed
    trace "ex-$ex-planted" -- "$T/shp_launch" -n 4 -- "$B/examples/$ex" $planted
    trace "ex-$ex-clean" -- "$T/shp_launch" -n 4 -- "$B/examples/$ex" $clean
done
for p in graph_buckets graph_side_stream dp_padding pynccl coalesced a2a_uneven new_group \
    abort_reinit fsdp megatron moe bcast root_only pipeline stall gathered pp_graph replay_output \
    replay_shapes graph_gathered extra_branch dormant capped fsdp_freed pynccl_root eagle_dp \
    nonblocking decode_graphs; do
    n=4
    case $p in megatron | nonblocking) n=8 ;; esac
    opt=
    case $p in dormant) opt=--dormant ;; capped) opt="--max-mb 1" ;; esac
    for v in clean planted; do
        trace "stacks-$p-$v" $opt -- "$T/shp_launch" -n "$n" -- "$T/stacks" "$p" "$v"
    done
done
for s in basic graph overrun default-kind nested fork joined "threads 4 300"; do
    trace "scenario-$(echo "$s" | tr ' ' -)" -- "$T/scenario" $s
done
# --values on the doubles as tests/test_values.py runs them: the runtime over the driver.
drv="env SHP_DOUBLE_VIA_DRIVER=1 LD_LIBRARY_PATH=$T"
for m in clean race input capture group; do
    trace "values-$m" --values -- $drv "$T/shp_launch" -n 4 -- "$T/values" "$m"
done
trace values-input-site --values all --values-site 'sample_*' -- $drv "$T/shp_launch" -n 4 -- \
    "$T/values" input
trace values-threads --values -- $drv "$T/scenario" threads 4 300
gen gen-clean 8 20000
gen gen-count 8 20000 --diverge count:3:500
gen gen-dtype 16 5000 --diverge dtype:9:77
gen gen-skip 8 20000 --diverge skip:5:1000
gen gen-stop 8 20000 --diverge stop:2:1500
gen gen-many 64 2000 --diverge count:40:100 --diverge skip:7:300
gen gen-wide 300 500 --diverge stop:299:50
gen gen-one 1 30000
# Hundreds of ranks: events of different ranks at the same nanosecond are common there.
gen gen-512 512 2000 --diverge count:300:100 --diverge dtype:17:150
gen gen-2048 2048 300 --diverge skip:1000:20 --diverge stop:2047:30

# tests/test_analyze.py's expectation for the replay_shapes pattern.
cat >"$tmp/replay_shapes.json" <<'JSON'
{"dims": {"hidden": 256}, "expect": [{"name": "the decode graph writes whole hidden rows",
 "match": {"op": "cudaMemcpyAsync", "site": "capture_output"}, "shape": ["*", "hidden"],
 "dtype": "bf16"}]}
JSON
n=0
bad=0
# same INPUT ARGS...: OLD and NEW on one input with ARGS, text and --json.
same() {
    in=$1
    shift
    for mode in text json; do
        j=
        [ "$mode" = json ] && j=--json
        "$OLD" analyze $j "$@" "$dir/$in" >"$tmp/old" 2>"$tmp/old.err"
        ro=$?
        for t in ${THREADS:-default}; do
            th=
            [ "$t" = default ] || th="--threads $t"
            "$NEW" analyze $j $th "$@" "$dir/$in" >"$tmp/new" 2>"$tmp/new.err"
            rn=$?
            n=$((n + 1))
            # stderr names the corpus directory only; the progress line is for terminals.
            if [ "$ro" != "$rn" ] || ! cmp -s "$tmp/old" "$tmp/new" ||
                ! cmp -s "$tmp/old.err" "$tmp/new.err"; then
                bad=$((bad + 1))
                echo "DIFFERS: analyze $j $th $* $in (exit $ro, $rn)"
                diff "$tmp/old" "$tmp/new" | head -n 6
                diff "$tmp/old.err" "$tmp/new.err" | head -n 4
            fi
        done
    done
}
for in in $(ls "$dir"); do
    same "$in"
    case $in in
    ex-hidden_states-*) same "$in" --dim hidden=7168 ;;
    ex-desync-*) same "$in" --dim hidden=1024 --dim tp=4 ;;
    stacks-gathered-* | stacks-graph_gathered-*) same "$in" --dim hidden=512 ;;
    stacks-replay_output-* | stacks-decode_graphs-*) same "$in" --dim hidden=256 ;;
    gen-*) same "$in" --dim hidden=4096 --dim tp=8 ;;
    esac
    case $in in
    stacks-replay_shapes-*) same "$in" --expect "$tmp/replay_shapes.json" ;;
    ex-*)
        ex=${in#ex-}
        ex=${ex%-*}
        same "$in" --expect "examples/$ex.expect.json"
        ;;
    esac
done
echo "analyze_same: $n outputs compared, $bad differ"
[ "$bad" -eq 0 ]
