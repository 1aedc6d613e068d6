"""Backpropagation by hand (nplm.fast.backprop): the gradients autograd computes, and nplm-train uses it only
where it holds."""

from __future__ import annotations

import pytest
import torch

from conftest import TOY_FAST, compose_cfg
from nplm.fast import backprop
from nplm.heads import build_head
from nplm.models.nplm import NPLM, NPLMConfig
from nplm.training.module import LanguageModel
from nplm.training.steps import ByHandStep, CompiledStep
from nplm.training.train import train

V, B = 29, 24


def parts(**model):
    torch.manual_seed(0)
    cfg = NPLMConfig(**{"context_size": 3, "embed_dim": 5, "hidden_dim": 7, **model})
    net = NPLM(V, cfg)
    return net, build_head({"name": "softmax"}, net.feature_dim, V)


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(V, (B, 3), generator=g), torch.randint(V, (B,), generator=g)


def autograd_step(net, head, context, target, scale):
    nll = head.loss(net(context), target)
    (nll.sum() * scale).backward()
    return nll.detach()


@pytest.mark.parametrize("model", [{}, {"direct": False}, {"hidden_dim": 0}, {"activation": "sigmoid"},
                                   {"dropout": 0.3}, {"dropout": 0.3, "direct": False}])
def test_gradients_are_autograds(model):
    """The same NLL and parameter gradients as `loss.backward()`, twice in a row (accumulated), dropout
    masks included (the same draws for the same seed)."""
    context, target = batch()
    results = []
    for step in (autograd_step, backprop.train_loss):
        net, head = parts(**model)
        assert backprop.possible(net, head)
        torch.manual_seed(5)
        nlls = [step(net, head, context, target, 1 / B) for _ in range(2)]
        results.append((nlls, [p.grad for p in [*net.parameters(), *head.parameters()]]))
    (nll_auto, grads_auto), (nll_hand, grads_hand) = results
    for a, b in zip(nll_auto, nll_hand):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    assert len(grads_auto) == len(grads_hand) == len(list(parts(**model)[0].parameters())) + 2
    for a, b in zip(grads_auto, grads_hand):
        assert b is not None and b.shape == a.shape
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


def test_not_possible_where_autograd_is_needed():
    net, head = parts()
    assert not backprop.possible(net, build_head({"name": "adaptive"}, net.feature_dim, V, [V - i for i in range(V)]))
    assert not backprop.possible(*parts(sparse_embeddings=True))
    net, head = parts()
    net.H.weight.register_hook(lambda g: g)  # someone listens to the gradient
    assert not backprop.possible(net, head)
    net, head = parts()
    net.C.weight.requires_grad_(False)  # frozen embeddings
    assert not backprop.possible(net, head)


# The functions run_observed spies on, as imported (not a spy of an earlier call in the same test).
REAL = (backprop.possible, backprop.train_loss, LanguageModel.on_train_start, LanguageModel._train_loss)


def run_observed(folder, monkeypatch, *overrides: str, listen: bool = False) -> tuple[dict, dict]:
    """Train the toy corpus in-process, in `folder`, with nplm-train's own choice between the two paths, forcing
    nothing, and record it: what the real `backprop.possible` answered, the module's choice
    (a `ByHandStep`), whether the step was compiled, and how many training batches went through
    `backprop.train_loss` (by hand) and through `LanguageModel._train_loss` (autograd).
    `listen=True` registers a gradient hook (the identity) on a parameter before that choice: someone
    listening to the gradient is one of the documented cases for autograd, so `possible` must see it.
    Each run needs its own folder: `train` returns a finished run's metrics without training again."""
    seen = {"possible": [], "by_hand": [], "compiled": [], "hand_steps": 0, "autograd_steps": 0}
    real_possible, real_train_loss, real_start, real_loss = REAL

    def possible(model, head):
        seen["possible"].append(real_possible(model, head))
        return seen["possible"][-1]

    def train_loss(*args):
        seen["hand_steps"] += 1
        return real_train_loss(*args)

    def on_train_start(self):
        if listen:
            next(self.model.parameters()).register_hook(lambda grad: grad)
        real_start(self)
        seen["by_hand"].append(isinstance(self.stepper, ByHandStep))
        seen["compiled"].append(isinstance(self.stepper, CompiledStep))

    def autograd_loss(self, context, target):
        seen["autograd_steps"] += 1
        return real_loss(self, context, target)

    monkeypatch.setattr(backprop, "possible", possible)
    monkeypatch.setattr(backprop, "train_loss", train_loss)
    monkeypatch.setattr(LanguageModel, "on_train_start", on_train_start)
    monkeypatch.setattr(LanguageModel, "_train_loss", autograd_loss)
    metrics = train(compose_cfg(folder, *TOY_FAST, *overrides))
    assert len(seen["by_hand"]) == 1, seen  # it trained, once
    return metrics, seen


@pytest.mark.parametrize("overrides", [(), ("model.dropout=0.2", "trainer.accumulate_grad_batches=2")])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_nplm_train_gives_the_autograd_runs_perplexities(tmp_path, monkeypatch, overrides):
    """Two epochs on the toy corpus by hand and through autograd: the same perplexities. nplm-train
    chooses the path itself in both runs: by hand for the NPLM with the softmax head on a CPU, and
    through autograd once a gradient hook listens to a parameter."""
    hand, seen = run_observed(tmp_path / "hand", monkeypatch, *overrides)
    assert seen["possible"] == [True] and seen["by_hand"] == [True], seen
    assert seen["hand_steps"] > 0 and seen["autograd_steps"] == 0, seen
    auto, seen_auto = run_observed(tmp_path / "autograd", monkeypatch, *overrides, listen=True)
    assert seen_auto["possible"] == [False] and seen_auto["by_hand"] == [False], seen_auto
    assert seen_auto["hand_steps"] == 0 and seen_auto["autograd_steps"] == seen["hand_steps"], seen_auto
    for key in ("train/ppl", "val/ppl", "test/ppl"):
        assert hand[key] == pytest.approx(auto[key], rel=1e-4), key
    assert 1.5 < hand["val/ppl"] < 40


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_nplm_train_uses_autograd_for_other_heads_and_compile(tmp_path, monkeypatch):
    """A tree head (the hierarchical softmax) has no gradients by hand: `possible` says no. With
    `compile=true` the softmax head, which could, trains through the compiled autograd step (the
    suite's aot_eager backend: the same graph capture as inductor, no code generation)."""
    _, seen = run_observed(tmp_path / "tree", monkeypatch, "head=hierarchical", "tree=balanced")
    assert seen["possible"] == [False] and seen["by_hand"] == [False], seen
    assert seen["hand_steps"] == 0 and seen["autograd_steps"] > 0, seen
    torch._dynamo.reset()
    metrics, seen = run_observed(tmp_path / "compiled", monkeypatch, "head=softmax", "compile=true",
                                 "compile_backend=aot_eager")
    assert seen["compiled"] == [True] and seen["by_hand"] == [False], seen
    assert seen["hand_steps"] == 0, seen
    assert 1.5 < metrics["val/ppl"] < 40
    torch._dynamo.reset()


def test_mean_loss_backward_takes_the_fast_path_where_possible(monkeypatch):
    """The benchmarks' loops train as nplm-train does: by hand for the softmax, autograd otherwise."""
    context, target = batch()
    calls = []
    real = backprop.train_loss
    monkeypatch.setattr(backprop, "train_loss", lambda *args: calls.append(1) or real(*args))
    net, head = parts()
    loss = backprop.mean_loss_backward(net, head, context, target)
    assert calls == [1] and loss.shape == (B,) and net.C.weight.grad is not None
    net, _ = parts()
    adaptive = build_head({"name": "adaptive"}, net.feature_dim, V, [V - i for i in range(V)])
    loss = backprop.mean_loss_backward(net, adaptive, context, target)
    assert calls == [1] and not loss.requires_grad and net.H.weight.grad.abs().sum() > 0


def test_where_torch_does_not_show_gradient_hooks_the_gradients_come_from_autograd(monkeypatch):
    """`possible` reads the parameters' gradient hooks from private tensor attributes; `hooks_visible`
    checks once that this torch shows them. Forced to say no (as on a torch that hides them), nothing
    is computed by hand and the loss and gradients are autograd's: the by-hand ones to float32 rounding."""
    assert backprop.hooks_visible()  # this torch: the fast path is live
    context, target = batch()
    results = []
    for visible in (True, False):
        if not visible:
            monkeypatch.setattr(backprop, "hooks_visible", lambda: False)
        net, head = parts()
        assert backprop.possible(net, head) is visible
        torch.manual_seed(5)
        nll = backprop.mean_loss_backward(net, head, context, target)
        results.append((nll, [p.grad for p in [*net.parameters(), *head.parameters()]]))
    (nll_hand, grads_hand), (nll_auto, grads_auto) = results
    torch.testing.assert_close(nll_auto, nll_hand, rtol=1e-6, atol=1e-7)
    for a, b in zip(grads_auto, grads_hand):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
