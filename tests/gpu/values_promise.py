"""shapetrace GPU check: NCCL's promise that the rule of value_mismatch relies on: an all-reduce
gives every rank the same bits. Under torchrun, N ranks (sharing one GPU with --share-gpu) each
all-reduce their own random tensors, bf16 and fp32, 4 KiB to 64 MiB, and compare their outputs
bit for bit (two 64-bit digests of each output, gathered and compared on rank 0). The algorithm and protocol
are the job's NCCL_ALGO and NCCL_PROTO (run.sh makes one job per pair); rank 0 appends one JSON
line per case to RESULTS. Run under `shapetrace run --values collectives`, its traces must give
no value_mismatch either.

  values_promise.py RESULTS [--share-gpu]        (under torchrun)
  values_promise.py --table RESULTS              the table of every job's lines"""
import argparse
import datetime
import json
import os
import sys

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
REPEATS = 3


def promise(results, share_gpu):
    import torch
    import torch.distributed as dist

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "examples"))
    from torch_ranks import rank_device

    rank, world, dev = rank_device(share_gpu)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=120))
    algo, proto = os.environ.get("NCCL_ALGO", "default"), os.environ.get("NCCL_PROTO", "default")
    lines = []
    for dtype in (torch.bfloat16, torch.float32):
        es = torch.tensor([], dtype=dtype).element_size()
        for nbytes in SIZES:
            differ = set()
            for rep in range(REPEATS):
                g = torch.Generator(device=dev).manual_seed(1000 * rank + 17 * rep + nbytes % 97)
                x = torch.randn(nbytes // es, device=dev, generator=g).to(dtype)
                dist.all_reduce(x)
                # Two 64-bit digests of the output's 32-bit words, each weighted by its index,
                # made on the GPU and gathered: the whole outputs gathered over loopback sockets
                # took minutes a job.
                words = x.view(torch.int32).to(torch.int64)
                idx = torch.arange(words.numel(), device=dev, dtype=torch.int64)
                mine = torch.stack([(words * (2 * idx + 1)).sum(), (words * (idx * idx + 7)).sum()])
                every = torch.empty(world, 2, dtype=torch.int64, device=dev)
                dist.all_gather_into_tensor(every, mine)
                if rank == 0:
                    for r in range(1, world):
                        if not torch.equal(every[r], every[0]):
                            differ.add(r)
            if rank == 0:
                lines.append({"algo": algo, "proto": proto, "ranks": world,
                              "dtype": str(dtype).replace("torch.", ""), "bytes": nbytes,
                              "repeats": REPEATS, "same": not differ,
                              "differ_ranks": sorted(differ)})
    dist.destroy_process_group()
    if rank == 0:
        with open(results, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        bad = [x for x in lines if not x["same"]]
        print(f"values_promise {algo}/{proto}: {len(lines) - len(bad)} of {len(lines)} cases "
              "bit-identical on every rank")


def table(results):
    rows = [json.loads(line) for line in open(results)] if os.path.exists(results) else []
    pairs = list(dict.fromkeys((r["algo"], r["proto"]) for r in rows))
    cases = list(dict.fromkeys((r["dtype"], r["bytes"]) for r in rows))
    cell = {(r["algo"], r["proto"], r["dtype"], r["bytes"]): r for r in rows}
    head = ["dtype", "bytes"] + [f"{a}/{p}" for a, p in pairs]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for dtype, nbytes in cases:
        cells = [dtype, f"{nbytes >> 10} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"]
        for a, p in pairs:
            r = cell.get((a, p, dtype, nbytes))
            cells.append("-" if not r else "same" if r["same"] else
                         "DIFFER (ranks " + ",".join(map(str, r["differ_ranks"])) + ")")
        print("| " + " | ".join(cells) + " |")
    bad = [r for r in rows if not r["same"]]
    print(f"{len(rows)} cases, {len(bad)} where ranks' all-reduce outputs differ")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--share-gpu", action="store_true")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args()
    if args.table:
        return table(args.results)
    promise(args.results, args.share_gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
