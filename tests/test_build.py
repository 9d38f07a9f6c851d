"""shapetrace tests: build hygiene. The dependency step (scripts/deps.sh: only `make deps`, which
`make demo` and `make check` take first, installs; every other target only checks), the format
check and its place in .ci/run, the README's first commands run as written after the steps it
gives, and `make demo`'s run directory and the commands it prints, run after it ended.
Usage: test_build.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

from harness import NotRun, run_all, tool_env

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TMP = tempfile.mkdtemp(prefix="shapetrace-build-")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPS = os.path.join(SRC, "scripts", "deps.sh")


def plain_env(**extra):
    """The environment of a user's shell: none of the make that runs this suite (its jobserver
    and its variables), `extra` added."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("MAKE") and k not in ("MFLAGS", "MAKELEVEL")}
    e.update(extra)
    return e


def script(folder, name, body):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def fake_bin(names):
    """A PATH folder whose dpkg-query says `names` are not installed (until its apt-get installs
    them), whose id says we are not root unless ROOT=1, and whose apt-get writes its arguments
    to $APT_LOG."""
    d = tempfile.mkdtemp(prefix="bin-", dir=TMP)
    script(d, "dpkg-query", "for p; do :; done\n"
           f"grep -qx \"$p\" {d}/installed 2>/dev/null && echo 'install ok installed' && exit 0\n"
           "case \" %s \" in *\" $p \"*) exit 1;; esac\n"
           "echo 'install ok installed'" % " ".join(names))
    script(d, "id", '[ "$ROOT" = 1 ] && echo 0 || echo 1000')
    script(d, "apt-get", 'echo "$@" >>"$APT_LOG"\n'
           f'[ "$1" = install ] && for p; do echo "$p" >>{d}/installed; done; exit 0')
    return d


def apt_log(log):
    return open(log).read().splitlines() if os.path.exists(log) else []


# ---- the dependency step ----

def test_dependency_step():
    fake = fake_bin(["libjansson-dev", "chromium"])
    log = os.path.join(TMP, "apt.log")
    base = plain_env(PATH=fake + ":" + os.environ["PATH"], APT_LOG=log)

    def deps(*args, **extra):
        return subprocess.run([DEPS, *args], capture_output=True, text=True,
                              env=dict(base, **extra))
    # without --install: never apt-get, even as root; one line naming the packages and the way
    for root in ("0", "1"):
        p = deps("build", "check", ROOT=root)
        assert p.returncode == 1 and p.stdout == "", (p.stdout, p.stderr)
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "libjansson-dev chromium" in lines[0] and \
            "'apt-get install -y libjansson-dev chromium'" in lines[0] and \
            "make deps DEPS=\"build check\"" in lines[0], p.stderr
    p = deps("build")
    assert p.returncode == 1 and "apt-get install -y libjansson-dev'" in p.stderr, p.stderr
    assert apt_log(log) == []
    # --install as another user: the one line, a failure, nothing installed
    p = deps("--install", "build", "check")
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and \
        "as root, run 'apt-get install -y libjansson-dev chromium'" in p.stderr, p.stderr
    assert apt_log(log) == []
    # --install as root: says so, then one update and one install of what is missing
    p = deps("--install", "build", "check", ROOT="1")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "make deps (build, check): installing, as root: libjansson-dev chromium" in p.stdout
    assert apt_log(log) == \
        ["update -qq", "install -y -qq --no-install-recommends libjansson-dev chromium"]
    # format: clang-format 14; an unknown set is refused
    p = subprocess.run([DEPS, "format"], capture_output=True, text=True,
                       env=dict(base, PATH=fake_bin(["clang-format-14"]) + ":" +
                                os.environ["PATH"]))
    assert p.returncode == 1 and "clang-format-14" in p.stderr, p.stderr
    assert deps("frobnicate").returncode == 2
    # the CUDA and NCCL headers are no Debian package: named, with where to get them, one line
    p = subprocess.run([DEPS, "build"], capture_output=True, text=True,
                       env=plain_env(CUDA_HOME=os.path.join(TMP, "nocuda")))
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and \
        "cuda_runtime_api.h is missing" in p.stderr, p.stderr
    assert "scripts/deps.sh --install build check format" in \
        open(os.path.join(SRC, ".ci", "run")).read()


def make_n(goal, names, log, root="1"):
    """`make -n GOAL` in a copy of the tree (sources only), with fake packaging tools that lack
    `names`: what the dependency step does for that goal. make remakes its included makefiles
    even under -n, and runs the recipe lines that call make (make check's, for the sanitizer
    trees), so the copy keeps those out of this tree's build."""
    tree = tempfile.mkdtemp(prefix="tree-", dir=TMP)
    shutil.copytree(SRC, tree, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("build", ".git", "__pycache__"))
    fake = fake_bin(names)
    if os.path.exists(log):
        os.unlink(log)
    args = ["make", "-n", "--no-print-directory", "-C", tree] + ([goal] if goal else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env=plain_env(PATH=fake + ":" + os.environ["PATH"], APT_LOG=log,
                                        ROOT=root))


def test_only_make_deps_installs():
    """A plain make and make install, as root, change nothing and stop with one line; make demo
    and make check install what they need through make deps, and say so."""
    missing = ["libjansson-dev", "chromium"]
    log = os.path.join(TMP, "apt-make.log")
    for goal in ("", "install", "test-build"):
        p = make_n(goal, missing, log)
        assert p.returncode != 0 and apt_log(log) == [], (goal, p.stdout[-500:], p.stderr)
        ours = [x for x in p.stderr.splitlines() if x.startswith("shapetrace:")]
        assert len(ours) == 1 and "missing Debian packages: libjansson-dev;" in ours[0], \
            (goal, p.stderr)
        assert "install -m" not in p.stdout, (goal, p.stdout[-500:])
    p = make_n("demo", missing, log)
    assert p.returncode == 0, (p.stdout[-1000:], p.stderr)
    assert "make deps (build): installing, as root: libjansson-dev" in p.stdout, p.stdout[:500]
    assert apt_log(log)[-1] == "install -y -qq --no-install-recommends libjansson-dev"
    p = make_n("check", missing, log)
    assert p.returncode == 0, (p.stdout[-1000:], p.stderr)
    assert apt_log(log)[-1] == \
        "install -y -qq --no-install-recommends libjansson-dev chromium", apt_log(log)
    # as another user, make demo stops at the step with its one line
    p = make_n("demo", missing, log, root="0")
    assert p.returncode != 0 and apt_log(log) == [] and \
        "as root, run 'apt-get install -y libjansson-dev'" in p.stderr, p.stderr
    # and once the packages are there, make deps says so and installs nothing
    p = subprocess.run(["make", "--no-print-directory", "-C", SRC, "deps"], capture_output=True,
                       text=True, env=plain_env(PATH=fake_bin([]) + ":" + os.environ["PATH"],
                                                APT_LOG=log))
    assert p.returncode == 0 and apt_log(log) == [] and \
        "every Debian package they need is installed" in p.stdout, (p.stdout, p.stderr)


# ---- the format check ----

def test_format_check():
    if not shutil.which("clang-format-14"):
        raise NotRun("clang-format-14 is not installed (make deps DEPS=format)")
    mk = ["make", "--no-print-directory", "-C", SRC]
    p = subprocess.run(mk + ["format-check"], capture_output=True, text=True, env=plain_env())
    assert p.returncode == 0 and "format-check: " in p.stdout, (p.stdout, p.stderr[-2000:])
    # it covers every C file of the tree that git knows
    n = int(re.search(r"format-check: (\d+) files", p.stdout).group(1))
    if os.path.exists(os.path.join(SRC, ".git")):
        files = subprocess.run(["git", "-C", SRC, "ls-files", "--cached", "--others",
                                "--exclude-standard", "*.c", "*.h"], capture_output=True,
                               text=True).stdout.split()
        assert n == len(files), (n, len(files))
    # a file that is not as .clang-format has it fails the check; one that is passes
    # (clang-format reads the .clang-format of the file's folder)
    shutil.copy(os.path.join(SRC, ".clang-format"), TMP)
    bad = os.path.join(TMP, "bad.c")
    open(bad, "w").write("int  f( int x ){return x;}\n")
    p = subprocess.run(mk + ["format-check", f"FORMAT_SRC={bad}"], capture_output=True,
                       text=True, env=plain_env())
    assert p.returncode != 0 and "bad.c" in p.stderr, p.stderr
    good = os.path.join(TMP, "good.c")
    open(good, "w").write("int f(int x)\n{\n    return x;\n}\n")
    p = subprocess.run(mk + ["format-check", f"FORMAT_SRC={good}"], capture_output=True,
                       text=True, env=plain_env())
    assert p.returncode == 0, p.stderr
    # another version, or none: one line that says which is needed and how to get it
    other = script(tempfile.mkdtemp(dir=TMP), "clang-format",
                   'echo "Debian clang-format version 19.1.7 (3)"')
    for cf, says in ((other, "needs clang-format 14, and"),
                     (os.path.join(TMP, "none"), "apt-get install -y clang-format-14")):
        p = subprocess.run(mk + ["format-check", f"CLANG_FORMAT={cf}"], capture_output=True,
                           text=True, env=plain_env())
        ours = [x for x in p.stderr.splitlines() if x.startswith("shapetrace:")]
        assert p.returncode != 0 and len(ours) == 1 and says in ours[0], p.stderr


def test_ci_checks_the_format_before_the_tests():
    ci = [x.strip() for x in open(os.path.join(SRC, ".ci", "run")).read().splitlines()
          if x.strip() and not x.strip().startswith("#")]
    deps = [i for i, x in enumerate(ci) if "scripts/deps.sh --install" in x]
    fmt = [i for i, x in enumerate(ci) if x == "make format-check"]
    check = [i for i, x in enumerate(ci) if x.startswith("make ") and x.endswith(" check")]
    assert len(deps) == len(fmt) == len(check) == 1 and deps[0] < fmt[0] < check[0], ci
    assert {"build", "check", "format"} <= set(ci[deps[0]].split()), ci[deps[0]]


# ---- the README's first commands ----

def readme_blocks():
    text = open(os.path.join(SRC, "README.md")).read()
    return re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)


def test_readme_first_commands_work_as_written():
    """The first README block that puts shapetrace on PATH, run in this checkout, then the first
    one that traces a job, run in the job's directory, as a user types them: HOME a new one,
    PATH a plain one, and torchrun a stand-in that starts 8 SIMULATED ranks of the examples on
    the test doubles (serve.py is not run)."""
    blocks = readme_blocks()
    uses = [i for i, b in enumerate(blocks) if re.search(r"^shapetrace ", b, re.M)]
    setup = next(i for i, b in enumerate(blocks) if "make install" in b)
    job = next(i for i, b in enumerate(blocks) if re.search(r"^shapetrace run ", b, re.M))
    assert uses and setup < uses[0] <= job, (setup, uses, job)
    home = tempfile.mkdtemp(prefix="home-", dir=TMP)
    jobdir = os.path.join(home, "job")
    os.mkdir(jobdir)
    launcher = tempfile.mkdtemp(prefix="torch-", dir=TMP)
    script(launcher, "torchrun", f"""# torchrun stand-in (test equipment): N SIMULATED ranks
n=1
while [ $# -gt 0 ]; do
    case $1 in --nproc-per-node) n=$2; shift 2 ;; --nproc-per-node=*) n=${{1#*=}}; shift ;;
    *) break ;; esac
done
exec {BUILD}/tests/shp_launch -n "$n" -- {BUILD}/examples/hidden_states --fixed""")
    user_path = "/usr/local/bin:/usr/bin:/bin:" + launcher
    e = tool_env()
    e = {k: v for k, v in e.items() if not k.startswith("MAKE") and k != "MFLAGS"}
    e.update(HOME=home, PATH=user_path)
    e.pop("SHAPETRACE_DIR", None)
    if os.path.relpath(BUILD, SRC) != "build":
        e["MAKEFLAGS"] = f"B={BUILD}"  # the suite's build tree, the README's command unchanged
    body = f"set -e -o pipefail\ncd {SRC}\n{blocks[setup]}\ncd {jobdir}\n{blocks[job]}\n" \
           "echo \"found: $(command -v shapetrace)\"\n"
    p = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=300, env=e)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert p.stdout.rstrip().endswith(f"found: {home}/.local/bin/shapetrace"), p.stdout[-500:]
    assert f"shapetrace: 8 traces in {jobdir}/traces" in p.stderr, p.stderr[-2000:]
    # the dump's table, then what jq printed: a stream of JSON objects, one per all-gather
    table, _, stream = p.stdout.partition("\n{\n")
    stream, gathers, dec = "{\n" + stream.rsplit("\nfound: ", 1)[0], [], json.JSONDecoder()
    while stream.strip():
        obj, end = dec.raw_decode(stream.strip())
        gathers.append(obj)
        stream = stream.strip()[end:]
    assert gathers and all(g["op"] == "ncclAllGather" for g in gathers), p.stdout[-1000:]
    assert sorted({g["rank"] for g in gathers}) == list(range(8)), gathers[:2]
    assert sum("ncclAllGather" in x for x in table.splitlines()) == len(gathers), \
        table[-2000:]


# ---- make demo ----

def test_demo_keeps_its_run_and_its_commands_work_after_it():
    e = dict(tool_env(), SHAPETRACE_DOUBLE_TIMEOUT="5")
    e.pop("SHAPETRACE_DIR", None)
    b = os.path.relpath(BUILD, SRC)
    p = subprocess.run(["sh", "examples/demo.sh", b], cwd=SRC, capture_output=True, text=True,
                       timeout=300, env=e)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    run_dir = os.path.join(SRC, b, "demo-run")
    assert len([f for f in os.listdir(run_dir) if f.endswith(".shptrace")]) == 4
    assert "4 SIMULATED ranks" in p.stdout
    after = p.stdout.split("To look at it again, from the top of the tree:\n", 1)
    assert len(after) == 2, p.stdout[-1500:]
    cmds = [x.strip() for x in after[1].splitlines() if x.startswith("    ")]
    assert len(cmds) == 4 and all(c.startswith(f"{b}/bin/shapetrace ") for c in cmds), cmds
    # every command the demo printed as it ran is one of its own, as it ran
    shown = [x.strip() for x in after[0].splitlines() if x.startswith(f"    {b}/bin/")]
    assert len(shown) == 3 and shown[0].startswith(f"{b}/bin/shapetrace run --dir {b}/demo-run"), \
        shown
    os.unlink(os.path.join(SRC, b, "demo-report.html"))
    for c in cmds:
        q = subprocess.run(["sh", "-c", c], cwd=SRC, capture_output=True, text=True, timeout=300,
                           env=e)
        verb = c.split()[1]
        if verb == "analyze":
            assert q.returncode == 1 and "FIRST FINDING  shape_mismatch" in q.stdout, \
                (c, q.stdout[-1000:], q.stderr)
        else:
            assert q.returncode == 0, (c, q.stdout[-1000:], q.stderr)
        if verb == "dump":
            assert q.stdout.count("ncclAllGather") >= 4, q.stdout[-1000:]
        if verb == "export":
            out = os.path.join(SRC, c.split("-o ", 1)[1].split()[0])
            assert json.load(open(out))["traceEvents"], out
        if verb == "report":
            html = os.path.join(SRC, b, "demo-report.html")
            assert os.stat(html).st_size > 0 and "shape_mismatch" in open(html).read()
    # a second demo replaces the run: four traces again, not eight
    p = subprocess.run(["sh", "examples/demo.sh", b], cwd=SRC, capture_output=True, text=True,
                       timeout=300, env=e)
    assert p.returncode == 0 and \
        len([f for f in os.listdir(run_dir) if f.endswith(".shptrace")]) == 4
    assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700


def main():
    return run_all(globals(), "build", ONLY, TMP)


if __name__ == "__main__":
    sys.exit(main())
