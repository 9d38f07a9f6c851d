"""shapetrace GPU check: real torch + NCCL on one GPU, under the preload. Exercises what a naive
interposer gets wrong: torch's RTLD_LOCAL libnccl (init_process_group), .cpu() and clones
(cudaMemcpyAsync), a CUDA graph with a captured all-reduce and replays, and NCCL through
ctypes + dlsym(handle) the way vLLM's pynccl does. Prints one 'check NAME ok|FAIL' line each."""
import ctypes
import os
import sys

import torch
import torch.distributed as dist

from pynccl_ranks import nccl_path

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)


def layer_allreduce(t):
    dist.all_reduce(t)


def gather_logits(t):
    out = torch.empty_like(t)
    dist.all_gather_into_tensor(out, t)
    return out


def capture_hidden(h):
    return h.clone()


def generate(h, lens):
    out, off = [], 0
    for n in lens:
        out.append(h[off:off + n].cpu())
        off += n
    return out


x = torch.ones(1024, device=dev)
layer_allreduce(x)
logits = gather_logits(torch.randn(4096, device=dev))
h = capture_hidden(torch.randn(771, 7168, dtype=torch.bfloat16, device=dev))
parts = generate(h, [512, 259])
print("check eager", "ok" if x[0].item() == 1.0 and parts[0].shape == (512, 7168) else "FAIL")

try:
    y = torch.ones(2048, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer_allreduce(y)  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        layer_allreduce(y)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    print("check graph ok")
except Exception as e:  # noqa: BLE001 - report and carry on with the other checks
    print("check graph FAIL", e)


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def pynccl_allreduce(lib, comm, t):
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    return lib.ncclAllReduce(ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(t.data_ptr()),
                             ctypes.c_size_t(t.numel()), 7, 0, comm, stream)


try:
    lib = ctypes.CDLL(nccl_path())
    uid = UniqueId()
    comm = ctypes.c_void_p()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    assert lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    z = torch.ones(256, device=dev)
    rc = [pynccl_allreduce(lib, comm, z) for _ in range(3)]
    torch.cuda.synchronize()
    print("check ctypes", "ok" if rc == [0, 0, 0] else f"FAIL {rc}")
except Exception as e:  # noqa: BLE001
    print("check ctypes FAIL", e)

dist.destroy_process_group()
print("done", file=sys.stderr)
