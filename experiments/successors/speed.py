"""The output layers' training speed on Brown's LSTM and Transformer, measured side by side in one process.

Each head row's config and its base row's (the adaptive head) trains `warmup + steps` batches of Brown in turn,
through `nplm.training.train.train(cfg)` itself (forward, backward, the optimizer's step and the weights'
moving average, as nplm-train trains), timed by a Lightning callback over the last `steps` batches: its training
tokens per second. The configs take turns within a round and the order rotates every round
(`harness.alternate`), so a load on the machine slows each alike; a config's figure is the median of its rounds,
its ratio to the base row's the median of the per-round ratios. The training runs' own tokens per second are
not comparable: each ran at another time, beside another job.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl

from bench import harness
from replication import DATA_DIR, compose, machine

# a short run: one epoch of `warmup + steps` batches, one validation and one test batch, no logger; one batch a
# Lightning step (the batch hooks time each), whose own cost (milliseconds) is small beside these models' steps
SHORT = ["trainer.max_epochs=1", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "logger=none",
         "steps_per_execution=1"]


class Clock(pl.Callback):
    """The seconds and tokens of a run's training batches after the first `warmup` (Lightning's batch hooks:
    the whole step, the optimizer's and the callbacks' work included)."""

    def __init__(self, warmup: int):
        self.warmup, self.seconds, self.tokens, self._start = warmup, 0.0, 0, 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            self.seconds += time.perf_counter() - self._start
            self.tokens += int(outputs["tokens"])


def tokens_per_s(overrides: list[str], threads: int, warmup: int, steps: int) -> float:
    """Training tokens per second of `nplm-train *overrides` over `steps` batches after `warmup`, in a fresh
    folder (deleted after)."""
    from nplm.training.train import train

    cfg = compose([*overrides, *SHORT, f"threads={threads}", f"trainer.limit_train_batches={warmup + steps}"])
    clock = Clock(warmup)
    with tempfile.TemporaryDirectory() as folder:
        cfg.paths.output_dir, cfg.paths.data_dir = str(Path(folder) / "run"), DATA_DIR
        train(cfg, callbacks=[clock])
    return clock.tokens / clock.seconds


def measure(configs: dict[str, list[str]], base: dict[str, str], threads: int, rounds: int = 3, warmup: int = 3,
            steps: int = 12) -> dict:
    """`configs`: name -> overrides; `base`: name -> the name of the config its ratio is to. Tokens per second
    (the median of `rounds` alternated rounds) and the ratio to the base (`harness.ratio`) of each."""
    from nplm.tracking.provenance import git_commit

    values = harness.alternate({name: (lambda o=overrides: tokens_per_s(o, threads, warmup, steps))
                                for name, overrides in configs.items()}, rounds,
                               on_round=lambda r, v: print(f"speed: round {r + 1} of {rounds} done", flush=True))
    return {"tokens_per_s": {name: harness.median(v) for name, v in values.items()},
            "ratio": {name: harness.ratio(v, values[base[name]]) for name, v in values.items()},
            "rounds": rounds, "warmup": warmup, "steps": steps, "machine": machine(), "git_commit": git_commit(),
            "configs": configs}
