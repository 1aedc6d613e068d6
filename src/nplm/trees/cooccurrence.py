"""Word vectors from training co-occurrence counts: a truncated SVD of a PPMI word-by-context matrix.

Used where a tree builder needs word vectors but no trained model exists yet (`tree=wordnet`
without `ctx.embeddings`; the tree benchmark's stand-in for `tree=learned`). Each word is described
by how often each of the `contexts` most frequent words occurs immediately left of it and
immediately right of it (2 * contexts columns, the distributional signature Brown et al. 1992 and
Schuetze 1993 cluster on), reweighted by positive pointwise mutual information (Church & Hanks
1990) and reduced to `dim` dimensions by a randomised truncated SVD (Halko et al. 2011; seeded).
Rows are U * sqrt(S); words that never occur get zero vectors.
"""

from __future__ import annotations

import numpy as np
import torch


def context_vectors(ids, V: int, dim: int = 50, contexts: int = 2000, seed: int = 0) -> np.ndarray:
    """[V, dim'] float64 vectors (dim' = min(dim, V, 2 * contexts)) from the id stream `ids` [N]."""
    ids = np.asarray(ids, dtype=np.int64)  # [N]
    counts = np.bincount(ids, minlength=V)  # [V]
    K = min(int(contexts), V)
    rank = np.full(V, -1)
    rank[np.argsort(-counts, kind="stable")[:K]] = np.arange(K)  # context column of each top word
    words = np.concatenate([ids[1:], ids[:-1]])  # [2(N-1)] the word described ...
    cols = np.concatenate([rank[ids[:-1]], K + rank[ids[1:]]])  # ... by its left, then right neighbour
    keep = cols >= 0
    keys, n = np.unique(words[keep] * (2 * K) + cols[keep], return_counts=True)
    rows, cols = keys // (2 * K), keys % (2 * K)
    n = n.astype(np.float64)
    row_tot = np.bincount(rows, weights=n, minlength=V)  # [V]
    col_tot = np.bincount(cols, weights=n, minlength=2 * K)  # [2K]
    ppmi = np.maximum(np.log(n * n.sum() / (row_tot[rows] * col_tot[cols])), 0.0)
    A = torch.sparse_coo_tensor(torch.from_numpy(np.stack([rows, cols])), torch.from_numpy(ppmi),
                                (V, 2 * K), is_coalesced=True, check_invariants=True)  # [V, 2K]
    q = max(1, min(int(dim), V, 2 * K))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        U, S, _ = torch.svd_lowrank(A, q=q, niter=4)  # U [V, q], S [q]
    return (U * S.sqrt()).numpy()
