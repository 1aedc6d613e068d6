"""Class-based n-gram model: a Kneser-Ney n-gram over word classes times a class-membership unigram.

Brown, deSouza, Mercer, Della Pietra & Lai (1992), "Class-based n-gram models of natural language"
(Computational Linguistics 18(4)), section 3; the "class-based back-off n = 3" rows of Bengio,
Ducharme, Vincent & Jauvin (2003), "A Neural Probabilistic Language Model" (JMLR 3), section 4 and
table 1 (150, 200, 500, 1000 and 2000 classes). Every word w belongs to exactly one class c(w), and

    P(w_t | w_{t-n+1} .. w_{t-1}) = P(c(w_t) | c(w_{t-n+1}) .. c(w_{t-1})) * P(w_t | c(w_t)).

- The classes: the exchange algorithm of `nplm.trees.brown` (`flat_classes`: C classes maximising the
  average mutual information of adjacent classes in the training bigrams, a few sweeps), or a given
  assignment (`fit(..., classes=...)`). With C >= V every word is its own class.
- Words seen fewer than `min_count` times in training (default 2: the words seen once, and the
  vocabulary words never seen, when the vocabulary is counted on the whole corpus) are pooled after the
  clustering, in the class of the least frequent word (`pool_rare_words`). As in Good-Turing
  estimation, the words seen once stand for the words never seen, so the unseen words get the mass and
  the contexts of rare words. The exchange alone moves nearly every seen word out of the class the unseen
  words start in: with many classes that class keeps many words but few training tokens, and the validation
  tokens unseen in training cost more than under the word trigram (experiments/bengio2003/INTRO.md has the
  perplexities with and without pooling).
- P(c_t | class history): modified Kneser-Ney (`KneserNey`, back-off by default, as the paper's rows;
  or interpolated) of the given order, fitted on the training stream mapped to class ids.
- P(w | c): training counts n(w), additively smoothed within the class so that vocabulary words never
  seen in training keep a probability > 0:

      P(w | c) = (n(w) + a) / (n(c) + a |c|),    n(c) = sum_{v in c} n(v),  |c| = words in class c,

  with a = `word_smoothing` (default 1, add-one). A class of one word gets P(w | c) = 1.
  `replication.class_ngram` picks a on the validation split.

Both factors are distributions (each class id in 0..C-1 holds at least one word), so the product
sums to 1 over the vocabulary for every history.
"""

from __future__ import annotations

import copy
import time

import numpy as np

from nplm.errors import UserError
from nplm.ngram.counts import NgramLanguageModel, as_ids, check_order
from nplm.ngram.kneser_ney import KneserNey
from nplm.trees.brown import Bigrams, class_bigrams, flat_classes, xlogx


def pool_rare_words(classes: np.ndarray, word_counts: np.ndarray, min_count: int) -> np.ndarray:
    """Classes [V] with every word seen fewer than `min_count` times (`word_counts` [V]) moved into the
    class of the least frequent word, renumbered 0..C'-1 in order (a class left empty disappears)."""
    rare = word_counts < min_count  # [V]
    if not rare.any():
        return classes
    pooled = classes.copy()
    pooled[rare] = classes[np.argmin(word_counts)]
    return np.unique(pooled, return_inverse=True)[1].reshape(-1)


def _is_int(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, np.integer))


def _checked_smoothing(word_smoothing) -> float:
    if isinstance(word_smoothing, bool) or not isinstance(word_smoothing, (int, float)) or not word_smoothing > 0:
        raise UserError(f"word_smoothing={word_smoothing!r} must be a number > 0 "
                        "(added to every word's count inside its class, e.g. 1)")
    return float(word_smoothing)


class ClassNgram(NgramLanguageModel):
    """Class n-gram over ids in [0, V): `fit(train_ids, V)` clusters the words into `num_classes`
    classes (or takes `classes=`), then `score(ids, context_prefix=...)` like `KneserNey`."""

    def __init__(self, order: int = 3, num_classes: int = 500, interpolate: bool = False, sweeps: int = 10,
                 word_smoothing: float = 1.0, min_count: int = 2):
        self.order = check_order(order)
        if not _is_int(num_classes) or num_classes < 2:
            raise UserError(f"num_classes={num_classes!r} must be an integer >= 2 "
                            "(Bengio et al. 2003 used 150 to 2000)")
        if not _is_int(sweeps) or sweeps < 0:
            raise UserError(f"sweeps={sweeps!r} must be an integer >= 0 (exchange-algorithm passes, e.g. 10)")
        if not _is_int(min_count) or min_count < 0:
            raise UserError(f"min_count={min_count!r} must be an integer >= 0 (words seen fewer times are "
                            "pooled in one class; 0 keeps the clusters as they are, e.g. 2)")
        self.num_classes, self.sweeps, self.min_count = int(num_classes), int(sweeps), int(min_count)
        self.interpolate, self.word_smoothing = bool(interpolate), _checked_smoothing(word_smoothing)
        self.class_model: KneserNey | None = None

    @property
    def name(self) -> str:
        C = self.num_classes if self.class_model is None else self.C  # after fit: the classes in use
        return f"class{C}_kn{self.order}_{'interpolated' if self.interpolate else 'backoff'}"

    def _check_fitted(self) -> None:
        if self.class_model is None:
            raise UserError("ClassNgram is not fitted; call .fit(train_ids, vocab_size) first")

    def fit(self, train_ids, vocab_size: int, classes=None) -> "ClassNgram":
        """Cluster and pool the rare words (unless `classes` [V], a class label per word id, is given: then
        used as they are, renumbered 0..C-1 in sorted order, so unused labels take no mass), then count."""
        start = time.perf_counter()
        if not _is_int(vocab_size) or vocab_size < 1:
            raise UserError(f"vocab_size={vocab_size!r} must be a positive integer (len(dm.vocab))")
        self.V = V = int(vocab_size)
        ids = as_ids(train_ids, V, "training ids")  # [L]
        if len(ids) < self.order + 1:
            raise UserError(f"the training stream has {len(ids)} tokens but order={self.order} needs at "
                            f"least {self.order + 1}; use more text or a lower order")
        word_counts = np.bincount(ids, minlength=V).astype(np.int64)  # [V] n(w)
        bg = Bigrams(ids, V)
        if classes is None:
            assign = flat_classes(bg, word_counts, min(self.num_classes, V), self.sweeps)  # [V]
            assign = pool_rare_words(assign, word_counts, self.min_count)
        else:
            labels = np.asarray(classes.detach().cpu().numpy() if hasattr(classes, "detach") else classes)
            if labels.shape != (V,) or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
                raise UserError(f"classes has shape {labels.shape} and dtype {labels.dtype}; pass one integer "
                                f"class label per word: shape ({V},)")
            assign = np.unique(labels, return_inverse=True)[1].reshape(-1)
        self.classes = assign.astype(np.int64)  # [V] class of every word id
        self.C = C = int(self.classes.max()) + 1
        self.cluster_seconds = time.perf_counter() - start

        self.class_model = KneserNey(self.order, self.interpolate).fit(self.classes[ids], C)
        self.word_counts = word_counts
        self.class_counts = np.bincount(self.classes, weights=word_counts, minlength=C)  # [C] n(c)
        self.class_sizes = np.bincount(self.classes, minlength=C)  # [C] |c|
        self.log_p_word = self._log_p_word()  # [V]
        M = class_bigrams(bg, self.classes, C)  # [C, C] class bigram counts
        total = M.sum()
        self.ami_bits = float((xlogx(M).sum() - xlogx(M.sum(1)).sum() - xlogx(M.sum(0)).sum()) / total
                              + np.log(total)) / np.log(2.0)
        self.fit_seconds = time.perf_counter() - start
        return self

    def _log_p_word(self) -> np.ndarray:
        """ln P(w | c(w)) for every word id: `[V]`."""
        a = self.word_smoothing
        return np.log((self.word_counts + a) / (self.class_counts + a * self.class_sizes)[self.classes])

    def with_word_smoothing(self, word_smoothing: float) -> "ClassNgram":
        """A copy with another a in P(w | c) that shares the fitted classes and class model, so that
        choosing a on validation needs one fit, not one per a."""
        self._check_fitted()
        other = copy.copy(self)
        other.word_smoothing = _checked_smoothing(word_smoothing)
        other.log_p_word = other._log_p_word()  # [V]
        return other

    def _log_probs(self, grams: np.ndarray) -> np.ndarray:
        """ln p(w_t | history) for rows (history..., w_t) of `grams` [N, order] (-1: no word): `[N]`."""
        class_grams = np.where(grams >= 0, self.classes[np.maximum(grams, 0)], -1)  # [N, order]
        return self.class_model._log_probs(class_grams) + self.log_p_word[grams[:, -1]]  # [N]

    def summary(self) -> dict:
        """Sizes, clustering quality and timings, for logs and reports."""
        self._check_fitted()
        return {"name": self.name, "order": self.order, "interpolate": self.interpolate, "vocab_size": self.V,
                "num_classes": self.num_classes, "classes": self.C, "sweeps": self.sweeps, "min_count": self.min_count,
                "word_smoothing": self.word_smoothing, "train_tokens": int(self.word_counts.sum()),
                "words_unseen_in_training": int((self.word_counts == 0).sum()),
                "largest_class": int(self.class_sizes.max()), "class_bigram_ami_bits": round(self.ami_bits, 6),
                "cluster_seconds": round(self.cluster_seconds, 3), "fit_seconds": round(self.fit_seconds, 3),
                "class_model": self.class_model.summary()}
