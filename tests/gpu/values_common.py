"""shapetrace GPU checks: what the values checks share: the host's fingerprint of bytes (the C
definition of include/shapetrace/values.h, through build/tests/shp_fingerprint, which
`make check-gpu` builds; $SHP_FINGERPRINT names it), the shapetrace command, and the value lines
of a run's `dump --json`."""
import json
import os
import subprocess
import tempfile


def fingerprints(buffers):
    """The fingerprint of each bytes object of `buffers`, as the preload's host code computes it."""
    helper = os.environ.get("SHP_FINGERPRINT", "shp_fingerprint")
    with tempfile.TemporaryDirectory(prefix="shp-fp-") as d:
        paths = []
        for k, b in enumerate(buffers):
            paths.append(os.path.join(d, str(k)))
            with open(paths[-1], "wb") as f:
                f.write(bytes(b))
        out = subprocess.run([helper, *paths], capture_output=True, text=True, check=True).stdout
    return [int(line.split()[0], 16) for line in out.splitlines()]


def tool(*args):
    """The shapetrace command ($SHP_TOOL, with $SHP_TOOL_LD as its library path), untraced."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHAPETRACE_")}
    if os.environ.get("SHP_TOOL_LD"):
        env["LD_LIBRARY_PATH"] = os.environ["SHP_TOOL_LD"]
    p = subprocess.run([os.environ.get("SHP_TOOL", "shapetrace"), *args], env=env,
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def values_of(run_dir):
    """The value lines of run_dir's dump --json, and its events by (file, index)."""
    rc, out, err = tool("dump", "--json", run_dir)
    if rc != 0:
        raise RuntimeError(f"dump failed: {err.strip()}")
    lines = [json.loads(line) for line in out.splitlines()]
    events = {(x["file"], x["index"]): x for x in lines if x["op"] != "value"}
    return [x for x in lines if x["op"] == "value"], events
