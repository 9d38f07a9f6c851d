"""shapetrace tests: the runner the Python suites share. Runs every test_* function of a module,
one line each, and ends with 'LABEL: N passed, M failed' (the line tests/run.sh adds up)."""
import glob
import os
import shutil
import subprocess
import time
import traceback


def tool_env():
    """The environment for running shapetrace: no inherited preload, and under a sanitized
    build (SHAPETRACE_SANITIZED=1) the ASan runtime first in LD_PRELOAD, where `run` keeps it."""
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    if os.environ.get("SHAPETRACE_SANITIZED") == "1":
        e["LD_PRELOAD"] = subprocess.run(["gcc", "-print-file-name=libasan.so"],
                                         capture_output=True, text=True).stdout.strip()
        e["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0"
    return e


def values_env(tests_dir, **extra):
    """tool_env() with the doubles as a real job has them for --values: the runtime over the
    driver (SHP_DOUBLE_VIA_DRIVER), whose libcuda.so.1 the NCCL double finds on the library path
    (tests_dir); `extra` added, None values removed."""
    e = tool_env()
    e.pop("SHAPETRACE_DIR", None)
    e["SHP_DOUBLE_VIA_DRIVER"] = "1"
    e["LD_LIBRARY_PATH"] = tests_dir
    for k, v in extra.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e
def other_pythons():
    """CPython 3.10 to 3.13 interpreters besides the default `python3`, where pyenv has them."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    have = subprocess.run(["python3", "-c", "import sys; print(sys.version_info[1])"],
                          capture_output=True, text=True).stdout.strip()
    found = []
    for minor in (10, 11, 12, 13):
        if str(minor) == have:
            continue
        for v in sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*"))):
            py = os.path.join(v, "bin", f"python3.{minor}")
            if os.access(py, os.X_OK):
                found.append(py)
                break
    return found


class NotRun(Exception):
    """A test that cannot run on this machine: reported by name, counted neither way."""


def run_all(namespace, label, only=(), tmp=None):
    """Run the test_* callables of namespace (a module's globals()), or only those named in
    `only`, where a name that is no test fails (a renamed test is never skipped in silence);
    returns the exit status."""
    tests = [(n, f) for n, f in sorted(namespace.items()) if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name in sorted(set(only) - {n for n, _ in tests}):
        print(f"FAIL {name}: no such test in this suite")
        failed += 1
    for name, fn in tests:
        if only and name not in only:
            continue
        t0 = time.monotonic()
        try:
            fn()
            print(f"ok   {name} ({time.monotonic() - t0:.1f} s)")
            passed += 1
        except NotRun as why:
            print(f"NOT RUN {name}: {why}")
        except Exception:  # noqa: BLE001 - a test harness reports every failure
            print(f"FAIL {name}")
            traceback.print_exc()
            failed += 1
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{label}: {passed} passed, {failed} failed")
    return 1 if failed else 0
