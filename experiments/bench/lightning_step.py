"""What nplm-train's direct optimizer step is worth for the Tiny Shakespeare character model (context 10,
m = 32, h = 128, direct, batch 128): the torch optimizer called by `LanguageModel._optimizer_step`
itself, with Lightning's count of optimizer steps moved by nplm (a private counter:
`nplm.training.module.lightning_counter`), against its fallback, `LightningOptimizer.step` (Lightning's
strategy, precision plugin, closure and `on_before_optimizer_step` hooks around the same update).

Inside one `nplm-train` run per round (`experiment=tinyshakespeare_char`, `--steps` batches) the two
take turns every `--every` optimizer steps, so a burst of load on a shared machine hits both alike;
each `_optimizer_step` call is timed (wall clock and the process's CPU time). Per round: the mean time
of a call each way, and the run's own time per training batch; the worth of the direct step is
(batch time + the difference) / batch time. Medians and ranges over `--rounds` rounds.

    python experiments/bench/lightning_step.py [--rounds 7] [--steps 3000] [--every 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

import torch
from notebook_vs_trainer import nplm_train
from provenance import stamp

from nplm.training import module as lit


def timed_round(steps: int, every: int, threads: int) -> dict:
    """One nplm-train run with the two ways taking turns; seconds per call each way and per batch."""
    spent = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}  # direct?: [wall, cpu, calls]
    real = lit.LanguageModel._optimizer_step

    def optimizer_step(self, optimizer, schedulers):
        direct = (self.global_step // every) % 2 == 0
        counter = self._step_counter
        if not direct:
            self._step_counter = None  # the fallback: LightningOptimizer.step
        wall, cpu = time.perf_counter(), time.process_time()
        real(self, optimizer, schedulers)
        record = spent[direct]
        record[0] += time.perf_counter() - wall
        record[1] += time.process_time() - cpu
        record[2] += 1
        self._step_counter = counter

    lit.LanguageModel._optimizer_step = optimizer_step
    try:
        tokens_per_s = nplm_train(steps, 0, threads)
    finally:
        lit.LanguageModel._optimizer_step = real
    per_call = {direct: (w / n, c / n) for direct, (w, c, n) in spent.items()}
    return {"direct": per_call[True], "lightning": per_call[False], "batch": 128 / tokens_per_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="rounds, one nplm-train run each (default 7)")
    parser.add_argument("--steps", type=int, default=3000, help="training batches per run (default 3000)")
    parser.add_argument("--every", type=int, default=20, help="the two ways take turns every this many steps")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.INFO)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    print(stamp(), flush=True)
    rounds = []
    for r in range(args.rounds):
        rounds.append(timed_round(args.steps, args.every, args.threads))
        got = rounds[-1]
        print(f"round {r + 1}: optimizer step {got['direct'][0] * 1e6:,.0f} us direct, "
              f"{got['lightning'][0] * 1e6:,.0f} us through LightningOptimizer.step "
              f"(CPU {got['direct'][1] * 1e6:,.0f} / {got['lightning'][1] * 1e6:,.0f}); "
              f"{got['batch'] * 1e6:,.0f} us per batch", flush=True)
    direct = [g["direct"][0] for g in rounds]
    lightning = [g["lightning"][0] for g in rounds]
    worth = [(g["batch"] + g["lightning"][0] - g["direct"][0]) / g["batch"] for g in rounds]
    print()
    print(f"| nplm-train, character model ({args.steps} batches x {args.rounds} rounds, turns every {args.every} "
          "steps) | median (min-max per round) |")
    print("|---|---:|")
    print(f"| optimizer step, direct (us) | {statistics.median(direct) * 1e6:,.0f} "
          f"({min(direct) * 1e6:,.0f}-{max(direct) * 1e6:,.0f}) |")
    print(f"| optimizer step through LightningOptimizer.step (us) | {statistics.median(lightning) * 1e6:,.0f} "
          f"({min(lightning) * 1e6:,.0f}-{max(lightning) * 1e6:,.0f}) |")
    print(f"| training batch, nplm-train's tokens/s (us) | {statistics.median(g['batch'] for g in rounds) * 1e6:,.0f} |")
    print(f"| the direct step's worth, wall clock | {statistics.median(worth):.3f}x ({min(worth):.3f}-{max(worth):.3f}) |")
    for name, key in (("direct", "direct"), ("through LightningOptimizer.step", "lightning")):
        cpu = [g[key][1] for g in rounds]
        print(f"| optimizer step {name}, CPU time (us) | {statistics.median(cpu) * 1e6:,.0f} "
              f"({min(cpu) * 1e6:,.0f}-{max(cpu) * 1e6:,.0f}) |")


if __name__ == "__main__":
    main()
