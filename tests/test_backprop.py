"""Backpropagation by hand (nplm.fast.backprop): the gradients autograd computes, and nplm-train uses it only
where it holds."""

from __future__ import annotations

import pytest
import torch

from conftest import TOY_FAST
from nplm.fast import backprop
from nplm.heads import build_head
from nplm.models import NPLM, NPLMConfig

V, B = 29, 24


def parts(**model):
    torch.manual_seed(0)
    cfg = NPLMConfig.from_dict({"context_size": 3, "embed_dim": 5, "hidden_dim": 7, **model})
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


def run_metrics(run_train, monkeypatch, by_hand: bool, *overrides) -> dict:
    if not by_hand:
        monkeypatch.setattr(backprop, "possible", lambda model, head: False)
    used = {}
    real = backprop.train_loss

    def spy(*args):
        used["by_hand"] = True
        return real(*args)

    monkeypatch.setattr(backprop, "train_loss", spy)
    metrics = run_train(*TOY_FAST, *overrides)
    assert used.get("by_hand", False) is by_hand
    return metrics


@pytest.mark.parametrize("overrides", [(), ("model.dropout=0.2", "trainer.accumulate_grad_batches=2")])
def test_nplm_train_gives_the_autograd_runs_perplexities(run_train, monkeypatch, overrides):
    """Two epochs on the toy corpus by hand and through autograd: the same perplexities."""
    hand = run_metrics(run_train, monkeypatch, True, *overrides)
    auto = run_metrics(run_train, monkeypatch, False, *overrides)
    for key in ("train/ppl", "val/ppl", "test/ppl"):
        assert hand[key] == pytest.approx(auto[key], rel=1e-4), key
    assert 1.5 < hand["val/ppl"] < 40


def test_nplm_train_uses_autograd_for_other_heads_and_compile(run_train, monkeypatch):
    run_metrics(run_train, monkeypatch, False, "head=hierarchical", "tree=balanced")


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
