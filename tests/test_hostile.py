"""shapetrace tests: hostile applications, run directories and trace files (issue 14). The
application must never be harmed; the readers never crash and always print valid JSON. Crafted
traces get their record checks from common/'s function, through build/tests/shp_craft.
Usage: test_hostile.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import json
import os
import shutil
import stat
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


if __name__ == "__main__":
    sys.exit(run_all(globals(), "hostile", ONLY, TMP))
