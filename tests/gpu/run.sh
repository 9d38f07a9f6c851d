#!/bin/sh
# shapetrace GPU checks (make check-gpu): real torch, NCCL and CUDA under the preload, several
# ranks sharing one GPU. Writes a few files under ${OUT:-build/gpu} (summary, logs and traces as
# tarballs, bench results) and prints a summary table last. Exits non-zero when a check fails.
#   SHP_GPU_RANKS  world sizes of the multi-rank runs (default "2 4")
#   SHP_GPU_PARTS  any of: smoke examples pynccl buckets verdicts harm llama cupy snapshot values
#                  bench decode cores format (default all; format checks the traces of the
#                  parts before it)
#   SHP_TOOL_LD    library path for the shapetrace command only (never the traced jobs')
#   SHP_GPU_WORK   where the traces and logs are made (default a new directory under /tmp)
#   SHP_BENCH_ROUNDS, SHP_BENCH_PROCS  bench batches a process (7), processes a config (3)
#   SHP_BENCH_VALUES  0 leaves bench's --values decode loops out (default 1)
#   SHP_VALUES_PROMISE  0 leaves the values part's check of NCCL's promise out (default 1)
#   SHP_DECODE_BLOCKS, SHP_DECODE_STEPS  decode's blocks a process (24), steps a block (10)
#   SHP_DECODE_STACKS  decode's stack settings (default "python native none")
#   SHP_DECODE_OTHERS  0 leaves out decode's untraced, NCCL-log and Flight Recorder processes
set -u
B=${1:-build}
OUT=${OUT:-$B/gpu}
RANKS=${SHP_GPU_RANKS:-2 4}
PARTS=${SHP_GPU_PARTS:-smoke examples pynccl buckets verdicts harm llama cupy snapshot values bench decode cores format}
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

# traced NAME SECONDS CMD...: runs CMD under `shapetrace run $run_opts` into $W/traces/NAME, in
# the background, killed after SECONDS; its status lands in $W/logs/NAME.rc.
run_opts=""
traced() {
    name=$1 secs=$2
    shift 2
    rm -rf "$W/traces/$name"
    (
        timeout -k 5 "$secs" "$SHP_TOOL_RUN" $run_opts --dir "$W/traces/$name" -- $JOB_ENV "$@" \
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
    if has llama; then
        for plant in none prompt fp16 leave; do
            traced "llama${n}_$plant" 180 $(tr_run "$n") "$here/llama_tp.py" --share-gpu \
                --timeout 20 --plant "$plant"
        done
    fi
    if has cupy; then
        for plant in none count dtype; do
            rm -f "$W/cupy_uid${n}_$plant"
            traced "cupy${n}_$plant" 120 $(tr_run "$n") "$here/cupy_ranks.py" \
                "$W/cupy_uid${n}_$plant" --share-gpu --plant "$plant"
        done
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

# shapetrace snapshot of a hung 4-rank job started without shapetrace, alone on the machine
# (--all pictures every process of this user that maps NCCL): its verdict lines go to the
# summary as they are; its log, JSON and text view to the logs.
if has snapshot; then
    mkdir -p "$W/snapshot"
    timeout -k 5 600 python3 "$here/snapshot_check.py" "$W/snapshot" 4 >"$W/logs/snapshot.log" 2>&1
    grep -E '^(PASS|FAIL|INFO) snapshot' "$W/logs/snapshot.log" >>"$SUMMARY"
    grep -qE '^(PASS|FAIL) snapshot' "$W/logs/snapshot.log" ||
        note "FAIL snapshot: no verdict (see logs/snapshot.log)"
    cp "$W"/snapshot/*.json "$W"/snapshot/*.txt "$W"/snapshot/*.log "$W/logs/" 2>/dev/null
fi

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
            count_mismatch:$([ "$n" -eq 2 ] && echo 0,1 || echo "$last"):all_reduce@nccl_verdicts.py
        verdict analyze "refused${n}_clean" "$W/traces/refused${n}_clean" "$n" none
        verdict analyze "refused${n}_planted" "$W/traces/refused${n}_planted" "$n" \
            failed_collective:$last:broadcast@nccl_verdicts.py
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
    if has llama; then
        # A Hugging Face Llama under DTensor: the site of the diverging all-reduce is the
        # model's forward in modeling_llama.py, never torch's dispatch.
        # llama_tp.py plants on the last rank (with 2 ranks a disagreement is a tie: both).
        llama_ranks=$last
        [ "$n" -eq 2 ] && llama_ranks=0,1
        verdict analyze "llama${n}_none" "$W/traces/llama${n}_none" "$n" none
        verdict analyze "llama${n}_prompt" "$W/traces/llama${n}_prompt" "$n" \
            count_mismatch:$llama_ranks:forward@modeling_llama.py
        verdict analyze "llama${n}_fp16" "$W/traces/llama${n}_fp16" "$n" \
            dtype_mismatch:$llama_ranks:forward@modeling_llama.py
        verdict analyze "llama${n}_leave" "$W/traces/llama${n}_leave" "$n" \
            missing_collective:$last
        for plant in none prompt fp16 leave; do
            note "INFO llama${n}_$plant: exit status $(rc_of "llama${n}_$plant")"
        done
    fi
    if has cupy; then
        [ "$(grep -c ': cupy ok' "$W/logs/cupy${n}_none.log")" -eq "$n" ] &&
            note "PASS cupy$n/data: $n ranks checked their sums" ||
            note "FAIL cupy$n/data: $(grep -h ': cupy' "$W/logs/cupy${n}_none.log" | head -3)"
        verdict analyze "cupy${n}_none" "$W/traces/cupy${n}_none" "$n" none
        # cupy_ranks.py plants on the last rank (torch_tp.py on rank 2): with 2 ranks a tie.
        cupy_ranks=$last
        [ "$n" -eq 2 ] && cupy_ranks=0,1
        verdict analyze "cupy${n}_count" "$W/traces/cupy${n}_count" "$n" \
            count_mismatch:$cupy_ranks:reduce_gradients@cupy_ranks.py
        verdict analyze "cupy${n}_dtype" "$W/traces/cupy${n}_dtype" "$n" \
            dtype_mismatch:$cupy_ranks:reduce_gradients@cupy_ranks.py
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

if has values; then
    # The fingerprint kernel against the host's bits, one process.
    timeout -k 5 300 "$SHP_TOOL_RUN" --values all --values-site 'fingerprint_*' \
        --dir "$W/traces/values_hash" -- $JOB_ENV python3 "$here/values_hash.py" \
        --run "$W/values_hash" >"$W/logs/values_hash.log" 2>&1 ||
        note "FAIL values_hash/run: exit status $?, see its log"
    SHP_FINGERPRINT=$(cd "$B/tests" && pwd)/shp_fingerprint python3 "$here/values_hash.py" \
        --check "$W/traces/values_hash" "$W/values_hash" >>"$SUMMARY" 2>&1
    # NCCL's promise: 4 ranks, one job per algorithm and protocol, under --values collectives.
    : >"$W/promise.jsonl"
    algos="Ring Tree"
    [ "${SHP_VALUES_PROMISE:-1}" = 0 ] && algos=""
    for algo in $algos; do
        for proto in LL LL128 Simple; do
            name=promise_${algo}_$proto
            rm -rf "$W/traces/$name"
            (
                timeout -k 5 300 "$SHP_TOOL_RUN" --values collectives --dir "$W/traces/$name" \
                    -- $JOB_ENV NCCL_ALGO=$algo NCCL_PROTO=$proto $(tr_run 4) \
                    "$here/values_promise.py" "$W/promise.jsonl" --share-gpu \
                    >"$W/logs/$name.log" 2>&1
                echo $? >"$W/logs/$name.rc"
            ) &
        done
    done
    wait # the six jobs side by side: each is mostly waiting on loopback sockets
    for algo in $algos; do
        for proto in LL LL128 Simple; do
            name=promise_${algo}_$proto
            rc=$(rc_of "$name")
            if [ "$rc" = 0 ]; then
                verdict analyze "$name" "$W/traces/$name" 4 none
            else
                note "INFO $name: NCCL_ALGO=$algo NCCL_PROTO=$proto did not run (exit $rc):" \
                    "$(grep -m 1 -i 'error' "$W/logs/$name.log")"
            fi
        done
    done
    if [ -z "$algos" ]; then
        note "NOT RUN values_promise: SHP_VALUES_PROMISE=0"
    elif python3 "$here/values_promise.py" --table "$W/promise.jsonl" >"$W/promise_table.txt" 2>&1
    then
        note "PASS values_promise: $(tail -n 1 "$W/promise_table.txt")"
    else
        note "FAIL values_promise: $(tail -n 1 "$W/promise_table.txt") (table: promise_table.txt)"
    fi
    # torch_tp.py under --values: the clean run silent, one ulp in one rank's batch found
    # (after the other jobs: fewer processes share the GPU).
    # llama_tp.py --plant perturb: the last rank's final norm weights one unit in the last place
    # off from step 2 on. The all-reduces' outputs agree (every rank receives the same sum), but the logits
    # that rank computes and copies to the host to sample from do not: the copy at decode_step
    # is where the values first differ.
    run_opts="--values"
    for n in $RANKS; do
        for plant in none ulp; do
            traced "tp${n}_values_$plant" 180 $(tr_run "$n") "$examples/torch_tp.py" --share-gpu \
                --timeout 20 --plant "$plant"
        done
        wait
    done
    run_opts="--values all --values-site decode_step"
    for n in $RANKS; do
        traced "llama${n}_values_perturb" 180 $(tr_run "$n") "$here/llama_tp.py" --share-gpu \
            --timeout 20 --plant perturb
        traced "llama${n}_values_none" 180 $(tr_run "$n") "$here/llama_tp.py" --share-gpu \
            --timeout 20 --plant none
        wait
    done
    run_opts=""
    for n in $RANKS; do
        ulp_ranks=$((n > 1 ? 1 : 0))
        [ "$n" -eq 2 ] && ulp_ranks=0,1
        verdict analyze "tp${n}_values_none" "$W/traces/tp${n}_values_none" "$n" none -- \
            --dim hidden=7168
        verdict analyze "tp${n}_values_ulp" "$W/traces/tp${n}_values_ulp" "$n" \
            value_mismatch:$ulp_ranks:embed
        for plant in none ulp; do
            note "INFO tp${n}_values_$plant: exit status $(rc_of "tp${n}_values_$plant")"
        done
        last=$((n - 1))
        perturbed=$last
        [ "$n" -eq 2 ] && perturbed=0,1
        verdict analyze "llama${n}_values_none" "$W/traces/llama${n}_values_none" "$n" none
        verdict analyze "llama${n}_values_perturb" "$W/traces/llama${n}_values_perturb" "$n" \
            value_mismatch:$perturbed:decode_step@llama_tp.py
    done
fi

if has harm; then
    # One torch process untraced, then traced with native and with Python stacks: the same
    # output, line for line (its descriptors by kind, how many it holds, how many files it can
    # still open at its limit). Before issue 22's fixes the traced ones held 3 more (libunwind's
    # pipe, the trace's descriptor).
    port=29640
    $JOB_ENV timeout -k 5 120 python3 "$here/harm.py" "$port" >"$W/logs/harm_untraced.log" \
        2>"$W/logs/harm_untraced.err"
    base=$(awk '$1 == "held" {print $2}' "$W/logs/harm_untraced.log")
    grep -q '^done' "$W/logs/harm_untraced.log" || note "FAIL harm/untraced: see its log"
    for stacks in native python; do
        port=$((port + 1))
        rm -rf "$W/traces/harm_$stacks"
        timeout -k 5 120 "$SHP_TOOL_RUN" --dir "$W/traces/harm_$stacks" --stacks "$stacks" \
            --debug INFO -- $JOB_ENV python3 "$here/harm.py" "$port" "${base:-0}" \
            >"$W/logs/harm_$stacks.log" 2>"$W/logs/harm_$stacks.err"
        if cmp -s "$W/logs/harm_untraced.log" "$W/logs/harm_$stacks.log"; then
            note "PASS harm/$stacks: output as untraced ($(grep '^fds' "$W/logs/harm_$stacks.log");" \
                "$(grep '^opens' "$W/logs/harm_$stacks.log"))"
        else
            note "FAIL harm/$stacks: untraced '$(tr '\n' ';' <"$W/logs/harm_untraced.log")'," \
                "traced '$(tr '\n' ';' <"$W/logs/harm_$stacks.log")'"
        fi
        note "INFO harm/$stacks: $(grep -o 'stacks through.*' "$W/logs/harm_$stacks.err" |
            head -n 1); $(st dump --json "$W/traces/harm_$stacks" 2>/dev/null |
            grep -c '"op":"ncclAllReduce"') all-reduces traced;" \
            "$(grep -c ' WARN ' "$W/logs/harm_$stacks.err") warnings"
    done
fi

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
    # --values: the decode loop armed against dormant, in one process per configuration.
    vres=$W/bench_values.jsonl
    : >"$vres"
    vcfgs="none every1 every100"
    [ "${SHP_BENCH_VALUES:-1}" = 0 ] && vcfgs=""
    for cfg in $vcfgs; do
        port=$((port + 1))
        case $cfg in
        none) set -- ;;
        every1) set -- --values all --values-every 1 ;;
        every100) set -- --values all --values-every 100 ;;
        esac
        rm -rf "$W/traces/bench_values_$cfg"
        $pin timeout -k 5 300 "$SHP_TOOL_RUN" --dormant "$@" --dir "$W/traces/bench_values_$cfg" \
            -- $JOB_ENV python3 "$here/bench_values.py" "$vres" "$cfg" "$port" \
            --attach "$W/traces/bench_values_$cfg" --tool "$SHP_TOOL" --tool-ld "$tool_ld" \
            >"$W/logs/bench_values_$cfg.log" 2>&1 || note "FAIL bench values $cfg: see its log"
    done
    python3 "$here/bench_values.py" --table "$vres" >>"$W/bench_table.txt" 2>&1
    cp "$vres" "$OUT/bench_values.jsonl"
fi

if has decode; then
    # A serving loop's step, traced at each stack setting against dormant in one process; the
    # untraced process, NCCL's log and the Flight Recorder (not switchable in a process) beside.
    res=$W/decode.jsonl
    decode_size="--blocks ${SHP_DECODE_BLOCKS:-24} --steps ${SHP_DECODE_STEPS:-10}"
    : >"$res"
    port=29700
    pin=""
    command -v taskset >/dev/null && pin="taskset -c 4-7"
    for stacks in ${SHP_DECODE_STACKS:-python native none}; do
        port=$((port + 1))
        rm -rf "$W/traces/decode_$stacks"
        # --debug INFO: the process says at exit how many native stacks it unwound in full and what
        # its call sites cost a call (timed)
        $pin timeout -k 5 180 "$SHP_TOOL_RUN" --dormant --stacks "$stacks" --debug INFO \
            --dir "$W/traces/decode_$stacks" -- $JOB_ENV python3 "$here/bench_decode.py" "$res" \
            "stacks $stacks" "$port" --attach "$W/traces/decode_$stacks" --tool "$SHP_TOOL" \
            --tool-ld "${SHP_TOOL_LD:-}" $decode_size \
            >"$W/logs/decode_$stacks.log" 2>&1 || note "FAIL decode stacks $stacks: see its log"
        [ "$stacks" = none ] || note "INFO decode stacks $stacks: $(grep -o \
            'native stacks unwound in full.*' "$W/logs/decode_$stacks.log" | tail -n 1)," \
            "$(grep -o 'call sites took.*' "$W/logs/decode_$stacks.log" | tail -n 1)," \
            "$(st dump --json --no-stacks "$W/traces/decode_$stacks" 2>/dev/null | wc -l) events"
    done
    others="untraced nccl_debug flight_recorder"
    [ "${SHP_DECODE_OTHERS:-1}" = 0 ] && others=""
    for cfg in $others; do
        port=$((port + 1))
        case $cfg in
        untraced) set -- ;;
        nccl_debug) set -- NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL \
            NCCL_DEBUG_FILE="$W/logs/decode_nccl_debug.%p.txt" ;;
        flight_recorder) set -- TORCH_FR_BUFFER_SIZE=2000 ;;
        esac
        $pin env "$@" timeout -k 5 180 python3 "$here/bench_decode.py" "$res" "$cfg" "$port" $decode_size \
            >>"$W/logs/decode_$cfg.log" 2>&1 || note "FAIL decode $cfg: see its log"
    done
    python3 "$here/decode_table.py" "$res" >"$W/decode_table.txt" 2>&1
    cp "$res" "$OUT/decode.jsonl"
fi

if has cores; then
    # The analyzer on the host's cores against the same run pinned to 2 (bench/cores.sh: 64
    # ranks x 1,000,000 generated events, about 4.2 GB under TMPDIR while it runs), alone.
    here_root=$(cd "$here/../.." && pwd)
    if [ -n "${SHP_TOOL_LD:-}" ]; then
        LD_LIBRARY_PATH=$SHP_TOOL_LD sh "$here_root/bench/cores.sh" "$B" >"$W/cores_table.txt" 2>&1
    else
        sh "$here_root/bench/cores.sh" "$B" >"$W/cores_table.txt" 2>&1
    fi
    case $? in
    0) note "PASS cores: $(grep -E '^[0-9]+ ' "$W/cores_table.txt" | tail -n 1 |
        awk '{print "analyze on " $1 " cores " $2 " s, speedup " $8}')" ;;
    2) note "NOT RUN cores: $(tail -n 1 "$W/cores_table.txt")" ;;
    *) note "FAIL cores: the reports differ or the run failed (cores_table.txt)" ;;
    esac
fi

if has format; then
    # Format version 6 read as the version 2 it replaces (whole stacks, full records for the
    # compact ones of 2-D copies, communicators' ends, allocations, frees and modules):
    # dump --json and analyze --json of each real run the same both ways (tests/gpu/v2_same.py).
    python3 "$here/v2_same.py" "$(cd "$B/tests" && pwd)/shp_craft" "$W"/traces/* \
        >>"$SUMMARY" 2>&1 || true
fi

tar -C "$W" -czf "$OUT/logs.tar.gz" logs
tar -C "$W" --exclude="traces/bench_*" --exclude="traces/decode_*" -czf "$OUT/traces.tar.gz" traces
cp "$SUMMARY" "$OUT/summary.txt"
[ -f "$W/bench_table.txt" ] && cp "$W/bench_table.txt" "$OUT/bench_table.txt"
[ -f "$W/promise_table.txt" ] && cp "$W/promise_table.txt" "$OUT/promise_table.txt"
[ -f "$W/decode_table.txt" ] && cp "$W/decode_table.txt" "$OUT/decode_table.txt"
[ -f "$W/cores_table.txt" ] && cp "$W/cores_table.txt" "$OUT/cores_table.txt"
echo "== check-gpu summary ($(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - start)) s)"
[ -f "$W/bench_table.txt" ] && cat "$W/bench_table.txt"
[ -f "$W/promise_table.txt" ] && cat "$W/promise_table.txt"
[ -f "$W/decode_table.txt" ] && cat "$W/decode_table.txt"
[ -f "$W/cores_table.txt" ] && cat "$W/cores_table.txt"
cat "$SUMMARY"
! grep -q '^FAIL' "$SUMMARY"
