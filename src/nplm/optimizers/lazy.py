"""Lazy row updates: optimizers that update only the rows of C a batch touched.

Row-sparse gradients (`model.sparse_embeddings=true`: nn.Embedding(sparse=True)) are updated lazily:
only the rows in the batch move, and Adam's moments of the other rows wait (as torch.optim.SparseAdam
and TensorFlow's LazyAdam); weight decay then applies to the touched rows only. A dense update of a
256k x 60 table every step costs more than the whole hierarchical output layer. Dense gradients go
to the torch optimizer the class is mixed into.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn
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
            _unwrapped(super().step.__func__)(self)
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
        """`Optimizer.zero_grad`; setting the gradients to None it skips that method's profiler record
        (it shows in the Tiny Shakespeare model's training step: bench notes in git:
        experiments/bench/README.md at efe32f1, the CPU training step)."""
        if not set_to_none:
            return super().zero_grad(set_to_none=False)
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None


class LazyAdamRows(LazyRowsMixin):
    """Adam's update for a torch Adam or AdamW it is mixed into; sparse rows get Adam's update (Kingma &
    Ba 2015, alg. 1) with their own moments, and the group's weight decay as torch applies it: L2
    (Adam) or decoupled (AdamW).

    With `fused=True` (the default) the dense update calls torch's fused Adam kernel itself, as
    `torch.optim.Adam.step` does, once every parameter has its state: for a small model that
    method's own work (grouping tensors by device, checks) is a good part of the step: the Tiny
    Shakespeare model's training step (gradients by hand) is faster with the kernel called
    directly (bench notes in git: experiments/bench/README.md at efe32f1, the CPU training step). The
    kernels are private ops: `fused_adam_kernels` checks once that they move a parameter as torch's
    Adam does; where not, the update is `torch.optim.Adam.step`. The same kernel with the same
    arguments, so the same parameters bit for bit (tests/test_optim.py)."""

    def _dense_step_direct(self) -> bool:
        if getattr(self, "grad_scale", None) is not None or getattr(self, "found_inf", None) is not None:
            return False  # AMP's GradScaler (fp16)
        work = []
        for group in self.param_groups:
            if not group["fused"] or group["amsgrad"] or group["maximize"] or group["capturable"] \
                    or group["differentiable"] or isinstance(group["lr"], torch.Tensor):
                return False
            params = [p for p in group["params"] if p.grad is not None]
            if any("step" not in self.state[p] for p in params):
                return False  # the first step: torch creates the state
            work.append((group, params))
        if not fused_adam_kernels():
            return False
        for group, params in work:
            if params:
                _fused_adam_step(group, params, [self.state[p] for p in params], _decoupled(self, group))
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
        if group["weight_decay"] and _decoupled(self, group):
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


class LazyAdam(LazyAdamRows, torch.optim.Adam):
    pass


class LazyAdamW(LazyAdamRows, torch.optim.AdamW):  # (AdamW is no Adam subclass before torch 2.7)
    pass


class LazySGD(LazyRowsMixin, torch.optim.SGD):
    """SGD; sparse rows: theta_r -= lr (g_r + wd theta_r) for the rows r in the batch (no momentum)."""

    def _sparse_step(self, group: dict, p: torch.Tensor, rows: torch.Tensor, g: torch.Tensor) -> None:
        if group["momentum"]:
            raise UserError("model.sparse_embeddings=true works with optimizer.momentum=0 only")
        theta = p.index_select(0, rows)  # [R, m]
        theta.add_(g.add(theta, alpha=group["weight_decay"]), alpha=-group["lr"])
        p.index_copy_(0, rows, theta)


def _decoupled(optimizer: torch.optim.Optimizer, group: dict) -> bool:
    """AdamW's decoupled weight decay (a group key since torch 2.7; before, the class said it)."""
    return group.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW))


def _fused_adam_step(group: dict, params: list, states: list, decoupled: bool) -> None:
    """One Adam step of `params` (each with a gradient and its state) by torch's fused kernel, as
    torch.optim.Adam(fused=True).step calls it."""
    steps = [state["step"] for state in states]
    torch._foreach_add_(steps, 1)
    kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
    kernel(params, [p.grad for p in params], [state["exp_avg"] for state in states],
           [state["exp_avg_sq"] for state in states], [], steps, amsgrad=False, lr=group["lr"],
           beta1=group["betas"][0], beta2=group["betas"][1], weight_decay=group["weight_decay"],
           eps=group["eps"], maximize=False)


@functools.cache
def fused_adam_kernels() -> bool:
    """Whether torch's fused Adam kernels (`torch._fused_adam_`, `torch._fused_adamw_`,
    `torch._foreach_add_`: private ops) take the arguments `_fused_adam_step` gives them and move a
    parameter exactly as torch.optim.Adam / AdamW(fused=True).step do. Checked once, on a probe;
    where they do not, LazyAdam's dense update is torch's `step`."""
    try:
        for cls in (torch.optim.Adam, torch.optim.AdamW):
            g = torch.Generator().manual_seed(0)
            start, grads = torch.randn(4, 3, generator=g), [torch.randn(4, 3, generator=g) for _ in range(3)]
            ours, theirs = nn.Parameter(start.clone()), nn.Parameter(start.clone())
            opts = {ours: cls([ours], lr=0.1, weight_decay=0.1, fused=True),
                    theirs: cls([theirs], lr=0.1, weight_decay=0.1, fused=True)}
            for i, grad in enumerate(grads):
                for p, opt in opts.items():
                    p.grad = grad.clone()
                    if p is ours and i > 0:  # torch's step creates the state
                        _fused_adam_step(opt.param_groups[0], [p], [opt.state[p]], _decoupled(opt, opt.param_groups[0]))
                    else:
                        opt.step()
            if not (torch.equal(ours, theirs) and torch.equal(opts[ours].state[ours]["exp_avg_sq"],
                                                              opts[theirs].state[theirs]["exp_avg_sq"])):
                return False
        return True
    except (AttributeError, RuntimeError, TypeError, KeyError):
        return False


@functools.cache
def torch_step_wrapper() -> bool:
    """Whether this torch wraps an optimizer class's `step` as nplm expects (all private): once an
    optimizer of a class exists, the class's `step` is a `functools.wraps` wrapper marked `hooked`
    that runs the step hooks kept in the optimizer's `_optimizer_step_pre_hooks` /
    `_optimizer_step_post_hooks` and in torch.optim.optimizer's `_global_optimizer_pre_hooks` /
    `_global_optimizer_post_hooks`. Checked once, on a probe class; where it does not,
    `step_without_profiler` is `optimizer.step()`, and `LazyRowsMixin` calls the torch class's `step`
    as it finds it (the step hooks then run twice a step where a plain torch optimizer of that class
    was made in the same process)."""

    class Probe(torch.optim.Optimizer):
        def step(self, closure=None):
            return None

    own = Probe.step
    try:
        probe = Probe([nn.Parameter(torch.zeros(1))], {})
        wrapped = Probe.step
        if not (getattr(wrapped, "hooked", False) and getattr(wrapped, "__wrapped__", None) is own):
            return False
        kept = (probe._optimizer_step_pre_hooks, probe._optimizer_step_post_hooks,
                torch_optimizer._global_optimizer_pre_hooks, torch_optimizer._global_optimizer_post_hooks)
        if not all(isinstance(hooks, dict) for hooks in kept):
            return False
        handle = probe.register_step_post_hook(lambda *args: None)
        heard = len(probe._optimizer_step_post_hooks) == 1
        handle.remove()
        return heard
    except (AttributeError, TypeError):
        return False


def _unwrapped(step):
    """The torch optimizer class's own `step` without the wrapper torch puts around it once an
    optimizer of that class exists: a subclass's step (LazyRowsMixin's) runs in a wrapper of its own
    already, which runs the step hooks once."""
    if getattr(step, "hooked", False) and torch_step_wrapper():
        return step.__wrapped__
    return step


def _optimizer_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Whether step hooks are registered (on this optimizer or globally): `Optimizer.step` runs them."""
    return bool(optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
                or torch_optimizer._global_optimizer_pre_hooks or torch_optimizer._global_optimizer_post_hooks)


def step_without_profiler(optimizer: torch.optim.Optimizer) -> None:
    """`optimizer.step()` without the wrapper torch puts around every optimizer's `step` (a profiler
    `record_function` and the hook loops, a cost that shows in the Tiny Shakespeare model's training step:
    bench notes in git: experiments/bench/README.md at efe32f1, the CPU training step) where nothing
    listens to it: no hook, and no instance-level wrapper (an LR scheduler wraps `optimizer.step` to check
    the order of its calls), and where torch wraps `step` as `torch_step_wrapper` checks; else `optimizer.step()`."""
    step = type(optimizer).step
    if (not torch_step_wrapper() or _optimizer_hooks(optimizer) or "step" in vars(optimizer)
            or not hasattr(step, "__wrapped__")):
        optimizer.step()
    else:
        step.__wrapped__(optimizer)
