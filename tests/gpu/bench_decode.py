"""shapetrace GPU bench: the time of a decode step of a tensor-parallel serving loop, traced
against not, measured inside one process.

The loop is shaped like a 7B model's decode at TP 1 (32 layers, hidden 4096, FFN 11008, bf16,
batch 8): each step broadcasts the step's metadata from the scheduler, copies the new tokens'
embeddings host to device, and per layer runs a column-parallel and a row-parallel matmul with
a dist.all_reduce after each row-parallel one (two a layer, as examples/torch_tp.py and
Megatron-style TP do), then all-gathers the logits and takes the sampled tokens to the host
(.cpu()). World size 1: dist.all_reduce still calls NCCL (DTensor on a mesh of one rank would
not).

With --attach RUN_DIR the process runs under `shapetrace run --dormant` and switches recording
on and off itself between blocks of steps (`shapetrace attach RUN_DIR --on/--off`): armed and
dormant blocks alternate (ABBA), so that the two states share one process, one allocator and one
communicator, and slow drifts cancel. Without it every block is 'plain' (an untraced process, or
one run with NCCL_DEBUG or the Flight Recorder, which cannot be switched inside a process).
Appends one JSON line per state with every block's ms per step to RESULTS.
Usage: bench_decode.py RESULTS CONFIG PORT [--blocks N] [--steps N] [--attach RUN_DIR --tool PATH
[--tool-ld DIRS]]"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

LAYERS, HIDDEN, FFN, VOCAB, BATCH = 32, 4096, 11008, 32000, 8


class Model:
    def __init__(self, dev):
        g = torch.Generator(device=dev).manual_seed(1)

        def rand(*shape, scale):
            return (torch.randn(*shape, generator=g, device=dev) * scale).to(torch.bfloat16)

        self.layers = [[rand(HIDDEN, 3 * HIDDEN, scale=HIDDEN ** -0.5),
                        rand(HIDDEN, HIDDEN, scale=HIDDEN ** -0.5),
                        rand(HIDDEN, 2 * FFN, scale=HIDDEN ** -0.5),
                        rand(FFN, HIDDEN, scale=FFN ** -0.5)] for _ in range(LAYERS)]
        self.lm_head = rand(HIDDEN, VOCAB, scale=HIDDEN ** -0.5)
        self.embed = rand(VOCAB, HIDDEN, scale=1.0).cpu()
        # the new tokens' rows go through one pinned staging buffer, as serving engines keep
        self.staging = torch.empty(BATCH, HIDDEN, dtype=torch.bfloat16, pin_memory=True)
        self.dev = dev

    def attention(self, x, qkv, o):
        q, k, v = (x @ qkv).chunk(3, dim=-1)
        y = (torch.softmax(q * k, dim=-1) * v) @ o  # a stand-in for attention over one token
        dist.all_reduce(y)  # the row-parallel output projection
        return x + y

    def mlp(self, x, up, down):
        gate, val = (x @ up).chunk(2, dim=-1)
        y = (torch.nn.functional.silu(gate) * val) @ down
        dist.all_reduce(y)  # the row-parallel down projection
        return x + y

    def step(self, tokens_host, step):
        meta = torch.tensor([step, BATCH], device=self.dev)
        dist.broadcast(meta, 0)  # the scheduler's step and batch size
        torch.index_select(self.embed, 0, tokens_host, out=self.staging)
        x = self.staging.to(self.dev, non_blocking=True)
        for qkv, o, up, down in self.layers:
            x = self.attention(x, qkv, o)
            x = self.mlp(x, up, down)
        logits = x @ self.lm_head
        gathered = torch.empty(dist.get_world_size(), *logits.shape, dtype=logits.dtype,
                               device=self.dev)
        dist.all_gather_into_tensor(gathered, logits)  # vocabulary-parallel logits
        return torch.argmax(gathered[0], dim=-1).cpu()


def block_ms(model, tokens, steps, first_step):
    """The block's wall ms a step, the calling thread's CPU ms a step, the sampled tokens."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    c = time.thread_time()
    for s in range(steps):
        tokens = model.step(tokens, first_step + s)
    torch.cuda.synchronize()
    return ((time.perf_counter() - t) / steps * 1e3, (time.thread_time() - c) / steps * 1e3,
            tokens)


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
    ap.add_argument("--blocks", type=int, default=24)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--attach")
    ap.add_argument("--tool")
    ap.add_argument("--tool-ld")
    args = ap.parse_args()
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=0,
                            world_size=1, device_id=dev, timeout=datetime.timedelta(seconds=60))
    model = Model(dev)
    tokens = torch.arange(BATCH)
    _, _, tokens = block_ms(model, tokens, 5, 0)  # warm-up: allocator, NCCL, kernels
    times, cpu = {}, {}
    step = 5
    for b in range(args.blocks):
        if args.attach:
            # ABBA: off on on off off on ... so that neither state always comes first
            state = "on" if (b % 4) in (1, 2) else "off"
            attach(args, "--" + state)
            model.step(tokens, step)  # the call in which the switch takes effect
            step += 1
        else:
            state = "plain"
        ms, cpu_ms, tokens = block_ms(model, tokens, args.steps, step)
        step += args.steps
        times.setdefault(state, []).append(ms)
        cpu.setdefault(state, []).append(cpu_ms)
    if args.attach:
        attach(args, "--off")
    dist.destroy_process_group()
    calls = 1 + 1 + 2 * LAYERS + 1 + 1  # broadcast, H2D, all-reduces, all-gather, D2H
    with open(args.results, "a") as f:
        for state, ms in times.items():
            f.write(json.dumps({"config": args.config, "state": state, "calls_per_step": calls,
                                "median_ms": statistics.median(ms), "ms": ms,
                                "cpu_ms": cpu[state]}) + "\n")


if __name__ == "__main__":
    main()
