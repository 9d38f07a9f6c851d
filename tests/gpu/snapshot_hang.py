"""shapetrace GPU scenario: a hang that `shapetrace snapshot` must explain, in a torch job started
WITHOUT shapetrace. Each rank runs a decode loop, one tensor-parallel step a token: a matmul, an
all_reduce, and .item() (cudaMemcpyAsync + cudaStreamSynchronize). At step LEAVE_AT the last
rank leaves the loop and waits outside it (wait_outside, sleeping) while the others enter that
step and block, their all-reduce waiting on the GPU for it and their .item() waiting for the
all-reduce. Each rank touches READY/rank<R> just before it blocks; when the file RELEASE exists
the last rank goes back into the loop and every rank finishes (exit status 0).
Usage: torchrun --nproc-per-node 4 snapshot_hang.py --ready DIR --release FILE [--share-gpu]
tests/gpu/snapshot_check.py finds the lines below by their text: keep each call on its own line."""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples"))
from torch_ranks import rank_device  # noqa: E402

STEPS, LEAVE_AT = 8, 3


def decode_step(x, w):
    y = x @ w
    dist.all_reduce(y)
    return y.sum().item()  # the ranks left in the loop wait here


def wait_outside(release):
    while not os.path.exists(release):
        time.sleep(0.05)  # the rank that left the loop waits here


def ready(path, rank):
    open(os.path.join(path, f"rank{rank}"), "w").close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready", required=True)
    ap.add_argument("--release", required=True)
    ap.add_argument("--share-gpu", action="store_true")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    rank, world, dev = rank_device(args.share_gpu)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=args.timeout))
    torch.manual_seed(0)
    x = torch.randn(64, 1024, device=dev)
    w = torch.randn(1024, 1024, device=dev) / 32
    total = 0.0
    for step in range(STEPS):
        if step == LEAVE_AT:
            ready(args.ready, rank)
            if rank == world - 1:
                print(f"rank {rank}: leaving the decode loop at step {step}", flush=True)
                wait_outside(args.release)
        total += decode_step(x, w)
    print(f"rank {rank}: {STEPS} steps, total {total:.3f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
