"""`tree=random`: recursive halves of a seeded random permutation of the vocabulary.

The baseline of Mnih & Hinton (2009), "A Scalable Hierarchical Distributed Language Model"
(section 5, the RANDOM tree): a balanced binary tree whose word-to-leaf assignment carries no
information, so any gain of a better tree over it is due to the tree.
"""

from __future__ import annotations

import torch

from nplm.config.rules import Int
from nplm.trees import register_tree
from nplm.trees.tree import Tree, balanced_nested


@register_tree("random", cached=True, keys={"seed": Int(0, 2**32 - 1, nullable=True, doc="the builder's seed (null: the run's seed)")})
def build(ctx, seed: int | None = None) -> Tree:
    """`seed`: the permutation's seed; null uses the run's seed (`ctx.seed`)."""
    V = len(ctx.vocab.tokens)
    generator = torch.Generator().manual_seed(int(ctx.seed if seed is None else seed))
    order = torch.randperm(V, generator=generator).tolist()  # [V] word ids in leaf order
    return Tree.from_nested(balanced_nested(order), V)  # depth ceil(log2 V): no recursion limit issue
