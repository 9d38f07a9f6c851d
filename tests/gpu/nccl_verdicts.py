"""shapetrace GPU check: NCCL through ctypes (as vLLM's pynccl) in the two cases the analyzer
learned from real stacks: NCCL on a side stream inside a CUDA graph, and a call NCCL refuses.

  nccl_verdicts.py UID_FILE sidestream [--plant] [--share-gpu] [--deadline S]
      one graph per bucket (1024 and 4096 floats); inside each capture the all-reduce runs on a
      side stream forked from the capturing stream by an event and joined back (how torch and
      vLLM put NCCL on a side stream in a graph); a replay a step. --plant: at step 2 the last
      rank replays the other bucket (a count mismatch inside a replay).
  nccl_verdicts.py UID_FILE refused [--plant] [--share-gpu] [--deadline S]
      a broadcast and an all-reduce a step; --plant: at step 1 the last rank broadcasts from root
      WORLD (invalid: NCCL refuses it with ncclInvalidArgument, nothing enqueued), ignores the
      error as a wrapper that drops NCCL's return code would, and goes on.
Started by torchrun (RANK and WORLD_SIZE only). A step that has not finished after --deadline
seconds ends the process (faulthandler): a planted run may wait on the GPU. Prints
'rank R: MODE done' at the end."""
import ctypes
import faulthandler
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples"))
from pynccl_ranks import UniqueId, nccl_path, share_unique_id  # noqa: E402
from torch_ranks import rank_device  # noqa: E402

NCCL_INT32, NCCL_FLOAT32, NCCL_SUM = 2, 7, 0
BUCKETS = [1024, 4096]
SCHEDULE = [0, 1, 0, 1]


def all_reduce(lib, comm, t, stream):
    return lib.ncclAllReduce(ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(t.data_ptr()),
                             ctypes.c_size_t(t.numel()), NCCL_FLOAT32, NCCL_SUM, comm,
                             ctypes.c_void_p(stream.cuda_stream))


def broadcast(lib, comm, t, root, stream):
    return lib.ncclBroadcast(ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(t.data_ptr()),
                             ctypes.c_size_t(t.numel()), NCCL_INT32, root, comm,
                             ctypes.c_void_p(stream.cuda_stream))


def capture_side(lib, comm, n, dev):
    """A graph whose all-reduce runs on a side stream that joins the capture by an event."""
    buf = torch.ones(n, device=dev)
    cap, side = torch.cuda.Stream(), torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    fork, join = torch.cuda.Event(), torch.cuda.Event()
    cap.wait_stream(torch.cuda.current_stream())
    with torch.cuda.graph(graph, stream=cap):
        fork.record(cap)
        side.wait_event(fork)
        rc = all_reduce(lib, comm, buf, side)
        join.record(side)
        cap.wait_event(join)
    torch.cuda.current_stream().wait_stream(cap)
    return graph, buf, rc


def sidestream(lib, comm, rank, world, dev, plant, deadline):
    eager = torch.ones(1024, device=dev)
    bad = []
    if all_reduce(lib, comm, eager, torch.cuda.current_stream()):
        bad.append("eager all-reduce")
    graphs = [capture_side(lib, comm, n, dev) for n in BUCKETS]
    bad += [f"capture {i} rc {g[2]}" for i, g in enumerate(graphs) if g[2]]
    for step, b in enumerate(SCHEDULE):
        if plant and step == 2 and rank == world - 1:
            b = 1 - b
        graph, buf, _ = graphs[b]
        faulthandler.dump_traceback_later(deadline, exit=True)
        buf.fill_(1.0)
        graph.replay()
        torch.cuda.synchronize()
        faulthandler.cancel_dump_traceback_later()
        if not plant and not torch.all(buf == float(world)).item():
            bad.append(f"step {step} sum")
    del graphs  # before the communicator (see pynccl_ranks.py)
    return bad


def refused(lib, comm, rank, world, dev, plant, deadline):
    t = torch.zeros(256, dtype=torch.int32, device=dev)
    x = torch.ones(1024, device=dev)
    s = torch.cuda.current_stream()
    bad = []
    for step in range(4):
        root = world if plant and step == 1 and rank == world - 1 else 0
        faulthandler.dump_traceback_later(deadline, exit=True)
        rc = broadcast(lib, comm, t, root, s)
        if rc and root == 0:
            bad.append(f"step {step} broadcast rc {rc}")
        if rc and root != 0:
            print(f"rank {rank}: NCCL refused the broadcast from root {root}: "
                  f"{lib.ncclGetErrorString(rc).decode()}", flush=True)
        if all_reduce(lib, comm, x, s):
            bad.append(f"step {step} all-reduce")
        torch.cuda.synchronize()
        faulthandler.cancel_dump_traceback_later()
    return bad


def main():
    uid_file, mode = sys.argv[1], sys.argv[2]
    plant = "--plant" in sys.argv
    deadline = float(sys.argv[sys.argv.index("--deadline") + 1]) if "--deadline" in sys.argv \
        else 20.0
    rank, world, dev = rank_device("--share-gpu" in sys.argv)
    lib = ctypes.CDLL(nccl_path())
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    uid = share_unique_id(lib, uid_file, rank)
    assert isinstance(uid, UniqueId)
    comm = ctypes.c_void_p()
    rc = lib.ncclCommInitRank(ctypes.byref(comm), world, uid, rank)
    if rc:
        print(f"rank {rank}: {mode} FAIL init {lib.ncclGetErrorString(rc).decode()}")
        return 1
    run = sidestream if mode == "sidestream" else refused
    bad = run(lib, comm, rank, world, dev, plant, deadline)
    faulthandler.dump_traceback_later(30, exit=True)
    lib.ncclCommDestroy(comm)
    print(f"rank {rank}: {mode} {'FAIL ' + ', '.join(bad) if bad else 'done'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
