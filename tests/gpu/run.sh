#!/bin/sh
# shapetrace GPU checks (make check-gpu): real torch, NCCL and CUDA under the preload. Needs a
# GPU, torch with CUDA, and the preload built for this host (make). Writes traces and logs under
# ${OUT:-build/gpu}. Exits non-zero when a check fails.
set -u
B=${1:-build}
OUT=${OUT:-$B/gpu}
mkdir -p "$OUT"
PRELOAD=$(cd "$B/lib" && pwd)/libshapetrace.so
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "$ngpu" -lt 1 ]; then
    echo "check-gpu: no GPU visible to torch; nothing was run"
    exit 1
fi
here=$(dirname "$0")
fail=0
echo "== torch smoke, untraced"
python3 "$here/torch_smoke.py" >"$OUT/untraced.log" 2>&1 || fail=1
cat "$OUT/untraced.log" | grep -E '^check' 
echo "== torch smoke, traced"
rm -rf "$OUT/run"
LD_PRELOAD=$PRELOAD SHAPETRACE_DIR=$OUT/run SHAPETRACE_DEBUG=INFO \
    python3 "$here/torch_smoke.py" >"$OUT/traced.log" 2>&1 || fail=1
grep -E '^check' "$OUT/traced.log"
grep -q FAIL "$OUT/traced.log" && fail=1
ls -la "$OUT/run"
echo "== the PyTorch example, buggy and fixed, traced"
for m in buggy fixed; do
    rm -rf "$OUT/example_$m"
    flag=""
    [ "$m" = buggy ] && flag=--buggy
    LD_PRELOAD=$PRELOAD SHAPETRACE_DIR=$OUT/example_$m \
        python3 "$here/../../examples/torch_hidden_states.py" $flag >"$OUT/example_$m.log" 2>&1 ||
        fail=1
    cat "$OUT/example_$m.log"
done
echo "== bench: per call in us, 3 interleaved rounds, median (analyze the traces elsewhere)"
modes="untraced native python none dormant"
for round in 1 2 3; do
    for mode in $modes; do
        rm -rf "$OUT/bench_run"
        case $mode in
        untraced) python3 "$here/bench_gpu.py" ;;
        dormant) LD_PRELOAD=$PRELOAD SHAPETRACE_DIR=$OUT/bench_run SHAPETRACE_DORMANT=1 \
            python3 "$here/bench_gpu.py" ;;
        *) LD_PRELOAD=$PRELOAD SHAPETRACE_DIR=$OUT/bench_run SHAPETRACE_STACKS=$mode \
            python3 "$here/bench_gpu.py" ;;
        esac >"$OUT/bench_${mode}_$round.log" 2>&1
    done
done
rm -rf "$OUT/bench_run"
for op in all_reduce_4KiB copy_d2d_1KiB copy_d2h_pinned_1KiB; do
    printf "%-22s" "$op"
    for mode in $modes; do
        v=$(cat "$OUT"/bench_${mode}_*.log | awk -v op="$op" '$1 == op {print $2}' | sort -n |
            awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
        printf " %s=%s" "$mode" "$v"
    done
    echo
done
exit $fail
