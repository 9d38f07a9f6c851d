"""shapetrace tests: `shapetrace analyze` on synthetic traces (tests/gen/gen_traces.c, with
planted divergences) and on traces of programs run on the test doubles (simulated ranks, no GPU).
Usage: test_analyze.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile

from harness import run_all, tool_env as env, values_env  # the script's folder, tests/, is on sys.path

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
GEN = os.path.join(BUILD, "tests", "gen_traces")
T = os.path.join(BUILD, "tests")
TMP = tempfile.mkdtemp(prefix="shapetrace-analyze-")


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env(), **kw)
    if check and p.returncode not in (0, 1):
        raise AssertionError(f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr}")
    return p


def gen(name, nranks, nevents, *diverge):
    d = os.path.join(TMP, name)
    args = [GEN, d, str(nranks), str(nevents)]
    for x in diverge:
        args += ["--diverge", x]
    run(args)
    return d


def analyze(*paths, dims=(), expect=None):
    args = [TOOL, "analyze", "--json"]
    for d in dims:
        args += ["--dim", d]
    if expect:
        args += ["--expect", expect]
    p = run(args + list(paths))
    report = json.loads(p.stdout)
    assert p.returncode == (1 if report["findings"] else 0), p.returncode
    return report, p


def first(report):
    assert report["first"] == 0 and report["findings"], report
    return report["findings"][report["first"]]


def tp_comm(report):
    """The tensor-parallel communicator of gen_traces' output: the busiest one."""
    return max(report["comms"], key=lambda c: c["collectives"])["id"]


# ---- synthetic traces ----

def test_clean_run_has_no_findings():
    d = gen("clean", 8, 5000)
    r, p = analyze(d)
    assert r["version"] == 1 and r["findings"] == [] and r["first"] is None
    assert len(r["processes"]) == 8 and all(q["complete"] for q in r["processes"])
    assert sorted(q["rank"] for q in r["processes"]) == list(range(8))
    assert all(c["collectives"] > 0 for c in r["comms"])
    text = run([TOOL, "analyze", d])
    assert text.returncode == 0 and "no findings" in text.stdout


def test_count_mismatch_names_rank_seq_and_shape():
    d = gen("count", 8, 5000, "count:5:40")
    r, _ = analyze(d, dims=["hidden=7168", "tp=8"])
    f = first(r)
    assert (f["kind"], f["ranks"], f["seq"], f["comm"]) == ("count_mismatch", [5], 40, tp_comm(r))
    assert len(r["findings"]) == 1, [x["summary"] for x in r["findings"]]
    ev = f["events"][0]
    assert ev["rank"] == 5 and ev["seq"] == 40 and ev["stack"], ev
    assert f["expected"]["rank"] != 5 and f["expected"]["count"] != ev["count"]
    assert "[" in f["summary"] and "tp]" in f["summary"], f["summary"]  # counts as shapes
    text = run([TOOL, "analyze", "--dim", "tp=8", d]).stdout
    assert text.index("FIRST FINDING") < text.index("what the others did")
    assert "count_mismatch" in text.splitlines()[-1] and "rank 5" in text.splitlines()[-1]


def test_dtype_mismatch():
    d = gen("dtype", 4, 3000, "dtype:2:7")
    f = first(analyze(d)[0])
    assert (f["kind"], f["ranks"], f["seq"]) == ("dtype_mismatch", [2], 7)


def test_skipped_collective_is_one_finding():
    d = gen("skip", 8, 5000, "skip:3:100")
    r, _ = analyze(d)
    assert len(r["findings"]) == 1, [x["summary"] for x in r["findings"]]
    f = first(r)
    assert f["kind"] == "missing_collective" and f["ranks"] == [3], f
    assert f["seq"] in (100, 101), f["seq"]  # two identical all-reduces in a row: either


def test_stopped_rank_gives_the_wavefront():
    d = gen("stop", 4, 3000, "stop:1:60")
    r, _ = analyze(d)
    f = first(r)
    assert (f["kind"], f["ranks"], f["seq"], f["comm"]) == \
        ("missing_collective", [1], 60, tp_comm(r)), f
    assert [q["complete"] for q in sorted(r["processes"], key=lambda q: q["rank"])] == \
        [True, False, True, True]
    # later collectives on that communicator are its consequence, not new findings
    assert f["consequences"] > 0
    assert all(x["ranks"] == [1] for x in r["findings"])
    text = run([TOOL, "analyze", d]).stdout
    assert "did not exit normally" in text


def test_torn_trace_read_by_two_threads():
    """A torn trace is read at once by the merge and by a lineage worker loading its stacks (an
    expectation on call sites): each walk counts its own torn records. They shared one count
    before, a data race that the ThreadSanitizer run of this suite catches."""
    d = gen("torn", 4, 3000)
    path = os.path.join(d, "gen-0.shptrace")
    b = bytearray(open(path, "rb").read())
    off, n = 4096, 0
    while off + 8 < len(b):
        size = (int.from_bytes(b[off:off + 4], "little") & 0xffff) * 8
        if size == 0:
            break
        if n % 50 == 25:
            b[off + 4] ^= 0xff  # a bad check: a torn record whose size is still known
        off += size
        n += 1
    open(path, "wb").write(b)
    spec = os.path.join(TMP, "sites.expect.json")
    open(spec, "w").write('{"expect": [{"name": "any", "match": {"site": "*"}, "shape": ["*"]}]}')
    p = run([TOOL, "analyze", "--json", "--expect", spec, d])
    r = json.loads(p.stdout)
    complete = {q["file"]: q["complete"] for q in r["processes"]}
    assert complete[path] is False and sum(complete.values()) == 3, complete
    assert "matched no call" not in p.stderr, p.stderr
    text = run([TOOL, "analyze", d]).stdout
    assert "records were torn" in text  # what happened, not "did not exit normally"


def test_earliest_divergence_is_first():
    d = gen("two", 8, 5000, "count:6:300", "dtype:2:50")
    r, _ = analyze(d)
    f = first(r)
    assert (f["kind"], f["ranks"], f["seq"]) == ("dtype_mismatch", [2], 50), f
    assert {x["kind"] for x in r["findings"]} == {"dtype_mismatch", "count_mismatch"}


def test_missing_trace_is_a_finding():
    d = gen("partial", 4, 2000)
    os.unlink(os.path.join(d, "gen-2.shptrace"))
    r, _ = analyze(d)
    kinds = [x["kind"] for x in r["findings"]]
    assert "missing_rank" in kinds, kinds
    mr = [x for x in r["findings"] if x["kind"] == "missing_rank"]
    assert any(2 in x["ranks"] for x in mr)


def test_bad_and_mixed_inputs():
    d = gen("mixed", 4, 1000)
    files = sorted(os.path.join(d, f) for f in os.listdir(d))
    # files and directories mixed, in any order, give the same result
    r1, _ = analyze(d)
    r2, _ = analyze(files[3], files[1], files[0], files[2])
    assert len(r1["processes"]) == len(r2["processes"]) == 4
    assert [c["collectives"] for c in r1["comms"]] == [c["collectives"] for c in r2["comms"]]
    junk = os.path.join(TMP, "junk.shptrace")
    open(junk, "wb").write(b"x" * 5000)
    p = run([TOOL, "analyze", d, junk], check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "junk.shptrace" in p.stderr
    p = run([TOOL, "analyze", d, files[0]], check=False)
    assert p.returncode == 2 and "given twice" in p.stderr
    p = run([TOOL, "analyze", "--dim", "hidden", d], check=False)
    assert p.returncode == 2 and "--dim" in p.stderr
    p = run([TOOL, "analyze"], check=False)
    assert p.returncode == 2
    p = run([TOOL, "analyze", os.path.join(TMP, "nowhere")], check=False)
    assert p.returncode == 2


def test_many_ranks():
    d = gen("many", 64, 500, "count:37:20")
    f = first(analyze(d)[0])
    assert (f["kind"], f["ranks"], f["seq"]) == ("count_mismatch", [37], 20)


# ---- traces of programs on the test doubles ----

def test_buffer_overrun_on_the_doubles():
    d = os.path.join(TMP, "overrun")
    run([TOOL, "run", "--dir", d, "--", f"{T}/scenario", "overrun"])
    r, _ = analyze(d)
    f = first(r)
    assert f["kind"] == "buffer_overrun" and len(r["findings"]) == 1, r["findings"]
    ev = f["events"][0]
    assert ev["op"] == "cudaMemcpy" and ev["bytes"] == 4096 and ev["kind"] == "D2H"
    assert "1024 bytes past the end of its 4096-byte allocation" in f["summary"]
    assert ev["stack"][0].startswith("read_past_the_end"), ev["stack"]
    # and a clean program stays silent
    d2 = os.path.join(TMP, "basic")
    run([TOOL, "run", "--dir", d2, "--", f"{T}/scenario", "basic"])
    r2, _ = analyze(d2)
    assert r2["findings"] == [], [x["summary"] for x in r2["findings"]]


def test_copy_rules_on_driver_ops():
    # A program with the static runtime is seen at the driver: the copy rules read the driver's
    # copies as they read the runtime's. (The library path: under ASan, dlopen does not search the
    # program's RUNPATH.)
    with_driver = ["env", f"LD_LIBRARY_PATH={T}"]
    d = os.path.join(TMP, "overrun-driver")
    run([TOOL, "run", "--dir", d, "--", *with_driver, f"{T}/static_rt", "overrun"])
    r, _ = analyze(d)
    f = first(r)
    assert f["kind"] == "buffer_overrun" and len(r["findings"]) == 1, r["findings"]
    ev = f["events"][0]
    assert (ev["op"], ev["bytes"], ev["kind"]) == ("cuMemcpyDtoH_v2", 4096, "D2H"), ev
    assert "1024 bytes past the end of its 4096-byte allocation" in f["summary"], f["summary"]
    # lineage: host -> device -> device -> host, the last not whole rows
    d = os.path.join(TMP, "lineage-driver")
    run([TOOL, "run", "--dir", d, "--", *with_driver, f"{T}/static_rt", "lineage"])
    expect = os.path.join(TMP, "driver.expect.json")
    with open(expect, "w") as out:
        json.dump({"dims": {"hidden": 256},
                   "expect": [{"name": "rows reach the host whole",
                               "match": {"op": "cuMemcpy*", "kind": "D2H"},
                               "shape": ["*", "hidden"], "dtype": "bf16"}]}, out)
    p = run([TOOL, "analyze", "--json", "--expect", expect, d], check=False)
    assert p.returncode == 1, (p.returncode, p.stderr)
    f = first(json.loads(p.stdout))
    assert f["kind"] == "expectation_violation" and "350 bf16 elements" in f["summary"], f
    assert [x["op"] for x in f["lineage"]] == ["cuMemcpyDtoD_v2", "cuMemcpyHtoD_v2"], f["lineage"]
    assert frames(f["lineage"][1])[1].startswith("receive ("), f["lineage"][1]

# ---- lineage: the motivating failure, and correct code that must stay silent ----

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
EXPECT = os.path.join(EXAMPLES, "hidden_states.expect.json")


def hidden(mode):
    d = os.path.join(TMP, "hidden" + mode)
    if not os.path.isdir(d):
        run([TOOL, "run", "--dir", d, "--", f"{T}/hidden", mode])
    return d


def frames(ev):
    return ev["stack"] or []


def test_hidden_states_buggy_with_dims():
    r, p = analyze(hidden("--buggy"), dims=["hidden=7168"])
    f = first(r)
    assert f["kind"] == "shape_mismatch", [x["summary"] for x in r["findings"]]
    assert "[771, 512]" in f["summary"] and "[771, hidden]" in f["summary"], f["summary"]
    consumer = f["events"][0]
    assert frames(consumer)[0].startswith("generate ("), frames(consumer)
    assert consumer["op"] == "cudaMemcpy" and consumer["bytes"] == 1024
    producer = f["lineage"][0]
    assert producer["kind"] == "H2D" and frames(producer)[0].startswith("receive_states ("), \
        producer
    ops_chain = [x["op"] for x in f["lineage"]]
    assert ops_chain == ["cudaMemcpy", "cudaMemcpy", "cudaMemcpy", "ncclAllGather"], ops_chain
    assert [x["kind"] for x in f["lineage"][:3]] == ["H2D", "D2H", "D2D"]
    assert frames(f["lineage"][2])[0].startswith("capture_layer (")
    # both samples' views are reported, and nothing else
    assert sorted(x["kind"] for x in r["findings"]) == ["shape_mismatch", "shape_mismatch"]
    assert any("[771, 259]" in x["summary"] for x in r["findings"])
    text = run([TOOL, "analyze", "--dim", "hidden=7168", hidden("--buggy")]).stdout
    assert "where its bytes came from" in text and "receive_states" in text


def test_hidden_states_buggy_with_expectations():
    args = [TOOL, "analyze", "--json", "--expect", EXPECT, hidden("--buggy")]
    p = run(args)
    r = json.loads(p.stdout)
    assert p.returncode == 1
    f = first(r)
    assert f["kind"] == "expectation_violation", f
    assert "hidden states reach the host as whole rows" in f["summary"]
    assert "1542 of 1542" in f["summary"], f["summary"]
    assert frames(f["events"][0])[0].startswith("generate (")
    assert frames(f["lineage"][0])[0].startswith("receive_states (")
    assert "shape_mismatch" in [x["kind"] for x in r["findings"]]


def test_hidden_states_fixed_is_silent():
    for args in (["--dim", "hidden=7168"], ["--expect", EXPECT], []):
        p = run([TOOL, "analyze", "--json", *args, hidden("--fixed")])
        r = json.loads(p.stdout)
        assert p.returncode == 0 and r["findings"] == [], (args, r["findings"])
        assert "matched no call" not in p.stderr


def test_correct_consumers_stay_silent():
    for mode in ("rows", "rows2d", "paged", "inplace", "reuse"):
        r, _ = analyze(hidden(mode), dims=["hidden=7168", "tp=8"])
        assert r["findings"] == [], (mode, [x["summary"] for x in r["findings"]])


def test_expectation_file_errors():
    d = hidden("--fixed")
    bad = os.path.join(TMP, "bad.json")
    open(bad, "w").write('{"dims": {"hidden": 7168,},\n "expect": []}')
    p = run([TOOL, "analyze", "--expect", bad, d], check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and f"{bad}:1:" in p.stderr, p.stderr
    open(bad, "w").write('{"dims": {"hidden": 7168},\n "expect": [{"shape": ["*", "hiden"]}]}')
    p = run([TOOL, "analyze", "--expect", bad, d], check=False)
    assert p.returncode == 2 and "expect[0].shape[1]" in p.stderr and "hiden" in p.stderr
    open(bad, "w").write('{"expect": [{"match": {"kind": "sideways"}, "shape": ["*"]}]}')
    p = run([TOOL, "analyze", "--expect", bad, d], check=False)
    assert p.returncode == 2 and "kind" in p.stderr
    p = run([TOOL, "analyze", "--expect", os.path.join(TMP, "absent.json"), d], check=False)
    assert p.returncode == 2 and "absent.json" in p.stderr
    none = os.path.join(TMP, "none.json")
    open(none, "w").write('{"expect": [{"name": "never", "match": {"op": "ncclNothing*"},'
                          ' "shape": ["*"]}]}')
    p = run([TOOL, "analyze", "--expect", none, d])
    assert p.returncode == 0 and 'expectation "never" matched no call' in p.stderr


def test_expectation_file_keys_ranges_and_bom():
    """Unknown keys and ranks or products out of range are refused with the place; a byte-order
    mark is accepted; calls without an element count are not checked."""
    d = hidden("--fixed")
    bad = os.path.join(TMP, "keys.json")
    cases = [
        ('{"expect": [{"mtach": {"op": "x"}, "shape": ["*"]}]}', "expect[0].mtach"),
        ('{"expect": [{"match": {"opp": "x"}, "shape": ["*"]}]}', "expect[0].match.opp"),
        ('{"dims": {}, "expct": []}', "expct"),
        ('{"expect": [{"match": {"rank": 4294967298}, "shape": ["*"]}]}', "rank"),
        ('{"expect": [{"match": {"rank": "2"}, "shape": ["*"]}]}', "rank"),
        ('{"expect": [{"name": 3, "shape": ["*"]}]}', "expect[0].name"),
        ('{"dims": {"h": 4294967296}, "expect": [{"shape": ["h*h"]}]}', "expect[0].shape[0]"),
        ('{"expect": [{"shape": [4294967296, 4294967296]}]}', "expect[0].shape"),
        ('{"expect": [{"shape": ["99999999999999999999"]}]}', "expect[0].shape[0]"),
    ]
    for text, place in cases:
        open(bad, "w").write(text)
        p = run([TOOL, "analyze", "--expect", bad, d], check=False)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and place in p.stderr, \
            (text, p.returncode, p.stderr)
    bom = os.path.join(TMP, "bom.json")
    with open(bom, "wb") as out:
        out.write(b'\xef\xbb\xbf{"expect": [{"name": "all", "match": {"op": "*"},'
                  b' "shape": ["*"]}]}')
    p = run([TOOL, "analyze", "--json", "--expect", bom, d], check=False)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "18446744073709551615" not in p.stdout and "matched no call" not in p.stderr, p.stdout


def test_dim_given_twice():
    d = hidden("--fixed")
    p = run([TOOL, "analyze", "--dim", "hidden=7168", "--dim", "hidden=1024", d], check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "hidden" in p.stderr, p.stderr
    p = run([TOOL, "analyze", "--dim", "hidden=7168", "--dim", "hidden=7168", d], check=False)
    assert p.returncode == 0, p.stderr
    p = run([TOOL, "report", "--dim", "hidden=7168", "--dim", "hidden=1024", d], check=False)
    assert p.returncode == 2 and "hidden" in p.stderr, p.stderr


# ---- one planted divergence of each kind, on 4 simulated ranks ----

RANKS_CASES = {
    # mode: (kind, culprits, seq, communicator size, call site)
    "op": ("op_mismatch", [1], 1, 4, "world_step"),
    "redop": ("redop_mismatch", [2], 2, 4, "world_step"),
    "root": ("root_mismatch", [3], 3, 4, "main"),
    "split": ("count_mismatch", [2], 1, 3, "part_step"),
    "group": ("p2p_size_mismatch", [0, 1], 0, 4, "ring"),
    "p2pdtype": ("p2p_dtype_mismatch", [0, 1], 0, 4, "ring"),
    "unmatched": ("p2p_unmatched", [0, 1], 0, 4, "ring"),
}


def run_ranks(mode):
    d = os.path.join(TMP, "ranks-" + mode)
    e = env()
    e["SHAPETRACE_DOUBLE_TIMEOUT"] = "2"
    subprocess.run([TOOL, "run", "--dir", d, "--", f"{T}/shp_launch", "-n", "4", "--",
                    f"{T}/ranks", mode], capture_output=True, text=True, timeout=120, env=e)
    return d


def test_multirank_scenarios():
    r, _ = analyze(run_ranks("clean"))
    assert r["findings"] == [], [x["summary"] for x in r["findings"]]
    sizes = sorted(c["nranks"] for c in r["comms"])
    assert sizes == [1, 3, 4], sizes  # the world, and its split into {0} and {1, 2, 3}
    for mode, (kind, culprits, seq, nranks, site) in RANKS_CASES.items():
        r, _ = analyze(run_ranks(mode))
        f = first(r)
        assert (f["kind"], f["ranks"], f["seq"]) == (kind, culprits, seq), (mode, f["summary"])
        assert len(r["findings"]) == 1, (mode, [x["summary"] for x in r["findings"]])
        comm = [c for c in r["comms"] if c["id"] == f["comm"]]
        assert comm and comm[0]["nranks"] == nranks, (mode, comm)
        assert frames(f["events"][0])[0].startswith(site + " ("), (mode, frames(f["events"][0]))
        assert f["severity"] == ("warning" if kind == "p2p_dtype_mismatch" else "error")


# ---- patterns of real stacks (tests/load/stacks.c), clean and planted, on simulated ranks ----

STACKS_CASES = {
    # pattern: (kind, culprits, seq, call site) of the planted run's first finding
    "graph_buckets": ("count_mismatch", [2], 2, "capture_bucket"),    # vLLM decode graphs
    "dp_padding": ("count_mismatch", [3], 1, "capture_dp_graph"),     # vLLM DP, PR 25906
    "pynccl": ("dtype_mismatch", [1], 2, "pynccl_all_reduce"),        # vLLM pynccl
    "coalesced": ("count_mismatch", [0], 4, "coalesced"),             # torch coalesced group
    "a2a_uneven": ("p2p_size_mismatch", [0, 2], 0, "a2a_single"),     # all_to_all_single
    "new_group": ("root_mismatch", [2], 1, "group_bcast"),            # torch new_group split
    "abort_reinit": ("op_mismatch", [3], 0, "after_reinit"),          # abort, then a new comm
    "fsdp": ("count_mismatch", [1], 1, "all_gather_params"),          # FSDP/ZeRO shards
    "megatron": ("p2p_size_mismatch", [1, 5], 0, "pp_exchange"),      # TP x DP x PP, 8 ranks
    "moe": ("p2p_size_mismatch", [1, 3], 0, "dispatch"),              # MoE token dispatch
    "bcast": ("count_mismatch", [2], 0, "bcast"),                     # ncclBcast = ncclBroadcast
    "root_only": ("buffer_overrun", [0], 3, "root_only"),             # root-only buffers
    "pipeline": ("p2p_size_mismatch", [1, 2], 0, "stage_send"),       # torch pipeline stage
    "stall": ("missing_collective", [3], 2, "worker_step"),           # a rank that stops
    "gathered": ("shape_mismatch", [0], None, "cut_rows"),            # rows of an all-gather
    "pp_graph": ("p2p_size_mismatch", [2, 3], 2, "capture_stage"),    # vLLM PP in decode graphs
    "replay_output": ("stale_read", [1], None, "take_rows"),          # graph output, stale rows
    "replay_shapes": ("expectation_violation", [2], None, "capture_output"),  # in a replay
    "graph_gathered": ("shape_mismatch", [0], None, "cut_rows"),     # gathered in a graph
    "extra_branch": ("missing_collective", [1], 3, "rare_branch"),    # one extra, reported once
    "dormant": ("count_mismatch", [2], 69, "serve_step"),             # armed at #0, 16, 22, 26
    "capped": ("count_mismatch", [3], 4000, "dp_step"),               # rank 1's trace capped
    "fsdp_freed": ("failed_collective", [2], 4, "gather_layer"),      # NCCL refused a gather
    "pynccl_root": ("failed_collective", [3], 2, "tp_broadcast"),     # ... and the rank went on
    "eagle_dp": ("deadlock", [2], 3, "draft_forward"),                # SGLang EAGLE + DP attention
    "graph_side_stream": ("count_mismatch", [2], 2, "capture_bucket_side"),  # NCCL side stream
    "nonblocking": ("count_mismatch", [5], 3, "tp_reduce"),           # config.blocking = 0
    "decode_graphs": ("count_mismatch", [1], 2, "capture_bucket"),   # both of vLLM's at once
}
# `shapetrace run` options of a pattern (SHP_TOOL: the command, for ranks that arm themselves)
STACKS_RUN = {"dormant": ["--dormant"], "capped": ["--max-mb", "1"]}
STACKS_DIMS = {"gathered": ["hidden=512"], "replay_output": ["hidden=256"],
               "graph_gathered": ["hidden=512"], "decode_graphs": ["hidden=256"]}
STACKS_EXPECT = {"replay_shapes": {
    "dims": {"hidden": 256},
    "expect": [{"name": "the decode graph writes whole hidden rows",
                "match": {"op": "cudaMemcpyAsync", "site": "capture_output"},
                "shape": ["*", "hidden"], "dtype": "bf16"}]}}
# what the planted run's first summary must say about the replay it happened in
STACKS_REPLAY = {
    "pp_graph": ["in replay 3 of the graph launched at decode_step (",
                 "(captured at capture_stage ("],
    "replay_output": ["of which replay 4 of the graph launched at decode_step (",
                      "left by replay 2 of the graph"],
    "replay_shapes": ["in replay 3 of the graph launched at decode_step (",
                      "(1 of 24 matching calls violate it)"],  # checked at each replay
    "graph_gathered": ["written in replay 1 of the graph launched at decode_step (",
                       "(captured at capture_gather ("],
    "graph_side_stream": ["rank 2 executed it in replay 3 of the graph launched at decode_step (",
                          "(captured at capture_bucket_side ("],
}


STACKS_OUT = {}  # (pattern, variant): the ranks' stdout


def run_stacks(pattern, variant):
    d = os.path.join(TMP, f"stacks-{pattern}-{variant}")
    shutil.rmtree(d, ignore_errors=True)  # a run of its own, never added to an earlier one
    e = env()
    e["SHAPETRACE_DOUBLE_TIMEOUT"] = "2"
    e["SHP_TOOL"] = TOOL
    n = "8" if pattern in ("megatron", "nonblocking") else "4"
    p = subprocess.run([TOOL, "run", "--dir", d, *STACKS_RUN.get(pattern, []), "--",
                        f"{T}/shp_launch", "-n", n, "--", f"{T}/stacks", pattern, variant],
                       capture_output=True, text=True, timeout=120, env=e)
    STACKS_OUT[(pattern, variant)] = p.stdout
    return d


def test_stack_patterns():
    # The runs first, three at a time: six planted stalls each wait out the doubles' 2 s timeout.
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        runs = {(p, v): pool.submit(run_stacks, p, v) for p in STACKS_CASES
                for v in ("clean", "planted")}
        runs = {k: f.result() for k, f in runs.items()}
    for pattern, (kind, culprits, seq, site) in STACKS_CASES.items():
        dims = STACKS_DIMS.get(pattern, [])
        expect = None
        if pattern in STACKS_EXPECT:
            expect = os.path.join(TMP, pattern + ".expect.json")
            with open(expect, "w") as f:
                json.dump(STACKS_EXPECT[pattern], f)
        r, p = analyze(runs[(pattern, "clean")], dims=dims, expect=expect)
        assert r["findings"] == [], (pattern, [x["summary"] for x in r["findings"]])
        assert "matched no call" not in p.stderr, (pattern, p.stderr)
        d = runs[(pattern, "planted")]
        r, _ = analyze(d, dims=dims, expect=expect)
        f = first(r)
        assert (f["kind"], f["ranks"], f["seq"]) == (kind, culprits, seq), (pattern, f["summary"])
        assert frames(f["events"][0])[0].startswith(site + " ("), (pattern, frames(f["events"][0]))
        for text in STACKS_REPLAY.get(pattern, []):
            assert text in f["summary"], (pattern, text, f["summary"])
        if pattern in STACKS_REPLAY:
            launch = [e for e in f["events"] if e["op"] == "cudaGraphLaunch"]
            assert launch and frames(launch[0])[0].startswith("decode_step ("), f["events"]
            assert all(e["label"] for e in launch), launch
        if pattern == "pp_graph":
            # the doubles replay what a graph captured: rank 0's data reached every stage
            out = STACKS_OUT[(pattern, "clean")]
            assert out.count("the replays carried every step's data") == 3, out
        if pattern == "megatron":
            # the pipeline group's ranks 0 and 1 are global ranks 1 and 5
            assert f["comm_ranks"] == [0, 1], f
            assert "rank 1 (comm rank 0) sent" in f["summary"], f["summary"]
        if pattern in ("graph_buckets", "dp_padding"):
            # the replay is named: its number, the launch's call site, the captured call's
            assert "in replay " in f["summary"] and "decode_step (" in f["summary"], f["summary"]
            launches = [e for e in f["events"] if e["op"] == "cudaGraphLaunch"]
            assert launches and frames(launches[0])[0].startswith("decode_step ("), f["events"]
        if pattern == "pipeline":
            # rank 3's receive from the held-up rank 2 came first by the clock; it is a
            # consequence, after its cause
            kinds = [x["kind"] for x in r["findings"]]
            assert kinds == ["p2p_size_mismatch", "p2p_unmatched"], kinds
        if pattern == "stall":
            # its last call on the finding's communicator first, then its last call overall,
            # each labelled in --json as in the text report
            assert f["events"][0]["comm"] == f["comm"] and f["events"][1]["comm"] != f["comm"]
            labels = [e["label"] for e in f["events"]]
            assert labels == ["its last call on this communicator", "its last call"], labels
        if pattern == "graph_buckets":
            assert [e["label"] for e in f["events"]][:1] == [None], f["events"]
        if pattern in ("extra_branch", "dormant", "capped", "fsdp_freed", "eagle_dp"):
            # reported once: no spurious missing_collective at the end, nothing about the
            # collectives before a rank was armed or after a trace was capped
            assert len(r["findings"]) == 1, (pattern, [x["summary"] for x in r["findings"]])
        if pattern == "extra_branch":
            assert "made one collective more" in f["summary"], f["summary"]
        if pattern == "capped":
            q = next(q for q in r["processes"] if q["rank"] == 1)
            assert q["complete"] is False and q["dropped"] > 0, q
            text = run([TOOL, "analyze", d]).stdout.splitlines()
            assert "INCOMPLETE: rank 1 " in text[1] and "its calls after its event " in text[1] \
                and "s into the trace) are not checked" in text[1], text[:3]
        if pattern in ("fsdp_freed", "pynccl_root"):
            assert "failed with ncclInvalidArgument (error 4" in f["summary"], f["summary"]
            assert f["events"][0]["result"] == 4 and f["events"][0]["label"], f["events"][0]
        if pattern == "pynccl_root":
            assert "its next collective lines up with their next one" in f["summary"]
        if pattern == "nonblocking":
            # the split children and the init took ncclInProgress: their rank and size were
            # learned at a later call (before: rank -1 of -1 and every call dropped in silence)
            assert len(r["findings"]) == 1, [x["summary"] for x in r["findings"]]
            assert f["comm_ranks"] == [1] and "(communicator " in f["summary"], f
        if pattern == "eagle_dp":
            assert "ranks 0, 1, 3 wait in ncclAllReduce #3 on communicator" in f["summary"], \
                f["summary"]
            assert "for rank 2, which waits in ncclAllGather #3 on communicator" in \
                f["summary"] and "for them" in f["summary"], f["summary"]
            assert len(f["events"]) == 4 and all(e["label"] == "where it waits"
                                                 for e in f["events"]), f["events"]


def test_merge_and_workers_read_call_sites_at_once():
    """The alignment (main thread) compares call sites to tell a skipped collective from an extra
    one (an_frames, the session's lock) while the workers read theirs for an expectation on
    sites: the ThreadSanitizer run of this suite fails on a race, and every run gives the same
    report."""
    d = os.path.join(TMP, "stacks-extra_branch-planted")
    if not os.path.isdir(d):
        d = run_stacks("extra_branch", "planted")
    spec = os.path.join(TMP, "any-site.expect.json")
    with open(spec, "w") as f:
        json.dump({"expect": [{"name": "every call has a site", "match": {"site": "*"},
                               "shape": ["*"]}]}, f)
    outs = set()
    for _ in range(10):
        p = run([TOOL, "analyze", "--json", "--expect", spec, d])
        outs.add(p.stdout)
        r = json.loads(p.stdout)
        assert [x["kind"] for x in r["findings"]] == ["missing_collective"], r["findings"]
        assert "made one collective more" in r["findings"][0]["summary"]
    assert len(outs) == 1, "the report changed between runs"


def decode_graphs(n):
    """The traces of vLLM's decode graphs with both bugs planted on rank 1, on n ranks (made
    once)."""
    d = os.path.join(TMP, f"decode-graphs-{n}")
    if not os.path.isdir(d):
        e = env()
        e["SHAPETRACE_DOUBLE_TIMEOUT"] = "2"
        subprocess.run([TOOL, "run", "--dir", d, "--", f"{T}/shp_launch", "-n", n, "--",
                        f"{T}/stacks", "decode_graphs", "planted"], capture_output=True,
                       timeout=120, env=e)
    return d


def test_findings_from_the_merge_and_a_worker_at_once():
    """vLLM decode graphs, both bugs on one rank: the merge thread names the replay of a count
    mismatch while a lineage worker names a stale read's replays, each symbolizing that rank's
    stacks. Both loaded them lazily without a lock, and both entered libdw: analyze died of
    SIGSEGV in a quarter to most runs of 4 and 8 ranks. The ThreadSanitizer run of this suite
    reports any access the two threads still share without a lock."""
    for n in ("4", "8"):
        r, _ = analyze(decode_graphs(n), dims=["hidden=256"])
        kinds = [x["kind"] for x in r["findings"]]
        assert kinds == ["count_mismatch", "stale_read"], (n, [x["summary"] for x in r["findings"]])
        for f in r["findings"]:
            assert f["ranks"] == [1] and "replay " in f["summary"], f["summary"]
            assert "decode_step (" in f["summary"], f["summary"]
            assert all(frames(ev)[0] for ev in f["events"]), f["events"]


def test_one_analysis_fifty_times_is_one_output():
    """The same traces, analysed 50 times, text and --json: 50 identical reports each (the
    threads never change what is found, nor in which order, nor the texts)."""
    d = decode_graphs("8")
    for args in (["--json"], []):
        outs = set()
        for _ in range(50):
            p = run([TOOL, "analyze", *args, "--dim", "hidden=256", d])
            assert p.returncode == 1, (p.returncode, p.stderr)
            outs.add(p.stdout)
        assert len(outs) == 1, (args, len(outs))


def test_any_number_of_threads_is_one_output():
    """The run's plan follows its threads (--threads, else the cores it may run on): streamed
    up to 64 processes (readers run lineage as they read), walked above (workers read each
    trace again). Whatever the plan and the thread count, the report is the same, byte for
    byte; the ThreadSanitizer run of this suite checks both plans with more threads than
    cores. Walked: the decode graphs' 8 ranks beside 60 generated ones (a count and a dtype
    planted), so that the merge, the readers and the workers all report findings."""
    d = decode_graphs("8")
    g = gen("threads-gen", 60, 3000, "count:33:50", "dtype:7:80")
    for paths, plan in (([d], "streamed"), ([d, g], "walked")):
        outs = {}
        for threads in ("1", "2", "3", "8"):
            for args in (["--json"], []):
                p = run([TOOL, "analyze", "--stats", "--threads", threads, *args,
                         "--dim", "hidden=256", *paths])
                assert p.returncode == 1, (threads, p.returncode, p.stderr)
                assert f"shapetrace: {threads} threads: the merge, " in p.stderr, p.stderr
                assert f"({plan}: " in p.stderr, (threads, p.stderr)
                outs.setdefault(tuple(args), set()).add(p.stdout)
        assert all(len(v) == 1 for v in outs.values()), (plan, [len(v) for v in outs.values()])
        r = json.loads(next(iter(outs[("--json",)])))
        kinds = sorted(x["kind"] for x in r["findings"])
        want = ["count_mismatch", "stale_read"] + (["count_mismatch", "dtype_mismatch"]
                                                   if plan == "walked" else [])
        assert kinds == sorted(want), (plan, kinds)


def traced_once(name, cmd, opts=(), e=None):
    """The traces of CMD on the doubles under `shapetrace run OPTS` (made once)."""
    d = os.path.join(TMP, name)
    if not os.path.isdir(d):
        e = dict(e or env())
        e["SHAPETRACE_DOUBLE_TIMEOUT"] = "2"
        subprocess.run([TOOL, "run", "--dir", d, *opts, "--", *cmd], capture_output=True,
                       timeout=120, env=e)
    return d


def test_calls_from_the_readers_briefs_are_the_decoded_ones():
    """With reader threads, the merge rebuilds each collective and send/receive from the brief
    its reader wrote into the feed (load.c) instead of decoding the record again; with one
    thread it decodes every call itself. Sends and receives in and out of graphs, refused
    collectives, a dormant rank's late calls and non-blocking communicators: the same report,
    byte for byte, from 1 thread and from 2, 3 and 8 (8 three times over); the ThreadSanitizer
    run of this suite reports any brief the merge reads before its reader published it."""
    launch = [f"{T}/shp_launch", "-n", "4", "--"]
    for pattern, kind, opts in (("pp_graph", "p2p_size_mismatch", []),
                                ("fsdp_freed", "failed_collective", []),
                                ("dormant", "count_mismatch", ["--dormant"]),
                                ("moe", "p2p_size_mismatch", [])):
        d = traced_once("brief-" + pattern, launch + [f"{T}/stacks", pattern, "planted"], opts,
                        dict(env(), SHP_TOOL=TOOL))
        outs = set()
        for threads in ("1", "2", "3") + ("8",) * 3:
            p = run([TOOL, "analyze", "--json", "--threads", threads, d])
            assert p.returncode == 1, (pattern, threads, p.returncode, p.stderr)
            outs.add(p.stdout)
        assert len(outs) == 1, (pattern, len(outs))
        assert json.loads(outs.pop())["findings"][0]["kind"] == kind, pattern


def test_every_thread_reports_at_once():
    """One analysis in which every kind of thread finds something, as several threads at once:
    the merge (align's count mismatch, waitfor's deadlock, values' value mismatch), the readers
    (buffers' overruns, checked as each trace is read; lineage's stale read in a streamed run)
    and, past 64 processes, the workers (lineage again, on the traces they read again). With 1,
    2, 3 and 8 threads, and 8 threads five times over, text and --json: one report each, byte
    for byte. The ThreadSanitizer run of this suite reports any access they share unlocked."""
    launch = [f"{T}/shp_launch", "-n", "4", "--"]
    paths = [decode_graphs("8"),
             traced_once("every-overrun", launch + [f"{T}/stacks", "root_only", "planted"]),
             traced_once("every-deadlock", launch + [f"{T}/stacks", "eagle_dp", "planted"]),
             traced_once("every-value", launch + [f"{T}/values", "race"], ["--values"],
                         values_env(T)),
             traced_once("every-scenario", [f"{T}/scenario", "overrun"])]
    walked = paths + [gen("every-gen", 60, 2000, "count:33:50")]
    want = ["buffer_overrun", "buffer_overrun", "count_mismatch", "deadlock", "stale_read",
            "value_mismatch"]
    for ps, plan, kinds in ((paths, "streamed", want),
                            (walked, "walked", sorted(want + ["count_mismatch"]))):
        for args in (["--json"], []):
            outs = set()
            for threads in ("1", "2", "3") + ("8",) * 5:
                p = run([TOOL, "analyze", "--stats", "--threads", threads, *args,
                         "--dim", "hidden=256", *ps])
                assert p.returncode == 1, (plan, threads, p.returncode, p.stderr)
                assert f"({plan}: " in p.stderr, (plan, threads, p.stderr)
                outs.add(p.stdout)
            assert len(outs) == 1, (plan, args, len(outs))
            if args:
                r = json.loads(outs.pop())
                assert sorted(x["kind"] for x in r["findings"]) == kinds, (
                    plan, [x["summary"] for x in r["findings"]])


def test_threads_refused():
    """--threads takes 1 to 1024: anything else is one line and exit status 2."""
    d = decode_graphs("8")
    for bad in ("0", "-1", "two", "1025", ""):
        p = run([TOOL, "analyze", "--threads", bad, d], check=False)
        assert p.returncode == 2 and p.stdout == "", (bad, p.returncode, p.stdout)
        assert p.stderr.count("\n") == 1 and "--threads" in p.stderr, (bad, p.stderr)


def test_global_ranks_in_p2p_findings():
    """A finding on a split communicator names global ranks, with the comm ranks beside."""
    d = os.path.join(TMP, "stacks-megatron-planted")
    if not os.path.isdir(d):
        d = run_stacks("megatron", "planted")
    p = run([TOOL, "analyze", d])
    assert "(global rank 1 is rank 0, 5 is rank 1 of communicator " in p.stdout, p.stdout
    assert "first: p2p_size_mismatch" in p.stdout and "ranks 1,5" in p.stdout, p.stdout


def test_root_only_buffers_in_dump():
    d = os.path.join(TMP, "stacks-root_only-clean")
    if not os.path.isdir(d):
        d = run_stacks("root_only", "clean")
    p = run([TOOL, "dump", "--json", d])
    evs = [json.loads(x) for x in p.stdout.splitlines()]
    red = [e for e in evs if e["op"] == "ncclReduce"]
    assert red and all((e["recv_bytes"] == 0) == (e["comm_rank"] != e["root"]) for e in red)
    bc = [e for e in evs if e["op"] == "ncclBroadcast"]
    assert bc and all((e["send_bytes"] == 0) == (e["comm_rank"] != e["root"]) for e in bc)


def test_null_communicator_has_no_seq_in_dump():
    d = os.path.join(TMP, "stacks-pynccl-clean")
    if not os.path.isdir(d):
        d = run_stacks("pynccl", "clean")
    p = run([TOOL, "dump", "--no-stacks", d])
    assert "18446744073709551615" not in p.stdout
    assert p.stdout.count("r-1/-1 seq -") == 4, p.stdout
    evs = [json.loads(x) for x in run([TOOL, "dump", "--json", d]).stdout.splitlines()]
    null = [e for e in evs if e["op"] == "ncclAllReduce" and e["result"] != 0]
    assert len(null) == 4 and all(e["seq"] is None for e in null), null


def test_capture_joined_through_events():
    """A stream that joins a capture by waiting on an event recorded on the capturing stream (a
    fork) has its calls captured into that capture, from CUDA's cudaStreamGetCaptureInfo; a fork
    not joined back ends the capture with cudaErrorStreamCaptureUnjoined, after which the stream
    is eager again; the same at the driver level (cuStreamGetCaptureInfo_v2)."""
    d = os.path.join(TMP, "joined")
    e = env()
    e["LD_LIBRARY_PATH"] = T  # the driver double, opened by name (ASan ignores the RUNPATH)
    p = subprocess.run([TOOL, "run", "--dir", d, "--", f"{T}/scenario", "joined"],
                       capture_output=True, text=True, timeout=60, env=e)
    assert p.returncode == 0 and "joined ok; unjoined 904; driver 0" in p.stdout, (p.stdout,
                                                                                 p.stderr)
    evs = [json.loads(x) for x in run([TOOL, "dump", "--json", d]).stdout.splitlines()]
    begins = [x for x in evs if x["op"] in ("cudaStreamBeginCapture", "cuStreamBeginCapture_v2")]
    assert len(begins) == 3, begins
    ar = [x for x in evs if x["op"] == "ncclAllReduce"]
    assert ar[0]["captured"] and ar[0]["graph"] == hex(begins[0]["capture"]), ar[0]
    assert not ar[1]["captured"] and ar[1]["seq"] == 1, ar[1]  # eager once its capture ended
    copies = [x for x in evs if x["op"] == "cudaMemcpyAsync"]
    assert [c["captured"] for c in copies] == [True, True], copies
    assert copies[1]["graph"] == hex(begins[1]["capture"]), copies[1]
    ends = [x for x in evs if x["op"] == "cudaStreamEndCapture"]
    assert ends[1]["result"] == 904, ends  # cudaErrorStreamCaptureUnjoined
    drv = [x for x in evs if x["op"] == "cuMemcpyHtoDAsync_v2"]
    assert drv and drv[0]["captured"] and drv[0]["graph"] == hex(begins[2]["capture"]), drv
    r, _ = analyze(d)
    assert r["findings"] == [], [x["summary"] for x in r["findings"]]
    # the three replays and the eager call are what the rank executed
    assert [c["collectives"] for c in r["comms"]] == [4], r["comms"]


def test_replay_number_is_the_ranks_launch_count():
    """A replay's number counts the rank's graph launches (its decode step, from 1)."""
    d = run_stacks("graph_buckets", "planted")
    p = run([TOOL, "analyze", d])
    assert "in replay 3 of the graph launched at decode_step (" in p.stdout, p.stdout


def test_expectation_sites_match_python_functions():
    d = os.path.join(TMP, "ctypes")
    here = os.path.dirname(os.path.abspath(__file__))
    run([TOOL, "run", "--dir", d, "--", shutil.which("python3"),
         os.path.join(here, "load", "ctypes_nccl.py"), f"{T}/libnccl.so.2",
         f"{T}/libcudart.so.13"])
    spec = os.path.join(TMP, "py.expect.json")
    open(spec, "w").write('{"expect": [{"name": "rows of 128 bytes", "match": {"op": "cudaMemcpy",'
                          ' "site": "copy_rows"}, "shape": [128], "dtype": "int8"}]}')
    p = run([TOOL, "analyze", "--json", "--expect", spec, d])
    r = json.loads(p.stdout)
    assert "matched no call" not in p.stderr, p.stderr
    f = first(r)
    assert f["kind"] == "expectation_violation" and "py: copy_rows (" in f["summary"], f["summary"]


# ---- the examples, on 4 simulated ranks ----

def run_example(name, args, tag):
    d = os.path.join(TMP, f"ex-{name}-{tag}")
    e = env()
    e["SHAPETRACE_DOUBLE_TIMEOUT"] = "2"
    p = subprocess.run([TOOL, "run", "--dir", d, "--", f"{T}/shp_launch", "-n", "4", "--",
                        os.path.join(BUILD, "examples", name), *args],
                       capture_output=True, text=True, timeout=120, env=e)
    return d, p


def check_example(name):
    want = json.load(open(os.path.join(EXAMPLES, name + ".expected.json")))
    expect = os.path.join(EXAMPLES, name + ".expect.json")
    d, p = run_example(name, want["args"], "planted")
    r, _ = analyze(d, dims=[a.split("=", 1)[0] + "=" + a.split("=", 1)[1]
                            for a in want["analyze"] if "=" in a])
    f = first(r)
    assert len(r["processes"]) == want["ranks"]
    for key in ("kind", "ranks", "seq"):
        if key in want["first"]:
            assert f[key] == want["first"][key], (name, key, f[key], f["summary"])
    if "consumer" in want["first"]:
        assert frames(f["events"][0])[0].startswith(want["first"]["consumer"] + " ("), \
            frames(f["events"][0])
    if "producer" in want["first"]:
        assert frames(f["lineage"][0])[0].startswith(want["first"]["producer"] + " (")
    assert len(r["findings"]) == want["findings"], [x["summary"] for x in r["findings"]]
    pe = run([TOOL, "analyze", "--json", "--expect", expect, d])
    re = json.loads(pe.stdout)
    fe = first(re)
    assert (fe["kind"], fe["ranks"]) == (want["with_expect"]["kind"],
                                         want["with_expect"]["ranks"]), fe["summary"]
    assert "matched no call" not in pe.stderr, pe.stderr
    # the clean run: correct data where the program checks it, and silence
    clean_args = ["--fixed"] if name == "hidden_states" else ["--clean"]
    d2, p2 = run_example(name, clean_args, "clean")
    assert p2.returncode == 0, (p2.stdout, p2.stderr)
    for args in (["--expect", expect], [a for a in want["analyze"]]):
        pc = run([TOOL, "analyze", "--json", *args, d2])
        assert pc.returncode == 0 and json.loads(pc.stdout)["findings"] == [], \
            (name, args, [x["summary"] for x in json.loads(pc.stdout)["findings"]])
    return p, p2


def test_example_hidden_states():
    p, p2 = check_example("hidden_states")
    assert "1542 tensors: 771 of [512] and 771 of [259]" in p.stdout, p.stdout
    assert "4 of [512, 7168] and 4 of [259, 7168]; data checked" in p2.stdout, p2.stdout


def test_example_desync():
    p, p2 = check_example("desync")
    assert p2.stdout.count("6 steps done, gathered data checked") == 4, p2.stdout
    # the planted run goes on with wrong data, as NCCL would
    assert p.stdout.count("6 steps done") == 4 and "WRONG" in p.stdout, p.stdout


def test_count_finding_both_sides_in_one_factoring():
    """One token fewer reads [511, hidden/tp] next to [512, hidden/tp], not next to
    [32, hidden*tp], in the summary and in the calls shown."""
    d, _ = run_example("desync", [], "factoring")
    out = run([TOOL, "analyze", "--dim", "hidden=1024", "--dim", "tp=4", d], check=False).stdout
    lines = [x for x in out.splitlines() if "count 13" in x]
    assert len(lines) == 3 and all("[51" in x for x in lines), out
    assert "[511, hidden/tp]" in lines[0] and "[512, hidden/tp]" in lines[0], lines[0]
    assert "hidden*tp" not in out, out


def test_example_pipeline():
    p, p2 = check_example("pipeline")
    assert p2.stdout.count("received data checked") == 4, p2.stdout


def test_example_stall():
    p, p2 = check_example("stall")
    assert p2.stdout.count("8 steps done, sums checked") == 4, p2.stdout
    # the others waited for the stalled rank until the double's timeout, then failed
    assert p.returncode != 0 and "stopping before step 5" in p.stdout, (p.stdout, p.stderr)


def main():
    return run_all(globals(), "analyze", ONLY, TMP)


if __name__ == "__main__":
    sys.exit(main())
