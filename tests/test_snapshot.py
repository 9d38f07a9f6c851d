"""shapetrace tests: `shapetrace snapshot` on live processes of the test doubles (simulated ranks;
no GPU): four C ranks of which one sleeps while the others block in an all-reduce, with and
without the preload; Python ranks with known frames and threads (CPython 3.10 to 3.13 where pyenv
has them); processes that exit meanwhile; the command killed while a target is stopped under
it; targets that must not notice; threads stopped inside the vDSO; refusals; --all, -o and
--merge. Usage: test_snapshot.py BUILD_DIR [NAME...]. Prints one line per test and ends with
'N passed, M failed'."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import NotRun, other_pythons, run_all, tool_env  # tests/ is on sys.path

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
T = os.path.join(BUILD, "tests")
HERE = os.path.dirname(os.path.abspath(__file__))
RANKS_C = os.path.join(HERE, "load", "snap_ranks.c")
SNAP_PY = os.path.join(HERE, "load", "snap_py.py")
TMP = tempfile.mkdtemp(prefix="shapetrace-snap-")


def line_of(path, contains=None, exact=None):
    """The 1-based line of path that contains `contains` (or is `exact`, stripped)."""
    with open(path, encoding="utf-8") as f:
        found = [i + 1 for i, t in enumerate(f.read().splitlines())
                 if (contains is not None and contains in t) or
                 (exact is not None and t.strip() == exact)]
    assert len(found) == 1, (path, contains, exact, found)
    return found[0]


def job_env(extra=None):
    e = tool_env()
    e.pop("SHAPETRACE_DIR", None)
    e["SHAPETRACE_DOUBLE_TIMEOUT"] = "120"
    e.update(extra or {})
    return e


def snapshot(*args, env=None, check=True, timeout=120):
    p = subprocess.run([TOOL, "snapshot", *args], env=env or tool_env(), capture_output=True,
                       text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


class Job:
    """A job of N ranks under shp_launch (under `shapetrace run` when run_opts is not None),
    started and read until every rank said where it blocks."""

    def __init__(self, name, n, cmd, run_opts=None, env=None):
        self.dir = os.path.join(TMP, name)
        os.makedirs(self.dir, exist_ok=True)
        self.release = os.path.join(self.dir, "release")
        launch = [f"{T}/shp_launch", "-n", str(n), "--timeout", "150", "--"]
        full = launch + cmd(self.release)
        if run_opts is not None:
            full = [TOOL, "run", "--dir", os.path.join(self.dir, "traces"), *run_opts, "--"] + full
        self.out = open(os.path.join(self.dir, "stdout"), "w+")
        self.p = subprocess.Popen(full, env=env or job_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.lines, self.pids = [], {}
        deadline = time.monotonic() + 90
        while len(self.pids) < n:
            assert time.monotonic() < deadline, ("ranks did not block", self.lines)
            line = self.p.stdout.readline()
            assert line, ("job ended early", self.lines, self.p.stderr.read())
            self.lines.append(line)
            for r, pid in re.findall(r"rank (\d+): blocking, pid (\d+)", line):
                self.pids[int(r)] = int(pid)
        time.sleep(0.2)  # the blocked ranks reach their waits

    def rank_pids(self):
        return [str(self.pids[r]) for r in sorted(self.pids)]

    def finish(self):
        """Lets the sleeping rank go; returns (exit status, stdout lines, stderr)."""
        open(self.release, "w").close()
        out, err = self.p.communicate(timeout=150)
        return self.p.returncode, self.lines + out.splitlines(keepends=True), err


def stable(lines):
    """A job's output without its pids, in a fixed order (ranks print concurrently)."""
    return sorted(re.sub(r"pid \d+", "pid P", l.rstrip("\n")) for l in lines)


def c_ranks(release):
    return [f"{T}/snap_ranks", "60", release]


def untraced_reference(name, cmd, n):
    """The same job's output and exit status without any snapshot."""
    job = Job(name + "-reference", n, cmd)
    rc, lines, _ = job.finish()
    return rc, stable(lines)


def group_lines(text):
    return [l.strip() for l in text.splitlines()[1:] if l.startswith("  ") and
            not l.startswith("   ") and ": " in l and l.strip().startswith(("rank", "pid"))]


# ---- four C ranks, one sleeping ----

def check_c_view(text, js, traced):
    step = line_of(RANKS_C, "return ncclAllReduce(buf, buf")
    sleep = line_of(RANKS_C, "nanosleep(&ts, NULL);")
    lines = text.splitlines()
    assert lines[0] == "shapetrace snapshot: 4 processes, 2 places", text
    if traced:
        assert re.fullmatch(r"waiting for rank 3: behind on communicator [0-9a-f]{8} \(its last "
                            r"collective #1; others at #2\)", lines[1]), text
    else:
        assert lines[1] == "waiting for rank 3: not in a GPU library, while ranks 0, 1, 2 are", \
            text
    after = " after ncclAllReduce #1" if traced else ""
    at = " #2" if traced else ""
    assert re.fullmatch(r"  rank 3: main thread in \S+ \(not in a GPU library\)" + after +
                        re.escape(f" at warmup (tests/load/snap_ranks.c:{sleep})"), lines[2]), text
    assert lines[3] == ("  ranks 0, 1, 2: main thread in ncclAllReduce" + at +
                        f" at step_allreduce (tests/load/snap_ranks.c:{step})"), text
    assert js["kind"] == "shapetrace snapshot" and js["version"] == 1
    g = js["groups"]
    assert [x["ranks"] for x in g] == [[3], [0, 1, 2]], g
    assert [x["waited_for"] for x in g] == [True, False] and g[1]["collective"], g
    assert js["skipped"] == []
    procs = sorted(js["processes"], key=lambda p: p["rank"])
    assert [p["rank"] for p in procs] == [0, 1, 2, 3] and all(p["world_size"] == 4 for p in procs)
    for p in procs:
        assert p["rank_from"] == "env" and p["name"] == "snap_ranks", p
        names = sorted(t["name"] for t in p["threads"])
        assert names == ["snap-helper", "snap_ranks"], names
        main = [t for t in p["threads"] if t["main"]][0]
        assert p["focus"] == main["tid"] == p["pid"]
        fns = [f.split(" ")[0].split("+")[0] for f in main["stack"]]
        helper = [t for t in p["threads"] if t["name"] == "snap-helper"][0]
        assert helper["in"] is None and helper["site"].startswith("helper ("), helper
        if p["rank"] == 3:
            assert main["in"] is None and main["site"].startswith("warmup ("), main
            assert fns[fns.index("warmup"):fns.index("warmup") + 2] == ["warmup", "main"], fns
        else:
            assert main["in"] == "ncclAllReduce" and main["collective"], main
            i = fns.index("step_allreduce")
            assert fns[i:i + 3] == ["step_allreduce", "step", "main"], fns
            assert "pncclAllReduce" in fns[:i] or "ncclAllReduce" in fns[:i], fns
        assert main["stack"][main["site_index"]] == main["site"]
        if traced:
            tr = p["trace"]
            assert tr and tr["armed"] and len(tr["comms"]) == 1, tr
            c = tr["comms"][0]
            if p["rank"] == 3:
                assert (c["seq"], c["in_flight"], p["behind"]) == (1, False, True), p
                assert tr["in_flight"] == []
            else:
                assert (c["seq"], c["op"], c["in_flight"], p["behind"]) == \
                    (2, "ncclAllReduce", True, False), p
                assert [(x["tid"], x["op"], x["seq"]) for x in tr["in_flight"]] == \
                    [(p["pid"], "ncclAllReduce", 2)], tr
        else:
            assert p["trace"] is None and not p["behind"], p


def run_c_job(name, run_opts):
    job = Job(name, 4, c_ranks, run_opts=run_opts)
    pids = job.rank_pids()
    text = snapshot(*pids).stdout
    js = json.loads(snapshot("--json", *pids).stdout)
    stats = snapshot("--stats", *pids)
    rc, lines, err = job.finish()
    return job, text, js, stats, rc, lines, err


def check_stats(stats, n):
    m = re.search(r"snapshot of (\d+) process(?:es)? \(\d+ threads\) in [\d.]+ s; stopped "
                  r"([\d.]+) ms on average, ([\d.]+) ms at most", stats.stderr)
    assert m and int(m[1]) == n, stats.stderr
    # how long is make bench's figure (bench/run.sh); a test only reads that it is said
    assert float(m[3]) >= float(m[2]) > 0, stats.stderr
    assert len(re.findall(r"^shapetrace:   pid \d+.*: stopped [\d.]+ ms", stats.stderr, re.M)) == n
    print(f"     (stopped {m[2]} ms on average, {m[3]} ms at most, {n} processes)")


def test_four_ranks_one_sleeping():
    ref_rc, ref = untraced_reference("c4", c_ranks, 4)
    assert ref_rc == 0 and ref.count("rank 0: 3 steps, sums checked") == 1, ref
    job, text, js, stats, rc, lines, err = run_c_job("c4", None)
    check_c_view(text, js, traced=False)
    check_stats(stats, 4)
    # the ranks went on as they would have: same output, same exit status
    assert (rc, stable(lines)) == (ref_rc, ref), (rc, lines, err)


# docs/CONTRACTS.md's keys, in their order
KEYS = ["kind", "version", "t_ns", "groups", "processes", "skipped"]
GROUP_KEYS = ["ranks", "pids", "thread", "in", "gpu", "collective", "site", "position",
              "waited_for", "why", "text"]
PROCESS_KEYS = ["host", "pid", "rank", "rank_from", "local_rank", "world_size", "name", "exe",
                "python", "python_note", "behind", "late_threads", "focus", "trace", "stats",
                "threads"]
TRACE_KEYS = ["file", "armed", "comms", "in_flight", "last"]
STATS_KEYS = ["prepare_ns", "stopped_ns", "unwind_ns", "symbols_ns", "trace_ns", "stack_bytes",
              "py_reads"]
THREAD_KEYS = ["tid", "name", "main", "stopped", "in", "collective", "waiting_in", "python",
               "site", "site_index", "stack"]


def test_four_ranks_with_trace():
    job, text, js, stats, rc, lines, err = run_c_job("c4trace", [])
    check_c_view(text, js, traced=True)
    assert list(js) == KEYS and all(list(g) == GROUP_KEYS for g in js["groups"]), js
    for p in js["processes"]:
        assert list(p) == PROCESS_KEYS and list(p["trace"]) == TRACE_KEYS, list(p)
        assert list(p["stats"]) == STATS_KEYS, p["stats"]
        assert list(p["trace"]["comms"][0]) == ["id", "seq", "op", "in_flight"]
        assert all(list(t) == THREAD_KEYS for t in p["threads"]), p["threads"]
    assert "trace " in text and "[in flight]" in text, text
    assert rc == 0 and stable(lines).count("rank 3: 3 steps, sums checked") == 1, (lines, err)


def test_trace_found_through_its_run_directory():
    """Ranks that closed every descriptor, the trace's among them: the trace is found in their
    SHAPETRACE_DIR."""
    job = Job("c4closed", 4, c_ranks, run_opts=[], env=job_env({"SNAP_CLOSE_FDS": "1"}))
    js = json.loads(snapshot("--json", *job.rank_pids()).stdout)
    fds = {pid: os.listdir(f"/proc/{pid}/fd") for pid in job.pids.values()}
    rc, lines, err = job.finish()
    assert rc == 0, (lines, err)
    assert all(int(fd) < 3 for f in fds.values() for fd in f), fds
    traces = os.path.join(job.dir, "traces")
    for p in js["processes"]:
        tr = p["trace"]
        assert tr and tr["file"].startswith(traces + "/") and tr["file"].endswith(
            f"-{p['pid']}.shptrace"), tr
        assert tr["comms"][0]["seq"] == (1 if p["rank"] == 3 else 2), tr
    assert [g["ranks"] for g in js["groups"]] == [[3], [0, 1, 2]], js["groups"]


def test_dormant_trace_names_the_rank_by_its_stack():
    """Recording off: the trace holds the communicator, no collective; the view falls back on
    what the stacks say."""
    job = Job("c4dormant", 4, c_ranks, run_opts=["--dormant"])
    js = json.loads(snapshot("--json", *job.rank_pids()).stdout)
    text = snapshot(*job.rank_pids()).stdout
    job.finish()
    assert "waiting for rank 3: not in a GPU library, while ranks 0, 1, 2 are" in text, text
    assert "(dormant: recording off)" in text, text
    for p in js["processes"]:
        tr = p["trace"]
        assert tr and tr["armed"] is False and [c["seq"] for c in tr["comms"]] == [None], tr


# ---- Python ranks ----

def py_cmd(py):
    return lambda release: [py, SNAP_PY, f"{T}/libnccl.so.2", f"{T}/libcudart.so.13", "60",
                            release]


def check_python_ranks(py, name):
    job = Job(name, 2, py_cmd(py))
    pids = job.rank_pids()
    text = snapshot(*pids).stdout
    js = json.loads(snapshot("--json", *pids).stdout)
    rc, lines, err = job.finish()
    assert rc == 0 and stable(lines).count("rank 1: done") == 1, (lines, err)

    def at(fn, contains):
        return f"py: {fn} ({SNAP_PY}:{line_of(SNAP_PY, contains)})"

    red = at("reduce_layer", "nccl.ncclAllReduce(")
    # rank 1 waits in warmup's loop: in its sleep or, now and then, in the check beside it
    in_warmup = [at("warmup", c) for c in ("time.sleep(0.01)", "os.path.exists(RELEASE)")]
    waits = "|".join(re.escape(w[4:]) for w in in_warmup)
    lines = text.splitlines()
    assert lines[1] == "waiting for rank 1: not in a GPU library, while rank 0 is", text
    assert re.fullmatch(r"  rank 1: main thread in \S+ \(not in a GPU library\) at (" + waits +
                        ")", lines[2]), text
    assert re.fullmatch(r"  rank 0: thread \S+ in ncclAllReduce at " + re.escape(red[4:]),
                        lines[3]), text
    procs = sorted(js["processes"], key=lambda p: p["rank"])
    minor = subprocess.run([py, "-c", "import sys; print(sys.version_info[1])"],
                           capture_output=True, text=True).stdout.strip()
    for p in procs:
        assert p["python"] and p["python"].startswith("3." + minor), p["python"]
        assert p["python_note"] is None, p["python_note"]
        assert len(p["threads"]) == (3 if p["rank"] == 0 else 2), p["threads"]
    r0, r1 = procs
    worker = [t for t in r0["threads"] if t["tid"] == r0["focus"]][0]
    assert not worker["main"] and worker["in"] == "ncclAllReduce" and worker["python"], worker
    pyf = [f for f in worker["stack"] if f.startswith("py: ")]
    assert pyf[:3] == [red, at("forward", "reduce_layer(self.comm"),
                       at("reducer", "return layer.forward()")], pyf
    assert [f.split(" ")[1] for f in pyf[3:]] == ["run", "_bootstrap_inner", "_bootstrap"], pyf
    assert all("threading.py:" in f for f in pyf[3:]), pyf
    # the Python frames stand where the interpreter's were: none of its eval frames is left
    assert not any("_PyEval_EvalFrameDefault" in f for f in worker["stack"]), worker["stack"]
    assert worker["stack"][worker["site_index"]] == red
    main1 = [t for t in r1["threads"] if t["main"]][0]
    assert r1["focus"] == main1["tid"] and main1["in"] is None, r1
    pyf = [f for f in main1["stack"] if f.startswith("py: ")]
    assert pyf[0] in in_warmup and pyf[1:] == [at("main", "warmup(SLEEP_S)"),
                   f"py: <module> ({SNAP_PY}:{line_of(SNAP_PY, exact='main()')})"], pyf
    idlers = [t for p in procs for t in p["threads"] if t["site"] and "py: idle (" in t["site"]]
    assert len(idlers) == 2 and all(t["in"] is None for t in idlers), idlers


def test_python_ranks():
    check_python_ranks(sys.executable, "py")


def test_python_ranks_other_versions():
    pys = other_pythons()
    if os.access("/usr/bin/python3", os.X_OK) and \
            os.path.realpath("/usr/bin/python3") != os.path.realpath(sys.executable):
        pys.append(os.path.realpath("/usr/bin/python3"))  # a static interpreter (Debian's)
    if not pys:
        raise NotRun("no CPython 3.10-3.13 besides this one")
    for py in pys:
        check_python_ranks(py, "py-" + os.path.basename(py) + str(len(py)))
    print(f"     (checked {', '.join(pys)})")


# ---- processes that exit, a command that is killed, targets that must not notice ----

def state_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def tracer_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"TracerPid:\s+(\d+)", f.read())[1])


def tick(n, *opts):
    return subprocess.Popen([f"{T}/snap_tick", str(n), *opts], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=job_env())


def started(p):
    assert p.stdout.readline() == "started\n"
    return p


def test_process_that_exits_meanwhile_is_skipped():
    """One target gone before the snapshot, one killed while another is held stopped (a zombie
    by the time its turn comes), one killed while itself is held: the others are read."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    a, b, c = (started(tick(4000)) for _ in range(3))
    snap = subprocess.Popen([TOOL, "snapshot", "--json", str(gone.pid), str(a.pid), str(b.pid),
                             str(c.pid)], env=dict(tool_env(), SHAPETRACE_SNAPSHOT_HOLD_MS="700"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while tracer_of(a.pid) != snap.pid:
        assert time.monotonic() < deadline and snap.poll() is None, snap.communicate()
        time.sleep(0.01)
    b.kill()  # its turn comes after a's hold: it is a zombie by then
    while tracer_of(c.pid) != snap.pid or state_of(c.pid) != "t":
        assert time.monotonic() < deadline and snap.poll() is None, snap.communicate()
        time.sleep(0.01)
    time.sleep(0.2)  # its copy is made (in a millisecond or so), its hold of 700 ms goes on
    c.kill()  # killed while stopped under the snapshot, after its copy
    out, err = snap.communicate(timeout=60)
    assert snap.returncode == 0, (snap.returncode, err)
    js = json.loads(out)
    skipped = {s["pid"]: s for s in js["skipped"]}
    assert set(skipped) == {gone.pid, b.pid} and all(s["exited"] for s in skipped.values()), js
    assert all(list(s) == ["host", "pid", "exited", "why"] for s in js["skipped"]), js["skipped"]
    assert f"pid {gone.pid} exited before it could be read (skipped)" in err, err
    assert f"pid {b.pid} exited before it could be read (skipped)" in err, err
    assert len(err.strip().splitlines()) == 2, err
    read = {p["pid"]: p for p in js["processes"]}
    assert set(read) == {a.pid, c.pid}, read.keys()
    assert any("main (" in f for f in read[a.pid]["threads"][0]["stack"]), read[a.pid]
    for p in (a, b, c):
        p.kill()
        p.wait()
    # nothing to show at all: status 2
    p = snapshot(str(gone.pid), check=False)
    assert p.returncode == 2 and "exited before it could be read" in p.stderr, p.stderr


def kill_mid_way(sig):
    """Kills a snapshot with sig while the target is stopped under it; returns the target's
    state after, the command's status, and the target's output and status."""
    t = started(tick(150))
    # the signal as a terminal would send it: a make check started in the background inherits
    # SIGINT ignored, and the command keeps what it inherits
    # (env execs the command: its pid is the command's)
    snap = subprocess.Popen(["env", "--default-signal=INT,TERM", TOOL, "snapshot", str(t.pid)],
                            env=dict(tool_env(), SHAPETRACE_SNAPSHOT_HOLD_MS="20000"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while tracer_of(t.pid) != snap.pid or state_of(t.pid) != "t":
        assert time.monotonic() < deadline and snap.poll() is None, snap.communicate()
        time.sleep(0.01)
    snap.send_signal(sig)
    snap.wait(timeout=30)
    time.sleep(0.1)
    states = set()
    for _ in range(20):
        states.add(state_of(t.pid))
        time.sleep(0.01)
    traced = tracer_of(t.pid)
    out, _ = t.communicate(timeout=60)
    return states, traced, snap.returncode, t.returncode, out


def test_snapshot_killed_leaves_target_running():
    ref = subprocess.run([f"{T}/snap_tick", "150"], capture_output=True, text=True)
    assert ref.returncode == 3 and ref.stdout.endswith("150 ticks done\n"), ref
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
        states, traced, src, trc, out = kill_mid_way(sig)
        # no ptrace stop (t) nor group stop (T) outlives the command
        assert traced == 0 and not states & {"t", "T"}, (sig, states, traced)
        assert src == -sig, (sig, src)  # a blocked signal still ends it, once it let go
        assert (trc, "started\n" + out) == (ref.returncode, ref.stdout), (sig, trc, out)


def test_targets_do_not_notice():
    """Many snapshots of a target blocked in nanosleep, poll, read, a timed condition wait and
    pthread_join, and of one making threads all along: the same output and exit status as
    without them (no EINTR, nothing lost), and every thread found."""
    # Long enough for 10 snapshots on a busy machine, where one snapshot command takes 100 ms
    # or more, and several times as long under the sanitizers (seen: 9 in 300 ticks, 1.3 s, at
    # load 5); snapshots stop at 40.
    # The target stops ticking once its standard input is closed, after the last snapshot.
    ticks = str(3000 if os.environ.get("SHAPETRACE_SANITIZED") == "1" else 1500)
    for opts in ((), ("--spawn",)):
        t = started(subprocess.Popen([f"{T}/snap_tick", ticks, *opts, "--until-eof"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=job_env()))
        taken = 0
        while t.poll() is None and taken < 40:
            p = snapshot("--json", str(t.pid), check=False)
            if p.returncode == 0:
                js = json.loads(p.stdout)
                n = len(js["processes"][0]["threads"])
                assert n >= (4 if opts else 3), js  # the stdin reader's thread included
                taken += 1
            time.sleep(0.02)
        out, err = t.communicate(timeout=60)
        assert taken >= 10, taken
        done = re.fullmatch(r"(?s).*\n([0-9]+) ticks done\n", out)
        assert done, out
        # what a run of that many ticks prints when nothing touches it
        n = int(done.group(1))
        ref = "".join(f"tick {i}\n" for i in range(0, n, 10)) + f"{n} ticks done\n"
        assert (t.returncode, out) == (3, ref), (opts, t.returncode, out)


# ---- threads stopped inside the vDSO ----

CLOCK_C = os.path.join(HERE, "load", "snap_clock.c")
CLOCK_PY = os.path.join(HERE, "load", "snap_clock.py")
VDSO_FRAME = re.compile(r"__vdso_(clock_gettime|gettimeofday)\+0x[0-9a-f]+ \(\[vdso\]\)")


def test_stacks_through_the_vdso():
    """Threads stopped inside the vDSO (clock_gettime, gettimeofday: where CUDA's spin-waits
    spend their time) unwind to their callers with the vDSO's own CFI, and its frame is named;
    the site is the caller's. Snapshots are taken until every thread was caught there."""
    with open("/proc/self/maps") as f:
        if not any(l.rstrip().endswith(" [vdso]") for l in f):
            raise NotRun("no vDSO in this kernel's processes (vdso=0)")
    env = job_env()
    c = started(subprocess.Popen([f"{T}/snap_clock", "300"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env))
    py = started(subprocess.Popen([sys.executable, CLOCK_PY, "300"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env))
    cline = line_of(CLOCK_C, "clock_gettime(CLOCK_MONOTONIC, &ts);")
    tline = line_of(CLOCK_C, "gettimeofday(&tv, NULL);")
    # the caller's frame, and the frames that must follow it
    want = {(c.pid, "snap_clock"): [f"spin_clock_gettime (tests/load/snap_clock.c:{cline})",
                                    "main"],
            (c.pid, "snap-tod"): [f"spin_gettimeofday (tests/load/snap_clock.c:{tline})",
                                  "tod_thread"],
            (py.pid, os.path.basename(sys.executable)[:15]): [
                f"py: spin ({CLOCK_PY}:{line_of(CLOCK_PY, 'while time.monotonic() < end:')})",
                f"py: main ({CLOCK_PY}:{line_of(CLOCK_PY, 'spin(float(sys.argv[1])')})"]}
    hits = {k: 0 for k in want}
    taken, stats = 0, None
    try:
        deadline = time.monotonic() + 90
        while min(hits.values()) < 3 and taken < 300 and time.monotonic() < deadline:
            p = snapshot("--json", "--stats", str(c.pid), str(py.pid))
            stats = stats or p
            taken += 1
            for proc in json.loads(p.stdout)["processes"]:
                for t in proc["threads"]:
                    key = (proc["pid"], t["name"])
                    assert key in want, (key, list(want))
                    st = t["stack"]
                    if not st or "[vdso" not in st[0]:  # its module, named either way
                        continue
                    hits[key] += 1
                    caller, after = want[key]
                    assert VDSO_FRAME.fullmatch(st[0]), st
                    assert t["waiting_in"] == st[0].split("+")[0] and t["in"] is None, t
                    assert caller in st, (key, st)
                    i = st.index(caller)
                    # the frames between are libc's wrapper (clock_gettime; none for
                    # gettimeofday, whose caller comes next: unwound by the vDSO's CFI, not by
                    # a frame-pointer guess, which would skip it) or the interpreter's; a
                    # sanitized build adds its interceptor of the call
                    between = [f for f in st[1:i] if not f.startswith("__interceptor_")]
                    if key[1] == "snap-tod":
                        assert not between, st
                    elif key[1] == "snap_clock":
                        assert len(between) == 1 and between[0].startswith("clock_gettime"), st
                    assert after in (st[i + 1], st[i + 1].split(" ")[0]), (key, st)
                    assert t["site"] == caller and st[t["site_index"]] == caller, t
    finally:
        for p in (c, py):
            p.kill()
            p.wait()
    print(f"     ({taken} snapshots; stops inside the vDSO: " +
          ", ".join(f"{k[1]} {v}" for k, v in hits.items()) + ")")
    assert all(v >= 1 for v in hits.values()), (taken, hits)
    check_stats(stats, 2)


# ---- refusals and usage ----

def test_refusals():
    t = started(tick(3000))
    try:
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            raise NotRun("needs root and setpriv to run the command as another user")
        p = subprocess.run(nobody + [TOOL, "snapshot", str(t.pid)], capture_output=True,
                           text=True, env=tool_env())
        assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout)
        assert p.stderr.strip() == (f"shapetrace: snapshot: pid {t.pid} belongs to user root "
                                    "(uid 0), not to you: run shapetrace snapshot as that user, "
                                    "or as root"), p.stderr
        # already traced: this process seizes it, as a debugger would
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17
        assert libc.ptrace(PTRACE_SEIZE, t.pid, None, None) == 0, ctypes.get_errno()
        try:
            p = snapshot(str(t.pid), check=False)
            me = open("/proc/self/comm").read().strip()
            assert p.returncode == 2, p
            assert p.stderr.strip() == (f"shapetrace: snapshot: pid {t.pid} is already traced "
                                        f"by pid {os.getpid()} ({me}), a debugger or another "
                                        "snapshot: detach it first"), p.stderr
        finally:
            libc.ptrace(PTRACE_INTERRUPT, t.pid, None, None)
            os.waitpid(t.pid, 0x40000000)  # __WALL
            assert libc.ptrace(PTRACE_DETACH, t.pid, None, None) == 0
        assert snapshot(str(t.pid)).returncode == 0
    finally:
        t.kill()
        t.wait()


def test_usage():
    for args, why in (((), "give the PIDs to picture, or --all"),
                      (("--all", "1"), "give PIDs or --all, not both"),
                      (("12x",), "'12x' is not a process id"),
                      (("--merge",), "--merge needs the snapshot FILEs to merge"),
                      (("--merge", "--all", "f"), "--merge reads files; --all takes processes"),
                      (("--jsno", "1"), "unknown option '--jsno'"),
                      (("--site-skip", "", "1"),
                       "--site-skip takes a glob (GLOB, fn:GLOB or !GLOB), not ''")):
        p = snapshot(*args, check=False)
        assert p.returncode == 2 and p.stdout == "", (args, p)
        assert p.stderr == f"shapetrace snapshot: {why}; see shapetrace help snapshot\n", \
            (args, p.stderr)
    h = snapshot("--help")
    for opt in ("--all", "--json", "-o FILE", "--merge", "--full", "--stats", "--site-skip"):
        assert opt in h.stdout, opt
    assert "snapshot" in subprocess.run([TOOL, "--help"], capture_output=True, text=True).stdout
    p = snapshot("-o", os.path.join(TMP, "no", "such", "dir", "f.json"), "1", check=False)
    assert p.returncode == 2 and "No such file or directory" in p.stderr, p.stderr


# ---- several hosts: -o and --merge; every process: --all ----

def test_merge_of_two_hosts():
    """Ranks 0 and 1 pictured in one file and ranks 2 and 3 in another, as two hosts would:
    --merge gives the job's view."""
    job = Job("merge", 4, c_ranks)
    pids = job.rank_pids()
    a, b = os.path.join(TMP, "host-a.json"), os.path.join(TMP, "host-b.json")
    whole = snapshot(*pids).stdout
    pa = snapshot("-o", a, *pids[:2])
    snapshot("-o", b, *pids[2:])
    job.finish()
    assert pa.stdout.startswith("shapetrace snapshot: 2 processes, 1 place"), pa.stdout
    merged = snapshot("--merge", a, b).stdout
    assert group_lines(merged) == group_lines(whole) and len(group_lines(merged)) == 2, merged
    assert merged.splitlines()[1] == whole.splitlines()[1], (merged, whole)
    js = json.loads(snapshot("--merge", "--json", b, a).stdout)
    assert [g["ranks"] for g in js["groups"]] == [[3], [0, 1, 2]], js["groups"]
    assert sorted(p["rank"] for p in js["processes"]) == [0, 1, 2, 3]
    # bad files: one line each, status 2, nothing shown
    bad_json = os.path.join(TMP, "bad.json")
    other = os.path.join(TMP, "other.json")
    wrong = os.path.join(TMP, "wrong.json")
    with open(bad_json, "w") as f:
        f.write("{\"kind\": ")
    with open(other, "w") as f:
        json.dump({"processes": []}, f)
    with open(a) as f:
        doc = json.load(f)
    doc["processes"][0]["pid"] = "12"
    with open(wrong, "w") as f:
        json.dump(doc, f)
    for path, why in ((bad_json, "not JSON"), (other, "not a snapshot file"),
                      (wrong, "processes[0].pid is not a number in range"),
                      (os.path.join(TMP, "missing.json"), "No such file or directory")):
        p = snapshot("--merge", a, path, check=False)
        assert p.returncode == 2 and p.stdout == "", (path, p)
        assert len(p.stderr.splitlines()) == 1 and why in p.stderr and path in p.stderr, p.stderr


def test_all_processes_of_the_user():
    """--all inside a PID namespace of its own (other suites' processes stay out of it): the
    four ranks, not the launcher, which maps no GPU library."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True).returncode != 0:
        raise NotRun("no PID namespace here (unshare --pid --mount-proc)")
    d = os.path.join(TMP, "all")
    os.makedirs(d, exist_ok=True)
    script = f"""
set -e
release={d}/release
{T}/shp_launch -n 4 --timeout 120 -- {T}/snap_ranks 60 $release >{d}/out &
launcher=$!
for i in $(seq 600); do [ "$(grep -c blocking {d}/out)" = 4 ] && break; sleep 0.05; done
sleep 0.2
{TOOL} snapshot --all --json >{d}/all.json
{TOOL} snapshot --all >{d}/all.txt
touch $release
wait $launcher
"""
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
                       env=job_env(), capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr)
    js = json.load(open(os.path.join(d, "all.json")))
    assert sorted(p["rank"] for p in js["processes"]) == [0, 1, 2, 3], js["processes"]
    assert [g["ranks"] for g in js["groups"]] == [[3], [0, 1, 2]], js["groups"]
    text = open(os.path.join(d, "all.txt")).read()
    assert text.splitlines()[1] == "waiting for rank 3: not in a GPU library, while ranks 0, " \
        "1, 2 are", text


def test_full_and_site_skip():
    """--full prints every thread's stack; --site-skip moves the site past a frame."""
    job = Job("full", 4, c_ranks)
    pids = job.rank_pids()
    brief = snapshot(pids[0]).stdout
    full = snapshot("--full", pids[0]).stdout
    skip = snapshot("--site-skip", "fn:step_allreduce", pids[0]).stdout
    env_skip = snapshot(pids[0], env=dict(tool_env(), SHAPETRACE_SITE_SKIP="fn:step_allreduce"))
    job.finish()
    assert brief.count("<- site") == 1 and full.count("<- site") == 2, (brief, full)
    assert "helper (tests/load/snap_ranks.c:" in full
    step = line_of(RANKS_C, "ncclResult_t r = step_allreduce(comm, buf);")
    want = f"main thread in ncclAllReduce at step (tests/load/snap_ranks.c:{step})"
    assert want in skip and want in env_skip.stdout, (skip, env_skip.stdout)


if __name__ == "__main__":
    sys.exit(run_all(globals(), "snapshot", ONLY, TMP))
