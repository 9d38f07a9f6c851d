#!/bin/sh
# shapetrace demo (make demo): trace a program on the test doubles and print what was recorded.
# The ranks and the GPU are SIMULATED here: libnccl.so.2 and libcudart.so.13 are shapetrace's
# test doubles, which move real bytes in host memory. On a real cluster the same command wraps
# your launcher (see the README).
set -eu
B=${1:-build}
dir=$(mktemp -d "${TMPDIR:-/tmp}/shapetrace-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cat <<TXT
shapetrace demo -- SIMULATED ranks: NCCL and CUDA are test doubles, no GPU is used.

On a real job you would run:
    shapetrace run -- torchrun --nproc-per-node 8 serve.py
    shapetrace dump shapetrace-YYYYMMDD-HHMMSS/

Here: $B/tests/scenario basic (one rank; all-reduce, all-gather, broadcast, grouped send/recv,
host/device copies, a 2-D copy, a split communicator) under shapetrace run.

TXT
"$B/bin/shapetrace" run --dir "$dir/run" -- "$B/tests/scenario" basic
echo
"$B/bin/shapetrace" dump "$dir/run"
echo
echo "One event as JSON (shapetrace dump --json), the form programs read:"
"$B/bin/shapetrace" dump --json "$dir/run" | grep ncclAllGather
