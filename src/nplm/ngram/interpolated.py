"""Deleted-interpolation (Jelinek-Mercer) trigram, the count-based baseline of Bengio et al. (2003).

Jelinek & Mercer (1980), "Interpolated estimation of Markov source parameters from sparse data":

    p(w | u, v) = l3(b) p_ML(w | u, v) + l2(b) p_ML(w | v) + l1(b) p_ML(w) + l0(b) / V,

    p_ML(w | u, v) = c(u v w) / c(u v .),   p_ML(w | v) = c(v w) / c(v .),   p_ML(w) = c(w) / L,

with one weight vector l(b) = (l3, l2, l1, l0), summing to 1, per bin b of the history count
c(u v .): bin 0 holds histories whose last word v was never followed by anything in training
(l3 = l2 = 0: those estimates are undefined), bin 1 those with c(u v .) = 0 < c(v .) (l3 = 0), and
bin 2 + floor(log_base c(u v .)) the seen ones ("contexts of similar frequency share weights",
Bengio et al. 2003, section 4.1). The weights are fitted by EM on held-out (validation) text:

    E: r_ij = l_j(b_i) p_j(t_i) / sum_j' l_j'(b_i) p_j'(t_i)     M: l_j(b) = mean of r_ij over tokens i in bin b,

which never decreases the held-out likelihood (`valid_log_likelihood` records it per iteration).
Bins without held-out tokens keep the uniform initial weights over their allowed components.
"""

from __future__ import annotations

import math

import numpy as np

from nplm.errors import UserError
from nplm.ngram.counts import NgramCounts, NgramLanguageModel, as_ids, ngram_windows

COMPONENTS = ("trigram", "bigram", "unigram", "uniform")


class DeletedInterpolationTrigram(NgramLanguageModel):
    """`fit(train_ids, valid_ids, V)` counts on train and fits the lambdas by EM on valid."""

    order = 3
    name = "deleted_interpolation3"

    def __init__(self, bin_base: float = 2.0, max_iter: int = 200, tol: float = 1e-7):
        if not isinstance(bin_base, (int, float)) or not bin_base > 1:
            raise UserError(f"bin_base={bin_base!r} must be a number > 1 "
                            "(the ratio between context-count bins, e.g. 2)")
        if not isinstance(max_iter, int) or max_iter < 1:
            raise UserError(f"max_iter={max_iter!r} must be an integer >= 1 (EM iterations, e.g. 200)")
        self.bin_base, self.max_iter, self.tol = float(bin_base), max_iter, float(tol)
        self.counts: NgramCounts | None = None

    def fit(self, train_ids, valid_ids, vocab_size: int, valid_prefix=None) -> "DeletedInterpolationTrigram":
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
            raise UserError(f"vocab_size={vocab_size!r} must be a positive integer (len(dm.vocab))")
        self.V = V = int(vocab_size)
        train = as_ids(train_ids, V, "training ids")
        valid = as_ids(valid_ids, V, "validation ids")
        if len(train) < 3:
            raise UserError(f"the training stream has {len(train)} tokens; a trigram model needs at least 3")
        if len(valid) == 0:
            raise UserError("the validation stream is empty; the lambdas are fitted by EM on held-out ids")
        counts = NgramCounts(train, 3, V)
        self.unigram = counts.counts[1] / float(len(train))  # [V] p_ML(w)
        self.bigram_totals = counts.context_sums(2, counts.counts[2].astype(np.float64))  # [V] c(v .)
        self.trigram_totals = counts.context_sums(3, counts.counts[3].astype(np.float64))  # [M_2] c(u v .)
        top = max(float(self.trigram_totals.max(initial=1.0)), 1.0)
        self.num_bins = 3 + int(math.floor(math.log(top, self.bin_base) + 1e-9))
        self.allowed = np.ones((self.num_bins, 4), dtype=bool)  # [B, 4] components usable per bin
        self.allowed[0, :2] = False
        self.allowed[1, 0] = False
        self.counts = counts
        prefix = None if valid_prefix is None else as_ids(valid_prefix, V, "valid_prefix")
        comps, bins = self._components(ngram_windows(valid, 3, prefix))
        self.lambdas = self.allowed / self.allowed.sum(axis=1, keepdims=True)  # [B, 4]
        self.valid_log_likelihood: list[float] = []  # mean ln p per validation token, per EM iteration
        self._em(comps, bins)
        return self

    def _components(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The four estimates for rows (u, v, w) of `grams` [N, 3]: `[N, 4]`, and each row's bin `[N]`."""
        counts = self.counts
        rows = counts.chain(grams)  # [u], [u v], [u v w] rows (-1: unseen)
        rows_vw = counts.chain(grams[:, 1:])  # [v], [v w]
        w, v = grams[:, 2], grams[:, 1]
        ctx3 = np.where(rows[1] >= 0, self.trigram_totals[np.maximum(rows[1], 0)], 0.0)  # [N] c(u v .)
        ctx2 = np.where(v >= 0, self.bigram_totals[np.maximum(v, 0)], 0.0)  # [N] c(v .)
        c3 = np.where(rows[2] >= 0, counts.counts[3][np.maximum(rows[2], 0)], 0)  # [N]
        c2 = np.where(rows_vw[1] >= 0, counts.counts[2][np.maximum(rows_vw[1], 0)], 0)  # [N]
        comps = np.empty((len(grams), 4))  # [N, 4]
        comps[:, 0] = c3 / np.maximum(ctx3, 1.0)
        comps[:, 1] = c2 / np.maximum(ctx2, 1.0)
        comps[:, 2] = self.unigram[w]
        comps[:, 3] = 1.0 / self.V
        log_bin = np.floor(np.log(np.maximum(ctx3, 1.0)) / math.log(self.bin_base) + 1e-9).astype(np.int64)
        bins = np.where(ctx2 == 0, 0, np.where(ctx3 == 0, 1, np.minimum(2 + log_bin, self.num_bins - 1)))
        return comps, bins

    def _em(self, comps: np.ndarray, bins: np.ndarray) -> None:
        B = self.num_bins
        tokens_per_bin = np.bincount(bins, minlength=B).astype(np.float64)  # [B]
        previous = -math.inf
        for _ in range(self.max_iter + 1):
            mix = comps * self.lambdas[bins]  # [N, 4]
            p = mix.sum(axis=1)  # [N]
            ll = float(np.log(p).mean())
            self.valid_log_likelihood.append(ll)
            if ll - previous < self.tol or len(self.valid_log_likelihood) > self.max_iter:
                break
            previous = ll
            post = mix / p[:, None]  # [N, 4] responsibilities
            sums = np.stack([np.bincount(bins, weights=post[:, j], minlength=B) for j in range(4)], axis=1)
            has = tokens_per_bin > 0
            self.lambdas[has] = sums[has] / tokens_per_bin[has, None]

    def _log_probs(self, grams: np.ndarray) -> np.ndarray:
        comps, bins = self._components(grams)
        return np.log((comps * self.lambdas[bins]).sum(axis=1))  # [N]

    def summary(self) -> dict:
        self._check_fitted()
        return {"name": self.name, "order": 3, "vocab_size": self.V, "train_tokens": self.counts.num_tokens,
                "num_bins": self.num_bins, "em_iterations": len(self.valid_log_likelihood) - 1,
                "lambdas": {COMPONENTS[j]: [round(float(x), 6) for x in self.lambdas[:, j]] for j in range(4)}}
