"""Two counters of Lightning's training loop that nplm's manual optimization moves itself, where Lightning
has no public API for them: the count of optimizer steps (`trainer.global_step` reads it) that the direct
optimizer step advances as `LightningOptimizer.step` would, and the loggers' step axis.

`lightning_counter` looks each up once per training run; where one is missing the step goes through
Lightning's public API instead (`LightningOptimizer.step`: the same update; the direct step skips
Lightning's wrapper, which shows in a small model's step: bench notes in git: experiments/bench/README.md at
efe32f1, the CPU training step), or the epoch-end log rows
stay on Lightning's own axis (one step per `training_step` call). LIGHTNING_COUNTERS = False forces both
fallbacks (tests/test_execution.py).
"""

from __future__ import annotations

from typing import Callable

import pytorch_lightning as pl

LIGHTNING_COUNTERS = True

STEP_COUNTER = ("fit_loop.epoch_loop.manual_optimization.optim_step_progress", "increment_completed")
LOG_AXIS = ("fit_loop.epoch_loop", "_batches_that_stepped")


def lightning_counter(trainer: pl.Trainer, path: str, attribute: str):
    """`trainer.<path>` (dotted) where it exists and has `attribute`; None otherwise, or where
    LIGHTNING_COUNTERS is False."""
    if not LIGHTNING_COUNTERS:
        return None
    found = trainer
    for name in path.split("."):
        found = getattr(found, name, None)
    return found if hasattr(found, attribute) else None


def counted(counter, step: Callable, *args) -> None:
    """`step(*args)`, an optimizer step counted as `LightningOptimizer.step` counts it (trainer.global_step);
    `counter`: Lightning's optimizer-step progress (`lightning_counter(trainer, *STEP_COUNTER)`)."""
    counter.increment_ready()
    step(*args)
    counter.increment_completed()
