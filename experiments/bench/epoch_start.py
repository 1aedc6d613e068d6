"""What an epoch's start costs the host before its first batch: the shuffled order of the training windows.

Each training epoch draws its order, a torch.randperm of the windows seeded by seed + epoch, on the CPU (the
same order on every device), and slices it into batches. With the training on a GPU the host does this while
the card waits: the last epoch's queue was drained by its end (the loss check, the validation). On Brown's
million windows that was ~20 ms of host time per epoch; an epoch of `experiment=sun2021/brown` at batch 4,096
on an H200 trains in ~0.36 s. Now (`nplm.data.windows.BatchIndices._order`) off the CPU the next epoch's order
is drawn in a thread while this epoch trains, and batches are sliced one at a time.

Measured here, in one run, rounds alternated:
- the sampler: from asking for an epoch's iterator to holding its first batch, for epoch 1 after epoch 0's
  iterator and 0.1 s (the epoch's training, on the device), on the meta device (a GPU's stand-in: the copy to
  it costs nothing), with the order drawn on demand (`draws_ahead` off, as on a CPU) and drawn ahead;
- nplm-train: the time from the second epoch's `on_train_epoch_start` to its first batch's start,
  `experiment=sun2021/brown` at batch 256 on gpu_step.py's synthetic corpus (1 M windows) in the captured
  step's dry mode with the step left out (host_step.py's setup), the order drawn on demand and drawn ahead.

    python experiments/bench/epoch_start.py [--rounds 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE))

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402

import host_step  # noqa: E402
import nplm.data.windows as windows  # noqa: E402

WINDOWS = 1_000_000
SETTINGS = {"drawn on demand": lambda device: False, "drawn ahead": lambda device: True}


def sampler_ms(setting: str, seed: int) -> float:
    """Epoch 1's iterator to its first batch, ms, after epoch 0's and 0.1 s."""
    windows.draws_ahead = SETTINGS[setting]
    sampler = windows.BatchIndices(WINDOWS, 256, shuffle=True, seed=seed, device="meta")
    next(iter(sampler))
    time.sleep(0.1)
    sampler.set_epoch(1)
    start = time.perf_counter()
    next(iter(sampler))
    return 1e3 * (time.perf_counter() - start)


class EpochStart(pl.Callback):
    """The second epoch's start to its first batch's start, ms."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.current_epoch == 1 and batch_idx == 0:
            self.ms = 1e3 * (time.perf_counter() - self.start)


def train_ms(setting: str, corpus: dict, folder: str) -> float:
    windows.draws_ahead = SETTINGS[setting]
    clock = EpochStart()
    host_step.stepless_run(corpus, folder, 512, "cpu", [], clock)
    return clock.ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="writes epoch_start.json and epoch_start.md there")
    args = parser.parse_args()
    import gpu_step
    from provenance import stamp, write_result

    os.environ.setdefault("WANDB_MODE", "disabled")
    torch.set_num_threads(1)
    heading = stamp()
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = gpu_step.write_corpus(Path(tmp), 10_000, WINDOWS)
        for r in range(args.rounds):
            for setting in SETTINGS:
                figures.setdefault(("sampler", setting), []).append(sampler_ms(setting, r))
                figures.setdefault(("nplm-train", setting), []).append(train_ms(setting, corpus, f"{tmp}/{r}-{setting}"))
                print(f"round {r + 1} {setting}: sampler {figures['sampler', setting][-1]:.2f} ms, "
                      f"nplm-train {figures['nplm-train', setting][-1]:.2f} ms", flush=True)
    result = {"stamp": heading, "rounds": args.rounds,
              "rows": [{"what": what, "setting": setting, "ms": values, "median": statistics.median(values)}
                       for (what, setting), values in figures.items()]}
    write_result(args.out, "epoch_start", result, table(result))


def table(result: dict) -> list[str]:
    median = {(r["what"], r["setting"]): r["median"] for r in result["rows"]}
    lines = ["# An epoch's start: the host's time before its first batch", "", result["stamp"], "",
             f"Medians of {result['rounds']} rounds, the two settings alternated (epoch_start.py's docstring).", "",
             "| what | order drawn on demand: ms | drawn ahead: ms | ratio |", "|---|---:|---:|---:|"]
    for what in dict.fromkeys(r["what"] for r in result["rows"]):
        slow, fast = median[what, "drawn on demand"], median[what, "drawn ahead"]
        lines.append(f"| {what} | {slow:.2f} | {fast:.2f} | {slow / fast:.1f}x |")
    return lines


if __name__ == "__main__":
    main()
