"""shapetrace example: the C examples' failures in a small tensor-parallel PyTorch model.

Each step broadcasts the step number from rank 0, embeds a batch (host-to-device copy), runs a
column-parallel and a row-parallel linear (all_reduce), all-gathers the vocabulary-parallel
logits, and passes an activation down a pipeline of all ranks with send/recv. Then rank 0
captures 4 layers of all-gathered hidden states and its driver receives them and cuts them per
sample, as in examples/hidden_states.c.
Weights are random, from one seed, so the clean run checks its results against an unsharded
reference. --plant picks one failure:
  desync    rank 2 (the last if fewer) runs 511 tokens instead of 512 at step 3
  stall     the last rank stops before step 5; the others end through torch's timeout
  kill      the last rank is killed with SIGKILL in the middle of step 5
  pipeline  the receiver of rank 2 (the last if fewer) expects one token fewer
  hidden    generate() takes layer 0 for the list of layers (the motivating failure)
  ulp       rank 1 (the last if fewer) embeds a batch one unit in the last place off in one
            element at step 3: shapes agree, values do not (run with shapetrace run --values)

    shapetrace run -- torchrun --nproc-per-node 4 examples/torch_tp.py --share-gpu --plant desync
    shapetrace analyze --dim hidden=1024 shapetrace-*/

--share-gpu puts every rank on cuda:0 (each claims its own NCCL host, loopback sockets).
"""
import argparse
import datetime
import os
import signal
import sys

import torch
import torch.distributed as dist

from torch_ranks import rank_device

HIDDEN = 1024
FFN = 4096
VOCAB = 8192
TOKENS = 512
STEPS = 8
STATE_HIDDEN = 7168
SAMPLES = [512, 259]
LAYERS = 4
# An inference model's dtype. It matters to lineage: the clone of a kernel's output takes its
# element size from the last traced write of those bytes (docs/limits.md).
DTYPE = torch.bfloat16


def setup(share_gpu, timeout_s):
    rank, world, dev = rank_device(share_gpu)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world, dev


def weights(dev):
    """The full weights, the same on every rank (one seed); each rank slices its shard."""
    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(HIDDEN, FFN, generator=g) / HIDDEN ** 0.5
    w2 = torch.randn(FFN, HIDDEN, generator=g) / FFN ** 0.5
    wv = torch.randn(HIDDEN, VOCAB, generator=g) / HIDDEN ** 0.5
    return [w.to(DTYPE).to(dev) for w in (w1, w2, wv)]


def batch(step, tokens):
    g = torch.Generator().manual_seed(step)
    return torch.randn(TOKENS, HIDDEN, generator=g)[:tokens].to(DTYPE)


def reference(x, w1, w2, wv):
    """The unsharded model, in fp32 from the same bf16 inputs."""
    return (torch.relu(x.float() @ w1.float()) @ w2.float()) @ wv.float()


def broadcast_step(step, dev):
    """The driver (rank 0) tells every rank which step to run, as a scheduler does."""
    meta = torch.tensor([step], device=dev)
    dist.broadcast(meta, 0)
    return int(meta.item())


def embed(x_host, dev):
    return x_host.to(dev)


def column_parallel(x, w1_shard):
    return torch.relu(x @ w1_shard)


def row_parallel(h, w2_shard):
    y = h @ w2_shard
    dist.all_reduce(y)
    return y


def gather_logits(y, wv_shard, world):
    shard = y @ wv_shard
    out = torch.empty(world * shard.shape[0], shard.shape[1], dtype=DTYPE, device=y.device)
    dist.all_gather_into_tensor(out, shard)
    # [world, tokens, vocab/world] -> [tokens, vocab]
    return out.view(world, shard.shape[0], -1).permute(1, 0, 2).reshape(shard.shape[0], -1)


def send_activations(act, nxt):
    dist.send(act, nxt)


def recv_activations(act, tokens, prev):
    dist.recv(act[:tokens], prev)


def pipeline_exchange(rank, world, step, act, short_rank):
    """Rank r receives step * 10 + r - 1 from rank r - 1 and sends step * 10 + r to r + 1."""
    wrong = 0
    if rank > 0:
        tokens = TOKENS - 1 if rank == short_rank else TOKENS
        recv_activations(act, tokens, rank - 1)
        wrong += int((act[:tokens] != float(step * 10 + rank - 1)).sum().item())
    act.fill_(float(step * 10 + rank))
    if rank + 1 < world:
        send_activations(act, rank + 1)
    return wrong


def capture_layer(full):
    return full.clone()


def transfer_to_driver(states):
    return [s.cpu() for s in states]


def receive_states(host_states):
    return [h.cuda() for h in host_states]


def generate(result):
    layers = result[0]  # written for a one-element list around the layers
    out, off = [], 0
    for n in SAMPLES:
        out.append([layer[off:off + n].cpu() for layer in layers])
        off += n
    return out


def state_value(layer, tokens, cols):
    t = torch.arange(tokens).view(-1, 1) % 4
    c = torch.arange(cols).view(1, -1) % 16
    return (t * 64 + c * 4 + layer).to(torch.bfloat16)


def hidden_states(rank, world, dev, buggy):
    """All ranks gather [771, 7168/tp] shards per layer; rank 0 captures, its driver cuts."""
    tokens, hc = sum(SAMPLES), STATE_HIDDEN // world
    ref = [state_value(layer, tokens, STATE_HIDDEN) for layer in range(LAYERS)]
    captured = []
    for layer in range(LAYERS):
        shard = ref[layer][:, rank * hc:(rank + 1) * hc].contiguous().to(dev)
        gathered = torch.empty(world * tokens, hc, dtype=torch.bfloat16, device=dev)
        dist.all_gather_into_tensor(gathered, shard)
        full = gathered.view(world, tokens, hc).permute(1, 0, 2).reshape(tokens, STATE_HIDDEN)
        if rank == 0:
            captured.append(capture_layer(full))
    if rank != 0:
        return "no states (not the driver)"
    received = receive_states(transfer_to_driver(captured))
    # The bug: an upgraded RPC returns the list of layers itself, not a list around it.
    per_sample = generate(received if buggy else [received])
    shapes = sorted({tuple(t.shape) for s in per_sample for t in s})
    if buggy:
        return f"generate() returned {sum(map(len, per_sample))} tensors of {shapes}"
    off, bad = 0, 0
    for n, tensors in zip(SAMPLES, per_sample):
        bad += sum(int(not torch.equal(t, ref[layer][off:off + n]))
                   for layer, t in enumerate(tensors))
        off += n
    return f"generate() returned tensors of {shapes}; data {'WRONG' if bad else 'checked'}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plant", choices=["none", "desync", "stall", "kill", "pipeline", "hidden",
                                        "ulp"], default="none")
    ap.add_argument("--share-gpu", action="store_true", help="every rank on cuda:0")
    ap.add_argument("--timeout", type=float, default=30, help="torch's collective timeout, s")
    args = ap.parse_args()
    rank, world, dev = setup(args.share_gpu, args.timeout)
    odd = min(2, world - 1)
    w1, w2, wv = weights(dev)
    f, v = FFN // world, VOCAB // world
    w1_shard = w1[:, rank * f:(rank + 1) * f].contiguous()
    w2_shard = w2[rank * f:(rank + 1) * f].contiguous()
    wv_shard = wv[:, rank * v:(rank + 1) * v].contiguous()
    act = torch.empty(TOKENS, HIDDEN, dtype=DTYPE, device=dev)
    worst, wrong = 0.0, 0
    for step in range(STEPS):
        if step == 5 and rank == world - 1 and args.plant == "stall":
            print(f"rank {rank}: stopping before step {step}", flush=True)
            return 0  # leaves without a word: the others wait
        step = broadcast_step(step, dev)
        tokens = TOKENS - 1 if args.plant == "desync" and step == 3 and rank == odd else TOKENS
        x_host = batch(step, tokens)
        if args.plant == "ulp" and step == 3 and rank == min(1, world - 1):
            x_host.view(torch.int16)[0, 0] += 1  # the next bf16 value: one unit in the last place
        x = embed(x_host, dev)
        h = column_parallel(x, w1_shard)
        if step == 5 and rank == world - 1 and args.plant == "kill":
            print(f"rank {rank}: killed in step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        y = row_parallel(h, w2_shard)
        logits = gather_logits(y, wv_shard, world)
        ref = reference(x, w1, w2, wv)
        worst = max(worst, float((logits.float() - ref).norm() / ref.norm()))
        short = odd if args.plant == "pipeline" else -1
        wrong += pipeline_exchange(rank, world, step, act, short)
    print(f"rank {rank}: {STEPS} steps done, logits within {worst:.1e} of the reference, "
          f"received activations {'WRONG' if wrong else 'checked'}", flush=True)
    print(f"rank {rank}: {hidden_states(rank, world, dev, args.plant == 'hidden')}", flush=True)
    ok = worst < 2e-2 and not wrong  # bf16 partial sums
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
