"""Training speed of the modern NPLM on whole blocks (`data.block_size`) against one window per example.

The same N = B T training tokens each way, the model's part of a training step (forward and backward of
the features; the head's work is the same N rows either way and is left out): window mode gathers the k
context vectors of every token ([N, k] ids), block mode reads each vector once per block ([B, T + k]
ids) and computes the summaries as a convolution (`ModernNPLM.block_features`). Alternated rounds (a
burst of load on a shared machine hits both alike); the median tokens/s of each and their ratio.

    python experiments/bench/blocks.py [--context 128] [--window 15] [--summaries 5] [--dim 128] [--hidden 512]
        [--layers 4] [--blocks 4] [--block-size 128] [--rounds 7] [--steps 5] [--threads 1] [--device cpu]

Its output, for k = 128 and 511 on this repo's 2-core CPU machine: experiments/bench/blocks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from nplm.models import build_model
from provenance import stamp


def seconds(step, steps: int, device: torch.device) -> float:
    """Wall-clock seconds of `steps` calls of `step` (after one warm-up call)."""
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("context", 128), ("window", 15), ("summaries", 5), ("dim", 128), ("hidden", 512),
                          ("layers", 4), ("blocks", 4), ("block-size", 128), ("rounds", 7), ("steps", 5),
                          ("vocab", 10000), ("threads", 0)):
        parser.add_argument(f"--{flag}", type=int, default=default)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    k, T, B = args.context, args.block_size, args.blocks
    model = build_model({"name": "modern", "context_size": k, "window": args.window, "summaries": args.summaries,
                         "embed_dim": args.dim, "hidden_dim": args.hidden, "num_layers": args.layers}, args.vocab)
    model.to(device).train()
    ids = torch.randint(0, args.vocab, (B, T + k), device=device)  # [B, T + k]
    windows = ids.unfold(1, k, 1)[:, :T].reshape(B * T, k)  # [B T, k] the same tokens' contexts

    def window_step():
        model.zero_grad(set_to_none=True)
        model(windows).sum().backward()

    def block_step():
        model.zero_grad(set_to_none=True)
        model.block_features(ids).sum().backward()

    tokens = B * T * args.steps
    rates = {"windows": [], "blocks": []}
    for _ in range(args.rounds):
        rates["windows"].append(tokens / seconds(window_step, args.steps, device))
        rates["blocks"].append(tokens / seconds(block_step, args.steps, device))
    median = {mode: statistics.median(r) for mode, r in rates.items()}
    print(stamp())
    print(f"modern NPLM k={k} w={args.window} g={args.summaries} d={args.dim} hidden={args.hidden} "
          f"L={args.layers}, {B} blocks of {T} tokens, {device} ({torch.get_num_threads()} threads)")
    for mode, r in rates.items():
        print(f"  {mode:8s} {median[mode]:12,.0f} tokens/s  (range {min(r):,.0f}-{max(r):,.0f}, {args.rounds} rounds)")
    print(f"  blocks / windows: {median['blocks'] / median['windows']:.2f}x")


if __name__ == "__main__":
    main()
