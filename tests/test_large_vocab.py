"""Heads at large vocabularies (issue 28, part 4): no [batch, |V|] tensor in training for the heads
that avoid one, and row-sparse (lazy) updates of the per-word / per-node parameters."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from nplm.heads import HEADS, head_class
from nplm.models.nplm import NPLM, NPLMConfig
from nplm.optimizers import build_optimizer

from conftest import TOY_FAST, build_any_head, head_id, head_overrides, head_variants

B, V, K = 7, 113, 3  # distinct sizes, so a [B, V] tensor is recognisable
COUNTS = [int(1000 / (r + 1)) + 1 for r in range(V)]
# every head's variants, and with `sparse` on too where the head registered that key (row-sparse gradients)
SPARSE = [(name, {**options, "sparse": True}) for name, options in head_variants() if "sparse" in HEADS[name].keys]
EVERY = [pytest.param(name, options, id=head_id(name, options)) for name, options in head_variants() + SPARSE]


class Shapes(TorchDispatchMode):
    """Records the shape of every tensor an op returns (forward, backward and optimizer alike)."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.shapes.append((str(func), tuple(t.shape)))
        return out


def parts(name: str, options: dict, sparse_c: bool = True):
    torch.manual_seed(0)
    model = NPLM(V, NPLMConfig(context_size=K, embed_dim=4, hidden_dim=6, direct=True, sparse_embeddings=sparse_c))
    head = build_any_head(name, options, model.feature_dim, V, COUNTS)
    optimizer = build_optimizer(nn.ModuleList([model, head]), {"name": "adam", "lr": 1e-2})
    return model, head, optimizer


def train_step(model, head, optimizer, context, target):
    optimizer.zero_grad(set_to_none=True)
    head.loss(model(context), target).mean().backward()
    optimizer.step()


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, K), generator=g), torch.randint(0, V, (B,), generator=g)


@pytest.mark.parametrize("name,options", EVERY)
def test_a_batch_by_vocabulary_tensor_in_training_only_where_the_head_says(name, options):
    """A head whose class says `avoids_full_scores` forms no [B, |V|] tensor in a training step (forward,
    backward, Adam); any other does (the full softmax's scores: the check sees them)."""
    model, head, optimizer = parts(name, options)
    context, target = batch()
    train_step(model, head, optimizer, context, target)  # optimizer state made outside the recording
    with Shapes() as seen:
        train_step(model, head, optimizer, *batch(2))
    wide = [(op, shape) for op, shape in seen.shapes if B in shape and V in shape]
    assert seen.shapes  # the mode did see the step
    if head_class(name).avoids_full_scores:
        assert not wide, wide
    else:
        assert any(shape == (B, V) for _, shape in wide), wide


@pytest.mark.parametrize("name,options", [pytest.param(n, o, id=head_id(n, o)) for n, o in SPARSE])
def test_sparse_rows_have_the_dense_gradient(name, options):
    grads = []
    for sparse in (False, True):
        model, head, _ = parts(name, {**options, "sparse": sparse})
        context, target = batch()
        torch.manual_seed(5)  # the same samples for importance sampling
        head.loss(model(context), target).mean().backward()
        grads.append({n: p.grad for n, p in head.named_parameters() if p.grad is not None})
    dense, sparse = grads
    assert dense.keys() == sparse.keys()
    row_sparse = [n for n, g in sparse.items() if g.is_sparse]
    assert row_sparse  # the per-node / per-word tables
    for n in dense:
        got = sparse[n].to_dense() if sparse[n].is_sparse else sparse[n]
        torch.testing.assert_close(got, dense[n])


def test_sparse_rows_update_only_the_batchs_nodes():
    model, head, optimizer = parts("hierarchical", {"node_dim": 4, "node_hidden": 5, "sparse": True,
                                                    "node_init": "random"})  # (beta at 0 would hold N still)
    before = head.N.detach().clone()
    context, target = batch()
    train_step(model, head, optimizer, context, target)
    used = torch.unique(head.path_nodes[target][head.path_mask[target]])
    moved = (head.N.detach() != before).any(1).nonzero().squeeze(1)
    assert torch.equal(moved, used)


@pytest.mark.slow  # a run a head
@pytest.mark.parametrize("name,options", [pytest.param(n, o, id=head_id(n, o)) for n, o in SPARSE])
def test_nplm_train_with_sparse_heads_and_c(run_train, name, options):
    metrics = run_train(*TOY_FAST, "model.sparse_embeddings=true", *head_overrides(name, options))
    assert metrics["test/ppl"] < 30  # 20 toy sentences memorised to some degree in two epochs


# -- an epoch's order at 100 million windows ---------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 4097, 65_537])
def test_keyed_permutation_is_a_bijection(n):
    from nplm.data.windows import KeyedPermutation

    perm = KeyedPermutation(n, torch.Generator().manual_seed(n))
    assert sorted(perm(torch.arange(n)).tolist()) == list(range(n))
    assert perm(torch.arange(n)).tolist() == KeyedPermutation(n, torch.Generator().manual_seed(n))(torch.arange(n)).tolist()


def test_large_epochs_are_shuffled_batch_by_batch(monkeypatch):
    """Above LAZY_SHUFFLE windows the order is a KeyedPermutation: every window once, reproducible
    from seed and epoch, another order each epoch, disjoint shards across ranks."""
    from nplm.data import windows

    monkeypatch.setattr(windows, "LAZY_SHUFFLE", 1000)
    n = 5003
    sampler = windows.BatchIndices(n, 64, shuffle=True, seed=7)
    epoch0 = torch.cat(list(sampler))
    assert sorted(epoch0.tolist()) == list(range(n)) and len(list(sampler)) == len(sampler)
    assert not torch.equal(epoch0, torch.arange(n))
    assert torch.equal(epoch0, torch.cat(list(windows.BatchIndices(n, 64, shuffle=True, seed=7))))
    sampler.set_epoch(1)
    assert not torch.equal(epoch0, torch.cat(list(sampler)))
    shards = [torch.cat(list(windows.BatchIndices(n, 64, True, seed=1, rank=r, world_size=2))) for r in (0, 1)]
    assert not set(shards[0].tolist()) & set(shards[1].tolist())
    assert len(shards[0]) == len(shards[1])
    grouped = list(windows.GroupedBatches(windows.BatchIndices(n, 64, True, seed=7), 16, limit=50))
    assert [len(g) for g in grouped] == [16, 16, 16, 2]
    assert torch.equal(torch.cat([b for g in grouped for b in g]), epoch0[: 50 * 64])


def test_two_queue_huffman_merges_as_a_heap_does():
    """huffman_merges (two queues, one sort) against the heap it replaced: the same merges, ties
    included (items before merged nodes, merged nodes by creation)."""
    import heapq
    import random

    from nplm.trees.huffman import huffman_merges

    def heap_merges(items, weights, first_code):
        heap = [(float(w), order, item) for order, (item, w) in enumerate(zip(items, weights))]
        heapq.heapify(heap)
        merges, tiebreak = [], len(heap)
        while len(heap) > 1:
            w1, _, a = heapq.heappop(heap)
            w2, _, b = heapq.heappop(heap)
            merges.append((a, b))
            heapq.heappush(heap, (w1 + w2, tiebreak, first_code + len(merges) - 1))
            tiebreak += 1
        return merges, heap[0][2]

    for trial in range(200):
        rng = random.Random(trial)
        n = rng.randint(1, 50)
        items = rng.sample(range(1000), n)
        weights = ([rng.choice([0, 1, 2, 3, 0.5]) for _ in range(n)] if trial % 2 else [rng.random() for _ in range(n)])
        assert huffman_merges(items, weights, 1000) == heap_merges(items, weights, 1000)
