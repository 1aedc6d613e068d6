"""Turn a bottom-up merge list or a top-down splitting rule into `Tree.children`, without recursion.

Builders describe a tree in whichever direction they work: Huffman (1952) and Brown et al. (1992)
merge two nodes at a time, bottom-up; recursive 2-means (Mnih & Hinton 2009) splits a set in two,
top-down. Both can produce deep, unbalanced trees, so neither nested tuples nor recursion is used:
the helpers number the internal nodes breadth-first from the root (children after parents), as
`Tree` requires.

Node codes: 0..V-1 are the words; a code >= V is an internal node (the k-th merge is V + k; for
splits, a code >= V is an item the caller can `expand` into its members).
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Sequence

from nplm.trees.tree import Tree


def from_merges(merges: Sequence[tuple[int, int]], vocab_size: int, root: int | None = None) -> Tree:
    """`merges[k] = (a, b)` joins the nodes a and b (word ids < V, or V + k' for an earlier merge k')
    into the node V + k; `root` (default: the last merge) becomes internal node 0."""
    V = vocab_size
    root = V + len(merges) - 1 if root is None else root
    if root < V:
        raise ValueError("a tree needs at least two words")
    children: list[tuple[int, int]] = []
    queue: deque[int] = deque([root])
    while queue:
        pair = []
        for child in merges[queue.popleft() - V]:
            if child >= V:
                pair.append(len(children) + len(queue) + 1)  # the next free breadth-first number
                queue.append(child)
            else:
                pair.append(-1 - child)
        children.append((pair[0], pair[1]))
    return Tree(children, V)


def from_splits(items: list[int], vocab_size: int, split: Callable[[list[int]], tuple[list[int], list[int]]],
                expand: Callable[[int], list[int]] | None = None) -> Tree:
    """Split `items` in two with `split(items) -> (left, right)` (both non-empty), again and again,
    breadth-first, until every part is one word. An item >= V is a group: a part made of that one
    item is replaced by `expand(item)`, its members (so a group with one member adds no node)."""
    V = vocab_size

    def resolve(part: list[int]) -> list[int]:
        while len(part) == 1 and part[0] >= V:
            part = list(expand(part[0]))
        return part

    root = resolve(list(items))
    if len(root) < 2:
        raise ValueError("a tree needs at least two words")
    children: list[tuple[int, int]] = []
    queue: deque[list[int]] = deque([root])
    while queue:
        part = queue.popleft()
        left, right = split(part)
        if not left or not right or len(left) + len(right) != len(part):
            raise RuntimeError(f"split of {len(part)} items into {len(left)} + {len(right)}")
        pair = []
        for side in (resolve(left), resolve(right)):
            if len(side) == 1:
                pair.append(-1 - side[0])
            else:
                pair.append(len(children) + len(queue) + 1)
                queue.append(side)
        children.append((pair[0], pair[1]))
    return Tree(children, V)
