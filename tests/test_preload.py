"""shapetrace tests: the preload and `run`/`dump`, through every loading path, on the test doubles
(simulated ranks; no GPU). Usage: test_preload.py BUILD_DIR [NAME...]. Prints one line per test
and ends with 'N passed, M failed'."""
import glob
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import struct
import tempfile
import time

from format_v2 import as_version_2  # tests/, the script's folder, is on sys.path
from harness import NotRun, other_pythons, run_all

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
    files = [f for f in os.listdir(d) if not f.endswith(".symbols")]
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


def test_outermost_call_only():
    # ncclBcast runs through ncclBroadcast's exported symbol (as in NCCL), and the double's
    # ncclCommInitRank makes a copy through a cudaMemcpy it looks up with dlsym(handle): only the
    # application's own calls are recorded, and the inner ones consume no seq.
    e = base_env()
    e["SHAPETRACE_DEBUG"] = "INFO"
    d = os.path.join(TMP, "nested")
    p = subprocess.run([TOOL, "run", "--dir", d, "--", f"{T}/scenario", "nested"],
                       capture_output=True, text=True, timeout=60, env=e)
    assert p.returncode == 0 and p.stdout == "nested ok\n", (p.returncode, p.stdout, p.stderr)
    # The dlsym hook still answers inside a real function: the double checked the copy it made.
    assert "libcudart.so.13 (via dlsym)" in p.stderr, p.stderr
    ev, _ = dump(d)
    colls = [x for x in ev if x["seq"] is not None and x["op"].startswith("nccl")]
    assert [(x["op"], x["seq"]) for x in colls] == [("ncclBcast", 0), ("ncclAllReduce", 1)], \
        [(x["op"], x["seq"]) for x in colls]
    assert not ops(ev, "ncclBroadcast")
    bc = colls[0]
    assert (bc["count"], bc["root"], bc["src"] == bc["dst"]) == (64, 0, True), bc
    assert bc["stack"][0].startswith("bcast_step ("), bc["stack"]
    # The init's own host copy is NCCL's, not the application's.
    assert not [x for x in ev if x["op"].startswith("cudaMemcpy")], [x["op"] for x in ev]
    assert [x["op"] for x in ev] == ["cudaMalloc", "ncclCommInitRank", "ncclBcast",
                                     "ncclAllReduce", "ncclCommDestroy", "cudaFree"], \
        [x["op"] for x in ev]


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
    files = sorted(glob.glob("*.shptrace", root_dir=d))
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


def tsc_is_the_clocksource():
    try:
        src = open("/sys/devices/system/clocksource/clocksource0/current_clocksource").read()
    except OSError:
        return False
    return src.strip() == "tsc" and "nonstop_tsc" in open("/proc/cpuinfo").read()


def test_clocks():
    """Times are the same nanoseconds whichever clock the trace keeps: the TSC where it is the
    kernel's clocksource, else (or with SHAPETRACE_CLOCK=monotonic) CLOCK_MONOTONIC."""
    e = base_env()
    e["SHAPETRACE_CLOCK"] = "monotonic"
    runs = {"default": traced("clock-default", [f"{T}/scenario", "basic"])[0],
            "monotonic": traced("clock-mono", [f"{T}/scenario", "basic"], env=e)[0]}
    now = time.time_ns()
    for how, d in runs.items():
        path = glob.glob(os.path.join(d, "*.shptrace"))[0]
        clock = struct.unpack_from("<I", open(path, "rb").read(640), 636)[0]
        want = 1 if how == "default" and tsc_is_the_clocksource() else 0
        assert clock == want, (how, clock)
        ev, _ = dump(d)
        ts = [x["t_ns"] for x in ev]
        assert ts == sorted(ts), how  # one thread: entries in order
        assert all(abs(t - now) < 60 * 10**9 for t in ts), (how, ts[0], now)
        durs = [x["dur_ns"] for x in ev if x["dur_ns"] is not None]
        assert durs and all(0 <= x < 10 * 10**9 for x in durs), (how, durs)
        # the calls are nested in the run: each ends before the next begins
        assert all(a["t_ns"] + a["dur_ns"] <= b["t_ns"] + 1000 for a, b in zip(ev, ev[1:])
                   if a["dur_ns"] is not None), how
    if not tsc_is_the_clocksource():
        print("     (the TSC is not the clocksource here: the TSC half NOT RUN)")


def test_torn_record_is_skipped():
    d, _ = traced("torn", [f"{T}/scenario", "kill", "100"], expect_rc=-signal.SIGKILL)
    path = glob.glob(os.path.join(d, "*.shptrace"))[0]
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
        if (word >> 16) & 0xff in (5, 14):  # a copy, full or compact
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
    path = glob.glob(os.path.join(d, "*.shptrace"))[0]
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


def modules_and_stacks(path):
    """A trace's module records, as (path, lo, hi), and its native stacks' frames, read by hand."""
    with open(path, "rb") as f:
        data = f.read()
    tail = min(int.from_bytes(data[72:80], "little"), len(data))
    mods, frames, off = [], [], 4096
    while off + 8 <= tail:
        word = int.from_bytes(data[off:off + 4], "little")
        size = (word & 0xffff) * 8
        if word >> 24 != 0xA7 or size == 0:
            break
        rtype = (word >> 16) & 0xff
        if rtype == 9:  # SHP_REC_MODULE
            lo, hi = struct.unpack_from("<QQ", data, off + 16)
            plen = struct.unpack_from("<H", data, off + 38)[0]
            mods.append((data[off + 72:off + 72 + plen].decode(), lo, hi))
        elif rtype == 23:  # SHP_REC_MODULE_C: offsets from its base; its build id's own length
            blo, bhi, lo_off, length, plen, idlen = struct.unpack_from("<IIIIHB", data, off + 8)
            lo = (bhi << 32 | blo) + lo_off
            at = off + 28 + idlen
            mods.append((data[at:at + plen].decode(), lo, lo + length))
        elif rtype in (8, 20):  # SHP_REC_STACK, SHP_REC_STACK_TAIL: their own frames
            n = struct.unpack_from("<I", data, off + 12)[0]
            frames += struct.unpack_from(f"<{n}Q", data, off + (16 if rtype == 8 else 24))
        off += size
    return mods, frames


def test_module_records_only_for_the_objects_stacks_use():
    """A module record is written for each object that a stored stack has a frame in, and for no
    other (a torch rank's trace held 68 where its stacks used 6 to 8): here NCCL is reached
    only through a module opened with dlopen after the trace exists, and a forked child writes
    the records its own stacks need."""
    d, p = traced("modrec", [f"{T}/local_module", f"{T}/mod_nccl.so", "3"],
                  opts=["--stacks", "native"])
    [f] = glob.glob(os.path.join(d, "*.shptrace"))
    mods, frames = modules_and_stacks(f)
    names = sorted(os.path.basename(m[0]) for m in mods)
    assert names == ["libc.so.6", "local_module", "mod_nccl.so"], names
    uncovered = [hex(a) for a in frames if not any(lo <= a - 1 < hi for _, lo, hi in mods)]
    assert frames and not uncovered, uncovered
    ev, _ = dump(d)
    assert all(site_has(a, "mod_run (") for a in ops(ev, "ncclAllReduce")), ops(ev, "ncclAllReduce")
    d, _ = traced("modrec-fork", [f"{T}/scenario", "fork"], opts=["--stacks", "native"])
    files = glob.glob(os.path.join(d, "*.shptrace"))
    assert len(files) == 2, files
    for f in files:
        mods, frames = modules_and_stacks(f)
        uncovered = [hex(a) for a in frames if not any(lo <= a - 1 < hi for _, lo, hi in mods)]
        assert frames and not uncovered and len(mods) == len({m[0] for m in mods}), (f, mods)
        assert "libcudart.so.13" not in " ".join(m[0] for m in mods), mods


def symbols_run(name):
    """A module of its own, traced from a copy that the test can take away afterwards."""
    moddir = os.path.join(TMP, name + "-mod")
    os.makedirs(moddir)
    mod = os.path.join(moddir, "mod_nccl.so")
    shutil.copy(f"{T}/mod_nccl.so", mod)
    env = base_env()
    env["LD_LIBRARY_PATH"] = T  # the copy's $ORIGIN no longer holds the doubles
    d, p = traced(name, [f"{T}/local_module", mod, "3"], env=env)
    return d, p, mod


def mod_sites(d):
    ev, p = dump(d)
    return [e["stack"][0] for e in ops(ev, "ncclAllReduce")], p


def test_symbols_when_the_module_is_gone():
    d, p, mod = symbols_run("symgone")
    symfile = os.path.join(d, socket.gethostname() + ".symbols")
    assert "native frames symbolized" in p.stderr and os.path.exists(symfile), p.stderr
    assert os.stat(symfile).st_mode & 0o777 == 0o600, oct(os.stat(symfile).st_mode)
    # `symbols` writes the same file again for a run started without `run`
    os.unlink(symfile)
    q = run([TOOL, "symbols", d])
    assert "frames of" in q.stderr and os.path.exists(symfile), q.stderr
    here, _ = mod_sites(d)
    named = [s for s in here if re.match(r"mod_run \(.*mod_nccl\.c:\d+\)$", s)]
    assert len(here) == 3 and named == here, here
    os.unlink(mod)  # the module is not on this machine any more
    gone, p = mod_sites(d)
    assert gone == here and p.stderr == "", (gone, here, p.stderr)
    text = subprocess.run([TOOL, "dump", d], capture_output=True, text=True).stdout
    assert "mod_run (" in text, text
    # export and report read stacks through the same code
    timeline = os.path.join(TMP, "symgone.json")
    run([TOOL, "export", "--format", "chrome", "-o", timeline, d])
    assert "mod_run (" in open(timeline).read()
    # another node's trace in the same directory reads its own host's file
    other = os.path.join(TMP, "symgone-node-b")
    os.makedirs(other)
    trace = glob.glob(os.path.join(d, "*.shptrace"))[0]
    data = bytearray(open(trace, "rb").read())
    host = socket.gethostname().encode()
    assert data[312:312 + len(host) + 1] == host + b"\0"  # shp_file_header.host
    data[312:312 + 64] = b"node-b".ljust(64, b"\0")
    open(os.path.join(other, "node-b-1.shptrace"), "wb").write(data)
    shutil.copy(symfile, other)  # this host's file: not node-b's
    assert all(s.startswith("0x") for s in mod_sites(other)[0])
    q = run([TOOL, "symbols", other], check=False)
    assert q.returncode == 2 and "no traces of this host" in q.stderr, q.stderr
    shutil.copy(symfile, os.path.join(other, "node-b.symbols"))
    assert mod_sites(other)[0] == here
    # without the symbol file: offsets in the module, as before
    os.rename(symfile, symfile + ".away")
    bare, p = mod_sites(d)
    assert all(re.match(r"0x[0-9a-f]+ \(mod_nccl\.so\)$", s) for s in bare), bare
    assert p.stderr == "", p.stderr


def test_symbols_for_another_build():
    """The module is here, but another build of it (another build id): the recorded names."""
    d, _, mod = symbols_run("symbuild")
    here, _ = mod_sites(d)
    with open(mod, "r+b") as f:  # flip a byte of the build id note
        data = f.read()
        at = data.find(b"GNU\0") + 4
        assert at > 4
        f.seek(at)
        f.write(bytes([data[at] ^ 0xFF]))
    other, _ = mod_sites(d)
    assert other == here and here[0].startswith("mod_run ("), (other, here)
    os.rename(os.path.join(d, socket.gethostname() + ".symbols"), os.path.join(d, "away"))
    bare, _ = mod_sites(d)
    assert all(re.match(r"0x[0-9a-f]+ \(mod_nccl\.so\)$", s) for s in bare), bare
    run([TOOL, "symbols", d])  # this build is not the traced one: nothing resolved for it
    still, _ = mod_sites(d)
    assert still == bare, still


def test_symbols_bad_files_fall_back():
    d, _, mod = symbols_run("symbad")
    symfile = os.path.join(d, socket.gethostname() + ".symbols")
    good = open(symfile, "rb").read()
    os.unlink(mod)
    lines = good.split(b"\n")
    frame = next(i for i, l in enumerate(lines) if b"mod_run" in l)
    bad = {
        "empty": b"",
        "truncated": good[:len(good) - 3],
        "cut at a line": b"\n".join(lines[:frame + 1]) + b"\n",
        "other version": good.replace(b"symbols 1", b"symbols 9", 1),
        "bad offset": good.replace(lines[frame], b"zz r " + lines[frame].split(b" ", 2)[2]),
        "long build id": good.replace(b"\nm ", b"\nm " + b"ab" * 40, 1),
        "no text": good.replace(lines[frame], lines[frame].split(b" ", 2)[0] + b" r "),
        "nul": good.replace(b"mod_run", b"mod\0run"),
        "garbage": bytes(range(256)) * 50,
        "frame first": b"shapetrace symbols 1\n10 r f (x.c:1)\nend 1\n",
        "after end": good + b"m ab x\n",
    }
    for what, content in bad.items():
        with open(symfile, "wb") as f:
            f.write(content)
        sites, p = mod_sites(d)
        assert all(re.match(r"0x[0-9a-f]+ \(mod_nccl\.so\)$", s) for s in sites), (what, sites)
        warn = p.stderr.strip().splitlines()
        assert len(warn) == 1 and ".symbols" in warn[0] and "offsets" in warn[0], \
            (what, p.stderr)
    os.unlink(symfile)
    os.mkdir(symfile)  # not a regular file
    sites, p = mod_sites(d)
    assert len(p.stderr.strip().splitlines()) == 1 and sites[0].startswith("0x"), p.stderr
    q = run([TOOL, "symbols", os.path.join(TMP, "no-such-run")], check=False)
    assert q.returncode == 2 and len(q.stderr.splitlines()) == 1, q.stderr


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


# ---- Python call sites (--stacks python) ----

CTYPES_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load", "ctypes_nccl.py")
PY_FRAME = re.compile(r"^py: (?P<fn>\S+) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def line_of(path, exact=None, contains=None):
    """The 1-based line of `path` whose stripped text is `exact` (or contains `contains`)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = [i + 1 for i, t in enumerate(lines)
             if (exact is not None and t.strip() == exact) or
             (contains is not None and contains in t)]
    assert len(found) == 1, (path, exact, contains, found)
    return found[0]


def py_frames(e):
    """The event's Python frames as (function, file, line) and their indexes in its stack."""
    out, where = [], []
    for i, f in enumerate(e["stack"] or []):
        m = PY_FRAME.match(f)
        if f.startswith("py: "):
            assert m, f
            out.append((m["fn"], m["file"], int(m["line"]) if m["line"] else None))
            where.append(i)
    return out, where


def count_records(path):
    """Records of each type in a trace file (read by hand, independently of the tools)."""
    with open(path, "rb") as f:
        data = f.read()
    tail = min(int.from_bytes(data[72:80], "little"), len(data))
    counts, off = {}, 4096
    while off + 8 <= tail:
        word = int.from_bytes(data[off:off + 4], "little")
        size = (word & 0xffff) * 8
        if word >> 24 != 0xA7 or size == 0:
            break
        counts[(word >> 16) & 0xff] = counts.get((word >> 16) & 0xff, 0) + 1
        off += size
    return counts


SHP_REC_PYCODE, SHP_REC_PYSTACK = 12, 13
CRAFT = os.path.join(T, "shp_craft")


def same_as_version_2(d, name):
    """Every trace of run directory d dumps and analyzes alike when rewritten as version 2."""
    d2 = os.path.join(TMP, name)
    shutil.rmtree(d2, ignore_errors=True)
    os.makedirs(d2)
    counts = {19: 0, 20: 0, 21: 0, 22: 0, 23: 0}
    for f in os.listdir(d):
        if f.endswith(".symbols"):
            shutil.copy(os.path.join(d, f), d2)
        elif f.endswith(".shptrace"):
            n, _, _ = as_version_2(os.path.join(d, f), os.path.join(d2, f), CRAFT)
            for k, v in n.items():
                counts[k] += v
    strip = lambda text: re.sub(r'"file": ?"[^"]*"', "", text)
    for cmd in (["dump", "--json"], ["analyze", "--json"]):
        a, b = run([TOOL, *cmd, d], check=False), run([TOOL, *cmd, d2], check=False)
        assert a.returncode == b.returncode and a.stdout, (cmd, a.returncode, b.returncode)
        assert strip(a.stdout).replace(d, "") == strip(b.stdout).replace(d2, ""), cmd
    return counts


def test_stacks_share_their_outer_frames():
    """Four threads copy from the bottom of recursions of 1 to 24 calls, a new depth each time,
    the depth in the copy's size: the stacks are stored at once by several threads, each but the
    first with its own frames and a stored stack's (SHP_REC_STACK_TAIL), and every copy's stack
    reads back with as many recursion frames as its depth."""
    d, p = traced("depths", [f"{T}/scenario", "depths", "4", "48"], opts=["--stacks", "native"])
    assert "depths ok" in p.stdout
    ev, _ = dump(d)
    copies = ops(ev, "cudaMemcpy")
    assert len(copies) == 4 * 48, len(copies)
    wrong = [(c["bytes"], c["stack"]) for c in copies
             if sum(f.startswith("recurse") for f in c["stack"]) != c["bytes"] // 16]
    assert not wrong, wrong[:2]
    counts = same_as_version_2(d, "depths-as-2")
    assert counts[20] >= 23, counts  # 24 depths: all but the first stack share frames


def test_versions_4_and_6_read_as_version_2():
    """What versions 4 and 6 store in fewer bytes (stacks that share their outer frames, compact
    2-D copies; compact ends of communicators, allocations, frees and modules) reads exactly as
    the whole records of version 2 that they replace: dump --json and analyze --json say the
    same of both, for native stacks and Python ones."""
    d, _ = traced("v4-native", [f"{T}/scenario", "basic"], opts=["--stacks", "native"])
    counts = same_as_version_2(d, "v4-native-as-2")
    assert counts[19] == 1 and counts[20] >= 5, counts
    # 2 communicators' ends; cudaMalloc, cudaMallocHost and their frees; its 2 modules at least
    assert counts[21] == 2 and counts[22] == 4 and counts[23] >= 2, counts
    d, p = traced("v4-python", [shutil.which("python3"), CTYPES_PY, f"{T}/libnccl.so.2",
                                f"{T}/libcudart.so.13"], opts=["--stacks", "python"])
    counts = same_as_version_2(d, "v4-python-as-2")
    assert counts[20] >= 1, counts  # its threads' native stacks, below the Python ones


def check_python_call_sites(py, name):
    """Run ctypes_nccl.py under interpreter `py` with --stacks python; check every call's Python
    frames (function, file, line; innermost first) and where they sit among the native ones."""
    d, p = traced(name, [py, CTYPES_PY, f"{T}/libnccl.so.2", f"{T}/libcudart.so.13"],
                  opts=["--stacks", "python"])
    assert "ctypes ok" in p.stdout
    assert "WARN" not in p.stderr, p.stderr
    ev, _ = dump(d)
    src = CTYPES_PY

    def at(fn, **kw):
        return (fn, src, line_of(src, **kw))

    module = at("<module>", exact="main()")
    sites = {
        "ncclAllReduce": [at("reduce_layer", contains="nccl.ncclAllReduce("),
                          at("forward", contains="reduce_layer(self.comm"),
                          at("steps", contains="yield from map("),
                          at("worker", contains="for _ in steps(")],
        "cudaMemcpy": [at("copy_rows", contains="cudart.cudaMemcpy(dev"),
                       at("forward", contains="copy_rows(self.dev"),
                       at("steps", contains="yield from map("),
                       at("worker", contains="for _ in steps(")],
        "cudaMalloc": [at("main", contains="cudart.cudaMalloc("), module],
        "ncclCommInitRank": [at("make_comm", contains="nccl.ncclCommInitRank("),
                             at("main", exact="comm = make_comm()"), module],
    }
    for op, want in sites.items():
        calls = ops(ev, op)
        assert calls, op
        for e in calls:
            got, where = py_frames(e)
            assert got[:len(want)] == want, (op, got, e["stack"])
            # the Python frames follow the native frames of the call (ctypes, libffi) and are
            # in one piece: no interpreter frame between them
            assert where[0] > 0 and where == list(range(where[0], where[0] + len(where))), \
                e["stack"]
            assert not any("_PyEval_EvalFrameDefault" in f for f in e["stack"]), e["stack"]
            if op in ("ncclAllReduce", "cudaMemcpy"):  # from a thread started by threading
                thr = got[len(want):]
                assert [f[0] for f in thr] == ["run", "_bootstrap_inner", "_bootstrap"], thr
                assert all(f[1].endswith("threading.py") for f in thr), thr
                assert thr[0][2] == line_of(thr[0][1], contains="self._target(*self._args"), thr
            else:
                assert len(got) == len(want), (op, got)
    workers = {e["tid"] for e in ops(ev, "ncclAllReduce")}
    main_tid = one(ev, "cudaMalloc")["tid"]
    assert len(workers) == 2 and main_tid not in workers, (workers, main_tid)
    # Python called back from C (libc's qsort): the callback's frames, native frames, then the
    # frames that called qsort
    cb = one(ev, "cudaMemcpyAsync")
    got, where = py_frames(cb)
    assert got == [at("on_compare", contains="cudart.cudaMemcpyAsync("),
                   at("sort_rows", contains="libc.qsort("),
                   at("main", exact="sort_rows(dev, host)"), module], (got, cb["stack"])
    assert where[1] > where[0] + 1, cb["stack"]  # native frames between the two groups
    assert where[2:] == [where[1] + 1, where[1] + 2], cb["stack"]
    # the table's site column is the innermost Python frame
    table = run([TOOL, "dump", d]).stdout
    rows = [line for line in table.splitlines() if " ncclAllReduce " in line]
    assert len(rows) == 20, table
    want = "py: reduce_layer (%s:%d)" % (src, sites["ncclAllReduce"][0][2])
    assert all(r.endswith(want) for r in rows), rows[:2]
    # deduplicated: each Python stack and each code object is stored once
    f = [os.path.join(d, x) for x in os.listdir(d) if x.endswith(".shptrace")]
    assert len(f) == 1, f
    counts = count_records(f[0])
    assert counts.get(SHP_REC_PYCODE) == 13, counts  # the 13 functions on those stacks
    assert 5 <= counts.get(SHP_REC_PYSTACK, 0) <= 16, counts  # for 43 calls
    return ev


def test_python_call_sites():
    check_python_call_sites(shutil.which("python3"), "pysites")


def test_python_call_sites_other_versions():
    pys = other_pythons()
    if not pys:
        raise NotRun("no CPython 3.10-3.13 besides the default one under pyenv")
    for py in pys:
        check_python_call_sites(py, "pysites-" + os.path.basename(py))
    print(f"     (checked {', '.join(os.path.basename(p) for p in pys) or 'no other version'})")


def test_stacks_mode_default_env_and_bad_value():
    args = [shutil.which("python3"), CTYPES_PY, f"{T}/libnccl.so.2", f"{T}/libcudart.so.13"]
    for name, env_mode, want_py in (("pydefault", None, True), ("pyenv", "python", True),
                                    ("nativeenv", "native", False)):
        env = base_env()
        env.pop("SHAPETRACE_STACKS", None)
        if env_mode:
            env["SHAPETRACE_STACKS"] = env_mode
        d, _ = traced(name, args, env=env)
        ev, _ = dump(d)
        got = py_frames(one(ev, "cudaMalloc"))[0]
        if want_py:
            assert got[0] == ("main", CTYPES_PY, line_of(CTYPES_PY, contains="cudaMalloc(")), got
        else:
            assert not got, (name, got)
    p = run([TOOL, "run", "--stacks", "pyton", "--", "true"], check=False)
    assert p.returncode == 2 and "none, native or python" in p.stderr, p.stderr
    assert "python" in run([TOOL, "run", "--help"]).stdout


FORK_PY = """import ctypes, os, sys
cudart = ctypes.CDLL(sys.argv[1])


def alloc():
    dev = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(64)) == 0


def parent_side():
    alloc()


def child_side():
    alloc()


parent_side()
pid = os.fork()
if pid == 0:
    child_side()
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
"""


def test_python_call_sites_after_fork():
    """A forked child's trace holds its own code records: its Python frames read in full."""
    script = os.path.join(TMP, "fork_py.py")
    with open(script, "w") as f:
        f.write(FORK_PY)
    d, _ = traced("pyfork", [shutil.which("python3"), script, f"{T}/libcudart.so.13"])
    traces = sorted(os.path.join(d, x) for x in os.listdir(d) if x.endswith(".shptrace"))
    assert len(traces) == 2, traces
    alloc = line_of(script, contains="cudart.cudaMalloc(")
    seen = set()
    for t in traces:
        ev, _ = dump(t)
        got = py_frames(one(ev, "cudaMalloc"))[0]
        side = got[1][0] if len(got) == 3 else None
        assert side in ("parent_side", "child_side"), got
        assert got == [("alloc", script, alloc),
                       (side, script, line_of(script, exact=f"def {side}():") + 1),
                       ("<module>", script, line_of(script, exact=f"{side}()"))], got
        seen.add(side)
    assert seen == {"parent_side", "child_side"}, seen


FORK_SAME_PY = """import ctypes, os, sys
cudart = ctypes.CDLL(sys.argv[1])


def alloc():
    dev = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(64)) == 0


def site():
    alloc()


pid = -1
for i in range(3):
    if i == 1:
        pid = os.fork()
    site()
if pid == 0:
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
"""


def test_python_call_sites_after_fork_same_place():
    """The parent calls from one Python stack before and after fork(), and so does the child:
    the child's trace names the call site with records of its own (what was learnt of that stack
    before the fork, the memo of prints included, stays the parent's), on every CPython here."""
    script = os.path.join(TMP, "fork_same_py.py")
    with open(script, "w") as f:
        f.write(FORK_SAME_PY)
    want = [("alloc", script, line_of(script, contains="cudart.cudaMalloc(")),
            ("site", script, line_of(script, exact="alloc()")),
            ("<module>", script, line_of(script, exact="site()"))]
    for py in [shutil.which("python3")] + other_pythons():
        d, _ = traced("pyforksame-" + os.path.basename(os.path.realpath(py)),
                      [py, script, f"{T}/libcudart.so.13"])
        traces = sorted(os.path.join(d, x) for x in os.listdir(d) if x.endswith(".shptrace"))
        assert len(traces) == 2, traces
        counts = []
        for t in traces:
            ev, _ = dump(t)
            allocs = ops(ev, "cudaMalloc")
            counts.append(len(allocs))
            for e in allocs:
                assert py_frames(e)[0] == want, (py, t, e["stack"])
        assert sorted(counts) == [2, 3], (py, counts)


def lines_script(path):
    """Write a script whose cudaMalloc calls (size = site number) sit in many shapes of code and
    at line distances that need long entries in every line-table format; return {size: line}."""
    out, sites = [], {}

    def add(text):
        out.extend(text.split("\n"))

    def site(indent, template):
        k = len(sites) + 1
        sites[k] = len(out) + 1
        out.append(" " * indent + template.format(f"alloc({k})"))

    add("import ctypes, sys\ncudart = ctypes.CDLL(sys.argv[1])\n\n\ndef alloc(n):\n"
        "    dev = ctypes.c_void_p()\n"
        "    return cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(n))\n\n")
    for gap in (0, 1, 31, 64, 127, 128, 300, 2100):
        add(f"def far_{gap}():")
        add("\n".join(["    x = 1"] * gap) if gap else "    pass")
        site(4, "{}")
        add("    for i in range(1):\n        y = i")
        site(8, "{}")
        add("    z = [{} for _ in range(1)]".format("0"))
        site(4, "w = [{} for _ in range(1)]")
        add("    try:\n        raise ValueError\n    except ValueError:")
        site(8, "{}")
        add("    finally:")
        site(8, "{}")
        add("    f = lambda: {}".format("0"))
        site(4, "g = (lambda: {})()")
        site(4, "h = sum({} for _ in range(1))")
        add("\n")
    add("class K:\n    def m(self):")
    site(8, "return {}")
    add("\n")
    add("def calls():\n" + "\n".join(f"    far_{g}()" for g in (0, 1, 31, 64, 127, 128, 300, 2100)))
    add("    K().m()\n\n\ncalls()\nprint('lines ok')")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return sites


def check_python_lines(py, name):
    script = os.path.join(TMP, name + ".py")
    sites = lines_script(script)
    d, p = traced(name, [py, script, f"{T}/libcudart.so.13"])
    assert "lines ok" in p.stdout, p.stdout + p.stderr
    ev, _ = dump(d)
    got = {e["size"]: py_frames(e)[0] for e in ops(ev, "cudaMalloc")}
    assert sorted(got) == sorted(sites), (sorted(got), sorted(sites))
    for k, line in sites.items():
        frames = got[k]
        assert frames[0][:2] == ("alloc", script), frames
        caller = next(f for f in frames[1:] if f[0] not in ("<lambda>", "<genexpr>", "<listcomp>"))
        inner = frames[1]
        assert inner[1] == script and inner[2] == line, (k, line, frames)
        assert caller[0].startswith("far_") or caller[0] == "m", frames


def test_python_lines_across_constructs():
    """Lines computed from the stored line tables match the source, for every version here."""
    pys = [shutil.which("python3")] + other_pythons()
    for py in pys:
        check_python_lines(py, "pylines-" + os.path.basename(os.path.realpath(py)))
    print(f"     (checked {len(pys)} interpreters)")


PATHS_PY = """import ctypes, sys, threading
cudart = ctypes.CDLL(sys.argv[1])
paths = ctypes.CDLL(sys.argv[2])
paths.copy_via.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
dev = ctypes.c_void_p()
assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(64)) == 0
host = ctypes.create_string_buffer(64)


def run(order):
    for k in order:
        assert paths.copy_via(k, dev, host, 64) == 0  # the one line


run([0] * 300 + [1] * 300 + [i % 2 for i in range(300)] + [i % 4 for i in range(200)] +
    [i % 5 for i in range(100)])
t = threading.Thread(target=run, args=([1] * 100 + [0] * 100,))
t.start()
t.join()
for k in (0, 1, 0, 1):  # one after the other: each may get the last one's stack and thread id
    t = threading.Thread(target=run, args=([k] * 50,))
    t.start()
    t.join()
both = [threading.Thread(target=run, args=(o,)) for o in ([0, 1] * 60, [1, 1, 0] * 40)]
for t in both:  # at once: ctypes lets the GIL go for the call
    t.start()
for t in both:
    t.join()
"""


def cache_misses(order, ways=4):
    """Full unwinds of one thread's calls from one place by the call-site cache's rule: a place
    keeps up to `ways` paths, and a path it does not hold replaces the oldest one kept."""
    kept, misses = [], 0
    for k in order:
        if k not in kept:
            misses += 1
            kept = (kept + [k])[-ways:]
    return misses


def test_call_site_cache_never_hides_a_second_native_path():
    """A call made from where an earlier one was made (return address, stack depth, thread)
    reuses that call's stack once its return addresses are found where they were
    (preload/stacks.c). One Python line reaches cudaMemcpy through one of the five paths of
    tests/load/lib/paths.c, alike in all three: 300 calls through path_a, 300 through path_b,
    then alternating, then four paths in turn, then all five (one more than a place keeps), then
    threads one after the other (the same stack and pthread id again), then two threads at once;
    each thread's copies, in order, must name the paths it took, with native and with Python
    stacks. The log line at exit counts the stacks unwound in full: one at each path a place did
    not hold (the cache's rule, counted here), not one at each of the 1,840 copies; the next
    line, the mean time of the 1,841 calls that took a stack."""
    script = os.path.join(TMP, "paths.py")
    os.makedirs(TMP, exist_ok=True)
    open(script, "w").write(PATHS_PY)
    want = sorted([[0] * 300 + [1] * 300 + [i % 2 for i in range(300)] +
                   [i % 4 for i in range(200)] + [i % 5 for i in range(100)],
                   [1] * 100 + [0] * 100, [0] * 50, [1] * 50, [0] * 50, [1] * 50, [0, 1] * 60,
                   [1, 1, 0] * 40])
    misses = sum(cache_misses(o) for o in want)
    # Threads one after another may find the places the last one kept (the same stack and
    # pthread id): they unwind less, the main thread never.
    least = cache_misses(max(want, key=len))
    line = line_of(script, contains="# the one line")
    names = ["path_a", "path_b", "path_c", "path_d", "path_e"]
    for stacks in ("native", "python"):
        d, p = traced("paths-" + stacks, [shutil.which("python3"), script,
                                          f"{T}/libcudart.so.13", f"{T}/libpaths.so"],
                      opts=["--stacks", stacks, "--debug", "INFO"])
        m = re.search(r"native stacks unwound in full: (\d+) \(([^)]*)\)", p.stderr)
        assert m and m.group(2) == "the call-site cache served the others", p.stderr[-2000:]
        # The copies' misses, and the one cudaMalloc.
        assert least + 1 <= int(m.group(1)) <= misses + 1, (m.group(0), least, misses)
        # With --debug INFO every call that took a stack is timed, and the mean said at exit.
        m2 = re.search(r"call sites took (\d+) ns a call: native (\d+), Python (\d+) "
                       r"\((\d+) calls, timed\)", p.stderr)
        assert m2 and int(m2.group(4)) == 1841, p.stderr[-2000:]
        ev, _ = dump(d)
        by_tid = {}
        for e in sorted(ops(ev, "cudaMemcpy"), key=lambda e: e["t_ns"]):
            frames, _ = py_frames(e)
            if stacks == "python":
                assert frames and frames[0][0] == "run" and frames[0][2] == line, e["stack"]
            else:
                assert not frames, e["stack"]
            took = [k for k, name in enumerate(names) if site_has(e, name)]
            assert len(took) == 1, e["stack"]
            by_tid.setdefault(e["tid"], []).append(took[0])
        got = sorted(by_tid.values())
        assert got == want, (stacks, [len(g) for g in got], [sum(g) for g in got])
    print(f"     ({m.group(1)} of 1,841 native stacks unwound in full; {least + 1} to "
          f"{misses + 1} by the cache's rule)")


REUSE_PY = """import ctypes, gc, sys, threading
cudart = ctypes.CDLL(sys.argv[1])
alike = sys.argv[2:] == ["alike"]


def alloc(n):
    dev = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(n)) == 0


def work(t):
    for i in range(150):
        k = t * 1000 + i
        ns = {"alloc": alloc}
        if alike:  # the same name, file, first line and bytecode: only the lines differ
            src = "def gen():\\n" + "\\n" * (i % 7) + f"    alloc({k})\\n"
            exec(compile(src, "<gen>", "exec"), ns)
            ns["gen"]()
        else:
            src = f"def gen_{k}():\\n" + "    pass\\n" * (i % 7) + f"    alloc({k})\\n"
            exec(compile(src, f"<gen {k}>", "exec"), ns)
            ns[f"gen_{k}"]()
        del ns
        gc.collect(0)


threads = [threading.Thread(target=work, args=(t + 1,)) for t in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_python_code_generated_at_run_time():
    """Functions exec'd and freed in a loop (as torch.fx does) reuse the addresses of the last
    ones' code objects, names and line tables: each call still names its own function and line."""
    script = os.path.join(TMP, "reuse_py.py")
    with open(script, "w") as f:
        f.write(REUSE_PY)
    for py in [shutil.which("python3")] + other_pythons():
        d, _ = traced("pyreuse-" + os.path.basename(os.path.realpath(py)),
                      [py, script, f"{T}/libcudart.so.13"])
        ev, _ = dump(d)
        allocs = ops(ev, "cudaMalloc")
        assert len(allocs) == 600, len(allocs)
        for e in allocs:
            k = e["size"]
            got = py_frames(e)[0][1]
            assert got == (f"gen_{k}", f"<gen {k}>", 2 + (k % 1000) % 7), (py, k, got)


def test_python_code_generated_at_run_time_alike():
    """Generated functions that differ in nothing but their lines (one name, one file, the first
    line and the bytecode the same), exec'd and freed in a loop by four threads, so that each new
    one gets the addresses of the last: each call still gets its own line. From CPython 3.12 the
    code object's own number tells them apart; 3.10 and 3.11 have none, and there the line
    tables' first bytes do (docs/limits.md says what they cannot). Before either, 422 of 600 calls
    on 3.12 named another function's line."""
    script = os.path.join(TMP, "reuse_py.py")
    with open(script, "w") as f:
        f.write(REUSE_PY)
    for py in [shutil.which("python3")] + other_pythons():
        d, _ = traced("pyalike-" + os.path.basename(os.path.realpath(py)),
                      [py, script, f"{T}/libcudart.so.13", "alike"])
        ev, _ = dump(d)
        allocs = ops(ev, "cudaMalloc")
        assert len(allocs) == 600, len(allocs)
        wrong = [(e["size"], py_frames(e)[0][1]) for e in allocs
                 if py_frames(e)[0][1] != ("gen", "<gen>", 2 + (e["size"] % 1000) % 7)]
        assert not wrong, (py, len(wrong), wrong[:5])


LAYOUT_C = r"""#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "common/pylayout.h"
static int bad;
static void eq(const char *what, long table, long header)
{
    if (table != header) {
        printf("%s: table %ld, header %ld\n", what, table, header);
        bad++;
    }
}
#define EQ(field, header) eq(#field, (long)L->field, (long)(header))
int main(void)
{
    const struct shp_py_layout *L = shp_py_layout_table(PY_MINOR_VERSION);
#if PY_MINOR_VERSION >= 13
    /* 3.13's layout comes from the debug offsets at the start of its _PyRuntime. */
    extern char _PyRuntime[];
    static struct shp_py_layout l13;
    if (!shp_py_layout_from_debug((const void *)_PyRuntime, PY_VERSION_HEX, &l13)) {
        printf("no layout from the debug offsets\n");
        return 1;
    }
    L = &l13;
    /* The preload walks a 3.13 laid out as 3.13.0 is with shp_py_layout_313's constants. */
    if (PY_VERSION_HEX == 0x030d00f0 && memcmp(L, shp_py_layout_313(), sizeof(*L)) != 0) {
        printf("3.13.0's debug offsets are not shp_py_layout_313()\n");
        bad++;
    }
#endif
    EQ(co_filename, offsetof(PyCodeObject, co_filename));
    EQ(co_name, offsetof(PyCodeObject, co_name));
    EQ(co_linetable, offsetof(PyCodeObject, co_linetable));
    EQ(co_firstlineno, offsetof(PyCodeObject, co_firstlineno));
    EQ(ts_interp, offsetof(PyThreadState, interp));
    EQ(ts_next, offsetof(PyThreadState, next));
    EQ(ts_thread_id, offsetof(PyThreadState, thread_id));
    EQ(str_ascii, sizeof(PyASCIIObject));
    EQ(str_compact, sizeof(PyCompactUnicodeObject));
#if PY_MINOR_VERSION >= 11
    EQ(co_qualname, offsetof(PyCodeObject, co_qualname));
    EQ(co_firsttraceable, offsetof(PyCodeObject, _co_firsttraceable));
    EQ(co_code, offsetof(PyCodeObject, co_code_adaptive));
    EQ(ts_native_tid, offsetof(PyThreadState, native_thread_id));
#endif
#if PY_MINOR_VERSION >= 13
    EQ(ts_frame, offsetof(PyThreadState, current_frame));
#elif PY_MINOR_VERSION >= 11
    EQ(ts_frame, offsetof(PyThreadState, cframe));
#else
    EQ(ts_frame, offsetof(PyThreadState, frame));
#endif
#if PY_MINOR_VERSION >= 12
    EQ(co_version, offsetof(PyCodeObject, co_version));
#else
    EQ(co_version, -1);
#endif
    printf("%d checked, %d differ\n", PY_MINOR_VERSION, bad);
    return bad != 0;
}
"""


def test_python_layouts_are_the_headers():
    """The code object's and thread state's offsets that the preload's walk reads on every call
    are the installed headers' offsetof, for each CPython here: 3.10 to 3.12 from the table of
    common/pylayout.h, 3.13 from its runtime's debug offsets (and the two guessed beside them).
    Compiled against each interpreter's own Python.h, and 3.13's linked with its libpython."""
    src = os.path.join(TMP, "layout.c")
    with open(src, "w") as f:
        f.write(LAYOUT_C)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    seen = []
    for py in [shutil.which("python3")] + other_pythons():
        inc = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if not os.path.exists(os.path.join(inc, "Python.h")):
            continue
        exe = os.path.join(TMP, "layout-" + os.path.basename(os.path.realpath(py)))
        link = []
        if subprocess.run([py, "-c", "import sys; print(sys.version_info[1] >= 13)"],
                          capture_output=True, text=True).stdout.strip() == "True":
            libdir = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_config_var("
                                     "'LIBDIR'), sysconfig.get_config_var('LDVERSION'))"],
                                    capture_output=True, text=True).stdout.split()
            if not glob.glob(os.path.join(libdir[0], f"libpython{libdir[1]}.so*")):
                print(f"     ({py}: no shared libpython: not checked)")
                continue
            link = [os.path.join(root, "common", "pylayout.c"), f"-L{libdir[0]}",
                    f"-Wl,-rpath,{libdir[0]}", f"-lpython{libdir[1]}"]
        subprocess.run(["gcc", "-I", inc, "-I", root, src, "-o", exe] + link, check=True)
        p = subprocess.run([exe], capture_output=True, text=True)
        assert p.returncode == 0, (py, p.stdout)
        seen.append(p.stdout.split()[0])
    if not seen:
        raise NotRun("no CPython headers here")
    print(f"     (3.{', 3.'.join(seen)})")


def test_native_stacks_have_no_python_frames():
    d, _ = traced("pynative", [shutil.which("python3"), CTYPES_PY, f"{T}/libnccl.so.2",
                               f"{T}/libcudart.so.13"], opts=["--stacks", "native"])
    ev, _ = dump(d)
    calls = ops(ev, "ncclAllReduce") + ops(ev, "cudaMemcpy")
    assert len(calls) == 40
    for e in calls:
        assert e["stack"] and not any(f.startswith("py: ") for f in e["stack"]), e["stack"]
    f = [os.path.join(d, x) for x in os.listdir(d) if x.endswith(".shptrace")][0]
    counts = count_records(f)
    assert SHP_REC_PYCODE not in counts and SHP_REC_PYSTACK not in counts, counts


def test_python_stacks_without_python():
    """A process without Python (the C scenario) is unaffected by --stacks python."""
    stacks = []
    for mode in ("native", "python"):
        d, p = traced("nopy-" + mode, [f"{T}/scenario", "basic"], opts=["--stacks", mode])
        assert p.stdout == "basic ok 1\n" and "WARN" not in p.stderr, (p.stdout, p.stderr)
        ev, _ = dump(d)
        ag = one(ev, "ncclAllGather")
        assert ag["stack"][0].startswith("gather_rows"), ag["stack"]
        stacks.append([(e["op"], e["stack"]) for e in ev])
    assert stacks[0] == stacks[1]


def test_python_unsupported_version_warns_once():
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    old = sorted(glob.glob(os.path.join(root, "versions", "3.9.*", "bin", "python3.9")))
    if not old:
        print("     (no Python 3.9 here: not checked)")
        return
    d, p = traced("py39", [old[0], CTYPES_PY, f"{T}/libnccl.so.2", f"{T}/libcudart.so.13"],
                  opts=["--stacks", "python"])
    assert "ctypes ok" in p.stdout
    warns = [line for line in p.stderr.splitlines() if "WARN" in line]
    assert len(warns) == 1 and "Python 3.9" in warns[0], p.stderr
    ev, _ = dump(d)
    calls = ops(ev, "ncclAllReduce")
    assert len(calls) == 20
    assert all(e["stack"] and not any(f.startswith("py: ") for f in e["stack"]) for e in calls)


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
            listed.add(line.split(",")[3].strip())
    assert len(listed) == 98, len(listed)
    extra = {"dlsym", "cuGetProcAddress", "cuGetProcAddress_v2"}
    assert names == listed | extra, names ^ (listed | extra)
    deps = run(["readelf", "-d", os.path.join(BUILD, "lib", "libshapetrace.so")]).stdout
    assert "libnccl" not in deps and "libcudart" not in deps and "libcuda" not in deps


# ---- the driver level: a static runtime, a shared one over the driver, direct driver calls ----

STATIC_OPS = ["cuMemAlloc_v2", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoD_v2",
              "cuMemcpyDtoH_v2", "cuMemcpy", "cuMemcpy2D_v2", "cuMemAllocHost_v2",
              "cuMemcpyDtoHAsync_v2", "cuStreamBeginCapture_v2", "cuMemcpyDtoDAsync_v2",
              "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphLaunch",
              "cuGraphLaunch", "cuMemFreeHost", "cuMemFree_v2", "cuMemFree_v2"]


def driver_env():
    """The environment for programs that dlopen libcuda.so.1 themselves: under ASan the dlopen
    comes from the sanitizer's interceptor, which does not search the program's RUNPATH."""
    e = base_env()
    e["LD_LIBRARY_PATH"] = T
    return e


def test_static_runtime_seen_at_the_driver():
    # The runtime is linked into the program: its calls reach only the driver, through the
    # cuGetProcAddress_v2 it found with dlsym. One record per copy, with the driver's names;
    # cuInit, cuCtxGetDevice, cuStreamCreate and cuStreamSynchronize came back unwrapped.
    e = driver_env()
    e["SHAPETRACE_DEBUG"] = "INFO"
    d = os.path.join(TMP, "static")
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/static_rt", "copies"], env=e)
    assert p.stdout == "static ok\n", p.stdout
    assert "cuGetProcAddress cuMemcpyHtoD (" in p.stderr and "cuInit" not in p.stderr, p.stderr
    ev, _ = dump(d)
    assert [x["op"] for x in ev] == STATIC_OPS, [x["op"] for x in ev]
    copies = [x for x in ev if x["op"].startswith("cuMemcpy")]
    assert [x["kind"] for x in copies] == ["H2D", "D2D", "D2H", "D2H", "D2H", "D2H", "D2D"], \
        [x["kind"] for x in copies]
    assert [x["bytes"] for x in copies] == [4096, 4096, 4096, 64, 128, 4096, 1024]
    assert all(x["result"] == 0 and x["device"] == 0 for x in copies), copies
    two_d = one(ev, "cuMemcpy2D_v2")
    assert (two_d["width"], two_d["height"], two_d["spitch"], two_d["dpitch"]) == (32, 4, 64, 100)
    captured = one(ev, "cuMemcpyDtoDAsync_v2")
    begin = one(ev, "cuStreamBeginCapture_v2")
    assert captured["captured"] and captured["stream"] == begin["stream"], (captured, begin)
    alloc = ev[0]
    assert alloc["ptr"] == copies[0]["dst"] and alloc["size"] == 4096, alloc


def test_static_runtime_per_thread_streams():
    # Asked with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, the entry points are the
    # per-thread forms, and the records say so.
    e = driver_env()
    e["SHP_STATIC_PER_THREAD"] = "1"
    d, _ = traced("static-pt", [f"{T}/static_rt", "copies"], env=e)
    names = [x["op"] for x in dump(d)[0]]
    assert names[2:5] == ["cuMemcpyHtoD_v2_ptds", "cuMemcpyDtoD_v2_ptds",
                          "cuMemcpyDtoH_v2_ptds"], names
    assert "cuMemAlloc_v2" in names and "cuGraphLaunch_ptsz" in names, names


def via_driver(name, scenario, looked_up):
    """The scenario traced with the doubles reaching the driver double underneath; checks that
    `looked_up` went through shapetrace's cuGetProcAddress and that no driver call was recorded.
    Returns the events."""
    e = driver_env()
    e["SHAPETRACE_DEBUG"] = "INFO"
    e["SHP_DOUBLE_VIA_DRIVER"] = "1"
    d = os.path.join(TMP, name)
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/scenario", scenario], env=e)
    assert f"cuGetProcAddress {looked_up} (" in p.stderr, p.stderr
    ev, _ = dump(d)
    names = [x["op"] for x in ev]
    assert not [n for n in names if n.startswith("cu") and not n.startswith("cuda")], names
    return ev


def test_shared_runtime_over_the_driver():
    # The cudart double moves every copy's bytes with the driver's cuMemcpy, looked up the way the
    # real runtime does: the runtime call is the outermost, the driver call inside it is not
    # recorded.
    ev = via_driver("shared-driver", "default-kind", "cuMemcpy")
    names = [x["op"] for x in ev]
    plain = dump(traced("shared-plain", [f"{T}/scenario", "default-kind"])[0])[0]
    assert names == [x["op"] for x in plain], (names, [x["op"] for x in plain])
    assert len(ops(ev, "cudaMemcpy")) >= 3, names


def test_nccl_driver_calls_are_nccls():
    # The NCCL double allocates and copies through the driver inside ncclCommInitRank and from a
    # proxy thread of its own: none of it is the application's.
    names = [x["op"] for x in via_driver("nccl-driver", "basic", "cuMemAlloc")]
    assert "ncclCommInitRank" in names, names


def test_direct_driver_calls():
    # cuda-python, CuPy and JAX: dlsym(handle, "cuMemcpyHtoD_v2") on libcuda, or cuGetProcAddress
    # found that way (v1 asked for v2, per-thread forms, an old version and an unknown name passed
    # through as the driver answered them).
    want = {"dlsym": ["cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemFree_v2"],
            "proc": ["cuMemAlloc_v2", "cuMemcpyHtoD_v2_ptds", "cuMemcpyDtoH_v2", "cuMemFree_v2"]}
    for how, names in want.items():
        d, p = traced(f"direct-{how}", [f"{T}/driver_direct", how], env=driver_env())
        assert p.stdout == f"{how} ok\n", p.stdout
        ev, _ = dump(d)
        assert [x["op"] for x in ev] == names, (how, [x["op"] for x in ev])
        h2d = ev[1]
        assert (h2d["kind"], h2d["bytes"], h2d["dst"]) == ("H2D", 256, ev[0]["ptr"]), h2d
        assert ev[1]["stack"][0].startswith("round_trip ("), ev[1]["stack"]


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
    # --watch S DIR, piped: one block per refresh, no screen clearing, and it stops by itself
    # once every process exited
    w = subprocess.Popen([TOOL, "status", "--watch", "0.2", d], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=base_env())
    time.sleep(0.7)
    finish_phases(go, p)
    out, err = w.communicate(timeout=10)
    assert w.returncode == 0 and "\033[" not in out, (w.returncode, err, out[:300])
    blocks = out.count("shapetrace status ")
    assert blocks >= 3 and out.count("\n\n") == blocks - 1, out
    assert "BEHIND" in out.split("\n\n")[0] and " exit " in out.split("\n\n")[-1], out
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
    return run_all(globals(), "preload", ONLY, TMP)


if __name__ == "__main__":
    sys.exit(main())
