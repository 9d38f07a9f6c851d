"""shapetrace GPU check: CuPy's own NCCL binding (cupy.cuda.nccl) from N processes, no torch.

Started by torchrun (for RANK and WORLD_SIZE only). Rank 0 writes the unique id to a file that
the others wait for; every rank makes STEPS all-reduces of a data-parallel gradient step, checks
each sum, and all-gathers a metric. --plant on the last rank:
  count  its step-2 all-reduce is one element shorter
  dtype  its step-2 all-reduce is fp16 instead of fp32
Usage: cupy_ranks.py UID_FILE [--share-gpu] [--plant none|count|dtype].
Prints 'rank R: cupy ok' or 'rank R: cupy FAIL why'."""
import argparse
import faulthandler
import os
import time

import cupy as cp
from cupy.cuda import nccl

STEPS, COUNT = 4, 1 << 14


def share_unique_id(path, rank):
    if rank == 0:
        uid = nccl.get_unique_id()  # bytes in CuPy 14 (a tuple of ints in older ones)
        with open(path + ".tmp", "wb") as f:
            f.write(uid if isinstance(uid, bytes) else bytes(b & 0xFF for b in uid))
        os.rename(path + ".tmp", path)
        return uid
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no unique id in {path} after 60 s")
        time.sleep(0.05)
    with open(path, "rb") as f:
        return f.read()


def join(world, uid, rank):
    """CuPy 14 takes the id as bytes, older ones as a tuple of signed chars."""
    try:
        return nccl.NcclCommunicator(world, uid, rank)
    except TypeError:
        return nccl.NcclCommunicator(world, tuple(b - 256 if b > 127 else b for b in uid), rank)


def reduce_gradients(comm, grad, stream, dtype):
    """The data-parallel step's all-reduce of one gradient bucket."""
    nccl_type = nccl.NCCL_FLOAT16 if dtype == cp.float16 else nccl.NCCL_FLOAT32
    out = cp.empty_like(grad)
    comm.allReduce(grad.data.ptr, out.data.ptr, grad.size, nccl_type, nccl.NCCL_SUM, stream.ptr)
    return out


def gather_metric(comm, value, world, stream):
    send = cp.full(1, value, dtype=cp.float32)
    recv = cp.empty(world, dtype=cp.float32)
    comm.allGather(send.data.ptr, recv.data.ptr, 1, nccl.NCCL_FLOAT32, stream.ptr)
    return recv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uid_file")
    ap.add_argument("--share-gpu", action="store_true")
    ap.add_argument("--plant", default="none", choices=["none", "count", "dtype"])
    ap.add_argument("--deadline", type=float, default=40,
                    help="seconds before a rank that waits (a planted mismatch) is ended")
    args = ap.parse_args()
    # A mismatched all-reduce can wait forever inside stream.synchronize(): a watchdog of C's
    # ends the process with its Python stack on stderr.
    faulthandler.dump_traceback_later(args.deadline, exit=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.share_gpu:
        os.environ["NCCL_HOSTID"] = f"rank-{rank}"
        os.environ["NCCL_IB_DISABLE"] = "1"
        os.environ["NCCL_SOCKET_IFNAME"] = "lo"
        cp.cuda.Device(0).use()
    else:
        cp.cuda.Device(int(os.environ.get("LOCAL_RANK", "0"))).use()
    comm = join(world, share_unique_id(args.uid_file, rank), rank)
    stream = cp.cuda.Stream(non_blocking=True)
    ok = True
    for step in range(STEPS):
        odd = rank == world - 1 and step == 2
        n = COUNT - 1 if odd and args.plant == "count" else COUNT
        dtype = cp.float16 if odd and args.plant == "dtype" else cp.float32
        grad = cp.full(n, rank + 1, dtype=dtype)
        out = reduce_gradients(comm, grad, stream, dtype)
        stream.synchronize()
        want = world * (world + 1) / 2
        if args.plant == "none" and not bool(cp.all(out == want)):
            ok = False
            print(f"rank {rank}: cupy FAIL step {step}: sum {float(out[0])} != {want}",
                  flush=True)
    metrics = gather_metric(comm, float(rank), world, stream)
    stream.synchronize()
    if args.plant == "none" and list(cp.asnumpy(metrics)) != list(range(world)):
        ok = False
        print(f"rank {rank}: cupy FAIL gather {cp.asnumpy(metrics)}", flush=True)
    print(f"rank {rank}: cupy {'ok' if ok else 'FAIL'}", flush=True)
    comm.destroy()


if __name__ == "__main__":
    main()
