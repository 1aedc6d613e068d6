"""The neural probabilistic language model of Bengio et al. (2003), section 2, as a feature extractor.

Symbols follow the paper: C is the |V| x m table of word feature vectors, x = (C(w_{t-1}), ...,
C(w_{t-n+1})) the concatenated context of (n-1)m numbers, H (h x (n-1)m) and d (h) the hidden layer.
Eq. (1) is  y = b + W x + U tanh(d + H x);  this module returns the features

    f = concat(x if direct, act(d + H x) if h > 0)          # [B, F], F = (n-1)m [direct] + h

so that a softmax head with weight [W | U] and bias b computes exactly eq. (1). Other heads (trees,
classes, sampling) read the same features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from nplm.config.registry import option
from nplm.config.rules import Bool, Check, Choice, Float, Int
from nplm.fast.backprop import accumulate_grad
from nplm.models import Model, register_model

ACTIVATIONS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid}


def _tanh_grad(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return grad * (1 - a * a)


def _sigmoid_grad(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return grad * a * (1 - a)


def aten_or(name: str, fallback):
    """torch's own kernel `torch.ops.aten.<name>` (one fused kernel, what autograd runs; not a documented
    API) where this torch has it, else `fallback`, the same arithmetic in public ops."""
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return fallback


# grad * d act(z) / dz from the output a = act(z): grad (1 - a^2) and grad a (1 - a), as autograd computes them
ACTIVATION_GRADS = {"tanh": aten_or("tanh_backward", _tanh_grad), "sigmoid": aten_or("sigmoid_backward", _sigmoid_grad)}


def _some_features(m: dict) -> str | None:
    if m.get("hidden_dim") == 0 and m.get("direct") is False:
        return "an integer >= 1 when model.direct=false (else there are no features)"
    return None


@dataclass
class NPLMConfig:
    """Hyperparameters of the NPLM (config group `model`, option `nplm`); each field is a config key."""

    context_size: int = option(4, Int(1), "n-1, the previous words the model reads")
    embed_dim: int = option(60, Int(1), "m, the size of a word feature vector C(w)")
    hidden_dim: int = option(50, Int(0), "h, hidden units; 0 drops the hidden layer (the paper's MLP3)")
    direct: bool = option(True, Bool(), "direct connections W x from the embeddings to the output")
    activation: str = option("tanh", Choice(options=tuple(ACTIVATIONS)), "tanh (the paper) or sigmoid")
    dropout: float = option(0.0, Float(ge=0, lt=1), "dropout on the features")
    sparse_embeddings: bool = option(False, Bool(), "row-sparse gradients for C: only the batch's rows are updated")


@register_model("nplm", keys=NPLMConfig, checks=(Check("hidden_dim", _some_features),))
class NPLM(Model):
    """Bengio et al. (2003): context ids `[B, n-1]` -> features `[B, F]` (module docstring, eq. 1)."""

    config_class = NPLMConfig

    def __init__(self, vocab_size: int, cfg: NPLMConfig):
        super().__init__()
        self.cfg = cfg
        k, m, h = cfg.context_size, cfg.embed_dim, cfg.hidden_dim
        self.context_size = k
        self.C = nn.Embedding(vocab_size, m, sparse=cfg.sparse_embeddings)
        self.H = nn.Linear(k * m, h) if h > 0 else None  # weight H, bias d
        self.act = ACTIVATIONS[cfg.activation]
        self.dropout = nn.Dropout(cfg.dropout)
        self.feature_dim = (k * m if cfg.direct else 0) + h

    def embed(self, context: torch.Tensor) -> torch.Tensor:
        """C(context): `[B, n-1]` ids -> `[B, n-1, m]`. On a CPU with a dense gradient this is
        `index_select`, whose backward (`index_add_` into zeros) is faster there than
        nn.Embedding's (bench notes in git: experiments/bench/README.md at efe32f1, the CPU training step);
        elsewhere nn.Embedding (a row-sparse gradient; CUDA's deterministic backward)."""
        if self.C.sparse or context.device.type != "cpu":
            return self.C(context)
        return self.C.weight.index_select(0, context.reshape(-1)).view(*context.shape, -1)

    def features_from_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """Features from context vectors `[B, n-1, m]`; used directly for out-of-vocabulary words,
        whose vector is sum_i C(i) P(i | context) (Bengio et al. 2003, section 4)."""
        return self.dropout(self._features(emb.flatten(1))[0])  # [B, F]

    def input_embeddings(self) -> torch.Tensor:
        return self.C.weight  # [V, m]

    def _features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """From x `[B, (n-1)m]`: f = [x, act(d + H x)] `[B, F]` before dropout, and act(d + H x) `[B, h]`
        (None without a hidden layer)."""
        a = self.act(self.H(x)) if self.H is not None else None  # [B, h]
        parts = ([x] if self.cfg.direct else []) + ([a] if a is not None else [])
        return (torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]), a

    # -- backpropagation by hand (nplm.fast.backprop) ----------------------------------------------------
    def can_backprop_by_hand(self) -> bool:
        """Whether `forward_saving`/`backprop` can train this model: on a CPU, float32, a dense gradient
        for C (the sparse one is nn.Embedding's)."""
        weight = self.C.weight
        return weight.device.type == "cpu" and weight.dtype == torch.float32 and not self.C.sparse

    def forward_saving(self, context: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        """`forward(context)` in training mode, without autograd: features `[B, F]` and what
        `backprop` needs. Dropout draws its mask as `nn.Dropout` does on a CPU (the same numbers for
        the same seed)."""
        x = self.embed(context).flatten(1)  # [B, (n-1)m]
        features, a = self._features(x)  # [B, F], [B, h]
        mask = None
        if self.training and self.cfg.dropout > 0:
            keep = 1 - self.cfg.dropout
            mask = torch.empty_like(features).bernoulli_(keep).div_(keep)  # [B, F]: 0 or 1/keep
            features = features * mask
        return features, (context, x, a, mask)

    def backprop(self, saved: tuple, grad_features: torch.Tensor) -> None:
        """Add dL/dC, dL/dH, dL/dd to the parameters' `.grad` from dL/df `[B, F]` (eq. 1 differentiated
        by hand: with z = d + H x and a = act(z), dL/dz = dL/da act'(z); dL/dH = dL/dz^T x;
        dL/dx = dL/df_x + dL/dz H; C gets dL/dx's rows at the context's ids)."""
        context, x, a, mask = saved
        if mask is not None:
            grad_features = grad_features * mask
        direct = x.shape[1] if self.cfg.direct else 0
        grad_x = grad_features[:, :direct] if direct else None  # [B, (n-1)m]
        if self.H is not None:
            grad_z = ACTIVATION_GRADS[self.cfg.activation](grad_features[:, direct:], a)  # [B, h]
            accumulate_grad(self.H.weight, grad_z.t() @ x)  # [h, (n-1)m]
            accumulate_grad(self.H.bias, grad_z.sum(0))
            grad_x = grad_z @ self.H.weight if grad_x is None else torch.addmm(grad_x, grad_z, self.H.weight)
        m = self.cfg.embed_dim
        grad_c = torch.zeros_like(self.C.weight).index_add_(0, context.reshape(-1), grad_x.reshape(-1, m))  # [V, m]
        accumulate_grad(self.C.weight, grad_c)
