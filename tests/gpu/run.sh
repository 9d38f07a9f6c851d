#!/bin/sh
# shapetrace GPU checks (make check-gpu): real torch, NCCL and CUDA under the preload, several
# ranks sharing one GPU. Writes a few files under ${OUT:-build/gpu} (summary, logs and traces as
# tarballs, bench results) and prints a summary table last. Exits non-zero when a check fails.
#   SHP_GPU_RANKS  world sizes of the multi-rank runs (default "2 4")
#   SHP_GPU_PARTS  any of: smoke examples pynccl buckets verdicts bench (default all)
#   SHP_TOOL_LD    library path for the shapetrace command only (never the traced jobs')
#   SHP_GPU_WORK   where the traces and logs are made (default a new directory under /tmp)
#   SHP_BENCH_ROUNDS, SHP_BENCH_PROCS  bench batches a process (7), processes a config (3)
set -u
B=${1:-build}
OUT=${OUT:-$B/gpu}
RANKS=${SHP_GPU_RANKS:-2 4}
PARTS=${SHP_GPU_PARTS:-smoke examples pynccl buckets verdicts bench}
here=$(cd "$(dirname "$0")" && pwd)
examples=$(cd "$here/../../examples" && pwd)
W=${SHP_GPU_WORK:-$(mktemp -d /tmp/shapetrace-gpu.XXXXXX)}
mkdir -p "$OUT" "$W/logs" "$W/traces"
export SHP_TOOL
SHP_TOOL=$(cd "$B/bin" && pwd)/shapetrace
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
# The job runs with the caller's library path, whatever the tool needed.
if [ -n "${LD_LIBRARY_PATH+x}" ]; then
    JOB_ENV="env LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
else
    JOB_ENV="env -u LD_LIBRARY_PATH"
fi
st() {
    if [ -n "${SHP_TOOL_LD:-}" ]; then
        LD_LIBRARY_PATH=$SHP_TOOL_LD "$SHP_TOOL" "$@"
    else
        "$SHP_TOOL" "$@"
    fi
}
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "$ngpu" -lt 1 ]; then
    echo "check-gpu: NOT RUN: no GPU visible to torch"
    exit 1
fi
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
SUMMARY=$W/summary.txt
: >"$SUMMARY"
note() { echo "$*" >>"$SUMMARY"; }

# traced NAME SECONDS CMD...: runs CMD under `shapetrace run` into $W/traces/NAME, in the
# background, killed after SECONDS; its status lands in $W/logs/NAME.rc.
traced() {
    name=$1 secs=$2
    shift 2
    rm -rf "$W/traces/$name"
    (
        timeout -k 5 "$secs" "$SHP_TOOL_RUN" --dir "$W/traces/$name" -- $JOB_ENV "$@" \
            >"$W/logs/$name.log" 2>&1
        echo $? >"$W/logs/$name.rc"
    ) &
}
SHP_TOOL_RUN=$W/shapetrace-run
{
    echo '#!/bin/sh'
    if [ -n "${SHP_TOOL_LD:-}" ]; then
        echo "LD_LIBRARY_PATH='$SHP_TOOL_LD' exec '$SHP_TOOL' run \"\$@\""
    else
        echo "exec '$SHP_TOOL' run \"\$@\""
    fi
} >"$SHP_TOOL_RUN"
chmod +x "$SHP_TOOL_RUN"
rc_of() { cat "$W/logs/$1.rc" 2>/dev/null || echo '?'; }
# verdict ARGS...: one summary line from verdict.py.
verdict() { python3 "$here/verdict.py" "$@" >>"$SUMMARY" 2>&1; }
tr_run() { echo torchrun --standalone --nproc-per-node "$1"; }

start=$(date +%s)
if has smoke; then
    traced smoke 120 python3 "$here/torch_smoke.py"
    traced hidden_1rank_buggy 120 python3 "$examples/torch_hidden_states.py" --buggy
fi
if has buckets; then
    traced buckets_clean 150 $(tr_run 2) "$here/graph_buckets.py" --share-gpu --deadline 20
    traced buckets_planted 150 $(tr_run 2) "$here/graph_buckets.py" --share-gpu --deadline 20 \
        --plant
fi
for n in $RANKS; do
    if has examples; then
        for plant in none desync stall kill pipeline hidden; do
            traced "tp${n}_$plant" 180 $(tr_run "$n") "$examples/torch_tp.py" --share-gpu \
                --timeout 20 --plant "$plant"
        done
    fi
    if has pynccl; then
        rm -f "$W/uid$n"
        traced "pynccl$n" 120 $(tr_run "$n") "$here/pynccl_ranks.py" "$W/uid$n" --share-gpu
    fi
    wait
    if has verdicts; then
        # NCCL on a side stream inside graphs, and a call NCCL refuses (ctypes, as pynccl);
        # torch_tp.py with non-blocking communicators (ncclInProgress at their creation).
        for v in clean planted; do
            p=""
            [ "$v" = planted ] && p=--plant
            rm -f "$W/uid_side${n}_$v" "$W/uid_refused${n}_$v"
            traced "side${n}_$v" 150 $(tr_run "$n") "$here/nccl_verdicts.py" \
                "$W/uid_side${n}_$v" sidestream $p --share-gpu --deadline 20
            traced "refused${n}_$v" 150 $(tr_run "$n") "$here/nccl_verdicts.py" \
                "$W/uid_refused${n}_$v" refused $p --share-gpu --deadline 20
        done
        for plant in none desync; do
            traced "tp${n}_nonblocking_$plant" 180 env TORCH_NCCL_USE_COMM_NONBLOCKING=1 \
                $(tr_run "$n") "$examples/torch_tp.py" --share-gpu --timeout 20 --plant "$plant"
        done
        wait
    fi
done
wait
echo "multi-rank runs took $(($(date +%s) - start)) s"

if has smoke; then
    grep -q '^check.*FAIL' "$W/logs/smoke.log" &&
        note "FAIL smoke: $(grep FAIL "$W/logs/smoke.log")"
    grep -q '^check' "$W/logs/smoke.log" || note "FAIL smoke: no checks ran (status $(rc_of smoke))"
    grep -q '^check.*FAIL' "$W/logs/smoke.log" ||
        note "PASS smoke: $(grep -c '^check.* ok' "$W/logs/smoke.log") checks ok"
    verdict analyze hidden_1rank_buggy "$W/traces/hidden_1rank_buggy" 1 \
        shape_mismatch:-:generate:driver_receive -- --dim hidden=7168
fi
if has buckets; then
    verdict count buckets_clean "$W/traces/buckets_clean" 2 ncclAllReduce@captured=4 \
        cudaGraphLaunch=6
    verdict count buckets_planted "$W/traces/buckets_planted" 2 ncclAllReduce@captured=4
    for v in clean planted; do
        note "INFO buckets_$v: exit status $(rc_of "buckets_$v"); $(python3 "$here/verdict.py" \
            analyze "buckets_$v" "$W/traces/buckets_$v" 2 none 2>&1 | sed 's/^[A-Z]* [^:]*: //')"
    done
fi
for n in $RANKS; do
    odd=$((n > 2 ? 2 : n - 1))
    # With 2 ranks a count disagreement is a tie: both are named (as on the doubles).
    desync_ranks=$odd
    [ "$n" -eq 2 ] && desync_ranks=0,1
    last=$((n - 1))
    d="$W/traces/tp$n"
    if has examples; then
        verdict analyze "tp${n}_none" "${d}_none" "$n" none -- --dim hidden=7168
        verdict analyze "tp${n}_none/h1024" "${d}_none" "$n" none -- --dim hidden=1024 \
            --dim tp="$n"
        verdict analyze "tp${n}_desync" "${d}_desync" "$n" \
            count_mismatch:$desync_ranks:row_parallel -- --dim hidden=1024 --dim tp="$n"
        verdict analyze "tp${n}_stall" "${d}_stall" "$n" missing_collective:$last
        verdict analyze "tp${n}_kill" "${d}_kill" "$n" missing_collective:$last \
            --incomplete "$last"
        verdict analyze "tp${n}_pipeline" "${d}_pipeline" "$n" \
            p2p_size_mismatch:$((odd - 1)),$odd:send_activations
        verdict analyze "tp${n}_hidden" "${d}_hidden" "$n" \
            shape_mismatch:0:generate:receive_states -- --dim hidden=7168
        for plant in none desync stall kill pipeline hidden; do
            note "INFO tp${n}_$plant: exit status $(rc_of "tp${n}_$plant")"
        done
    fi
    if has verdicts; then
        verdict count "side${n}_clean" "$W/traces/side${n}_clean" "$n" ncclAllReduce=3 \
            ncclAllReduce@captured=2 cudaGraphLaunch=4
        verdict analyze "side${n}_clean" "$W/traces/side${n}_clean" "$n" none
        verdict analyze "side${n}_planted" "$W/traces/side${n}_planted" "$n" \
            count_mismatch:$([ "$n" -eq 2 ] && echo 0,1 || echo "$last"):all_reduce
        verdict analyze "refused${n}_clean" "$W/traces/refused${n}_clean" "$n" none
        verdict analyze "refused${n}_planted" "$W/traces/refused${n}_planted" "$n" \
            failed_collective:$last:broadcast
        verdict analyze "tp${n}_nonblocking_none" "${d}_nonblocking_none" "$n" none -- \
            --dim hidden=7168
        verdict analyze "tp${n}_nonblocking_desync" "${d}_nonblocking_desync" "$n" \
            count_mismatch:$desync_ranks:row_parallel -- --dim hidden=1024 --dim tp="$n"
        for v in nonblocking_none nonblocking_desync; do
            note "INFO tp${n}_$v: exit status $(rc_of "tp${n}_$v"); $(st dump --json --no-stacks \
                "${d}_$v" 2>/dev/null | grep -c '"op":"none".*"comm_kind"') communicator records \
learned after ncclInProgress, $(st dump --json --no-stacks "${d}_$v" 2>/dev/null |
                grep -c '"result":7') creations that returned ncclInProgress"
        done
        for v in side${n}_clean side${n}_planted refused${n}_clean refused${n}_planted; do
            note "INFO $v: exit status $(rc_of "$v"); $(grep -c 'done$' "$W/logs/$v.log") of $n \
ranks done"
        done
    fi
    if has pynccl; then
        [ "$(grep -c ': pynccl ok' "$W/logs/pynccl$n.log")" -eq "$n" ] &&
            note "PASS pynccl$n/data: $n ranks checked their sums" ||
            note "FAIL pynccl$n/data: $(grep -h ': pynccl' "$W/logs/pynccl$n.log" | head -3)"
        verdict count "pynccl$n" "$W/traces/pynccl$n" "$n" ncclAllReduce=4 \
            ncclAllReduce@captured=1 cudaGraphLaunch=5
        verdict analyze "pynccl$n/analyze" "$W/traces/pynccl$n" "$n" none
    fi
done

if has bench; then
    res=$W/bench.jsonl
    : >"$res"
    port=29600
    tool_ld=${SHP_TOOL_LD:-}
    # The same 4 cores for every process: migrations between cores gave batches two modes.
    pin=""
    command -v taskset >/dev/null && pin="taskset -c 4-7"
    for stacks in none native python; do
        port=$((port + 1))
        rm -rf "$W/traces/bench_$stacks"
        $pin timeout -k 5 120 "$SHP_TOOL_RUN" --dormant --stacks "$stacks" \
            --dir "$W/traces/bench_$stacks" -- $JOB_ENV python3 "$here/bench_attach.py" "$res" \
            "stacks $stacks" "$port" --attach "$W/traces/bench_$stacks" --tool "$SHP_TOOL" \
            --tool-ld "$tool_ld" \
            >"$W/logs/bench_$stacks.log" 2>&1 || note "FAIL bench stacks $stacks: see its log"
    done
    for round in $(seq "${SHP_BENCH_PROCS:-3}"); do
        for cfg in untraced nccl_debug flight_recorder; do
            port=$((port + 1))
            case $cfg in
            untraced) set -- ;;
            nccl_debug) set -- NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL \
                NCCL_DEBUG_FILE="$W/logs/nccl_debug.%p.txt" ;;
            flight_recorder) set -- TORCH_FR_BUFFER_SIZE=2000 ;;
            esac
            $pin env "$@" timeout -k 5 120 python3 "$here/bench_attach.py" "$res" "$cfg" "$port" \
                >>"$W/logs/bench_$cfg.log" 2>&1 || note "FAIL bench $cfg: see its log"
        done
    done
    python3 "$here/bench_table.py" "$res" >"$W/bench_table.txt" 2>&1
    cp "$res" "$OUT/bench.jsonl"
fi

tar -C "$W" -czf "$OUT/logs.tar.gz" logs
tar -C "$W" --exclude="traces/bench_*" -czf "$OUT/traces.tar.gz" traces
cp "$SUMMARY" "$OUT/summary.txt"
[ -f "$W/bench_table.txt" ] && cp "$W/bench_table.txt" "$OUT/bench_table.txt"
echo "== check-gpu summary ($(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - start)) s)"
[ -f "$W/bench_table.txt" ] && cat "$W/bench_table.txt"
cat "$SUMMARY"
! grep -q '^FAIL' "$SUMMARY"
