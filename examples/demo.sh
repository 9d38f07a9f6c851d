#!/bin/sh
# shapetrace demo (make demo): the motivating failure, traced and analyzed.
# The ranks and the GPUs are SIMULATED here: libnccl.so.2 and libcudart.so.13 are shapetrace's
# test doubles, which move real bytes in host memory, and shp_launch starts the ranks the way
# torchrun does. On a real cluster the same two commands wrap your launcher (see the README).
set -eu
B=${1:-build}
dir=$(mktemp -d "${TMPDIR:-/tmp}/shapetrace-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cat <<TXT
shapetrace demo -- 4 SIMULATED ranks: NCCL and CUDA are test doubles, no GPU is used.

The job (examples/hidden_states.c): tensor-parallel ranks all-gather per-layer hidden states
[771, 7168] bf16, rank 0 captures 4 layers and sends them to the driver through host memory,
and generate() cuts them per sample (512 and 259 tokens). The driver indexes the returned list
wrongly: nothing fails, the shapes are simply wrong.

On a real cluster you would run:
    shapetrace run -- torchrun --nproc-per-node 4 extract_hidden_states.py
    shapetrace analyze --dim hidden=7168 shapetrace-YYYYMMDD-HHMMSS/

Here:
    shapetrace run -- shp_launch -n 4 -- hidden_states --buggy
TXT
"$B/bin/shapetrace" run --dir "$dir/run" -- "$B/tests/shp_launch" -n 4 -- \
    "$B/examples/hidden_states" --buggy
echo
echo "    shapetrace analyze --dim hidden=7168 $dir/run"
echo
"$B/bin/shapetrace" analyze --dim hidden=7168 "$dir/run" || true
echo
echo "    shapetrace report --dim hidden=7168 --html $B/demo-report.html $dir/run"
echo
"$B/bin/shapetrace" report --dim hidden=7168 --title "demo: 4 SIMULATED ranks (test doubles)" \
    --html "$B/demo-report.html" "$dir/run"
echo "Open $B/demo-report.html in a browser: the same finding, with the chain, the grid and the"
echo "timeline. shapetrace export writes the whole run as a timeline for ui.perfetto.dev."
