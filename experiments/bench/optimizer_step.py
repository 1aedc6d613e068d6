"""What LazyAdam's three optimizer-step shortcuts are worth in nplm-train's loop for the Tiny Shakespeare
character model (context 10, m = 32, h = 128, direct, batch 128; gradients by hand as nplm-train
computes them for this model, `nplm.fast.backprop.train_loss`).

The shortcuts, each switched off in turn, and all three off:
- `direct kernel`: LazyAdam calls torch's fused Adam kernel itself (`torch._fused_adam_`) once the state
  exists, instead of `torch.optim.Adam.step` (off: `_dense_step_direct` returns False);
- `no wrapper`: `step_without_profiler` calls the optimizer's `step` without the wrapper torch puts around
  it (profiler record, hook loops) (off: `optimizer.step()`);
- `zero_grad loop`: LazyAdam's `zero_grad` sets the gradients to None itself (off: `Optimizer.zero_grad`).

Rounds of the same batches, each loop timing `--steps` steps per round in `--chunks` chunks, the
variants taking turns chunk by chunk (the order rotated by one every chunk, so that each takes every
place in it as often and none runs twice in a row: a burst of load on a shared machine hits all
alike). Per round the time per step of each variant over the shipped one; the median and range over
rounds, in wall-clock time and in the process's CPU time (less disturbed by other processes). The last
variant is a second copy of the shipped loop: what two identical loops differ by, the noise.

    python experiments/bench/optimizer_step.py [--rounds 7] [--steps 1200] [--chunks 60] [--threads 2]
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

from nplm.fast import backprop
from nplm.heads import build_head
from nplm.models.nplm import NPLM, NPLMConfig
from nplm.optimizers import build_optimizer, lazy

VARIANTS = {  # name: (direct kernel, no wrapper, zero_grad loop)
    "as shipped": (True, True, True),
    "without the direct kernel": (False, True, True),
    "without skipping the wrapper": (True, False, True),
    "with Optimizer.zero_grad": (True, True, False),
    "none of the three": (False, False, False),
    "as shipped, a second copy": (True, True, True),  # the control: what two identical loops differ by
}


def training_loop(batches: list, direct: bool, unwrapped: bool, own_zero_grad: bool):
    torch.manual_seed(0)
    model = NPLM(65, NPLMConfig(**MODEL))
    head = build_head({"name": "softmax"}, model.feature_dim, 65)
    opt = build_optimizer(nn.ModuleDict({"model": model, "head": head}), {"name": "adam", "lr": 1e-3})
    if not direct:
        opt._dense_step_direct = lambda: False
    zero_grad = opt.zero_grad if own_zero_grad else (lambda: torch.optim.Optimizer.zero_grad(opt, set_to_none=True))
    step = (lambda: lazy.step_without_profiler(opt)) if unwrapped else opt.step

    def run(part: list) -> tuple[float, float]:
        """Seconds of wall clock and of the process's CPU time (all its threads) for the batches `part`."""
        start, cpu = time.perf_counter(), time.process_time()
        for context, target in part:
            zero_grad()
            backprop.train_loss(model, head, context, target, 1 / len(target))
            step()
        return time.perf_counter() - start, time.process_time() - cpu

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="alternated rounds (default 7)")
    parser.add_argument("--steps", type=int, default=1200, help="timed steps per variant and round (default 1200)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--chunks", type=int, default=60, help="the variants take turns this many times a round (default 60)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.INFO)
    loader = character_datamodule().train_dataloader()
    batches = []
    while len(batches) < args.steps:
        batches += [batch for _, batch in zip(range(args.steps - len(batches)), loader)]
    torch.optim.Adam([nn.Parameter(torch.ones(1))])  # as in any process that made a torch Adam: Adam.step hooked
    loops = {name: training_loop(batches, *flags) for name, flags in VARIANTS.items()}
    for run in loops.values():
        run(batches)  # warm-up, and the first step creates the optimizer state
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in loops}
    print(stamp(), flush=True)
    size = -(-len(batches) // args.chunks)
    parts = [batches[i:i + size] for i in range(0, len(batches), size)]
    for r in range(args.rounds):
        spent = {name: [0.0, 0.0] for name in loops}
        for c, part in enumerate(parts):  # the variants take turns every chunk of steps: a burst of load hits all
            shift = (r * len(parts) + c) % len(loops)  # and each takes every place in the order as often
            for name in list(loops)[shift:] + list(loops)[:shift]:
                wall, cpu = loops[name](part)
                spent[name][0] += wall
                spent[name][1] += cpu
        for name, (wall, cpu) in spent.items():
            times[name].append((wall / len(batches) * 1e6, cpu / len(batches) * 1e6))  # us per step
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1][0]:,.0f} us ({v[-1][1]:,.0f} CPU)" for n, v in times.items()),
              flush=True)
    print()
    print(f"| nplm-train's loop, character model ({args.steps} steps x {args.rounds} alternated rounds) "
          "| us per step, median | vs as shipped, median (min-max per round) | CPU us per step, median "
          "| vs as shipped, CPU time |")
    print("|---|---:|---:|---:|---:|")
    for name, t in times.items():
        cells = []
        for k in (0, 1):
            ratios = [a[k] / b[k] for a, b in zip(t, times["as shipped"])]
            cells += [f"{statistics.median(a[k] for a in t):,.0f}",
                      f"{statistics.median(ratios):.3f}x ({min(ratios):.2f}-{max(ratios):.2f})"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
