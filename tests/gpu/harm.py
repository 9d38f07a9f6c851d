"""shapetrace GPU check: a real torch + NCCL process is not harmed by its trace (issue 22). Run
untraced and traced (tests/gpu/run.sh, part `harm`); the two outputs must be the same, line for
line. It makes copies and collectives from new Python and native call sites (so that native
stacks meet frames libunwind has not cached and checks their memory), then prints:
  fds KIND=N ...   its open descriptors by kind (pipe, socket, anon_inode, dev, file, other)
  held N           how many descriptors it holds in all (libunwind's pipe and the trace's own
                   descriptor once made 3 more)
  opens N          with a soft RLIMIT_NOFILE of what it holds untraced plus 64 (run.sh gives
                   the untraced count), how many files it can still open; then 8 more traced
                   calls while it holds them all
  done"""
import os
import resource
import sys

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", sys.argv[1] if len(sys.argv) > 1 else "29541")
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)


def deep(level, t):
    """A new Python frame for each level, and a new thread's stack below the first ones."""
    if level:
        return deep(level - 1, t) + 0
    dist.all_reduce(t)
    return t.cpu()


def work(n):
    for i in range(n):
        deep(i % 12, torch.ones(256 + i, device=dev))
    torch.cuda.synchronize()


def kinds():
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # listdir's own descriptor, closed before it returned
        kind = ("pipe" if target.startswith("pipe:") else
                "socket" if target.startswith("socket:") else
                "anon_inode" if target.startswith("anon_inode:") else
                "dev" if target.startswith("/dev/") else
                "file" if target.startswith("/") else "other")
        out[kind] = out.get(kind, 0) + 1
    return out


work(24)
import threading  # noqa: E402 - the threads come after the first calls, as a server's do

t = threading.Thread(target=work, args=(24,))
t.start()
t.join()
print("fds", " ".join(f"{k}={v}" for k, v in sorted(kinds().items())))

held = len(os.listdir("/proc/self/fd")) - 1  # less listdir's own
print("held", held)
# The limit counts from what an untraced run holds, given by run.sh; traced, the same.
base = int(sys.argv[2]) if len(sys.argv) > 2 else held
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, base + 64), hard))
opened = []
try:
    while len(opened) < 1000:
        opened.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
n = len(opened)
work(8)  # traced calls while the application holds every descriptor it may
for fd in opened:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print(f"opens {n}")
dist.destroy_process_group()
print("done")
