"""shapetrace GPU bench: a decode loop's throughput with --values, in one process.

The process runs under `shapetrace run --dormant [--values all --values-every N]` and switches
recording on and off itself (`shapetrace attach RUN_DIR --on/--off`) between blocks of decode
steps, so that the armed and dormant blocks share one process, one allocator state and one NCCL
communicator (steps of several processes on one GPU differ by more than what is measured). A
step of a small tensor-parallel model of world size 1, bf16: the embedding of the last tokens,
LAYERS layers each a column-parallel and a row-parallel linear with its all-reduce, the logits
all-gathered, sampled (argmax) and copied to the host, and the tokens copied back: with
--values all, LAYERS + 1 collectives and 2 copies fingerprinted a step.

  bench_values.py RESULTS CONFIG PORT --attach RUN_DIR --tool PATH [--tool-ld DIRS]
      appends one JSON line: CONFIG, each block's ms per step, dormant and armed
  bench_values.py --table RESULTS"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

HIDDEN, FFN, VOCAB, BATCH, LAYERS = 2048, 8192, 32000, 8, 8
STEPS = int(os.environ.get("SHP_BENCH_STEPS", "60"))  # a block
ROUNDS = int(os.environ.get("SHP_BENCH_ROUNDS", "7"))


def bench(args):
    import torch
    import torch.distributed as dist

    from bench_attach import attach  # `shapetrace attach RUN_DIR --on/--off`, untraced

    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=0,
                            world_size=1, device_id=dev, timeout=datetime.timedelta(seconds=60))
    g = torch.Generator(device=dev).manual_seed(26)
    dt = torch.bfloat16
    emb = torch.randn(VOCAB, HIDDEN, device=dev, generator=g).to(dt) / 8
    w1 = [torch.randn(HIDDEN, FFN, device=dev, generator=g).to(dt) / 64 for _ in range(LAYERS)]
    w2 = [torch.randn(FFN, HIDDEN, device=dev, generator=g).to(dt) / 128 for _ in range(LAYERS)]
    wv = torch.randn(HIDDEN, VOCAB, device=dev, generator=g).to(dt) / 64
    logits_all = torch.empty(BATCH, VOCAB, device=dev, dtype=dt)
    tokens = torch.zeros(BATCH, dtype=torch.long, device=dev)

    def sample(logits):
        return logits.argmax(-1).cpu()  # the copy to the host a sampler makes

    def feed(host):
        return host.to(dev)

    def step(tokens):
        x = emb[tokens]
        for k in range(LAYERS):
            y = torch.relu(x @ w1[k]) @ w2[k]
            dist.all_reduce(y)
            x = x + y
        logits = x @ wv
        dist.all_gather_into_tensor(logits_all, logits)
        return feed(sample(logits_all))

    for _ in range(10):
        tokens = step(tokens)
    ms = {"off": [], "on": []}
    for r in range(ROUNDS):
        for state in (["off", "on"] if r % 2 == 0 else ["on", "off"]):
            attach(args, "--" + state)
            for _ in range(3):
                tokens = step(tokens)  # the attach takes effect at the next traced call
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(STEPS):
                tokens = step(tokens)
            torch.cuda.synchronize()
            ms[state].append((time.perf_counter() - t) / STEPS * 1e3)
    attach(args, "--off")
    dist.destroy_process_group()
    with open(args.results, "a") as f:
        f.write(json.dumps({"config": args.config, "steps": STEPS, "layers": LAYERS,
                            "ms_off": ms["off"], "ms_on": ms["on"]}) + "\n")


def table(path):
    rows = [json.loads(line) for line in open(path)]
    print("| config | dormant ms/step | armed ms/step | armed - dormant, ms/step (min..max) "
          "| tokens/s dormant, armed |")
    print("|---|---|---|---|---|")
    for r in rows:
        off, on = r["ms_off"], r["ms_on"]
        d = sorted(b - a for a, b in zip(off, on))
        print(f"| {r['config']} | {statistics.median(off):.3f} | {statistics.median(on):.3f} | "
              f"{statistics.median(d):+.3f} ({d[0]:+.3f}..{d[-1]:+.3f}) | "
              f"{BATCH * 1e3 / statistics.median(off):.0f}, "
              f"{BATCH * 1e3 / statistics.median(on):.0f} |")
    print(f"medians of {len(rows[0]['ms_off']) if rows else 0} blocks of steps each way, "
          f"alternating in one process; batch {BATCH}, {LAYERS} layers, world size 1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("config", nargs="?")
    ap.add_argument("port", nargs="?")
    ap.add_argument("--attach")
    ap.add_argument("--tool")
    ap.add_argument("--tool-ld")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args()
    if args.table:
        table(args.results)
        return 0
    bench(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
