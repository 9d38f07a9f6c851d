"""shapetrace tests: the layout rule of docs/HACKING.md, checked. Every quoted #include must name
a file from the top of the tree ("tools/lib/reader.h"), and a layer may include only itself and
the layers below it:
    include/        libc only (and include/)
    common/         include/
    preload/        include/, common/
    tools/lib/      include/, common/
    tools/analyze/  tools/lib/ and below; a pass (a file that defines an an_pass) includes of
                    tools/analyze only pass.h, findings.h and its own header
    tools/render/   tools/lib/ and below, and of tools/analyze only its result, analyze.h
    tools/cmd/      anything
No header may include itself through others, and no files may call each other in a loop (the
call graph is read from the built objects' symbols with nm).
Usage: check_layout.py BUILD_DIR. Ends with 'N passed, M failed'."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")

# The preload half of the tree still uses the old -Iinclude -Icommon forms and has a call loop
# of its own on this branch; drop these once it is converted.
LEGACY_FORM = ()
LOOP_DIRS = ("common/", "preload/", "tools/")

LAYERS = ["include/", "common/", "preload/", "tools/lib/", "tools/analyze/", "tools/render/",
          "tools/cmd/"]
ALLOWED = {
    "include/": {"include/"},
    "common/": {"include/", "common/"},
    "preload/": {"include/", "common/", "preload/"},
    "tools/lib/": {"include/", "common/", "tools/lib/"},
    "tools/analyze/": {"include/", "common/", "tools/lib/", "tools/analyze/"},
    "tools/render/": {"include/", "common/", "tools/lib/", "tools/render/"},
    "tools/cmd/": set(LAYERS),
}
# What a layer may include of a layer it may not otherwise: the pictures draw the analyzer's
# result, and nothing else of it.
ALSO = {"tools/render/": {"tools/analyze/analyze.h"}}
CHECKED = ("include/", "common/", "preload/", "tools/", "tests/unit/", "tests/load/",
           "examples/", "bench/", "tests/doubles/", "tests/gen/")
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer(path):
    for l in LAYERS:
        if path.startswith(l):
            return l
    return None


def sources():
    out = []
    for top in CHECKED:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(dirpath, f), ROOT))
    return sorted(set(out))


def resolve(src, name):
    """The file a quoted include names, as the compiler finds it (own folder, then -I.)."""
    for base in (os.path.dirname(src), "", "include", "common"):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(ROOT, p)):
            return p
    return None


def check_includes(files):
    errors, graph = [], {}
    for src in files:
        text = open(os.path.join(ROOT, src), encoding="utf-8", errors="replace").read()
        graph[src] = []
        for name in INC.findall(text):
            target = resolve(src, name)
            if target is None:
                if not src.startswith(LEGACY_FORM):
                    errors.append(f"{src}: includes \"{name}\", which is not a path from the top")
                continue
            graph[src].append(target)
            if not src.startswith(LEGACY_FORM) and name != target:
                errors.append(f"{src}: includes \"{name}\": write \"{target}\"")
            sl, tl = layer(src), layer(target)
            if sl and tl and tl not in ALLOWED[sl] and target not in ALSO.get(sl, ()):
                errors.append(f"{src}: {sl} may not include {target} ({tl})")
            if sl == "include/" and not tl:
                errors.append(f"{src}: include/ may not include {target}")
        if src.startswith("tools/analyze/") and src.endswith(".c") and \
                re.search(r"^const struct an_pass an_pass_\w+", text, re.M):
            own = src[:-2] + ".h"
            ok = {"tools/analyze/pass.h", "tools/analyze/findings.h", own}
            for t in graph[src]:
                if t.startswith("tools/analyze/") and t not in ok:
                    errors.append(f"{src}: a pass may not include {t}")
    return errors, graph


def cycles(graph):
    """Every loop of the graph, as one path each (Tarjan's strongly connected components)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def call_graph():
    """Object -> objects whose symbols it uses, for the objects of LOOP_DIRS."""
    objs = []
    for top in LOOP_DIRS:
        for dirpath, _, files in os.walk(os.path.join(BUILD, "obj", top)):
            objs += [os.path.join(dirpath, f) for f in files if f.endswith(".o")]
    # Objects of sources that are gone (an older layout, in the same build tree) do not count.
    objs = [o for o in objs if os.path.isfile(
        os.path.join(ROOT, os.path.relpath(o, os.path.join(BUILD, "obj"))[:-2] + ".c"))]
    defined, used = {}, {}
    for o in objs:
        name = os.path.relpath(o, os.path.join(BUILD, "obj"))[:-2] + ".c"
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        used[name] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used[name].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRGS":
                defined[parts[2]] = name
    return {f: sorted({defined[s] for s in syms if s in defined and defined[s] != f})
            for f, syms in used.items()}


def main():
    passed = failed = 0
    files = sources()
    errors, graph = check_includes(files)
    for e in errors:
        print("FAIL", e)
    failed += len(errors)
    passed += len(files) - len({e.split(":")[0] for e in errors})
    for c in cycles(graph):
        print("FAIL include loop:", " -> ".join(c))
        failed += 1
    calls = call_graph()
    if not calls:
        print(f"FAIL no objects under {BUILD}/obj to read the call graph from")
        failed += 1
    for c in cycles(calls):
        print("FAIL files calling each other in a loop:", ", ".join(c))
        failed += 1
    if calls and not cycles(calls):
        passed += 1
    if os.environ.get("SHP_LAYOUT_GRAPH"):
        for f in sorted(calls):
            print(f"{f} -> {' '.join(calls[f]) or '-'}")
    print(f"layout: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
