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
et al.'s MLP1 (modern recipe, Brown) went from valid / test perplexity 336.8 / 312.0 to 334.2 / 308.4.

Cost per training example: O((c_1 + n) F) for the head plus, for a target in cluster i,
O(F d_i + d_i |cluster i|) with d_i = F // div_value^i (torch's module: the batch grouped by cluster, on
a CPU). Grouping needs the batch's clusters on the host, so on an accelerator, under `torch.compile`
and under autocast (torch's module mixes dtypes there)
`nll` evaluates every cluster for every example and keeps each row's own (the same sums, static
shapes, no host sync). `log_probs` is the exact full distribution.

Tied (`model.tie_embeddings=true`, the modern NPLM of Sun & Iyyer 2021): every word's output vector
is the model's input word vector E[w] [F] (`tie_output_embeddings`), so the shortlist rows of H are
E[w] and tail cluster i scores its words as E[w] . f + b_w, with no projection (P_i = I, T_i = the
cluster's rows of E; `div_value` is not used): the same two-level softmax, P(w | ctx) = softmax(H f)[...]
* softmax(E_i f + b_i)[...]. This is fairseq's tied adaptive softmax (tie_adaptive_weights and
tie_adaptive_proj) for a model whose input table is one [V, F] matrix rather than per-cluster
narrower ones: a tail target costs O(|cluster i| F). The n cluster rows of H stay the head's own.

`cutoffs: null` chooses [round(V/20), round(V/4)] (kept strictly increasing within [1, V-1]): the head
holds the 5% most frequent words (most of the mass in a Zipfian vocabulary), the first cluster the next
20%, the second the rest; V = 2 gets [1]. Works for any V >= 2.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from nplm.errors import UserError
from nplm.config.rules import Float, IntList
from nplm.heads import register_head
from nplm.heads.base import Head, tie_checked, wide, require_counts



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
        return nn.functional.linear(x, self.weight, self.bias)


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
    cutoffs = list(cutoffs)
    if cutoffs[-1] > V - 1:
        raise UserError(f"head.cutoffs={cutoffs} has {cutoffs[-1]}: each cutoff must be an integer from 1 to "
                        f"V-1={V - 1}; e.g. head.cutoffs={auto_cutoffs(V)} or null")
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
    "div_value": Float(gt=0, doc="each tail cluster's projection is this many times narrower")})
class AdaptiveHead(Head):
    @classmethod
    def features_problem(cls, options: dict, feature_dim: int) -> str | None:
        # (cutoffs null: chosen from the vocabulary, at least one tail)
        return tails_problem(options.get("div_value", 4.0), len(options.get("cutoffs") or [0]), feature_dim)

    def __init__(self, feature_dim: int, vocab_size: int, counts: Sequence[int], cutoffs: Sequence[int] | None = None,
                 div_value: float = 4.0):
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
        self.register_buffer("cutoffs", torch.tensor(cutoffs), persistent=False)  # [n] c_1..c_n

    can_tie = True  # every word has an output vector: a row of H (shortlist) or of its cluster's T_i

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
        if features.device.type == "cpu" and not torch.compiler.is_compiling() and not torch.is_autocast_enabled("cpu"):
            return -self.adaptive(features, self.rank[target]).output  # [B]
        return -self._log_prob_static(features, self.rank[target])

    def _log_prob_static(self, features: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
        """log P(w | ctx) [B] for ranks `rank` [B], every tail cluster computed for every row."""
        a = self.adaptive
        head_lp = torch.log_softmax(wide(a.head(features)), dim=-1)  # [B, c_1 + n], float32 under autocast
        cluster = torch.bucketize(rank, self.cutoffs, right=True)  # [B] 0: shortlist, i: tail cluster i
        column = torch.where(cluster == 0, rank, a.shortlist_size + cluster - 1)  # [B] the head's entry
        out = head_lp.gather(1, column[:, None]).squeeze(1)  # [B]
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
        require_counts("adaptive", counts, vocab_size)
        return cls(feature_dim, vocab_size, counts, options.get("cutoffs"), options.get("div_value", 4.0))
