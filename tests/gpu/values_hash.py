"""shapetrace GPU check: the fingerprint kernel gives the host's bits (--values).

  values_hash.py --run DIR     under `shapetrace run --values all --values-site 'fingerprint_*'`:
      device-to-device copies into, and device-to-host copies out of, buffers at every
      misalignment 0, 1, 3 and 7, of 1 byte to 64 MiB + 3; all-reduces of 1 to 16M floats
      (world size 1); then the same copy and all-reduce captured into a CUDA graph (global
      mode, torch's default) and replayed. Writes each case's bytes into DIR, in order.
  values_hash.py --check RUN_DIR DIR
      compares every fingerprint the run recorded with the host's of the same bytes
      (build/tests/shp_fingerprint), checks that the captured calls were skipped and counted
      and that the graph's replays computed what they should. Prints PASS or FAIL lines.
One GPU. The copies are torch's own (copy_ of contiguous same-dtype tensors is cudaMemcpyAsync)."""
import argparse
import ctypes
import datetime
import json
import os
import sys

SIZES = [1, 7, 8, 9, 100, 4095, 4096, 65537, 1 << 20, (64 << 20) + 3]
OFFSETS = [0, 1, 3, 7]
COUNTS = [1, 3, 1024, 1 << 18, 16 << 20]


def fingerprint_copy_d2d(dst, src):
    dst.copy_(src)


def fingerprint_copy_d2h(dst, src):
    dst.copy_(src)


def fingerprint_all_reduce(dist, t):
    dist.all_reduce(t)


def run(out):
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29650", rank=0, world_size=1,
                            device_id=dev, timeout=datetime.timedelta(seconds=60))
    g = torch.Generator(device=dev).manual_seed(26)
    cases = []

    def save(kind, t, **what):
        """t's bytes into DIR (its .cpu() is not at a fingerprinted site)."""
        path = os.path.join(out, f"{len(cases)}.bin")
        h = t.cpu().contiguous()
        with open(path, "wb") as f:
            f.write(ctypes.string_at(h.data_ptr(), h.numel() * h.element_size()))
        cases.append(dict(kind=kind, file=path, **what))

    for n in SIZES:
        for off in OFFSETS:
            base = torch.randint(0, 256, (n + 8,), dtype=torch.uint8, device=dev, generator=g)
            dbase = torch.empty(n + 8, dtype=torch.uint8, device=dev)
            dst = dbase[off:off + n]  # a misaligned destination: the kernel reads it
            fingerprint_copy_d2d(dst, base[:n])
            torch.cuda.synchronize()
            save("d2d", dst, bytes=n, offset=off)
            src = base[off:off + n]  # a misaligned source: the kernel reads it after the copy
            host = torch.empty(n, dtype=torch.uint8)
            fingerprint_copy_d2h(host, src)
            save("d2h", src, bytes=n, offset=off)
    for count in COUNTS:
        t = torch.randn(count, device=dev, generator=g)
        fingerprint_all_reduce(dist, t)
        torch.cuda.synchronize()
        save("all_reduce", t, bytes=4 * count)
    # Captured: nothing may be fingerprinted then, and the graph must still work.
    a = torch.randn(1 << 16, device=dev, generator=g)
    b = torch.empty_like(a)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fingerprint_copy_d2d(b, a)  # warm-up, eager
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fingerprint_copy_d2d(b, a)
        fingerprint_all_reduce(dist, b)
    ok = True
    for k in range(3):
        a.fill_(float(k + 1))
        graph.replay()
        torch.cuda.synchronize()
        ok &= bool(torch.all(b == float(k + 1)).item())
    dist.destroy_process_group()
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"cases": cases, "graph_ok": ok}, f)
    print(f"values_hash: {len(cases)} cases written, graph replays {'ok' if ok else 'WRONG'}")


def check(run_dir, out):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from values_common import fingerprints, values_of

    m = json.load(open(os.path.join(out, "manifest.json")))
    cases = m["cases"]
    vals, events = values_of(run_dir)
    site = {}
    for v in vals:
        ev = events.get((v["file"], v["of"])) if v["of"] is not None else None
        frames = [f for f in (ev or {}).get("stack") or [] if f.startswith("py: fingerprint_")]
        site.setdefault(frames[0].split(" ")[1] if frames else "?", []).append(v)
    host = fingerprints(open(c["file"], "rb").read() for c in cases)
    problems, compared = [], 0
    got = {k: [v for v in site.get(f"fingerprint_{k}", []) if v["status"] == "done"]
           for k in ("copy_d2d", "copy_d2h", "all_reduce")}
    # Eager calls in order; the warm-up copy of the graph part is the last eager d2d one.
    want = {"copy_d2d": [c for c in cases if c["kind"] == "d2d"],
            "copy_d2h": [c for c in cases if c["kind"] == "d2h"],
            "all_reduce": [c for c in cases if c["kind"] == "all_reduce"]}
    for k, cs in want.items():
        if len(got[k]) < len(cs):
            problems.append(f"{k}: {len(got[k])} fingerprints for {len(cs)} calls")
            continue
        for c, v in zip(cs, got[k]):
            h = host[cases.index(c)]
            compared += 1
            if int(v["fingerprint"], 16) != h or v["bytes"] != c["bytes"]:
                problems.append(f"{k} of {c['bytes']} bytes at offset {c.get('offset', 0)}: "
                                f"kernel {v['fingerprint']} ({v['bytes']} bytes), host {h:#018x}")
    captured = [v for v in vals if v["status"] == "captured"]
    other = [v for v in vals if v["status"] not in ("done", "captured")]
    if len(captured) != 2:
        problems.append(f"{len(captured)} captured calls skipped, not 2 (the copy and the "
                        "all-reduce of the graph)")
    if other:
        problems.append(f"{len(other)} fingerprints {sorted({v['status'] for v in other})}")
    if not m["graph_ok"]:
        problems.append("the graph's replays computed wrong values")
    if problems:
        print("FAIL values_hash: " + "; ".join(problems[:6]))
        return 1
    print(f"PASS values_hash: {compared} fingerprints taken on the GPU equal the host's "
          f"(1 B to 64 MiB + 3, offsets 0 to 7); the 2 captured calls skipped, the graph "
          "replays right")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run")
    ap.add_argument("--check", nargs=2, metavar=("RUN_DIR", "DIR"))
    args = ap.parse_args()
    if args.run:
        os.makedirs(args.run, exist_ok=True)
        run(args.run)
        return 0
    return check(*args.check)


if __name__ == "__main__":
    sys.exit(main())
