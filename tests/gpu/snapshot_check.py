"""shapetrace GPU check: `shapetrace snapshot --all` on a hung torch job that was started WITHOUT
shapetrace (snapshot_hang.py under torchrun, its ranks sharing one GPU). It waits until every
rank is about to block, takes three snapshots (--all --stats; the first with --json), then more
of the ranks (--json) until a waiting rank's main thread was caught inside the vDSO (CUDA's
spin-wait calls clock_gettime) three times or 40 s have passed, lets the job go on and checks
that it ends as it would have. Prints one verdict line per check, 'PASS|FAIL|
INFO NAME: what was seen', after the snapshot's text view, and exits 0 when no check failed.
The tool is $SHP_TOOL, run with LD_LIBRARY_PATH=$SHP_TOOL_LD when set; the job never sees
either. Usage: snapshot_check.py WORKDIR [NRANKS]"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "snapshot_hang.py")
WALL_TARGET_S = 2.0  # the whole snapshot of the job's processes
STOP_TARGET_MS = 50  # each process stopped, on average
VDSO_BUDGET_S = 40  # more snapshots, until a waiting rank's main thread is caught in the vDSO
VDSO_FRAME = re.compile(r"__vdso_\w+\+0x[0-9a-f]+ \(\[vdso\]\)")


def line_of(contains):
    with open(JOB, encoding="utf-8") as f:
        found = [i + 1 for i, t in enumerate(f.read().splitlines()) if contains in t]
    assert len(found) == 1, (contains, found)
    return found[0]


def tool(*args):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if os.environ.get("SHP_TOOL_LD"):
        env["LD_LIBRARY_PATH"] = os.environ["SHP_TOOL_LD"]
    t0 = time.monotonic()
    p = subprocess.run([os.environ.get("SHP_TOOL", "shapetrace"), "snapshot", *args], env=env,
                       capture_output=True, text=True, timeout=120)
    return p, time.monotonic() - t0


def descendants(root):
    """The pids of root's process tree (torchrun, its agent and the ranks), root included."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def verdict(ok, name, what):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {what}")
    return ok


def ranked(js, tree):
    return [p for p in js["processes"] if p["pid"] in tree and p["rank"] is not None]


def in_vdso(t):
    return bool(t["stack"]) and "[vdso" in t["stack"][0]


def more_pictures(first, tree, n):
    """The first snapshot's JSON and more of the ranks alone (--json), taken until the main
    thread of a rank that waits in the loop was caught inside the vDSO (CUDA's spin-wait calls
    clock_gettime) three times, or VDSO_BUDGET_S has passed."""
    try:
        pics = [json.loads(first.stdout)]
    except ValueError:
        return []
    pids = [str(p["pid"]) for p in ranked(pics[0], tree)]

    def caught():
        return sum(1 for js in pics for p in ranked(js, tree) if p["rank"] != n - 1
                   for t in p["threads"] if t["tid"] == p["focus"] and in_vdso(t))

    end = time.monotonic() + VDSO_BUDGET_S
    while pids and caught() < 3 and time.monotonic() < end:
        p, _ = tool("--json", *pids)
        if p.returncode == 0:
            pics.append(json.loads(p.stdout))
    return pics


def check_vdso(pics, tree, n, step_lines):
    """Every thread stopped inside the vDSO: its frame named (__vdso_*), unwound past it; a
    waiting rank's main thread so caught is in a CUDA call at decode_step."""
    threads, focus, bad = 0, [], []
    for js in pics:
        for p in ranked(js, tree):
            for t in p["threads"]:
                if not in_vdso(t):
                    continue
                threads += 1
                st = t["stack"]
                if not VDSO_FRAME.fullmatch(st[0]) or len(st) < 3:
                    bad.append(f"rank {p['rank']} tid {t['tid']}: {st[:4]}")
                if t["tid"] != p["focus"] or p["rank"] == n - 1:
                    continue
                focus.append(f"rank {p['rank']} in {t['in']} at {t['site']} ({len(st)} frames: "
                             f"{', '.join(f.split(' ')[0] for f in st[:3])}, ...)")
                if not (t["in"] and t["site"] and t["site"].startswith("py: decode_step (") and
                        any(t["site"].endswith(s) for s in step_lines)):
                    bad.append(f"rank {p['rank']} focus: in {t['in']} at {t['site']}: {st[:6]}")
    if not focus:
        print(f"INFO snapshot/vdso: NOT RUN: in {len(pics)} snapshots no waiting rank's main "
              f"thread was caught inside the vDSO ({threads} other threads were)")
        if not threads:
            return True
        return verdict(not bad, "snapshot/vdso-threads", f"{threads} threads caught inside the "
                       "vDSO: " + ("; ".join(bad[:3]) if bad else "all named and unwound"))
    return verdict(not bad, "snapshot/vdso", f"{len(pics)} snapshots: {threads} threads caught "
                   f"inside the vDSO, {len(focus)} of them a waiting rank's main thread; " +
                   ("; ".join(bad[:3]) if bad else f"all named and unwound; {focus[0]}"))


def main():
    work = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    ready, release = os.path.join(work, "ready"), os.path.join(work, "release")
    shutil.rmtree(ready, ignore_errors=True)
    os.makedirs(ready)
    if os.path.exists(release):
        os.unlink(release)
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHAPETRACE_")}
    log = open(os.path.join(work, "snapshot_job.log"), "w")
    job = subprocess.Popen(["torchrun", "--standalone", "--nproc-per-node", str(n), JOB, "--ready",
                            ready, "--release", release, "--share-gpu"], env=env, stdout=log,
                           stderr=subprocess.STDOUT)
    ok = True
    deadline = time.monotonic() + 300
    while len(os.listdir(ready)) < n and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if len(os.listdir(ready)) < n:
        job.kill()
        verdict(False, "snapshot/job", f"only {len(os.listdir(ready))} of {n} ranks got to the "
                f"hang (exit status {job.poll()}); see snapshot_job.log")
        return 1
    time.sleep(3)  # the ranks left in the loop reach their wait
    tree = descendants(job.pid)
    runs = []
    for args in (("--all", "--stats", "--json", "-o", os.path.join(work, "snapshot.json")),
                 ("--all", "--stats"), ("--all", "--stats", "--full")):
        p, wall = tool(*args)
        runs.append((p, wall))
    pictures = more_pictures(runs[0][0], tree, n)
    open(release, "w").close()
    try:
        rc = job.wait(timeout=300)
    except subprocess.TimeoutExpired:
        job.kill()
        rc = "timeout"
    log.close()
    text = runs[1][0].stdout
    print(text, end="")
    with open(os.path.join(work, "snapshot.txt"), "w") as f:
        f.write(runs[2][0].stdout)
    for i, (p, wall) in enumerate(runs):
        if p.returncode != 0:
            ok &= verdict(False, f"snapshot/run{i + 1}", f"exit status {p.returncode}: "
                          f"{p.stderr.strip()[-300:]}")
    try:
        js = json.loads(runs[0][0].stdout)
    except ValueError:
        verdict(False, "snapshot/json", "not JSON")
        return 1
    last = n - 1
    # --all takes every process of this user that maps NCCL: only this job's are judged
    foreign = [p["pid"] for p in js["processes"] if p["pid"] not in tree]
    if foreign:
        print(f"INFO snapshot/others: {len(foreign)} processes of other jobs also pictured: "
              f"{foreign[:8]}")
    groups = [g for g in js["groups"] if set(g["pids"]) <= tree]
    ok &= verdict(bool(groups) and groups[0]["waited_for"] and groups[0]["ranks"] == [last],
                  "snapshot/names", f"waited for: {groups[0]['ranks'] if groups else None} "
                  f"({groups[0]['why'] if groups else ''}); the text says "
                  f"'{text.splitlines()[1] if len(text.splitlines()) > 1 else ''}'")
    wait_line = f"snapshot_hang.py:{line_of('time.sleep(0.05)')})"
    step_lines = {f"snapshot_hang.py:{line_of(s)})" for s in
                  ("dist.all_reduce(y)", "return y.sum().item()", "y = x @ w")}
    procs = {p["rank"]: p for p in js["processes"]
             if p["rank"] is not None and p["pid"] in tree}
    seen, good = [], True
    for r in range(n):
        p = procs.get(r)
        t = [t for t in p["threads"] if t["tid"] == p["focus"]][0] if p else None
        site = t["site"] if t else None
        seen.append(f"rank {r}: {t['in'] or t['waiting_in'] if t else '-'} at {site}")
        if r == last:
            good &= bool(site) and site.startswith("py: wait_outside (") and \
                site.endswith(wait_line)
        else:
            good &= bool(site) and site.startswith("py: decode_step (") and \
                any(site.endswith(s) for s in step_lines) and t["in"] is not None
    ok &= verdict(good, "snapshot/lines", "; ".join(seen))
    ok &= check_vdso(pictures, tree, n, step_lines)
    figures = []
    for i, (p, wall) in enumerate(runs):
        m = re.search(r"snapshot of (\d+) process(?:es)? \((\d+) threads\) in ([\d.]+) s; stopped "
                      r"([\d.]+) ms on average, ([\d.]+) ms at most", p.stderr)
        figures.append(m.groups() if m else None)
        print(f"INFO snapshot/stats{i + 1}: " +
              " | ".join(l[len("shapetrace: "):] for l in p.stderr.splitlines()
                         if l.startswith("shapetrace: ")))
    f1 = figures[0]
    ok &= verdict(bool(f1) and float(f1[2]) <= WALL_TARGET_S, "snapshot/time",
                  f"first snapshot {f1[2] if f1 else '?'} s for {f1[0] if f1 else '?'} processes "
                  f"({f1[1] if f1 else '?'} threads), target {WALL_TARGET_S} s; then " +
                  ", ".join(f"{f[2]} s" for f in figures[1:] if f))
    ok &= verdict(bool(f1) and all(f and float(f[3]) <= STOP_TARGET_MS for f in figures),
                  "snapshot/stopped", "stopped on average " +
                  ", ".join(f"{f[3]} ms (at most {f[4]} ms)" for f in figures if f) +
                  f", target {STOP_TARGET_MS} ms")
    with open(os.path.join(work, "snapshot_job.log")) as f:
        out = f.read()
    totals = set(re.findall(r"rank \d+: \d+ steps, total (\S+)", out))
    ok &= verdict(rc == 0 and len(re.findall(r"steps, total", out)) == n and len(totals) == 1,
                  "snapshot/job", f"the job went on and ended: exit status {rc}, "
                  f"{len(re.findall(r'steps, total', out))} of {n} ranks done, totals {totals}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
