"""shapetrace GPU bench: wall time per call of traced operations through torch, run once without
and once with the preload (the caller sets LD_PRELOAD). Prints 'name per_call_us'."""
import os
import time

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29519")
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)


def per_call(fn, n):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


a = torch.ones(1024, device=dev)  # 4 KiB
src = torch.ones(256, device=dev)
dst = torch.empty(256, device=dev)
hostbuf = torch.empty(256, pin_memory=True)
print(f"all_reduce_4KiB {per_call(lambda: dist.all_reduce(a), 5000):.2f}")
print(f"copy_d2d_1KiB {per_call(lambda: dst.copy_(src), 20000):.2f}")
print(f"copy_d2h_pinned_1KiB {per_call(lambda: hostbuf.copy_(src, non_blocking=True), 20000):.2f}")
dist.destroy_process_group()
