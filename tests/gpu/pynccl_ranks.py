"""shapetrace GPU check: NCCL through ctypes from N processes, the way vLLM's pynccl does it.

Started by torchrun (for RANK and WORLD_SIZE only: no torch process group). Rank 0 writes the
unique id to a file that the others wait for; every rank joins with ncclCommInitRank, makes 3
eager all-reduces, captures one into a CUDA graph and replays it 5 times, checking each sum.
Usage: pynccl_ranks.py UID_FILE [--share-gpu]. Prints 'rank R: pynccl ok' or '... FAIL why'."""
import ctypes
import faulthandler
import glob
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples"))
from torch_ranks import rank_device  # noqa: E402

NCCL_FLOAT32, NCCL_SUM = 7, 0
EAGER, REPLAYS, COUNT = 3, 5, 1 << 16


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def nccl_path():
    """The libnccl of the nvidia-nccl wheel, the copy torch loads."""
    import nvidia.nccl  # the wheel torch loads its NCCL from
    for p in list(nvidia.nccl.__path__):
        found = glob.glob(os.path.join(p, "lib", "libnccl.so*"))
        if found:
            return found[0]
    return "libnccl.so.2"


def share_unique_id(lib, path, rank):
    uid = UniqueId()
    if rank == 0:
        assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
        with open(path + ".tmp", "wb") as f:
            f.write(bytes(uid.internal))
        os.rename(path + ".tmp", path)
        return uid
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no unique id in {path} after 60 s")
        time.sleep(0.05)
    with open(path, "rb") as f:
        ctypes.memmove(uid.internal, f.read(128), 128)
    return uid


def pynccl_all_reduce(lib, comm, send, recv):
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    return lib.ncclAllReduce(ctypes.c_void_p(send.data_ptr()), ctypes.c_void_p(recv.data_ptr()),
                             ctypes.c_size_t(send.numel()), NCCL_FLOAT32, NCCL_SUM, comm, stream)


def main():
    rank, world, dev = rank_device("--share-gpu" in sys.argv)
    lib = ctypes.CDLL(nccl_path())
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    uid = share_unique_id(lib, sys.argv[1], rank)
    comm = ctypes.c_void_p()
    rc = lib.ncclCommInitRank(ctypes.byref(comm), world, uid, rank)
    if rc:
        print(f"rank {rank}: pynccl FAIL init {lib.ncclGetErrorString(rc).decode()}")
        return 1
    send = torch.empty(COUNT, device=dev)
    recv = torch.empty(COUNT, device=dev)
    bad = []
    for i in range(EAGER):
        send.fill_(float(rank + i))
        rc = pynccl_all_reduce(lib, comm, send, recv)
        want = float(world * (world - 1) // 2 + world * i)
        if rc or not torch.all(recv == want).item():
            bad.append(f"eager {i} rc {rc}")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        rc = pynccl_all_reduce(lib, comm, send, recv)
    if rc:
        bad.append(f"capture rc {rc}")
    for i in range(REPLAYS):
        send.fill_(float(i + 1))
        recv.fill_(-1.0)
        graph.replay()
        if not torch.all(recv == float(world * (i + 1))).item():
            bad.append(f"replay {i}")
    torch.cuda.synchronize()
    # A graph that holds captured NCCL work must go before its communicator: with the graph
    # still alive, ncclCommDestroy waited forever (seen with 2 ranks on one H200).
    del graph
    faulthandler.dump_traceback_later(30, exit=True)
    lib.ncclCommDestroy(comm)
    print(f"rank {rank}: pynccl {'FAIL ' + ', '.join(bad) if bad else 'ok'} "
          f"({EAGER} eager, 1 captured, {REPLAYS} replays)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
