"""The output layer's two large matmuls on a CPU, where torch's default GEMM (MKL) is slow for them.

A full-softmax output layer over features f [B, F] and weight W [V, F] (F small: 290 for MLP1, V the
vocabulary) has two matmuls with a [B, V] side, both far below this machine's matmul peak in MKL
(2 threads, B = 1024, F = 290, V = 17,905; bench notes in git: experiments/bench/README.md at efe32f1,
the CPU training step). Faster on this machine (the same notes, over batch and vocabulary sizes; its
effect on MLP1's step: the ablation in `experiments/bench/README.md`, bench.py's table):

- the forward y = f W^T + b through oneDNN's linear (`torch.ops.mkldnn._linear_pointwise`, the kernel
  torch.compile's CPU backend calls for linear layers; a private op, so `onednn_linear_works` checks it
  once and `torch.addmm` takes over where it is missing or changed). Below 8,192 output columns (a
  character model: V = 65) oneDNN is the slower one, so it is used only from there;
- the weight gradient dW = g^T f [V, F] in blocks of 1,024 rows of W rather than in one MKL call.

Both give the same numbers as `torch.addmm` / `torch.mm` up to float32 rounding (tests/test_cpu_gemm.py).
"""

from __future__ import annotations

import functools

import torch

ONEDNN_MIN_OUTPUTS = 8192  # output columns from which oneDNN's forward beats MKL's (see above)
WEIGHT_GRAD_BLOCK = 1024  # rows of W per matmul of the weight gradient


@functools.cache
def onednn_linear_works() -> bool:
    """Whether this torch has oneDNN's linear (`torch.ops.mkldnn._linear_pointwise`: a private op,
    whose arguments may change) with the arguments used here, giving addmm's numbers. Checked once, on
    a small probe; where it does not, `linear` is `torch.addmm` for every size."""
    if not torch.backends.mkldnn.is_available():
        return False
    g = torch.Generator().manual_seed(0)
    f, w, b = torch.randn(8, 16, generator=g), torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
    try:
        out = torch.ops.mkldnn._linear_pointwise(f, w, b, "none", [None], "")
    except (AttributeError, RuntimeError, TypeError):
        return False
    return out.shape == (8, 24) and torch.allclose(out, torch.addmm(b, f, w.t()), rtol=1e-4, atol=1e-4)


def is_cpu_float32(x: torch.Tensor) -> bool:
    """Whether `x` is a float32 CPU tensor: where this module's kernels apply."""
    return x.device.type == "cpu" and x.dtype == torch.float32


def linear(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """features [B, F] @ weight[V, F]^T + bias [V] -> [B, V]. No autograd: call it where gradients
    are off or inside an autograd.Function."""
    if weight.shape[0] >= ONEDNN_MIN_OUTPUTS and is_cpu_float32(features) and onednn_linear_works():
        return torch.ops.mkldnn._linear_pointwise(features, weight, bias, "none", [None], "")
    return torch.addmm(bias, features, weight.t())


def weight_grad(grad_out: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """dL/dW = grad_out [B, V]^T @ features [B, F] -> [V, F], on a CPU in blocks of rows of W."""
    if not is_cpu_float32(grad_out) or grad_out.shape[1] <= WEIGHT_GRAD_BLOCK:
        return grad_out.t() @ features
    out = grad_out.new_empty(grad_out.shape[1], features.shape[1])  # [V, F]
    for start in range(0, out.shape[0], WEIGHT_GRAD_BLOCK):
        rows = slice(start, start + WEIGHT_GRAD_BLOCK)
        torch.mm(grad_out[:, rows].t(), features, out=out[rows])
    return out
