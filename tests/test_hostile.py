"""shapetrace tests: hostile applications, run directories and trace files (issue 14). The
application must never be harmed; the readers never crash and always print valid JSON. Crafted
traces get their record checks from common/'s function, through build/tests/shp_craft.
Usage: test_hostile.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import json
import os
import resource
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time

from harness import NotRun, run_all, tool_env as env  # the script's own folder, tests/, is on sys.path

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
T = os.path.join(BUILD, "tests")
TMP = tempfile.mkdtemp(prefix="shapetrace-hostile-")
NOBODY = 65534


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

def test_closed_trace_descriptor_never_touches_the_application():
    d = fresh("closeall")
    mine = os.path.join(d, "mine")
    p = run([TOOL, "run", "--dir", os.path.join(d, "run"), "--", f"{T}/hostile", "closeall", mine,
             "40000"])
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert os.path.getsize(mine) == 17
    warn = [ln for ln in p.stderr.splitlines() if "closed the trace's file descriptor" in ln]
    assert len(warn) == 1, p.stderr


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


def test_closed_descriptor_says_when_tracing_switched_off_and_counts_the_lost_calls():
    d = fresh("closeall-lost")
    p = run([TOOL, "run", "--dir", os.path.join(d, "run"), "--stacks", "none", "--",
             f"{T}/hostile", "closeall", os.path.join(d, "mine"), "40000"])
    assert p.returncode == 0, p.stderr
    [q] = procs_of(os.path.join(d, "run"))
    off = q["switched_off"]
    assert off and off["reason"] == "fd_closed" and off["at_s"] > 0, q
    # every call is recorded, dropped or lost: cudaMalloc and 1 copy, cudaMalloc and 40000
    assert q["events"] + q["dropped"] + off["calls_lost"] == 40003, q
    assert q["ended"] == "exited", q
    text = run([TOOL, "analyze", os.path.join(d, "run")]).stdout
    assert "the application closed the trace's file descriptor" in text, text
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


def ev_with_stack(data, stack_id):
    c = first_of(data, 5)
    struct.pack_into("<I", c, 24, stack_id)
    return c


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
    c = first_of(data, 5)
    struct.pack_into("<H", c, 20, 25)  # cudaMemcpy2D
    struct.pack_into("<QQQQ", c, 80, 8, 2, 1 << 63, 1 << 63)  # width, height, spitch, dpitch
    path = craft("pitch", data, c)
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
    m = first_of(data, 9)
    path_len = struct.unpack_from("<H", m, 38)[0]
    m = m[:72] + bytes(8)  # the path cut to nothing: the record ends right after its build id
    struct.pack_into("<H", m, 38, 0)
    m[32] = 255  # build_id_len
    struct.pack_into("<I", m, 0, (0xA7 << 24) | (9 << 16) | (len(m) // 8))
    assert path_len
    path = craft("buildid", data, *ending_the_file(data, m))
    readers_survive(path)


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
    for cmd in (["dump", "--json"], ["status", "--json"], ["analyze", "--json"]):
        p = run([TOOL, *cmd, d], timeout=20)
        assert p.returncode in (0, 1, 2), (cmd, p.returncode)
        assert "not a regular file" in p.stderr or cmd[0] == "status", (cmd, p.stderr)


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


# ---- the command line ----

def test_bare_command_and_unknown_command_are_one_line():
    for args, what in (([], "no command given"), (["frob"], "unknown command 'frob'"),
                       (["help", "frob"], "unknown command 'frob'")):
        p = run([TOOL, *args])
        assert p.returncode == 2 and p.stdout == "", (args, p.returncode, p.stdout)
        assert p.stderr == f"shapetrace: {what}; see shapetrace --help\n", (args, p.stderr)


if __name__ == "__main__":
    sys.exit(run_all(globals(), "hostile", ONLY, TMP))
