"""Class-based output layer: P(w | ctx) = P(c(w) | ctx) P(w | c(w), ctx) (Goodman 2001, "Classes for
fast maximum entropy training"; Mikolov et al. 2011, "Extensions of recurrent neural network language
model").

With features f [F], class scores s = A f + a [K] and word scores y = W f + b [V]:

    P(w | ctx) = softmax(s)[c(w)] * exp(y_w) / sum_{w' in c(w)} exp(y_w')

Classes (`classes`):
- `frequency`: Mikolov's frequency bins: the words sorted by training count (descending, ties by id)
  and cut into `num_classes` consecutive bins holding about equal unigram mass, every bin non-empty;
- `tree`: the top of a word tree (config group `tree`, e.g. tree=brown): starting from the root, the
  subtree with the most training mass is replaced by its two children until there are K subtrees;
  each subtree's words are a class. With a Brown tree the classes hold similar words and about equal
  mass, as frequency bins do, but a class is no longer a band of unrelated words of one frequency.
The default K = round(sqrt(V)) is Mikolov's choice. The rows of W are stored class by class, so a
class is a contiguous block of W.

The untrained head is the classes' own split, P(w | ctx) = 1 / (K |c(w)|): A, a, W and b start at zero, as
word2vec's output vectors do, so that neither the features' scale (about sqrt(F) after a Transformer's final
LayerNorm, below 1 from an LSTM) nor the first optimizer steps on them decide where training starts (with
random rows, one Adam step on the Transformer's features raised its validation perplexity).

Cost: `nll` (training and evaluation) on a CPU is O((K + |c(w)|) F) per example, computing only the
target class's block of word scores (examples grouped by class, one matmul per class present in the
batch); the weight gradient is dense ([V, F], like every head's), written once per batch. Grouping
needs the batch's classes on the host, so on an accelerator and under `torch.compile` `nll` takes
the static-shape path instead: all word scores [B, V], each row's softmax masked to its class
(O(V F) per example, no host sync, one graph). `log_probs` is the exact full distribution, O(V F).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from nplm.errors import UserError
from nplm.fast import plain
from nplm.config.rules import Choice, Int
from nplm.heads import register_head
from nplm.heads.base import Head, wide, require_tree
from nplm.heads.softmax import SoftmaxNLL
from nplm.trees.tree import Tree

CLASSES = ("frequency", "tree")


def frequency_bins(counts: Sequence[int], num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(order [V]: word ids by descending count, ties by id; class_of_rank [V]: each rank's class).

    A word's class is floor(K * (mass of the more frequent words) / total mass), kept non-decreasing,
    rising by at most one per word (so no class is empty, as in Mikolov's rnnlm binning) and high
    enough that the remaining words fill the remaining classes. All-zero counts bin by id."""
    V, K = len(counts), num_classes
    c = torch.tensor(counts, dtype=torch.float64)  # [V]
    order = torch.argsort(c, descending=True, stable=True)  # [V] rank -> word id
    mass = c[order] if c.sum() > 0 else torch.ones(V, dtype=torch.float64)  # [V] by rank
    before = (torch.cumsum(mass, 0) - mass) / mass.sum()  # [V] mass of the more frequent words
    wanted = (before * K).floor().clamp(max=K - 1).long().tolist()
    classes, a = [], 0
    for r, w in enumerate(wanted):
        a = max(min(max(w, a), a + 1), K - (V - r))
        classes.append(a)
    return order, torch.tensor(classes, dtype=torch.long)


def tree_cut(tree: Tree, counts: Sequence[int], num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(order [V]: word ids in the tree's left-to-right leaf order; class_of_rank [V]: each position's
    class). The `num_classes` classes are the subtrees left after repeatedly splitting the heaviest one
    (training count mass, ties by the smaller node number) into its two children, from the root."""
    if tree.leaf_words is not None:
        raise UserError(f"head.classes=tree needs a tree with one code per word; this {tree.kind or 'loaded'} tree "
                        f"has {tree.codes_per_word:.2f} (use tree.eps=0 tree.runs=1)")
    c = [float(x) for x in counts]
    mass: list[float] = [0.0] * len(tree.children)  # [I] training mass under each internal node
    for node in reversed(range(len(tree.children))):  # children are numbered after their parent
        mass[node] = sum(c[-1 - ch] if ch < 0 else mass[ch] for ch in tree.children[node])
    frontier = [0]  # internal nodes (>= 0) and words (< 0), left to right
    while len(frontier) < num_classes:
        splittable = [(-mass[n], n, i) for i, n in enumerate(frontier) if n >= 0]
        _, node, i = min(splittable)  # a tree with V >= K leaves always has one
        frontier[i:i + 1] = list(tree.children[node])
    order, class_of_rank = [], []
    for k, top in enumerate(frontier):
        stack = [top]
        while stack:  # depth first, left child first
            n = stack.pop()
            if n < 0:
                order.append(-1 - n)
                class_of_rank.append(k)
            else:
                stack.extend(reversed(tree.children[n]))
    return torch.tensor(order, dtype=torch.long), torch.tensor(class_of_rank, dtype=torch.long)


class WithinClassNLL(torch.autograd.Function):
    """-log P(w | c(w), ctx) [B]: a softmax over the target class's block of word scores only.

    `weight` [V, F] and `bias` [V] are in class-sorted order; `position` [B] is each target's row in
    them; `klass` [B] its class; `bounds` (K + 1 ints) the classes' row ranges. Examples are grouped by
    class and each group is one matmul against its block, so no [B, V] or [B, max class, F] tensor is
    ever made; backward is dL/dy = softmax - onehot within the block, written into the dense gradient.
    """

    @staticmethod
    def forward(ctx, features, weight, bias, position, klass, bounds):
        order = torch.argsort(klass)  # [B] examples grouped by class
        present, sizes = torch.unique_consecutive(klass[order], return_counts=True)
        nll = features.new_empty(features.shape[0], dtype=torch.promote_types(features.dtype, torch.float32))  # [B]
        blocks = []
        for k, rows in zip(present.tolist(), order.split(sizes.tolist())):
            lo, hi = bounds[k], bounds[k + 1]
            scores = torch.addmm(bias[lo:hi], features[rows], weight[lo:hi].t())  # [n, |c|]
            log_p = torch.log_softmax(scores.to(nll.dtype), dim=-1)  # [n, |c|], float32 under bf16 autocast
            local = (position[rows] - lo)[:, None]  # [n, 1] target's column in its block
            nll[rows] = -log_p.gather(1, local).squeeze(1)
            blocks.append((lo, hi, rows, local, log_p))
        ctx.blocks = blocks
        ctx.save_for_backward(features, weight)
        return nll

    @staticmethod
    def backward(ctx, grad_nll):
        features, weight = ctx.saved_tensors
        grad_f = torch.zeros_like(features)  # [B, F]
        grad_w = torch.zeros_like(weight)  # [V, F]
        grad_b = weight.new_zeros(weight.shape[0])  # [V]
        for lo, hi, rows, local, log_p in ctx.blocks:
            g = log_p.exp()  # [n, |c|] softmax within the block (not in place: backward may run twice)
            g.scatter_add_(1, local, torch.full_like(local, -1, dtype=g.dtype))
            g.mul_(grad_nll[rows, None])
            grad_f[rows] = (g @ weight[lo:hi].to(g.dtype)).to(grad_f.dtype)  # [n, F]
            grad_w[lo:hi] = g.t() @ features[rows].to(g.dtype)  # [|c|, F]: each class's rows are written once
            grad_b[lo:hi] = g.sum(0)
        return grad_f, grad_w, grad_b, None, None, None


@register_head("class_based", keys={
    "num_classes": Int(1, nullable=True, doc="classes K (null: about sqrt(V))"),
    "classes": Choice(options=CLASSES, doc="frequency bins, or the top subtrees of the tree group's tree")})
class ClassBasedHead(Head):
    variants = ({}, {"classes": "tree"})
    avoids_full_scores = True  # one block of word scores per class present in the batch

    @classmethod
    def uses_tree(cls, options) -> bool:
        return options.get("classes") == "tree"

    @classmethod
    def needs_counts(cls, options) -> bool:
        return True

    def __init__(self, feature_dim: int, vocab_size: int, counts: Sequence[int], num_classes: int | None = None,
                 tree: Tree | None = None):
        """Frequency-bin classes, or with `tree` the tree's top K subtrees (`tree_cut`)."""
        super().__init__()
        K = round(math.sqrt(vocab_size)) if num_classes is None else num_classes
        with torch.device("cpu"):  # index tables are data: made for real also when the module is built on the
            # meta device (nplm.training.memory's estimate), whose parameters alone take no memory
            order, class_of_rank = frequency_bins(counts, K) if tree is None else tree_cut(tree, counts, K)
            # class-sorted layout: classes are runs of ranks, so rank order is already grouped by class
            position = torch.empty_like(order)
            position[order] = torch.arange(vocab_size)
            bounds = torch.searchsorted(class_of_rank, torch.arange(K + 1))  # [K + 1] first row of each class
        self.num_classes = K
        self.register_buffer("word_at", order)  # [V] row of `word_out` -> word id
        self.register_buffer("position", position)  # [V] word id -> row of `word_out`
        self.register_buffer("class_of_row", class_of_rank)  # [V] row -> class (non-decreasing)
        self.register_buffer("class_of", class_of_rank[position])  # [V] word id -> class
        self.register_buffer("bounds", bounds)
        self._bounds = bounds.tolist()  # the same K + 1 row offsets as Python ints: no device read per batch
        self.class_out = nn.Linear(feature_dim, K)  # A [K, F], a [K]
        self.word_out = nn.Linear(feature_dim, vocab_size)  # W [V, F], b [V], rows class by class
        for start_at_zero in (self.class_out, self.word_out):  # (module docstring: the untrained head)
            nn.init.zeros_(start_at_zero.weight), nn.init.zeros_(start_at_zero.bias)

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        klass = self.class_of[target]  # [B]
        class_nll = SoftmaxNLL.apply(wide(self.class_out(features)), klass)  # [B] -log P(c | ctx)
        if (features.device.type == "cpu" or plain.counting()) and not torch.compiler.is_compiling():
            word_nll = WithinClassNLL.apply(features, self.word_out.weight, self.word_out.bias,
                                            self.position[target], klass, self._bounds)  # [B]
        else:
            word_nll = self._within_class_static(features, target, klass)
        return class_nll + word_nll

    def _within_class_static(self, features: torch.Tensor, target: torch.Tensor, klass: torch.Tensor) -> torch.Tensor:
        """-log P(w | c(w), ctx) [B] from all word scores, each row's softmax masked to its class."""
        in_class = self.class_of_row[None, :] == klass[:, None]  # [B, V] class-sorted rows
        y = wide(self.word_out(features)).masked_fill(~in_class, float("-inf"))  # [B, V]
        log_p = torch.log_softmax(y, dim=-1)  # [B, V], -inf outside the class
        return -log_p.gather(1, self.position[target][:, None]).squeeze(1)  # [B]

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        y = wide(self.word_out(features))  # [B, V] word scores, class-sorted
        log_pc = torch.log_softmax(wide(self.class_out(features)), dim=-1)  # [B, K] log P(c | ctx)
        bounds = self._bounds
        blocks = [torch.log_softmax(y[:, lo:hi], dim=-1) + log_pc[:, k, None]  # [B, |c|] log P(w | ctx)
                  for k, (lo, hi) in enumerate(zip(bounds, bounds[1:]))]
        return torch.cat(blocks, 1).index_select(1, self.position)  # [B, V] in word-id order

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts, tree=None) -> "ClassBasedHead":
        K = options.get("num_classes")
        if K is not None and K > vocab_size:
            raise UserError(f"head.num_classes={K!r} must be an integer from 1 to the vocabulary size "
                            f"{vocab_size}; e.g. head.num_classes={round(math.sqrt(vocab_size))} (about sqrt(V)), "
                            f"or null for that default")
        classes = options.get("classes", "frequency")
        if classes == "frequency":
            return cls(feature_dim, vocab_size, counts, K)
        require_tree("head.classes=tree", tree, vocab_size)
        return cls(feature_dim, vocab_size, counts, K, tree)
