"""shapetrace tests: that every test is run. tests/run.sh finds its suites and writes the test
file of each one it ran into RAN_LIST, one a line; this suite, the last, checks that list
against the tree: every tests/test_*.py and every C test program (tests/unit/test_*.c,
tests/doubles/test_*.c) was run; no test_*.py sits where run.sh does not look; no Python suite
defines a test twice (the later one would hide the earlier) or fails to run its tests. Then the
same checks on planted trees, and the harness's refusal of a test asked for that does not exist.
Usage: check_suites.py RAN_LIST. Ends with 'N passed, M failed'."""
import ast
import contextlib
import io
import os
import sys
import tempfile

from harness import run_all

RAN = sys.argv[1] if len(sys.argv) > 1 else None
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TMP = tempfile.mkdtemp(prefix="shapetrace-suites-")

# Where run.sh looks: the Python suites at the top of tests/, the C test programs in these.
C_DIRS = ("unit", "doubles")


def suite_files(root):
    """Every test file under root/tests that run.sh must run, as paths from root."""
    tests = os.path.join(root, "tests")
    out = [os.path.join("tests", f) for f in os.listdir(tests)
           if f.startswith("test_") and f.endswith(".py")]
    for d in C_DIRS:
        if os.path.isdir(os.path.join(tests, d)):
            out += [os.path.join("tests", d, f) for f in os.listdir(os.path.join(tests, d))
                    if f.startswith("test_") and f.endswith(".c")]
    return sorted(out)


def not_run(root, ran_lines):
    """The test files of root that no line of ran_lines (paths as run.sh wrote them) names."""
    ran = {os.path.realpath(line.strip()) for line in ran_lines if line.strip()}
    return [f for f in suite_files(root) if os.path.realpath(os.path.join(root, f)) not in ran]


def hidden_suites(root):
    """test_*.py files below root/tests where run.sh never looks (a subfolder)."""
    out = []
    for dirpath, _, files in os.walk(os.path.join(root, "tests")):
        if os.path.samefile(dirpath, os.path.join(root, "tests")):
            continue
        out += [os.path.relpath(os.path.join(dirpath, f), root) for f in files
                if f.startswith("test_") and f.endswith(".py")]
    return sorted(out)


def suite_faults(path):
    """What keeps tests of one Python suite from running: a test_* function defined twice at
    the top (the second hides the first), or no call of run_all."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    seen, faults = set(), []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            if node.name in seen:
                faults.append(f"{node.name} is defined twice: only the second runs")
            seen.add(node.name)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "run_all"]
    if not calls:
        faults.append("never calls run_all: its tests would not run")
    return faults


# ---- this tree ----

def test_every_test_file_was_run():
    if RAN is None:
        raise AssertionError("no RAN_LIST given (tests/run.sh gives it)")
    missing = not_run(ROOT, open(RAN).read().splitlines())
    assert not missing, f"not run by tests/run.sh: {missing}"


def test_no_python_suite_hides_in_a_subfolder():
    hidden = hidden_suites(ROOT)
    assert not hidden, f"tests/run.sh runs only tests/test_*.py: {hidden}"


def test_every_python_suite_runs_each_of_its_tests():
    faults = {f: suite_faults(os.path.join(ROOT, f)) for f in suite_files(ROOT) if f.endswith(".py")}
    faults = {f: x for f, x in faults.items() if x}
    assert not faults, faults


# ---- the checks themselves, on planted trees ----

def planted(name, files):
    root = os.path.join(TMP, name)
    for f, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, f)), exist_ok=True)
        open(os.path.join(root, f), "w").write(text)
    return root


SUITE = "from harness import run_all\n\ndef test_a():\n    pass\n\nrun_all(globals(), 'x')\n"


def test_a_test_file_left_out_is_named():
    root = planted("left_out", {"tests/test_a.py": SUITE, "tests/test_b.py": SUITE,
                                "tests/unit/test_c.c": "", "tests/doubles/test_d.c": "",
                                "tests/unit/harness.h": ""})
    ran = [os.path.join(root, "tests", "test_a.py"), os.path.join(root, "tests/unit/test_c.c")]
    assert not_run(root, ran) == ["tests/doubles/test_d.c", "tests/test_b.py"], \
        not_run(root, ran)
    ran += [os.path.join(root, "tests", "test_b.py"), os.path.join(root, "tests/doubles/test_d.c")]
    assert not_run(root, ran) == []


def test_a_suite_in_a_subfolder_is_named():
    root = planted("subfolder", {"tests/test_a.py": SUITE, "tests/gpu/test_e.py": SUITE})
    assert hidden_suites(root) == ["tests/gpu/test_e.py"], hidden_suites(root)


def test_a_test_defined_twice_and_a_suite_that_runs_nothing_are_named():
    root = planted("twice", {"tests/test_a.py": SUITE + "\ndef test_a():\n    pass\n",
                             "tests/test_b.py": "def test_b():\n    pass\n"})
    a = suite_faults(os.path.join(root, "tests", "test_a.py"))
    b = suite_faults(os.path.join(root, "tests", "test_b.py"))
    assert a == ["test_a is defined twice: only the second runs"], a
    assert b == ["never calls run_all: its tests would not run"], b
    assert suite_faults(os.path.join(ROOT, "tests", "check_suites.py")) == []


def test_a_test_asked_for_that_does_not_exist_fails():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = run_all({"test_here": lambda: None}, "planted", {"test_here", "test_gone"})
    assert rc == 1, out.getvalue()
    assert "FAIL test_gone: no such test in this suite" in out.getvalue(), out.getvalue()
    assert "planted: 1 passed, 1 failed" in out.getvalue(), out.getvalue()


if __name__ == "__main__":
    sys.exit(run_all(globals(), "suites", (), TMP))
