#!/bin/sh
# shapetrace bench: what the symbol step at the end of `run` costs (wall time, file size) on the
# examples and on a program with many distinct call sites, on the test doubles (simulated ranks).
# Usage: bench/symbols.sh BUILD_DIR [CALL_SITES]. Prints one line per run.
set -eu
B=${1:-build}
SITES=${2:-4000}
TOOL=$B/bin/shapetrace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# SITES functions, each calling ncclAllReduce from its own line, reached at 1 to 4 frames deep:
# every call a distinct stack, and SITES * 4 + 4 distinct frames in the executable.
{
    echo '#include <nccl.h>'
    echo '#include <cuda_runtime_api.h>'
    echo 'static ncclComm_t comm; static void *buf;'
    echo 'static void ar(void) { ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, 0); }'
    seq 0 $((SITES - 1)) |
        sed 's/.*/__attribute__((noinline)) void site&(int d) { if (d) site&(d - 1); else ar(); }/'
    echo 'int main(void) { ncclUniqueId id; ncclGetUniqueId(&id);'
    echo '  ncclCommInitRank(&comm, 1, id, 0); cudaMalloc(&buf, 64);'
    seq 0 $((SITES - 1)) | sed 's/.*/  site&(& % 4);/'
    echo '  ncclCommDestroy(comm); return 0; }'
} >"$tmp/many.c"
${CC:-gcc} -g -O1 -fno-optimize-sibling-calls -I"${CUDA_HOME:-/usr/local/cuda}/include" \
    -o "$tmp/many" "$tmp/many.c" -L"$B/tests" -Wl,-rpath,"$(cd "$B/tests" && pwd)" \
    -l:libnccl.so.2 -l:libcudart.so.13

one() { # label, then the command
    label=$1
    shift
    rm -rf "$tmp/run"
    SHAPETRACE_DOUBLE_TIMEOUT=2 "$TOOL" run --dir "$tmp/run" -- "$@" >/dev/null 2>"$tmp/err" || true
    line=$(grep 'native frames symbolized' "$tmp/err" || echo "no symbols line")
    f=$(ls "$tmp"/run/*.symbols 2>/dev/null || true)
    size=$([ -n "$f" ] && stat -c %s "$f" || echo 0)
    stacks=$("$TOOL" dump --json "$tmp/run" | grep -o '"stack":\[[^]]*\]' | sort -u | wc -l)
    t0=$(date +%s%N)
    "$TOOL" symbols "$tmp/run" 2>/dev/null
    t1=$(date +%s%N)
    printf "%-26s %6s distinct stacks; %s; %s bytes; shapetrace symbols alone %d ms\n" "$label" \
        "$stacks" "$(echo "$line" | sed 's/^shapetrace: //; s/, into.*//')" "$size" \
        $(((t1 - t0) / 1000000))
}
for ex in hidden_states desync pipeline stall; do
    args=
    [ "$ex" = hidden_states ] && args=--buggy
    one "$ex (4 ranks)" "$B/tests/shp_launch" -n 4 -- "$B/examples/$ex" $args
done
one "$SITES call sites" "$tmp/many"
t0=$(date +%s%N)
"$TOOL" dump "$tmp/run" >/dev/null
t1=$(date +%s%N)
rm "$tmp/many" # the executable is gone: its frames now come from the symbol file
"$TOOL" dump "$tmp/run" >"$tmp/dump"
t2=$(date +%s%N)
named=$(grep -c ' ar (' "$tmp/dump")
echo "dump of the $SITES-site run: $(((t1 - t0) / 1000000)) ms with the executable here," \
    "$(((t2 - t1) / 1000000)) ms from the symbol file ($named of $SITES all-reduce rows named)"
