"""The per-epoch learning-rate schedules under manual optimization: Lightning steps them only for automatic
optimization, so the module does at each training epoch's end what Lightning would (the per-step ones
are stepped after each optimizer step, by the training step: `RunParts.schedulers`)."""

from __future__ import annotations

import pytorch_lightning as pl
import torch


def step_epoch_schedules(trainer: pl.Trainer, monitor: str | None) -> None:
    """What Lightning does for automatic optimization at the end of a training epoch (after its validation):
    step the per-epoch schedules, ReduceLROnPlateau with the metric `monitor` names."""
    for config in trainer.lr_scheduler_configs:
        if config.interval != "epoch":
            continue
        if isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            metric = trainer.callback_metrics.get(monitor)
            if metric is not None:  # no validation this epoch: nothing to judge by
                config.scheduler.step(metric)
        else:
            config.scheduler.step()
