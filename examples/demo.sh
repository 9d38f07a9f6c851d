#!/bin/sh
# shapetrace demo (make demo): the motivating failure, traced and analyzed.
# The ranks and the GPUs are SIMULATED here: libnccl.so.2 and libcudart.so.13 are shapetrace's
# test doubles, which move real bytes in host memory, and shp_launch starts the ranks the way
# torchrun does. On a real cluster the same two commands wrap your launcher (see the README).
# The run stays in B/demo-run (the next demo replaces it), and every command printed here is
# the one that ran, so that it can be run again, as it is, from the top of the tree.
# Usage: examples/demo.sh [B]   (B: the build tree, default build)
set -eu
B=${1:-build}
tool=$B/bin/shapetrace
run=$B/demo-run
html=$B/demo-report.html
title="demo: 4 SIMULATED ranks (test doubles)"
# A run directory holds one run: traces left by an earlier demo would be analyzed with these.
rm -rf "$run"
cat <<TXT
shapetrace demo -- 4 SIMULATED ranks: NCCL and CUDA are test doubles, no GPU is used.

The job (examples/hidden_states.c): tensor-parallel ranks all-gather per-layer hidden states
[771, 7168] bf16, rank 0 captures 4 layers and sends them to the driver through host memory,
and generate() cuts them per sample (512 and 259 tokens). The driver indexes the returned list
wrongly: nothing fails, the shapes are simply wrong.

On a real cluster you would run:
    shapetrace run -- torchrun --nproc-per-node 4 extract_hidden_states.py
    shapetrace analyze --dim hidden=7168 shapetrace-YYYYMMDD-HHMMSS/

Here (shp_launch stands for torchrun):
    $tool run --dir $run -- $B/tests/shp_launch -n 4 -- $B/examples/hidden_states --buggy
TXT
"$tool" run --dir "$run" -- "$B/tests/shp_launch" -n 4 -- "$B/examples/hidden_states" --buggy
echo
echo "    $tool analyze --dim hidden=7168 $run"
echo
"$tool" analyze --dim hidden=7168 "$run" || true
echo
echo "    $tool report --dim hidden=7168 --title \"$title\" --html $html $run"
echo
"$tool" report --dim hidden=7168 --title "$title" --html "$html" "$run"
cat <<TXT
Open $html in a browser: the same finding, with the chain, the grid and the timeline.

The run stays in $run (the next make demo replaces it).
To look at it again, from the top of the tree:
    $tool analyze --dim hidden=7168 $run
    $tool dump $run
    $tool export -o $B/demo-trace.json $run
    $tool report --dim hidden=7168 --title "$title" --html $html $run
(the export is the whole run as one timeline: open it in ui.perfetto.dev or chrome://tracing)
TXT
