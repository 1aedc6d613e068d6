"""The captured step (config key `cuda_graphs`): on a CUDA device the whole step of a batch replays one
captured CUDA graph (`nplm.training.capture.CapturedStep`); with `capture_dry` the same step function runs
on the same static buffers without a graph, on any device (how the CPU tests check it)."""

from __future__ import annotations

import logging

import torch

from nplm.training.capture import SILENCE, CapturedStep, capture_blocker
from nplm.training.lightning_counters import counted
from nplm.training.steps.base import RunParts, TrainingStep

log = logging.getLogger(__name__)


class ReplayStep(TrainingStep):
    """Each batch's whole step (forward, backward, clipping, the update, the loss sum) through `captured`, then
    the per-step schedules; only the sum of the losses is kept, on the device."""

    def __init__(self, parts: RunParts, captured: CapturedStep):
        self.parts, self.captured = parts, captured

    def train(self, context: torch.Tensor, target: torch.Tensor, update: bool) -> None:
        counted(self.parts.counter, self.captured.step, context, target)  # (update: always, one batch a step)
        for scheduler in self.parts.schedulers:
            scheduler.step()

    def take_losses(self) -> tuple[torch.Tensor, torch.Tensor]:
        total = self.captured.take_loss_sum()  # (a non-finite one names the group's first batch)
        return total.view(1), total

    def new_epoch(self) -> None:
        # captured again only where the head resized at the last epoch's end
        self.captured.new_epoch(self.parts.module.head.graph_sizes())

    def graph_steps(self) -> int | None:
        return self.captured.replays


def replay_step(parts: RunParts, cuda_graphs: bool, dry: bool, cudagraph_trees: bool) -> ReplayStep | None:
    """The captured step where `cuda_graphs` is on and the device is CUDA (or `dry`, `capture_dry`: its dry
    run, on any device); None, with one log line saying why where the configuration cannot be captured, or
    where torch.compile captures its own graphs (`cudagraph_trees`: compile_mode=reduce-overhead)."""
    module = parts.module
    if not cuda_graphs or (module.device.type != "cuda" and not dry):
        return None
    if cudagraph_trees:
        log.info("cuda_graphs: compile=true in torch.compile's reduce-overhead mode captures the compiled forward "
                 "and backward itself; the optimizer update runs after them")
        return None
    optimizer, options = parts.optimizer.optimizer, module.step_options
    why = capture_blocker(module, optimizer, options.accumulate_grad_batches, parts.direct,
                          counted=parts.counter is not None)
    if why is not None:
        log.warning("cuda_graphs: the training step cannot be captured: %s; training eagerly (%s)", why, SILENCE)
        return None
    return ReplayStep(parts, CapturedStep(module._train_loss, module.parameters(), optimizer,
                                          options.gradient_clip_val, options.gradient_clip_algorithm, dry=dry))
