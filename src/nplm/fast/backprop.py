"""The training step's gradients computed by hand, without autograd, where the model and head can.

For a small model autograd's own work is a large part of a training step: for the Tiny Shakespeare
character model (context 10, m = 32, h = 128, direct connections, 65 characters, batch 128, 2 threads)
the same forward, backward and Adam step take longer through `loss.backward()` and `optimizer.step()`
than with the gradients of eq. (1) written out and the optimizer's wrapper skipped
(`experiments/bench/README.md`: notebook_vs_trainer.py's table, "plain" against "plain, autograd").
The NPLM (`forward_saving`, `backprop`) and the full softmax head (`nll_and_backprop`) differentiate
themselves: the same operations autograd would run, so the same gradients (tests/test_backprop.py), added to the
parameters' `.grad` as autograd adds them, so that gradient accumulation, clipping and the optimizer
work unchanged. Those methods run under `torch.no_grad()` (`train_loss`).

`LanguageModel` trains this way when `possible` says so, and through autograd otherwise (other heads,
GPUs, autocast, torch.compile, hooks on the parameters, several processes).
"""

from __future__ import annotations

import functools

import torch
from torch import nn


def accumulate_grad(param: torch.Tensor, grad: torch.Tensor) -> None:
    """`param.grad += grad` (or `= grad` where there is none), as autograd accumulates gradients."""
    if param.grad is None:
        param.grad = grad
    else:
        param.grad += grad


@functools.cache
def hooks_visible() -> bool:
    """Whether this torch shows the hooks registered on a tensor's gradient (`register_hook`,
    `register_post_accumulate_grad_hook`) in the tensor's `_backward_hooks` and
    `_post_accumulate_grad_hooks`: private attributes, with no public way to ask. Checked once, on a
    probe tensor; where it does not, `possible` says no and training goes through autograd."""
    probe = torch.zeros(1, requires_grad=True)
    try:
        if probe._backward_hooks or probe._post_accumulate_grad_hooks:
            return False
        probe.register_hook(lambda grad: grad)
        probe.register_post_accumulate_grad_hook(lambda param: None)
        return bool(probe._backward_hooks) and bool(probe._post_accumulate_grad_hooks)
    except (AttributeError, RuntimeError):
        return False


def possible(model: nn.Module, head: nn.Module) -> bool:
    """Whether `train_loss` computes the gradients autograd would: both parts can, and nothing is
    listening to the parameters' autograd (tensor hooks; where torch does not show them,
    `hooks_visible`, never) or frozen."""
    if not hooks_visible():
        return False
    params = [*model.parameters(), *head.parameters()]
    listened = any(p._backward_hooks or p._post_accumulate_grad_hooks for p in params)
    return (model.can_backprop_by_hand() and head.can_backprop_by_hand() and not listened
            and all(p.requires_grad for p in params))


def train_loss(model: nn.Module, head: nn.Module, context: torch.Tensor, target: torch.Tensor,
               scale: float) -> torch.Tensor:
    """`head.loss(model(context), target)` [B], adding the gradients of `scale * loss.sum()` to the
    parameters' `.grad` (scale 1 / B for the batch's mean loss)."""
    with torch.no_grad():  # the parts' methods assume it
        features, saved = model.forward_saving(context)  # [B, F]
        nll, grad_features = head.nll_and_backprop(features, target, features.new_full(target.shape, scale))
        model.backprop(saved, grad_features)
    return nll


def mean_loss_backward(model: nn.Module, head: nn.Module, context: torch.Tensor,
                       target: torch.Tensor) -> torch.Tensor:
    """The gradients of the batch's mean training loss added to `.grad` as nplm-train computes them
    (by hand where `possible`, else autograd), for loops of its own that train several heads (the
    Morin timing table, hsm_scaling); returns the per-example loss [B], detached."""
    if possible(model, head):
        return train_loss(model, head, context, target, 1 / len(target))
    loss = head.loss(model(context), target)  # [B]
    loss.mean().backward()
    return loss.detach()

