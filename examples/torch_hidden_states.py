"""shapetrace example: the motivating failure with real PyTorch on one GPU.

Hidden states of 4 layers ([771, 7168] bf16: two samples of 512 and 259 tokens) are captured
with clones (device-to-device copies), travel to the driver through host memory (.cpu(), then
.cuda(): the driver's receive), and generate() cuts them per sample. A library upgrade made the
RPC return the list of layers itself instead of a one-element list around it; generate() still
takes [0], so it iterates the rows of layer 0 and slices tokens of each row: 771 tensors of [512]
and 771 of [259] instead of 4 of [512, 7168] and 4 of [259, 7168]. Tensor parallelism of 1
needs no NCCL for the bug itself.

    shapetrace run -- python3 examples/torch_hidden_states.py --buggy
    shapetrace analyze --dim hidden=7168 shapetrace-*/
"""
import argparse

import torch

HIDDEN = 7168
SAMPLES = [512, 259]
LAYERS = 4


def capture_hidden_states(layers):
    return [h.clone() for h in layers]


def transfer_to_driver(states):
    return [s.cpu() for s in states]


def driver_receive(host_states):
    return [h.cuda() for h in host_states]


def rpc_get_hidden_states(states, new_library):
    received = driver_receive(transfer_to_driver(states))
    # The upgrade: the list itself, no longer a one-element list around it.
    return received if new_library else [received]


def generate(result, sample_lens):
    layers = result[0]  # written for the old return value
    out, off = [], 0
    for n in sample_lens:
        out.append([layer[off:off + n].cpu() for layer in layers])
        off += n
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--buggy", action="store_true", help="the upgraded library")
    args = ap.parse_args()
    tokens = sum(SAMPLES)
    layers = [torch.randn(tokens, HIDDEN, dtype=torch.bfloat16, device="cuda")
              for _ in range(LAYERS)]
    result = rpc_get_hidden_states(capture_hidden_states(layers), new_library=args.buggy)
    per_sample = generate(result, SAMPLES)
    torch.cuda.synchronize()
    for n, tensors in zip(SAMPLES, per_sample):
        shapes = sorted({tuple(t.shape) for t in tensors})
        print(f"sample of {n} tokens: {len(tensors)} tensors of {shapes}")


if __name__ == "__main__":
    main()
