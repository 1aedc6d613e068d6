"""Full softmax output layer: P(w_t = i | context) = exp(y_i) / sum_j exp(y_j) (Bengio et al. 2003).

With the NPLM's features f = [x, tanh(d + Hx)] and `self.out` = (weight [W | U], bias b),
y = b + W x + U tanh(d + H x): eq. (1) of the paper. Cost O(|V| F) per example.

The NLL has its own autograd function: its backward is the textbook dL/dy = softmax(y) - onehot(t)
computed in place in two passes over [B, V] (and no branch on the data: no host sync), where
`F.cross_entropy` zero-fills a [B, V] gradient and makes two more passes; at the Brown vocabulary that halves the loss' share of a training step
(experiments/bench).
"""

from __future__ import annotations

import torch
from torch import nn

from nplm.heads.base import Head, wide


class SoftmaxNLL(torch.autograd.Function):
    """-log softmax(y)[t] per row; backward (softmax(y) - onehot(t)) * grad, reusing log-softmax's memory."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        log_p = torch.log_softmax(logits, dim=-1)  # [B, V]
        ctx.save_for_backward(log_p, target)
        return -log_p.gather(1, target[:, None]).squeeze(1)  # [B]

    @staticmethod
    def backward(ctx, grad_nll: torch.Tensor):
        log_p, target = ctx.saved_tensors  # a second backward fails autograd's version check, never silently
        grad = log_p.exp_().mul_(grad_nll[:, None])  # softmax(y) * g, in place: [B, V]
        grad.scatter_add_(1, target[:, None], -grad_nll[:, None].to(grad.dtype))  # - onehot(t) * g
        return grad, None


class SoftmaxHead(Head):
    def __init__(self, feature_dim: int, vocab_size: int):
        super().__init__()
        self.out = nn.Linear(feature_dim, vocab_size)  # weight [V, F] = [W | U], bias b [V]

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(features)  # [B, V]

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return SoftmaxNLL.apply(wide(self.logits(features)), target)  # [B], float32 also under bf16 autocast

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(wide(self.logits(features)), dim=-1)  # [B, V]
