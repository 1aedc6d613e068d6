"""Gradient clipping (`trainer.gradient_clip_val`, `trainer.gradient_clip_algorithm`) with torch's own utilities.

Lightning's `clip_gradients` refuses a fused optimizer under any mixed precision ("performs unscaling of
gradients internally"), bf16 included, although only fp16's gradient scaler makes clipping before the fused
update wrong. Where no scaler is involved nplm clips here: the same `clip_grad_norm_` / `clip_grad_value_`
that Lightning's precision plugins call.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


def clip_gradients(params: Iterable[torch.Tensor], clip_val: float, algorithm: str = "norm") -> None:
    """Clip the gradients of `params` in place: their global 2-norm to at most `clip_val` ("norm"), or each
    element to [-clip_val, clip_val] ("value")."""
    if algorithm == "value":
        nn.utils.clip_grad_value_(params, clip_val)
    else:
        nn.utils.clip_grad_norm_(params, clip_val)


def has_grad_scaler(trainer) -> bool:
    """True where the precision plugin scales the loss (fp16 mixed precision): clipping then needs Lightning's
    unscaling path."""
    return getattr(trainer.precision_plugin, "scaler", None) is not None
