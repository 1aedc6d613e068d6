"""Adaptive softmax (Grave et al. 2017, "Efficient softmax approximation for GPUs"), wrapping
`torch.nn.AdaptiveLogSoftmaxWithLoss`.

Words are ranked by training count (descending, ties by id); `cutoffs` c_1 < ... < c_n split the ranks
into a head shortlist [0, c_1) and tail clusters i = 1..n of ranks [c_i, c_{i+1}), c_{n+1} = V. With
features f [F] and r(w) the rank of w:

    P(w | ctx) = softmax(H f)[r(w)]                                          if r(w) < c_1
    P(w | ctx) = softmax(H f)[c_1 + i - 1] * softmax(T_i P_i f)[r(w) - c_i]  if c_i <= r(w) < c_{i+1}

H [c_1 + n, F] with a bias, P_i [F // div_value^i, F] a projection and T_i [|cluster i|, F // div_value^i]
with a bias, so every word has its own output bias, as b in eq. (1) of Bengio et al. (2003). torch's
module has no biases by default (`head_bias=False`, and its tail layers have none); with them Bengio
et al.'s MLP1 (modern recipe, Brown) reached a slightly lower valid and test perplexity.

Cost per training example: O((c_1 + n) F) for the head plus, for a target in cluster i,
O(F d_i + d_i |cluster i|) with d_i = F // div_value^i. torch's module reaches it by grouping the batch by
cluster on the host (data-dependent shapes; it mixes dtypes under autocast); `nll` and `loss` use it
on a CPU in float32 eager. `loss` (training) elsewhere (an accelerator, `torch.compile`, autocast)
takes the capacity path (`nplm.heads.adaptive_capacity`: static shapes, no host sync, each row paying
for the shortlist, its own cluster and a margin, exact for every row). `nll` (evaluation: batches in
text order, whose mix of clusters varies far more) scores every cluster for every row there
(`_log_prob_static`: a full softmax's FLOPs, forward only). `log_probs` is the exact full
distribution. `path` forces `loss` onto one of the three ("torch", "all", "capacity"), on a CPU too;
the config key `head.training_path` sets it (auto: as above; capacity; all: every cluster for every row,
the same loss with more FLOPs and none of the grouping's small kernels, which a GPU may run faster at
a small vocabulary: at |V| = 10,000 and batch 256, 10.8 GFLOP a step against the capacity path's 8.2).

Tied (`model.tie_embeddings=true`, the modern NPLM of Sun & Iyyer 2021): every word's output vector
is the model's input word vector E[w] [F] (`tie_output_embeddings`), so the shortlist rows of H are
E[w] and tail cluster i scores its words as E[w] . f + b_w, with no projection (P_i = I, T_i = the
cluster's rows of E; `div_value` is not used): the same two-level softmax, P(w | ctx) = softmax(H f)[...]
* softmax(E_i f + b_i)[...]. This is fairseq's tied adaptive softmax (tie_adaptive_weights and
tie_adaptive_proj) for a model whose input table is one [V, F] matrix rather than per-cluster
narrower ones: a tail target costs O(|cluster i| F). The n cluster rows of H stay the head's own.

The n cluster rows of H start at zero (tied or not): with random rows, H f scored the clusters by
chance at the scale of the features (about sqrt(F) after a Transformer's final LayerNorm), and one Adam
step on a Transformer's features raised its validation perplexity. From zero, the untrained head gives
each cluster the same score, and the first steps fit the clusters' mass.

`cutoffs: null` chooses [round(V/20), round(V/4)] (kept strictly increasing within [1, V-1]): the head
holds the 5% most frequent words (most of the mass in a Zipfian vocabulary), the first cluster the next
20%, the second the rest; V = 2 gets [1]. Works for any V >= 2. Cutoffs at or beyond V would give
clusters with no words: they are dropped (a log line says so), so a recipe's cutoffs (WikiText-103's
[20000, 40000, 200000]) fit any vocabulary; where none is left, the default for V is used.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import torch
from torch import nn

from nplm.errors import UserError
from nplm.fast import aligned, plain
from nplm.config.rules import Choice, Float, IntList
from nplm.heads import register_head
from nplm.heads.adaptive_capacity import CapacityPath
from nplm.heads.base import Head, tie_checked, wide

log = logging.getLogger(__name__)

TRAINING_PATHS = ("auto", "capacity", "all")  # head.training_path: `AdaptiveHead.loss`'s path (module docstring)


class TiedRows(nn.Module):
    """A linear layer whose weight is rows `ids` of another module's table [V, F] (then rows of its own
    `extra`, if any) with its own bias: x [B, F] -> [B, len(ids) + len(extra)]. `table` is the model's
    parameter, shared (registered here too, as nn.Linear's weight is after `weight = table`)."""

    def __init__(self, table: nn.Parameter, ids: torch.Tensor, extra: nn.Parameter | None, bias: nn.Parameter):
        super().__init__()
        self.table, self.extra, self.bias = table, extra, bias
        self.register_buffer("ids", ids, persistent=False)  # [n] word ids, in the rows' order

    @property
    def weight(self) -> torch.Tensor:
        rows = self.table.index_select(0, self.ids)  # [n, F]
        return rows if self.extra is None else torch.cat([rows, self.extra])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return aligned.linear(x, self.weight, self.bias)  # (padded to aligned widths on a GPU: nplm.fast.aligned)


def auto_cutoffs(vocab_size: int) -> list[int]:
    """[round(V/20), round(V/4)] forced strictly increasing inside [1, V-1]; [1] when V = 2."""
    V = vocab_size
    if V == 2:
        return [1]
    first = min(max(round(V / 20), 1), V - 2)
    return [first, min(max(round(V / 4), first + 1), V - 1)]


def check_options(cutoffs, div_value, feature_dim: int, vocab_size: int) -> list[int]:
    """The cutoffs to use; a one-line UserError for a value this vocabulary and feature size do not
    allow (types and order were checked against the registered keys)."""
    V = vocab_size
    if V < 2:
        raise UserError(f"head=adaptive needs a vocabulary of at least 2 words, got {V}")
    if cutoffs is None:
        cutoffs = auto_cutoffs(V)
    given, cutoffs = list(cutoffs), [c for c in cutoffs if c < V] or auto_cutoffs(V)
    if cutoffs != given:
        log.info("head.cutoffs=%s: a vocabulary of %d words takes cutoffs below %d; using %s", given, V, V, cutoffs)
    problem = tails_problem(div_value, len(cutoffs), feature_dim)
    if problem:
        raise UserError(problem)
    return cutoffs


def tails_problem(div_value: float, tails: int, feature_dim: int) -> str | None:
    """Why `tails` tail clusters, each's projection F // div_value^i wide, do not fit `feature_dim` features."""
    for i in range(1, tails + 1):
        if int(feature_dim // (div_value**i)) < 1:
            return (f"head.div_value={div_value} leaves tail cluster {i} a 0-dimensional projection of the "
                    f"{feature_dim} features; lower head.div_value or use fewer cutoffs")
    return None


@register_head("adaptive", keys={
    "cutoffs": IntList(1, nullable=True, doc="word-count boundaries of the clusters (null: from the counts)"),
    "div_value": Float(gt=0, default=4.0, doc="each tail cluster's projection is this many times narrower (tied: "
                       "1, the tails are full width)"),
    "training_path": Choice(options=TRAINING_PATHS, doc="the training loss: auto (torch's grouping on a CPU in "
                            "float32 eager, else capacity), capacity (each row pays for the shortlist and its own "
                            "cluster), all (every cluster for every row: more FLOPs, fewer kernels)")})
class AdaptiveHead(CapacityPath, Head):
    avoids_full_scores = True  # the shortlist's and the target's tail cluster's scores only

    @classmethod
    def needs_counts(cls, options) -> bool:
        return True  # words ranked by frequency into the shortlist and tail clusters

    @classmethod
    def features_problem(cls, options: dict, feature_dim: int) -> str | None:
        # (cutoffs null: chosen from the vocabulary, at least one tail)
        return tails_problem(options.get("div_value", 4.0), len(options.get("cutoffs") or [0]), feature_dim)

    def __init__(self, feature_dim: int, vocab_size: int, counts: Sequence[int], cutoffs: Sequence[int] | None = None,
                 div_value: float = 4.0, training_path: str = "auto"):
        super().__init__()
        cutoffs = check_options(cutoffs, div_value, feature_dim, vocab_size)
        order = torch.argsort(torch.tensor(counts, dtype=torch.float64), descending=True, stable=True)  # rank -> id
        rank = torch.empty_like(order)
        rank[order] = torch.arange(vocab_size)
        self.register_buffer("rank", rank)  # [V] word id -> frequency rank (the adaptive softmax's class)
        self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(feature_dim, vocab_size, cutoffs, div_value=float(div_value),
                                                      head_bias=True)
        for _, words in self.adaptive.tail:  # (P_i, T_i): give T_i a bias, one per word of the cluster
            words.bias = nn.Parameter(torch.zeros(words.out_features))
        with torch.no_grad():  # the clusters' rows of H start at zero (module docstring)
            self.adaptive.head.weight[cutoffs[0]:].zero_()
        self.register_buffer("cutoffs", torch.tensor(cutoffs), persistent=False)  # [n] c_1..c_n
        # `loss`'s path (config key head.training_path): None (auto) picks torch's grouping on a CPU in float32
        # eager, else "capacity"; "torch" | "all" (`_log_prob_static`) | "capacity" force one
        self.path: str | None = None if training_path == "auto" else training_path
        self.init_capacities(counts, cutoffs, vocab_size)

    can_tie = True  # every word has an output vector: a row of H (shortlist) or of its cluster's T_i
    tied_values = {"div_value": (1.0,)}  # tied, the tails are full width: no projection (module docstring)

    def tie_output_embeddings(self, weight: nn.Parameter) -> None:
        """The shortlist's rows of H and every tail's word vectors become rows of the model's `weight`
        [V, F] (module docstring: tied); the tails lose their projections."""
        a = self.adaptive
        tie_checked(weight, torch.empty(a.n_classes, a.in_features, device="meta"))
        order = torch.empty_like(self.rank)
        order[self.rank] = torch.arange(len(self.rank), device=self.rank.device)  # [V] rank -> word id
        c = a.cutoffs  # [c_1, ..., c_n, V]
        cluster_rows = nn.Parameter(a.head.weight.detach()[c[0]:].clone())  # [n, F] the clusters' own rows of H
        a.head = TiedRows(weight, order[:c[0]], cluster_rows, a.head.bias)
        for i in range(len(a.tail)):
            a.tail[i] = nn.Sequential(nn.Identity(), TiedRows(weight, order[c[i]:c[i + 1]], None, a.tail[i][1].bias))

    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self._torch_grouping(features):
            return -self.adaptive(features, self.rank[target]).output  # [B]
        return -self._log_prob_static(features, self.rank[target])

    def loss(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The exact NLL [B], as `nll`; off the CPU's float32 eager path (or with `path = "capacity"`) each
        row pays for the shortlist and its own target's cluster only (`_log_prob_capacity`)."""
        path = self.path or ("torch" if self._torch_grouping(features) else "capacity")
        if plain.counting():  # the model's own arithmetic (nplm.fast.plain): torch's grouping, any device
            path = "torch"
        if path == "torch":
            return -self.adaptive(features, self.rank[target]).output  # [B]
        rank = self.rank[target]  # [B]
        if path == "all":
            return -self._log_prob_static(features, rank)
        log_p, dropped = self._log_prob_capacity(features, rank)  # [B], [B]
        if self._host_reads_free(features):  # a CPU in eager mode: rows left out are scored exactly
            if dropped.any():
                self.fallback_batches += 1
                return -self._log_prob_static(features, rank)
            return -log_p
        # no host read (a GPU, torch.compile): a batch with rows left out trains nothing that is kept; its
        # loss and every gradient are NaN, and the next check stops the run (`check_training`)
        with torch.no_grad():
            self.dropped_rows += dropped.sum()
        return -log_p * torch.where(dropped.any(), math.nan, 1.0).to(log_p.dtype)

    @staticmethod
    def _host_reads_free(features: torch.Tensor) -> bool:
        """Whether reading a device value costs nothing: a CPU tensor outside torch.compile."""
        return features.device.type == "cpu" and not torch.compiler.is_compiling()

    @staticmethod
    def _torch_grouping(features: torch.Tensor) -> bool:
        """torch's module, which groups the batch on the host: a CPU in float32 eager only."""
        return (features.device.type == "cpu" and not torch.compiler.is_compiling()
                and not torch.is_autocast_enabled("cpu"))

    def _head_log_prob(self, features: torch.Tensor, rank: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log softmax(H f) [B] at each row's head entry (its word in the shortlist, else its cluster's
        row), float32 under autocast, and the rows' clusters [B] (0: shortlist, i: tail cluster i)."""
        a = self.adaptive
        head_lp = torch.log_softmax(wide(a.head(features)), dim=-1)  # [B, c_1 + n]
        cluster = torch.bucketize(rank, self.cutoffs, right=True)  # [B]
        column = torch.where(cluster == 0, rank, a.shortlist_size + cluster - 1)  # [B] the head's entry
        return head_lp.gather(1, column[:, None]).squeeze(1), cluster

    def _log_prob_static(self, features: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
        """log P(w | ctx) [B] for ranks `rank` [B], every tail cluster computed for every row."""
        a = self.adaptive
        out, cluster = self._head_log_prob(features, rank)  # [B], [B]
        for i, tail in enumerate(a.tail):
            lo, hi = a.cutoffs[i], a.cutoffs[i + 1]
            local = (rank - lo).clamp(0, hi - lo - 1)  # [B] rank within cluster i + 1
            tail_lp = torch.log_softmax(wide(tail(features)), dim=-1).gather(1, local[:, None]).squeeze(1)  # [B]
            out = out + torch.where(cluster == i + 1, tail_lp, torch.zeros_like(tail_lp))
        return out

    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        return self.adaptive.log_prob(features).index_select(1, self.rank)  # [B, V] rank order -> word-id order

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts, tree=None) -> "AdaptiveHead":
        return cls(feature_dim, vocab_size, counts, options.get("cutoffs"), options.get("div_value", 4.0),
                   options.get("training_path", "auto"))
