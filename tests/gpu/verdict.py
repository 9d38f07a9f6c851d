"""shapetrace GPU checks: the verdict on one traced run, as one summary line.

  verdict.py analyze NAME DIR NRANKS WANT [--incomplete RANK] [-- ANALYZE_ARGS...]
      WANT is 'none' (no findings) or KIND:RANKS[:CONSUMER[:PRODUCER]] (RANKS like 1,2): the
      first finding's kind and ranks ('-': none, a process without a rank), and the site of its
      call and of its nearest producer: FUNCTION, or FUNCTION@FILE (the file's last component),
      compared with the event's "site" (the analyzer's site rule), or, in an older report
      without one, the innermost Python frame outside torch. --incomplete: that rank's trace
      must be incomplete and hold events.
  verdict.py count NAME DIR NRANKS OP[@captured]=N...
      every trace holds exactly N calls of OP (with @captured, only those captured in a graph).
The tool is $SHP_TOOL, run with LD_LIBRARY_PATH=$SHP_TOOL_LD when set. Prints
'PASS|FAIL NAME: what was seen' and exits 0 or 1."""
import json
import os
import subprocess
import sys


def tool(*args):
    env = dict(os.environ)
    if os.environ.get("SHP_TOOL_LD"):
        env["LD_LIBRARY_PATH"] = os.environ["SHP_TOOL_LD"]
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([os.environ.get("SHP_TOOL", "shapetrace"), *args], env=env,
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def site_frame(event):
    """The frame the report shows first: the analyzer's site, else (an older report) the
    innermost Python frame outside torch's own package."""
    if event.get("site"):
        return event["site"]
    for frame in event.get("stack") or []:
        # torch's own files: below site-packages (torch's virtualenv may live in /opt/torch)
        if frame.startswith("py: ") and "-packages/torch/" not in frame:
            return frame
    return None


def py_site(event):
    """FUNCTION@FILE of the site frame ("forward@modeling_llama.py"), or None."""
    frame = site_frame(event)
    if not frame:
        return None
    text = frame[4:] if frame.startswith("py: ") else frame
    func, _, place = text.partition(" (")
    func = func.split("+0x")[0]
    file = os.path.basename(place.rstrip(")").split(":")[0]) if place else ""
    return f"{func}@{file}" if file else func


def site_matches(event, want):
    """want is FUNCTION or FUNCTION@FILE."""
    got = py_site(event)
    if got is None:
        return False
    return got == want if "@" in want else got.split("@")[0] == want


def site_line(event):
    """FUNCTION@FILE:LINE of the site frame, or FUNCTION@FILE when it has no line."""
    where = py_site(event)
    frame = site_frame(event) or ""
    line = frame.rstrip(")").rsplit(":", 1)[-1] if " (" in frame else ""
    return f"{where}:{line}" if where and line.isdigit() else where


def describe(f):
    where = site_line(f["events"][0]) if f.get("events") else None
    seq = f"#{f['seq']}" if f.get("seq") is not None else ""
    ranks = ",".join(map(str, f["ranks"])) or "-"
    return f"{f['kind']}{' ' + seq if seq else ''} ranks {ranks}" + \
        (f" at {where}" if where else "")


def check_analyze(name, run_dir, nranks, want, rest):
    incomplete = None
    if rest[:1] == ["--incomplete"]:
        incomplete, rest = int(rest[1]), rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    rc, out, err = tool("analyze", "--json", *rest, run_dir)
    if rc == 2:
        return False, f"analyze failed: {err.strip()}"
    report = json.loads(out)
    problems = []
    procs = report["processes"]
    if len(procs) != nranks:
        problems.append(f"{len(procs)} traces for {nranks} ranks")
    findings = report["findings"]
    seen = describe(findings[report["first"]]) if findings else "no findings"
    seen += f" ({len(findings)} findings)" if len(findings) > 1 else ""
    if want == "none":
        if findings:
            problems.append("expected none")
    elif not findings:
        problems.append(f"expected {want}")
    else:
        f = findings[report["first"]]
        kind, ranks, *sites = want.split(":")
        want_ranks = [] if ranks == "-" else [int(r) for r in ranks.split(",")]
        if f["kind"] != kind or f["ranks"] != want_ranks:
            problems.append(f"expected {kind} ranks {ranks}")
        if sites and not site_matches(f["events"][0], sites[0]):
            problems.append(f"expected the call at {sites[0]}")
        if len(sites) > 1 and (not f.get("lineage") or
                               not site_matches(f["lineage"][0], sites[1])):
            problems.append(f"expected the producer at {sites[1]}")
        if len(sites) > 1 and f.get("lineage"):
            seen += f", producer {py_site(f['lineage'][0])}"
    if incomplete is not None:
        mine = [p for p in procs if p["rank"] == incomplete]
        if not mine or mine[0]["complete"] or not mine[0]["events"]:
            problems.append(f"rank {incomplete}'s trace should be incomplete, with events")
        else:
            seen += f"; rank {incomplete} incomplete after {mine[0]['events']} events"
    return not problems, seen + ("" if not problems else " -- " + "; ".join(problems))


def check_count(name, run_dir, nranks, wants):
    rc, out, err = tool("dump", "--json", "--no-stacks", run_dir)
    if rc:
        return False, f"dump failed: {err.strip()}"
    counts = {}
    for line in out.splitlines():
        ev = json.loads(line)
        key = (ev["file"], ev["op"] + ("@captured" if ev.get("captured") else ""))
        counts[key] = counts.get(key, 0) + 1
    files = sorted({f for f, _ in counts})
    problems = [] if len(files) == nranks else [f"{len(files)} traces for {nranks} ranks"]
    seen = []
    for w in wants:
        op, n = w.split("=")
        got = sorted({sum(c for (f2, o), c in counts.items() if f2 == f and
                          (o == op or (o == op + "@captured" and "@" not in op)))
                      for f in files})
        seen.append(f"{op} {','.join(map(str, got))}")
        if got != [int(n)]:
            problems.append(f"expected {op} {n} in every trace")
    return not problems, " ".join(seen) + ("" if not problems else " -- " + "; ".join(problems))


def main():
    what, name, run_dir, nranks = sys.argv[1:5]
    if what == "analyze":
        ok, seen = check_analyze(name, run_dir, int(nranks), sys.argv[5], sys.argv[6:])
    else:
        ok, seen = check_count(name, run_dir, int(nranks), sys.argv[5:])
    print(f"{'PASS' if ok else 'FAIL'} {name}: {seen}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
