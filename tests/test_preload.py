"""shapetrace tests: the preload and `run`/`dump`, through every loading path, on the test doubles
(simulated ranks; no GPU). Usage: test_preload.py BUILD_DIR [NAME...]. Prints one line per test
and ends with 'N passed, M failed'."""
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import traceback

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
T = os.path.join(BUILD, "tests")
SANITIZED = os.environ.get("SHAPETRACE_SANITIZED") == "1"
TMP = tempfile.mkdtemp(prefix="shapetrace-test-")

DUMP_KEYS = ["file", "index", "host", "pid", "tid", "rank", "t_ns", "dur_ns", "op", "comm",
             "comm_rank", "nranks", "seq", "count", "dtype", "bytes", "send_bytes", "recv_bytes",
             "peer", "root", "redop", "src", "dst", "kind", "width", "height", "spitch", "dpitch",
             "stream", "captured", "graph", "result", "stack"]


def base_env():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("SHAPETRACE_DIR", None)
    if SANITIZED:
        asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                              text=True).stdout.strip()
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0"
    return env


def run(cmd, env=None, check=True, **kw):
    p = subprocess.run(cmd, env=env or base_env(), capture_output=True, text=True, timeout=120,
                       **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\nstdout: {p.stdout}\n"
                             f"stderr: {p.stderr}")
    return p


def traced(name, args, opts=(), env=None, expect_rc=0):
    d = os.path.join(TMP, name)
    p = run([TOOL, "run", "--dir", d, *opts, "--", *args], env=env, check=False)
    assert p.returncode == expect_rc, (
        f"{args}: exit {p.returncode}, wanted {expect_rc}\n{p.stdout}\n{p.stderr}")
    assert f"in {d}" in p.stderr, p.stderr
    return d, p


def dump(path, check=True):
    p = run([TOOL, "dump", "--json", path], check=check)
    return [json.loads(line) for line in p.stdout.splitlines()], p


def ops(events, op):
    return [e for e in events if e["op"] == op]


def one(events, op):
    found = ops(events, op)
    assert len(found) == 1, f"{op}: {len(found)} events"
    return found[0]


def site_has(e, text):
    return e["stack"] and any(text in f for f in e["stack"])


# ---- tests ----

def test_basic_records():
    d, p = traced("basic", [f"{T}/scenario", "basic"])
    assert p.stdout == "basic ok 1\n", p.stdout  # stdout passes through untouched
    files = os.listdir(d)
    assert len(files) == 1 and files[0].endswith(".shptrace"), files
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(d, files[0])).st_mode) == 0o600
    ev, dp = dump(d)
    assert dp.stderr == "", dp.stderr  # complete trace: nothing to say
    for e in ev:
        missing = [k for k in DUMP_KEYS if k not in e]
        assert not missing, (e["op"], missing)
    init = one(ev, "ncclCommInitRank")
    assert init["comm_rank"] == 0 and init["nranks"] == 1 and init["result"] == 0
    comm = init["comm"]
    ar = [e for e in ops(ev, "ncclAllReduce") if e["comm"] == comm]
    assert len(ar) == 1
    ar = ar[0]
    assert (ar["seq"], ar["count"], ar["dtype"], ar["bytes"], ar["redop"]) == \
        (0, 1024, "fp32", 4096, "sum"), ar
    ag = one(ev, "ncclAllGather")
    assert (ag["seq"], ag["count"], ag["send_bytes"], ag["recv_bytes"]) == (1, 512, 2048, 2048)
    assert site_has(ag, "gather_rows (") and site_has(ag, "scenario.c:"), ag["stack"]
    assert ag["stack"][0].startswith("gather_rows"), ag["stack"]
    bc = one(ev, "ncclBroadcast")
    assert (bc["seq"], bc["dtype"], bc["root"], bc["bytes"], bc["redop"]) == \
        (2, "bf16", 0, 512, None), bc
    send, recv = one(ev, "ncclSend"), one(ev, "ncclRecv")
    assert (send["peer"], send["seq"], send["send_bytes"], send["recv_bytes"]) == (0, 0, 400, None)
    assert (recv["peer"], recv["seq"], recv["recv_bytes"], recv["dst"] is not None) == \
        (0, 0, 400, True)
    gs = ops(ev, "ncclGroupStart")
    assert len(gs) == 1 and len(ops(ev, "ncclGroupEnd")) == 1
    copies = ops(ev, "cudaMemcpy") + ops(ev, "cudaMemcpyAsync")
    kinds = [c["kind"] for c in sorted(copies, key=lambda c: c["index"])]
    assert kinds == ["H2D", "D2H", "D2H"], kinds
    failing = [c for c in ops(ev, "cudaMemcpy") if c["result"] != 0]
    assert len(failing) == 1 and failing[0]["bytes"] == 16
    c2 = one(ev, "cudaMemcpy2D")
    assert (c2["width"], c2["height"], c2["spitch"], c2["dpitch"], c2["bytes"], c2["kind"]) == \
        (64, 8, 256, 64, 512, "D2H"), c2
    split = one(ev, "ncclCommSplit")
    child = split["comm"]
    assert child != comm and split["nranks"] == 1 and split["parent"] == comm
    arc = [e for e in ops(ev, "ncclAllReduce") if e["comm"] == child]
    assert len(arc) == 1 and (arc[0]["seq"], arc[0]["dtype"], arc[0]["redop"]) == \
        (0, "fp16", "max")
    destroys = ops(ev, "ncclCommDestroy")
    assert sorted(e["comm"] for e in destroys) == sorted([comm, child])
    mallocs = ops(ev, "cudaMalloc")
    assert len(mallocs) == 2 and all(m["ptr"] and m["size"] == 4096 for m in mallocs)
    assert len(ops(ev, "cudaFree")) == 2
    assert all(e["rank"] == 0 for e in ev)  # rank of the first communicator joined
    assert [e["index"] for e in ev] == list(range(len(ev)))
    assert all(e["pending"] is False and e["dur_ns"] is not None for e in ev)
    # The table form says the same, for a person.
    table = run([TOOL, "dump", d]).stdout
    assert "ncclAllGather" in table and "gather_rows" in table and "complete" in table


def test_exit_status_and_signals():
    _, p = traced("exit7", ["sh", "-c", "echo out; echo err >&2; exit 7"], expect_rc=7)
    assert p.stdout == "out\n" and p.stderr.startswith("err\n"), (p.stdout, p.stderr)
    d = os.path.join(TMP, "term")
    p = run([TOOL, "run", "--dir", d, "--", "sh", "-c", "kill -TERM $$"], check=False)
    assert p.returncode == -signal.SIGTERM, p.returncode  # dies of the same signal
    p = run([TOOL, "run", "--dir", d, "--", "/nonexistent/cmd"], check=False)
    assert p.returncode == 127 and "cannot run /nonexistent/cmd" in p.stderr, p.stderr
    p = run([TOOL, "run", "--stacks", "bogus", "--", "true"], check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    p = run([TOOL, "run"], check=False)
    assert p.returncode == 2 and "no command" in p.stderr
    # stdin passes through too
    p = subprocess.run([TOOL, "run", "--dir", d, "--", "cat"], input="abc", text=True,
                       capture_output=True, env=base_env())
    assert p.stdout == "abc" and p.returncode == 0


def test_threads_no_lost_records():
    d, _ = traced("threads", [f"{T}/scenario", "threads", "8", "1000"])
    ev, dp = dump(d)
    assert dp.stderr == "", dp.stderr
    copies = ops(ev, "cudaMemcpy")
    ars = ops(ev, "ncclAllReduce")
    assert len(copies) == 8000 and len(ars) == 8000, (len(copies), len(ars))
    assert sorted(e["seq"] for e in ars) == list(range(8000))
    assert len({e["tid"] for e in ars}) == 8
    # stacks are deduplicated: far fewer stack records than events
    assert all(e["stack"] for e in copies)


def test_fork_child_gets_own_file():
    d, _ = traced("fork", [f"{T}/scenario", "fork"])
    files = sorted(os.listdir(d))
    assert len(files) == 2, files
    by_pid = {}
    for f in files:
        ev, _ = dump(os.path.join(d, f))
        by_pid[ev[0]["pid"]] = ev
    parent = [ev for ev in by_pid.values() if ops(ev, "cudaMalloc")]
    child = [ev for ev in by_pid.values() if not ops(ev, "cudaMalloc")]
    assert len(parent) == 1 and len(child) == 1
    assert [c["bytes"] for c in ops(child[0], "cudaMemcpy")] == [12, 12]
    assert [c["bytes"] for c in ops(parent[0], "cudaMemcpy")] == [64, 8]
    assert all(c["stack"] and site_has(c, "scenario.c:") for c in ops(child[0], "cudaMemcpy"))


def test_sigkill_loses_no_complete_record():
    d, _ = traced("kill", [f"{T}/scenario", "kill", "5000"], expect_rc=-signal.SIGKILL)
    ev, dp = dump(d)
    assert dp.returncode == 0
    copies = ops(ev, "cudaMemcpy")
    assert len(copies) == 5000, len(copies)
    assert [c["bytes"] for c in copies[:17]] == [(i % 16 + 1) * 4 for i in range(17)]
    assert "incomplete" in dp.stderr, dp.stderr
    table = run([TOOL, "dump", d]).stdout
    assert "INCOMPLETE" in table


def test_torn_record_is_skipped():
    d, _ = traced("torn", [f"{T}/scenario", "kill", "100"], expect_rc=-signal.SIGKILL)
    path = os.path.join(d, os.listdir(d)[0])
    ev, _ = dump(path)
    victim = ops(ev, "cudaMemcpy")[50]
    # Find the 50th copy record in the file and wipe its first word, as a writer killed between
    # reserving and publishing leaves it.
    data = bytearray(open(path, "rb").read())
    off, seen = 4096, -1
    while off < len(data):
        word = int.from_bytes(data[off:off + 4], "little")
        size = (word & 0xffff) * 8
        if word >> 24 != 0xA7 or size == 0:
            break
        if (word >> 16) & 0xff == 5:
            seen += 1
            if seen == 50:
                data[off:off + 8] = bytes(8)
                break
        off += size
    assert seen == 50
    torn = os.path.join(TMP, "torn.shptrace")
    open(torn, "wb").write(data)
    ev2, dp = dump(torn)
    copies = ops(ev2, "cudaMemcpy")
    assert len(copies) == 99 and victim["t_ns"] not in [c["t_ns"] for c in copies]
    table = run([TOOL, "dump", torn]).stdout
    assert "1 torn record skipped" in table, table[-300:]


def test_bad_inputs():
    junk = os.path.join(TMP, "junk.shptrace")
    open(junk, "wb").write(b"hello world" * 1000)
    p = run([TOOL, "dump", junk], check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not a shapetrace trace" in p.stderr
    short = os.path.join(TMP, "short.shptrace")
    open(short, "wb").write(b"SHPTRACE")
    p = run([TOOL, "dump", short], check=False)
    assert p.returncode == 2 and "shorter than a header" in p.stderr
    d, _ = traced("version", [f"{T}/scenario", "basic"])
    path = os.path.join(d, os.listdir(d)[0])
    data = bytearray(open(path, "rb").read())
    data[8:12] = (99).to_bytes(4, "little")
    other = os.path.join(TMP, "other.shptrace")
    open(other, "wb").write(data)
    p = run([TOOL, "dump", "--json", other], check=False)
    assert p.returncode == 2 and "version 99" in p.stderr and p.stdout == "", p.stderr
    # a bad file among good ones: the good ones are still printed, status 2
    p = run([TOOL, "dump", "--json", path, junk], check=False)
    assert p.returncode == 2 and len(p.stdout.splitlines()) > 10
    empty = os.path.join(TMP, "empty-dir")
    os.makedirs(empty, exist_ok=True)
    p = run([TOOL, "dump", empty], check=False)
    assert p.returncode == 2 and "no traces" in p.stderr
    p = run([TOOL, "dump"], check=False)
    assert p.returncode == 2
    p = run([TOOL, "frobnicate"], check=False)
    assert p.returncode == 2 and "unknown command" in p.stderr
    for cmd in (["--help"], ["run", "--help"], ["dump", "--help"], ["status", "--help"],
                ["attach", "--help"]):
        p = run([TOOL, *cmd])
        assert "usage:" in p.stdout


def test_cap_drops_are_counted():
    env = base_env()
    d = os.path.join(TMP, "cap")
    p = run([TOOL, "run", "--dir", d, "--max-mb", "1", "--", f"{T}/scenario", "kill", "20000"],
            env=env, check=False)
    assert p.returncode == -signal.SIGKILL
    ev, dp = dump(d)
    n = len(ops(ev, "cudaMemcpy"))
    assert 5000 < n < 20000, n  # 1 MiB holds about 7,000 copy records
    assert "dropped" in dp.stderr
    table = run([TOOL, "dump", d]).stdout
    dropped = int(table.split(" records DROPPED")[0].rsplit(" ", 1)[1])
    assert dropped == 20000 - n, (dropped, n)


def test_graph_capture_and_launches():
    d, _ = traced("graph", [f"{T}/scenario", "graph"])
    ev, _ = dump(d)
    ars = ops(ev, "ncclAllReduce")
    assert [a["captured"] for a in ars] == [True, False]
    begin = one(ev, "cudaStreamBeginCapture")
    end = one(ev, "cudaStreamEndCapture")
    assert begin["capture"] == end["capture"] == int(ars[0]["graph"], 16)
    inst = one(ev, "cudaGraphInstantiate")
    assert inst["graph"] == end["graph"] and inst["exec"]
    launches = ops(ev, "cudaGraphLaunch")
    assert len(launches) == 5 and all(l["exec"] == inst["exec"] for l in launches)
    assert [a["seq"] for a in ars] == [0, 1]


def test_default_kind_resolved():
    d, p = traced("default", [f"{T}/scenario", "default-kind"])
    assert p.stdout == "default-kind ok 0\n", p.stdout
    ev, _ = dump(d)
    assert [c["kind"] for c in ops(ev, "cudaMemcpy")] == ["H2D", "D2H", "D2D", "H2H"]
    pinned = one(ev, "cudaMallocHost")
    assert pinned["ptr"] and one(ev, "cudaFreeHost")["ptr"] == pinned["ptr"]


def test_rtld_local_module():
    d, p = traced("local", [f"{T}/local_module", f"{T}/mod_nccl.so", "5"])
    assert "rc 0" in p.stdout
    ev, _ = dump(d)
    ars = ops(ev, "ncclAllReduce")
    assert len(ars) == 5 and [a["seq"] for a in ars] == list(range(5))
    assert one(ev, "ncclCommInitRankConfig")["nranks"] == 1
    assert site_has(ars[0], "mod_run (")


def test_dlsym_handle_and_rtld_next():
    d, p = traced("dlsym", [f"{T}/dlsym_handle", f"{T}/libnccl.so.2", f"{T}/libnext_a.so"])
    assert "rtld_next 2" in p.stdout, p.stdout  # RTLD_NEXT kept its meaning
    ev, _ = dump(d)
    assert len(ops(ev, "ncclAllReduce")) == 3
    assert one(ev, "ncclCommInitRank")["result"] == 0


def test_constructor_calls():
    d, p = traced("ctor", [f"{T}/ctor_main"])
    assert "ctor_main ok" in p.stdout
    ev, _ = dump(d)
    assert one(ev, "cudaMemcpy")["kind"] == "H2D"
    assert one(ev, "cudaMalloc")["size"] == 32


def test_python_ctypes():
    py = shutil.which("python3")
    d, p = traced("ctypes", [py, os.path.join(os.path.dirname(__file__), "load", "ctypes_nccl.py"),
                             f"{T}/libnccl.so.2", f"{T}/libcudart.so.13"])
    assert "ctypes ok" in p.stdout
    ev, _ = dump(d)
    ars, copies = ops(ev, "ncclAllReduce"), ops(ev, "cudaMemcpy")
    assert len(ars) == 20 and len(copies) == 20, (len(ars), len(copies))
    assert sorted(a["seq"] for a in ars) == list(range(20))
    assert len({a["tid"] for a in ars}) == 2


def test_missing_library_function():
    d, p = traced("missing", [f"{T}/missing"], opts=["--debug", "WARN"])
    assert "nccl 2 cuda 302" in p.stdout, p.stdout
    assert p.stderr.count("real function was not found") == 2, p.stderr


def test_no_stacks_option():
    d, _ = traced("nostacks", [f"{T}/scenario", "basic"], opts=["--stacks", "none"])
    ev, _ = dump(d)
    assert ev and all(e["stack"] is None for e in ev)


def test_exports_are_the_call_list():
    out = run(["nm", "-D", "--defined-only", os.path.join(BUILD, "lib", "libshapetrace.so")]).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    calls = open(os.path.join(os.path.dirname(__file__), "..", "include", "shapetrace",
                              "calls.h")).read()
    listed = set()
    for line in calls.splitlines():
        if line.startswith("X(") and "," in line:
            listed.add(line.split(",")[2].strip())
    assert len(listed) == 49, len(listed)
    assert names == listed | {"dlsym"}, names ^ (listed | {"dlsym"})
    deps = run(["readelf", "-d", os.path.join(BUILD, "lib", "libshapetrace.so")]).stdout
    assert "libnccl" not in deps and "libcudart" not in deps


def start_phases(name, nproc, k, stall, opts=()):
    d, go = os.path.join(TMP, name), os.path.join(TMP, name + ".go")
    p = subprocess.Popen([TOOL, "run", "--dir", d, *opts, "--", f"{T}/scenario", "phases", go,
                          str(nproc), str(k), str(stall)], stdout=subprocess.PIPE, text=True,
                         env=base_env())
    ready = [p.stdout.readline().split() for _ in range(nproc)]
    assert all(r and r[0] == "ready" for r in ready), ready
    return d, go, p, {int(r[1]): int(r[2]) for r in ready}


def finish_phases(go, p):
    open(go, "w").close()
    p.stdout.read()
    assert p.wait(timeout=60) == 0


def test_status_shows_the_rank_behind():
    d, go, p, pids = start_phases("status", 4, 20, 2)
    import time
    t = time.monotonic()
    st = json.loads(run([TOOL, "status", "--json", d]).stdout)
    took = time.monotonic() - t
    assert took < 1.0, took  # visible within a second of the stall
    procs = {q["rank"]: q for q in st["processes"]}
    assert sorted(procs) == [0, 1, 2, 3], procs.keys()
    assert [procs[r]["behind"] for r in range(4)] == [False, False, True, False]
    assert all(q["alive"] is True and q["idle_s"] >= 0 for q in procs.values())
    assert {procs[r]["pid"] for r in range(4)} == set(pids.values())
    comm_ids = {q["comms"][0]["id"] for q in procs.values()}
    assert len(comm_ids) == 1, comm_ids  # one communicator, as the ranks of a job share
    assert [procs[r]["comms"][0]["seq"] for r in range(4)] == [19, 19, 16, 19]
    assert all(q["comms"][0]["op"] == "ncclAllReduce" for q in procs.values())
    table = run([TOOL, "status", d]).stdout
    behind_lines = [line for line in table.splitlines() if "BEHIND" in line]
    assert len(behind_lines) == 1 and behind_lines[0].split()[0] == "2", table
    finish_phases(go, p)
    st = json.loads(run([TOOL, "status", "--json", d]).stdout)
    assert all(q["alive"] is False and q["complete"] for q in st["processes"])
    p2 = run([TOOL, "status", os.path.join(TMP, "nope")], check=False)
    assert p2.returncode == 2 and p2.stderr.count("\n") == 1


def test_dormant_then_attach_and_mark():
    d, go, p, pids = start_phases("dormant", 2, 10, -1, opts=["--dormant"])
    a = run([TOOL, "attach", d, "--on"])
    assert "recording on in 2 of 2 traces" in a.stderr, a.stderr
    a = run([TOOL, "attach", d, "--mark", "step 1"])
    assert "mark step 1 in 2 of 2" in a.stderr, a.stderr
    finish_phases(go, p)
    files = sorted(os.listdir(d))
    assert "control" in files
    traces = [f for f in files if f.endswith(".shptrace")]
    assert len(traces) == 2
    for f in traces:
        ev, _ = dump(os.path.join(d, f))
        assert len(ops(ev, "cudaMalloc")) == 1  # kept while dormant
        assert len(ops(ev, "ncclCommInitRank")) == 1  # kept while dormant
        copies = ops(ev, "cudaMemcpy")
        assert len(copies) == 5, len(copies)  # only after arming
        # seq kept counting while dormant, so ranks armed at different moments still line up
        assert [a["seq"] for a in ops(ev, "ncclAllReduce")] == [10, 11, 12, 13, 14]
        mark = one(ev, "mark")
        assert mark["mark"] == "step 1" and mark["index"] < copies[0]["index"]
        assert mark["t_ns"] <= copies[0]["t_ns"]
    table = run([TOOL, "dump", d]).stdout
    assert "step 1" in table


def test_attach_one_process_by_pid():
    d, go, p, pids = start_phases("bypid", 2, 4, -1, opts=["--dormant"])
    target = pids[1]
    a = run([TOOL, "attach", str(target)])
    assert "recording on in 1 of 1" in a.stderr, a.stderr
    finish_phases(go, p)
    for f in os.listdir(d):
        if not f.endswith(".shptrace"):
            continue
        ev, _ = dump(os.path.join(d, f))
        assert len(ops(ev, "cudaMemcpy")) == (5 if ev[0]["pid"] == target else 0)
    a = run([TOOL, "attach", str(os.getpid())], check=False)
    assert a.returncode == 2 and "not traced" in a.stderr
    a = run([TOOL, "attach", "/nonexistent"], check=False)
    assert a.returncode == 2 and a.stderr.count("\n") == 1


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, fn in tests:
        if ONLY and name not in ONLY:
            continue
        try:
            fn()
            print(f"ok   {name}")
            passed += 1
        except Exception:  # noqa: BLE001 - a test harness reports every failure
            print(f"FAIL {name}")
            traceback.print_exc()
            failed += 1
    shutil.rmtree(TMP, ignore_errors=True)
    print(f"preload: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
