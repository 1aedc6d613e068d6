"""The softmax head's CPU fast path (nplm.fast.cpu_gemm, LinearSoftmaxNLL) and nplm.fast.malloc: the same
numbers as torch's own addmm / autograd, to float32 rounding."""

import importlib
import platform
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import TOY_FAST, compose_cfg
from nplm.fast import cpu_gemm
from nplm.heads import build_head
from nplm.fast.cpu_gemm import ONEDNN_MIN_OUTPUTS, WEIGHT_GRAD_BLOCK, linear, weight_grad
from nplm.fast.malloc import keep_freed_memory


def test_linear_equals_addmm_below_and_above_the_onednn_size():
    torch.manual_seed(0)
    for vocab in (65, ONEDNN_MIN_OUTPUTS + 5):
        f, w, b = torch.randn(32, 40), torch.randn(vocab, 40), torch.randn(vocab)
        torch.testing.assert_close(linear(f, w, b), torch.addmm(b, f, w.t()), rtol=1e-5, atol=1e-4)


def test_weight_grad_in_row_blocks_equals_one_matmul():
    torch.manual_seed(0)
    g, f = torch.randn(16, 2 * WEIGHT_GRAD_BLOCK + 7), torch.randn(16, 30)
    torch.testing.assert_close(weight_grad(g, f), g.t() @ f, rtol=1e-5, atol=1e-5)


def test_softmax_head_cpu_path_gives_autograd_nll_and_gradients():
    """LinearSoftmaxNLL (float32, CPU, vocabulary above both thresholds) against F.linear +
    F.cross_entropy in float64, with a mixed-sign upstream gradient."""
    torch.manual_seed(0)
    vocab, dim = ONEDNN_MIN_OUTPUTS + 3, 24
    head = build_head({"name": "softmax"}, dim, vocab)
    features, target = torch.randn(12, dim, requires_grad=True), torch.randint(0, vocab, (12,))
    upstream = torch.randn(12)
    nll = head.nll(features, target)
    assert nll.grad_fn.name() == "LinearSoftmaxNLLBackward"
    (nll * upstream).sum().backward()
    ref_f = features.detach().double().requires_grad_()
    ref_w = head.out.weight.detach().double().requires_grad_()
    ref_b = head.out.bias.detach().double().requires_grad_()
    ref = F.cross_entropy(F.linear(ref_f, ref_w, ref_b), target, reduction="none")
    (ref * upstream.double()).sum().backward()
    torch.testing.assert_close(nll.detach().double(), ref.detach(), rtol=1e-5, atol=1e-5)
    for ours, theirs in ((features.grad, ref_f.grad), (head.out.weight.grad, ref_w.grad), (head.out.bias.grad, ref_b.grad)):
        torch.testing.assert_close(ours.double(), theirs, rtol=1e-4, atol=1e-6)
    with torch.no_grad():  # evaluation: the full distribution through the same fast linear
        torch.testing.assert_close(head.log_probs(features).gather(1, target[:, None]).squeeze(1), -nll.detach(),
                                   rtol=1e-5, atol=1e-5)


def test_keep_freed_memory_takes_effect_on_linux_glibc_only():
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is glibc


def _head_step(vocab: int) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """The softmax head's NLL, its gradients (features, W, b) and its full distribution, float32 CPU."""
    torch.manual_seed(0)
    head = build_head({"name": "softmax"}, 24, vocab)
    features, target = torch.randn(12, 24, requires_grad=True), torch.randint(0, vocab, (12,))
    nll = head.nll(features, target)
    nll.sum().backward()
    with torch.no_grad():
        log_p = head.log_probs(features)
    return nll.detach(), [features.grad, head.out.weight.grad, head.out.bias.grad], log_p


def test_without_onednn_linear_the_head_gives_the_same_numbers(monkeypatch):
    """`torch.ops.mkldnn._linear_pointwise` is private: `onednn_linear_works` checks it once, and where
    it says no (forced here) `linear` is torch.addmm itself, and the head trains to the same numbers up
    to float32 rounding."""
    if not cpu_gemm.onednn_linear_works():
        pytest.skip("no oneDNN linear in this torch: the fallback is what runs everywhere here")
    vocab = ONEDNN_MIN_OUTPUTS + 3
    fast = _head_step(vocab)
    monkeypatch.setattr(cpu_gemm, "onednn_linear_works", lambda: False)
    f, w, b = torch.randn(5, 24), torch.randn(vocab, 24), torch.randn(vocab)
    assert torch.equal(linear(f, w, b), torch.addmm(b, f, w.t()))
    plain = _head_step(vocab)
    torch.testing.assert_close(plain[0], fast[0], rtol=1e-6, atol=1e-5)
    for a, b in zip(plain[1], fast[1]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(plain[2], fast[2], rtol=1e-6, atol=1e-5)


def test_nplm_train_changes_malloc_only_when_asked(tmp_path, monkeypatch):
    """`keep_freed_memory` changes malloc for the whole process: nplm-train calls it only with
    malloc_keep_freed=true."""
    process = importlib.import_module("nplm.training.process")
    train = importlib.import_module("nplm.training.train").train
    calls = []
    monkeypatch.setattr(process, "keep_freed_memory", lambda: calls.append(1) or True)
    train(compose_cfg(tmp_path / "a", *TOY_FAST, "trainer.max_epochs=1"))
    assert calls == []
    train(compose_cfg(tmp_path / "b", *TOY_FAST, "trainer.max_epochs=1", "malloc_keep_freed=true"))
    assert calls == [1]
