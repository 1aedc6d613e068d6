"""Trees from recursive two-component Gaussian mixtures (Mnih & Hinton 2009, section 4).

Mnih & Hinton, "A Scalable Hierarchical Distributed Language Model" (NIPS 2009), build the tree top
down: fit a mixture of two Gaussians to the words' feature vectors by EM, split the words by their
responsibilities, and split each part again until every part is one word. Covariances here are
spherical, one variance per component (sigma_k^2 I, our reading of the paper; its hard limit is
2-means), and every word counts once (not weighted by frequency). Split rules, with r(w) the
responsibility of component 1 for word w:

- BALANCED: the half of the words with the largest r(w) go right (the split is at the median);
- ADAPTIVE: words with r(w) > 0.5 go right, the others left;
- ADAPTIVE(eps): words with r(w) > 0.5 - eps go right, words with r(w) < 0.5 + eps go left, so a
  word with |r(w) - 0.5| < eps goes into both subtrees and gets several codes (leaves).

A split that would leave a side empty, or put every word on one side (so the recursion makes no
progress), falls back to ADAPTIVE and then BALANCED, so every side is non-empty and smaller than the
set. EM starts from two distinct words drawn with the run's seed as the means and the set's variance.

`runs` > 1 (their x2, x4) fits the recursion k times with different seeds and joins the k trees under
a balanced top of k - 1 nodes; each word then has (at least) one code in every tree, and
P(w | ctx) = sum_r P(tree r | ctx) P_r(w | ctx): a context-dependent mixture of k normalised trees,
itself normalised over the words.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from nplm.trees.tree import Tree, balanced_nested

SPLITS = ("balanced", "adaptive")
VAR_FLOOR = 1e-6  # relative to the set's variance: keeps EM away from a collapsed component


def em_responsibilities(X: np.ndarray, rng: np.random.Generator, iterations: int = 30) -> np.ndarray:
    """EM for a two-component spherical Gaussian mixture on X [n, d] (n >= 2): the log-odds
    log r1 - log r0 [n] of component 1 for each row after `iterations` steps (or convergence)."""
    n, d = X.shape
    total_var = max(float(X.var(0).sum()) / d, 1e-12)
    i, j = rng.choice(n, 2, replace=False)
    mu = np.stack([X[i], X[j]])  # [2, d]
    var = np.full(2, total_var)  # [2]
    log_pi = np.log(np.full(2, 0.5))
    sq = (X * X).sum(1)  # [n]
    log_odds = np.zeros(n)
    for _ in range(iterations):
        dist = sq[:, None] - 2 * X @ mu.T + (mu * mu).sum(1)[None]  # [n, 2] squared distances
        log_p = log_pi - 0.5 * d * np.log(2 * np.pi * var) - 0.5 * np.maximum(dist, 0) / var  # [n, 2]
        new = log_p[:, 1] - log_p[:, 0]
        r1 = 1 / (1 + np.exp(-np.clip(new, -500, 500)))  # [n]
        r = np.stack([1 - r1, r1], 1)  # [n, 2]
        mass = np.maximum(r.sum(0), 1e-12)  # [2]
        mu = (r.T @ X) / mass[:, None]
        dist = sq[:, None] - 2 * X @ mu.T + (mu * mu).sum(1)[None]
        var = np.maximum((r * np.maximum(dist, 0)).sum(0) / (d * mass), VAR_FLOOR * total_var)
        log_pi = np.log(mass / n)
        if np.allclose(new, log_odds, atol=1e-9):
            break
        log_odds = new
    return new


def split_by_responsibility(log_odds: np.ndarray, split: str, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(left [n] bool, right [n] bool) for one set, per the module docstring's rules."""
    n = len(log_odds)
    if split == "adaptive":
        r1 = 1 / (1 + np.exp(-np.clip(log_odds, -500, 500)))
        if eps > 0:
            left, right = r1 < 0.5 + eps, r1 > 0.5 - eps
            if left.any() and right.any() and not left.all() and not right.all():
                return left, right
        right = r1 > 0.5
        if right.any() and not right.all():
            return ~right, right
    order = np.argsort(-log_odds, kind="stable")  # BALANCED (and the fall-back): the top half goes right
    right = np.zeros(n, dtype=bool)
    right[order[: n // 2]] = True
    return ~right, right


def mixture_splits(vectors: np.ndarray, seed: int, split: str = "adaptive", eps: float = 0.0,
                   iterations: int = 30) -> tuple[list[tuple[int, int]], list[int]]:
    """One run of the recursion over words 0..V-1 (vectors [V, d]): (children, leaf_words), numbered
    breadth-first as `Tree` requires (a child c < 0 is the leaf -1 - c, whose word is leaf_words[-1 - c])."""
    rng = np.random.default_rng(seed)
    X = np.asarray(vectors, dtype=np.float64)
    children: list[tuple[int, int]] = []
    leaf_words: list[int] = []
    queue: deque[np.ndarray] = deque([np.arange(len(X))])
    while queue:
        part = queue.popleft()
        if len(part) == 2:
            sides = [part[:1], part[1:]]
        else:
            left, right = split_by_responsibility(em_responsibilities(X[part], rng, iterations), split, eps)
            sides = [part[left], part[right]]
        pair = []
        for side in sides:
            if len(side) == 1:
                pair.append(-1 - len(leaf_words))
                leaf_words.append(int(side[0]))
            else:
                pair.append(len(children) + len(queue) + 1)
                queue.append(side)
        children.append((pair[0], pair[1]))
    return children, leaf_words


def join_runs(runs: list[tuple[list[tuple[int, int]], list[int]]]) -> tuple[list[tuple[int, int]], list[int]]:
    """The trees of several runs under a balanced top of len(runs) - 1 nodes, renumbered breadth-first."""
    if len(runs) == 1:
        return runs[0]
    offsets = np.cumsum([0] + [len(words) for _, words in runs]).tolist()
    children: list[tuple[int, int]] = []
    queue: deque = deque([("top", balanced_nested(list(range(len(runs)))))])
    while queue:
        item = queue.popleft()
        kids = ([("top", c) if isinstance(c, tuple) else ("run", c, 0) for c in item[1]] if item[0] == "top"
                else [("run", item[1], c) if c >= 0 else ("leaf", offsets[item[1]] + (-1 - c))
                      for c in runs[item[1]][0][item[2]]])
        pair = []
        for kid in kids:
            if kid[0] == "leaf":
                pair.append(-1 - kid[1])
            else:
                pair.append(len(children) + len(queue) + 1)
                queue.append(kid)
        children.append((pair[0], pair[1]))
    return children, [w for _, words in runs for w in words]


def mixture_tree(vectors: np.ndarray, seed: int = 0, split: str = "adaptive", eps: float = 0.0, runs: int = 1,
                 iterations: int = 30) -> Tree:
    """The (possibly multi-code) tree over words 0..V-1 of `runs` recursions on `vectors` [V, d], run r
    seeded with seed + r. A tree with one code per word comes back as a plain tree (leaf w = word w)."""
    V = len(vectors)
    children, leaf_words = join_runs([mixture_splits(vectors, seed + r, split, eps, iterations) for r in range(runs)])
    if len(leaf_words) == V:  # one code per word: leaves renamed to their words
        children = [tuple(c if c >= 0 else -1 - leaf_words[-1 - c] for c in pair) for pair in children]
        return Tree(children, V)
    return Tree(children, V, leaf_words=leaf_words)
