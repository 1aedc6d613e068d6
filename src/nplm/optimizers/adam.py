"""`optimizer=adam` and `optimizer=adamw`: Adam (Kingma & Ba 2015) with L2 or decoupled weight decay
(Loshchilov & Hutter 2019), lazy rows of C with `model.sparse_embeddings=true`."""

from __future__ import annotations

from nplm.config.rules import Betas, Float
from nplm.optimizers import register_optimizer
from nplm.optimizers.lazy import LazyAdam, LazyAdamW

KEYS = {"betas": Betas(doc="(beta1, beta2): decay of the moment estimates"),
        "eps": Float(gt=0, doc="sqrt(v) + eps: larger values damp rare words' steps")}


@register_optimizer("adam", keys=KEYS)
def adam(groups: list[dict], lr: float, betas=(0.9, 0.999), eps: float = 1e-8, fused: bool = True):
    """Adam, weight decay as an L2 gradient term."""
    return LazyAdam(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused)


@register_optimizer("adamw", keys=KEYS)
def adamw(groups: list[dict], lr: float, betas=(0.9, 0.999), eps: float = 1e-8, fused: bool = True):
    """AdamW, decoupled weight decay."""
    return LazyAdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused)
