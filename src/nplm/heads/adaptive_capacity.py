"""The adaptive softmax's capacity path (`nplm.heads.adaptive`): its training loss with static shapes and
no host sync, for an accelerator, `torch.compile` and autocast.

The rows are sorted by cluster; tail cluster i scores a fixed C_i of them,
C_i = ceil(B p_i + 4 sqrt(B p_i (1 - p_i))) + 8 (p_i: the cluster's share of the training tokens, a
binomial count's mean plus 4 standard deviations; whole blocks of text: `calibrate`) plus
S = B // 256 + 8 spill rows, the first S rows of any cluster beyond its C_i, which every tail scores;
the results are added back to their rows. Each row then costs the shortlist, its own cluster and the margins: at
WikiText-103's shape (tied, B = 2048) within 1.5 times the shortlist + own-cluster floor, where scoring
every cluster costs more than 4 times as much (tests/test_adaptive_capacity.py counts the FLOPs and
holds both bounds). The loss is exact for every row within C_i + S. A batch with a row beyond both (far
from the training counts' mix) is never trained on a changed loss: on a CPU in eager mode, where reading
the device is free, `AdaptiveHead.loss` scores it on every cluster (exact; counted in `fallback_batches`
and logged at the epoch's end); elsewhere its loss and gradients are NaN, so no step of it is kept, the
rows are counted on the device (`dropped_rows`), and `check_training`, which the training loop calls at
each log line and epoch end (where it reads the device anyway), stops the run with a one-line UserError
naming head.training_path=all to resume it with. At an epoch's end each C_i grows by the most rows it
overflowed in one batch (`overflow_peak`; `overflow_rows` counts them all); checkpoints keep the growth
(`graph_sizes`, `restore_sizes`).
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import torch

from nplm.errors import UserError
from nplm.heads.base import wide

log = logging.getLogger(__name__)


class CapacityPath:
    """The capacity path's sizes, counters and loss, for `AdaptiveHead` (an `nn.Module` with `adaptive`, torch's
    `AdaptiveLogSoftmaxWithLoss`, `cutoffs` [n] and `_head_log_prob`); `init_capacities` sets it up."""

    def init_capacities(self, counts: Sequence[int], cutoffs: Sequence[int], vocab_size: int) -> None:
        """The clusters' shares p_i of the training counts `counts` (cutoffs c_1..c_n of V = `vocab_size`
        ranks), no growth yet, and the device-side counters."""
        total, bounds = max(sum(counts), 1), [*cutoffs, vocab_size]
        ranked = sorted(counts, reverse=True)
        self.cluster_share = [sum(ranked[lo:hi]) / total for lo, hi in zip(bounds, bounds[1:])]  # p_i, i = 1..n
        self.capacity_extra = [0] * len(cutoffs)  # rows added to each cluster's capacity by past overflows
        self.fallback_batches = 0  # batches this epoch scored on every cluster (rows beyond capacity and spill)
        self.block_counts: tuple[list[float], list[float], int] | None = None  # `calibrate`: means, variances, T
        n = len(cutoffs)
        self.register_buffer("overflow_rows", torch.zeros(n, dtype=torch.long), persistent=False)  # [n] over C_i
        self.register_buffer("overflow_peak", torch.zeros(n, dtype=torch.long), persistent=False)  # [n] most in a batch
        self.register_buffer("dropped_rows", torch.zeros((), dtype=torch.long), persistent=False)  # beyond the spill

    def capacities(self, rows: int) -> list[int]:
        """Rows of a batch of `rows` that each tail cluster i scores: mu_i + 4 sd_i + 8, plus what the epochs
        so far overflowed (`check_training`), at most `rows`. Shuffled windows: a binomial count, mu_i = rows
        p_i, sd_i^2 = mu_i (1 - p_i) (p_i: cluster i's share of the training tokens). Whole blocks of T
        tokens (`calibrate`): a sum of rows / T blocks' counts, with the mean m_i and variance v_i of one
        block's count measured on the training split, mu_i = (rows / T) m_i, sd_i^2 = (rows / T) v_i (text
        is bursty: on Brown, v_i is several times the binomial variance at T = 512; bench notes in git:
        experiments/bench/README.md at efe32f1, heads, trees and n-grams, bursty blocks)."""
        caps = []
        for i, (share, extra) in enumerate(zip(self.cluster_share, self.capacity_extra)):
            if self.block_counts is not None:
                means, variances, tokens = self.block_counts
                mean, var = rows / tokens * means[i], rows / tokens * variances[i]
            else:
                mean = rows * share
                var = mean * (1 - share)
            caps.append(min(rows, math.ceil(mean + 4 * math.sqrt(var)) + 8 + extra))
        return caps

    def calibrate(self, targets: torch.Tensor) -> None:
        """`block_counts` from a sample of the training split's blocks `targets` [U, T] (word ids): the mean
        and variance of each tail cluster's count in one block of T tokens (`capacities`)."""
        cluster = torch.bucketize(self.rank.cpu()[targets.cpu()], self.cutoffs.cpu(), right=True)  # [U, T] 0: shortlist
        per_block = torch.stack([(cluster == i + 1).sum(1) for i in range(len(self.cluster_share))], 1).double()  # [U, n]
        variances = per_block.var(0, correction=1) if len(per_block) > 1 else per_block.new_zeros(per_block.shape[1])
        self.block_counts = (per_block.mean(0).tolist(), variances.tolist(), targets.shape[1])

    @staticmethod
    def spill_rows(rows: int) -> int:
        """Rows over their cluster's capacity that a batch of `rows` still scores exactly, against every
        tail cluster."""
        return min(rows, rows // 256 + 8)

    def _log_prob_capacity(self, features: torch.Tensor, rank: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log P(w | ctx) [B] for ranks `rank` [B] with static shapes and no host sync: the rows sorted by
        cluster; tail cluster i scores the first C_i (`capacities`) of its rows plus the S spill rows
        (`spill_rows`: the first S rows, in sorted order, beyond their cluster's capacity); a row beyond
        both is left out (`dropped` [B], counted in `dropped_rows`; `loss` scores such a batch exactly or
        stops the run). Rows over capacity add to `overflow_rows`."""
        a = self.adaptive
        B = features.shape[0]
        out, cluster = self._head_log_prob(features, rank)  # [B], [B]
        order = torch.argsort(cluster, stable=True)  # [B] rows grouped by cluster: sorted position -> row
        sizes = torch.zeros(len(a.tail) + 1, dtype=torch.long, device=rank.device).scatter_add_(
            0, cluster, torch.ones_like(cluster))  # [n + 1] rows per cluster
        starts = sizes.cumsum(0) - sizes  # [n + 1] each cluster's first sorted position
        sorted_cluster = cluster[order]  # [B]
        position = torch.arange(B, device=rank.device)  # [B]
        within = position - starts[sorted_cluster]  # [B] a sorted row's place in its cluster
        caps, S = self.capacities(B), self.spill_rows(B)
        over = torch.zeros_like(within, dtype=torch.bool)  # [B] sorted rows beyond their cluster's capacity
        for i, cap in enumerate(caps):
            over = over | ((sorted_cluster == i + 1) & (within >= cap))
        spill_place = over.long().cumsum(0) - 1  # [B] place among the overflow rows
        slot = torch.where(over & (spill_place < S), spill_place, S)  # [B] spill slot; S: none
        spill_row = torch.zeros(S + 1, dtype=torch.long, device=rank.device).scatter(0, slot, order)[:S]  # [S]
        spill_used = torch.arange(S, device=rank.device) < over.sum()  # [S]
        for i, (tail, cap) in enumerate(zip(a.tail, caps)):
            lo, hi = a.cutoffs[i], a.cutoffs[i + 1]
            place = torch.arange(cap, device=rank.device)  # [C_i]
            row = torch.cat([order[(starts[i + 1] + place).clamp(max=B - 1)], spill_row])  # [C_i + S]
            mine = torch.cat([place < sizes[i + 1], spill_used & (cluster[spill_row] == i + 1)])  # [C_i + S]
            local = (rank[row] - lo).clamp(0, hi - lo - 1)  # [C_i + S] rank within the cluster
            scores = wide(tail(features.index_select(0, row)))  # [C_i + S, |cluster i|]
            tail_lp = torch.log_softmax(scores, dim=-1).gather(1, local[:, None]).squeeze(1)  # [C_i + S]
            out = out.index_add(0, row, torch.where(mine, tail_lp, torch.zeros_like(tail_lp)))
        dropped = torch.zeros_like(over).scatter(0, order, over & (spill_place >= S))  # [B] rows left unscored
        with torch.no_grad():  # device-side counters, read by `check_training` where the loop syncs anyway
            excess = torch.stack([(sizes[i + 1] - cap).clamp(min=0) for i, cap in enumerate(caps)])  # [n]
            self.overflow_rows += excess
            self.overflow_peak.copy_(torch.maximum(self.overflow_peak, excess))
        return out, dropped

    def check_training(self, epoch_end: bool) -> None:
        """A UserError when training rows were beyond their cluster's capacity and the spill where `loss` could
        not score them exactly (their batch's loss and gradients were NaN: no step of it is kept); at an epoch's
        end a log line counts the batches scored on every cluster instead, and each cluster's capacity grows by
        the most rows it overflowed in one batch."""
        dropped = int(self.dropped_rows)
        if dropped:
            raise UserError(f"head=adaptive: {dropped} training rows were beyond their tail cluster's capacity and "
                            "the spill rows, where the device cannot score them otherwise; no step with them is "
                            "kept (the run stopped before its next checkpoint): resume it with "
                            "head.training_path=all, which scores every cluster for every row")
        if epoch_end:
            if self.fallback_batches:
                log.info("head=adaptive: %d training batches had rows beyond the capacities and the spill; they were "
                         "scored on every cluster (exact), and the capacities grow", self.fallback_batches)
                self.fallback_batches = 0
            self.capacity_extra = [e + p for e, p in zip(self.capacity_extra, self.overflow_peak.tolist())]
            self.overflow_peak.zero_()

    def graph_sizes(self) -> tuple:
        """The capacities' growth from past overflows (`check_training`); the calibration is fixed before training."""
        return tuple(self.capacity_extra)

    def restore_sizes(self, sizes: tuple) -> None:
        if sizes:  # a checkpoint of this head: the capacities it had grown to
            self.capacity_extra = [int(e) for e in sizes]
