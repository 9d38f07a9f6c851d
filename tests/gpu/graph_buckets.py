"""shapetrace GPU scenario: CUDA graphs per batch-size bucket, as vLLM's decode steps run.

Each rank captures one graph per bucket (an all_reduce of a bucket-sized tensor, then a copy of
its result), then replays one graph a step and reads the result back with .cpu(). --plant: at
step 3, rank 1 replays the graph of another bucket than its peers (its unpadded token count; cf.
vLLM pull request 25906). The peers then wait inside that replay's all-reduce, on the GPU,
where torch's timeout never looks (captured work is not watched): a step that has not finished
after --deadline seconds ends the process (faulthandler, exit status 1).
Usage: torchrun --nproc-per-node 2 graph_buckets.py [--plant] [--share-gpu] [--deadline S]"""
import argparse
import datetime
import faulthandler
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples"))
from torch_ranks import rank_device  # noqa: E402

BUCKETS = [1024, 2048, 4096, 8192]
SCHEDULE = [0, 1, 2, 3, 1, 0]  # the bucket each step pads its batch to
PLANT_STEP, PLANT_RANK, PLANT_BUCKET = 3, 1, 2


def capture_bucket(n, dev):
    buf = torch.empty(n, device=dev)
    out = torch.empty(n, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        buf.fill_(1.0)
        dist.all_reduce(buf)  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(buf)
        out.copy_(buf)
    return graph, buf, out


def replay_step(graphs, bucket, value):
    graph, buf, out = graphs[bucket]
    buf.fill_(value)
    graph.replay()
    return out.cpu()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plant", action="store_true")
    ap.add_argument("--share-gpu", action="store_true")
    ap.add_argument("--deadline", type=float, default=20)
    args = ap.parse_args()
    rank, world, dev = rank_device(args.share_gpu)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=args.deadline))
    graphs = [capture_bucket(n, dev) for n in BUCKETS]
    wrong = 0
    for step, bucket in enumerate(SCHEDULE):
        if args.plant and step == PLANT_STEP and rank == PLANT_RANK:
            bucket = PLANT_BUCKET
        faulthandler.dump_traceback_later(args.deadline, exit=True)
        got = replay_step(graphs, bucket, float(step + 1))
        faulthandler.cancel_dump_traceback_later()
        wrong += int((got != float(world * (step + 1))).sum().item())
        print(f"rank {rank}: step {step} replayed bucket {BUCKETS[bucket]}", flush=True)
    print(f"rank {rank}: {len(SCHEDULE)} steps, sums {'WRONG' if wrong else 'checked'}",
          flush=True)
    # The graphs hold captured NCCL work: they go before the communicator (with them alive,
    # destroy_process_group waited forever in ncclCommFinalize).
    del graphs
    faulthandler.dump_traceback_later(args.deadline, exit=True)
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
