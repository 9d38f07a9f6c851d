#!/bin/sh
# shapetrace tests: everything `make check` runs, against one build tree (SHAPETRACE_TSAN=1: the
# suites of the ThreadSanitizer tree only). Each suite prints 'N passed, M failed'; this script
# adds them up and prints the total the same way.
#
# The suites are found, not named: every C test program (tests/unit/test_*.c, then the doubles'
# own, tests/doubles/test_*.c, each built as BUILD/tests/test_NAME), then every tests/test_*.py,
# each group in name order. The last suite, tests/check_suites.py, fails if a test file was not
# run. The ThreadSanitizer tree runs a chosen few, named below.
set -u
B=${1:-build}
T=$(dirname "$0")
total_pass=0
total_fail=0
out=$(mktemp)
ran=$(mktemp)
trap 'rm -f "$out" "$ran"' EXIT

# suite FILE NAME CMD...: runs CMD, the suite of the test file FILE, under the heading NAME.
suite() {
    echo "$1" >>"$ran"
    name=$2
    shift 2
    echo "== $name"
    t0=$(date +%s)
    "$@" >"$out" 2>&1
    rc=$?
    cat "$out"
    echo "($name: $(($(date +%s) - t0)) s)"
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
    p=$(echo "$line" | awk '{for (i = 1; i < NF; i++) if ($(i + 1) ~ /^passed/) print $i}')
    f=$(echo "$line" | awk '{for (i = 1; i < NF; i++) if ($(i + 1) ~ /^failed/) print $i}')
    if [ -z "$line" ]; then
        echo "$name: no result line (exit $rc)"
        p=0
        f=1
    elif [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
        echo "$name: exit $rc"
        f=1
    fi
    total_pass=$((total_pass + ${p:-0}))
    total_fail=$((total_fail + ${f:-0}))
}

if [ "${SHAPETRACE_TSAN:-0}" = 1 ]; then
    # A ThreadSanitizer report fails the program (exit 66), so the suite that ran it fails.
    export TSAN_OPTIONS="exitcode=66 halt_on_error=1 ${TSAN_OPTIONS:-}"
    suite "$T/unit/test_lib.c" "test_lib (thread)" "$B/tests/test_lib"
    suite "$T/unit/test_findings.c" "test_findings (thread)" "$B/tests/test_findings"
    # The timeline drawn on several threads, each process a part.
    suite "$T/unit/test_render.c" "test_render (thread)" "$B/tests/test_render"
    suite "$T/test_analyze.py" "analyze (thread)" python3 "$T/test_analyze.py" "$B"
    suite "$T/test_values.py" "values (thread)" python3 "$T/test_values.py" "$B"
    # The crafted traces of the analyzer's rules on membership, untied calls, sizes and files, and
    # every command's one policy for unreadable, empty and cut inputs (the session library).
    suite "$T/test_hostile.py" "hostile readers (thread)" python3 "$T/test_hostile.py" "$B" \
        test_one_communicator_of_two_sizes_is_a_finding \
        test_two_processes_claiming_one_rank_are_named_both \
        test_collectives_tied_to_no_communicator_are_counted \
        test_byte_counts_that_wrap_are_a_finding test_expectation_file_that_is_a_fifo_does_not_block \
        test_a_seq_far_ahead_is_lined_up_at_once test_fifo_named_like_a_trace \
        test_unreadable_files_of_a_run_directory_are_skipped_by_every_command \
        test_an_empty_run_directory_among_others_is_a_note \
        test_a_path_named_that_is_no_readable_trace_is_refused_by_every_command \
        test_one_rule_of_completeness_for_every_command
    # The harm cases again: `run` and the readers under TSan, the preload plain.
    suite "$T/test_hostile.py" "hostile, harm cases (thread)" python3 "$T/test_hostile.py" "$B" harm
    # export's threads: the analysis beside the walk's scan, the file's writer, the drawing's.
    suite "$T/test_pictures.py" "pictures, export (thread)" python3 "$T/test_pictures.py" "$B" \
        test_export_is_the_same_every_time test_export_chrome_structure_and_flows \
        test_export_is_the_same_on_any_number_of_threads \
        test_flows_from_each_send_to_its_receive
else
    for src in $(LC_ALL=C ls "$T"/unit/test_*.c) $(LC_ALL=C ls "$T"/doubles/test_*.c); do
        t=$B/tests/$(basename "$src" .c)
        if [ "${SHAPETRACE_SANITIZED:-0}" = 1 ]; then
            suite "$src" "$(basename "$t") (sanitized)" env ASAN_OPTIONS=detect_leaks=1 "$t"
        else
            suite "$src" "$(basename "$t")" "$t"
        fi
    done
    for py in $(LC_ALL=C ls "$T"/test_*.py); do
        name=$(basename "$py" .py)
        suite "$py" "${name#test_}" python3 "$py" "$B"
    done
    suite "$T/check_suites.py" "suites" python3 "$T/check_suites.py" "$ran"
fi

echo "== total ($B)"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
