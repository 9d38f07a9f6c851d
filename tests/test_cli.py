"""shapetrace tests: the front door and the command line as a whole: --version, help and each
command's --help, the man page made from them (its sections, and a build that stops when the
manual's environment drifts from env.h), one-line usage errors and their exit status, a bare or
unknown command, and a build that writes only under build/. A command's own option values are
its suite's (export's in test_pictures.py, run's in test_hostile.py, snapshot's in
test_snapshot.py); the dependency step and the README's first commands are test_build.py's.
Usage: test_cli.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from harness import NotRun, run_all, tool_env

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
TMP = tempfile.mkdtemp(prefix="shapetrace-cli-")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, ok=(0, 1), **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=tool_env(), **kw)
    if ok is not None and p.returncode not in ok:
        raise AssertionError(f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr}")
    return p


# ---- the front door ----

def test_version_and_help():
    v = run([TOOL, "--version"], ok=(0,)).stdout
    assert re.match(r"shapetrace \S+ \(trace format version \d+", v), v
    for cmd in ("run", "dump", "analyze", "export", "report", "status", "attach"):
        h = run([TOOL, "help", cmd], ok=(0,)).stdout
        assert h.startswith(f"usage: shapetrace {cmd}") and h == \
            run([TOOL, cmd, "--help"], ok=(0,)).stdout, cmd
    p = run([TOOL, "help", "frobnicate"], ok=(2,))
    assert "unknown command" in p.stderr


def test_usage_errors_are_one_line():
    """The whole usage text is for --help; a usage error is one line naming the command."""
    cases = [("run", ["--bogus", "--", "true"]), ("dump", ["-q", "x"]), ("analyze", ["--dim"]),
             ("analyze", ["--json=1", "x"]), ("export", ["-o"]), ("report", ["--nope", "x"]),
             ("status", ["--zzz", "x"]), ("attach", ["--x", "x"]), ("symbols", []),
             ("dump", []), ("status", [])]
    for cmd, args in cases:
        p = run([TOOL, cmd, *args], ok=(2,))
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"shapetrace {cmd}: ") and \
            lines[0].endswith(f"; see shapetrace help {cmd}"), (cmd, args, p.stderr)
        assert p.stdout == "", (cmd, p.stdout)


def test_man_page_is_the_help_text():
    man = os.path.join(BUILD, "man", "shapetrace.1")
    assert os.path.exists(man), man
    text = open(man).read()
    assert text.startswith(".TH SHAPETRACE 1")
    for cmd in ("run", "dump", "analyze", "export", "report", "status", "attach"):
        first = run([TOOL, "help", cmd], ok=(0,)).stdout.splitlines()[0]
        assert f".SS {cmd}" in text and first.split()[2] in text, cmd
    if shutil.which("man"):
        p = subprocess.run(["man", "-l", man], capture_output=True, text=True,
                           env=dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="0"))
        assert p.returncode == 0 and "export" in p.stdout, p.stderr


def man_sections():
    """The man page's sections (.SH NAME: their text), in their order."""
    text = open(os.path.join(BUILD, "man", "shapetrace.1")).read()
    parts = re.split(r'^\.SH "?([A-Z ]+?)"?$', text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2])), parts[1::2]


def test_man_page_has_environment_exit_status_examples_files():
    """ENVIRONMENT names every SHAPETRACE_* variable of env.h and no other; EXIT STATUS has each
    command, with every status its --help names; EXAMPLES use only options their command takes;
    FILES names the trace and the symbol file."""
    sec, order = man_sections()
    want = ["NAME", "SYNOPSIS", "COMMANDS", "ENVIRONMENT", "EXIT STATUS", "EXAMPLES", "FILES",
            "SEE ALSO"]
    assert [s for s in order if s in want] == want, order
    env_h = open(os.path.join(SRC, "include", "shapetrace", "env.h")).read()
    names = set(re.findall(r'"(SHAPETRACE_[A-Z_]+)"', env_h))
    assert len(names) >= 16, names
    tagged = set(re.findall(r"^\.TP\n\\fB(SHAPETRACE_[A-Z_]+)\\fR$", sec["ENVIRONMENT"], re.M))
    assert tagged == names, (sorted(names - tagged), sorted(tagged - names))
    commands = re.findall(r"^\.SS (\S+)$", sec["COMMANDS"], re.M)
    assert len(commands) >= 9, commands
    entries = dict(re.findall(r"^\.TP\n\\fB([a-z]+)\\fR\n(.*)$", sec["EXIT STATUS"], re.M))
    for cmd in commands:
        assert cmd in entries, (cmd, sorted(entries))
        h = run([TOOL, "help", cmd], ok=(0,)).stdout
        m = re.search(r"Exit status:(.*?)(?:\n\n|\Z)", h, re.S)
        said = set(re.findall(r"\b\d+\b", m.group(1))) if m else set()
        given = set(re.findall(r"\b\d+\b", entries[cmd]))
        assert said <= given, (cmd, said, entries[cmd])
    assert entries["analyze"].startswith("0: no findings. 1: findings. 2:"), entries["analyze"]
    examples = [ln.replace("\\-", "-") for ln in sec["EXAMPLES"].splitlines()
                if ln.startswith("shapetrace ")]
    assert len(examples) >= 10, examples
    for ln in examples:
        cmd = ln.split()[1]
        assert cmd in commands, ln
        h = run([TOOL, "help", cmd], ok=(0,)).stdout
        before_cmd = ln.split(" -- ")[0]  # what follows " -- " is the traced command's
        for opt in re.findall(r"(?<=\s)(--?[a-z][a-z-]*)", before_cmd):
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", h), (ln, opt)
    for f in (r"\.shptrace", r"\.symbols", r"control", r"libshapetrace\.so"):
        assert re.search(f, sec["FILES"]), f


def test_man_page_refuses_an_environment_that_drifts():
    """mkman.sh stops the build when env.h and the manual's tables of the environment differ, in
    either direction, naming the variable."""
    mkman = os.path.join(SRC, "scripts", "mkman.sh")
    env_h = os.path.join(SRC, "include", "shapetrace", "env.h")
    tracing = os.path.join(SRC, "docs", "tracing.md")
    contracts = os.path.join(SRC, "docs", "CONTRACTS.md")
    more = os.path.join(TMP, "env-more.h")
    open(more, "w").write(open(env_h).read() + '#define SHP_ENV_NEW "SHAPETRACE_NEW_KNOB"\n')
    p = subprocess.run([mkman, TOOL, more, tracing, contracts], capture_output=True, text=True)
    assert p.returncode != 0 and "SHAPETRACE_NEW_KNOB" in p.stderr, (p.returncode, p.stderr)
    fewer = os.path.join(TMP, "tracing-fewer.md")
    open(fewer, "w").write("".join(ln for ln in open(tracing)
                                   if not ln.startswith("| `SHAPETRACE_CLOCK`")))
    p = subprocess.run([mkman, TOOL, env_h, fewer, contracts], capture_output=True, text=True)
    assert p.returncode != 0 and "SHAPETRACE_CLOCK" in p.stderr, (p.returncode, p.stderr)
    p = subprocess.run([mkman, TOOL, env_h, tracing, contracts], capture_output=True, text=True)
    assert p.returncode == 0 and ".SH ENVIRONMENT" in p.stdout, p.stderr


def test_build_leaves_nothing_in_the_source_tree():
    if not os.path.isdir(os.path.join(SRC, ".git")) and \
            not os.path.isfile(os.path.join(SRC, ".git")):
        raise NotRun("not a git checkout")
    p = subprocess.run(["git", "-C", SRC, "status", "--porcelain", "--ignored",
                        "--untracked-files=all"], capture_output=True, text=True)
    stray = [x for x in p.stdout.splitlines() if x.startswith("!!")
             and not re.match(r"!! (build|\.whl|\.gpu)/|!! .*__pycache__/", x)]
    assert not stray, stray


# ---- the command line ----

def test_bare_command_and_unknown_command_are_one_line():
    for args, what in (([], "no command given"), (["frob"], "unknown command 'frob'"),
                       (["help", "frob"], "unknown command 'frob'")):
        p = run([TOOL, *args], ok=None)
        assert p.returncode == 2 and p.stdout == "", (args, p.returncode, p.stdout)
        assert p.stderr == f"shapetrace: {what}; see shapetrace --help\n", (args, p.stderr)


def main():
    return run_all(globals(), "cli", ONLY, TMP)


if __name__ == "__main__":
    sys.exit(main())
