"""`tree=huffman`: the Huffman (1952) code tree of the training unigram counts.

Huffman, "A Method for the Construction of Minimum-Redundancy Codes" (Proc. IRE, 1952): merging the
two lightest nodes until one is left gives the binary tree of minimal expected depth under the
unigram distribution, within one bit of its entropy (what word2vec and fastText use for their
hierarchical softmax). Frequent words get short paths, so a training step costs fewer node scores
on average. Ties are broken by word id, then by merge order, so the tree is deterministic; words
that never occur in the training split (count 0) still get leaves, deep in the tree.
"""

from __future__ import annotations

import heapq
from typing import Sequence

from nplm.trees.assemble import from_merges
from nplm.trees import register_tree
from nplm.trees.tree import Tree


def huffman_merges(items: Sequence[int], weights: Sequence[float], first_code: int
                   ) -> tuple[list[tuple[int, int]], int]:
    """Huffman-merge the nodes `items` (codes as in `assemble`) of the given weights. The k-th merge
    (lightest, next lightest) gets the code `first_code + k`. Returns (merges, root code)."""
    heap = [(float(w), order, item) for order, (item, w) in enumerate(zip(items, weights))]
    heapq.heapify(heap)
    merges: list[tuple[int, int]] = []
    tiebreak = len(heap)  # merged nodes rank after every leaf of equal weight, in creation order
    while len(heap) > 1:
        w1, _, a = heapq.heappop(heap)
        w2, _, b = heapq.heappop(heap)
        merges.append((a, b))
        heapq.heappush(heap, (w1 + w2, tiebreak, first_code + len(merges) - 1))
        tiebreak += 1
    return merges, heap[0][2]


@register_tree("huffman")
def build(ctx) -> Tree:
    """Huffman (1952) tree of the training unigram counts: frequent words get short codes."""
    V = len(ctx.vocab.tokens)
    merges, root = huffman_merges(range(V), ctx.counts, V)
    return from_merges(merges, V, root)
