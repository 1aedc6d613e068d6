"""The autograd step: the training loss's `backward()`, then the optimizer update; both called directly
where nothing listens to Lightning's per-batch hooks (`RunParts.direct`), else through Lightning's
`manual_backward` and `LightningOptimizer.step`."""

from __future__ import annotations

import torch

from nplm.optimizers.lazy import step_without_profiler
from nplm.training.clipping import clip_gradients, has_grad_scaler
from nplm.training.lightning_counters import counted
from nplm.training.steps.base import RunParts, TrainingStep


class AutogradStep(TrainingStep):
    """Forward (`LanguageModel._train_loss`), backward of the batch's mean loss (divided by the batches
    accumulated per optimizer step), and, where `update`, the optimizer update (`update`)."""

    def __init__(self, parts: RunParts):
        self.parts, self.module = parts, parts.module
        self.options = parts.module.step_options  # clipping, accumulation (nplm.training.execution)
        self.scaled = has_grad_scaler(parts.module.trainer)  # fp16: Lightning unscales before clipping
        self.losses: list[torch.Tensor] = []  # each batch's per-token losses [N] since `take_losses`

    def loss(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.module._train_loss(context, target)  # [N]

    def kept(self, nll: torch.Tensor) -> torch.Tensor:
        """What of a batch's losses `nll` [N] is kept until `take_losses`."""
        return nll.detach()

    def train(self, context: torch.Tensor, target: torch.Tensor, update: bool) -> None:
        nll = self.loss(context, target)  # [N]
        loss = nll.mean() / self.options.accumulate_grad_batches
        loss.backward() if self.parts.direct else self.module.manual_backward(loss)
        if update:
            self.update()
        self.losses.append(self.kept(nll))

    def take_losses(self) -> tuple[torch.Tensor, torch.Tensor]:
        losses, self.losses = torch.cat(self.losses), []  # [N] the batches' per-token losses
        return losses, losses.sum(dtype=torch.float64)

    def update(self) -> None:
        """Clip (`trainer.gradient_clip_val`), step, zero the gradients, step the per-step schedules."""
        parts, options = self.parts, self.options
        optimizer = parts.optimizer
        if options.gradient_clip_val and self.scaled:  # fp16: Lightning unscales first
            self.module.clip_gradients(optimizer, gradient_clip_val=options.gradient_clip_val,
                                       gradient_clip_algorithm=options.gradient_clip_algorithm)
        elif options.gradient_clip_val:  # (Lightning refuses a fused optimizer under bf16-mixed: nothing to unscale)
            clip_gradients([p for group in optimizer.param_groups for p in group["params"]],
                           options.gradient_clip_val, options.gradient_clip_algorithm)
        if parts.direct and parts.counter is not None:  # the torch optimizer itself, counted as Lightning counts it
            counted(parts.counter, step_without_profiler, optimizer.optimizer)
            optimizer.optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        for scheduler in parts.schedulers:
            scheduler.step()
