"""The one interface of a training step (`TrainingStep`), and what every way of taking one takes from the
Lightning run when training starts (`RunParts`)."""

from __future__ import annotations

from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from pytorch_lightning.core.optimizer import LightningOptimizer

from nplm.training.clipping import has_grad_scaler


class TrainingStep:
    """One way of taking a training step, chosen once when training starts (`nplm.training.steps.choose_step`).

    `train` trains on one batch (forward, backward and, where `update`, the optimizer step and the per-step
    schedules); `take_losses` hands back the losses of the batches trained since its last call, and forgets
    them. Neither reads a value of the device on the host."""

    # the optimizer steps at a run's start that may sync the host and device (compiling, recording graphs):
    # `sync_debug` checks the groups that start after them
    setup_steps = 0

    def train(self, context: torch.Tensor, target: torch.Tensor, update: bool) -> None:
        """Train on one batch: windows (context `[B, k]`, target `[B]`) or blocks (ids `[B, T + k]`, targets
        `[B, T]`); `update`: the batch ends an accumulation window (`trainer.accumulate_grad_batches`)."""
        raise NotImplementedError

    def take_losses(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(the per-token losses `[N]` of the batches since the last call, or only their sum `[1]`; that sum,
        float64): on the device, no sync."""
        raise NotImplementedError

    def new_epoch(self) -> None:
        """At each training epoch's start."""

    def graph_steps(self) -> int | None:
        """Batches of this epoch that replayed a captured graph; None where the step captures none."""
        return None


@dataclass
class RunParts:
    """What a training step takes from the Lightning run, looked up once when training starts."""

    module: pl.LightningModule  # the LanguageModel: its `_train_loss`, `model`, `head`, `step_options`
    optimizer: LightningOptimizer
    schedulers: list  # the per-step schedules (interval "step"), stepped after each optimizer step
    counter: object | None  # Lightning's count of optimizer steps (`nplm.training.lightning_counters`); None: not found
    # the step may call backward and the torch optimizer itself (`direct_steps_possible`), not through Lightning
    direct: bool

    @classmethod
    def of(cls, module: pl.LightningModule, counter) -> "RunParts":
        trainer = module.trainer
        return cls(module, module.optimizers(), [c.scheduler for c in trainer.lr_scheduler_configs
                                                 if c.interval == "step"], counter, direct_steps_possible(module))


def direct_steps_possible(module: pl.LightningModule) -> bool:
    """Whether the training step may call `loss.backward()` and the torch optimizer itself rather than through
    Lightning (`manual_backward`, `LightningOptimizer.step`): one process, no loss scaling (16-mixed), and no
    callback (or subclass) listening to the per-batch backward/optimizer hooks. The hooks' rounds cost about
    as much per batch as a small model's backward."""
    from pytorch_lightning.strategies import SingleDeviceStrategy

    trainer = module.trainer
    hooks = ("on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad")
    listening = [c for c in trainer.callbacks for h in hooks if getattr(type(c), h) is not getattr(pl.Callback, h)]
    listening += [h for h in hooks if getattr(type(module), h) is not getattr(pl.LightningModule, h)]  # a subclass
    return isinstance(trainer.strategy, SingleDeviceStrategy) and not listening and not has_grad_scaler(trainer)
