#!/bin/sh
# shapetrace bench: instructions the preload adds to a call, counted (valgrind's callgrind), not
# timed. For each wrapper that bench/overhead calls (cudaMemcpyAsync, ncclAllReduce,
# cudaGraphLaunch): the instructions executed from the program's call of the wrapper to its
# return, less those of the library's own function that the preload called for it, a call (what
# else the preload calls, such as the runtime's cudaGetDevice for a copy, counts). A timer cannot resolve a dormant wrapper's few ns on a shared machine (the doubles'
# all-reduce moves by 30 ns between batches); a count is exact to the instruction. One line per
# configuration and call. bench/overhead runs without its captured all-reduces (`nocapture`):
# every call of a function is counted together, and those take the capture's slower path.
# Usage: [PRELOAD=OTHER.so] bench/instr.sh [BUILD [N]] (PRELOAD: another build's preload, to compare)
set -eu
B=${1:-build}
N=${2:-15000}
command -v valgrind >/dev/null || {
    echo "instr: NOT RUN (no valgrind)"
    exit 0
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cfg in dormant none native python; do
    rm -rf "$tmp/run"
    case $cfg in
    dormant) set -- SHAPETRACE_DORMANT=1 ;;
    *) set -- SHAPETRACE_STACKS=$cfg ;;
    esac
    env "$@" SHAPETRACE_PREFAULT=0 SHAPETRACE_DIR="$tmp/run" \
        LD_PRELOAD="${PRELOAD:-$(cd "$B/lib" && pwd)/libshapetrace.so}" \
        valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$cfg" "$B/bench/overhead" "$N" nocapture \
        >/dev/null 2>&1
    # The raw profile: per function (object, name) its own cost lines, and after each `calls=`
    # line the inclusive cost of that call, with the callee's object and name.
    python3 - "$cfg" "$tmp/cg.$cfg" <<'PY'
import re, sys
cfg, path = sys.argv[1], sys.argv[2]
want = ("cudaMemcpyAsync", "ncclAllReduce", "cudaGraphLaunch")
names = {}


def name(kind, rest):
    m = re.match(r"\((\d+)\)(?: (.*))?", rest)
    if not m:
        return rest
    if m.group(2) is not None:
        names[(kind, m.group(1))] = m.group(2)
    return names.get((kind, m.group(1)), "?")


ours = lambda ob: ob.endswith("libshapetrace.so")
ob = fn = cob = cfn = None
pending = False
into, real = {}, {}
for line in open(path):
    line = line.rstrip("\n")
    k, _, rest = line.partition("=")
    if k == "ob":
        ob = name("ob", rest)
    elif k == "fn":
        fn, cob = name("fn", rest), None
    elif k == "cob":
        cob = name("ob", rest)
    elif k == "cfn":
        cfn = name("fn", rest)
    elif k == "calls":
        pending = True
        ncalls = int(rest.split()[0]) if rest.split() else 0
    elif line[:1] and line[:1] in "0123456789+-*" and len(line.split()) > 1:
        if pending:
            ir = int(line.split()[-1])
            callee_ob = cob or ob
            # the program's calls into a wrapper: what they cost, all included
            if not ours(ob) and ours(callee_ob) and cfn in want:
                n, t = into.get(cfn, (0, 0))
                into[cfn] = (n + ncalls, t + ir)
            # the preload's calls of the library's own function: not the preload's cost
            base = cfn[1:] if cfn.startswith("p") else cfn
            if ours(ob) and not ours(callee_ob) and base in want:
                real[base] = real.get(base, 0) + ir
            pending = False
            cob = None
for w in want:
    n, t = into.get(w, (0, 0))
    if n:
        print("instructions added, %-8s %-16s %7.1f a call (%d calls)" % (
            cfg, w, (t - real.get(w, 0)) / n, n))
PY
done
