"""shapetrace tests: fingerprints of values that must agree across ranks (--values): the kernel's
PTX against the hash's definition, the preload on the test doubles (simulated ranks, no GPU) in
the tensor-parallel pattern of examples/torch_tp.py (tests/load/values.c), and the analyzer's
value_mismatch. Usage: test_values.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

import ptx_sim
from harness import NotRun, run_all, values_env  # the script's own folder, tests/, is on sys.path


BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
T = os.path.join(BUILD, "tests")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PTX = ptx_sim.ptx_from_header(os.path.join(ROOT, "preload", "values_ptx.h"))
TMP = tempfile.mkdtemp(prefix="shapetrace-values-")
VALUE_TYPE, VALUE_SIZE = 18, 88


def env(**extra):
    return values_env(T, **extra)


def run(cmd, check=True, e=None, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=e or env(), **kw)
    if check and p.returncode not in (0, 1):
        raise AssertionError(f"{cmd}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def traced(name, mode, ranks=4, opts=("--values",), e=None):
    """tests/load/values.c MODE on `ranks` simulated ranks under shapetrace run OPTS."""
    d = os.path.join(TMP, name)
    shutil.rmtree(d, ignore_errors=True)
    p = run([TOOL, "run", "--dir", d, *opts, "--", f"{T}/shp_launch", "-n", str(ranks), "--",
             f"{T}/values", mode], e=e)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return d, p


def analyze(d, *opts):
    p = run([TOOL, "analyze", "--json", *opts, d])
    r = json.loads(p.stdout)
    assert p.returncode == (1 if r["findings"] else 0), (p.returncode, p.stdout[-2000:])
    return r


def values_of(d):
    """The value lines of dump --json, and the calls they are of, by (file, index)."""
    p = run([TOOL, "dump", "--json", d])
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    calls = {(x["file"], x["index"]): x for x in lines if x["op"] != "value"}
    return [x for x in lines if x["op"] == "value"], calls


def records(path):
    """(type, size) of every record of a trace, in file order, and its version."""
    data = open(path, "rb").read()
    version, tail = struct.unpack_from("<I", data, 8)[0], struct.unpack_from("<Q", data, 72)[0]
    out, off = [], 4096
    while off + 8 <= tail:
        w = struct.unpack_from("<I", data, off)[0]
        size = (w & 0xFFFF) * 8
        if w >> 24 != 0xA7 or not size:
            break
        out.append(((w >> 16) & 0xFF, size))
        off += size
    return out, version


# ---- the kernel ----

def test_ptx_computes_the_definition():
    # The text the preload hands cuModuleLoadData, run on a PTX interpreter: every size around
    # the word and tail boundaries, every misalignment, grids of 1 to 3 blocks of 1 to 4
    # threads; never a load outside the aligned words that hold the bytes.
    rnd = random.Random(26)
    cases = 0
    for n in list(range(0, 34)) + [63, 64, 65, 129]:
        data = bytes(rnd.randrange(256) for _ in range(n))
        want = ptx_sim.fingerprint(data)
        for mis in range(8):
            for blocks, threads in ((1, 1), (2, 3), (3, 4)):
                got = ptx_sim.kernel_fingerprint(PTX, data, mis, blocks, threads)
                assert got == want, (n, mis, blocks, threads, hex(got), hex(want))
                cases += 1
    print(f"     ({cases} launches agree with the definition)")


def test_ptx_definition_pinned():
    # The interpreter's port of the definition gives the C unit test's pinned numbers.
    assert ptx_sim.fingerprint(b"") == 0x58e0906e2edc56f0
    assert ptx_sim.fingerprint(bytes(range(13))) == 0x1e77cdf446b6ebd4
    assert ptx_sim.fingerprint(bytes(64)) == 0x84a2fa48f917bb0e


def test_ptx_assembles():
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    ptxas = shutil.which("ptxas") or os.path.join(cuda, "bin", "ptxas")
    if not os.access(ptxas, os.X_OK):
        raise NotRun("no ptxas (CUDA_HOME/bin) to assemble the kernel with")
    src = os.path.join(TMP, "fp.ptx")
    open(src, "w").write(PTX)
    for arch in ("sm_75", "sm_90"):
        p = subprocess.run([ptxas, f"-arch={arch}", src, "-o", os.path.join(TMP, "fp.cubin")],
                           capture_output=True, text=True)
        assert p.returncode == 0, (arch, p.stderr)


# ---- on the doubles ----

def test_clean_tensor_parallel_run_is_silent():
    # Broadcast, all-reduce and all-gather outputs, replicated copies (the batch, the logits
    # sampled), and each rank's own shards: nothing differs that should not.
    d, _ = traced("clean", "clean")
    r = analyze(d)
    assert r["findings"] == [], [f["summary"] for f in r["findings"]]
    v = r["values"]
    assert v["compared"] >= 18 + 5 * 6 and v["differ"] == 0, v
    assert v["captured"] == v["busy"] == v["lost"] == v["pending"] == 0, v
    text = run([TOOL, "analyze", d])
    assert text.returncode == 0 and "fingerprints (--values):" in text.stdout, text.stdout


def test_race_on_all_reduce_output_is_found():
    # Rank 2's all-reduce output is overwritten from another stream right after the call, before
    # its consumers read it: found at that all-reduce, step 3's, with its site.
    d, _ = traced("race", "race")
    r = analyze(d)
    f = r["findings"][0]
    assert f["kind"] == "value_mismatch" and f["severity"] == "error", f
    assert (f["ranks"], f["seq"], f["comm_ranks"]) == ([2], 10, [2]), f
    ev = f["events"][0]
    assert ev["op"] == "ncclAllReduce" and ev["rank"] == 2 and ev["seq"] == 10, ev
    assert "row_parallel" in ev["stack"][0], ev["stack"]
    assert f["expected"]["rank"] != 2 and f["expected"]["op"] == "ncclAllReduce", f["expected"]
    assert "rank 2 received other bytes than ranks 0, 1, 3" in f["summary"], f["summary"]
    assert "row_parallel" in f["summary"], f["summary"]
    assert len(r["findings"]) == 1 and f["consequences"] >= 1, r["findings"]


def test_race_with_two_ranks_names_both():
    # Two ranks that differ: no majority, both named.
    d, _ = traced("race2", "race", ranks=2)
    f = analyze(d)["findings"][0]
    assert (f["kind"], f["ranks"], f["seq"]) == ("value_mismatch", [0, 1], 10), f
    assert f["expected"] is None and "no two of a majority" in f["summary"], f


def test_replicated_logits_from_another_input_are_found_at_the_copy():
    # Rank 1 computes step 3's logits from its own partial sum instead of the all-reduce's
    # output: the collectives all agree; the first copy of other bytes is the logits' upload,
    # its 4th occurrence there (steps 0 to 2 agreed).
    d, _ = traced("input", "input")
    r = analyze(d)
    f = r["findings"][0]
    assert (f["kind"], f["ranks"], f["seq"]) == ("value_mismatch", [1], None), f
    ev = f["events"][0]
    assert ev["op"] == "cudaMemcpyAsync" and ev["kind"] == "H2D", ev
    assert "upload_logits" in ev["stack"][0], ev["stack"]
    assert "the 4th there" in f["summary"] and "upload_logits" in f["summary"], f["summary"]


def test_site_glob_picks_the_copies():
    # Only the copies back to the host for sampling: the same plant is found there, at the
    # logits' sampling copy, and no other copy site was fingerprinted.
    d, _ = traced("input-site", "input", opts=("--values", "all", "--values-site", "sample_*"))
    vals, calls = values_of(d)
    sites = {calls[(v["file"], v["of"])]["stack"][0].split(" ")[0] for v in vals
             if v["value"] == "copied"}
    assert sites == {"sample_logits", "sample_gathered"}, sites
    f = analyze(d)["findings"][0]
    assert (f["kind"], f["ranks"]) == ("value_mismatch", [1]), f
    assert "sample_logits" in f["events"][0]["stack"][0], f["events"][0]["stack"]
    assert "the 4th there" in f["summary"], f["summary"]


def test_every_nth_call_only():
    d, _ = traced("every", "clean", ranks=2,
                  opts=("--values", "all", "--values-every", "3"))
    vals, calls = values_of(d)
    colls = [v for v in vals if v["value"] == "output"]
    copies = [v for v in vals if v["value"] == "copied"]
    assert colls and all(v["seq"] % 3 == 0 for v in colls), [v["seq"] for v in colls]
    # 18 collectives a rank (seq 0 to 17): seq 0, 3, ..., 15 of the three fingerprinted ops.
    assert sorted({v["seq"] for v in colls}) == [0, 3, 6, 9, 12, 15], colls
    assert copies and all(v["occurrence"] % 3 == 0 for v in copies), copies
    assert analyze(d)["findings"] == []


def test_value_records_name_their_calls():
    d, _ = traced("dump", "clean", ranks=2)
    vals, calls = values_of(d)
    assert vals
    for v in vals:
        c = calls[(v["file"], v["of"])]
        assert c["op"] == v["call_op"] and v["status"] == "done", (v, c)
        assert v["fingerprint"].startswith("0x") and len(v["fingerprint"]) == 18, v
        assert v["index"] is None and v["bytes"] > 0, v
        if v["value"] == "output":
            assert (v["comm"], v["seq"]) == (c["comm"], c["seq"]), (v, c)
            assert v["on"] == "device" and v["bytes"] == c["recv_bytes"], (v, c)
        else:
            assert v["bytes"] == c["bytes"] and v["site"], (v, c)
            # A synchronous copy is read on the host, an async one on the device.
            assert v["on"] == ("device" if c["op"] == "cudaMemcpyAsync" else "host"), (v, c)
    table = run([TOOL, "dump", d]).stdout
    assert " value " in table and "of #" in table, table[:2000]


def test_captured_call_is_skipped_and_counted():
    # The all-reduce is captured into a CUDA graph once and replayed at every step: its one
    # recorded call (at the capture) runs nothing then, so it is not fingerprinted, and says so.
    d, _ = traced("capture", "capture", ranks=2)
    vals, _ = values_of(d)
    cap = [v for v in vals if v["status"] == "captured"]
    assert [(v["rank"], v["call_op"]) for v in sorted(cap, key=lambda v: v["rank"])] == \
        [(0, "ncclAllReduce"), (1, "ncclAllReduce")], cap
    r = analyze(d)
    assert r["findings"] == [] and r["values"]["captured"] == 2, r["values"]
    text = run([TOOL, "analyze", d]).stdout
    assert "2 captured into a CUDA graph" in text, text


def test_group_fingerprints_after_group_end():
    # An all-reduce inside ncclGroupStart/End runs at the group's end: its fingerprint is taken
    # then (before, the lazily run kernel of the doubles would read the partial sums).
    d, _ = traced("group", "group")
    r = analyze(d)
    assert r["findings"] == [] and r["values"]["differ"] == 0, r
    vals, _ = values_of(d)
    assert len([v for v in vals if v["call_op"] == "ncclAllReduce"]) == 4 * 6, len(vals)


def test_without_values_the_trace_is_unchanged():
    # The same program without --values: version 6, not one value record, and the same records
    # otherwise as with --values, which adds exactly its value records (88 bytes each).
    d0, _ = traced("plain", "clean", ranks=1, opts=("--stacks", "none"))
    d1, _ = traced("with", "clean", ranks=1, opts=("--stacks", "none", "--values", "collectives"))
    (f0,), (f1,) = [[os.path.join(d, f) for f in os.listdir(d) if f.endswith(".shptrace")]
                    for d in (d0, d1)]
    r0, v0 = records(f0)
    r1, v1 = records(f1)
    assert (v0, v1) == (6, 7), (v0, v1)
    assert VALUE_TYPE not in [t for t, _ in r0], r0
    vals = [(t, s) for t, s in r1 if t == VALUE_TYPE]
    assert vals and all(s == VALUE_SIZE for _, s in vals), vals
    assert [x for x in r1 if x[0] != VALUE_TYPE] == r0
    t0 = struct.unpack_from("<Q", open(f0, "rb").read(80), 72)[0]
    t1 = struct.unpack_from("<Q", open(f1, "rb").read(80), 72)[0]
    assert t1 - t0 == VALUE_SIZE * len(vals), (t0, t1, len(vals))


def test_copies_need_call_sites():
    d, p = traced("nostacks", "clean", ranks=2, opts=("--stacks", "none", "--values", "all"))
    assert p.stderr.count("fingerprints of copies need call sites") == 2, p.stderr
    vals, _ = values_of(d)
    assert vals and all(v["value"] == "output" for v in vals), vals


def test_driver_error_switches_values_off():
    # The driver refuses the module: one warning a process, the job's output and status as
    # without --values, its calls still traced, its fingerprints marked lost.
    e = env(SHP_DOUBLE_CU_FAIL="cuModuleLoadData")
    d, p = traced("modfail", "clean", ranks=2, e=e)
    plain = run([f"{T}/shp_launch", "-n", "2", "--", f"{T}/values", "clean"], e=e)
    assert sorted(p.stdout.splitlines()) == sorted(plain.stdout.splitlines()), p.stdout
    assert p.stderr.count("fingerprints switched off: cuModuleLoadData") == 2, p.stderr
    vals, calls = values_of(d)
    device = [v for v in vals if v["on"] == "device"]
    assert device and {v["status"] for v in device} == {"lost"}, device
    assert len({c["op"] for c in calls.values()} & {"ncclAllReduce", "cudaMemcpyAsync"}) == 2
    r = analyze(d)
    assert r["findings"] == [] and r["values"]["lost"] == 2, r["values"]


def test_threads_and_a_forked_child():
    # Four threads copying and all-reducing at once: every fingerprint taken and read back.
    d = os.path.join(TMP, "threads")
    p = run([TOOL, "run", "--values", "--dir", d, "--", f"{T}/scenario", "threads", "4", "300"])
    assert p.returncode == 0 and "threads ok" in p.stdout, p
    vals, _ = values_of(d)
    assert len(vals) == 2 * 4 * 300 and {v["status"] for v in vals} == {"done"}, len(vals)
    # A forked child cannot use its parent's CUDA contexts: it takes no fingerprint, and its
    # trace stays format version 6.
    d = os.path.join(TMP, "fork")
    p = run([TOOL, "run", "--values", "--dir", d, "--", f"{T}/scenario", "fork"])
    assert p.returncode == 0 and "fork ok" in p.stdout, p
    versions = sorted(records(os.path.join(d, f))[1] for f in os.listdir(d)
                      if f.endswith(".shptrace"))
    assert versions == [6, 7], versions


PY_SITES = """
import ctypes, sys
cudart = ctypes.CDLL(sys.argv[1])
copy = cudart.cudaMemcpy
copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
dev = ctypes.c_void_p()
assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
host = ctypes.create_string_buffer(b"logits" * 10)


class Sampler:
    def sample_logits(self):
        assert copy(dev, host, 60, 1) == 0  # host to device


def other_site():
    assert copy(dev, host, 60, 1) == 0


for _ in range(3):
    Sampler().sample_logits()
    other_site()
print("ok")
"""


def test_python_function_names_pick_the_copies():
    # The glob against Python frames: only the copies made in sample_logits (a method: its name
    # and its qualified name) are fingerprinted; two processes running the same code compute one
    # site for them, counted 0, 1, 2.
    script = os.path.join(TMP, "sites.py")
    open(script, "w").write(PY_SITES)
    sites = []
    for k in range(2):
        d = os.path.join(TMP, f"pysites{k}")
        shutil.rmtree(d, ignore_errors=True)
        p = run([TOOL, "run", "--values", "copies", "--values-site", "*.sample_*", "--dir", d,
                 "--", sys.executable, script, f"{T}/libcudart.so.13"])
        assert p.returncode == 0 and "ok" in p.stdout, p
        vals, calls = values_of(d)
        assert [v["occurrence"] for v in vals] == [0, 1, 2], vals
        assert all(any("py: sample_logits" in f for f in calls[(v["file"], v["of"])]["stack"])
                   for v in vals), vals
        assert {v["on"] for v in vals} == {"host"} and len({v["site"] for v in vals}) == 1, vals
        sites.append(vals[0]["site"])
    assert sites[0] == sites[1], sites


def test_run_options():
    for bad, msg in ((["--values", "--values-every", "0"], "--values-every takes"),
                     (["--values=bogus"], "--values takes collectives, copies or all"),
                     (["--values-site", ""], "--values-site takes a glob")):
        p = run([TOOL, "run", *bad, "--", "true"], check=False)
        assert p.returncode == 2 and msg in p.stderr and p.stderr.count("\n") == 1, (bad, p.stderr)
    # A bare --values before the command is "all"; the word after it is taken only when it is
    # one of the three.
    p = run([TOOL, "run", "--dir", os.path.join(TMP, "opt"), "--values", "--", "env"])
    assert "SHAPETRACE_VALUES=all" in p.stdout, p.stdout
    p = run([TOOL, "run", "--dir", os.path.join(TMP, "opt"), "--values", "copies",
             "--values-every", "7", "--values-site", "sample*", "env"])
    out = p.stdout
    assert "SHAPETRACE_VALUES=copies" in out and "SHAPETRACE_VALUES_EVERY=7" in out and \
        "SHAPETRACE_VALUES_SITE=sample*" in out, out
    help_ = run([TOOL, "run", "--help"]).stdout
    assert "--values [WHAT]" in help_ and "--values-every N" in help_, help_


def test_repeated_analysis_gives_the_same_report():
    d, _ = traced("again", "race")
    outs = {run([TOOL, "analyze", "--json", d]).stdout for _ in range(3)}
    assert len(outs) == 1


def test_report_and_export_show_the_finding():
    d, _ = traced("pictures", "race")
    page = os.path.join(TMP, "race.html")
    p = run([TOOL, "report", "--html", page, d])
    assert p.returncode == 0, p.stderr
    html = open(page).read()
    assert "value_mismatch" in html and "received other bytes" in html, html[:500]
    out = os.path.join(TMP, "race.json")
    p = run([TOOL, "export", "-o", out, d])
    assert p.returncode == 0, p.stderr
    names = [e["name"] for e in json.load(open(out))["traceEvents"] if e.get("cat") == "finding"]
    assert names and set(names) == {"value_mismatch"}, names


def test_calls_past_the_first_segment():
    """A communicator made after 1,100,000 copies (70 MiB of records: past the first of the
    segments the writer maps its file in, 64 MiB each, which lie apart): its all-reduces'
    fingerprints name it and their calls. The preload took a record's offset for its distance
    from the header, and the record an offset names for the header plus that offset (seen: the
    fingerprints named no call)."""
    d = os.path.join(TMP, "latecomm")
    p = run([TOOL, "run", "--values", "collectives", "--stacks", "none", "--dir", d, "--",
             f"{T}/scenario", "latecomm", "1100000"])
    assert p.returncode == 0 and p.stdout == "latecomm ok\n", p
    # 1.1M lines: only those of the all-reduces and the fingerprints are parsed
    dump = subprocess.Popen([TOOL, "dump", "--json", "--no-stacks", d], stdout=subprocess.PIPE,
                            env=env())
    lines = [json.loads(ln) for ln in dump.stdout if b'"value"' in ln or b"ncclAllReduce" in ln]
    assert dump.wait() == 0
    ars = [x for x in lines if x["op"] == "ncclAllReduce"]
    vals = [x for x in lines if x["op"] == "value"]
    assert len(ars) == 4 and len(vals) == 4 and {v["status"] for v in vals} == {"done"}, vals
    assert ars[0]["index"] > 1100000 and ars[0]["comm"], ars[0]
    assert [(v["of"], v["comm"], v["seq"]) for v in vals] == \
        [(a["index"], a["comm"], a["seq"]) for a in ars], (vals, ars)
    [f] = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".shptrace")]
    with open(f, "rb") as fh:
        comm_off = struct.unpack_from("<Q", fh.read(4096), 816)[0]  # the header's comm_off[0]
    assert comm_off > 64 << 20, comm_off


def test_version_says_seven():
    v = run([TOOL, "--version"]).stdout
    assert "trace format version 6" in v and "version 7" in v and "versions 2 to 5 read" in v, v


if __name__ == "__main__":
    sys.exit(run_all(globals(), "values", ONLY, TMP))
