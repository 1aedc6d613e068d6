"""Recursive 2-way clustering of word vectors into a binary tree (Mnih & Hinton 2009, section 4).

Mnih & Hinton, "A Scalable Hierarchical Distributed Language Model" (NIPS 2009), build their tree
top-down: split the words in two by fitting a two-component mixture to their feature vectors, then
split each part again, until every part is one word. Here each split is 2-means (the hard,
equal-variance limit of their spherical Gaussian mixture): start from the sign of the projection
on the top principal direction (power iteration from a seeded start vector, so runs repeat), then
Lloyd iterations. A split that leaves one side empty (e.g. identical vectors) falls back to halves
along that direction, so every split is non-empty. `balanced=True` is their BALANCED variant:
rank by the 2-means score and cut at the median (with weights, the weighted median: `tree=wordnet`
cuts a node's children so that each side holds about half the words). Mnih & Hinton's own
Gaussian-mixture splits, with several codes per word, are `mixture_tree`.
"""

from __future__ import annotations

import numpy as np

from nplm.trees.assemble import from_splits
from nplm.trees.tree import Tree

POWER_ITERATIONS = 12


def two_means(X: np.ndarray, start: np.ndarray, iterations: int = 20, balanced: bool = False,
              weights: np.ndarray | None = None) -> np.ndarray:
    """Split the rows of X [n, m] (n >= 2) in two; returns right [n] bool with both sides non-empty.
    `balanced` with `weights` [n]: the cut along the 2-means score is at the weighted median (each side
    gets about half the total weight, e.g. half the words under a node's children)."""
    n = len(X)
    if n == 2:
        return np.array([False, True])
    Xc = X - X.mean(0)  # [n, m]
    v = start.copy()  # [m]
    for _ in range(POWER_ITERATIONS):
        v = Xc.T @ (Xc @ v)
        norm = np.linalg.norm(v)
        if norm < 1e-12:  # all vectors equal: no direction to split along
            v = np.zeros_like(v)
            break
        v /= norm
    score = Xc @ v  # [n] projection on the top principal direction
    right = score > 0
    for _ in range(iterations):
        if right.all() or not right.any():
            break
        c1, c0 = X[right].mean(0), X[~right].mean(0)  # [m] the two centroids
        score = X @ (c1 - c0) - 0.5 * (c1 @ c1 - c0 @ c0)  # [n] > 0: nearer to c1
        new = score > 0
        if np.array_equal(new, right):
            break
        right = new
    if balanced or right.all() or not right.any():
        order = np.argsort(-score, kind="stable")  # [n] most "right" first
        right = np.zeros(n, dtype=bool)
        if weights is None:
            right[order[: n // 2]] = True
        else:  # the shortest prefix holding half the weight, leaving at least one row on the left
            cum = np.cumsum(np.asarray(weights, dtype=np.float64)[order])
            cut = min(max(1, int(np.searchsorted(cum, cum[-1] / 2)) + 1), n - 1)
            if cut > 1 and abs(cum[cut - 2] - cum[-1] / 2) <= abs(cum[cut - 1] - cum[-1] / 2):
                cut -= 1  # the prefix one shorter is as close to half
            right[order[:cut]] = True
    return right


class TwoMeansSplit:
    """`split(items) -> (left, right)` for `assemble.from_splits`: 2-means on `vectors[items]`."""

    def __init__(self, vectors: np.ndarray, seed: int = 0, iterations: int = 20, balanced: bool = False,
                 weights: np.ndarray | None = None):
        self.vectors = np.asarray(vectors, dtype=np.float64)  # [N, m]
        self.start = np.random.default_rng(seed).standard_normal(self.vectors.shape[1])  # [m]
        self.iterations, self.balanced = iterations, balanced
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)  # [N]

    def __call__(self, items: list[int]) -> tuple[list[int], list[int]]:
        weights = None if self.weights is None else self.weights[items]
        right = two_means(self.vectors[items], self.start, self.iterations, self.balanced, weights)
        return ([i for i, r in zip(items, right) if not r], [i for i, r in zip(items, right) if r])


def cluster_tree(vectors, seed: int = 0, iterations: int = 20, balanced: bool = False) -> Tree:
    """The tree over words 0..V-1 of recursive 2-means on `vectors` [V, m]."""
    vectors = np.asarray(vectors, dtype=np.float64)
    V = len(vectors)
    return from_splits(list(range(V)), V, TwoMeansSplit(vectors, seed, iterations, balanced))
