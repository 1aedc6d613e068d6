"""Dropout whose CPU mask costs a quarter of torch's random draws.

torch's CPU dropout draws one Bernoulli variable per element (`bernoulli_`, a Mersenne Twister draw
each, on one thread). The modern NPLM drops out its input vectors, `[B, k, d]` in window mode: at
Tiny Shakespeare's shape (256 x 64 x 256 = 4.2 M elements) the draws are a large part of a 1-thread
training step, which this mask shortens (bench notes in git: experiments/bench/README.md at efe32f1,
the CPU training step: dropout's mask).

Here one 64-bit draw decides four elements: each keeps its value where its 16 random bits are at
least q = round(p 2^16), with probability 1 - q 2^-16, and the kept values are scaled by
1 / (1 - q 2^-16), so the expectation of every element is its input as with nn.Dropout. The rate
is p rounded to a multiple of 2^-16 (p = 0.2 drops 0.1999969 of the elements).

Only on a CPU in eager mode: on other devices (the GPU's dropout is fused and capturable), under
torch.compile (inductor draws its own), in evaluation, or where p rounds to 0 or 1, it is
`nn.functional.dropout` itself.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

BITS = 16  # random bits per element: four elements per 64-bit draw


def _threshold(p: float) -> int:
    return round(p * 2**BITS)


def applies(x: torch.Tensor, p: float, training: bool) -> bool:
    """Whether `dropout` draws its own mask for x: training, on a CPU, in eager mode, 0 < q < 2^16."""
    return (training and x.device.type == "cpu" and 0 < _threshold(p) < 2**BITS
            and not torch.compiler.is_compiling())


class _MaskedScale(torch.autograd.Function):
    """x * mask, mask [x's shape] of 0 and 1 / (1 - q 2^-16); its backward grad * mask."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        n, q = x.numel(), _threshold(p)
        draws = torch.empty(-(-n // 4), dtype=torch.int64).random_(-2**63, None)  # [ceil(n / 4)] 64 random bits
        bits = draws.view(torch.int16)[:n].view(x.shape)  # [x's shape]: uniform on -2^15 .. 2^15 - 1
        keep = 2**BITS / (2**BITS - q)  # 1 / (1 - q 2^-16)
        mask = (bits >= q - 2**15).to(x.dtype).mul_(keep)  # [x's shape]: 0 (probability q 2^-16) or keep
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (mask,) = ctx.saved_tensors
        return grad * mask, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """nn.functional.dropout(x, p, training), the mask drawn as the module docstring says on a CPU."""
    if applies(x, p, training):
        return _MaskedScale.apply(x, p)
    return F.dropout(x, p, training)


class Dropout(nn.Dropout):
    """nn.Dropout with the CPU mask of `dropout` (the same state dict and repr)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)
