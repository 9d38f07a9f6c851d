"""shapetrace GPU checks: a Hugging Face Llama, built from a config with random weights (one seed,
the same on every rank), served with torch's DTensor tensor parallelism: q/k/v and gate/up
column-parallel, o_proj and down_proj row-parallel (one all-reduce each per layer), greedy
decoding without a cache. Code no one here wrote, for the verdicts' call sites.

--plant picks one failure on the last rank:
  prompt   its prompt is one token longer (the row-parallel all-reduces' counts differ)
  fp16     its model is cast to fp16 once sharded (the all-reduces' datatypes differ; cast
           before, the weights' distribution already disagrees, a p2p finding)
  leave    it leaves the decode loop after step 2 (the others go on: a missing collective)
  hang     it leaves the decode loop after step 2 and sleeps --hang-s seconds while the others
           wait in their next all-reduce (for `shapetrace snapshot` of a job not traced)
  perturb  from step 2 on, its copy of the final norm's weights (replicated, not sharded) is one
           unit in the last place off: the logits it computes from its own residual stream
           differ, while every all-reduce agrees (values differ, shapes agree: run --values
           copies --values-site decode_step). Steps 0 and 1 agree, which tells the analyzer the
           copy's site holds replicated data (a site whose ranks differ from the start holds a
           shard). A unit off in the input embeddings is not enough: the residual adds each
           layer's all-reduced output, some twenty times larger, and the difference rounds away
--share-gpu puts every rank on cuda:0 (each claims its own NCCL host, loopback sockets).
Prints 'llama: rank R step S token T' per step and 'llama: rank R done'."""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples"))
from torch_ranks import rank_device  # noqa: E402


def build_model(dev, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=8192, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=256)
    torch.manual_seed(1234)
    model = LlamaForCausalLM(cfg).to(dtype).to(dev)
    model.eval()
    return model


def parallelize(model, world):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    mesh = DeviceMesh("cuda", list(range(world)))
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel()}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, plan)


def prompt(rank, plant, last, dev):
    g = torch.Generator().manual_seed(7)
    n = 24 + (1 if plant == "prompt" and rank == last else 0)
    return torch.randint(0, 8192, (1, n), generator=g).to(dev)


def decode_step(model, ids):
    """One greedy step: the whole sequence through the model, the next token from the last
    position's logits."""
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits
        # the logits this rank samples from, on the host (every rank holds them whole)
        last = logits[:, -1].float().cpu()
    return torch.argmax(last, dim=-1, keepdim=True).to(ids.device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plant", default="none",
                    choices=["none", "prompt", "fp16", "leave", "hang", "perturb"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--share-gpu", action="store_true")
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--hang-s", type=float, default=60)
    args = ap.parse_args()
    rank, world, dev = rank_device(args.share_gpu)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=args.timeout))
    last = world - 1
    odd = rank == last
    model = build_model(dev, torch.bfloat16)
    parallelize(model, world)
    if args.plant == "fp16" and odd:
        model.half()
    ids = prompt(rank, args.plant, last, dev)
    for step in range(args.steps):
        if odd and args.plant == "perturb" and step == 2:
            with torch.no_grad():
                # one unit in the last place: the next bf16 bit pattern of every weight
                model.model.norm.weight.view(torch.int16).add_(1)
        if odd and args.plant in ("leave", "hang") and step == 2:
            print(f"llama: rank {rank} leaves the decode loop at step {step}", flush=True)
            if args.plant == "hang":
                time.sleep(args.hang_s)
            break
        nxt = decode_step(model, ids)
        ids = torch.cat([ids, nxt], dim=1)
        print(f"llama: rank {rank} step {step} token {int(nxt.item())}", flush=True)
    torch.cuda.synchronize()
    print(f"llama: rank {rank} done", flush=True)
    if args.plant not in ("leave", "hang"):
        dist.destroy_process_group()
    else:
        os._exit(0)


if __name__ == "__main__":
    main()
