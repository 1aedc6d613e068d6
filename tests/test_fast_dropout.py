"""nplm.fast.dropout: the CPU mask from 16 random bits an element, against nn.functional.dropout."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nplm.fast import dropout as fast
from nplm.models.modern import ModernConfig, ModernNPLM


def test_the_cpu_mask_drops_p_of_the_elements_and_keeps_the_expectation():
    torch.manual_seed(0)
    x = torch.ones(1000, 1003, requires_grad=True)  # 1,003,000 elements, not a multiple of 4
    y = fast.dropout(x, 0.2, training=True)
    q = round(0.2 * 2**16)  # 13,107
    keep = 2**16 / (2**16 - q)
    dropped = (y == 0).float().mean().item()
    assert dropped == pytest.approx(q / 2**16, abs=0.002)  # 0.1999969; the binomial's sd is 0.0004
    assert y.unique().tolist() == [0.0, pytest.approx(keep, rel=1e-7)]
    assert y.mean().item() == pytest.approx(1.0, abs=0.003)
    # its backward is the same mask: d(sum(y * w))/dx = mask * w
    w = torch.randn_like(x)
    (y * w).sum().backward()
    assert torch.equal(x.grad, y.detach() * w)


def test_each_of_the_four_elements_a_draw_decides_is_dropped_alone():
    """The four 16-bit parts of a 64-bit draw are independent: no position within 4 drops more than p."""
    torch.manual_seed(1)
    y = fast.dropout(torch.ones(250_000, 4), 0.5, training=True)
    rates = (y == 0).float().mean(0)  # [4]: one rate per position within a draw
    assert rates.tolist() == pytest.approx([0.5] * 4, abs=0.004)
    both = ((y[:, 0] == 0) & (y[:, 3] == 0)).float().mean().item()
    assert both == pytest.approx(0.25, abs=0.003)


def test_the_same_seed_draws_the_same_mask():
    x = torch.randn(3, 5, 7)
    torch.manual_seed(5)
    a = fast.dropout(x, 0.3, training=True)
    torch.manual_seed(5)
    assert torch.equal(fast.dropout(x, 0.3, training=True), a)


@pytest.mark.parametrize("p,training,device", [(0.2, False, "cpu"), (0.0, True, "cpu"), (0.999999, True, "cpu"),
                                                (0.2, True, "meta")])
def test_where_it_does_not_apply_it_is_torchs_dropout(p, training, device):
    x = torch.randn(64, 33, device=device)
    assert not fast.applies(x, p, training)
    if device == "meta":
        assert fast.dropout(x, p, training).shape == x.shape
        return
    torch.manual_seed(7)
    ours = fast.dropout(x, p, training)
    torch.manual_seed(7)
    assert torch.equal(ours, nn.functional.dropout(x, p, training))


def test_under_torch_compile_it_is_torchs_dropout():
    """Inductor draws its own random numbers: the compiled graph holds aten's dropout, no custom function."""
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    module = fast.Dropout(0.2).train()
    torch.compile(module, backend=backend, fullgraph=True)(torch.randn(8, 16))
    code = graphs[0].code
    assert "dropout" in code and "_MaskedScale" not in code and "random_" not in code


def test_the_modern_nplm_drops_out_with_it():
    cfg = ModernConfig(context_size=8, window=4, summaries=2, embed_dim=16, hidden_dim=32, num_layers=2, dropout=0.2)
    torch.manual_seed(0)
    model = ModernNPLM(11, cfg)
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert len(dropouts) == 3 and all(isinstance(m, fast.Dropout) for m in dropouts)
    context = torch.randint(0, 11, (32, 8))
    model.train()
    torch.manual_seed(3)
    a = model.features_from_embeddings(model.embed(context))
    torch.manual_seed(3)
    assert torch.equal(model.features_from_embeddings(model.embed(context)), a)  # seeded
    model.eval()
    assert not torch.allclose(model.features_from_embeddings(model.embed(context)), a)  # training dropped out
