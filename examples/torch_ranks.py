"""shapetrace examples: where a torchrun rank runs. With share_gpu every rank uses cuda:0 and
claims an NCCL host of its own, so that several real NCCL ranks can share one GPU."""
import os

import torch


def rank_device(share_gpu):
    """RANK, WORLD_SIZE and the rank's device, set as current; call before NCCL initializes."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if share_gpu:
        # NCCL refuses two ranks on one GPU of one host ("Duplicate GPU detected"); a host id
        # per rank passes that check, and the ranks talk over sockets on loopback.
        os.environ["NCCL_HOSTID"] = f"rank-{rank}"
        os.environ["NCCL_IB_DISABLE"] = "1"
        os.environ["NCCL_SOCKET_IFNAME"] = "lo"
        dev = torch.device("cuda:0")
    else:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    return rank, world, dev
