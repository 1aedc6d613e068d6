"""`tree=huffman`: the Huffman (1952) code tree of the training unigram counts.

Huffman, "A Method for the Construction of Minimum-Redundancy Codes" (Proc. IRE, 1952): merging the
two lightest nodes until one is left gives the binary tree of minimal expected depth under the
unigram distribution, within one bit of its entropy (what word2vec and fastText use for their
hierarchical softmax). Frequent words get short paths, so a training step costs fewer node scores
on average. Ties are broken by word id, then by merge order, so the tree is deterministic; words
that never occur in the training split (count 0) still get leaves, deep in the tree.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from nplm.trees.assemble import from_merges
from nplm.trees import register_tree
from nplm.trees.tree import Tree


def huffman_merges(items: Sequence[int], weights: Sequence[float], first_code: int
                   ) -> tuple[list[tuple[int, int]], int]:
    """Huffman-merge the nodes `items` (codes as in `assemble`) of the given weights. The k-th merge
    (lightest, next lightest) gets the code `first_code + k`. Returns (merges, root code).

    The two-queue form of Huffman's algorithm (van Leeuwen 1976): the items sorted by weight (ties by
    position) in one queue, the merged nodes in another, whose weights never decrease; the lightest
    node is at the head of one of them. On equal weights an item comes before a merged node and merged
    nodes come in creation order: the same merges as a heap ordered by (weight, position; merged
    nodes after every item, by creation), in one sort and a loop without heap operations (much faster than
    the heap at a large vocabulary)."""
    w = np.asarray(weights, dtype=np.float64)
    order = np.argsort(w, kind="stable")  # by weight, ties by position
    leaf_w, leaf_item = w[order].tolist(), [items[i] for i in order.tolist()]
    n = len(leaf_w)
    merged_w: list[float] = []
    merged_code: list[int] = []
    merges: list[tuple[int, int]] = []
    i = j = 0  # heads of the two queues
    for _ in range(n - 1):
        pair, total = [], 0.0
        for _ in range(2):
            if i < n and (j >= len(merged_w) or leaf_w[i] <= merged_w[j]):
                pair.append(leaf_item[i])
                total += leaf_w[i]
                i += 1
            else:
                pair.append(merged_code[j])
                total += merged_w[j]
                j += 1
        merges.append((pair[0], pair[1]))
        merged_w.append(total)
        merged_code.append(first_code + len(merges) - 1)
    root = merged_code[-1] if merges else leaf_item[0]
    return merges, root


@register_tree("huffman", cached=True)
def build(ctx) -> Tree:
    """Huffman (1952) tree of the training unigram counts: frequent words get short codes."""
    V = len(ctx.vocab.tokens)
    merges, root = huffman_merges(range(V), ctx.counts, V)
    return from_merges(merges, V, root)
