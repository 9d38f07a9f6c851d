"""shapetrace GPU bench: per-call cost of traced torch calls on real NCCL, in one process.

With --attach RUN_DIR the process runs under `shapetrace run --dormant` and switches recording
on and off itself (`shapetrace attach RUN_DIR --on/--off`) between batches, so the traced and
untraced batches share one process, one allocator state and one NCCL communicator. Without it,
every batch runs as it is (an untraced process, or one with NCCL_DEBUG or the Flight Recorder).
World size 1. Appends one JSON line per (op, state) with every batch's us per call to RESULTS.
Usage: bench_attach.py RESULTS CONFIG PORT [--attach RUN_DIR --tool PATH [--tool-ld DIRS]]"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

ROUNDS = int(os.environ.get("SHP_BENCH_ROUNDS", "7"))


def make_ops(dev):
    ops = {}
    for name, n, calls in (("all_reduce_4KiB", 1 << 10, 4000), ("all_reduce_1MiB", 1 << 18, 2000),
                           ("all_reduce_64MiB", 1 << 24, 200)):
        t = torch.ones(n, device=dev)
        ops[name] = (lambda t=t: dist.all_reduce(t), calls)
    src, dst = torch.ones(256, device=dev), torch.empty(256, device=dev)
    host = torch.empty(256, pin_memory=True)
    ops["copy_d2d_1KiB"] = (lambda: dst.copy_(src), 10000)
    ops["copy_d2h_pinned_1KiB"] = (lambda: host.copy_(src, non_blocking=True), 10000)
    return ops


def per_call_us(fn, calls):
    for _ in range(20):
        fn()  # also the traced call in which an attach takes effect
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def attach(args, switch):
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHAPETRACE_")}
    if args.tool_ld:
        env["LD_LIBRARY_PATH"] = args.tool_ld
    subprocess.run([args.tool, "attach", args.attach, switch], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("config")
    ap.add_argument("port")
    ap.add_argument("--attach")
    ap.add_argument("--tool")
    ap.add_argument("--tool-ld")
    args = ap.parse_args()
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=0,
                            world_size=1, device_id=dev, timeout=datetime.timedelta(seconds=60))
    ops = make_ops(dev)
    times = {}
    for r in range(ROUNDS):
        states = ["plain"] if not args.attach else (["off", "on"] if r % 2 == 0 else
                                                     ["on", "off"])
        for state in states:
            if state != "plain":
                attach(args, "--" + state)
            for name, (fn, calls) in ops.items():
                times.setdefault((name, state), []).append(per_call_us(fn, calls))
    if args.attach:
        attach(args, "--off")
    dist.destroy_process_group()
    with open(args.results, "a") as f:
        for (name, state), us in times.items():
            f.write(json.dumps({"config": args.config, "op": name, "state": state,
                                "median_us": statistics.median(us), "us": us}) + "\n")


if __name__ == "__main__":
    main()
