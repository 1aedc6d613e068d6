"""Gradient clipping of row-sparse gradients (`model.sparse_embeddings`): exactly the clipping of the same
gradients made dense, and a run that asks for both trains."""

from __future__ import annotations

import pytest
import torch

from conftest import TOY_FAST
from nplm.training.clipping import clip_gradients


def _params(sparse: bool) -> list[torch.nn.Parameter]:
    """A table whose gradient has rows 1 and 3 (row 3 twice, uncoalesced) and a dense weight."""
    torch.manual_seed(0)
    table, weight = torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(4))
    rows, values = torch.tensor([[1, 3, 3]]), torch.randn(3, 3) * 4  # [3, 3]
    grad = torch.sparse_coo_tensor(rows, values, (5, 3), check_invariants=True)
    table.grad = grad if sparse else grad.to_dense()
    weight.grad = torch.randn(4) * 4
    return [table, weight]


@pytest.mark.parametrize("algorithm,clip", [("norm", 1.0), ("norm", 1e3), ("value", 0.5)])
def test_sparse_gradients_are_clipped_as_their_dense_form(algorithm, clip):
    sparse, dense = _params(sparse=True), _params(sparse=False)
    clip_gradients(sparse, clip, algorithm)
    clip_gradients(dense, clip, algorithm)
    assert sparse[0].grad.is_sparse
    for s, d in zip(sparse, dense):
        torch.testing.assert_close(s.grad.to_dense(), d.grad)
    if algorithm == "norm" and clip == 1.0:  # clipped: the global norm is now the bound
        norm = torch.linalg.vector_norm(torch.cat([p.grad.to_dense().flatten() for p in sparse]))
        assert norm.item() == pytest.approx(1.0, rel=1e-5)


def test_sparse_embeddings_with_gradient_clipping_train(run_train):
    metrics = run_train(*TOY_FAST, "model.sparse_embeddings=true", "trainer.gradient_clip_val=1.0",
                        "trainer.max_epochs=1")
    assert metrics["val/ppl"] < 40  # toy's |V| is 40ish: trained, not diverged
