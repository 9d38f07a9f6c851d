#!/usr/bin/env python3
"""shapetrace: check that a move of the README's text lost nothing. Every heading, sentence,
table row and code line of OLD (an earlier README.md) must be found, word for word (markdown
line breaks and indentation aside), in the README and the manual: README.md, docs/*.md and
bench/RESULTS.md. What is not found is printed with the closest text that is, so that a
sentence reworded on purpose (a cross-reference that now names a page) can be told from one
that was dropped.

Usage: scripts/check_docs.py OLD [FILE...]
       scripts/check_docs.py <(git show COMMIT:README.md)
Exit status: 0 when everything was found, 1 when something was not, 2 on bad usage."""
import difflib
import glob
import os
import re
import sys


def norm(s):
    s = s.replace("\u00a0", " ")
    return re.sub(r"\s+", " ", s).strip()


def units(text):
    """The old README cut into what must survive: headings, table rows, code lines, and the
    sentences of every paragraph and list item (joined over their line breaks)."""
    out = []
    para = []

    def flush():
        if para:
            joined = norm(" ".join(para))
            # a sentence ends at '.', ':' or ';' before a space and a capital, backquote or '('
            for s in re.split(r"(?<=[.:;])\s+(?=[A-Z`(*\"])", joined):
                s = s.strip()
                if len(s) > 3:
                    out.append(("sentence", s))
            para.clear()

    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            flush()
            fence = not fence
            continue
        if fence:
            if line.strip():
                out.append(("code", norm(line)))
            continue
        if re.match(r"\s*#+ ", line):
            flush()
            out.append(("heading", norm(re.sub(r"^\s*#+ ", "", line))))
            continue
        if line.startswith("|"):
            flush()
            if not re.match(r"^\|[-| ]+\|$", line):
                out.append(("table row", norm(line)))
            continue
        if not line.strip():
            flush()
            continue
        m = re.match(r"\s*(?:[-*]|\d+\.) (.*)", line)
        if m:  # a list item starts a paragraph of its own
            flush()
            para.append(m.group(1))
            continue
        para.append(line.strip().lstrip("> "))
    flush()
    return out


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2 if len(argv) < 2 else 0
    old = open(argv[1], encoding="utf-8").read()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = argv[2:] or [os.path.join(root, "README.md")] + \
        sorted(glob.glob(os.path.join(root, "docs", "*.md"))) + \
        [os.path.join(root, "bench", "RESULTS.md")]
    new_text = ""
    for f in files:
        fence = False
        for line in open(f, encoding="utf-8"):
            if line.lstrip().startswith("```"):
                fence = not fence
            elif not fence:
                # joined as units() joins: heading and list markers and quote marks off
                line = re.sub(r"^\s*#+ ", "", line)
                line = re.sub(r"^\s*(?:[-*]|\d+\.) ", "", line).lstrip("> ")
            new_text += line + " "
    new = norm(new_text)
    new_sentences = None
    missing = []
    all_units = units(old)
    for kind, u in all_units:
        if u in new:
            continue
        if new_sentences is None:
            new_sentences = [s for s in re.split(r"(?<=[.:;|])\s+", new) if len(s) > 3]
        close = difflib.get_close_matches(u, new_sentences, n=1, cutoff=0.0)
        ratio = difflib.SequenceMatcher(None, u, close[0]).ratio() if close else 0.0
        missing.append((kind, u, close[0] if close else "", ratio))
    for kind, u, close, ratio in missing:
        print(f"not found ({kind}): {u}")
        print(f"  closest ({ratio:.2f}): {close}\n")
    print(f"check_docs: {len(all_units) - len(missing)} of {len(all_units)} found; "
          f"{len(missing)} not found word for word", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
