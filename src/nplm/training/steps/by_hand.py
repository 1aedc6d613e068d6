"""The step with hand-written gradients (`nplm.fast.backprop`): where a model and head differentiate
themselves (on a CPU, in float32, not compiled, nothing listening to a gradient), the same gradients as
autograd's, faster for small models. Blocks (`data.block_size`) still go through autograd."""

from __future__ import annotations

import torch

from nplm.fast import backprop
from nplm.training.steps.autograd import AutogradStep


class ByHandStep(AutogradStep):
    """The gradients of a window batch's mean loss computed by hand; the update as the autograd step's."""

    def train(self, context: torch.Tensor, target: torch.Tensor, update: bool) -> None:
        if target.dim() != 1:  # a batch of blocks: autograd
            return super().train(context, target, update)
        module = self.module
        nll = backprop.train_loss(module.model, module.head, context, target,
                                  1 / (len(target) * self.options.accumulate_grad_batches))  # [N]
        if update:
            self.update()
        self.losses.append(nll.detach())
        return None
