#!/bin/bash
# shapetrace: the old and the new `shapetrace` side by side, on the same inputs.
#
# Usage: tests/compare_old.sh [-o DIR] [-n LINES] [-e EXPLAIN] [OLDREV]
#
# Builds OLDREV (default 6e0c7f3, main before issues 22 to 27) in a temporary clone of this
# repository, and this working tree as it is (in $B, default build), then runs both commands over
# the same inputs and prints, per input, a unified diff of what they gave (exit status, stdout,
# stderr and any file the command writes), then a summary: inputs compared, identical, differing.
#   inputs    the four examples, planted and clean, traced on the test doubles (4 SIMULATED
#             ranks) by this tree and by OLDREV; gen_traces traces, clean and with every kind of
#             --diverge; bad input (missing, empty, junk, cut, emptied and foreign-version traces,
#             a FIFO); usage errors of every command; every help text and --version; `run` itself
#             on the examples and on run directories it should refuse
#   commands  on each trace input: dump (text, --json, --no-stacks), analyze (text, --json, the
#             example's dims, its expectation file), status (text, --json), export (chrome,
#             perfetto), report --html
# Both commands read the very same trace files, so their pids, hosts and addresses agree. Before
# the diff, only what differs between two runs of one command is rewritten: the paths of the two
# builds and of the work directory, the seconds that `run` and `status` print, the clock that
# `status` and `report` show, and the pids of `run`'s own jobs; `run`'s output lines are sorted
# (four ranks print at once). Each command runs under `timeout 30` (exit 124: it hung).
#   -o DIR      keep everything there (default: a new directory under ${TMPDIR:-/tmp}, kept and
#               named): DIR/diff/NAME.diff is each input's whole diff, DIR/summary.txt the summary
#   -n LINES    diff lines printed per input (default 40; 0: all)
#   -e EXPLAIN  a file of lines "GLOB<TAB>why": the why of the first GLOB that matches a
#               differing input's name is printed beside it in the summary (else UNEXPLAINED)
# OLDREV's build takes OLDREV's own dependency step. Exit status 0 when the comparison ran
# (whatever it found), 1 when a build or an input failed.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
out=
lines=40
explain=
while getopts o:n:e:h opt; do
    case $opt in
    o) out=$OPTARG ;;
    n) lines=$OPTARG ;;
    e) explain=$(cd "$(dirname "$OPTARG")" && pwd)/$(basename "$OPTARG") ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 2
        ;;
    esac
done
shift $((OPTIND - 1))
oldrev=${1:-6e0c7f3}
B=${B:-build}
case $B in /*) newb=$B ;; *) newb=$src/$B ;; esac

if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/shapetrace-compare.XXXXXX")
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
# A DIR of an earlier comparison is reused (its clone too); any other one must be empty.
if [ ! -e "$out/.shapetrace-compare" ] && [ -n "$(ls -A "$out")" ]; then
    echo "compare: $out is not empty and not a comparison's folder" >&2
    exit 1
fi
touch "$out/.shapetrace-compare"
rm -rf "$out/old" "$out/new" "$out/diff" "$out/in" "$out/files" "$out/cwd"
mkdir -p "$out/old" "$out/new" "$out/diff" "$out/in" "$out/files/old" "$out/files/new" \
    "$out/cwd/old" "$out/cwd/new"
log=$out/build.log
: >"$log"
oldsha=$(git -C "$src" rev-parse --verify "$oldrev^{commit}")
newdesc="$(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet HEAD 2>/dev/null ||
    echo ' with uncommitted changes')"
echo "compare: $oldrev (old) against this tree, $newdesc (new); everything in $out"

# ---- the two builds ----
examples="desync hidden_states pipeline stall"
oldsrc=$out/oldsrc
if [ ! -d "$oldsrc/.git" ]; then
    git clone -q --no-checkout "$src" "$oldsrc"
fi
git -C "$oldsrc" fetch -q "$src" "$oldsha" 2>/dev/null || true
git -C "$oldsrc" checkout -q --detach "$oldsha"
oldb=$oldsrc/build
echo "building $oldrev in $oldsrc (log: $log)"
targets="all $oldb/tests/shp_launch"
for e in $examples; do targets="$targets $oldb/examples/$e"; done
# shellcheck disable=SC2086 # one word per target
if ! make -C "$oldsrc" -j2 B="$oldb" $targets >>"$log" 2>&1; then
    echo "compare: the build of $oldrev failed; see $log"
    exit 1
fi
echo "building this tree in $newb"
if ! make -C "$src" -j2 B="$newb" test-build >>"$log" 2>&1; then
    echo "compare: the build of this tree failed; see $log"
    exit 1
fi
gen=$(find "$newb" -name gen_traces -type f -perm -u+x | head -n 1)
[ -n "$gen" ] || {
    echo "compare: no gen_traces in $newb"
    exit 1
}
OLD=$oldb/bin/shapetrace
NEW=$newb/bin/shapetrace

# ---- the inputs ----
in=$out/in
export SHAPETRACE_DOUBLE_TIMEOUT=2
unset LD_PRELOAD SHAPETRACE_DIR
trace() { # trace TREE_BUILD NAME ARGS...: one example on 4 simulated ranks, into $in/NAME
    local b=$1 name=$2
    shift 2
    "$b/bin/shapetrace" run --dir "$in/$name" -- "$b/tests/shp_launch" -n 4 -- "$@" \
        >/dev/null 2>&1 || true
    ls "$in/$name"/*.shptrace >/dev/null 2>&1 || {
        echo "compare: tracing $name made no trace"
        exit 1
    }
}
echo "tracing the examples with both trees, generating traces"
for tree in new old; do
    if [ $tree = new ]; then b=$newb; else b=$oldb; fi
    for e in $examples; do
        planted=
        [ "$e" = hidden_states ] && planted=--buggy
        clean=--clean
        [ "$e" = hidden_states ] && clean=--fixed
        # shellcheck disable=SC2086 # no argument when there is none
        trace "$b" "ex-$tree-$e-planted" "$b/examples/$e" $planted
        trace "$b" "ex-$tree-$e-clean" "$b/examples/$e" $clean
    done
done
"$gen" "$in/gen-2x40" 2 40 >/dev/null
"$gen" "$in/gen-8x2000" 8 2000 >/dev/null
for k in count dtype skip stop; do
    "$gen" "$in/gen-8x2000-$k" 8 2000 --diverge "$k:3:100" >/dev/null
done
"$gen" "$in/gen-64x200-count" 64 200 --diverge count:9:20 >/dev/null

# Bad input, made from a good trace.
good=$(find "$in/ex-new-desync-planted" -name "*.shptrace" | sort | head -n 1)
mkdir -p "$in/bad-empty-dir" "$in/bad-junk-dir" "$in/bad-mixed-dir" "$in/bad-files"
printf 'not a trace\n' >"$in/bad-junk-dir/x-1.shptrace"
cp "$in/ex-new-desync-planted"/*.shptrace "$in/bad-mixed-dir/"
printf 'not a trace\n' >"$in/bad-mixed-dir/x-1.shptrace"
: >"$in/bad-files/zero.shptrace"
head -c 5000 "$good" >"$in/bad-files/cut.shptrace"
sz=$(stat -c %s "$good")
head -c $((sz / 2)) "$good" >"$in/bad-files/half.shptrace"
python3 - "$good" "$in/bad-files" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
v1 = bytearray(d); struct.pack_into("<I", v1, 8, 1)
open(sys.argv[2] + "/version1.shptrace", "wb").write(v1)
mg = bytearray(d); mg[0:8] = b"NOTTRACE"
open(sys.argv[2] + "/magic.shptrace", "wb").write(mg)
PY
chmod 600 "$in"/bad-*/*.shptrace
printf '{"dims": {"hidden": 1024}, "expect": [}' >"$in/bad-files/broken.expect.json"
mkfifo "$in/bad-files/fifo"

# ---- running both ----
total=0
same=0
differ=0
failed_names=
norm() { # the differences that two runs of one command have too
    sed -e "s#$oldb#BUILD#g" -e "s#$newb#BUILD#g" -e "s#$out/cwd/old#CWD#g" \
        -e "s#$out/cwd/new#CWD#g" -e "s#$out/files/old#FILES#g" -e "s#$out/files/new#FILES#g" \
        -e "s#$oldsrc#SRC#g" -e "s#$out#WORK#g" -e "s#$src#SRC#g" \
        -E -e 's/(symbolized in|in) [0-9]+\.[0-9]+ s\b/\1 N s/g' \
        -e 's/"idle_s": ?[0-9.e+-]+/"idle_s": N/g' -e 's/^(shapetrace status .*)[0-9:]{8}$/\1HH:MM:SS/' \
        -e 's/^( +[0-9-]+  [^ ]+ +[a-z?-]+ +)[0-9]+\.[0-9]/\1N/' -e 's/nccl-double:[0-9]+/nccl-double:PID/' \
        -e 's/Written [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC/Written DATE UTC/g'
}
# A file a command wrote, as text; a binary one (Perfetto's protobuf) as its size and digest.
show() {
    if ! iconv -f UTF-8 -t UTF-8 "$1" >/dev/null 2>&1 || ! tr -d '\000' <"$1" | cmp -s - "$1"; then
        echo "binary, $(stat -c %s "$1") bytes, sha256 $(sha256sum <"$1" | cut -c1-16)"
    else
        norm <"$1"
    fi
}
# one NAME [--file NAME] [--cwd] [--sort] -- ARGS...: ARGS run by each command, from its own
# directory with --cwd; @FILE@ in ARGS is a file of that name in each command's own folder;
# --sort: the lines of stdout and of stderr sorted (ranks that print at once interleave).
one() {
    local name=$1 file="" cwd="" sort=cat
    shift
    while [ "$1" != -- ]; do
        case $1 in
        --file)
            file=$2
            shift
            ;;
        --cwd) cwd=1 ;;
        --sort) sort="sort" ;;
        esac
        shift
    done
    shift
    local tree tool res rc a
    for tree in old new; do
        if [ $tree = old ]; then tool=$OLD; else tool=$NEW; fi
        res=$out/$tree/$name
        local args=()
        for a in "$@"; do args+=("${a//@FILE@/$out/files/$tree/$file}"); done
        rc=0
        (
            [ -n "$cwd" ] && cd "$out/cwd/$tree"
            timeout 30 "$tool" "${args[@]}" </dev/null >"$res.out" 2>"$res.err"
        ) || rc=$?
        {
            echo "exit $rc"
            echo "--- stdout"
            norm <"$res.out" | $sort
            echo "--- stderr"
            norm <"$res.err" | $sort
            if [ -n "$file" ]; then
                echo "--- $file"
                if [ -f "$out/files/$tree/$file" ]; then
                    show "$out/files/$tree/$file"
                else
                    echo "(not written)"
                fi
            fi
        } >"$res"
        rm -f "$res.out" "$res.err"
    done
    total=$((total + 1))
    if cmp -s "$out/old/$name" "$out/new/$name"; then
        same=$((same + 1))
        return
    fi
    differ=$((differ + 1))
    failed_names="$failed_names $name"
    diff -u --label "old/$name" --label "new/$name" "$out/old/$name" "$out/new/$name" \
        >"$out/diff/$name.diff" || true
    local n
    n=$(wc -l <"$out/diff/$name.diff")
    echo "==== $name: differs ($(head -n 1 "$out/old/$name") -> $(head -n 1 "$out/new/$name"))"
    if [ "$lines" = 0 ] || [ "$n" -le "$lines" ]; then
        cat "$out/diff/$name.diff"
    else
        head -n "$lines" "$out/diff/$name.diff"
        echo "... $((n - lines)) more lines in $out/diff/$name.diff"
    fi
}

echo "running both commands"
one version -- --version
one help -- --help
one help-none --
for c in run dump analyze export report status attach symbols snapshot frobnicate; do
    one "help-$c" -- help "$c"
    one "help-$c-flag" -- "$c" --help
done
# Usage errors: the cases of the front-door tests, and a few more.
one usage-run-bogus -- run --bogus -- true
one usage-run-nocmd -- run
one usage-run-debug -- run --debug LOUD -- true
one usage-run-maxmb -- run --max-mb x -- true
one usage-run-stacks -- run --stacks maybe -- true
one usage-dump-q -- dump -q x
one usage-dump-none -- dump
one usage-analyze-dim -- analyze --dim
one usage-analyze-dim-noval -- analyze --dim hidden "$in/ex-new-desync-planted"
one usage-analyze-json1 -- analyze --json=1 x
one usage-export-o -- export -o
one usage-export-format -- export --format svg "$in/ex-new-desync-planted"
one usage-report-nope -- report --nope x
one usage-status-zzz -- status --zzz x
one usage-status-none -- status
one usage-attach-x -- attach --x x
one usage-symbols-none -- symbols
one usage-snapshot-none -- snapshot
one usage-unknown -- frobnicate
# `run` itself: the examples (their output, the count of traces, the symbols line), and refused
# or odd run directories.
for tree in old new; do mkdir -p "$out/cwd/$tree/open" && chmod 0777 "$out/cwd/$tree/open"; done
one run-true --cwd -- run --dir r-true -- true
one run-false --cwd -- run --dir r-false -- false
one run-dir-is-file --cwd -- run --dir /etc/hostname -- true
one run-dir-0777 --cwd -- run --dir open -- true
one run-dir-tmp --cwd -- run --dir /tmp -- true
one run-missing-cmd --cwd -- run --dir r-missing -- /nonexistent/cmd
for e in $examples; do
    one "run-$e" --cwd --sort -- run --dir "r-$e" -- "$newb/tests/shp_launch" -n 4 -- "$newb/examples/$e"
done
# Post-mortem commands on every trace input.
for d in "$in"/ex-* "$in"/gen-*; do
    n=$(basename "$d")
    one "$n.dump" -- dump "$d"
    one "$n.dump-json" -- dump --json "$d"
    one "$n.dump-nostacks" -- dump --no-stacks "$d"
    one "$n.status" -- status "$d"
    one "$n.analyze" -- analyze "$d"
    one "$n.analyze-json" -- analyze --json "$d"
    one "$n.status-json" -- status --json "$d"
    one "$n.export-chrome" --file "$n.chrome.json" -- export -o @FILE@ "$d"
    one "$n.export-perfetto" --file "$n.pftrace" -- \
        export --format perfetto -o @FILE@ "$d"
    one "$n.report" --file "$n.html" -- report --html @FILE@ "$d"
    case $n in ex-*-*-*)
        e=${n#ex-*-}
        e=${e%-*}
        dims=$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["analyze"]))' \
            "$src/examples/$e.expected.json")
        # shellcheck disable=SC2086 # the example's own options
        one "$n.analyze-dims" -- analyze $dims "$d"
        one "$n.analyze-expect" -- analyze --json --expect "$src/examples/$e.expect.json" "$d"
        ;;
    esac
done
# Bad input.
bf=$in/bad-files
for f in zero cut half version1 magic; do
    one "bad-$f.dump" -- dump "$bf/$f.shptrace"
    one "bad-$f.analyze" -- analyze "$bf/$f.shptrace"
    one "bad-$f.status" -- status --json "$bf/$f.shptrace"
done
for d in empty-dir junk-dir mixed-dir; do
    for c in dump analyze "status --json" "export -o /dev/null" "report --html /dev/null"; do
        # shellcheck disable=SC2086 # the command and its options
        one "bad-$d.${c%% *}" -- $c "$in/bad-$d"
    done
done
one bad-missing.dump -- dump "$in/no-such-dir"
one bad-missing.analyze -- analyze "$in/no-such-dir"
one bad-empty-among.analyze -- analyze "$in/ex-new-desync-planted" "$in/bad-empty-dir"
one bad-empty-among.export -- export -o /dev/null "$in/ex-new-desync-planted" "$in/bad-empty-dir"
one bad-expect-broken -- analyze --expect "$bf/broken.expect.json" "$in/ex-new-desync-planted"
one bad-expect-missing -- analyze --expect "$bf/none.json" "$in/ex-new-desync-planted"
one bad-expect-fifo -- analyze --expect "$bf/fifo" "$in/ex-new-desync-planted"
one bad-dir-is-fifo -- dump "$bf/fifo"

# ---- the summary ----
{
    echo "== compare: $oldrev (old) against $newdesc (new)"
    echo "inputs compared: $total; identical: $same; differing: $differ"
    for n in $failed_names; do
        why=UNEXPLAINED
        if [ -n "$explain" ]; then
            while IFS=$'\t' read -r glob text; do
                [ -z "$glob" ] || [ "${glob:0:1}" = "#" ] && continue
                # shellcheck disable=SC2254 # the file's globs
                case $n in $glob)
                    why=$text
                    break
                    ;;
                esac
            done <"$explain"
        fi
        echo "  $n: $why"
    done
} | tee "$out/summary.txt"
