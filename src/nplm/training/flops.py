"""The FLOPs of a training step, counted once per run, and the model FLOP utilisation (MFU) they give.

`count_step_flops` runs the forward and backward of `head.loss(model(context), target).mean()` on one
batch of the run's training shape under `torch.utils.flop_counter.FlopCounterMode`, which counts the
matrix products (mm, addmm, bmm, baddbmm: 2 m n k each) and nothing elementwise (activations, the
softmax, the optimizer's update). It counts the model's FLOPs: the arithmetic its equations ask, inside
`nplm.fast.plain.model_arithmetic` (no zero padding, no banded matrices' zeros, no capacity margins or
every-cluster scoring of the adaptive head, no padding of tree paths), so the count is the same for every
code path of a head and on every device; where nplm trains through `nplm.fast.backprop` (the CPU's
hand-written gradients) it is autograd's for the same step. What the run's own path executes is counted
beside it (`executed_per_step`, `train/executed_flops_per_token`), under its own name. The batch is
drawn from the training windows with a generator of its own, the run's random number generators are
forked around it (dropout, sampled heads) and the gradients it makes are dropped, so a run trains
exactly as without the count.

    MFU = FLOPs per training token x training tokens per second / peak FLOP/s of the devices

(PaLM, Chowdhery et al. 2022, appendix B; the peak from `nplm.training.peak`): the per-step cost is
nothing, the tokens/s being measured anyway. A figure above 100% (a measured peak taken while another job
used the device) is shown as it is, with a warning, never clamped. With `trainer.accumulate_grad_batches=1` a step is one
optimizer step, so this is also step FLOPs x optimizer steps per second / peak.
"""

from __future__ import annotations

import logging
import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nplm.data.blocks import Blocks
from nplm.data.windows import Windows
from nplm.fast import plain
from nplm.training.peak import Peak, device_peak, precision_of

log = logging.getLogger(__name__)


def _onednn_linear_flops(input_shape, weight_shape, *args, out_shape=None, **kwargs) -> int:
    """oneDNN's linear (`nplm.fast.cpu_gemm.linear`), input [..., F] and weight [V, F]: 2 F V per row,
    as FlopCounterMode counts the addmm it stands for."""
    return 2 * math.prod(input_shape[:-1]) * input_shape[-1] * weight_shape[0]


def _lstm_layer_flops(input_shape, weight_ih_shape, weight_hh_shape, *args, out_shape=None, **kwargs) -> int:
    """One LSTM layer on a CPU (oneDNN's `mkldnn_rnn_layer`, torch.nn.LSTM's CPU path), input [..., I] and
    weights [4H, I], [4H, H]: each step's two matmuls, 2 (I + H) 4H per row (the gates' pointwise work
    left out, as FlopCounterMode leaves it out elsewhere)."""
    return 2 * math.prod(input_shape[:-1]) * (weight_ih_shape[1] + weight_hh_shape[1]) * weight_ih_shape[0]


def _lstm_layer_backward_flops(*args, **kwargs) -> int:
    """Its backward: the gradients of the inputs and of the weights, twice the forward's."""
    return 2 * _lstm_layer_flops(*args, **kwargs)


def _cudnn_rnn_flops(input_shape, weight_shapes, weight_stride0, *args, out_shape=None, **kwargs) -> int:
    """cuDNN's whole RNN (`_cudnn_rnn`, torch.nn.LSTM's CUDA path), input [B, T, I] (or [T, B, I]) and each layer's
    (and direction's) weights [gates H, I_l], [gates H, H] at `weight_stride0` apart in `weight_shapes`: each step's
    two matmuls per layer, 2 (I_l + H) gates H per row, as `_lstm_layer_flops` counts the CPU's layers."""
    rows = math.prod(input_shape[:-1])
    pairs = [weight_shapes[i:i + 2] for i in range(0, len(weight_shapes), weight_stride0)]
    return sum(2 * rows * (w_ih[1] + w_hh[1]) * w_ih[0] for w_ih, w_hh in pairs)


def _cudnn_rnn_backward_flops(input_shape, weight_shapes, weight_stride0, *args, out_shape=None, **kwargs) -> int:
    """Its backward: the gradients of the inputs and of the weights, twice the forward's."""
    return 2 * _cudnn_rnn_flops(input_shape, weight_shapes, weight_stride0)


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """The CPU's fused attention (`scaled_dot_product_attention`), q [b, h, n, d_q], k [b, h, m, d_q], v [b, h,
    m, d_v]: Q K^T and the weights times V, as FlopCounterMode counts the GPU's fused kernels."""
    b, h, n, d_q = query_shape
    return 2 * b * h * n * key_shape[-2] * (d_q + value_shape[-1])


def _cpu_attention_backward_flops(grad_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                                  **kwargs) -> int:
    """Its backward: Q K^T again, then the gradients of the weights, V, Q and K (as the GPU's are counted)."""
    b, h, n, d_q = query_shape
    return 2 * b * h * n * key_shape[-2] * (3 * d_q + 2 * value_shape[-1])


def extra_formulas() -> dict:
    """FLOP formulas for the matmuls run outside the aten ops FlopCounterMode counts itself: oneDNN's linear
    where `nplm.fast.cpu_gemm` uses it (its own capability check), the LSTM of model=lstm (oneDNN's layers on a CPU,
    cuDNN's whole network on a GPU), and
    the CPU's fused attention kernel where this torch has it (model=transformer)."""
    from nplm.fast.cpu_gemm import onednn_linear_works

    formulas = {torch.ops.aten.mkldnn_rnn_layer: _lstm_layer_flops,
                torch.ops.aten.mkldnn_rnn_layer_backward: _lstm_layer_backward_flops,
                torch.ops.aten._cudnn_rnn: _cudnn_rnn_flops,  # (FlopCounterMode has no formula of its own for it)
                torch.ops.aten._cudnn_rnn_backward: _cudnn_rnn_backward_flops}
    if onednn_linear_works():
        formulas[torch.ops.mkldnn._linear_pointwise] = _onednn_linear_flops
    fused = "_scaled_dot_product_flash_attention_for_cpu"
    if hasattr(torch.ops.aten, fused) and hasattr(torch.ops.aten, fused + "_backward"):
        formulas[getattr(torch.ops.aten, fused)] = _cpu_attention_flops
        formulas[getattr(torch.ops.aten, fused + "_backward")] = _cpu_attention_backward_flops
    return formulas


def count_step_flops(model: nn.Module, head: nn.Module, context: torch.Tensor, target: torch.Tensor,
                     features: Callable | None = None, executed: bool = False) -> int:
    """The model's FLOPs (`nplm.fast.plain.model_arithmetic`; `executed`: those of the path the run takes
    instead) of forward + backward of `head.loss(model(context), target).mean()` (context `[B, k]`,
    target `[B]`) in training mode; `features(context, target) -> (features [N, F], target [N])` in
    place of the model's own for block batches (`LanguageModel.features`). Leaves the modules as they
    were: their mode, their gradients, and the random number generators of the CPU and of the batch's GPU."""
    params = list({id(p): p for m in (model, head) for p in m.parameters()}.values())
    grads = [p.grad for p in params]
    modes = [m.training for m in (model, head)]
    for p in params:
        p.grad = None
    gpus = [context.device] if context.device.type == "cuda" else []
    try:
        with (torch.random.fork_rng(devices=gpus), nullcontext() if executed else plain.model_arithmetic(),
              FlopCounterMode(display=False, custom_mapping=extra_formulas()) as c):
            model.train(), head.train()
            head.loss(*(features or (lambda c, t: (model(c), t)))(context, target)).mean().backward()
    finally:
        for p, grad in zip(params, grads):
            p.grad = grad
        model.train(modes[0]), head.train(modes[1])
    return c.get_total_flops()


def sample_batch(windows: Windows | Blocks, batch_size: int,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` training windows or whole blocks (fewer if there are fewer), drawn with a generator of
    their own: (context [B, k], target [B]) or (ids [B, T + k], targets [B, T]) on `device`."""
    n = windows.whole if isinstance(windows, Blocks) else len(windows)  # (whole blocks only)
    index = torch.randint(n, (min(batch_size, n),), generator=torch.Generator().manual_seed(0))
    context, target = windows[index]
    return context.to(device), target.to(device)


@dataclass(frozen=True)
class FlopReport:
    """The counted FLOPs of a training batch and the peak they are measured against."""

    per_step: int  # the model's FLOPs: forward + backward of one training batch
    tokens_per_step: int  # the batch's tokens (one per window)
    peak: Peak  # of one device
    executed_per_step: int | None = None  # what the run's own code path computes for the same batch

    @property
    def per_token(self) -> float:
        return self.per_step / self.tokens_per_step

    def mfu(self, tokens_per_s: float, devices: int = 1) -> float:
        """Model FLOP utilisation of `devices` devices that train `tokens_per_s` tokens a second together
        (above 1 where the peak is too low: shown as it is; `speed_figures` warns)."""
        return tokens_per_s * self.per_token / (self.peak.flops * devices)

    def metrics(self) -> dict[str, float]:
        """The numbers for metrics.json (`train/mfu` is logged per epoch by the LightningModule)."""
        out = {"train/flops_per_step": self.per_step, "train/flops_per_token": self.per_token,
               "device/peak_flops": self.peak.flops}
        if self.executed_per_step is not None:
            out["train/executed_flops_per_token"] = self.executed_per_step / self.tokens_per_step
        return out

    def as_dict(self) -> dict:
        """The count and the peak with its source, for metrics.json's `flops` entry and the loggers."""
        return {"flops_per_step": self.per_step, "flops_per_token": self.per_token,
                "executed_flops_per_step": self.executed_per_step, "tokens_per_step": self.tokens_per_step,
                "peak_flops": self.peak.flops, "peak_source": self.peak.source, "peak_precision": self.peak.precision}


class FlopCount(pl.Callback):
    """At the start of training (on the training device, before the first step): count a batch's FLOPs
    (`count_step_flops`), find the device's peak for the run's precision (`nplm.training.peak`), and
    hand the `FlopReport` to the LightningModule (`pl_module.flops`: its per-epoch `train/mfu`, the
    progress lines), to the loggers (as hyperparameters) and to `on_count`."""

    def __init__(self, windows: Windows | Blocks, batch_size: int, data_dir: str | Path,
                 on_count: Callable[[FlopReport], None] | None = None):
        """`windows`: the training windows (or blocks); `data_dir`: where a measured peak is cached."""
        self.windows, self.batch_size, self.data_dir, self.on_count = windows, batch_size, data_dir, on_count

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        device = pl_module.device
        context, target = sample_batch(self.windows, self.batch_size, device)
        step = count_step_flops(pl_module.model, pl_module.head, context, target, features=pl_module.features)
        executed = count_step_flops(pl_module.model, pl_module.head, context, target, features=pl_module.features,
                                    executed=True)
        tf32 = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
        report = FlopReport(step, target.numel(), device_peak(device, precision_of(trainer.precision, tf32),
                                                              self.data_dir), executed)
        log.info("%.4g model FLOPs per training batch of %d tokens (%.4g per token; the run's code path executes "
                 "%.4g); peak %.4g FLOP/s (%s, %s)", step, report.tokens_per_step, report.per_token,
                 executed / report.tokens_per_step, report.peak.flops, report.peak.source, report.peak.precision)
        pl_module.flops = report
        for logger in trainer.loggers:
            logger.log_hyperparams({"flops": report.as_dict()})
        if self.on_count is not None:
            self.on_count(report)
