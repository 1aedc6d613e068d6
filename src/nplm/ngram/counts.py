"""N-gram statistics of one id stream, counted with numpy, and the shared scoring interface.

Every k-gram (k = 1..n) of a stream w_1..w_L of ids in [0, V) lives in a sorted table per order.
Tables are linked by *prefix index* rather than by a flat mixed-radix key: the key of a k-gram
(w_1..w_k) is

    key_k(w_1..w_k) = index_{k-1}(w_1..w_{k-1}) * V + w_k,        index_1(w) = w,

where index_{k-1} is the row of the (k-1)-gram prefix in the sorted order-(k-1) table. Keys stay
below M_{k-1} * V (M_k = distinct k-grams <= L), so any order fits in int64, including n = 5 where
the flat key V^5 ~ 1.8e21 would not; sorting the keys sorts the k-grams lexicographically. One
`np.unique(..., return_inverse=True)` per order counts a stream (one sort per order, no Python loop)
and its inverse gives each position's index for the next order. Looking up N query k-grams is k
`np.searchsorted` calls on the tables (`chain`), with -1 for "not seen".

`NgramCounts.continuation_counts` gives N1+(. g), the number of distinct words preceding g (the
lower-order counts of Kneser-Ney smoothing, Chen & Goodman 1998, "An Empirical Study of Smoothing
Techniques for Language Modeling", TR-10-98, the Kneser-Ney sections); the stream's first k-gram also
counts its (virtual) start as one distinct left context, as SRILM and KenLM count n-grams after
<s> with their raw counts. With that, every k-gram of the stream has a count >= 1 at every order,
so the tables are closed under prefixes and suffixes (what the ARPA format needs).
"""

from __future__ import annotations

import math

import numpy as np

from nplm.errors import UserError

MAX_ORDER = 5


def check_order(order, what: str = "order") -> int:
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or not 1 <= order <= MAX_ORDER:
        raise UserError(f"{what}={order!r} must be an integer n-gram order from 1 to {MAX_ORDER} (e.g. 3)")
    return int(order)


def as_ids(ids, vocab_size: int, name: str = "ids") -> np.ndarray:
    """A 1-D int64 numpy copy-free view of `ids` (tensor, array or list), every id in [0, vocab_size)."""
    if hasattr(ids, "detach"):  # a torch tensor (torch is not imported here: nplm-mix's flags are checked first)
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise UserError(f"{name} has shape {tuple(arr.shape)}; pass a 1-D stream of token ids")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise UserError(f"{name} has dtype {arr.dtype}; pass integer token ids (e.g. dm.ids['valid'])")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
        raise UserError(f"{name} holds id {bad} outside the vocabulary [0, {vocab_size}); "
                        "encode the text with the model's vocabulary")
    return arr


def ngram_windows(ids: np.ndarray, n: int, context_prefix: np.ndarray | None = None) -> np.ndarray:
    """Rows (w_{t-n+1}, ..., w_{t-1}, w_t) for every t of `ids`: `[L, n]`, -1 before the start.

    `context_prefix` (the previous split's tail) supplies the first tokens' history; without it the
    first tokens get a truncated history (the "start context"), i.e. the lower-order distributions.
    """
    k = n - 1
    prefix = np.zeros(0, np.int64) if context_prefix is None else context_prefix[max(len(context_prefix) - k, 0):]
    if k == 0:
        prefix = np.zeros(0, np.int64)
    padded = np.concatenate([np.full(k - len(prefix), -1, np.int64), prefix, ids])  # [L + k]
    return np.lib.stride_tricks.sliding_window_view(padded, n)  # [L, n] view


def split_context(dm, split: str, n: int) -> np.ndarray | None:
    """The last n-1 ids of the split before `split` when the DataModule's corpus is contiguous (its
    `split` windows start with the previous split's tail, see `LMDataModule.setup`), else None."""
    order = ("train", "valid", "test")
    if split not in order:
        raise UserError(f"split={split!r} is not one of: {', '.join(order)}")
    i = order.index(split)
    if i == 0 or n <= 1 or split not in dm.windows:
        return None
    contiguous = len(dm.windows[split].ids) > len(dm.ids[split])
    previous = dm.ids[order[i - 1]]
    return as_ids(previous[-(n - 1):], len(dm.vocab), f"{order[i - 1]} ids") if contiguous else None


def counts_of_counts(counts: np.ndarray, kmax: int = 4) -> np.ndarray:
    """n_r = number of n-grams with count exactly r, for r = 0..kmax: `[kmax + 1]` (n_0 unused)."""
    return np.bincount(np.minimum(counts, kmax + 1), minlength=kmax + 2)[: kmax + 1].astype(np.int64)


class NgramCounts:
    """Sorted k-gram tables (k = 1..order) of one stream of `num_tokens` ids over `vocab_size` words.

    Order 1 holds every word (keys = arange(V), counts may be 0); orders >= 2 hold the k-grams seen.
    """

    def __init__(self, ids, order: int, vocab_size: int):
        self.order, self.V = check_order(order), int(vocab_size)
        ids = as_ids(ids, self.V, "training ids")
        self.num_tokens = L = len(ids)
        V = self.V
        self.keys: list[np.ndarray | None] = [None, np.arange(V, dtype=np.int64)]  # keys[k]: [M_k]
        self.counts: list[np.ndarray | None] = [None, np.bincount(ids, minlength=V).astype(np.int64)]
        self.first: list[int] = [-1, int(ids[0]) if L else -1]  # row of the stream's first k-gram
        position_index = ids  # [L - k + 1]: row in table k of the k-gram starting at each position
        for k in range(2, self.order + 1):
            m = max(L - k + 1, 0)
            key = position_index[:m] * V + ids[k - 1:]  # [m]
            uniq, inverse, cnt = np.unique(key, return_inverse=True, return_counts=True)
            self.keys.append(uniq.astype(np.int64))
            self.counts.append(cnt.astype(np.int64))
            self.first.append(int(inverse[0]) if m else -1)
            position_index = inverse.reshape(-1).astype(np.int64)
        # suffix[k]: [M_k] row in table k-1 of each k-gram's last k-1 words
        self.suffix: list[np.ndarray | None] = [None, None]
        for k in range(2, self.order + 1):
            prefix, last = self.prefix(k), self.last(k)
            if k == 2:
                self.suffix.append(last.copy())
            else:
                rows = self.lookup(k - 1, self.suffix[k - 1][prefix], last)
                assert (rows >= 0).all(), "a k-gram's suffix must be a seen (k-1)-gram"
                self.suffix.append(rows)

    def size(self, k: int) -> int:
        return len(self.keys[k])

    def prefix(self, k: int) -> np.ndarray:
        """Row in table k-1 of each k-gram's first k-1 words: `[M_k]`."""
        return self.keys[k] // self.V

    def last(self, k: int) -> np.ndarray:
        """Last word of each k-gram: `[M_k]`."""
        return self.keys[k] % self.V

    def lookup(self, k: int, parent: np.ndarray, word: np.ndarray) -> np.ndarray:
        """Row in table k of the k-grams (prefix row `parent` in table k-1, then `word`), -1 if unseen."""
        if k == 1:
            return np.where(word >= 0, word, -1)
        table = self.keys[k]
        key = parent * self.V + word  # [N]
        pos = np.searchsorted(table, key)  # [N]
        safe = np.minimum(pos, max(len(table) - 1, 0))
        found = (parent >= 0) & (word >= 0) & (pos < len(table))
        if len(table):
            found &= table[safe] == key
        return np.where(found, pos, -1)

    def chain(self, grams: np.ndarray) -> list[np.ndarray]:
        """Rows of grams[:, :j] in table j for j = 1..width: a list of `[N]` arrays (-1: unseen)."""
        rows = [self.lookup(1, None, grams[:, 0])]
        for j in range(2, grams.shape[1] + 1):
            rows.append(self.lookup(j, rows[-1], grams[:, j - 1]))
        return rows

    def continuation_counts(self, k: int) -> np.ndarray:
        """N1+(. g) for every k-gram g of table k, k < order: distinct left neighbours (+1 for the
        stream's first k-gram, whose left neighbour is the start): `[M_k]` int64."""
        if not 1 <= k < self.order:
            raise ValueError(f"continuation counts need 1 <= k < order={self.order}, got {k}")
        cont = np.bincount(self.suffix[k + 1], minlength=self.size(k)).astype(np.int64)
        if self.first[k] >= 0:
            cont[self.first[k]] += 1
        return cont

    def context_sums(self, k: int, values: np.ndarray) -> np.ndarray:
        """Sum of `values` [M_k] over the k-grams sharing each (k-1)-gram prefix: `[M_{k-1}]`."""
        return np.bincount(self.prefix(k), weights=values, minlength=self.size(k - 1))

    def words(self, k: int) -> np.ndarray:
        """The k words of every k-gram of table k: `[M_k, k]`."""
        if k == 1:
            return self.keys[1][:, None]
        return np.concatenate([self.words(k - 1)[self.prefix(k)], self.last(k)[:, None]], axis=1)


class NgramLanguageModel:
    """Per-token scoring shared by the n-gram models; subclasses set `order`, `V` and `_log_probs`."""

    order: int
    V: int

    def _log_probs(self, grams: np.ndarray) -> np.ndarray:
        """ln p(w_t | history) for rows (history..., w_t) of `grams` [N, order] (-1: no word): `[N]`."""
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if getattr(self, "counts", None) is None:
            raise UserError(f"{type(self).__name__} is not fitted; call .fit(train_ids, ...) first")

    def score(self, ids, context_prefix=None) -> np.ndarray:
        """Natural-log probability of every token of `ids`: `[L]` float64. The first tokens' history
        comes from `context_prefix` (e.g. the previous split's tail, `split_context`), else is truncated."""
        self._check_fitted()
        ids = as_ids(ids, self.V)
        prefix = None if context_prefix is None else as_ids(context_prefix, self.V, "context_prefix")
        return self._log_probs(ngram_windows(ids, self.order, prefix))

    def perplexity(self, ids, context_prefix=None) -> float:
        """exp(-mean ln p) over the tokens of `ids`."""
        lp = self.score(ids, context_prefix)
        if len(lp) == 0:
            raise UserError("cannot compute the perplexity of an empty id stream; pass at least one token")
        return math.exp(-float(lp.mean()))

    def log_probs_for_context(self, context_ids) -> np.ndarray:
        """ln p(w | context) for every word w of the vocabulary: `[V]`. The last order-1 ids of
        `context_ids` are the history (fewer: a truncated, start-of-text history)."""
        self._check_fitted()
        context = as_ids(context_ids, self.V, "context_ids")
        k = self.order - 1
        context = context[max(len(context) - k, 0):] if k else context[:0]
        history = np.concatenate([np.full(k - len(context), -1, np.int64), context])  # [k]
        grams = np.concatenate([np.broadcast_to(history, (self.V, k)),
                                np.arange(self.V, dtype=np.int64)[:, None]], axis=1)  # [V, order]
        return self._log_probs(grams)
