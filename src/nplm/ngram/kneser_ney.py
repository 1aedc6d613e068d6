"""Modified Kneser-Ney smoothing, interpolated or back-off, orders 1-5.

Chen & Goodman (1998), "An Empirical Study of Smoothing Techniques for Language Modeling" (TR-10-98),
modified Kneser-Ney. For a history h = w_{i-k+1}..w_{i-1} of order k and its shortened history h':

    interpolated (SRILM `-kndiscount -interpolate`):
        p_k(w | h) = max(c_k(h w) - D_k(c_k(h w)), 0) / c_k(h .) + gamma_k(h) p_{k-1}(w | h')
    back-off (SRILM `-kndiscount`):
        p_k(w | h) = (c_k(h w) - D_k(c_k(h w))) / c_k(h .)              if c_k(h w) > 0
                   = bow_k(h) p_{k-1}(w | h')                           otherwise
        bow_k(h)   = gamma_k(h) / (1 - sum_{w: c_k(h w) > 0} p_{k-1}(w | h'))

    gamma_k(h) = (D_k1 N_1(h .) + D_k2 N_2(h .) + D_k3+ N_3+(h .)) / c_k(h .)
    D_k(c)     = 0, D_k1, D_k2, D_k3+ for c = 0, 1, 2, >= 3

c_n are raw counts at the highest order n; below it c_k(h w) = N1+(. h w), the continuation counts
(`NgramCounts.continuation_counts`); c_k(h .) = sum_w c_k(h w); N_r(h .) = #{w : c_k(h w) = r}. An
unseen history (c_k(h .) = 0) uses p_{k-1} unchanged. The unigram level is interpolated with the
uniform distribution over the V words, p_0(w) = 1/V, in both variants, so `<unk>` and words absent
from training get probability > 0. Discounts come from each order's counts-of-counts n_r
(of c_k, so of continuation counts below the top order):

    Y = n_1 / (n_1 + 2 n_2),  D_k1 = 1 - 2 Y n_2 / n_1,  D_k2 = 2 - 3 Y n_3 / n_2,  D_k3+ = 3 - 4 Y n_4 / n_3.

An estimate outside (0, r) (tiny corpora, e.g. n_2 = 0) is replaced by `discount_fallback[r-1]`,
KenLM's `--discount_fallback` default (0.5, 1, 1.5); `fallback_used` records it.

Both variants are stored as in an ARPA file: p_k(w | h) for every seen (h, w) and bow_k(h) per
history (interpolated: bow_k = gamma_k, exact since p_k = gamma_k p_{k-1} for unseen w). Scoring a
token walks down from the longest seen n-gram adding log back-off weights (`_log_probs`), vectorised
over tokens with `np.searchsorted` lookups. A back-off history followed by all V words has no mass
to back off with: its seen probabilities are renormalised and bow = 0.

Count cutoffs (`min_counts`, SRILM's `ngram-count -gtNmin`). A k-gram with level count c_k(h w) below
`min_counts[k-1]` is not kept: it gets no discounted estimate of its own, its whole count goes to the
back-off mass, and the back-off weight is recomputed over the kept k-grams K(h) only (as SRILM's
`computeBOW` does), so every distribution still sums to 1:

    back-off:      bow_k(h) = (1 - sum_{w in K(h)} p_k(w | h)) / (1 - sum_{w in K(h)} p_{k-1}(w | h'))
                            = (gamma_k(h) + R_k(h)) / (1 - S_k(h))
    interpolated:  bow_k(h) = gamma_k(h) + R_k(h) / (1 - S_k(h))
    R_k(h) = sum_{w seen, not kept} (c_k(h w) - D_k(c_k(h w))) / c_k(h .),   S_k(h) = sum_{w in K(h)} p_{k-1}(w | h')

and a dropped k-gram scores bow_k(h) p_{k-1}(w | h') exactly like an unseen one (it stays in the tables
with that value, as SRILM's `fixupProbs` lists missing prefixes, so ARPA export and lookups are
unchanged; an ARPA file just lists more n-grams than SRILM's). With no cutoff (all 1) R = 0 and the
formulas above reduce to the ones without cutoffs. `min_counts="srilm"` is `ngram-count`'s default,
(1, 1, 2, 2, 2)[:order]: unigrams and bigrams keep everything, singletons of order >= 3 are dropped.
The unigram cutoff must be 1 (every word keeps its own estimate).

As in SRILM, the cutoff is applied to the counts the level is estimated from, c_k: raw counts at the
top order, continuation counts below it (SRILM's `KneserNey::prepareCounts` replaces the lower-order
counts before `ModKneserNey::discount` compares them with the cutoff). Everything else uses the counts
*before* the cutoff: the discounts D_k1, D_k2, D_k3+ (SRILM's `ModKneserNey::estimate` tabulates
n_1..n_4 over all counts; over the kept ones n_1 = 0 and the estimates are undefined), gamma_k (SRILM
counts every seen follower in N_1, N_2, N_3+) and the continuation counts of the lower orders
(`prepareCounts` counts every (k+1)-gram seen, kept or not). These SRILM details are from its source
as remembered, not re-read here. Compared on Brown (back-off, n = 3, 4 and 5, test perplexity): the
continuation counts over the kept (k+1)-grams only are far worse (most k-grams lose every left context);
the cutoff on raw counts at every order is slightly worse at n = 4 and 5; discounts from the kept counts
(= the fallback 0.5/1/1.5) come as close, but only because the fallback happens to suit Brown (this
choice's rows: experiments/bengio2003/README.md; the perplexities without cutoffs: bench notes in git:
experiments/bench/README.md at efe32f1, heads, trees and n-grams). SRILM's back-off unigram differs
too: it gives the unigram left-over mass to the zero-count vocabulary words only (its `distributeProb`)
where this module interpolates with 1/V; on Brown (777 of the 17,905 words unseen in train) the two
differ by a few points of perplexity.
"""

from __future__ import annotations

import numpy as np

from nplm.errors import UserError
from nplm.ngram.counts import NgramCounts, NgramLanguageModel, as_ids, check_order, counts_of_counts

KENLM_FALLBACK = (0.5, 1.0, 1.5)
SRILM_MIN_COUNTS = (1, 1, 2, 2, 2)  # ngram-count's default -gt1min .. -gt5min
MIN_COUNT_PRESETS = {"srilm": SRILM_MIN_COUNTS}


def check_min_counts(min_counts, order: int) -> tuple[int, ...]:
    """Per-order cutoffs `[order]` from `min_counts`: None (keep every n-gram), a preset name
    ("srilm") or `order` integers >= 1, the first (unigrams) 1."""
    if min_counts is None:
        return (1,) * order
    if isinstance(min_counts, str):
        preset = MIN_COUNT_PRESETS.get(min_counts.strip().lower())
        if preset is None:
            raise UserError(f"min_counts={min_counts!r} is not a preset; use one of: "
                            f"{', '.join(MIN_COUNT_PRESETS)}, None, or {order} integer cutoffs")
        return tuple(preset[:order])
    try:
        values = tuple(min_counts)
    except TypeError:
        values = None
    if (values is None or len(values) != order
            or not all(isinstance(m, (int, np.integer)) and not isinstance(m, bool) and m >= 1 for m in values)
            or values[0] != 1):
        shown = " ".join(repr(min_counts.tolist() if isinstance(min_counts, np.ndarray) else min_counts).split())
        raise UserError(f"min_counts={shown} must be {order} integer cutoffs >= 1, one per order 1..{order}, "
                        f"the unigram one 1 (e.g. {SRILM_MIN_COUNTS[:order]!r}, or 'srilm')")
    return tuple(int(m) for m in values)


def modified_kn_discounts(n: np.ndarray, fallback=KENLM_FALLBACK) -> tuple[np.ndarray, bool]:
    """(D_1, D_2, D_3+) `[3]` from counts-of-counts `n` [>= 5] (n[r] = #n-grams with count r), and
    whether any came from `fallback` because the estimate was undefined or outside (0, r)."""
    n1, n2 = float(n[1]), float(n[2])
    y = n1 / (n1 + 2.0 * n2) if n1 + 2.0 * n2 > 0 else 0.0
    d = np.zeros(3)
    used = False
    for r in (1, 2, 3):
        est = r - (r + 1) * y * float(n[r + 1]) / float(n[r]) if n[r] > 0 else np.nan
        if not 0.0 < est < r:
            est, used = float(fallback[r - 1]), True
        d[r - 1] = est
    return d, used


class KneserNey(NgramLanguageModel):
    """Modified Kneser-Ney n-gram model over ids in [0, V). `fit(train_ids, V)`, then `score(ids)`.

    `min_counts`: count cutoffs per order (see the module docstring): None keeps every n-gram,
    "srilm" is SRILM ngram-count's default (1, 1, 2, 2, 2)[:order], or pass `order` integers."""

    def __init__(self, order: int = 3, interpolate: bool = True, discount_fallback=KENLM_FALLBACK,
                 min_counts=None):
        self.order = check_order(order)
        self.min_counts = check_min_counts(min_counts, self.order)
        if len(discount_fallback) != 3 or not all(0 < d < r for r, d in zip((1, 2, 3), discount_fallback)):
            raise UserError(f"discount_fallback={tuple(discount_fallback)!r} must be 3 discounts with "
                            "0 < D1 < 1, 0 < D2 < 2, 0 < D3+ < 3 (e.g. (0.5, 1.0, 1.5))")
        self.interpolate = bool(interpolate)
        self.discount_fallback = tuple(float(d) for d in discount_fallback)
        self.counts: NgramCounts | None = None

    @property
    def name(self) -> str:
        cutoffs = "" if self.min_counts == (1,) * self.order else "_min" + "-".join(map(str, self.min_counts))
        return f"kn{self.order}_{'interpolated' if self.interpolate else 'backoff'}{cutoffs}"

    def fit(self, train_ids, vocab_size: int) -> "KneserNey":
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
            raise UserError(f"vocab_size={vocab_size!r} must be a positive integer (len(dm.vocab))")
        self.V = V = int(vocab_size)
        ids = as_ids(train_ids, V, "training ids")
        if len(ids) < self.order + 1:
            raise UserError(f"the training stream has {len(ids)} tokens but order={self.order} needs at "
                            f"least {self.order + 1}; use more text or a lower order")
        counts = NgramCounts(ids, self.order, V)
        n = self.order
        # level counts c_k: raw at the top order, continuation counts below
        self.level_counts = [None] + [counts.counts[k] if k == n else counts.continuation_counts(k)
                                      for k in range(1, n + 1)]
        self.discounts, self.fallback_used = [None], [None]
        for k in range(1, n + 1):
            d, used = modified_kn_discounts(counts_of_counts(self.level_counts[k]), self.discount_fallback)
            self.discounts.append(d)
            self.fallback_used.append(used)
        self.log_p: list[np.ndarray | None] = [None]  # log_p[k]: [M_k] ln p_k(w | h) of table k's k-grams
        self.log_bow: list[np.ndarray | None] = [None, None]  # log_bow[k]: [M_{k-1}] ln bow_k(h)
        self.kept: list[np.ndarray | None] = [None, None]  # kept[k]: [M_k] bool, c_k >= min_counts[k-1]

        c1 = self.level_counts[1].astype(np.float64)  # [V]
        total = c1.sum()
        d1 = self._discount(1, self.level_counts[1])  # [V]
        gamma = d1.sum() / total
        self.log_p.append(np.log(np.maximum(c1 - d1, 0.0) / total + gamma / V))
        for k in range(2, n + 1):
            self._fit_level(counts, k)
        self.counts = counts
        return self

    def _discount(self, k: int, c: np.ndarray) -> np.ndarray:
        """D_k(c) for counts `c` [M]: `[M]` float64 (0 where c = 0)."""
        table = np.concatenate([[0.0], self.discounts[k]])  # [4]: D(0), D1, D2, D3+
        return table[np.minimum(c, 3)]

    def _fit_level(self, counts: NgramCounts, k: int) -> None:
        c = self.level_counts[k]  # [M_k]
        prefix = counts.prefix(k)  # [M_k] history rows in table k-1
        d = self._discount(k, c)  # [M_k]
        kept = c >= self.min_counts[k - 1]  # [M_k]
        total = counts.context_sums(k, c.astype(np.float64))  # [M_{k-1}] c_k(h .)
        seen = total > 0  # [M_{k-1}] histories followed by something
        safe_total = np.where(seen, total, 1.0)
        gamma = np.where(seen, counts.context_sums(k, d) / safe_total, 1.0)  # [M_{k-1}]
        dropped = np.where(seen, counts.context_sums(k, np.where(kept, 0.0, c - d)) / safe_total, 0.0)  # R_k(h)
        p_disc = (c - d) / safe_total[prefix]  # [M_k]
        p_lower = np.exp(self.log_p[k - 1][counts.suffix[k]])  # [M_k] p_{k-1}(w | h')
        denom = 1.0 - counts.context_sums(k, np.where(kept, p_lower, 0.0))  # [M_{k-1}] 1 - S_k(h)
        if self.interpolate:
            p = p_disc + gamma[prefix] * p_lower
            bow = gamma + np.where(dropped > 0, dropped / np.where(denom > 0, denom, 1.0), 0.0)
        else:
            followers = np.bincount(prefix[kept], minlength=counts.size(k - 1))  # [M_{k-1}] kept ones
            full = followers == self.V  # nothing left to back off to (then nothing was dropped either)
            bow = np.where(seen & ~full, (gamma + dropped) / np.where(full | (denom <= 0), 1.0, denom), 1.0)
            bow[full] = 0.0
            p = p_disc / np.where(full, 1.0 - gamma, 1.0)[prefix]
        p = np.where(kept, p, bow[prefix] * p_lower)  # a dropped k-gram scores as an unseen one
        self.kept.append(kept)
        self.log_p.append(np.log(p))
        with np.errstate(divide="ignore"):
            self.log_bow.append(np.log(bow))

    def _log_probs(self, grams: np.ndarray) -> np.ndarray:
        """ln p(w_t | history) for rows `grams` [N, n] (-1 = before the start): `[N]` float64."""
        counts, n = self.counts, self.order
        N = grams.shape[0]
        out = np.zeros(N)  # [N]
        done = np.zeros(N, dtype=bool)  # [N] longest seen n-gram found
        for k in range(n, 0, -1):
            rows = counts.chain(grams[:, n - k:])  # rows[j-1]: [N] row of grams[:, n-k : n-k+j] in table j
            gram = rows[k - 1]  # the k-gram ending at the target
            hit = ~done & (gram >= 0)
            out[hit] += self.log_p[k][gram[hit]]
            done |= hit
            if k >= 2:
                history = rows[k - 2]  # its (k-1)-word history
                miss = ~done & (history >= 0)
                out[miss] += self.log_bow[k][history[miss]]
        return out

    def summary(self) -> dict:
        """Discounts and table sizes per order, for logs and reports."""
        self._check_fitted()
        return {"name": self.name, "order": self.order, "interpolate": self.interpolate, "vocab_size": self.V,
                "train_tokens": self.counts.num_tokens, "min_counts": list(self.min_counts),
                **{f"ngrams_{k}": self.counts.size(k) for k in range(1, self.order + 1)},
                **{f"kept_ngrams_{k}": int(self.kept[k].sum()) for k in range(2, self.order + 1)},
                **{f"discounts_{k}": [round(float(x), 6) for x in self.discounts[k]] for k in range(1, self.order + 1)},
                "discount_fallback_used": [k for k in range(1, self.order + 1) if self.fallback_used[k]]}
