"""Lazy row updates: optimizers that update only the rows of C a batch touched.

Row-sparse gradients (`model.sparse_embeddings=true`: nn.Embedding(sparse=True)) are updated lazily:
only the rows in the batch move, and Adam's moments of the other rows wait (as torch.optim.SparseAdam
and TensorFlow's LazyAdam); weight decay then applies to the touched rows only. A dense update of a
256k x 60 table every step costs more than the whole hierarchical output layer. Dense gradients go
to the torch optimizer the class is mixed into.
"""

from __future__ import annotations

import math

import torch
from torch.optim import optimizer as torch_optimizer

from nplm.errors import UserError


class LazyRowsMixin:
    """`step` hands dense gradients to the torch optimizer it is mixed into and row-sparse ones
    (sparse COO, one row per index: nn.Embedding(sparse=True)) to `_sparse_step`."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        sparse = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.is_sparse:
                    sparse.append((group, p, p.grad))
                    p.grad = None  # hidden from the dense (fused) update
        if not self._dense_step_direct():
            # the torch class's own step: once any optimizer of that class exists, torch has wrapped
            # it to run the step hooks, which this class's wrapper runs already
            parent = super().step.__func__
            (parent.__wrapped__ if getattr(parent, "hooked", False) else parent)(self)
        for group, p, grad in sparse:
            grad = grad.coalesce()
            rows, values = grad.indices()[0], grad.values()  # [R], [R, m]
            self._sparse_step(group, p, rows, values)
            p.grad = grad
        return loss

    def _dense_step_direct(self) -> bool:
        """Where a subclass can, the dense update without `Optimizer.step`'s bookkeeping; False: not done."""
        return False

    def zero_grad(self, set_to_none: bool = True) -> None:
        """`Optimizer.zero_grad`; setting the gradients to None it skips that method's profiler record,
        about 20 us per call against 1 us for the loop (a small model's step is ~1.4 ms)."""
        if not set_to_none:
            return super().zero_grad(set_to_none=False)
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None


class LazyAdam(LazyRowsMixin, torch.optim.Adam):
    """Adam; sparse rows get Adam's update (Kingma & Ba 2015, alg. 1) with their own moments, and the
    group's weight decay as torch applies it: L2 (Adam) or decoupled (AdamW).

    With `fused=True` (the default) the dense update calls torch's fused Adam kernel itself, as
    `torch.optim.Adam.step` does, once every parameter has its state: for a small model that
    method's own work (hooks, grouping tensors by device, checks) costs more than the kernel: the
    Tiny Shakespeare model's training step is 1.07x faster without it (median of 20 rounds,
    0.86-1.36; experiments/bench/optimizer_step.md).
    The same kernel with the same arguments, so the same parameters bit for bit (tests/test_optim.py)."""

    def _dense_step_direct(self) -> bool:
        if _optimizer_hooks(self) or getattr(self, "grad_scale", None) is not None \
                or getattr(self, "found_inf", None) is not None:  # hooks to run; AMP's GradScaler (fp16)
            return False
        work = []
        for group in self.param_groups:
            if not group["fused"] or group["amsgrad"] or group["maximize"] or group["capturable"] \
                    or group["differentiable"] or isinstance(group["lr"], torch.Tensor):
                return False
            params = [p for p in group["params"] if p.grad is not None]
            if any("step" not in self.state[p] for p in params):
                return False  # the first step: torch creates the state
            work.append((group, params))
        for group, params in work:
            if not params:
                continue
            states = [self.state[p] for p in params]
            steps = [state["step"] for state in states]
            torch._foreach_add_(steps, 1)
            kernel = torch._fused_adamw_ if group["decoupled_weight_decay"] else torch._fused_adam_
            kernel(params, [p.grad for p in params], [state["exp_avg"] for state in states],
                   [state["exp_avg_sq"] for state in states], [], steps, amsgrad=False, lr=group["lr"],
                   beta1=group["betas"][0], beta2=group["betas"][1], weight_decay=group["weight_decay"],
                   eps=group["eps"], maximize=False)
        return True

    def _sparse_step(self, group: dict, p: torch.Tensor, rows: torch.Tensor, g: torch.Tensor) -> None:
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        t = state["step"].item()
        theta = p.index_select(0, rows)  # [R, m]
        if group["weight_decay"] and group["decoupled_weight_decay"]:
            theta.mul_(1 - group["lr"] * group["weight_decay"])
        elif group["weight_decay"]:
            g = g.add(theta, alpha=group["weight_decay"])
        m = state["exp_avg"].index_select(0, rows).lerp_(g, 1 - beta1)  # [R, m]
        v = state["exp_avg_sq"].index_select(0, rows).mul_(beta2).addcmul_(g, g, value=1 - beta2)
        state["exp_avg"].index_copy_(0, rows, m)
        state["exp_avg_sq"].index_copy_(0, rows, v)
        denom = v.sqrt_().div_(math.sqrt(1 - beta2 ** t)).add_(group["eps"])
        theta.addcdiv_(m, denom, value=-group["lr"] / (1 - beta1 ** t))
        p.index_copy_(0, rows, theta)


class LazyAdamW(LazyAdam, torch.optim.AdamW):
    pass


class LazySGD(LazyRowsMixin, torch.optim.SGD):
    """SGD; sparse rows: theta_r -= lr (g_r + wd theta_r) for the rows r in the batch (no momentum)."""

    def _sparse_step(self, group: dict, p: torch.Tensor, rows: torch.Tensor, g: torch.Tensor) -> None:
        if group["momentum"]:
            raise UserError("model.sparse_embeddings=true works with optimizer.momentum=0 only")
        theta = p.index_select(0, rows)  # [R, m]
        theta.add_(g.add(theta, alpha=group["weight_decay"]), alpha=-group["lr"])
        p.index_copy_(0, rows, theta)


def _optimizer_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Whether step hooks are registered (on this optimizer or globally): `Optimizer.step` runs them."""
    return bool(optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
                or torch_optimizer._global_optimizer_pre_hooks or torch_optimizer._global_optimizer_post_hooks)


def step_without_profiler(optimizer: torch.optim.Optimizer) -> None:
    """`optimizer.step()` without the wrapper torch puts around every optimizer's `step` (a profiler
    `record_function` and the hook loops; ~30 us a call on this 2-core machine, 3% of the Tiny
    Shakespeare model's step) where nothing listens to it: no hook, and no instance-level wrapper (an
    LR scheduler wraps `optimizer.step` to check the order of its calls); else `optimizer.step()`."""
    step = type(optimizer).step
    if _optimizer_hooks(optimizer) or "step" in vars(optimizer) or not hasattr(step, "__wrapped__"):
        optimizer.step()
    else:
        step.__wrapped__(optimizer)
