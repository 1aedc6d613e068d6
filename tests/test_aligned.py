"""nplm.fast.aligned: linear layers padded to widths of a multiple of 8 (on a GPU) give F.linear's numbers,
values and gradients; a feed-forward block that keeps the hidden padding gives the unpadded block's."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from nplm.fast import aligned


@pytest.fixture
def padded_on_the_cpu(monkeypatch):
    """`aligned.linear` pads on the CPU too (as on a GPU)."""
    monkeypatch.setattr(aligned, "PADDED_DEVICES", {"cpu", "cuda"})


def tensors(*shapes, dtype=torch.float64):
    torch.manual_seed(0)
    return [torch.randn(*s, dtype=dtype, requires_grad=True) for s in shapes]


@pytest.mark.parametrize("rows,in_f,out_f", [(7, 410, 21), (3, 16, 13), (5, 13, 16), (4, 8, 8)])
def test_the_padded_linear_gives_f_linear_values_and_gradients(padded_on_the_cpu, rows, in_f, out_f):
    x, w, b = tensors((2, rows, in_f), (out_f, in_f), (out_f,))
    got = aligned.linear(x, w, b)
    want = F.linear(x, w, b)
    assert got.shape == want.shape == (2, rows, out_f)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad((got * g).sum(), (x, w, b)),
                               torch.autograd.grad((want * g).sum(), (x, w, b)), rtol=1e-12, atol=1e-12)


def test_keep_padding_adds_zero_columns_a_following_linear_takes(padded_on_the_cpu):
    """The feed-forward block of the modern NPLM: W2 relu(W1 x + b1) + b2 with the hidden padded once."""
    x, w1, b1, w2, b2 = tensors((6, 410), (2100, 410), (2100,), (410, 2100), (410,))
    hidden = torch.relu(aligned.linear(x, w1, b1, keep_padding=True))
    assert hidden.shape == (6, 2104) and hidden[:, 2100:].abs().max().item() == 0.0
    got = aligned.linear(hidden, w2, b2)
    want = F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), (x, w1, b1, w2, b2)),
                               torch.autograd.grad(want.sum(), (x, w1, b1, w2, b2)), rtol=1e-12, atol=1e-12)


def test_under_autocast_the_padded_copy_is_the_half_precision_one(padded_on_the_cpu):
    x, w, b = tensors((5, 410), (21, 410), (21,), dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = aligned.linear(x, w, b)
        want = F.linear(x, w, b)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)


def test_on_a_cpu_it_is_f_linear_itself():
    x, w = tensors((3, 410), (21, 410))
    assert not aligned.enabled(x)
    assert aligned.linear(x, w).shape == (3, 21) and aligned.linear(x, w, keep_padding=True).shape == (3, 21)


def test_the_modern_nplm_and_the_tied_adaptive_head_train_the_same_padded(monkeypatch):
    """The WikiText-103 recipe's misaligned widths (d 410 -> hidden 2100; the shortlist) at toy size: d 10,
    hidden 21, a shortlist of 5 + 2 rows: the loss and every gradient equal with the padding forced on."""
    from nplm.data.vocabulary import Vocabulary
    from nplm.training.module import LanguageModel

    V = 30
    model = {"name": "modern", "context_size": 6, "window": 2, "summaries": 2, "embed_dim": 10, "hidden_dim": 21,
             "first_hidden_dim": 13, "num_layers": 2, "dropout": 0.0, "residual": True, "layer_norm": True,
             "tie_embeddings": True}
    vocab = Vocabulary([f"w{i}" for i in range(V)], [300 // (r + 1) + 1 for r in range(V)], unk=None)
    torch.manual_seed(0)
    lm = LanguageModel(model, {"name": "adaptive", "cutoffs": [5, 15], "div_value": 1.0}, {"name": "adam", "lr": 1e-3},
                       vocab).double()
    ids = torch.randint(0, V, (3, 4 + 6))
    target = ids[:, 6:]

    def loss_and_grads():
        lm.zero_grad()
        loss = lm._train_loss(ids, target).mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in lm.parameters()]

    plain = loss_and_grads()
    monkeypatch.setattr(aligned, "PADDED_DEVICES", {"cpu", "cuda"})
    pads, pad = [], F.pad
    monkeypatch.setattr(F, "pad", lambda t, *a, **k: pads.append(tuple(t.shape)) or pad(t, *a, **k))
    padded = loss_and_grads()
    assert (13, 40) in pads and (21, 10) in pads, pads  # the first block's W_1 (13 -> 16), the next one's (21 -> 24)
    torch.testing.assert_close(padded, plain, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_under_bf16_autocast_the_padded_linear_is_f_linear():
    x, w, b = [t.detach().cuda().requires_grad_() for t in tensors((64, 410), (2100, 410), (2100,), dtype=torch.float32)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = aligned.linear(x, w, b)
        want = F.linear(x, w, b)
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_the_flops_counted_for_mfu_leave_the_padding_out(monkeypatch):
    """A step's FLOPs (nplm.training.flops) are the model's: the same with the padding on as off."""
    from nplm.training.flops import count_step_flops

    x, w1, w2 = tensors((6, 410), (2100, 410), (410, 2100))
    model = torch.nn.Sequential(torch.nn.Linear(410, 2100), torch.nn.ReLU(), torch.nn.Linear(2100, 410))

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(21, 410))

        def loss(self, features, target):
            return aligned.linear(features, self.w).logsumexp(-1)  # [B]

    plain = count_step_flops(model, Head(), torch.randn(6, 410), torch.zeros(6, dtype=torch.long))
    monkeypatch.setattr(aligned, "PADDED_DEVICES", {"cpu", "cuda"})
    assert aligned.enabled(x)
    padded = count_step_flops(model, Head(), torch.randn(6, 410), torch.zeros(6, dtype=torch.long))
    assert padded == plain > 0
