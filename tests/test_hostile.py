"""shapetrace tests: hostile applications, run directories and trace files (issue 14). The
application must never be harmed; the readers never crash and always print valid JSON. Crafted
traces get their record checks from common/'s function, through build/tests/shp_craft.
Usage: test_hostile.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import glob
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

from harness import NotRun, run_all, tool_env as env, values_env  # tests/ is on sys.path

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
T = os.path.join(BUILD, "tests")
TMP = tempfile.mkdtemp(prefix="shapetrace-hostile-")
NOBODY = 65534
PRLIMIT = shutil.which("prlimit") or "prlimit"  # util-linux: limits for the application alone
SANITIZED = os.environ.get("SHAPETRACE_SANITIZED") == "1"


def run(cmd, timeout=60, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(), **kw)


def fresh(name):
    d = os.path.join(TMP, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def need_root():
    if os.geteuid() != 0:
        raise NotRun("needs root, to make files of another user")


# ---- the traced application ----

def test_application_that_closes_every_descriptor_is_traced_whole():
    """The preload keeps no descriptor: an application that closes them all and puts its own
    file on every number is neither touched nor stops the trace."""
    d = fresh("closeall")
    mine = os.path.join(d, "mine")
    p = run([TOOL, "run", "--dir", os.path.join(d, "run"), "--", f"{T}/hostile", "closeall", mine,
             "40000"])
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert os.path.getsize(mine) == 17
    assert not [ln for ln in p.stderr.splitlines() if "WARN" in ln], p.stderr
    [q] = procs_of(os.path.join(d, "run"))
    assert q["complete"] and q["events"] == 40003 and q["switched_off"] is None, q


def test_fifo_control_does_not_block():
    d = fresh("fifo")
    os.mkfifo(os.path.join(d, "control"))
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "calls", "3"], timeout=20)
    assert p.returncode == 0, p.stderr
    assert "not a regular file" in p.stderr, p.stderr


def armed_of(d):
    p = run([TOOL, "dump", "--json", d])
    return len(p.stdout.splitlines())


def test_control_writable_by_others_is_ignored():
    d = fresh("ctl-mode")
    c = os.path.join(d, "control")
    open(c, "w").write("armed 0\n")
    os.chmod(c, 0o666)
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "calls", "5"])
    assert p.returncode == 0 and "writable by others: its control file is ignored" in p.stderr, \
        p.stderr
    assert armed_of(d) >= 5


def test_control_of_another_user_is_ignored():
    need_root()
    d = fresh("ctl-owner")
    c = os.path.join(d, "control")
    open(c, "w").write("armed 0\n")
    os.chmod(c, 0o600)
    os.chown(c, NOBODY, NOBODY)
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "calls", "5"])
    assert p.returncode == 0 and "owned by another user" in p.stderr, p.stderr
    assert armed_of(d) >= 5


def test_attach_refuses_another_users_run_and_leaves_nothing():
    need_root()
    d = fresh("attach-owner")
    os.chown(d, NOBODY, NOBODY)
    p = run([TOOL, "attach", d, "--off"])
    assert p.returncode == 2 and "owned by another user" in p.stderr, p.stderr
    assert os.listdir(d) == [], os.listdir(d)
    assert len(p.stderr.strip().splitlines()) == 1


def test_attach_refuses_an_overlong_mark():
    d = fresh("attach-mark")
    p = run([TOOL, "attach", d, "--mark", "x" * 200])
    assert p.returncode == 2 and "at most 127 bytes" in p.stderr, p.stderr


# ---- fingerprints (--values): a module, pinned memory and events per context ----

def values_run(name, args, opts=("--values", "all"), e=None, limit_fds=None):
    """hostile ARGS traced with OPTS in a fresh working directory: (process, files left in that
    directory, run directory)."""
    cwd = fresh(name)
    rd = os.path.join(TMP, name + "-run")
    shutil.rmtree(rd, ignore_errors=True)

    def limit():
        if limit_fds:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_fds, limit_fds))
    p = subprocess.run([TOOL, "run", "--dir", rd, *opts, "--", f"{T}/hostile", *args],
                       capture_output=True, text=True, timeout=60, env=e or values_env(T), cwd=cwd,
                       preexec_fn=limit)
    return p, sorted(os.listdir(cwd)), rd


def test_values_leave_the_application_alone():
    # The same output (its data checked, its CUDA error still pending, its descriptors), exit
    # status and files with fingerprints as without, under a low descriptor limit too.
    base, files0, _ = values_run("values-off", ["values", "40"], opts=())
    assert base.returncode == 0 and "as the failed malloc left it" in base.stdout, base
    for fds in (None, 64):
        p, files, rd = values_run(f"values-on-{fds}", ["values", "40"], limit_fds=fds)
        assert (p.returncode, p.stdout, files) == (0, base.stdout, files0), (fds, p, files)
        assert "fingerprints" not in p.stderr, p.stderr
        d = json.loads(run([TOOL, "analyze", "--json", rd]).stdout)
        assert d["values"]["records"] >= 120 and d["values"]["lost"] == 0, d["values"]


def test_values_driver_failure_leaves_the_application_alone():
    base, files0, _ = values_run("values-fail-off", ["values", "10"], opts=())
    for fn in ("cuLaunchKernel", "cuEventQuery", "cuModuleLoadData"):
        p, files, _ = values_run("values-fail-" + fn, ["values", "10"],
                                 e=values_env(T, SHP_DOUBLE_CU_FAIL=fn))
        assert (p.returncode, p.stdout, files) == (0, base.stdout, files0), (fn, p)
        warn = [ln for ln in p.stderr.splitlines() if "fingerprints switched off" in ln]
        assert len(warn) == 1 and fn in warn[0], (fn, p.stderr)


def test_values_exit_status_and_pending_fingerprints():
    # exit() runs the exit handlers: the fingerprint in flight is read back. _exit() runs none:
    # it stays pending in the trace, which says so; the status is the application's either way.
    p, _, rd = values_run("values-exit", ["values-exit", "7"])
    assert p.returncode == 7 and p.stdout == "leaving with 7\n", p
    d = json.loads(run([TOOL, "analyze", "--json", rd]).stdout)
    assert d["values"]["pending"] == 0 and d["values"]["records"] >= 1, d["values"]
    p, _, rd = values_run("values-_exit", ["values-_exit", "9"])
    assert p.returncode == 9 and p.stdout == "leaving with 9\n", p
    d = json.loads(run([TOOL, "analyze", "--json", rd]).stdout)
    assert d["values"]["pending"] == 1, d["values"]


ERRNO_CALLS = ("cudaMemcpyAsync D2D", "cudaMemcpyAsync Default", "cudaMemcpy D2H",
               "cudaGraphLaunch", "ncclAllReduce", "ncclAllReduce refused")


def test_errno_is_as_the_real_function_left_it():
    # The caller of a traced call sees errno as the real function left it: its own value where
    # the function does not touch it, the function's where it does (SHP_DOUBLE_RT_ERRNO: the
    # runtime double's copies leave 77), while every driver function the fingerprints call leaves
    # 99 (SHP_DOUBLE_CU_ERRNO). The calls take compact records, whose path saves no errno: the
    # values hooks before and after the real call keep it themselves; a refused all-reduce gives
    # its seq back on the same path. With --values, without, with no stacks, and dormant.
    n = 200
    for rt in (None, "77"):
        e = values_env(T, SHP_DOUBLE_CU_ERRNO="99", SHP_DOUBLE_RT_ERRNO=rt)
        u = subprocess.run([f"{T}/hostile", "errno", str(n)], capture_output=True, text=True,
                           timeout=60, env=e)
        want = [f"{c}: {0 if rt and 'Memcpy' in c else n} of {n} returned with errno as set, "
                f"the others with {rt if rt and 'Memcpy' in c else 0}" for c in ERRNO_CALLS]
        assert (u.returncode, u.stdout.splitlines()) == (0, want), (rt, u)
        for opts in (("--values", "all", "--values-site", "*"),
                     ("--values", "all", "--values-site", "*", "--stacks", "none"), (),
                     ("--dormant",)):
            rd = fresh(f"errno-{rt}-{len(opts)}-{opts[:1]}")
            t = subprocess.run([TOOL, "run", "--dir", rd, *opts, "--", f"{T}/hostile", "errno",
                                str(n)], capture_output=True, text=True, timeout=60, env=e)
            assert (t.returncode, t.stdout) == (0, u.stdout), (rt, opts, t)
            if opts[:1] != ("--values",):
                continue
            path = glob.glob(os.path.join(rd, "*.shptrace"))[0]
            kinds = {r[1] for r in records(open(path, "rb").read())}
            assert {14, 15, 17} <= kinds, (opts, kinds)  # compact copies, all-reduces, launches
            d = json.loads(run([TOOL, "analyze", "--json", rd]).stdout)
            # Without call sites only the all-reduces are fingerprinted; with them the copies too.
            least = n if "none" in opts else 4 * n
            assert d["values"]["records"] >= least and d["values"]["lost"] == 0, d["values"]
            dump = run([TOOL, "dump", "--json", rd]).stdout.splitlines()
            seqs = [x["seq"] for x in map(json.loads, dump)
                    if x["op"] == "ncclAllReduce" and x["result"] == 0]
            assert seqs == list(range(n)), seqs[:10]


# ---- the application is harmed in no way: each case runs untraced and traced, and the two
# runs must give the same output, exit status and files (issue 22) ----

def preload_env(d, **extra):
    """The environment for the preload alone (no `run`): SHAPETRACE_DIR set by hand."""
    e = env()
    pre = os.path.join(BUILD, "lib", "libshapetrace.so")
    e["LD_PRELOAD"] = f"{e['LD_PRELOAD']}:{pre}" if e.get("LD_PRELOAD") else pre
    e["SHAPETRACE_DIR"] = d
    e.update(extra)
    return e


def both(name, args, opts=(), alone=None, timeout=120):
    """Runs args untraced, then traced: under `run` (with opts), or with the preload alone when
    alone is a dict of extra environment. '{out}' in args names a directory of each run's own,
    whose files are returned. Returns (untraced, traced, run directory, untraced files, traced
    files), the files as {name: bytes}."""
    top = fresh(name)
    results = []
    for mode in ("untraced", "traced"):
        out = os.path.join(top, mode + "-files")
        os.makedirs(out)
        a = [x.replace("{out}", out) for x in args]
        rdir = os.path.join(top, "run")
        if mode == "untraced":
            p = run(a, timeout=timeout)
        elif alone is not None:
            p = subprocess.run(a, capture_output=True, text=True, timeout=timeout,
                               env=preload_env(rdir, **alone))
        else:
            p = run([TOOL, "run", "--dir", rdir, *opts, "--", *a], timeout=timeout)
        files = {f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out))}
        results.append((p, files))
    (u, uf), (t, tf) = results
    return u, t, os.path.join(top, "run"), uf, tf


def same(u, t, uf, tf):
    assert t.stdout == u.stdout, (u.stdout, t.stdout, t.stderr[-2000:])
    assert t.returncode == u.returncode, (u.returncode, t.returncode, t.stderr[-2000:])
    assert tf == uf, ({k: len(v) for k, v in uf.items()}, {k: len(v) for k, v in tf.items()})


def warnings_of(p):
    return [ln for ln in p.stderr.splitlines() if " WARN " in ln]


def test_trace_file_replaced_while_running_is_left_alone():
    """The trace is opened again by name to grow: a file put in its place is not the trace
    (device and inode), so it is neither grown nor written, and the trace says why it stopped."""
    d = fresh("replaced")
    # 100000 copies after the swap: the trace must grow past the few MiB it is made ahead
    p = subprocess.Popen([TOOL, "run", "--dir", d, "--stacks", "none", "--", f"{T}/hostile",
                          "pause", "10", "100000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env())
    try:
        for _ in range(400):
            traces = [f for f in os.listdir(d) if f.endswith(".shptrace")]
            if traces and procs_of(d)[0]["events"] >= 11:
                break
            time.sleep(0.05)
        path = os.path.join(d, traces[0])
        moved = os.path.join(d, "moved.shptrace")
        os.rename(path, moved)
        open(path, "w").write("decoy\n")
        os.chmod(path, 0o600)
        out, err = p.communicate("go\n", timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0 and out == "pause: ok\n", (p.returncode, out, err)
    assert open(path).read() == "decoy\n"
    q = procs_of(moved)
    assert q[0]["switched_off"]["reason"] == "file_gone", q
    assert q[0]["events"] + q[0]["dropped"] + q[0]["switched_off"]["calls_lost"] == 100012, q


def test_file_size_limit_caps_the_trace_and_raises_no_signal():
    """ulimit -f 64 killed an application that writes 20 KB with SIGXFSZ (exit 153, a 0-byte
    trace); ulimit -f 4096 when its trace passed 4 MiB. The limit is a cap: later records are
    dropped and counted, the header says which limit did it."""
    for kb, n in ((64, 2000), (4096, 100000)):
        u, t, d, uf, tf = both(f"fsize-{kb}", [PRLIMIT, f"--fsize={kb << 10}", f"{T}/hostile",
                                               "write", "{out}/own", "20000", str(n)],
                               opts=["--stacks", "none"])
        same(u, t, uf, tf)
        assert u.returncode == 0 and u.stdout == "wrote 20000 of 20000 bytes\n", u.stdout
        [q] = procs_of(d)
        assert q["capped_by"] == "fsize" and q["dropped"] > 0 and q["events"] > 100, q
        assert q["events"] + q["dropped"] == n + 1, q
        trace = next(f for f in os.listdir(d) if f.endswith(".shptrace"))
        assert os.path.getsize(os.path.join(d, trace)) <= kb << 10
        text = run([TOOL, "analyze", d]).stdout
        assert f"file-size limit (RLIMIT_FSIZE) of {kb} KiB" in text, text


def test_file_size_limit_lowered_later_and_the_applications_own_sigxfsz():
    """The application lowers its limit after its trace exists and counts SIGXFSZ in a
    handler: the trace's growth raises none; its own write past the limit raises its one."""
    u, t, d, uf, tf = both("fsize-later", [f"{T}/hostile", "fsize", "512", "100000",
                                          "{out}/own"], opts=["--stacks", "none"])
    same(u, t, uf, tf)
    assert u.stdout == ("after 100000 copies: 0 SIGXFSZ\n"
                        "own file: 524288 bytes, then File too large, 1 SIGXFSZ\n"), u.stdout
    [q] = procs_of(d)
    assert q["capped_by"] == "fsize" and q["dropped"] > 0 and q["switched_off"] is None, q


def test_application_writing_past_its_file_size_limit_still_dies_of_sigxfsz():
    u, t, _, uf, tf = both("fsize-own", [PRLIMIT, "--fsize=65536", f"{T}/hostile", "write",
                                         "{out}/own", "100000", "10"])
    same(u, t, uf, tf)
    assert u.returncode == -signal.SIGXFSZ and len(uf["own"]) == 65536, (u.returncode, uf)


def test_address_space_limit_leaves_the_application_its_allocation():
    """Run with RLIMIT_AS at its untraced VmSize + 1.5 GiB, an application allocates 1 GiB:
    it did untraced, and failed under the 1088 MiB that the preload mapped at once."""
    if SANITIZED:
        raise NotRun("AddressSanitizer reserves terabytes of shadow: no RLIMIT_AS under it")
    vm = int(run([f"{T}/hostile", "vmsize"]).stdout.split()[0]) << 10
    limit = f"--as={vm + (1536 << 20)}"
    for n in ("10", "3000000"):
        u, t, d, uf, tf = both(f"as-{n}", [PRLIMIT, limit, f"{T}/hostile", "malloc", "1024", n],
                               opts=["--stacks", "none"])
        same(u, t, uf, tf)
        assert u.stdout == "malloc of 1024 MiB succeeded\n", u.stdout
    [q] = procs_of(d)
    assert q["capped_by"] == "address_space" and q["dropped"] > 0, q
    # Native stacks: the call-site cache's table (2 MiB of address space) is not made under the
    # limit, and the allocation still succeeds.
    u, t, d, uf, tf = both("as-native", [PRLIMIT, limit, f"{T}/hostile", "malloc", "1024", "1000"],
                           opts=["--stacks", "native", "--debug", "INFO"])
    same(u, t, uf, tf)
    assert "no call-site cache: an address-space limit" in t.stderr, t.stderr[-2000:]


def test_a_small_trace_maps_little():
    """Without limits, a trace maps its file segment by segment as it grows (64 MiB at a time),
    not 1088 MiB at once."""
    u = run([f"{T}/hostile", "vmsize"])
    p = run([TOOL, "run", "--dir", fresh("vmsize"), "--", f"{T}/hostile", "vmsize"])
    added = (int(p.stdout.split()[0]) - int(u.stdout.split()[0])) >> 10
    assert 0 < added < 100, f"the preload added {added} MiB of address space"


def test_unwinder_holds_no_descriptor_that_the_application_reuses():
    """libunwind's memory-validation pipe took two descriptors; after close_range and dup2 of
    the application's own files onto them, the preload read 1 byte of A and wrote 1 byte of
    stack into B for each check."""
    for stacks in ("native", "python"):
        u, t, _, uf, tf = both(f"reuse-{stacks}", [f"{T}/hostile", "reuse", "{out}/a", "{out}/b",
                                                   "64"], opts=["--stacks", stacks])
        same(u, t, uf, tf)
        assert u.stdout == "read 16 of 16 bytes from A; B has 0 bytes\n", u.stdout


def test_descriptor_limit_is_the_applications_alone():
    """Under ulimit -n 64 the application opened 60 files untraced and 57 traced; one that had
    used them all but one could not open its last one after its first traced call."""
    for mode in ("nofile", "lastfd"):
        u, t, d, uf, tf = both(f"nofile-{mode}", [PRLIMIT, "--nofile=64", f"{T}/hostile", mode,
                                                  "3"], opts=["--stacks", "native"])
        same(u, t, uf, tf)
    assert "opened it again" in u.stdout, u.stdout
    assert "no file descriptor to spare" in "".join(warnings_of(t)), t.stderr


def test_one_descriptor_at_a_time_even_under_an_address_space_limit():
    """The preload holds at most one descriptor at a time: under RLIMIT_AS the share of address
    space it may map is read from /proc/self/statm, which was opened while the trace was open
    again to grow it (two of the application's descriptors at once). strace follows every open
    and close of the traced program, which opens nothing itself once running: from the trace's
    creation on, no open returns while a descriptor of the preload's is still open."""
    if SANITIZED:
        raise NotRun("AddressSanitizer reserves terabytes of shadow: no RLIMIT_AS under it")
    strace = shutil.which("strace")
    if not strace:
        raise NotRun("strace is not installed")
    vm = int(run([f"{T}/hostile", "vmsize"]).stdout.split()[0]) << 10
    d = fresh("one-fd")
    log = os.path.join(d, "strace.log")
    e = preload_env(os.path.join(d, "run"), SHAPETRACE_STACKS="none")
    p = subprocess.run([strace, "-f", "-qq", "-e", "trace=openat,open,close", "-o", log, PRLIMIT,
                        f"--as={vm + (1536 << 20)}", f"{T}/hostile", "calls", "200000"],
                       capture_output=True, text=True, timeout=120, env=e)
    assert p.returncode == 0, p.stderr[-2000:]
    held, seen, opens, grows = {}, False, 0, 0
    for ln in open(log):
        m = re.match(r"(\d+) +(openat|open)\((?:AT_FDCWD, )?\"([^\"]*)\".* = (\d+)$", ln)
        if m:
            pid, path, fd = m.group(1), m.group(3), m.group(4)
            if path.endswith(".shptrace"):
                seen = True
                grows += 1
            if seen:
                opens += 1
                assert not held.get(pid), (ln, held[pid])
                held.setdefault(pid, set()).add(fd)
            continue
        m = re.match(r"(\d+) +close\((\d+)\) += 0", ln)
        if m:
            held.get(m.group(1), set()).discard(m.group(2))
    assert seen and grows > 2 and opens > grows, (grows, opens)


def test_warnings_never_go_into_a_file_on_descriptor_2():
    """An application that had put its data file on descriptor 2 got the cap's warning written
    into it (5 bytes grew to 130); it goes into the trace instead, as a mark dump shows."""
    u, t, d, uf, tf = both("stderr", [f"{T}/hostile", "stderr", "{out}/data", "30000"],
                           opts=["--max-mb", "1"])
    same(u, t, uf, tf)
    assert uf["data"] == b"data\n", uf
    marks = [e["mark"] for e in json.loads("[" + ",".join(
        run([TOOL, "dump", "--json", d]).stdout.splitlines()) + "]") if e["op"] == "mark"]
    assert len(marks) == 1 and marks[0].startswith("shapetrace WARN trace cap of 1 MiB"), marks


def test_umask_0777_still_gives_private_readable_files():
    u, t, d, uf, tf = both("umask", [f"{T}/hostile", "umask", "3"])
    same(u, t, uf, tf)
    assert "shapetrace: 1 trace in" in t.stderr, t.stderr
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for f in os.listdir(d):
        assert stat.S_IMODE(os.stat(os.path.join(d, f)).st_mode) == 0o600, f
    # And when `run` itself runs under umask 0777: the directory it makes, the symbol file.
    d2 = os.path.join(fresh("umask-run"), "run")
    p = subprocess.run([TOOL, "run", "--dir", d2, "--", f"{T}/hostile", "calls", "3"],
                       capture_output=True, text=True, timeout=60, env=env(),
                       preexec_fn=lambda: os.umask(0o777))
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(os.stat(d2).st_mode) == 0o700
    modes = {f: stat.S_IMODE(os.stat(os.path.join(d2, f)).st_mode) for f in os.listdir(d2)}
    assert len(modes) == 2 and set(modes.values()) == {0o600}, modes
    assert run([TOOL, "dump", d2]).returncode == 0
    # The directory `run` names itself, in the current one.
    here = fresh("umask-default")
    p = subprocess.run([TOOL, "run", "--", f"{T}/hostile", "calls", "3"], capture_output=True,
                       text=True, timeout=60, env=env(), cwd=here,
                       preexec_fn=lambda: os.umask(0o777))
    [made] = os.listdir(here)
    assert p.returncode == 0 and stat.S_IMODE(os.stat(os.path.join(here, made)).st_mode) == 0o700


def test_paths_from_the_environment_are_checked_before_use():
    """SHAPETRACE_LIBUNWIND naming a FIFO hung the application in dlopen; a 4,199-byte
    SHAPETRACE_DIR was cut at PATH_MAX and 1,365 directories were made."""
    fifo = os.path.join(fresh("env-fifo"), "fifo")
    os.mkfifo(fifo)
    for name in ("SHAPETRACE_LIBUNWIND", "SHAPETRACE_DEBUG_FILE"):
        u, t, d, uf, tf = both(f"env-{name}", [f"{T}/hostile", "calls", "3"],
                               alone={name: fifo, "SHAPETRACE_STACKS": "native"}, timeout=30)
        same(u, t, uf, tf)
        assert [f"{name}={fifo} is not a regular file; not tracing"] == \
            [ln.split(" WARN ")[1] for ln in warnings_of(t)], t.stderr
        assert not os.path.exists(d), os.listdir(d)
    top = fresh("env-long")
    long_dir = os.path.join(top, "d", *(["abc"] * 1047))
    assert len(long_dir) > 4096
    u, t, _, uf, tf = both("env-long-run", [f"{T}/hostile", "calls", "3"], alone={})
    e = preload_env(long_dir)
    p = subprocess.run([f"{T}/hostile", "calls", "3"], capture_output=True, text=True,
                       timeout=30, env=e)
    assert (p.returncode, p.stdout) == (u.returncode, u.stdout), p.stderr
    assert len(warnings_of(p)) == 1 and "longer" not in p.stderr and "PATH_MAX" in p.stderr, \
        p.stderr
    assert os.listdir(top) == [], os.listdir(top)


def test_symbol_file_is_never_written_through_a_planted_link():
    """`run` wrote <host>.symbols.tmp with O_CREAT|O_TRUNC through a link planted there: a file
    outside the run directory got the symbol text."""
    top = fresh("symlink")
    victim = os.path.join(top, "victim")
    open(victim, "w").write("precious\n")
    d = os.path.join(top, "run")
    os.makedirs(d, mode=0o700)
    host = socket.gethostname()
    for name in (f"{host}.symbols.tmp", f".{host}.symbols.tmp", f"{host}.symbols"):
        os.symlink(victim, os.path.join(d, name))
    os.link(victim, os.path.join(d, "control.tmp"))
    p = run([TOOL, "run", "--dir", d, "--stacks", "native", "--", f"{T}/hostile", "calls", "3"])
    assert p.returncode == 0 and "native frames symbolized" in p.stderr, p.stderr
    assert run([TOOL, "attach", d, "--off"]).returncode == 0
    assert open(victim).read() == "precious\n"
    sym = os.path.join(d, f"{host}.symbols")
    assert not os.path.islink(sym) and stat.S_IMODE(os.stat(sym).st_mode) == 0o600
    assert open(sym, "rb").read(4) != b"prec"
    left = sorted(f for f in os.listdir(d) if f.startswith("."))
    assert left == [f".{host}.symbols.tmp"], left


def test_run_directory_that_others_can_write_is_refused():
    """An existing --dir of mode 0777 was used silently; the preload alone did the same."""
    for mode in (0o777, 0o770, 0o1777):
        d = fresh(f"open-dir-{mode:o}")
        os.chmod(d, mode)
        marker = os.path.join(TMP, "ran")
        p = run([TOOL, "run", "--dir", d, "--", "touch", marker])
        assert p.returncode == 125 and not os.path.exists(marker), (p.returncode, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "writable by others" in p.stderr, \
            p.stderr
        u, t, _, uf, tf = both(f"open-alone-{mode:o}", [f"{T}/hostile", "calls", "3"], alone={})
        e = preload_env(d)
        t = subprocess.run([f"{T}/hostile", "calls", "3"], capture_output=True, text=True,
                           timeout=30, env=e)
        assert (t.returncode, t.stdout) == (u.returncode, u.stdout), t.stderr
        w = warnings_of(t)
        assert len(w) == 1 and f"the run directory {d} is writable by others" in w[0], t.stderr
        assert os.listdir(d) == [], os.listdir(d)


def test_run_directory_of_another_user_is_refused():
    need_root()
    d = fresh("other-user-dir")
    os.chmod(d, 0o700)
    os.chown(d, NOBODY, NOBODY)
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "calls", "2"])
    assert p.returncode == 125 and "owned by another user" in p.stderr, p.stderr
    t = subprocess.run([f"{T}/hostile", "calls", "3"], capture_output=True, text=True,
                       timeout=30, env=preload_env(d))
    assert t.returncode == 0 and "owned by another user" in t.stderr, t.stderr
    assert os.listdir(d) == [], os.listdir(d)


def test_helper_thread_leaves_threads_signals_fork_and_exit_alone():
    """The preload starts a thread of its own (it faults the trace's next pages in ahead of the
    calls): a program of one thread must not meet it. A timer's SIGALRM, sent to the process,
    reaches the program's thread every time; its signal mask stays what it set; each of 20
    forks finds one thread in the parent (as Python's os.fork counts them) and each child
    traces into a file of its own; main ends with pthread_exit, and the process ends with it."""
    u, t, d, uf, tf = both("alone", [f"{T}/hostile", "alone", "200000"],
                           opts=["--debug", "INFO", "--stacks", "none"], timeout=60)
    same(u, t, uf, tf)
    assert u.stdout == ("20 forks: 20 found one thread, 20 children exited 0\n"
                        "SIGALRM: taken on the main thread, 0 on another; signal mask as it was "
                        "set\n"), u.stdout
    assert "a helper thread faults the trace's next pages in" in t.stderr, t.stderr
    procs = procs_of(d)
    assert len(procs) == 21 and all(q["complete"] for q in procs), procs
    assert sorted(q["events"] for q in procs) == [501] * 20 + [200001], procs
    seen = [ln for ln in t.stderr.splitlines() if ln.startswith("hostile: at most")]
    print(f"     ({seen[0][9:]} traced)" if seen else "     (no thread count)")


def test_forks_while_threads_store_stacks():
    """Stacks are stored under a lock (the table of their shared outer frames, format 4): forks
    made while 4 threads store new stacks leave children that store their own and exit 0, and
    the program prints and exits as untraced."""
    u, t, d, uf, tf = both("forkdepths", [f"{T}/scenario", "forkdepths", "20"],
                           opts=["--stacks", "native"])
    same(u, t, uf, tf)
    assert u.stdout == "20 forks: 20 children exited 0\n", u.stdout
    files = [f for f in os.listdir(d) if f.endswith(".shptrace")]
    assert len(files) == 21, files
    for f in files:
        types = {r[1] for r in records(open(os.path.join(d, f), "rb").read())}
        assert 8 in types, (f, types)  # each child stored its stack


def python_that_warns_at_fork():
    """A CPython that warns when os.fork finds other threads (3.12 and later), else None."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for minor in (13, 12):
        for py in [shutil.which(f"python3.{minor}")] + sorted(
                glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin", f"python3.{minor}"))):
            if py and os.access(py, os.X_OK) and subprocess.run(
                    [py, "-c", "pass"], capture_output=True).returncode == 0:
                return py
    return None


FORK_PY = r"""
import ctypes, os, sys
cudart = ctypes.CDLL(sys.argv[1])
dev = ctypes.c_void_p()
assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(64)) == 0
host = ctypes.create_string_buffer(64)
copy = cudart.cudaMemcpy
copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
ok = 0
for k in range(200):
    for i in range(1000):
        assert copy(dev, host, 64, 1) == 0
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    ok += st == 0
print("forks:", ok, "of 200 exited 0")
"""


def test_python_fork_never_sees_the_helper_thread():
    """CPython 3.12 warns (DeprecationWarning, shown under -W always) when os.fork finds
    threads besides the caller, counted by the kernel (/proc/self/stat, native ones included):
    a single-threaded Python program that forks 200 times, 1,000
    traced copies apart (the helper is started a dozen times meanwhile, and without the join
    before each fork the parent found it 9 runs in 10), must not be told about it. A joined
    thread is still counted by the kernel for a moment after pthread_join returns (644 joins
    in 100,000 on 2 cores, once in a CI run of this test): the prepare handler waits that out."""
    py = python_that_warns_at_fork()
    if not py:
        raise NotRun("no CPython 3.12 or later here (pyenv or PATH)")
    script = os.path.join(fresh("pyfork-script"), "fork.py")
    open(script, "w").write(FORK_PY)
    u, t, d, uf, tf = both("pyfork", [py, "-W", "always::DeprecationWarning", script,
                                      f"{T}/libcudart.so.13"], opts=["--debug", "INFO"],
                           timeout=120)
    same(u, t, uf, tf)
    assert u.stdout == "forks: 200 of 200 exited 0\n", u.stdout
    assert "a helper thread faults the trace's next pages in" in t.stderr, t.stderr
    assert "DeprecationWarning" not in u.stderr + t.stderr, t.stderr[-2000:]


# ---- nothing missed in silence ----

def test_capped_trace_is_reported_incomplete_first():
    d = fresh("capped")
    p = run([TOOL, "run", "--dir", d, "--max-mb", "1", "--", f"{T}/hostile", "calls", "30000"])
    assert p.returncode == 0, p.stderr
    a = run([TOOL, "analyze", "--json", d])
    r = json.loads(a.stdout)
    q = r["processes"][0]
    assert q["complete"] is False and q["dropped"] > 10000, q
    text = run([TOOL, "analyze", d]).stdout.splitlines()
    assert "INCOMPLETE" in text[1] and "dropped" in text[1] and "cap" in text[1], text[:3]


def test_run_dir_with_missing_parents_and_run_dir_that_is_a_file():
    d = fresh("rundirs")
    p = run([TOOL, "run", "--dir", os.path.join(d, "a", "b"), "--", f"{T}/hostile", "calls", "2"])
    assert p.returncode == 0 and os.listdir(os.path.join(d, "a", "b")), p.stderr
    f = os.path.join(d, "file")
    open(f, "w").close()
    p = run([TOOL, "run", "--dir", f, "--", f"{T}/hostile", "calls", "2"])
    assert p.returncode == 125 and "Not a directory" in p.stderr, (p.returncode, p.stderr)
    assert "traces in" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_debug_and_max_mb_values_are_validated():
    p = run([TOOL, "run", "--debug", "LOUD", "--", "true"])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    d = fresh("maxmb")
    e = env()
    e["SHAPETRACE_MAX_MB"] = "lots"
    e["SHAPETRACE_DEBUG"] = "LOUD"
    p = subprocess.run([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "calls", "1"],
                       capture_output=True, text=True, timeout=60, env=e)
    assert p.returncode == 0, p.stderr
    assert "SHAPETRACE_MAX_MB=lots is not a number" in p.stderr, p.stderr
    assert "SHAPETRACE_DEBUG=LOUD is not one of" in p.stderr, p.stderr


def procs_of(d):
    return json.loads(run([TOOL, "analyze", "--json", d]).stdout)["processes"]


def test_no_descriptor_to_grow_the_trace_says_so_and_counts_the_lost_calls():
    """An application that has used every descriptor it may open keeps them all: the trace,
    which needs one for a moment to grow, switches off and says why and when."""
    d = fresh("nofd-lost")
    # 100000 copies (6.4 MB of records): the trace must grow after the descriptors are gone
    # (the file is made a few MiB ahead of the records while it still can be)
    args = [PRLIMIT, "--nofile=64", f"{T}/hostile", "nofile", "100000"]
    u = run(args)
    p = run([TOOL, "run", "--dir", os.path.join(d, "run"), "--stacks", "none", "--", *args])
    assert (p.returncode, p.stdout) == (u.returncode, u.stdout), (u.stdout, p.stdout, p.stderr)
    [q] = procs_of(os.path.join(d, "run"))
    off = q["switched_off"]
    assert off and off["reason"] == "no_descriptor" and off["at_s"] > 0, q
    # every call is recorded, dropped or lost: cudaMalloc and 1 copy, cudaMalloc and 100000
    assert q["events"] + q["dropped"] + off["calls_lost"] == 100003, q
    assert q["ended"] == "exited", q
    text = run([TOOL, "analyze", os.path.join(d, "run")]).stdout
    assert "the application had no file descriptor to spare" in text, text
    assert f"{off['calls_lost']} calls after it not recorded" in text, text
    assert "the process exited normally" in text and "cap" not in text, text


def test_full_disk_says_so_and_that_the_process_exited():
    need_root()
    d = fresh("fulldisk")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", d],
                      capture_output=True).returncode != 0:
        raise NotRun("cannot mount a small tmpfs here")
    try:
        p = run([TOOL, "run", "--dir", os.path.join(d, "run"), "--stacks", "none", "--",
                 f"{T}/hostile", "calls", "100000"])
        assert p.returncode == 0, p.stderr
        [q] = procs_of(os.path.join(d, "run"))
        off = q["switched_off"]
        assert off and off["reason"] == "no_space" and off["calls_lost"] > 50000, q
        assert q["events"] + q["dropped"] + off["calls_lost"] == 100001, q
        out = run([TOOL, "dump", os.path.join(d, "run")]).stdout.splitlines()[-1]
        assert "no space left" in out and "the process exited normally" in out, out
        assert "did not exit normally" not in out and "at the cap" not in out, out
    finally:
        subprocess.run(["umount", d])


def test_exec_live_and_killed_processes_are_told_apart():
    d = fresh("fates")
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "exec", "3"])
    assert p.returncode == 0, p.stderr
    ended = sorted(q["ended"] for q in procs_of(d))
    assert ended == ["exec", "exited"], ended
    text = run([TOOL, "analyze", d]).stdout
    assert "the process exec'd (the new image's trace: " in text, text
    st = json.loads(run([TOOL, "status", "--json", d]).stdout)["processes"]
    assert sorted(x["alive"] for x in st) == [False, False], st

    d = fresh("live")
    r = subprocess.Popen([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "linger", "3"],
                         stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    try:
        for _ in range(400):
            a = run([TOOL, "analyze", "--json", d])
            if a.returncode == 0 and json.loads(a.stdout)["processes"][0]["events"] >= 4:
                break
            time.sleep(0.05)
        [q] = procs_of(d)
        assert q["ended"] == "running" and q["complete"] is False, q
        assert "the process is still running" in run([TOOL, "analyze", d]).stdout
        assert json.loads(run([TOOL, "status", "--json", d]).stdout)["processes"][0]["alive"]
        os.kill(q["pid"], 9)
        r.wait(timeout=30)
        [q] = procs_of(d)
        assert q["ended"] == "killed", q
        text = run([TOOL, "analyze", d]).stdout
        assert "did not exit normally (killed or crashed)" in text, text
    finally:
        if r.poll() is None:
            r.kill()
            r.wait()


def test_files_that_are_not_traces_are_not_counted_and_the_rest_is_analysed():
    d = fresh("notraces")
    open(os.path.join(d, "a-1.shptrace"), "wb").close()
    open(os.path.join(d, "b-2.shptrace"), "wb").write(bytes(4096))
    p = run([TOOL, "run", "--dir", d, "--", f"{T}/hostile", "calls", "3"])
    assert p.returncode == 0 and f"shapetrace: 1 trace in {d}\n" in p.stderr, p.stderr
    named = [ln for ln in p.stderr.splitlines() if "not counted as a trace" in ln]
    assert len(named) == 2 and "a-1.shptrace" in named[0] and "b-2" in named[1], p.stderr
    a = run([TOOL, "analyze", d])
    assert a.returncode == 0, (a.returncode, a.stderr)
    skipped = a.stderr.strip().splitlines()
    assert len(skipped) == 2 and all("skipped" in ln for ln in skipped), a.stderr
    assert "INCOMPLETE" in a.stdout.splitlines()[1] and "a-1.shptrace" in a.stdout, a.stdout
    r = json.loads(run([TOOL, "analyze", "--json", d]).stdout)
    assert len(r["processes"]) == 1, r["processes"]
    assert [os.path.basename(u["file"]) for u in r["unreadable"]] == ["a-1.shptrace",
                                                                     "b-2.shptrace"], r
    assert "0 bytes" in r["unreadable"][0]["error"], r["unreadable"]
    # named on the command line, an unreadable file is refused; a directory of nothing else too
    p = run([TOOL, "analyze", os.path.join(d, "a-1.shptrace")])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    e = fresh("notraces-only")
    shutil.copy(os.path.join(d, "b-2.shptrace"), e)
    p = run([TOOL, "analyze", e])
    assert p.returncode == 2 and "no readable trace" in p.stderr, p.stderr


# ---- the readers, on crafted traces ----
# Records are appended to a real trace (the scenario's basic run); shp_craft then gives every
# record of the chain its check, with common/'s function.

CRAFT = os.path.join(T, "shp_craft")
_base = []


def base_trace():
    if not _base:
        d = fresh("base")
        p = run([TOOL, "run", "--dir", d, "--", f"{T}/scenario", "basic"])
        assert p.returncode == 0, p.stderr
        # the run directory holds the symbol file too, in no given order
        path = os.path.join(d, next(f for f in os.listdir(d) if f.endswith(".shptrace")))
        data = open(path, "rb").read()
        _base.append(data[:struct.unpack_from("<Q", data, 72)[0]])
    return bytearray(_base[0])


def records(data):
    off, out = 4096, []
    while off + 8 <= len(data):
        w = struct.unpack_from("<I", data, off)[0]
        size = (w & 0xFFFF) * 8
        if w >> 24 != 0xA7 or size == 0:
            break
        out.append((off, (w >> 16) & 0xFF, size))
        off += size
    return out


def first_of(data, rtype):
    off, _, size = next(r for r in records(data) if r[1] == rtype)
    return bytearray(data[off:off + size])


def word(rtype, size):
    return struct.pack("<II", (0xA7 << 24) | (rtype << 16) | (size // 8), 0)


def pad8(b):
    return b + bytes(-len(b) % 8)


def craft(name, data, *recs, tail_pad=0):
    """Write data plus recs as a complete trace, checks made valid; returns its path."""
    data = bytearray(data)
    for r in recs:
        data += r
    data += bytes(tail_pad)
    struct.pack_into("<Q", data, 72, len(data))  # tail
    struct.pack_into("<Q", data, 80, len(data))  # allocated
    struct.pack_into("<I", data, 20, 1)  # complete
    path = os.path.join(fresh(name), "crafted.shptrace")
    open(path, "wb").write(data)
    p = run([CRAFT, path])
    assert p.returncode == 0, p.stderr
    return path


def readers_survive(path, timeout=30, rss_mb=None):
    """dump --json, status --json and analyze --json: no crash, no hang, no sanitizer report,
    valid JSON on stdout (strict UTF-8); returns the dump's events."""
    events = []
    for cmd in (["dump", "--json"], ["status", "--json"], ["analyze", "--json"]):
        p = subprocess.Popen([TOOL, *cmd, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env())
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise AssertionError(f"{cmd} hangs on {path}")
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert p.returncode in (0, 1, 2), (cmd, p.returncode, err[-2000:])
        assert b"runtime error" not in err and b"Sanitizer" not in err, err[-3000:]
        text = out.decode("utf-8")  # strict: invalid UTF-8 fails here
        if cmd[0] == "dump":
            events = [json.loads(ln) for ln in text.splitlines()]
        elif text.strip():
            json.loads(text)
        if rss_mb:
            assert ru.ru_maxrss < rss_mb * 1024, (cmd, ru.ru_maxrss)
    return events


def pycode(code_id, firstlineno, linetable):
    """A 3.11 code object f in x.py."""
    body = struct.pack("<IIiHHHHI", code_id, 0x030B00F0, firstlineno, 1, 0, 4, 0,
                       len(linetable)) + b"fx.py" + linetable
    rec = pad8(word(12, 0) + body)
    return word(12, len(rec)) + rec[8:]


def full_copy(op=24, stack=0, width=64, height=1, spitch=64, dpitch=64):
    """A full copy record (struct shp_rec_copy, 144 bytes), D2D. The preload writes compact
    records for every copy it can (version 4: 2-D ones too), a full one for a captured copy."""
    ev = struct.pack("<IIQIHHIIiiQQii", 0, 0, 1000, 1, op, 0, stack, 0, 0, 0, 5, 0, -1, -1)
    body = struct.pack("<QQQQQQQQiiB7x", 0x2000, 0x1000, width, height, spitch, dpitch, 0, 0,
                       -1, -1, 3)
    return bytearray(word(5, 144) + ev[8:] + body)


def ev_with_stack(data, stack_id):
    return full_copy(stack=stack_id)


def test_python_stack_that_is_its_own_native_stack():
    data = base_trace()
    # A native stack and a Python stack under one id, the Python one naming it as its native.
    st = word(8, 24) + struct.pack("<IIQ", 200, 1, 0x1234)
    ps = word(13, 24) + struct.pack("<IIII", 200, 200, 0, 0)
    path = craft("py-self", data, st, ps, ev_with_stack(data, 200))
    readers_survive(path)


def test_python_stack_cycle():
    data = base_trace()
    a = word(13, 24) + struct.pack("<IIII", 201, 202, 0, 0)
    b = word(13, 24) + struct.pack("<IIII", 202, 201, 0, 0)
    sa = word(8, 24) + struct.pack("<IIQ", 201, 1, 0x1234)
    sb = word(8, 24) + struct.pack("<IIQ", 202, 1, 0x1234)
    path = craft("py-cycle", data, sa, sb, a, b, ev_with_stack(data, 201))
    readers_survive(path)


def stack_tail(sid, tail, start, *frames):
    """A SHP_REC_STACK_TAIL: stack sid's own frames, then stack tail's from frame `start` on."""
    return word(20, 24 + 8 * len(frames)) + struct.pack(f"<IIII{len(frames)}Q", sid, len(frames),
                                                       tail, start, *frames)


def test_stack_tails_that_name_what_they_should_not():
    """Shared outer frames (version 4) that name themselves, each other, a later stack, a Python
    stack, a stack of 64 frames (the whole would be longer) or a frame past its end."""
    data = base_trace()
    long = word(8, 16 + 8 * 64) + struct.pack("<II64Q", 300, 64, *range(0x1000, 0x1040))
    py = word(13, 24) + struct.pack("<IIII", 301, 300, 0, 0)
    recs = [long, py,
            stack_tail(302, 302, 0, 0x10),        # itself
            stack_tail(303, 304, 1, 0x11),        # a later one
            stack_tail(304, 303, 1, 0x12),        # each other
            stack_tail(305, 301, 0, 0x13),        # a Python stack
            stack_tail(306, 300, 1, 0x14, 0x15),  # 2 + 63 frames: cut at 64
            stack_tail(307, 300, 0xFFFFFFFF),     # past the end, no frame of its own
            stack_tail(0, 300, 1, 0x16)]          # id 0
    evs = [ev_with_stack(data, i) for i in range(300, 308)]
    path = craft("stack-tails", data, *recs, *evs)
    events = readers_survive(path)
    # The crafted copies come last, stacks 300 to 307: each damaged tail keeps its own frames.
    got = [len(e["stack"] or []) for e in events[-8:]]
    assert got == [64, 64, 1, 1, 1, 1, 64, 0], got


def rss_of(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = status
    return ru.ru_maxrss // 1024


def test_huge_stack_and_code_ids_do_not_size_tables():
    data = base_trace()
    st = word(8, 24) + struct.pack("<IIQ", 0x00800000, 1, 0x1234)
    code = pycode(0x00800000, 1, b"")
    path = craft("huge-ids", data, st, code, ev_with_stack(data, 0x00800000))
    readers_survive(path)
    mb = rss_of([TOOL, "dump", "--json", path])
    assert mb < 150, f"dump of a {len(data) // 1024} KB trace used {mb} MB"


def full_coll(comm, comm_rank, nranks, op=1):
    """A full collective record (struct shp_rec_coll, 144 bytes): an all-reduce of 64 fp32."""
    ev = struct.pack("<IIQIHHIIiiQQii", 0, 0, 1000, 1, op, 0, 0, 0, 0, -1, 5, 0, -1, -1)
    body = struct.pack("<QQQQQQQiiiiBB6x", comm, 0, 64, 0x1000, 0x1000, 0, 0, -1, -1,
                       comm_rank, nranks, 7, 0)
    return word(2, 144) + ev[8:] + body


def test_collective_claiming_200_million_ranks():
    data = base_trace()
    c = full_coll(0x5EED, 3, 200_000_000)  # a communicator never created
    path = craft("nranks", data, c)
    readers_survive(path)
    mb = rss_of([TOOL, "analyze", "--json", path])
    assert mb < 300, f"analyze used {mb} MB"


COMM_OFF = 816  # offsetof(struct shp_file_header, comm_off)


def test_compact_collectives_naming_no_communicator():
    data = base_trace()
    c = first_of(data, 15)  # a compact collective
    far = bytearray(c)
    struct.pack_into("<H", far, 46, 383)  # an index no communicator took
    huge = bytearray(c)
    struct.pack_into("<H", huge, 46, 0xFFFF)  # beyond the table
    # The header's first entry pointing into the middle of a record, then past the end.
    struct.pack_into("<Q", data, COMM_OFF, 4096 + 8)
    path = craft("cidx", data, far, huge)
    ev = readers_survive(path)
    colls = [e for e in ev if e["op"] == "ncclAllReduce"]
    # the first names index 0, now pointing nowhere; the last two name no entry
    assert len(colls) > 3 and colls[-1]["comm"] is None and colls[-2]["comm"] is None, colls[-2:]
    assert colls[0]["comm"] is None and colls[0]["nranks"] is None, colls[0]
    struct.pack_into("<Q", data, COMM_OFF, 1 << 60)
    readers_survive(craft("cidx-far", data))


def with_membership(data, pid, rank, nranks, env_rank=None):
    """data as another process's trace (pid) that holds `rank` of `nranks` of the base trace's
    first communicator, in every record that says so."""
    data = bytearray(data)
    struct.pack_into("<Q", data, 24, pid)
    struct.pack_into("<i", data, 60, rank)  # first_comm_rank
    if env_rank is not None:
        struct.pack_into("<i", data, 56, env_rank)
    first = None
    for off, rtype, size in records(data):
        if rtype != 1:
            continue
        cid = struct.unpack_from("<Q", data, off + 64)[0]
        first = cid if first is None else first
        if cid == first:
            struct.pack_into("<ii", data, off + 56, rank, nranks)  # what NCCL reported
            struct.pack_into("<ii", data, off + 88, rank, nranks)  # the arguments
    return data


def analyze_crafted(*paths):
    p = run([TOOL, "analyze", "--json", *paths])
    assert p.returncode in (0, 1), (p.returncode, p.stderr)
    r = json.loads(p.stdout)
    assert p.returncode == (1 if r["findings"] else 0)
    return r, run([TOOL, "analyze", *paths])


def test_one_communicator_of_two_sizes_is_a_finding():
    """Issue 22 item 9: one trace says the communicator has 1 rank, another that it has 2 (and
    holds rank 1): before, no finding and exit 0."""
    base = base_trace()
    a = craft("size-a", base)
    b = craft("size-b", with_membership(base, 999001, 1, 2))
    r, text = analyze_crafted(a, b)
    kinds = [f["kind"] for f in r["findings"]]
    assert "membership_conflict" in kinds, kinds
    f = next(f for f in r["findings"] if f["kind"] == "membership_conflict")
    assert "disagree on the size" in f["summary"], f["summary"]
    assert ("1 rank," in f["summary"] or "says 1;" in f["summary"]) and \
        ("2 ranks," in f["summary"] or "says 2;" in f["summary"]), f["summary"]
    assert "999001" in f["summary"], f["summary"]
    assert text.returncode == 1 and "no findings" not in text.stdout


def test_two_processes_claiming_one_rank_are_named_both():
    """Issue 22 item 11: two processes both claim rank 1 of a 2-rank communicator: before, the
    report blamed rank 0; the finding names both processes."""
    base = base_trace()
    a = craft("dup-a", with_membership(base, 999010, 0, 2, env_rank=0))
    b = craft("dup-b", with_membership(base, 999011, 1, 2, env_rank=1))
    c = craft("dup-c", with_membership(base, 999012, 1, 2, env_rank=2))
    r, _ = analyze_crafted(a, b, c)
    f = r["findings"][r["first"]]
    assert f["kind"] == "membership_conflict", [x["summary"] for x in r["findings"]]
    assert sorted(f["ranks"]) == [1, 2], f
    assert "999011" in f["summary"] and "999012" in f["summary"], f["summary"]
    assert "both claim rank 1" in f["summary"], f["summary"]
    assert 0 not in f["ranks"]


def test_collectives_tied_to_no_communicator_are_counted():
    """Issue 22 item 10: the header's communicator index points at another record, so no
    collective can be aligned: before, '0 collectives aligned' and 'the ranks agree', exit 0."""
    data = base_trace()
    copy = next(off for off, rtype, _ in records(data) if rtype in (5, 14))
    struct.pack_into("<Q", data, COMM_OFF, copy)  # index 0 names a copy record
    path = craft("untied", data)
    r, text = analyze_crafted(path)
    f = next((f for f in r["findings"] if f["kind"] == "untied_calls"), None)
    assert f, [x["summary"] for x in r["findings"]]
    assert f["severity"] == "warning" and "could not be tied to a communicator" in f["summary"]
    n = int(f["summary"].split()[0])
    assert n >= 4, f["summary"]  # the compact all-reduce, all-gather, broadcast, send, receive
    assert text.returncode == 1 and "agree on every collective" not in text.stdout, text.stdout


def test_byte_counts_that_wrap_are_a_finding():
    """Issue 22 item 13: an all-reduce of 2^62 fp32 elements on a 1 KiB buffer: before, 0 bytes
    and no finding."""
    data = base_trace()
    c = bytearray(full_coll(0x5EED, 0, 1))
    struct.pack_into("<Q", c, 80, 1 << 62)  # count
    struct.pack_into("<QQ", c, 88, 0x7D0000000000, 0x7D0000000000)  # the 4 KiB allocation
    path = craft("wrap", data, bytes(c))
    ev = readers_survive(path)
    big = [e for e in ev if e["op"] == "ncclAllReduce" and e["count"] == 1 << 62]
    assert big and big[0]["bytes"] is None and big[0]["recv_bytes"] is None, big
    r, _ = analyze_crafted(path)
    f = next((f for f in r["findings"] if f["kind"] == "impossible_size"), None)
    assert f and "4611686018427387904 fp32 elements" in f["summary"], \
        [x["summary"] for x in r["findings"]]
    assert f["events"][0]["count"] == 1 << 62


def test_a_seq_far_ahead_is_lined_up_at_once():
    """A collective whose seq is 2^40 places ahead of the rank's others (damage, or a rank armed
    that late): the places between are not known, and are passed in one step, not one by one
    (the fuzzer found the analysis running for hours)."""
    data = base_trace()
    first = next(off for off, rtype, _ in records(data) if rtype == 1)
    cid = struct.unpack_from("<Q", data, first + 64)[0]
    c = bytearray(full_coll(cid, 0, 1))
    struct.pack_into("<Q", c, 72, 1 << 40)  # seq
    path = craft("far-seq", data, bytes(c))
    t0 = time.monotonic()
    readers_survive(path, timeout=20)
    assert time.monotonic() - t0 < 20


def test_a_collective_record_of_no_collective_is_skipped():
    """A collective record whose op is 0 (no call) and whose count is near 2^64: taken for a
    call, it was queued as a run of unknown places that long and retired one place at a time
    (the fuzzer found the analysis running for hours). Such a record is damage: skipped."""
    data = base_trace()
    first = next(off for off, rtype, _ in records(data) if rtype == 1)
    cid = struct.unpack_from("<Q", data, first + 64)[0]
    c = bytearray(full_coll(cid, 0, 1))
    struct.pack_into("<H", c, 20, 0)  # op: none
    struct.pack_into("<Q", c, 80, (1 << 64) - (1 << 28))  # count
    path = craft("op-none", data, bytes(c))
    t0 = time.monotonic()
    readers_survive(path, timeout=20)
    assert time.monotonic() - t0 < 20


def test_expectation_file_that_is_a_fifo_does_not_block():
    """Issue 22 item 14: analyze --expect FIFO hung in open()."""
    d = fresh("expect-fifo")
    fifo = os.path.join(d, "expect.json")
    os.mkfifo(fifo)
    path = craft("expect-fifo-trace", base_trace())
    p = run([TOOL, "analyze", "--expect", fifo, path], timeout=20)
    assert p.returncode == 2 and "not a regular file" in p.stderr, (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_2d_copy_with_a_pitch_that_wraps():
    data = base_trace()
    c = full_copy(op=25, width=8, height=2, spitch=1 << 63, dpitch=1 << 63)  # cudaMemcpy2D
    path = craft("pitch", data, c)
    readers_survive(path, timeout=20)
    # A compact 2-D copy (version 4) holds 48-bit pitches and 32-bit heights: 2^32 - 1 rows at
    # a pitch of 2^47 wrap as well.
    cc = first_of(data, 19)
    struct.pack_into("<QQ", cc, 64, (1 << 47) | (0xFFFF << 48), (1 << 47) | (0xFFFF << 48))
    path = craft("pitch-compact", data, cc)
    readers_survive(path, timeout=20)


def test_resync_after_a_torn_record_is_linear():
    data = base_trace()
    # A torn record (zero word), then 4 MB of words that each claim to start the largest record.
    junk = word(12, 0xFFFF * 8)[:4] + b"\x55\x55\x55\x55"
    body = bytes(8) + junk * ((4 << 20) // 8)
    path = craft("resync", data, body)
    t0 = time.monotonic()
    p = run([TOOL, "dump", path], timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 0 and "torn" in p.stdout, (p.returncode, p.stderr[-500:])
    assert took < 15, f"dump took {took:.1f} s"


def ending_the_file(data, last):
    """The records that make `last` end the file at a page boundary, so that reading past it
    faults: a filler stack, then last."""
    filler = (-(len(data) + len(last))) % 4096
    if filler < 16:
        filler += 4096
    n = (filler - 16) // 8
    return [word(8, filler) + struct.pack("<II", 204, n) + bytes(8 * n), last]


def test_mark_without_nul_at_the_end_of_the_file():
    data = base_trace()
    mark = word(10, 144) + struct.pack("<Q", 1) + b"M" * 128
    path = craft("mark-nul", data, *ending_the_file(data, mark))
    assert os.path.getsize(path) % 4096 == 0
    ev = readers_survive(path)
    marks = [e for e in ev if e.get("op") == "mark"]
    assert marks and marks[0]["mark"] == "M" * 128, marks


def test_invalid_utf8_in_marks_host_and_exe_gives_valid_json():
    data = base_trace()
    data[312:312 + 8] = b"h\xffst\xc3\x00\x00\x00"  # host: a stray byte, a cut sequence
    data[376:376 + 6] = b"/x\xed\xa0\x80\x00"  # exe: a surrogate
    text = "é".encode() * 63 + b"\xc3"  # 127 bytes, cut in the middle of a character
    mark = word(10, 144) + struct.pack("<Q", 1) + text + b"\x00"
    path = craft("utf8", data, mark)
    ev = readers_survive(path)
    assert ev and ev[0]["host"] == "h\ufffdst\ufffd", ev[0]["host"]


def test_module_build_id_longer_than_its_field():
    data = base_trace()
    # A full module record (SHP_REC_MODULE, written before version 6): build_id_len 255, and no
    # path, the record ending right after its 32-byte build id field.
    m = word(9, 80) + struct.pack("<QQQB5xH", 0x1000, 0x1000, 0x2000, 255, 0) + bytes(40)
    path = craft("buildid", data, *ending_the_file(data, m))
    readers_survive(path)
    # A compact one (version 6): the build id and path it claims run past the end of the file.
    c = first_of(data, 23)
    plen, idlen = struct.unpack_from("<HB", c, 24)
    assert plen and idlen == 20, (plen, idlen)
    for claim in ((plen, 255), (0xFFFF, idlen)):
        struct.pack_into("<HB", c, 24, *claim)
        path = craft("buildid-c", data, *ending_the_file(data, c))
        readers_survive(path)


def test_compact_ends_and_allocations_that_say_what_they_cannot():
    """Version 6's compact records of a communicator's end and of an allocation, crafted: an end
    whose index names no communicator record (it reads as an end of no known communicator), an
    end and an allocation whose op is of another class (damage: not read as calls)."""
    data = base_trace()
    end, alloc = first_of(data, 21), first_of(data, 22)
    nowhere = bytearray(end)
    struct.pack_into("<H", nowhere, 36, 383)  # the table's last index, which names nothing
    wrong_end, wrong_alloc = bytearray(end), bytearray(alloc)
    wrong_end[20] = wrong_alloc[20] = 1  # ncclAllReduce's op
    path = craft("compact-rare", data, nowhere, wrong_end, wrong_alloc)
    events = readers_survive(path)
    last = events[-1]
    assert last["op"] == "ncclCommDestroy" and last["comm"] is None, last
    assert [e["op"] for e in events].count("ncclAllReduce") == \
        [e["op"] for e in readers_survive(craft("compact-rare-0", data))].count("ncclAllReduce")


def test_python_line_table_overflow():
    data = base_trace()
    code = pycode(1, 2**31 - 1, bytes([0x80 | (11 << 3)]))  # one entry: line + 1
    ps = word(13, 32) + struct.pack("<IIIIII", 203, 0, 1, 0, 1, 0x80000000)
    path = craft("linetable", data, code, ps, ev_with_stack(data, 203))
    ev = readers_survive(path)
    frames = [f for e in ev if e.get("stack") for f in e["stack"] if f.startswith("py: f")]
    assert frames and ":-" not in frames[0], frames


def test_fifo_named_like_a_trace():
    d = fresh("fifo-trace")
    shutil.copy(craft("fifo-src", base_trace()), os.path.join(d, "real.shptrace"))
    os.mkfifo(os.path.join(d, "a.shptrace"))
    for cmd in READERS:
        p = run([TOOL, *cmd(d)], timeout=20, cwd=d)
        assert p.returncode in (0, 1), (cmd(d), p.returncode, p.stderr)
        skipped = [ln for ln in p.stderr.splitlines() if "not a regular file; skipped" in ln]
        assert len(skipped) == 1 and "a.shptrace" in skipped[0], (cmd(d), p.stderr)


# ---- one policy for every command (issue 22, item 12) ----
# Every command that reads traces opens them through one session (tools/lib/session.c): a file of
# a run directory that is no readable trace is named and skipped, an empty run directory among
# other PATHs is a note, a PATH named that is no readable trace is refused, and one function says
# whether a trace is complete.

GEN = os.path.join(BUILD, "tests", "gen_traces")
# Each reader, as a function of the PATHs it reads; export and report write into the cwd.
READERS = (
    lambda *d: ["analyze", *d],
    lambda *d: ["analyze", "--json", *d],
    lambda *d: ["dump", *d],
    lambda *d: ["dump", "--json", *d],
    lambda *d: ["status", "--json", *d],
    lambda *d: ["status", *d],
    lambda *d: ["export", "-o", "out.json", *d],
    lambda *d: ["export", "--format", "perfetto", "-o", "out.pf", *d],
    lambda *d: ["report", "--html", "out.html", *d],
)


def gen_run(name, nranks=2, nevents=40):
    d = fresh(name)
    p = run([GEN, d, str(nranks), str(nevents)])
    assert p.returncode == 0, p.stderr
    return d


def test_unreadable_files_of_a_run_directory_are_skipped_by_every_command():
    """A 0-byte trace (a process killed as it created it) and junk beside two traces: every
    command names each one once, skips it, says the output is partial and exits as it would
    without them. dump, status, export and report refused the directory before; status listed
    the 0-byte file as a process of host '', pid 0, idle 1.8e9 s."""
    d = gen_run("policy-junk")
    open(os.path.join(d, "zero.shptrace"), "wb").close()
    open(os.path.join(d, "junk.shptrace"), "wb").write(b"x" * 5000)
    for cmd in READERS:
        p = run([TOOL, *cmd(d)], cwd=d)
        assert p.returncode == 0, (cmd(d), p.returncode, p.stderr)
        named = [ln for ln in p.stderr.splitlines() if "; skipped: " in ln]
        assert len(named) == 2 and "junk.shptrace" in named[0] and "zero.shptrace" in named[1], \
            (cmd(d), p.stderr)
    events = run([TOOL, "dump", "--json", d]).stdout.splitlines()
    assert len(events) == 80, len(events)
    st = json.loads(run([TOOL, "status", "--json", d]).stdout)
    assert [q["pid"] for q in st["processes"]] == [10000, 10001], st["processes"]
    assert all(q["host"] and q["idle_s"] < 1e8 for q in st["processes"]), st["processes"]
    assert [os.path.basename(u["file"]) for u in st["unreadable"]] == ["junk.shptrace",
                                                                      "zero.shptrace"], st
    assert "2 files unreadable" in run([TOOL, "status", d]).stdout.splitlines()[0]
    run([TOOL, "export", "-o", "out.json", d], cwd=d)
    names = [e["args"]["name"] for e in json.load(open(os.path.join(d, "out.json")))["traceEvents"]
             if e.get("name") == "process_name"]
    assert len(names) == 2, names
    run([TOOL, "report", "--html", "out.html", d], cwd=d)
    page = open(os.path.join(d, "out.html")).read()
    assert 'id="unreadable"' in page and "2 files could not be read" in page, page[-2000:]
    # a directory of nothing else is refused, the files named first
    e = fresh("policy-junk-only")
    shutil.copy(os.path.join(d, "junk.shptrace"), e)
    for cmd in READERS:
        p = run([TOOL, *cmd(e)], cwd=e)
        assert p.returncode == 2 and "no readable trace in" in p.stderr, (cmd(e), p.stderr)


def test_an_empty_run_directory_among_others_is_a_note():
    """`shapetrace run ls` leaves an empty run directory: `analyze shapetrace-*/` and export
    failed on it. Beside others it is a note; alone it is refused."""
    d = gen_run("policy-full")
    e = fresh("policy-empty")
    for cmd in READERS:
        p = run([TOOL, *cmd(e, d)], cwd=d)
        if cmd(e)[0] == "status":  # status reads one RUN_DIR
            continue
        assert p.returncode == 0, (cmd(e, d), p.returncode, p.stderr)
        assert f"shapetrace: note: {e}: no traces in it\n" in p.stderr, (cmd(e, d), p.stderr)
        p = run([TOOL, *cmd(e)], cwd=d)
        assert p.returncode == 2 and "no traces in it" in p.stderr, (cmd(e), p.stderr)
    p = run([TOOL, "status", e])
    assert p.returncode == 2 and "no traces in it (yet)" in p.stderr, p.stderr


def test_a_path_named_that_is_no_readable_trace_is_refused_by_every_command():
    d = gen_run("policy-named")
    junk = os.path.join(d, "junk.shptrace")
    open(junk, "wb").write(b"x" * 5000)
    for cmd in READERS:
        if cmd(d)[0] == "status":
            continue
        p = run([TOOL, *cmd(junk, os.path.join(d, "gen-0.shptrace"))], cwd=d)
        assert p.returncode == 2, (cmd(junk), p.returncode)
        assert f"shapetrace: {junk}: not a shapetrace trace (bad magic)\n" in p.stderr, p.stderr
    p = run([TOOL, "dump", junk, os.path.join(d, "gen-0.shptrace")])
    assert "== " + os.path.join(d, "gen-0.shptrace") in p.stdout  # dump prints the others


def test_one_rule_of_completeness_for_every_command():
    """A trace cut at 5,000 bytes of its length, its header still saying it exited: status
    --json said complete:true where dump and analyze said incomplete."""
    d = gen_run("policy-cut", 2, 400)
    path = os.path.join(d, "gen-1.shptrace")
    data = open(path, "rb").read()
    assert len(data) > 6000, len(data)
    open(path, "wb").write(data[:5000])
    st = json.loads(run([TOOL, "status", "--json", d]).stdout)["processes"]
    an = json.loads(run([TOOL, "analyze", "--json", d]).stdout)["processes"]
    assert [q["complete"] for q in st] == [q["complete"] for q in an] == [True, False], (st, an)
    last = run([TOOL, "dump", path]).stdout.splitlines()[-1]
    assert "INCOMPLETE (" in last and "the file is shorter than its header says" in last, last
    run([TOOL, "export", "-o", "out.json", d], cwd=d)
    names = [e["args"]["name"] for e in json.load(open(os.path.join(d, "out.json")))["traceEvents"]
             if e.get("name") == "process_name"]
    assert [n.endswith("INCOMPLETE") for n in names] == [False, True], names
    run([TOOL, "report", "--html", "out.html", d], cwd=d)
    page = open(os.path.join(d, "out.html")).read()
    assert "2 processes, 1 of them incomplete" in page, page


def small_copies(name, n):
    """n traces of 2 events (a cudaMalloc and a copy, with native call sites in libc and the
    test program), copies of one with distinct pids, beside that run's symbol file."""
    src = fresh(name + "-src")
    p = run([TOOL, "run", "--dir", src, "--", f"{T}/hostile", "calls", "1"])
    assert p.returncode == 0, p.stderr
    one = next(f for f in os.listdir(src) if f.endswith(".shptrace"))
    data = open(os.path.join(src, one), "rb").read()
    data = bytearray(data[:struct.unpack_from("<Q", data, 72)[0]])
    d = fresh(name)
    for f in os.listdir(src):
        if f.endswith(".symbols"):
            shutil.copy(os.path.join(src, f), d)
    for i in range(n):
        struct.pack_into("<Q", data, 24, 1000000 + i)  # pid
        open(os.path.join(d, f"copy-{1000000 + i}.shptrace"), "wb").write(data)
    return d


def test_export_and_report_of_many_small_traces_fit_a_memory_cap():
    """export symbolized every trace's stacks on its own: 100 traces of 2 events took 1.6 GiB
    and 7 s, 500 took 8 GiB. The session symbolizes each module once for the command: 200
    traces export (and report) within an address space of 256 MiB (under a sanitizer, which
    reserves its own address space, a peak RSS of 256 MiB)."""
    d = small_copies("many-small", 200)
    cap = 256 << 20
    sanitized = os.environ.get("SHAPETRACE_SANITIZED") == "1"

    def capped():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    for cmd in (["export", "-o", "out.json", d], ["report", "--html", "out.html", d]):
        p = subprocess.Popen([TOOL, *cmd], cwd=d, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env(),
                             preexec_fn=None if sanitized else capped)
        _, status, ru = os.wait4(p.pid, 0)
        err = p.stderr.read().decode()
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (cmd, status, err[-500:])
        assert "200 processes" in err, err[-500:]
        if sanitized:
            assert ru.ru_maxrss * 1024 < cap, (cmd, ru.ru_maxrss)
    names = [e for e in json.load(open(os.path.join(d, "out.json")))["traceEvents"]
             if e.get("name") == "process_name"]
    assert len(names) == 200, len(names)


# ---- options ----

def test_json_shows_both_sides_of_a_count_finding_in_one_factoring():
    """--dim hidden=1024 --dim tp=4: one token fewer is [511, hidden/tp] next to [512,
    hidden/tp] in the JSON as in the text, not next to [32, hidden*tp]."""
    d = fresh("factoring")
    e = env()
    e["SHAPETRACE_DOUBLE_TIMEOUT"] = "2"
    subprocess.run([TOOL, "run", "--dir", d, "--", f"{T}/shp_launch", "-n", "4", "--",
                    os.path.join(BUILD, "examples", "desync")], capture_output=True, timeout=120,
                   env=e)
    dims = ["--dim", "hidden=1024", "--dim", "tp=4"]
    f = json.loads(run([TOOL, "analyze", "--json", *dims, d]).stdout)["findings"][0]
    assert f["kind"] == "count_mismatch", f["summary"]
    assert f["events"][0]["shape"] == "[511, hidden/tp]", f["events"][0]["shape"]
    assert f["expected"]["shape"] == "[512, hidden/tp]", f["expected"]["shape"]
    f = json.loads(run([TOOL, "analyze", "--json", d]).stdout)["findings"][0]
    assert f["events"][0]["shape"] is None and f["expected"]["shape"] is None, f


# The cases of an application harmed or a file written outside the run (issue 22): `harm` as
# the only NAME runs just these (the ThreadSanitizer tree's run, tests/run.sh).
HARM = {
    "test_application_that_closes_every_descriptor_is_traced_whole",
    "test_no_descriptor_to_grow_the_trace_says_so_and_counts_the_lost_calls",
    "test_trace_file_replaced_while_running_is_left_alone",
    "test_file_size_limit_caps_the_trace_and_raises_no_signal",
    "test_file_size_limit_lowered_later_and_the_applications_own_sigxfsz",
    "test_application_writing_past_its_file_size_limit_still_dies_of_sigxfsz",
    "test_address_space_limit_leaves_the_application_its_allocation",
    "test_a_small_trace_maps_little",
    "test_unwinder_holds_no_descriptor_that_the_application_reuses",
    "test_descriptor_limit_is_the_applications_alone",
    "test_one_descriptor_at_a_time_even_under_an_address_space_limit",
    "test_warnings_never_go_into_a_file_on_descriptor_2",
    "test_umask_0777_still_gives_private_readable_files",
    "test_paths_from_the_environment_are_checked_before_use",
    "test_symbol_file_is_never_written_through_a_planted_link",
    "test_run_directory_that_others_can_write_is_refused",
    "test_run_directory_of_another_user_is_refused",
    "test_helper_thread_leaves_threads_signals_fork_and_exit_alone",
    "test_python_fork_never_sees_the_helper_thread"}
assert HARM <= set(globals()), HARM - set(globals())

if __name__ == "__main__":
    sys.exit(run_all(globals(), "hostile", HARM if ONLY == {"harm"} else ONLY, TMP))
