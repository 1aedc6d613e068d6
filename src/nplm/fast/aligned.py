"""Linear layers at widths a GPU's tensor cores take whole.

cuBLAS's fast bf16 kernels need each matrix's rows to start on 16 bytes: widths that are multiples of 8.
The paper's WikiText-103 model has d = 410, hidden 2,100, a first block of 1,500 and a shortlist of
20,003 rows, none of them one; its matmuls ran far slower than the same products with the
widths rounded up to a multiple of 8 (bench notes in git: experiments/bench/README.md at efe32f1, aligned
widths).

`linear(x, weight, bias)` is F.linear on copies padded with zeros to such widths (input and output),
the output cut back: the same numbers, the padding adds zeros only, and autograd's backward of the pad
and the cut drops the padding's gradients. With `keep_padding=True` the output keeps its zero columns
(a bias is padded with zeros too), so that a following `linear` (after a ReLU, which keeps zeros) takes
it as it is: a feed-forward block pads its input once and cuts its output once.

Only on CUDA (`PADDED_DEVICES`): on a CPU the copies cost more than MKL's unaligned kernels lose. Inside
`nplm.fast.plain.model_arithmetic()` it is F.linear itself: a step's FLOPs are counted there
(`nplm.training.flops`), the model's arithmetic without the padding's, as MFU counts them.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from nplm.fast import plain

MULTIPLE = 8  # bf16 elements in 16 bytes
PADDED_DEVICES = {"cuda"}


def _up(n: int) -> int:
    return -(-n // MULTIPLE) * MULTIPLE


def aligned(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether F.linear(x, weight) already runs at aligned widths."""
    out_f, in_f = weight.shape
    return out_f % MULTIPLE == 0 and in_f % MULTIPLE == 0 and x.shape[-1] == in_f


def enabled(x: torch.Tensor) -> bool:
    """Whether to pad x's products: on the PADDED_DEVICES, outside `plain.model_arithmetic()`."""
    return not plain.counting() and x.device.type in PADDED_DEVICES


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           keep_padding: bool = False) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [..., in] (or [..., in + zero padding], from `keep_padding`), weight
    [out, in], bias [out] -> [..., out] ([..., out rounded up to 8] with `keep_padding`, the added columns
    zero). Where it does not pad (`enabled`), x is [..., in]: F.linear."""
    if not enabled(x) or aligned(x, weight):
        return F.linear(x, weight, bias)
    out_f, in_f = weight.shape
    width, out_w = _up(x.shape[-1]), _up(out_f)
    if torch.is_autocast_enabled(x.device.type):  # pad what the matmul reads: the half-precision copies
        dtype = torch.get_autocast_dtype(x.device.type)
        x, weight = x.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    if width > x.shape[-1]:
        x = F.pad(x, (0, width - x.shape[-1]))  # [..., width]
    w = F.pad(weight, (0, width - in_f, 0, out_w - out_f))  # [out_w, width]
    b = F.pad(bias, (0, out_w - out_f)) if bias is not None and out_w > out_f else bias  # [out_w]
    y = F.linear(x, w, b)  # [..., out_w]
    return y if keep_padding or out_w == out_f else y[..., :out_f]
