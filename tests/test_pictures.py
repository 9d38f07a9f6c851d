"""shapetrace tests: the pictures (`export` as Chrome JSON and Perfetto protobuf, `report --html`
in headless chromium), on traces of the examples run on the test doubles (simulated ranks, no
GPU). The front door (--version, help, the man page) is test_cli.py's.
Usage: test_pictures.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import collections
from html import unescape as html_unescape
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

from harness import NotRun, run_all, tool_env

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
T = os.path.join(BUILD, "tests")
EX = os.path.join(BUILD, "examples")
TMP = tempfile.mkdtemp(prefix="shapetrace-pictures-")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, ok=(0, 1), extra_env=None, **kw):
    env = tool_env()
    env.pop("SHAPETRACE_SITE_SKIP", None)
    env.update(extra_env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, **kw)
    if ok is not None and p.returncode not in ok:
        raise AssertionError(f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr}")
    return p


_runs = {}


def traced(name, *args, launch=()):
    """A run directory of an example on 4 simulated ranks (made once)."""
    if name not in _runs:
        d = os.path.join(TMP, name)
        run([TOOL, "run", "--dir", d, "--", f"{T}/shp_launch", "-n", "4", *launch, "--",
             f"{EX}/{args[0]}", *args[1:]], ok=None)
        _runs[name] = d
    return _runs[name]


def hidden():
    return traced("hidden", "hidden_states", "--buggy")


def analysis(d, *args):
    return json.loads(run([TOOL, "analyze", "--json", *args, d]).stdout)


def dump(d):
    return [json.loads(x) for x in run([TOOL, "dump", "--json", d]).stdout.splitlines()]


# ---- a small decoder of the protobuf wire format (test equipment) ----

def pb_fields(b):
    """[(field, wire type, value)]: ints for varints and fixed64, bytes for LEN."""
    out, i = [], 0
    while i < len(b):
        key, i = pb_varint(b, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = pb_varint(b, i)
        elif wt == 1:
            v = struct.unpack_from("<Q", b, i)[0]
            i += 8
        elif wt == 2:
            n, i = pb_varint(b, i)
            v = bytes(b[i:i + n])
            assert len(v) == n, "cut short"
            i += n
        elif wt == 5:
            v = struct.unpack_from("<I", b, i)[0]
            i += 4
        else:
            raise AssertionError(f"wire type {wt}")
        out.append((field, wt, v))
    return out


def pb_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def pb_get(fields, num):
    return [v for f, _, v in fields if f == num]


def perfetto_decode(path):
    """Tracks and slices of a Perfetto trace as our writer makes it: {uuid: track}, [slice].
    Interned strings are a packet sequence's own (each process is drawn on a sequence of its
    own), as the viewer reads them: an iid means what its sequence defined."""
    data = open(path, "rb").read()
    interned = collections.defaultdict(lambda: ({}, {}, {}, {}))
    cleared = set()
    tracks, slices, open_ = {}, [], collections.defaultdict(list)
    for f, wt, pkt in pb_fields(data):
        assert f == 1 and wt == 2, (f, wt)
        p = pb_fields(pkt)
        seq = pb_get(p, 10)
        assert seq, "a packet without its sequence"
        names, keys, strings, cats = interned[seq[0]]
        flags = pb_get(p, 13)
        if flags and flags[0] & 1:
            assert seq[0] not in cleared, ("a sequence cleared twice", seq[0])
            cleared.add(seq[0])
        for idata in pb_get(p, 12):
            idf = pb_fields(idata)
            for num, table in ((1, cats), (2, names), (3, keys), (29, strings)):
                for item in pb_get(idf, num):
                    it = pb_fields(item)
                    table[pb_get(it, 1)[0]] = pb_get(it, 2)[0].decode()
        for td in pb_get(p, 60):
            t = pb_fields(td)
            uuid = pb_get(t, 1)[0]
            assert uuid and uuid not in tracks, ("track uuid given twice", uuid)
            proc, thr = pb_get(t, 3), pb_get(t, 4)
            if proc:
                pd = pb_fields(proc[0])
                tracks[uuid] = {"kind": "process", "pid": pb_get(pd, 1)[0],
                                "name": pb_get(pd, 6)[0].decode()}
            else:
                th = pb_fields(thr[0])
                tracks[uuid] = {"kind": "thread", "pid": pb_get(th, 1)[0],
                                "tid": pb_get(th, 2)[0], "name": pb_get(th, 5)[0].decode(),
                                "parent": pb_get(t, 5)[0]}
        for te in pb_get(p, 11):
            assert seq[0] in cleared, "interned data used before the sequence was cleared"
            e = pb_fields(te)
            ts = pb_get(p, 8)[0]
            typ, track = pb_get(e, 9)[0], pb_get(e, 11)[0]
            assert track in tracks, track
            if typ == 2:
                s = open_[track].pop()
                s["dur"] = ts - s["ts"]
                continue
            args = {}
            for a in pb_get(e, 4):
                af = pb_fields(a)
                k = keys[pb_get(af, 1)[0]]
                for num in (2, 3, 4):
                    if pb_get(af, num):
                        args[k] = pb_get(af, num)[0]
                if pb_get(af, 17):
                    args[k] = strings[pb_get(af, 17)[0]]
            cat = [cats[i] for i in pb_get(e, 3)] + [c.decode() for c in pb_get(e, 22)]
            assert len(cat) == 1, cat
            s = {"ts": ts, "track": track, "name": names[pb_get(e, 10)[0]], "cat": cat[0],
                 "args": args, "flows": pb_get(e, 47), "type": typ}
            if typ == 1:
                open_[track].append(s)
            slices.append(s)
    assert not any(open_.values()), "a slice was never ended"
    return tracks, slices


# ---- export ----

def chrome(d, *args):
    out = os.path.join(TMP, f"x{len(os.listdir(TMP))}.json")
    run([TOOL, "export", "-o", out, *args, d], ok=(0,))
    return json.load(open(out))["traceEvents"], out


def enclosing(slices_by_thread, pid, tid, ts):
    hit = [s for s in slices_by_thread[(pid, tid)] if s["ts"] <= ts <= s["ts"] + s["dur"]]
    assert len(hit) == 1, (pid, tid, ts, hit)
    return hit[0]


def check_chrome_flows(ev):
    """The two ends of each flow, as (start slice, end slice) pairs, per category."""
    by_thread = collections.defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append(e)
    ends = collections.defaultdict(dict)
    for e in ev:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in ends[e["id"]], ("two", e["ph"], "for flow", e["id"])
            ends[e["id"]][e["ph"]] = (e["cat"], enclosing(by_thread, e["pid"], e["tid"], e["ts"]))
    pairs = collections.defaultdict(list)
    for fid, se in ends.items():
        assert set(se) == {"s", "f"}, (fid, se)
        assert se["s"][0] == se["f"][0]
        pairs[se["s"][0]].append((se["s"][1], se["f"][1]))
    return pairs


def check_collective_pairs(pairs, processes, events):
    """Each pair joins the same (comm, seq) on two ranks, and the pairs of one collective chain
    every rank that made it."""
    chains = collections.defaultdict(set)
    for a, b in pairs:
        assert a["args"]["comm"] == b["args"]["comm"] and a["args"]["seq"] == b["args"]["seq"]
        assert processes[a["pid"]] != processes[b["pid"]]
        assert a["args"]["comm_rank"] < b["args"]["comm_rank"]
        key = (a["args"]["comm"], a["args"]["seq"])
        chains[key] |= {processes[a["pid"]], processes[b["pid"]]}
    made = collections.defaultdict(set)
    for e in events:
        if e["comm"] and e["seq"] is not None and e["op"].startswith("nccl") and \
                e["op"] not in ("ncclSend", "ncclRecv") and "Comm" not in e["op"]:
            made[(e["comm"], e["seq"])].add(e["rank"])
    assert made and {k: v for k, v in made.items() if len(v) > 1} == chains, (made, chains)


def test_export_chrome_structure_and_flows():
    d = hidden()
    r = analysis(d, "--dim", "hidden=7168")
    ev, _ = chrome(d, "--dim", "hidden=7168")
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and
             e["name"] == "process_name"}
    assert len(names) == 4, names
    for q in r["processes"]:
        want = f"rank {q['rank']} ({q['host']}:{q['pid']})"
        assert any(n.startswith(want) for n in names.values()), (want, names)
    processes = {pid: int(re.match(r"rank (\d+)", n).group(1)) for pid, n in names.items()}
    threads = [e for e in ev if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(threads) == 4 and all("thread" in t["args"]["name"] for t in threads)
    events = dump(d)
    slices = [e for e in ev if e["ph"] == "X"]
    assert len(slices) == len(events), (len(slices), len(events))
    by_key = {(processes[s["pid"]], s["args"]["index"]): s for s in slices}
    for e in events:
        s = by_key[(e["rank"], e["index"])]
        assert s["name"] == e["op"] and s["args"]["op"] == e["op"]
        for k in ("seq", "count", "dtype", "bytes", "kind"):
            assert s["args"].get(k) == e[k], (k, s, e)
        if e["stack"]:
            assert s["args"]["site"] == e["site"] == e["stack"][0], (s, e["stack"])
    pairs = check_chrome_flows(ev)
    check_collective_pairs(pairs["collective"], processes, events)
    # lineage: the first finding's producers, farthest first, then its consumer
    f = r["findings"][0]
    chain = [x["index"] for x in reversed(f["lineage"])] + [f["events"][0]["index"]]
    got = {(a["args"]["index"], b["args"]["index"]) for a, b in pairs["lineage"]}
    assert set(zip(chain, chain[1:])) <= got, (chain, got)
    assert all(processes[a["pid"]] == processes[b["pid"]] == 0 for a, b in pairs["lineage"])
    # findings: one instant per finding rank, with its summary
    inst = [e for e in ev if e["ph"] == "i" and e["cat"] == "finding"]
    assert [i["args"]["summary"] for i in inst] == [x["summary"] for x in r["findings"]]
    assert all(i["name"] == "shape_mismatch" and processes[i["pid"]] == 0 for i in inst)


def test_export_perfetto_structure_and_flows():
    d = hidden()
    out = os.path.join(TMP, "hidden.perfetto-trace")
    run([TOOL, "export", "--format", "perfetto", "--dim", "hidden=7168", "-o", out, d], ok=(0,))
    tracks, slices = perfetto_decode(out)
    procs = {u: t for u, t in tracks.items() if t["kind"] == "process"}
    assert sorted(re.match(r"rank (\d+) \(", t["name"]).group(1) for t in procs.values()) == \
        ["0", "1", "2", "3"], procs
    rank_of = {u: int(re.match(r"rank (\d+)", t["name"]).group(1)) for u, t in procs.items()}
    for u, t in tracks.items():
        if t["kind"] == "thread":
            assert t["parent"] in procs and procs[t["parent"]]["pid"] == t["pid"]
            rank_of[u] = rank_of[t["parent"]]
    events = dump(d)
    calls = [s for s in slices if s["type"] == 1]
    assert len(calls) == len(events)
    by_key = {(rank_of[s["track"]], s["args"]["index"]): s for s in calls}
    for e in events:
        s = by_key[(e["rank"], e["index"])]
        assert s["name"] == e["op"] and s["args"].get("bytes") == e["bytes"], (s, e)
        assert s["args"].get("dtype") == e["dtype"] and s["args"].get("seq") == e["seq"]
    flows = collections.defaultdict(list)
    for s in calls:
        for fid in s["flows"]:
            flows[fid].append(s)
    assert flows and all(len(v) == 2 for v in flows.values()), \
        [len(v) for v in flows.values()]
    # the writer keeps the top bit of an id for lineage arrows
    coll = [v for fid, v in flows.items() if not fid >> 63]
    for a, b in coll:
        assert (a["args"]["comm"], a["args"]["seq"]) == (b["args"]["comm"], b["args"]["seq"])
        assert rank_of[a["track"]] != rank_of[b["track"]]
    lineage = [v for fid, v in flows.items() if fid >> 63]
    r = analysis(d, "--dim", "hidden=7168")
    f = r["findings"][0]
    chain = [x["index"] for x in reversed(f["lineage"])] + [f["events"][0]["index"]]
    got = {tuple(sorted(s["args"]["index"] for s in v)) for v in lineage}
    assert {tuple(sorted(p)) for p in zip(chain, chain[1:])} <= got, (chain, got)
    inst = [s for s in slices if s["type"] == 3 and s["cat"] == "finding"]
    assert [i["args"]["summary"] for i in inst] == [x["summary"] for x in r["findings"]]
    assert all(tracks[i["track"]]["kind"] == "process" for i in inst)
    # the same timeline as the JSON one: same number of flows, smaller file
    ev, jpath = chrome(d, "--dim", "hidden=7168")
    assert sum(1 for e in ev if e["ph"] == "s") == len(flows)
    assert os.path.getsize(out) < os.path.getsize(jpath)


def test_export_in_flight_calls_reach_the_end():
    # the stall example: three ranks wait in an all-reduce the fourth never enters, and the
    # launcher kills them while they wait
    d = traced("stall", "stall", launch=("--timeout", "2"))
    ev, _ = chrome(d)
    slices = [e for e in ev if e["ph"] == "X"]
    end = max(s["ts"] + s["dur"] for s in slices)
    hung = [s for s in slices if s["args"].get("in_flight")]
    assert len(hung) == 3 and all(s["name"] == "ncclAllReduce" for s in hung), hung
    assert all(abs(s["ts"] + s["dur"] - end) < 0.01 for s in hung), (end, hung)
    names = [e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
    assert sum("INCOMPLETE" in n for n in names) == 3, names
    inst = [e for e in ev if e["ph"] == "i" and e["cat"] == "finding"]
    assert inst and inst[0]["name"] == "missing_collective", inst


def test_export_ranks_and_window():
    d = traced("desync", "desync")
    all_ev, _ = chrome(d, "--no-findings")
    ev, _ = chrome(d, "--ranks", "1-2")
    names = sorted(e["args"]["name"].split(" (")[0] for e in ev
                   if e["ph"] == "M" and e["name"] == "process_name")
    assert names == ["rank 1", "rank 2"], names
    pairs = check_chrome_flows(ev)
    assert pairs["collective"] and all(a["pid"] != b["pid"] for a, b in pairs["collective"])
    # rank 2 diverges: its finding is there; rank 0 and 3 are not
    inst = [e for e in ev if e["ph"] == "i" and e["cat"] == "finding"]
    assert inst and inst[0]["name"] == "count_mismatch"
    slices = sorted(e["ts"] for e in all_ev if e["ph"] == "X")
    mid = slices[len(slices) // 2] / 1e6
    win, _ = chrome(d, "--no-findings", "--from", "0", "--to", f"{mid:.6f}")
    n = sum(1 for e in win if e["ph"] == "X")
    assert 0 < n < len(slices), (n, len(slices))
    assert all(e["ts"] <= mid * 1e6 + 1 for e in win if e["ph"] == "X")
    check_chrome_flows(win)  # no flow left dangling by the window


def test_export_is_the_same_every_time():
    """export runs the analysis on a thread of its own while it scans the traces, and a thread of
    its own writes the file: the bytes are the same on every run (and under ThreadSanitizer, in
    make check's thread run, no report)."""
    for d in (hidden(), stacks("pp_graph", "planted"), stacks("graph_buckets", "planted")):
        for fmt in ("chrome", "perfetto"):
            outs = set()
            for i in range(6 if os.environ.get("SHAPETRACE_TSAN") != "1" else 2):
                out = os.path.join(TMP, f"same{i}.{fmt}")
                run([TOOL, "export", "--format", fmt, "--dim", "hidden=7168", "-o", out, d],
                    ok=(0,))
                outs.add(open(out, "rb").read())
            assert len(outs) == 1, (d, fmt, len(outs))


def test_export_is_the_same_on_any_number_of_threads():
    """export draws each process on whichever thread takes it and writes the processes in rank
    order: the file is the same, byte for byte, on 1 to 5 threads (and, in make check's thread
    run, without a ThreadSanitizer report). The drawing uses at most 4 threads (--stats says
    how many)."""
    for d in (hidden(), stacks("pp_graph", "planted")):
        for fmt in ("chrome", "perfetto"):
            outs = {}
            for n in (1, 2, 5) if os.environ.get("SHAPETRACE_TSAN") != "1" else (1, 3):
                out = os.path.join(TMP, f"threads{n}.{fmt}")
                p = run([TOOL, "export", "--format", fmt, "--threads", str(n), "--dim",
                         "hidden=7168", "-o", out, d], ok=(0,))
                outs[n] = open(out, "rb").read()
                assert "slices" in p.stderr, p.stderr
            assert len(set(outs.values())) == 1, (d, fmt, {n: len(v) for n, v in outs.items()})
    p = run([TOOL, "export", "--threads", "0", hidden()], ok=(2,))
    assert p.stderr.strip() == "shapetrace: --threads takes a number of threads from 1 to 1024, " \
        "not '0'", p.stderr
    # the drawing takes at most 4 of the threads (past them its one writer is the limit), and
    # no more than there are processes; the analysis takes them all
    six = os.path.join(TMP, "threads-six")
    if not os.path.isdir(six):
        run([os.path.join(BUILD, "tests", "gen_traces"), six, "6", "2000"], ok=(0,))
    for n, drawing in ((1, "1 thread"), (3, "3 threads"), (8, "4 threads")):
        p = run([TOOL, "export", "--stats", "--threads", str(n), "-o",
                 os.path.join(TMP, "threads-six.json"), six], ok=(0,))
        assert f"drawing on {drawing}: wall" in p.stderr, (n, p.stderr)
        assert f"shapetrace: {n} thread" in p.stderr, (n, p.stderr)
    two = os.path.join(TMP, "threads-two")
    if not os.path.isdir(two):
        run([os.path.join(BUILD, "tests", "gen_traces"), two, "2", "2000"], ok=(0,))
    p = run([TOOL, "export", "--stats", "--threads", "3", "-o",
             os.path.join(TMP, "threads-two.json"), two], ok=(0,))
    assert "drawing on 2 threads: wall" in p.stderr, p.stderr


def test_export_symbolizes_each_module_once():
    """200 traces of one program: its executable and its symbol file are opened once for the
    whole command, not once a trace."""
    strace = shutil.which("strace")
    if not strace:
        raise NotRun("strace is not installed")
    small = os.path.join(TMP, "one-small")
    run([TOOL, "run", "--dir", small, "--", f"{T}/hostile", "calls", "1"], ok=None)
    one = [f for f in os.listdir(small) if f.endswith(".shptrace")]
    assert len(one) == 1, one
    many = os.path.join(TMP, "many-small")
    run([sys.executable, os.path.join(SRC, "bench", "copies.py"), os.path.join(small, one[0]),
         many, "200"], ok=(0,))
    for f in os.listdir(small):
        if f.endswith(".symbols"):
            shutil.copy(os.path.join(small, f), many)
    log = os.path.join(TMP, "opens.txt")
    for fmt in ("chrome", "perfetto"):
        run([strace, "-f", "-e", "trace=openat", "-o", log, TOOL, "export", "--format", fmt,
             "-o", os.path.join(TMP, "many.out"), many], ok=(0,))
        opened = [x for x in open(log) if '"' in x and "ENOENT" not in x]
        module = [x for x in opened if x.split('"')[1].endswith("/tests/hostile")]
        symbols = [x for x in opened if x.split('"')[1].endswith(".symbols")]
        traces = [x for x in opened if x.split('"')[1].endswith(".shptrace")]
        assert len(traces) == 200 and len(module) == 1 and len(symbols) <= 1, \
            (len(traces), module, symbols)


def test_export_writes_a_local_file_past_the_page_cache():
    """A file on a local disk is written with direct I/O in whole blocks, its last partial block
    through the page cache; what comes out is byte for byte what the page cache path writes (a
    pipe, tmpfs), over several of the writer's 4 MiB chunks. The standard output, whose open
    file another process may share, is never switched to direct I/O."""
    strace = shutil.which("strace")
    if not strace:
        raise NotRun("strace is not installed")
    d = os.path.join(TMP, "direct-in")
    run([os.path.join(BUILD, "tests", "gen_traces"), d, "2", "40000"], ok=(0,))
    local = run(["stat", "-f", "-c", "%T", TMP], ok=(0,)).stdout.strip() in \
        ("ext2/ext3", "xfs", "btrfs")
    log = os.path.join(TMP, "direct.strace")
    for fmt in ("chrome", "perfetto"):
        piped = subprocess.run([TOOL, "export", "--format", fmt, "-o", "-", d],
                               capture_output=True, env=tool_env(), timeout=120)
        assert piped.returncode == 0 and len(piped.stdout) > 3 * (4 << 20) // 2, \
            (fmt, len(piped.stdout))
        targets = [os.path.join(TMP, f"direct.{fmt}")]
        if os.path.isdir("/dev/shm"):
            targets.append(os.path.join("/dev/shm", f"shapetrace-direct-{os.getpid()}.{fmt}"))
        for out in targets:
            run([strace, "-f", "-e", "trace=openat,fcntl", "-o", log, TOOL, "export", "--format",
                 fmt, "-o", out, d], ok=(0,))
            data = open(out, "rb").read()
            if out.startswith("/dev/shm"):
                os.unlink(out)
            assert data == piped.stdout, (fmt, out, len(data), len(piped.stdout))
            calls = open(log).read()
            direct = [x for x in calls.splitlines() if "F_SETFL" in x and "O_DIRECT" in x]
            if out.startswith(TMP) and local:
                # on, then off again before the last partial block
                setfl = [x for x in calls.splitlines() if "F_SETFL" in x]
                assert direct and "O_DIRECT" not in setfl[-1], setfl
            else:
                assert not direct, (out, direct)
        # the standard output as a file of this filesystem
        with open(os.path.join(TMP, f"stdout.{fmt}"), "wb") as f:
            p = subprocess.run([strace, "-f", "-e", "trace=fcntl", "-o", log, TOOL, "export",
                                "--format", fmt, "-o", "-", d], stdout=f, env=tool_env(),
                               stderr=subprocess.PIPE, timeout=120)
        assert p.returncode == 0 and "O_DIRECT" not in open(log).read()
        assert open(os.path.join(TMP, f"stdout.{fmt}"), "rb").read() == piped.stdout
    if not local:
        raise NotRun(f"{TMP} is on no local disk filesystem: direct I/O was not to be used")


def test_export_out_of_memory_is_one_line():
    """Under address-space limits from too small to enough, export and report end with exit
    status 0, or 2 after one line saying so: never a signal (the backends and the walk return
    -ENOMEM up to the command; a thread that cannot be made is done without). The traces are
    the generator's, whose modules are not on this machine: libdw, which aborts when it runs out
    of memory, is not asked."""
    import resource
    if os.environ.get("SHAPETRACE_SANITIZED") == "1":
        raise NotRun("a sanitizer reserves its own address space: no address-space limit fits")
    gen = os.path.join(BUILD, "tests", "gen_traces")
    d = os.path.join(TMP, "oom-in")
    run([gen, d, "8", "20000", "--diverge", "count:3:500"], ok=(0,))
    seen = set()
    for mb in (16, 24, 32, 48, 64, 96, 128):
        def limit(mb=mb):
            resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
        for cmd in (["export", "--format", "chrome", "-o"], ["export", "--format", "perfetto",
                                                             "-o"], ["report", "--html"]):
            out = os.path.join(TMP, "oom.out")
            p = subprocess.run([TOOL, *cmd, out, d], capture_output=True, text=True,
                               timeout=120, env=tool_env(), preexec_fn=limit)
            assert p.returncode in (0, 2), (mb, cmd, p.returncode, p.stderr[-500:])
            lines = p.stderr.strip().splitlines()
            if p.returncode == 2:
                assert "out of memory" in lines[-1] or "Cannot allocate memory" in lines[-1], \
                    (mb, cmd, lines)
            seen.add(p.returncode)
    assert seen == {0, 2}, seen  # the limits reach both ends
    # At 48 MiB a frame's text may be the allocation that fails, while the analysis compares
    # call sites: such a stack is unknown, never a frame without text (that crashed 5 to 7
    # runs in 60 before; again, a dozen times).
    out = os.path.join(TMP, "oom.out")
    for _ in range(12):
        p = subprocess.run([TOOL, "export", "--format", "chrome", "-o", out, d],
                           capture_output=True, text=True, timeout=120, env=tool_env(),
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS,
                                                                 (48 << 20, 48 << 20)))
        assert p.returncode in (0, 2), (p.returncode, p.stderr[-500:])


def test_export_bad_usage():
    d = hidden()
    for args, text in ((["--format", "svg"], "chrome or perfetto"),
                       (["--ranks", "x"], "--ranks"), (["--from", "soon"], "--from"),
                       (["--ranks", "99"], "no trace of the ranks given")):
        p = run([TOOL, "export", "-o", os.path.join(TMP, "bad"), *args, d], ok=(2,))
        assert text in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run([TOOL, "export", "-o", os.path.join(TMP, "bad"), "/nonexistent"], ok=(2,))
    assert "/nonexistent" in p.stderr


def parts_left(where):
    return [n for n in os.listdir(where) if n.endswith(".part")]


def writing_in(pid, where):
    """Whether process pid has a new file open in directory where: one without a name yet
    (O_TMPFILE: /proc shows it as 'where/#INODE (deleted)'), or a hidden .part one."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if os.path.dirname(target) == where and (
                target.endswith(" (deleted)") or target.endswith(".part")):
            return True
    return False


def test_outputs_are_replaced_whole_or_not_at_all():
    """-o FILE of export (both formats) and report --html is written beside FILE and renamed
    over it once every byte is out (tools/lib/outfile.c). A write that fails half-way (a file
    size limit, with SIGXFSZ ignored, stands for a full disk) ends in one line and exit status 2
    and leaves the old FILE as it was, its mode too, and nothing beside it; a run that succeeds
    replaces FILE and keeps its mode; through a link, the link stays and its target is replaced;
    /dev/null, a file of two names and (as root) another owner's file are written in place, as
    fopen does, and stay what they are; SIGTERM during the writing leaves the
    old FILE and no new one behind, and the command dies of SIGTERM."""
    import resource
    import signal
    gen = os.path.join(BUILD, "tests", "gen_traces")
    d = os.path.join(TMP, "whole-in")
    run([gen, d, "2", "40000"], ok=(0,))
    where = os.path.join(TMP, "whole")
    os.makedirs(where, exist_ok=True)

    def small(kib=64):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib << 10, kib << 10))

    for cmd in (["export", "--format", "chrome", "-o"], ["export", "--format", "perfetto", "-o"],
                ["report", "--html"]):
        out = os.path.join(where, "out")
        with open(out, "w") as f:
            f.write("old\n")
        os.chmod(out, 0o640)
        p = subprocess.run([TOOL, *cmd, out, d], capture_output=True, text=True, timeout=120,
                           env=tool_env(), preexec_fn=small)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and "File too large" in lines[-1], (cmd, p.returncode, lines)
        assert open(out).read() == "old\n", cmd
        assert os.stat(out).st_mode & 0o777 == 0o640 and not parts_left(where), cmd
        run([TOOL, *cmd, out, d], ok=(0,))
        assert os.path.getsize(out) > 64 << 10, cmd
        assert os.stat(out).st_mode & 0o777 == 0o640 and not parts_left(where), cmd
        # through a link
        target, link = os.path.join(where, "target"), os.path.join(where, "link")
        for f in (target, link):
            if os.path.lexists(f):
                os.unlink(f)
        with open(target, "w") as f:
            f.write("old\n")
        os.symlink("target", link)
        run([TOOL, *cmd, link, d], ok=(0,))
        assert os.path.islink(link) and os.path.getsize(target) > 64 << 10, cmd
        assert not parts_left(where), cmd
        run([TOOL, *cmd, "/dev/null", d], ok=(0,))
        assert not os.path.isfile("/dev/null"), cmd
        # a file of two names is written in place, as fopen does: both names see the new bytes
        second = os.path.join(where, "second")
        if os.path.lexists(second):
            os.unlink(second)
        with open(target, "w") as f:
            f.write("old\n")
        os.link(target, second)
        run([TOOL, *cmd, second, d], ok=(0,))
        assert os.path.samefile(target, second) and open(target, "rb").read(3) != b"old", cmd
        os.unlink(second)
        # so is another owner's file (root may write it): its owner stays
        if os.geteuid() == 0:
            os.chown(target, 65534, 65534)
            run([TOOL, *cmd, link, d], ok=(0,))
            assert os.stat(target).st_uid == 65534, cmd
    # SIGTERM while the timeline is written
    out = os.path.join(where, "out")
    assert killed_while_writing(signal.SIGTERM, out) == -signal.SIGTERM
    assert open(out).read() == "old\n" and not parts_left(where)


def killed_while_writing(sig, out):
    """Sends sig to an export of traces big enough that the writing takes a while, once its new
    file is open in out's directory (out holding 'old'); the export's exit status."""
    import time
    big = os.path.join(TMP, "whole-big")
    if not os.path.isdir(big):
        run([os.path.join(BUILD, "tests", "gen_traces"), big, "2", "400000"], ok=(0,))
    where = os.path.dirname(out)
    for attempt in range(5):
        with open(out, "w") as f:
            f.write("old\n")
        proc = subprocess.Popen([TOOL, "export", "-o", out, big], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=tool_env())
        seen = False
        while proc.poll() is None and not seen:
            seen = writing_in(proc.pid, where)
            if not seen:
                time.sleep(0.002)
        if seen:
            proc.send_signal(sig)
        proc.wait(timeout=120)
        proc.stderr.close()
        if seen and proc.returncode != 0:
            return proc.returncode
    raise AssertionError("the export ended before the signal, 5 times")


def test_output_of_a_killed_command_leaves_nothing_behind():
    """SIGKILL, which no handler sees, while export writes: the old FILE stays as it was and no
    new file is left beside it, because the new one has no name until it is complete
    (O_TMPFILE). On a filesystem that makes no such file the command falls back to a hidden
    name, which SIGKILL leaves behind: not run there."""
    import signal
    where = os.path.join(TMP, "killed")
    os.makedirs(where, exist_ok=True)
    try:
        os.close(os.open(where, os.O_TMPFILE | os.O_WRONLY))
    except OSError as e:
        raise NotRun(f"{TMP}'s filesystem makes no file without a name (O_TMPFILE): {e}")
    out = os.path.join(where, "out")
    assert killed_while_writing(signal.SIGKILL, out) == -signal.SIGKILL
    assert open(out).read() == "old\n" and os.listdir(where) == ["out"], os.listdir(where)
    # and the command that is let finish puts a whole file in its place
    run([TOOL, "export", "-o", out, os.path.join(TMP, "whole-big")], ok=(0,))
    with open(out, "rb") as f:
        head, _ = f.read(17), f.seek(-3, os.SEEK_END)
        assert (head, f.read()) == (b'{"displayTimeUnit', b"]}\n"), head
    assert os.listdir(where) == ["out"], os.listdir(where)

# ---- flows through graph replays, and from each send to its receive ----

def stacks(pattern, variant, extra_env=None):
    """A tests/load/stacks.c pattern on 4 simulated ranks (made once)."""
    name = f"stacks-{pattern}-{variant}"
    if name not in _runs:
        d = os.path.join(TMP, name)
        run([TOOL, "run", "--dir", d, "--", f"{T}/shp_launch", "-n", "4", "--", f"{T}/stacks",
             pattern, variant], ok=None, extra_env=extra_env)
        _runs[name] = d
    return _runs[name]


def flow_pairs(ev):
    """{category: [(start slice, end slice)]} of a Chrome export, each flow checked whole."""
    return check_chrome_flows(ev)


def rank_of_pid(ev):
    return {e["pid"]: int(re.match(r"rank (\d+)", e["args"]["name"]).group(1)) for e in ev
            if e["ph"] == "M" and e["name"] == "process_name"}


def launches(ev, ranks):
    """{rank: [launch slices in time order]} of a Chrome export."""
    out = collections.defaultdict(list)
    for e in sorted((e for e in ev if e["ph"] == "X" and e["name"] == "cudaGraphLaunch"),
                    key=lambda e: e["ts"]):
        out[ranks[e["pid"]]].append(e)
    return out


def perfetto_flows(path):
    """{flow id: [slices]} of a Perfetto export, with each slice's rank."""
    tracks, slices = perfetto_decode(path)
    rank = {u: int(re.match(r"rank (\d+)", t["name"]).group(1)) for u, t in tracks.items()
            if t["kind"] == "process"}
    for u, t in tracks.items():
        if t["kind"] == "thread":
            rank[u] = rank[t["parent"]]
    flows = collections.defaultdict(list)
    for sl in slices:
        sl["rank"] = rank[sl["track"]]
        for fid in sl["flows"]:
            flows[fid].append(sl)
    assert all(len(v) == 2 for v in flows.values()), [len(v) for v in flows.values()]
    return flows


def test_flows_at_each_graph_replay():
    # vLLM's decode graphs, one per batch-size bucket, each capturing one all-reduce, replayed
    # one a step for 6 steps: the arrows join the ranks' launches of each step, and the
    # captured calls at their capture as before
    for variant in ("clean", "planted"):
        d = stacks("graph_buckets", variant)
        ev, _ = chrome(d, "--no-findings")
        ranks = rank_of_pid(ev)
        pairs = flow_pairs(ev)["collective"]
        at_launch = [(a, b) for a, b in pairs if a["name"] == "cudaGraphLaunch"]
        at_capture = [(a, b) for a, b in pairs if a["name"] == "ncclAllReduce"]
        assert len(at_launch) == 6 * 3 and len(at_capture) == 4 * 3, (len(at_launch),
                                                                       len(at_capture))
        assert all(b["name"] == "cudaGraphLaunch" for a, b in at_launch)
        assert all(a["args"]["captured"] and b["args"]["captured"] for a, b in at_capture)
        steps = launches(ev, ranks)
        assert sorted(steps) == [0, 1, 2, 3] and all(len(v) == 6 for v in steps.values())
        for a, b in at_launch:
            ra, rb = ranks[a["pid"]], ranks[b["pid"]]
            # the planted rank replays another bucket at step 3: NCCL still meets it there
            assert rb == ra + 1 and steps[ra].index(a) == steps[rb].index(b), (ra, rb)
        pf = os.path.join(TMP, f"buckets-{variant}.perfetto-trace")
        run([TOOL, "export", "--format", "perfetto", "--no-findings", "-o", pf, d], ok=(0,))
        flows = perfetto_flows(pf)
        assert sum(1 for v in flows.values() if v[0]["name"] == "cudaGraphLaunch") == 18
        assert len(flows) == 18 + 12, len(flows)


def test_flows_from_each_send_to_its_receive():
    # torch pipeline stages, eager (the last posting first), and vLLM's pipeline in graph mode
    # (each stage's decode graph receives from the previous stage and sends to the next)
    for pattern, variant, sends in (("pipeline", "clean", 3), ("pipeline", "planted", 2),
                                    ("pp_graph", "clean", 18), ("pp_graph", "planted", 18)):
        # the planted pipeline's last rank waits for a receive that never comes: 2 s, not 10
        d = stacks(pattern, variant, {"SHAPETRACE_DOUBLE_TIMEOUT": "2"})
        r = analysis(d)
        ev, _ = chrome(d)
        ranks = rank_of_pid(ev)
        p2p = flow_pairs(ev)["p2p"]
        assert len(p2p) == sends, (pattern, variant, len(p2p))
        for a, b in p2p:
            assert ranks[b["pid"]] == ranks[a["pid"]] + 1, (a, b)
            if pattern == "pipeline":
                assert (a["name"], b["name"]) == ("ncclSend", "ncclRecv")
                assert a["args"]["peer"] == ranks[b["pid"]] and b["args"]["peer"] == ranks[a["pid"]]
            else:  # captured: the replay that executed each side
                assert a["name"] == b["name"] == "cudaGraphLaunch"
        if pattern == "pp_graph":
            steps = launches(ev, ranks)
            assert all(steps[ranks[a["pid"]]].index(a) == steps[ranks[b["pid"]]].index(b)
                       for a, b in p2p)
        # the matching is the analysis's: a mismatched pair still gets its arrow, and the
        # finding names the same two calls
        if pattern == "pp_graph" and variant == "planted":
            f = r["findings"][0]
            assert f["kind"] == "p2p_size_mismatch", f
            launch_idx = {(e["args"]["index"]) for a, b in p2p for e in (a, b)
                          if ranks[e["pid"]] in f["ranks"]}
            assert {x["index"] for x in f["events"] if x["op"] == "cudaGraphLaunch"} <= \
                launch_idx, (f["events"], launch_idx)
        pf = os.path.join(TMP, f"{pattern}-{variant}.perfetto-trace")
        run([TOOL, "export", "--format", "perfetto", "-o", pf, d], ok=(0,))
        # the writer keeps the top bit of an id for the analysis's arrows (no lineage here)
        given = [v for fid, v in perfetto_flows(pf).items() if fid >> 63]
        assert len(given) == sends and all(abs(a["rank"] - b["rank"]) == 1 for a, b in given)
        # without the analysis there is no matching, so no such arrow; a window or a rank
        # selection leaves none dangling
        assert not flow_pairs(chrome(d, "--no-findings")[0]).get("p2p")
        cut, _ = chrome(d, "--ranks", "1-2")
        assert len(flow_pairs(cut).get("p2p", [])) == (1 if pattern == "pipeline" else 6)


# ---- report: the page in a real browser ----

def chromium_bin():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise NotRun("chromium is not installed (scripts/deps.sh check installs it)")


def browser(html, *args):
    """Open html in headless chromium; --dump-dom's output, or what --screenshot left."""
    profile = tempfile.mkdtemp(prefix="chromium-", dir=TMP)
    cmd = [chromium_bin(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", *args, "file://" + html]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    shutil.rmtree(profile, ignore_errors=True)
    assert p.returncode == 0, (cmd, p.returncode, p.stderr[-2000:])
    return p.stdout


def report(d, name, *args):
    out = os.path.join(TMP, name + ".html")
    p = run([TOOL, "report", "--html", out, *args, d], ok=(0,))
    assert "report of" in p.stderr, p.stderr
    return out


def loaded(dom):
    """The page's own verdict: its script ran to the end and window.onerror saw nothing."""
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-js="ran"' in body, body
    errors = re.search(r'<pre id="js-errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert errors and errors.group(1) == "", errors and errors.group(1)
    return body


def grid_rows(dom):
    """{rank: [(class, text)]} of the grid's cells."""
    table = re.search(r'<table id="grid">(.*?)</table>', dom, re.S).group(1)
    rows = {}
    for rank, cells in re.findall(r'<tr class="[^"]*" data-rank="(\d+)"><th>\d+</th>(.*?)</tr>',
                                  table, re.S):
        rows[int(rank)] = re.findall(r'<td class="([^"]*)"[^>]*>(.*?)</td>', cells, re.S)
    return rows


def grid_columns(dom):
    table = re.search(r'<table id="grid">(.*?)</table>', dom, re.S).group(1)
    return [int(x) for x in re.findall(r"<th[^>]*>#(\d+)</th>", table)]


def test_report_lineage_finding_in_the_browser():
    d = hidden()
    html = report(d, "hidden", "--dim", "hidden=7168", "--title", "4 SIMULATED ranks")
    dom = browser(html, "--dump-dom")
    loaded(dom)
    first = re.search(r'<div class="finding error" id="first-finding">(.*?)</div><h2>', dom,
                      re.S).group(1)
    assert "shape_mismatch" in first and "[771, 512]" in first and "[771, hidden]" in first
    assert "at generate (examples/hidden_states.c:" in first
    # the grid: around the all-gather the bytes went through, its cells outlined
    rows = grid_rows(dom)
    assert sorted(rows) == [0, 1, 2, 3], rows
    assert any("chain" in c for c, _ in rows[0]) and all(c.startswith("ok") for r in rows
                                                          for c, _ in rows[r]), rows
    # the chain: origin ... consumer, with shapes, bytes and call sites
    chain = re.search(r'<svg id="chain"(.*?)</svg>', dom, re.S).group(1)
    boxes = re.findall(r'<rect class="box ([a-z]*)"', chain)
    lineage = analysis(d, "--dim", "hidden=7168")["findings"][0]["lineage"]
    assert boxes[0] == "origin" and boxes[-1] == "consumer", boxes
    assert len(boxes) == len(lineage) + 1 >= 4, (boxes, lineage)
    for text in ("ncclAllGather", "cudaMemcpy2D D2D", "[771, 512] read", "[771, hidden] region",
                 "11,053,056 bytes", "receive_states", "generate (examples"):
        assert text in chain, text
    assert chain.count('class="arrow"') == len(lineage)  # lines, and polylines between rows
    # the timeline, the other finding, the processes, the command line
    assert re.search(r'<svg id="timeline"', dom) and dom.count('class="c-copy hit"') >= 1
    assert "[771, 259]" in re.search(r'<table id="others">(.*?)</table>', dom, re.S).group(1)
    procs = re.search(r'<table id="procs">(.*?)</table>', dom, re.S).group(1)
    assert procs.count("<tr>") == 5 and procs.count(">yes<") == 4
    assert "shapetrace report --html" in re.search(r'<pre id="cmdline">(.*?)</pre>', dom,
                                                     re.S).group(1)
    # the picture the README shows is made from this page (kept out of git, under build/)
    shot = os.path.join(BUILD, "pictures", "report-demo.png")
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    if os.path.exists(shot):
        os.unlink(shot)
    browser(html, f"--screenshot={shot}", "--window-size=1280,1000", "--hide-scrollbars")
    assert open(shot, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_report_collective_finding_in_the_browser():
    d = traced("desync", "desync")
    dom = browser(report(d, "desync"), "--dump-dom")
    loaded(dom)
    assert "count_mismatch" in dom and "rank 2 called ncclAllGather with count" in dom
    assert "What the peers did" in dom
    cols, rows = grid_columns(dom), grid_rows(dom)
    k = cols.index(6)
    culprits = [(r, i) for r, cells in rows.items() for i, (c, _) in enumerate(cells)
                if c.startswith("culprit")]
    assert culprits == [(2, k)], culprits
    assert rows[2][k][1].startswith("AllGather 130816"), rows[2][k]
    assert all(rows[r][k][0] == "ok" and rows[r][k][1].startswith("AllGather 131072")
               for r in (0, 1, 3))
    assert 'id="chain-none"' in dom


def test_report_hang_in_the_browser():
    d = traced("stall", "stall", launch=("--timeout", "2"))
    dom = browser(report(d, "stall"), "--dump-dom")
    loaded(dom)
    assert "missing_collective" in dom
    cols, rows = grid_columns(dom), grid_rows(dom)
    k = cols.index(5)
    assert rows[3][k][0] == "culprit missing", rows[3]
    # the others are inside it ("..." in the cell), and drawn to the timeline's end
    assert all(rows[r][k][1] == "AllReduce 65536\u2026" for r in (0, 1, 2)), rows
    hung = re.findall(r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)" height="14" '
                      r'class="c-collective inflight"', dom)
    assert len(hung) == 3, hung
    ends = {round(float(x) + float(w)) for x, w in hung}
    assert len(ends) == 1, ends
    procs = re.search(r'<table id="procs">(.*?)</table>', dom, re.S).group(1)
    assert procs.count(">NO<") == 3 and procs.count("[in flight]") == 3, procs


def test_report_of_a_512_member_communicator_folds_far_ranks():
    gen = os.path.join(BUILD, "tests", "gen_traces")
    d = os.path.join(TMP, "s512")
    run([gen, d, "512", "1000", "--diverge", "stop:300:60"], ok=(0,))
    r = analysis(d)
    k = next(i for i, f in enumerate(r["findings"]) if len(
        next(c for c in r["comms"] if c["id"] == f["comm"])["ranks"]) == 512)
    html = report(d, "s512", "--finding", str(k + 1))
    dom = browser(html, "--dump-dom")
    loaded(dom)
    assert f"<h2>Finding {k + 1}</h2>" in dom and "missing_collective" in dom
    rows = grid_rows(dom)
    assert sorted(rows) == list(range(512))
    near = re.findall(r'<tr class="near" data-rank="(\d+)">', dom)
    assert sorted(int(x) for x in near) == list(range(296, 305)), near
    assert dom.count('<tr class="far folded"') == 512 - 9
    assert 'id="unfold"' in dom and "show all 512 ranks" in dom
    culprit = [i for i, (c, _) in enumerate(rows[300]) if c.startswith("culprit")]
    assert len(culprit) == 1 and rows[300][culprit[0]][0] == "culprit missing", rows[300]
    p = run([TOOL, "report", "--finding", "99", "--html", os.path.join(TMP, "x.html"), d],
            ok=(2,))
    assert "--finding 99" in p.stderr


def test_report_shows_javascript_errors():
    # the check above could fail: a page whose script throws says so where the test reads
    html = report(hidden(), "broken")
    text = open(html).read().replace("</body>", "<script>no_such_function()</script></body>")
    broken = os.path.join(TMP, "broken2.html")
    open(broken, "w").write(text)
    dom = browser(broken, "--dump-dom")
    assert re.search(r'<pre id="js-errors">JavaScript error: [^<]*no_such_function', dom), \
        dom[:3000]


def test_report_escapes_what_comes_from_traces():
    src = hidden()
    d = os.path.join(TMP, "evil")
    shutil.copytree(src, d)
    evil = b"<img src=x id=pwned onerror=alert(1)>"
    for name in os.listdir(d):
        if not name.endswith(".shptrace"):
            continue  # the symbol file
        path = os.path.join(d, name)
        data = bytearray(open(path, "rb").read())
        host = data.index(b"\0", 312) - 312  # struct shp_file_header: host[64] at byte 312
        assert data[312:312 + host].decode().isprintable()
        data[312:312 + 64] = evil + b"\0" * (64 - len(evil))
        os.chmod(path, 0o600)
        open(path, "wb").write(data)
    html = report(d, "evil", "--title", "<script>alert(2)</script>")
    page = open(html).read()
    assert "<img src=x" not in page and "<script>alert" not in page
    dom = browser(html, "--dump-dom")
    loaded(dom)
    assert 'id="pwned"' not in dom and "&lt;img src=x id=pwned" in dom
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in dom


def test_report_of_512_ranks_opens():
    gen = os.path.join(BUILD, "tests", "gen_traces")
    d = os.path.join(TMP, "r512")
    run([gen, d, "512", "2000", "--diverge", "count:300:150"], ok=(0,))
    html = report(d, "r512")
    size = os.path.getsize(html)
    dom = browser(html, "--dump-dom")
    body = loaded(dom)
    procs = re.search(r'<table id="procs">(.*?)</table>', dom, re.S).group(1)
    assert procs.count("<tr>") == 513
    rows = grid_rows(dom)
    assert sorted(rows) == list(range(296, 304)), sorted(rows)
    assert [c for c, _ in rows[300]].count("culprit") == 1
    ms = int(re.search(r'data-load-ms="(\d+)"', body).group(1))
    print(f"     512-rank report: {size} bytes, loaded in {ms} ms")
    assert size < 2_000_000 and ms < 10_000, (size, ms)


# ---- call sites: the first frame of the user's code, in every output ----

def ctypes_traced():
    """tests/load/ctypes_nccl.py with Python call sites: NCCL and cudart through ctypes."""
    if "ctypes" not in _runs:
        d = os.path.join(TMP, "ctypes")
        run([TOOL, "run", "--dir", d, "--stacks", "python", "--", sys.executable,
             os.path.join(SRC, "tests", "load", "ctypes_nccl.py"), f"{T}/libnccl.so.2",
             f"{T}/libcudart.so.13"], ok=(0,))
        _runs["ctypes"] = d
    return _runs["ctypes"]


def rows_spec():
    """An expectation that copy_rows's 256-byte copies break: a finding at a Python site."""
    spec = os.path.join(TMP, "rows.expect.json")
    open(spec, "w").write('{"expect": [{"name": "rows of 128 bytes", "match": {"op": '
                          '"cudaMemcpy", "site": "copy_rows"}, "shape": [128], "dtype": "int8"}]}')
    return spec


def test_site_through_ctypes_in_every_output():
    d = ctypes_traced()
    events = dump(d)
    copies = [e for e in events if e["op"] == "cudaMemcpy"]
    assert len(copies) == 20, len(copies)
    for e in events:
        k = e["stack"].index(e["site"])
        # the frames inside the site are ctypes' runtime, never the script's
        assert e["site"].startswith("py: ") and "ctypes_nccl.py:" in e["site"], e
        assert all("ctypes_nccl.py" not in f for f in e["stack"][:k]), e["stack"]
        assert k > 0 and "libffi" in e["stack"][0], e["stack"]
    folded = copies[0]["stack"].index(copies[0]["site"])
    assert copies[0]["site"].startswith("py: copy_rows (")
    # the table's site column
    table = run([TOOL, "dump", d]).stdout
    rows = [x for x in table.splitlines() if " cudaMemcpy " in x]
    assert len(rows) == 20 and all(x.endswith(copies[0]["site"]) for x in rows), rows[:2]
    # the text report: the site first, then how many frames it folded, then its callers
    spec = rows_spec()
    text = run([TOOL, "analyze", "--expect", spec, d]).stdout
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("at "))
    assert lines[at].strip() == f"at {copies[0]['site']}, past {folded} framework frames", \
        lines[at]
    assert lines[at + 1].strip().startswith("<- py: forward ("), lines[at + 1]
    assert "libffi" not in text, text
    # --json: the site beside the whole stack, in the finding's calls too
    r = json.loads(run([TOOL, "analyze", "--json", "--expect", spec, d]).stdout)
    ev = r["findings"][0]["events"][0]
    assert ev["site"] == copies[0]["site"] and len(ev["stack"]) == len(copies[0]["stack"]), ev
    assert "at " + copies[0]["site"] in r["findings"][0]["summary"], r["findings"][0]["summary"]
    # the timeline: each slice's site argument, Chrome and Perfetto
    ev, _ = chrome(d, "--expect", spec)
    sites = {s["args"]["index"]: s["args"]["site"] for s in ev if s["ph"] == "X"}
    assert sites == {e["index"]: e["site"] for e in events}, sites
    out = os.path.join(TMP, "ctypes.perfetto-trace")
    run([TOOL, "export", "--format", "perfetto", "-o", out, d], ok=(0,))
    _, slices = perfetto_decode(out)
    assert {s["args"]["index"]: s["args"]["site"] for s in slices if s["type"] == 1} == \
        {e["index"]: e["site"] for e in events}
    # the page: the site first, the framework frames folded apart with their number
    page = open(report(d, "ctypes", "--expect", spec)).read()
    first = re.search(r'id="first-finding">(.*?)</div><h2>', page, re.S).group(1)
    items = re.findall(r"<li[^>]*>(.*?)</li>", first)
    assert items[0] == "at " + html_escape(copies[0]["site"]), items[:2]
    assert f"<summary>past {folded} framework frames</summary>" in first, first


def test_site_of_every_finding_kind():
    """The analyzer's newer kinds show their calls' sites as the older ones do: the text's "at"
    line, the JSON's site key, the page's first item, and the timeline's finding instant (its
    site argument: that of the call it sits at)."""
    hang = {"SHAPETRACE_DOUBLE_TIMEOUT": "2"}
    values = os.path.join(TMP, "values-race")
    run([TOOL, "run", "--values", "--dir", values, "--", f"{T}/shp_launch", "-n", "4", "--",
         f"{T}/values", "race"], ok=(0,),
        extra_env={"SHP_DOUBLE_VIA_DRIVER": "1", "LD_LIBRARY_PATH": T})
    cases = ((stacks("fsdp_freed", "planted", hang), "failed_collective", "gather_layer"),
             (stacks("eagle_dp", "planted", hang), "deadlock", "draft_forward"),
             (values, "value_mismatch", "row_parallel"),
             (traced("desync", "desync"), "count_mismatch", "gather_activations"))
    for d, kind, func in cases:
        r = analysis(d)
        at = next(i for i, x in enumerate(r["findings"]) if x["kind"] == kind)
        f = r["findings"][at]
        evs = [e for e in f["events"] if e["stack"]]
        assert evs and evs[0]["site"].startswith(func + " ("), (kind, evs[:1])
        for e in evs:
            assert e["site"] in e["stack"], (kind, e)
        # text: each call's site on its "at" line
        text = [x.strip() for x in run([TOOL, "analyze", d]).stdout.splitlines()]
        assert all("at " + e["site"] in text for e in evs), (kind, text)
        # the page drawn around that finding: the site first under each call
        page = open(report(d, "kind-" + kind, "--finding", str(at + 1))).read()
        first = re.search(r'id="first-finding">(.*?)</div><h2>', page, re.S).group(1)
        assert f'class="kind">{kind}<' in first, first[:300]
        items = re.findall(r"<li[^>]*>(.*?)</li>", first)
        assert all("at " + html_escape(e["site"]) in items for e in evs), (kind, items[:4])
        # each call under what it is to the finding, as the text says it, with its error code
        labels = [html_unescape(x) for x in
                  re.findall(r'<div class="sub">([^<]*):</div><div class="mono">', first)]
        assert labels == [e["label"] for e in f["events"] if e["label"]], labels
        if kind == "failed_collective":
            assert labels[0] == "the call NCCL refused" and "[error 4]</span>" in first, first
        # the timeline: the finding's instant on each rank it names, with that rank's site
        want = {}
        for e in reversed(evs):
            want[e["rank"]] = e["site"]
        ev, _ = chrome(d)
        ranks = rank_of_pid(ev)
        inst = [i for i in ev if i["ph"] == "i" and i["cat"] == "finding" and
                i["args"]["finding"] == at]
        got = {ranks[i["pid"]]: i["args"].get("site") for i in inst}
        assert got and got == {k: want[k] for k in got}, (kind, got, want)
        pf = os.path.join(TMP, f"kind-{kind}.perfetto-trace")
        run([TOOL, "export", "--format", "perfetto", "-o", pf, d], ok=(0,))
        _, slices = perfetto_decode(pf)
        assert sorted(i["args"].get("site") for i in slices if i["type"] == 3 and
                      i["cat"] == "finding" and i["args"]["finding"] == at) == \
            sorted(got.values()), kind


def html_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_site_of_c_programs_on_the_doubles():
    # a C program on the NCCL double is its own innermost frame: its site is its own function
    d = hidden()
    events = dump(d)
    own = re.compile(r"^\w+ \(\.?/?examples/(hidden_states\.c|common\.h):\d+\)$")
    assert all(own.match(e["site"]) and e["site"] == e["stack"][0] for e in events), \
        [e["site"] for e in events if not own.match(e["site"] or "")][:3]
    assert {e["site"].split(" ")[0] for e in events} >= {"main", "generate", "receive_states"}
    # on a static runtime linked into the program, the stack starts in the runtime's cudaMemcpy
    # and the site is the program's own line
    sd = os.path.join(TMP, "static")
    run([TOOL, "run", "--dir", sd, "--", f"{T}/static_rt", "copies"], ok=(0,),
        extra_env={"LD_LIBRARY_PATH": T})
    ev = dump(sd)
    assert ev and all(re.match(r"cuda[A-Z]\w* \(tests/doubles/static_cudart\.c:", e["stack"][0])
                      for e in ev), [e["stack"][0] for e in ev]
    assert all(e["site"] == e["stack"][1] and "static_rt.c:" in e["site"] for e in ev), \
        [(e["site"], e["stack"][:2]) for e in ev]


def test_site_skip_moves_the_site():
    d = traced("desync", "desync")
    base = analysis(d)
    f0 = base["findings"][0]
    assert f0["events"][0]["site"].startswith("gather_activations ("), f0["events"][0]
    for how in ({"args": ["--site-skip", "fn:gather_activations"]},
                {"args": [], "env": {"SHAPETRACE_SITE_SKIP": "libfoo.so*,fn:gather_activations"}}):
        args, env = how["args"], how.get("env")
        r = json.loads(run([TOOL, "analyze", "--json", *args, d], extra_env=env).stdout)
        ev = r["findings"][0]["events"][0]
        assert ev["site"].startswith("main (examples/desync.c:") and ev["stack"][1] == ev["site"]
        assert "gather_activations" not in r["findings"][0]["summary"].split(" at ")[-1]
        text = run([TOOL, "analyze", *args, d], extra_env=env).stdout
        assert f"at {ev['site']}, past 1 framework frame\n" in text, text
        assert [e["site"] for e in dump_args(d, args, env) if e["op"] == "ncclAllGather"] == \
            [ev["site"]] * 24
        evx, _ = chrome_env(d, args, env)
        assert {s["args"]["site"] for s in evx if s["ph"] == "X" and
                s["name"] == "ncclAllGather"} == {ev["site"]}
        page = open(report_env(d, "skip", args, env)).read()
        assert "at " + html_escape(ev["site"]) in page and "past 1 framework frame<" in page
    # the command line comes after the environment, so it decides: "!" keeps the frame again
    r = json.loads(run([TOOL, "analyze", "--json", "--site-skip", "!fn:gather_activations", d],
                       extra_env={"SHAPETRACE_SITE_SKIP": "fn:gather_activations"}).stdout)
    assert r["findings"][0]["events"][0]["site"] == f0["events"][0]["site"]
    # what is no glob is refused, one line, exit 2, by the one parser every command calls
    for cmd in ("dump", "analyze", "export", "report", "snapshot"):
        p = run([TOOL, cmd, "--site-skip", "!", d], ok=(2,))
        assert p.stderr.startswith(f"shapetrace {cmd}: --site-skip takes a glob") and \
            len(p.stderr.splitlines()) == 1, p.stderr
        p = run([TOOL, cmd, d], ok=(2,), extra_env={"SHAPETRACE_SITE_SKIP": "a,fn:"})
        assert "SHAPETRACE_SITE_SKIP" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr


def dump_args(d, args, env):
    out = run([TOOL, "dump", "--json", *args, d], extra_env=env).stdout
    return [json.loads(x) for x in out.splitlines()]


def chrome_env(d, args, env):
    out = os.path.join(TMP, f"x{len(os.listdir(TMP))}.json")
    run([TOOL, "export", "-o", out, *args, d], ok=(0,), extra_env=env)
    return json.load(open(out))["traceEvents"], out


def report_env(d, name, args, env):
    out = os.path.join(TMP, name + ".html")
    run([TOOL, "report", "--html", out, *args, d], ok=(0,), extra_env=env)
    return out


def test_manual_states_the_site_list():
    """The manual's list of framework globs (docs/tracing.md, "Call sites") is the one the tools
    use, in the same order."""
    text = open(os.path.join(SRC, "tools", "lib", "site.c")).read()
    init = text[text.index("shp_site_builtin[] = {"):]
    init = init[:init.index("NULL};")]
    builtin = c_strings(init[init.index("{") + 1:])
    readme = open(os.path.join(SRC, "docs", "tracing.md")).read()
    at = readme.index("`shp_site_builtin` in `tools/lib/site.c`")
    block = readme[readme.index("```text\n", at) + 8:]
    block = block[:block.index("```")]
    listed = [g for g in re.split(r"\s{2,}|\n", block) if g]
    assert listed == builtin, (listed, builtin)
    assert len(builtin) > 40


def c_strings(text):
    """The string literals of C text, comments skipped (a '/*' inside a string is no comment)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("/*", i):
            i = text.index("*/", i + 2) + 2
        elif text[i] == '"':
            j, buf = i + 1, ""
            while text[j] != '"':
                buf += text[j + 1] if text[j] == "\\" else text[j]
                j += 2 if text[j] == "\\" else 1
            out.append(buf)
            i = j + 1
        else:
            i += 1
    return out


def main():
    return run_all(globals(), "pictures", ONLY, TMP)


if __name__ == "__main__":
    sys.exit(main())
