"""shapetrace tests: every command's options against its help. For each command that
`shapetrace --help` lists: every option the command accepts is in `shapetrace help CMD`; every
option its help names is accepted, needing a value where the help shows one and refusing one
where it shows none; and the man page is that help. What a command accepts is asked of the
command itself, never read from its table: each long name among the string literals of
tools/cmd/ and every letter and digit is tried as an option, followed by an option that no
command has, so that nothing past the parsing runs.
Usage: test_options.py BUILD_DIR [NAME...]. Ends with 'N passed, M failed'."""
import concurrent.futures
import glob
import os
import re
import string
import subprocess
import sys
import tempfile

from harness import run_all, tool_env

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ONLY = set(sys.argv[2:])
TOOL = os.path.join(BUILD, "bin", "shapetrace")
TMP = tempfile.mkdtemp(prefix="shapetrace-options-")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_SUCH = "--shp-no-such-option"


def run(args):
    # In a folder of its own: an option that slipped past the parsing writes nothing elsewhere.
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=60, cwd=TMP,
                          env=tool_env())


def commands():
    """The commands `shapetrace --help` lists, as scripts/mkman.sh finds them."""
    text = run(["--help"]).stdout
    return [m.group(1) for m in re.finditer(r"^  ([a-z]+) ", text, re.M) if m.group(1) != "shapetrace"]


class Help:
    """What `shapetrace help CMD` shows: the options of its option lines, each with the value it
    shows (None, "NAME" or "[NAME]"), and the options its synopsis (first block) names."""

    def __init__(self, cmd):
        self.cmd = cmd
        self.text = run(["help", cmd]).stdout
        self.options = {}
        for line in self.text.splitlines():
            if not line.startswith("  -"):
                continue
            left = re.split(r"\s{2,}", line.strip())[0]
            items = [re.match(r"(--?[A-Za-z0-9][\w-]*)(?: (\S+))?$", it) for it in left.split(", ")]
            assert all(items), (cmd, line)
            last = items[-1].group(2)
            for it in items:
                self.options[it.group(1)] = it.group(2) or last
        synopsis = self.text.split("\n\n")[0]
        self.synopsis = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", synopsis))


def probe(cmd, option):
    """True when cmd accepts option: it stops at the option after it (or prints its help)
    rather than at this one."""
    p = run([cmd, option, NO_SUCH])
    return not p.stderr.startswith(f"shapetrace {cmd}: unknown option '{option}';")


def accepted(cmd):
    """Every option cmd accepts, by asking it: long names from tools/cmd's string literals, and
    every letter and digit."""
    names = set()
    for f in glob.glob(os.path.join(SRC, "tools", "cmd", "*.[ch]")):
        names |= set(re.findall(r'"(?:--)?([a-z][a-z0-9]*(?:-[a-z0-9]+)*)"', open(f).read()))
    tries = [f"--{n}" for n in sorted(names) if len(n) > 1]
    tries += [f"-{c}" for c in string.ascii_letters + string.digits]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return {o for o, ok in zip(tries, pool.map(lambda o: probe(cmd, o), tries)) if ok}


def shown_or_abbreviated(option, shown):
    """getopt_long takes any unambiguous prefix of a long name: such a prefix is not an option
    of its own."""
    return option in shown or (option.startswith("--") and
                               any(s.startswith(option) for s in shown if s.startswith("--")))


def test_every_command_has_help():
    cmds = commands()
    assert {"run", "dump", "analyze", "export", "report", "status", "attach", "symbols",
            "snapshot"} <= set(cmds), cmds
    for cmd in cmds:
        h = run(["help", cmd])
        assert h.returncode == 0 and h.stderr == "" and h.stdout.startswith(
            f"usage: shapetrace {cmd}"), (cmd, h.returncode, h.stderr)
        for form in ("--help", "-h"):
            p = run([cmd, form])
            assert (p.returncode, p.stdout, p.stderr) == (0, h.stdout, ""), (cmd, form)


def test_every_accepted_option_is_in_the_help():
    missing = []
    for cmd in commands():
        shown = Help(cmd).options
        missing += [f"{cmd} {o}" for o in sorted(accepted(cmd)) if not shown_or_abbreviated(o, shown)]
    assert not missing, "accepted, but not in shapetrace help CMD: " + ", ".join(missing)


def test_every_option_in_the_help_is_accepted():
    wrong = []
    for cmd in commands():
        h = Help(cmd)
        for o in sorted(set(h.options) | h.synopsis):
            if not probe(cmd, o):
                wrong.append(f"{cmd} {o}: refused")
        for s in sorted(h.synopsis - set(h.options)):
            wrong.append(f"{cmd} {s}: in the synopsis, not among the option lines")
    assert not wrong, "\n".join(wrong)


def test_values_are_as_the_help_shows():
    """An option shown with a VALUE needs one (given last, it is refused so); one shown without
    a value refuses one (--NAME=x); one shown with [VALUE] takes --NAME=VALUE."""
    wrong = []
    for cmd in commands():
        for o, value in sorted(Help(cmd).options.items()):
            if value and not value.startswith("["):
                p = run([cmd, o])
                if f"option '{o}' needs a value" not in p.stderr:
                    wrong.append(f"{cmd} {o} {value}: does not need its value ({p.stderr.strip()})")
            elif o.startswith("--"):
                p = run([cmd, f"{o}=x", NO_SUCH])
                says = f"option '{o}=x' takes no value" in p.stderr
                if says != (value is None):
                    wrong.append(f"{cmd} {o} {value or ''}: --NAME=x {p.stderr.strip()}")
    assert not wrong, "\n".join(wrong)


def test_an_optional_value_given_last_is_no_crash():
    """An option shown with [VALUE], last but one before a word its value could be (`run
    --values copies` read past the end of argv and crashed): an exit status, or a wait (`status
    --watch DIR` waits for DIR's traces), never a signal."""
    crashed = []
    for cmd in commands():
        for o, value in sorted(Help(cmd).options.items()):
            for word in ("collectives", "copies", "all", "x") if value and value[0] == "[" else ():
                try:
                    rc = subprocess.run([TOOL, cmd, o, word], capture_output=True, timeout=1,
                                        cwd=TMP, env=tool_env()).returncode
                except subprocess.TimeoutExpired:
                    continue
                if not 0 <= rc < 128:
                    crashed.append(f"{cmd} {o} {word}: {rc}")
    assert not crashed, crashed


def test_the_man_page_is_the_help():
    man = os.path.join(BUILD, "man", "shapetrace.1")
    text = open(man).read()
    sections = dict(re.findall(r"^\.SS (\S+)\n\.nf\n(.*?)^\.fi$", text, re.M | re.S))
    for cmd in commands():
        got = re.sub(r"^\\&", "", sections.get(cmd, ""), flags=re.M).replace("\\e", "\\")
        assert got == Help(cmd).text, (cmd, got[:200])


def main():
    return run_all(globals(), "options", ONLY, TMP)


if __name__ == "__main__":
    sys.exit(main())
