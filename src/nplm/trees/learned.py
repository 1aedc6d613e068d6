"""`tree=learned`: recursive 2-means of learned word representations (Mnih & Hinton 2009).

Mnih & Hinton, "A Scalable Hierarchical Distributed Language Model" (NIPS 2009): train a model
with a random tree first, then build the tree by recursively splitting the words in two according
to their learned feature vectors, and train again with it. This module does the middle step: the
vectors come in as `ctx.embeddings` [V, m] from the first training phase (see `clustering` for the
split rule).
"""

from __future__ import annotations

import numpy as np

from nplm.errors import UserError
from nplm.trees.clustering import cluster_tree
from nplm.trees.tree import Tree


def build(ctx, balanced: bool = False, normalize: bool = False, iterations: int = 20, seed: int | None = None) -> Tree:
    """`balanced`: cut each split at the median (their BALANCED tree) instead of plain 2-means;
    `normalize`: scale vectors to unit length first (cluster by direction, not frequency-driven norm);
    `iterations`: Lloyd iterations per split; `seed`: the power iteration's start (null: ctx.seed)."""
    if ctx.embeddings is None:
        raise UserError("tree=learned needs word vectors from a first training phase (ctx.embeddings is None); "
                        "train once with tree=random and build the learned tree from that model's embeddings")
    V = len(ctx.vocab.tokens)
    vectors = ctx.embeddings.detach().double().cpu().numpy()  # [V, m]
    if vectors.ndim != 2 or len(vectors) != V:
        raise UserError(f"tree=learned got word vectors of shape {tuple(vectors.shape)}; it needs [{V}, m], "
                        "one row per vocabulary word, from a model trained on this corpus")
    if normalize:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return cluster_tree(vectors, ctx.seed if seed is None else seed, iterations, balanced)
