"""LazyAdam's direct call of torch's fused Adam kernel against torch's `Optimizer.step`, in the
Tiny Shakespeare character model's plain training loop (context 10, m = 32, h = 128, direct, batch 128).

Both optimizers are nplm's LazyAdam; in "torch step" its direct path is switched off, so every update
goes through `torch.optim.Adam.step` (and `Optimizer.zero_grad`). Interleaved rounds of the same
400 batches; the median step time and the speed-up per round.

    python experiments/bench/optimizer_step.py [--rounds 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import torch
from notebook_vs_trainer import MODEL, character_datamodule
from provenance import stamp
from torch import nn

from nplm.heads import build_head
from nplm.models import NPLM, NPLMConfig
from nplm.optimizers.lazy import OptimizerConfig, build_optimizer


def training_loop(batches: list, direct: bool):
    torch.manual_seed(0)
    model = NPLM(65, NPLMConfig.from_dict(MODEL))
    head = build_head({"name": "softmax"}, model.feature_dim, 65)
    opt = build_optimizer(nn.ModuleDict({"model": model, "head": head}), OptimizerConfig(name="adam", lr=1e-3))
    if not direct:
        opt._dense_step_direct = lambda: False
        opt.zero_grad = lambda set_to_none=True: torch.optim.Optimizer.zero_grad(opt, set_to_none=set_to_none)

    def run() -> float:
        start = time.perf_counter()
        for context, target in batches:
            loss = head.loss(model(context), target).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return (time.perf_counter() - start) / len(batches) * 1e6  # us per step

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.INFO)
    batches = [batch for _, batch in zip(range(400), character_datamodule().train_dataloader())]
    loops = {"torch step": training_loop(batches, direct=False), "direct": training_loop(batches, direct=True)}
    for run in loops.values():
        run()  # warm-up, and the first step creates the optimizer state
    times = {name: [] for name in loops}
    for r in range(args.rounds):
        for name in (list(loops) if r % 2 else list(reversed(loops))):
            times[name].append(loops[name]())
    ratios = [a / b for a, b in zip(times["torch step"], times["direct"])]
    print(stamp())
    print()
    print("| optimizer step | us per training step, median | speed-up per round, median (min-max) |")
    print("|---|---:|---:|")
    print(f"| torch's Optimizer.step | {statistics.median(times['torch step']):,.0f} | 1.00x |")
    print(f"| LazyAdam, fused kernel called directly | {statistics.median(times['direct']):,.0f} | "
          f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
