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
echo "== bench (per call, us)"
python3 "$here/bench_gpu.py" >"$OUT/bench_untraced.log" 2>&1
LD_PRELOAD=$PRELOAD SHAPETRACE_DIR=$OUT/bench_run python3 "$here/bench_gpu.py" \
    >"$OUT/bench_traced.log" 2>&1
LD_PRELOAD=$PRELOAD SHAPETRACE_DIR=$OUT/bench_run_nostack SHAPETRACE_STACKS=none \
    python3 "$here/bench_gpu.py" >"$OUT/bench_traced_nostacks.log" 2>&1
paste "$OUT/bench_untraced.log" "$OUT/bench_traced.log" "$OUT/bench_traced_nostacks.log"
exit $fail
