"""FLOPs per training token (forward + backward) of the tied adaptive softmax at WikiText-103's shape.

|V| = 267,735, F = 410, cutoffs [20000, 40000, 200000], div_value 1, tied (Sun & Iyyer 2021's head), one
batch of `--rows` targets drawn from a Zipfian unigram distribution (count of rank r proportional to
1 / (r + 1)), counted by `torch.utils.flop_counter.FlopCounterMode` for:

- torch's module (`AdaptiveLogSoftmaxWithLoss`, the batch grouped by cluster on the host: the CPU's
  float32 eager path), on real CPU tensors;
- the all-clusters static path (every tail cluster for every row: what accelerators ran before);
- the capacity path (`AdaptiveHead.loss` on an accelerator, under compile or autocast);
- the floor, analytic: per row 2 F (c_1 + n) for the head plus 2 F |cluster(row)| (0 in the shortlist),
  times 3 for the forward and the backward's two products.

The two static paths run on meta tensors: their shapes, hence their FLOPs, do not depend on the values.

    python experiments/bench/adaptive_flops.py [--rows 2048] [--seed 0]
"""

from __future__ import annotations

import argparse

import torch
from provenance import stamp
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nplm.heads.adaptive import AdaptiveHead

V, F, CUTOFFS = 267_735, 410, [20_000, 40_000, 200_000]


def tied_head(device: str, counts: list[int]) -> AdaptiveHead:
    with torch.device(device):
        head = AdaptiveHead(F, V, counts, CUTOFFS, div_value=1.0)
        head.tie_output_embeddings(nn.Parameter(torch.randn(V, F) / 20))
    return head


def training_flops(head: AdaptiveHead, target: torch.Tensor, device: str) -> int:
    """FLOPs of `head.loss(f, target).sum()`'s forward and backward, f [B, F] a leaf that needs its gradient."""
    f = torch.randn(len(target), F, device=device, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        head.loss(f, target.to(device)).sum().backward()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2048, help="rows (tokens) of the batch (default 2048)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the Zipfian targets (default 0)")
    args = parser.parse_args()
    counts = [int(1e9 / (r + 1)) for r in range(V)]  # word id = frequency rank
    target = torch.multinomial(torch.tensor(counts, dtype=torch.float64), args.rows, replacement=True,
                               generator=torch.Generator().manual_seed(args.seed))
    bounds = [*CUTOFFS, V]
    cluster_size = torch.tensor([0] + [hi - lo for lo, hi in zip(bounds, bounds[1:])])  # [n + 1]
    clusters = torch.bucketize(target, torch.tensor(CUTOFFS), right=True)  # [B]
    floor = 3 * 2 * F * (args.rows * (CUTOFFS[0] + len(CUTOFFS)) + cluster_size[clusters].sum().item())

    torch.manual_seed(0)
    flops = {}
    head = tied_head("cpu", counts)
    head.path = "torch"
    flops["torch's module (batch grouped on the host)"] = training_flops(head, target, "cpu")
    del head
    head = tied_head("meta", counts)
    head.path = "all"
    flops["all-clusters static path"] = training_flops(head, target, "meta")
    head.path = "capacity"
    flops["capacity path"] = training_flops(head, target, "meta")
    flops["floor: shortlist + own cluster (analytic)"] = floor

    rows_per_cluster = torch.bincount(clusters, minlength=len(bounds))[1:].tolist()
    print(stamp())
    print()
    print(f"Tied, |V| = {V:,}, F = {F}, cutoffs {CUTOFFS}, div_value 1; {args.rows:,} Zipfian targets (seed "
          f"{args.seed}): rows per tail cluster {rows_per_cluster}, capacities {head.capacities(args.rows)}, "
          f"{head.spill_rows(args.rows)} spill rows.")
    print()
    print("| path | MFLOP per token (fwd + bwd) | / floor | / capacity path |")
    print("|---|---:|---:|---:|")
    for name, total in flops.items():
        print(f"| {name} | {total / args.rows / 1e6:,.1f} | {total / floor:.2f}x | "
              f"{total / flops['capacity path']:.2f}x |")


if __name__ == "__main__":
    main()
