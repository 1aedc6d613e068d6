"""A binary tree over the vocabulary, as plain arrays (Morin & Bengio 2005, section 3).

Internal nodes are numbered 0..I-1 breadth-first (0 is the root, a child's number is larger than its
parent's; a tree given with another numbering, e.g. a hand-written tree.json, is renumbered so on
load); the leaves are 0..L-1. `children[i] = (left, right)`, where a child c >= 0 is an internal node
and c < 0 is the leaf -1 - c. A leaf's path is the internal nodes from the root down to it, and its
code says at each of them whether the path turns left (0) or right (1), so that

    P(leaf | context) = prod_j P(b_j | b_1..b_{j-1}, context) = prod_j sigmoid(+-s(node_j, context))

with + for a right turn and - for a left turn.

In a plain tree the leaves are the words (L = V, leaf w is word w). A multi-code tree (Mnih & Hinton
2009, section 4: ADAPTIVE(eps) splits and trees joined from several runs) has more leaves than words:
`leaf_words[l]` is leaf l's word, every word has one or more leaves (its codes), and

    P(w | context) = sum over the leaves l of w of P(l | context)

which sums to 1 over the words because the leaves' probabilities sum to 1 and each leaf has one word.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, Union

import numpy as np
import torch

from nplm.errors import UserError
from nplm.files import atomic_write

Nested = Union[int, tuple]  # a word id, or a (left, right) pair of Nested


def vocab_fingerprint(tokens: Sequence[str]) -> str:
    """A short hash of the ordered vocabulary: a tree built for another vocabulary is refused."""
    return hashlib.sha256("\x00".join(tokens).encode()).hexdigest()[:16]


@dataclass
class Tree:
    children: list[tuple[int, int]]  # [I] (left, right); >= 0 internal node, < 0 word -1-c
    vocab_size: int
    fingerprint: str = ""  # vocab_fingerprint of the vocabulary it was built for
    kind: str = ""  # which builder made it
    leaf_words: list[int] | None = None  # [L] the word of each leaf (multi-code trees); None: leaf l is word l
    _paths: tuple | None = field(default=None, init=False, repr=False)
    _pairs: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)  # children [I, 2]

    def __post_init__(self) -> None:
        try:  # numpy converts a large tree's pairs (267,735 words) much faster than a loop over them
            pairs = np.asarray(self.children, dtype=np.int64)
        except (ValueError, TypeError):
            pairs = None  # not all pairs (validate says which node)
        if pairs is not None and pairs.ndim == 2 and pairs.shape[1] == 2:
            self.children = list(map(tuple, pairs.tolist()))
            self._pairs = pairs
        else:
            self.children = [tuple(int(c) for c in pair) for pair in self.children]
        if self.leaf_words is not None:
            self.leaf_words = [int(w) for w in self.leaf_words]
        self.children = self._breadth_first(self.validate())

    def pairs(self) -> np.ndarray:
        """`children` as an int64 array [I, 2] (kept: converting a large tree's pairs again is not free)."""
        if self._pairs is None or len(self._pairs) != len(self.children):
            self._pairs = np.asarray(self.children, dtype=np.int64).reshape(-1, 2)
        return self._pairs

    @property
    def num_leaves(self) -> int:
        """L: the number of leaves (codes); V for a plain tree."""
        return self.vocab_size if self.leaf_words is None else len(self.leaf_words)

    @property
    def codes_per_word(self) -> float:
        """Mean number of codes (leaves) per word: 1 for a plain tree."""
        return self.num_leaves / self.vocab_size

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_nested(cls, nested: Nested, vocab_size: int, **kwargs) -> "Tree":
        """Number a nested (left, right) structure of word ids breadth-first. A single word (V = 1)
        cannot make a binary tree."""
        if not isinstance(nested, tuple):
            raise ValueError("a tree needs at least two words")
        children: list[tuple[int, int]] = []
        queue: deque = deque([nested])
        next_id = 1
        while queue:
            node = queue.popleft()
            pair = []
            for child in node:
                if isinstance(child, tuple):
                    pair.append(next_id)
                    next_id += 1
                    queue.append(child)
                else:
                    pair.append(-1 - int(child))
            children.append((pair[0], pair[1]))
        return cls(children, vocab_size, **kwargs)

    def validate(self) -> int:
        """Binary, every leaf reached once, every word at least one leaf (exactly one in a plain tree),
        every node but one (the root, returned) exactly one parent, every node reachable from the root.
        Any numbering of the nodes is accepted. (numpy over all nodes at once, so large trees stay cheap.)"""
        V, L, I = self.vocab_size, self.num_leaves, len(self.children)
        if I != L - 1:
            over = f"over {V} words" if self.leaf_words is None else f"with {L} leaves"
            raise UserError(f"a binary tree {over} has {L - 1} internal nodes, this one {I}")
        bad_arity = next((i for i, pair in enumerate(self.children) if len(pair) != 2), None)
        if bad_arity is not None:
            raise UserError(f"tree node {bad_arity} has {len(self.children[bad_arity])} children; trees must be binary")
        ch = self.pairs()  # [I, 2]
        flat = ch.reshape(-1)  # (parent, turn) order
        out_of_range = (flat >= I) | (flat < -L)
        if out_of_range.any():
            k = int(np.flatnonzero(out_of_range)[0])
            c = int(flat[k])
            if c >= 0:
                raise UserError(f"tree node {k // 2} has child node {c}; there are only {I} nodes")
            raise UserError(f"tree node {k // 2} has leaf {-1 - c}, outside the {L} leaves")
        seen_words = np.bincount(-1 - flat[flat < 0], minlength=L)
        bad = np.flatnonzero(seen_words != 1)
        if len(bad):
            what = "word" if self.leaf_words is None else "leaf"
            raise UserError(f"{what} {int(bad[0])} is a leaf {int(seen_words[bad[0]])} times; "
                            f"each {what} must be exactly one leaf")
        if self.leaf_words is not None:
            leaf_words = np.asarray(self.leaf_words, dtype=np.int64)
            outside = (leaf_words < 0) | (leaf_words >= V)
            if outside.any():
                raise UserError(f"a leaf has word {int(leaf_words[outside][0])}, outside the vocabulary of {V}")
            codes = np.bincount(leaf_words, minlength=V)
            if (codes == 0).any():
                raise UserError(f"word {int(np.flatnonzero(codes == 0)[0])} has no leaf; every word needs at "
                                "least one code")
        parents = np.bincount(flat[flat >= 0], minlength=I)
        roots = np.flatnonzero(parents == 0)
        many = np.flatnonzero(parents > 1)
        if len(many) or len(roots) != 1:
            node = int(many[0]) if len(many) else int(roots[1]) if len(roots) else 0
            raise UserError(f"tree node {node} has {int(parents[node])} parents; the tree is not connected")
        root = int(roots[0])
        reached, frontier = 1, np.array([root])
        while len(frontier) and reached <= I:  # one parent each and I - 1 edges: all reached means no cycle
            kids = ch[frontier].reshape(-1)
            frontier = kids[kids >= 0]
            reached += len(frontier)
        if reached != I:
            raise UserError(f"tree nodes form a cycle: {I - reached} of {I} are not below the root {root}")
        return root

    def _breadth_first(self, root: int) -> list[tuple[int, int]]:
        """The same tree with its internal nodes renumbered breadth-first from the root (children in
        (parent, turn) order), the numbering the level-by-level full distribution relies on. A tree
        already numbered so (every builder's) is returned unchanged."""
        ch = self.pairs()  # [I, 2]
        levels, frontier = [], np.array([root])
        while len(frontier):
            levels.append(frontier)
            kids = ch[frontier].reshape(-1)
            frontier = kids[kids >= 0]
        order = np.concatenate(levels)  # new number -> old number
        if np.array_equal(order, np.arange(len(ch))):
            return self.children
        new_id = np.empty(len(ch), dtype=np.int64)
        new_id[order] = np.arange(len(ch))
        renumbered = ch[order]
        renumbered = np.where(renumbered >= 0, new_id[np.clip(renumbered, 0, None)], renumbered)
        self._pairs = renumbered
        return list(map(tuple, renumbered.tolist()))

    # -- paths -------------------------------------------------------------------------------
    def paths(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(nodes [L, D], codes [L, D], lengths [L]): each leaf's internal nodes from the root and its
        turns (1 = right), padded to the maximum depth D with node 0 and code 0. Leaf = word in a plain tree.
        Computed with numpy, all leaves at once, one level up per step (a Python walk of every leaf is far
        slower at a large vocabulary)."""
        if self._paths is None:
            ch = self.pairs()  # [I, 2]
            I, L = len(ch), self.num_leaves
            parent, side = np.full(I, -1, dtype=np.int64), np.zeros(I, dtype=np.int64)  # each node's parent, turn
            leaf_parent, leaf_side = np.zeros(L, dtype=np.int64), np.zeros(L, dtype=np.int64)
            for turn in (0, 1):
                c = ch[:, turn]
                inner = c >= 0
                parent[c[inner]], side[c[inner]] = np.flatnonzero(inner), turn
                leaf_parent[-1 - c[~inner]], leaf_side[-1 - c[~inner]] = np.flatnonzero(~inner), turn
            up_nodes, up_codes = [], []  # the path from the leaf up: step k = the k-th node above
            node, turn, active = leaf_parent, leaf_side, np.ones(L, dtype=bool)
            lengths = np.zeros(L, dtype=np.int64)
            while active.any():
                up_nodes.append(np.where(active, node, 0))
                up_codes.append(np.where(active, turn, 0))
                lengths += active
                turn = side[node]  # the turn into `node` at its parent
                node = np.where(active, parent[node], -1)
                active = node >= 0
                node = np.where(active, node, 0)
            up_n, up_c = np.stack(up_nodes, 1), np.stack(up_codes, 1)  # [L, D] leaf end first
            D = up_n.shape[1]
            k = lengths[:, None] - 1 - np.arange(D)  # [L, D] root end first
            valid = k >= 0
            k = np.clip(k, 0, None)
            nodes = np.where(valid, np.take_along_axis(up_n, k, 1), 0)
            codes = np.where(valid, np.take_along_axis(up_c, k, 1), 0)
            self._paths = (torch.from_numpy(nodes), torch.from_numpy(codes), torch.from_numpy(lengths))
        return self._paths

    def levels(self) -> list[torch.Tensor]:
        """Internal node ids grouped by depth, root first: the order of a level-by-level pass. (numpy,
        one level per step: the breadth-first numbering makes each level the children of the last.)"""
        ch, levels, frontier = self.pairs(), [], np.array([0])  # [I, 2]; node 0 is the root
        while len(frontier):
            levels.append(torch.from_numpy(frontier))
            kids = ch[frontier].reshape(-1)
            frontier = kids[kids >= 0]
        return levels

    def children_tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.pairs().copy())  # [I, 2]

    def word_of_leaf(self) -> torch.Tensor:
        """[L] the word of each leaf."""
        return torch.arange(self.vocab_size) if self.leaf_words is None else torch.tensor(self.leaf_words)

    def code_ranks(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The leaves grouped by rank: rank r holds (leaves [n_r], their words [n_r]) for the r-th code of
        every word that has more than r codes. Rank 0 is one leaf per word, in word order."""
        seen: dict[int, int] = {}
        ranks: list[tuple[list[int], list[int]]] = []
        for leaf, w in enumerate(self.word_of_leaf().tolist()):
            r = seen.get(w, 0)
            seen[w] = r + 1
            if r == len(ranks):
                ranks.append(([], []))
            ranks[r][0].append(leaf)
            ranks[r][1].append(w)
        out = []
        for r, (leaves, words) in enumerate(ranks):
            order = sorted(range(len(words)), key=words.__getitem__) if r == 0 else range(len(words))
            out.append((torch.tensor([leaves[i] for i in order]), torch.tensor([words[i] for i in order])))
        return out

    # -- statistics ----------------------------------------------------------------------------
    def stats(self, counts: Sequence[int] | None = None) -> dict:
        """Internal nodes, codes (leaves) per word, mean/max depth, and with unigram counts the expected
        code length in bits next to the unigram entropy (its lower bound). With several codes per word,
        a word's depth is the mean length of its codes."""
        _, _, lengths = self.paths()
        V = self.vocab_size
        words = self.word_of_leaf()
        depth = torch.zeros(V, dtype=torch.float64).index_add_(0, words, lengths.double())  # [V] summed
        depth /= torch.zeros(V, dtype=torch.float64).index_add_(0, words, torch.ones(len(words), dtype=torch.float64))
        out = {"kind": self.kind, "words": V, "internal_nodes": len(self.children),
               "codes_per_word": self.codes_per_word,
               "mean_depth": float(depth.mean()), "max_depth": int(lengths.max())}
        if counts is not None:
            p = torch.tensor(counts, dtype=torch.float64) + 1e-12
            p = p / p.sum()
            out["expected_code_length_bits"] = float((p * depth).sum())
            out["unigram_entropy_bits"] = float(-(p * torch.log2(p)).sum())
        return out

    # -- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {"kind": self.kind, "vocab_size": self.vocab_size, "fingerprint": self.fingerprint,
             "children": self.pairs().tolist()}
        if self.leaf_words is not None:
            d["leaf_words"] = list(self.leaf_words)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Tree":
        return cls([tuple(p) for p in d["children"]], int(d["vocab_size"]), fingerprint=d.get("fingerprint", ""),
                   kind=d.get("kind", ""), leaf_words=d.get("leaf_words"))

    def save(self, path: str | Path) -> None:
        """Write the tree as JSON, atomically (`nplm.files`): the old file or the new one, never half."""
        atomic_write(path, json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> "Tree":
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError) as err:
            raise UserError(f"cannot read tree file {str(path)!r} ({type(err).__name__}); "
                            "give tree.path a tree.json written by nplm-train") from None

    def check_vocabulary(self, tokens: Sequence[str]) -> None:
        if self.vocab_size != len(tokens) or (self.fingerprint and self.fingerprint != vocab_fingerprint(tokens)):
            raise UserError(f"this {self.kind or 'loaded'} tree was built for another vocabulary "
                            f"({self.vocab_size} words, fingerprint {self.fingerprint}) than the corpus' "
                            f"({len(tokens)} words, {vocab_fingerprint(tokens)}); rebuild it from this corpus")


def balanced_nested(words: Sequence[int]) -> Nested:
    """Recursive halves of `words` (the hierarchical-softmax notebook's tree)."""
    if len(words) == 1:
        return words[0]
    mid = (len(words) + 1) // 2
    return (balanced_nested(words[:mid]), balanced_nested(words[mid:]))
