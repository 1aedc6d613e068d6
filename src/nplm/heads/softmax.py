"""Full softmax output layer: P(w_t = i | context) = exp(y_i) / sum_j exp(y_j) (Bengio et al. 2003).

With the NPLM's features f = [x, tanh(d + Hx)] and `self.out` = (weight [W | U], bias b),
y = b + W x + U tanh(d + H x): eq. (1) of the paper. Cost O(|V| F) per example.

The NLL has its own autograd function: its backward is the textbook dL/dy = softmax(y) - onehot(t)
computed in place in two passes over [B, V] (and no branch on the data: no host sync), where
`F.cross_entropy` zero-fills a [B, V] gradient and makes two more passes; at the Brown vocabulary that
shortens the loss' part of a training step markedly (bench notes in git: experiments/bench/README.md at
efe32f1, the CPU training step). On a CPU in float32 (no autocast, not compiled) training goes through
`LinearSoftmaxNLL`, which also owns the output layer's matmuls so that it can run them where they are
fast there (`nplm.fast.cpu_gemm`); elsewhere autograd differentiates `nn.Linear` as usual.
"""

from __future__ import annotations

import torch
from torch import nn

from nplm.fast.backprop import accumulate_grad
from nplm.heads import register_head
from nplm.heads.base import Head, tie_checked, wide
from nplm.fast.cpu_gemm import is_cpu_float32, linear, weight_grad


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
        return softmax_minus_onehot_(log_p, target, grad_nll), None


def softmax_minus_onehot_(log_p: torch.Tensor, target: torch.Tensor, grad_nll: torch.Tensor) -> torch.Tensor:
    """dL/dy = (softmax(y) - onehot(t)) * g per row, computed in place in `log_p` [B, V]."""
    grad = log_p.exp_().mul_(grad_nll[:, None])  # softmax(y) * g: [B, V]
    return grad.scatter_add_(1, target[:, None], -grad_nll[:, None].to(grad.dtype))  # - onehot(t) * g


def linear_softmax_nll(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """-log softmax(f W^T + b)[t] `[B]` and the log-softmax `[B, V]` its backward starts from; the
    matmul through `nplm.fast.cpu_gemm`."""
    log_p = torch.log_softmax(linear(features, weight, bias), dim=-1)  # [B, V]
    return -log_p.gather(1, target[:, None]).squeeze(1), log_p


class LinearSoftmaxNLL(torch.autograd.Function):
    """-log softmax(f W^T + b)[t] per row, the output layer's matmuls included (CPU, float32): the
    forward's y and the backward's dW run through `nplm.fast.cpu_gemm`; df = dy W, db = sum_rows dy."""

    @staticmethod
    def forward(ctx, features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor):
        nll, log_p = linear_softmax_nll(features, weight, bias, target)  # [B], [B, V]
        ctx.save_for_backward(features, weight, log_p, target)
        return nll

    @staticmethod
    def backward(ctx, grad_nll: torch.Tensor):
        features, weight, log_p, target = ctx.saved_tensors
        grad = softmax_minus_onehot_(log_p, target, grad_nll)  # dL/dy: [B, V]
        grad_features = grad @ weight if ctx.needs_input_grad[0] else None  # [B, F]
        grad_weight = weight_grad(grad, features) if ctx.needs_input_grad[1] else None  # [V, F]
        return grad_features, grad_weight, grad.sum(0) if ctx.needs_input_grad[2] else None, None


@register_head("softmax")
class SoftmaxHead(Head):
    """The full softmax of Bengio et al. (2003), eq. (1): y = b + [W | U] f, P = softmax(y)."""
    can_tie = True  # the rows of self.out.weight: one output vector per word

    def __init__(self, feature_dim: int, vocab_size: int):
        super().__init__()
        self.out = nn.Linear(feature_dim, vocab_size)  # weight [V, F] = [W | U], bias b [V]

    def tie_output_embeddings(self, weight: nn.Parameter) -> None:
        self.out.weight = tie_checked(weight, self.out.weight)  # [V, F], the model's parameter

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or torch.is_autocast_enabled(features.device.type):
            return self.out(features)  # [B, V]
        return linear(features, self.out.weight, self.out.bias)  # evaluation: the fast CPU kernel where there is one

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if is_cpu_float32(features) and not torch.compiler.is_compiling() and not torch.is_autocast_enabled("cpu"):
            return LinearSoftmaxNLL.apply(features, self.out.weight, self.out.bias, target)  # [B]
        return SoftmaxNLL.apply(wide(self.logits(features)), target)  # [B], float32 also under bf16 autocast

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(wide(self.logits(features)), dim=-1)  # [B, V]

    # -- backpropagation by hand (nplm.fast.backprop) -------------------------------------------------
    def can_backprop_by_hand(self) -> bool:
        return is_cpu_float32(self.out.weight)

    def nll_and_backprop(self, features: torch.Tensor, target: torch.Tensor,
                         grad_nll: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`nll(features, target)` [B] and dL/df [B, F] for L = sum_rows grad_nll * nll, adding dL/dW
        and dL/db to the parameters' `.grad`: `LinearSoftmaxNLL`'s forward and backward in one call."""
        weight, bias = self.out.weight, self.out.bias
        nll, log_p = linear_softmax_nll(features, weight, bias, target)  # [B], [B, V]
        grad = softmax_minus_onehot_(log_p, target, grad_nll)  # dL/dy: [B, V]
        accumulate_grad(weight, weight_grad(grad, features))  # [V, F]
        accumulate_grad(bias, grad.sum(0))
        return nll, grad @ weight  # [B], [B, F]
