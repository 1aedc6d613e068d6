"""Gradient clipping (`trainer.gradient_clip_val`, `trainer.gradient_clip_algorithm`) with torch's own utilities.

Lightning's `clip_gradients` refuses a fused optimizer under any mixed precision ("performs unscaling of
gradients internally"), bf16 included, although only fp16's gradient scaler makes clipping before the fused
update wrong. Where no scaler is involved nplm clips here: the same `clip_grad_norm_` / `clip_grad_value_`
that Lightning's precision plugins call, extended to the row-sparse gradients of `model.sparse_embeddings`
(torch's utilities refuse sparse tensors): their norm is that of their coalesced values, so the clipped
gradients are exactly those of the same gradients made dense.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


def clip_gradients(params: Iterable[torch.Tensor], clip_val: float, algorithm: str = "norm") -> None:
    """Clip the gradients of `params` in place: their global 2-norm to at most `clip_val` ("norm"), or each
    element to [-clip_val, clip_val] ("value")."""
    params = [p for p in params if p.grad is not None]
    sparse = [p for p in params if p.grad.is_sparse]
    if not sparse:
        if algorithm == "value":
            nn.utils.clip_grad_value_(params, clip_val)
        else:
            nn.utils.clip_grad_norm_(params, clip_val)
        return
    dense = [p for p in params if not p.grad.is_sparse]
    for p in sparse:
        p.grad = p.grad.coalesce()  # each row once: its values are the dense gradient's nonzero rows
    values = [p.grad.values() for p in sparse]  # views: clipped in place
    if algorithm == "value":
        nn.utils.clip_grad_value_(dense, clip_val)
        for v in values:
            v.clamp_(-clip_val, clip_val)
        return
    norms = [torch.linalg.vector_norm(v) for v in values]
    if dense:
        norms.append(nn.utils.get_total_norm([p.grad for p in dense]))
    total = torch.linalg.vector_norm(torch.stack(norms))  # [] the global 2-norm, dense and sparse together
    nn.utils.clip_grads_with_norm_(dense, clip_val, total)
    scale = (clip_val / (total + 1e-6)).clamp(max=1.0)  # as clip_grads_with_norm_ scales
    for v in values:
        v.mul_(scale)


def has_grad_scaler(trainer) -> bool:
    """True where the precision plugin scales the loss (fp16 mixed precision): clipping then needs Lightning's
    unscaling path."""
    return getattr(trainer.precision_plugin, "scaler", None) is not None
