"""shapetrace tests: the call list's facts are checked by the compiler. Each case writes a copy
of include/shapetrace/calls.h with one fact left out or wrong, compiles the file that checks it
(common/ops.c, preload/check_facts.c, preload/check_ptds.c) against the copy, and requires the
compile to fail with the check's own words; the list as it is compiles cleanly.
Usage: test_calls.py [BUILD_DIR] [TEST_NAME...]. Ends with 'calls: N passed, M failed'."""
import os
import re
import subprocess
import sys
import tempfile

from harness import run_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONLY = sys.argv[2:]
TMP = tempfile.mkdtemp(prefix="shp_calls_")
CALLS = open(os.path.join(ROOT, "include", "shapetrace", "calls.h")).read()
CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
NCCL_HOME = os.environ.get("NCCL_HOME", CUDA_HOME)
GPU_INC = ["-isystem", os.path.join(NCCL_HOME, "include"), "-isystem",
           os.path.join(CUDA_HOME, "include")]
FLAGS = ["-std=gnu11", "-Wall", "-Wextra", "-Wshadow", "-Wstrict-prototypes",
         "-Wmissing-prototypes", "-Wvla", "-Wformat=2", "-fsyntax-only"]


def compile_with(calls, src):
    """Compile src (a path from the top of the tree) with `calls` as include/shapetrace/calls.h;
    returns (exit status, compiler output)."""
    d = tempfile.mkdtemp(dir=TMP)
    os.makedirs(os.path.join(d, "include", "shapetrace"))
    with open(os.path.join(d, "include", "shapetrace", "calls.h"), "w") as f:
        f.write(calls)
    cmd = [os.environ.get("CC", "cc")] + FLAGS + ["-I" + d, "-I" + ROOT] + GPU_INC + \
        [os.path.join(ROOT, src)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    return p.returncode, p.stdout + p.stderr


def row(calls, name, facts):
    """calls with the facts of the row of `name` replaced by `facts`."""
    pat = re.compile(r"^(X\(\d+, \w+, SHP_CLS_\w+, " + re.escape(name) + r", )\([^()]*\)", re.M)
    out, n = pat.subn(lambda m: m.group(1) + facts, calls)
    assert n == 1, f"no row {name}"
    return out


def test_the_list_as_it_is_compiles_cleanly():
    for src in ("common/ops.c", "preload/check_facts.c", "preload/check_ptds.c"):
        rc, out = compile_with(CALLS, src)
        assert rc == 0 and "warning" not in out, f"{src}:\n{out[-3000:]}"


def renumber(calls, *moves):
    """calls with rows renumbered: each move is (the row's opening "X(N, LIB, CLS, name,", N')."""
    for opening, num in moves:
        assert opening in calls, opening
        calls = calls.replace(opening, "X(%d, %s" % (num, opening.split(", ", 1)[1]))
    return calls


def desc_without(field, before):
    """calls with `field` (", .root = root") taken out of the desc that ends just before `before`
    (the next row's opening), once."""
    i = CALLS.index(before)
    j = CALLS.rindex(field, 0, i)
    return CALLS[:j] + CALLS[j + len(field):]


# Each fault: (the list with it, the file whose compile refuses it, words of the refusal).
FAULTS = {
    "a_fact_left_out": [
        (row(CALLS, "ncclReduce", "(ONE, ONE, RECVS, REDUCES)"), "common/ops.c",
         "requires 5 arguments"),
        (row(CALLS, "cuMemcpyHtoD_v2", "(cuMemcpyHtoD, LEGACY)"), "common/ops.c",
         "requires 3 arguments")],
    "an_unknown_value": [
        (row(CALLS, "ncclAllReduce", "(ONE, ONE, NONE, SUM, NONE)"), "common/ops.c",
         "SHP_RED_SUM"),
        (row(CALLS, "ncclAllReduce", "(ONE, ONE, REDUCES, NONE, NONE)"), "common/ops.c",
         "SHP_ROOT_REDUCES")],
    "a_collective_without_a_size_rule": [
        (row(CALLS, "ncclAllGather", "(ONE, NONE, NONE, NONE, NONE)"), "common/ops.c",
         "ncclAllGather: a collective has a size rule for its send and its receive buffer")],
    "a_send_with_two_buffers": [
        (row(CALLS, "ncclSend", "(ONE, ONE, NONE, NONE, NONE)"), "common/ops.c",
         "ncclSend: a send or a receive has a size rule for its one buffer")],
    "a_size_rule_or_root_outside_collectives": [
        (row(CALLS, "ncclGroupStart", "(ONE, NONE, NONE, NONE, NONE)"), "common/ops.c",
         "ncclGroupStart: only collectives, sends and receives have a size rule"),
        (row(CALLS, "ncclSend", "(ONE, NONE, SENDS, NONE, NONE)"), "common/ops.c",
         "ncclSend: only a collective has a root, a reduction or an alias")],
    "a_root_the_row_does_not_say": [
        # ncclBroadcast takes `int root` (its alias ncclBcast keeps its own facts) ...
        (row(CALLS, "ncclBroadcast", "(ONE, ONE, NONE, NONE, NONE)"), "preload/check_facts.c",
         "ncclBroadcast: its root fact says whether it takes `int root`"),
        # ... and ncclAllGather takes none.
        (row(CALLS, "ncclAllGather", "(ONE, ALL, RECVS, NONE, NONE)"), "preload/check_facts.c",
         "ncclAllGather: its root fact says whether it takes `int root`")],
    "a_reduction_the_row_does_not_say": [
        (row(CALLS, "ncclReduceScatter", "(ALL, ONE, NONE, NONE, NONE)"),
         "preload/check_facts.c",
         "ncclReduceScatter: its redop fact says whether it takes `ncclRedOp_t op`")],
    "a_desc_that_drops_the_root_or_the_reduction": [
        (desc_without(", .root = root", "X(3, NCCL"), "preload/check_facts.c",
         "unused variable 'root'"),
        (desc_without(", .redop = op", "X(2, NCCL"), "preload/check_facts.c",
         "unused variable 'op'")],
    "two_collectives_alike_and_no_alias": [
        (row(CALLS, "ncclBcast", "(ONE, ONE, SENDS, NONE, NONE)"), "common/ops.c",
         "In function 'collectives_alike_name_one_as_alias'")],
    "an_alias_of_another_operation": [
        (row(CALLS, "ncclBcast", "(ONE, ONE, SENDS, NONE, ncclAllReduce)"), "common/ops.c",
         "ncclBcast: its alias ncclAllReduce is an op of its own with the same class and facts"),
        (row(CALLS, "ncclBcast", "(ONE, ONE, SENDS, NONE, ncclBcast)"), "common/ops.c",
         "ncclBcast: its alias ncclBcast is an op of its own"),
        (row(CALLS, "ncclBcast", "(ONE, ONE, SENDS, NONE, ncclNoSuchCall)"), "common/ops.c",
         "ALIAS_OF_ncclNoSuchCall")],
    "a_driver_entry_point_twice_or_alone_in_a_mode": [
        (row(CALLS, "cuMemcpy_ptds", "(cuMemcpy, 4000, LEGACY)"), "common/ops.c",
         "LEGACY_cuMemcpy"),
        (row(CALLS, "cuMemcpy_ptds", "(cuMemcpy, 3020, PER_THREAD)"), "common/ops.c",
         "cuMemcpy: its legacy entry point has its since"),
        (row(CALLS, "cuGraphLaunch_ptsz", "(cuGraphLaunchPT, 10000, PER_THREAD)"),
         "common/ops.c", "LEGACY_cuGraphLaunchPT")],
    "a_driver_base_of_another_signature": [
        # cuMemcpyDtoH takes (void *, CUdeviceptr, size_t): not cuMemcpyHtoD_v2's signature.
        (row(CALLS, "cuMemcpyHtoD_v2", "(cuMemcpyDtoH, 3020, LEGACY)"), "preload/check_facts.c",
         "cuMemcpyHtoD_v2"),
        (row(CALLS, "cuMemcpyHtoD_v2_ptds", "(cuMemcpyDtoH, 3020, PER_THREAD)"),
         "preload/check_ptds.c", "cuMemcpyHtoD_v2_ptds")],
    "an_op_number_twice": [
        # 3 for 4 and 97 for 96: the count and the sum stay, so only the case labels see it.
        (renumber(CALLS, ("X(4, NCCL, SHP_CLS_COLL, ncclReduce,", 3),
                  ("X(96, CUDA, SHP_CLS_CAPTURE, cuStreamEndCapture_ptsz,", 97)),
         "common/ops.c", "In function 'op_numbers_are_used_once'")],
}


def refusal(faults):
    def test():
        for calls, src, words in faults:
            assert calls != CALLS
            rc, out = compile_with(calls, src)
            assert rc != 0, f"{src} compiled with the fault ({words})"
            assert words in out, out[-3000:]
    return test


for _name, _faults in FAULTS.items():
    globals()[f"test_{_name}_does_not_compile"] = refusal(_faults)


if __name__ == "__main__":
    sys.exit(run_all(globals(), "calls", ONLY, TMP))
