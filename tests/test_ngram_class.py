"""Class-based n-gram model (`nplm.ngram.ClassNgram`): P(w | h) = P(c(w) | c(h)) P(w | c(w))."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
import torch

from nplm.errors import UserError
from nplm.ngram import KneserNey
from nplm.ngram.class_based import ClassNgram

V = 29
UNK = V - 1  # never occurs in training
# HAND of tests/test_ngram.py with some 1s written as word 6 and some 4s as word 5; word 7 never occurs
HAND_WORDS = [2, 1, 4, 5, 3, 6, 1, 1, 4, 3, 2, 2, 1, 6, 5, 1, 4]
HAND_CLASSES = [0, 1, 2, 3, 4, 4, 1, 4]  # the class stream is HAND itself (classes 0..4)


def two_topic_stream(length: int, seed: int) -> np.ndarray:
    """Ids 0..27 (= V-2) from a Markov chain whose words fall into 4 groups of 7 that follow each other in turn."""
    rng = np.random.default_rng(seed)
    out = [0]
    for _ in range(length - 1):
        group = (out[-1] // 7 + 1) % 4 if rng.random() < 0.85 else rng.integers(0, 4)
        out.append(int(group * 7 + rng.integers(0, 7)))
    return np.array(out, dtype=np.int64)


TRAIN = two_topic_stream(1500, seed=1)
VALID = np.concatenate([two_topic_stream(200, seed=2), [UNK, 3, UNK, UNK, 8]])


@pytest.mark.parametrize("interpolate", [False, True])
@pytest.mark.parametrize("order,num_classes", [(2, 4), (3, 4), (3, 9)])
def test_distributions_sum_to_one_including_a_word_absent_from_training(order, num_classes, interpolate):
    model = ClassNgram(order, num_classes, interpolate=interpolate, sweeps=5).fit(TRAIN, V)
    assert model.C == num_classes and model.word_counts[UNK] == 0
    rng = np.random.default_rng(0)
    contexts = [rng.integers(0, V, size=order - 1).tolist() for _ in range(25)]
    contexts += [TRAIN[:order - 1].tolist(), [UNK] * (order - 1), [], [3]]  # seen, unseen, start, short
    for context in contexts:
        lp = model.log_probs_for_context(context)  # [V]
        assert lp.dtype == np.float64 and abs(np.exp(lp).sum() - 1.0) < 1e-9
        assert np.isfinite(lp[UNK])  # > 0 although never seen
    lp = model.score(VALID, context_prefix=TRAIN)
    naive = [model.log_probs_for_context(np.concatenate([TRAIN, VALID[:i]]))[w] for i, w in enumerate(VALID)]
    assert np.abs(lp - np.array(naive)).max() < 1e-12
    summary = model.summary()
    assert summary["classes"] == num_classes and summary["words_unseen_in_training"] == 1


def test_words_seen_once_join_the_class_of_the_unseen_words():
    hapax, unseen = V, V - 1  # one more word id, seen once in the middle of the stream
    train = np.concatenate([TRAIN[:700], [hapax], TRAIN[700:]])
    clustered = ClassNgram(2, 5, sweeps=10, min_count=0).fit(train, V + 1)
    pooled = ClassNgram(2, 5, sweeps=10).fit(train, V + 1)  # min_count=2
    assert clustered.classes[hapax] != clustered.classes[unseen]
    members = lambda model, word: set(np.flatnonzero(model.classes == model.classes[word]).tolist())
    assert members(pooled, unseen) == members(clustered, unseen) | {hapax}
    assert hapax in members(clustered, 8) and members(pooled, 8) == members(clustered, 8) - {hapax}
    assert pooled.C == 5 and abs(np.exp(pooled.log_probs_for_context([3])).sum() - 1.0) < 1e-9


def test_exchange_classes_recover_the_four_word_groups():
    model = ClassNgram(2, num_classes=4, sweeps=10).fit(TRAIN, V)
    groups = {frozenset(np.flatnonzero(model.classes == c).tolist()) - {UNK} for c in range(4)}
    assert groups == {frozenset(range(7 * g, 7 * g + 7)) for g in range(4)}
    assert model.ami_bits > ClassNgram(2, num_classes=4, sweeps=0).fit(TRAIN, V).ami_bits + 1.0


def test_hand_computed_probabilities_with_fixed_classes():
    model = ClassNgram(order=2, num_classes=5, interpolate=False, word_smoothing=0.5)
    model.fit(HAND_WORDS, 8, classes=np.array(HAND_CLASSES))
    assert model.C == 5 and model.classes.tolist() == HAND_CLASSES
    # class 4 = {4, 5, 7}: n = 3, 2, 0 (n(c) = 5); class 1 = {1, 6}: n = 5, 2 (n(c) = 7); others singletons
    a = Fraction(1, 2)
    p_word = {4: (3 + a) / (5 + 3 * a), 5: (2 + a) / (5 + 3 * a), 7: a / (5 + 3 * a),
              1: (5 + a) / (7 + 2 * a), 6: (2 + a) / (7 + 2 * a), 0: 1, 2: 1, 3: 1}
    assert (p_word[4], p_word[5], p_word[7]) == (Fraction(7, 13), Fraction(5, 13), Fraction(1, 13))
    # back-off KN on the class stream HAND (tests/test_ngram.py): P(4 | 1) = 29/63, P(2 | 1) = 17/162
    p_class = {4: Fraction(29, 63), 2: Fraction(17, 162)}
    for history in ([1], [6]):  # words 1 and 6 share class 1, so they predict alike
        lp = model.log_probs_for_context(history)
        assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-12)
        for w in (4, 5, 7):
            assert math.exp(lp[w]) == pytest.approx(float(p_class[4] * p_word[w]), abs=1e-12)
        assert math.exp(lp[2]) == pytest.approx(float(p_class[2]), abs=1e-12)
    assert float(p_class[4] * p_word[5]) == pytest.approx(145 / 819, abs=1e-15)
    # the product, term by term, against a KN fitted on the class stream directly
    kn = KneserNey(2, interpolate=False).fit(np.array(HAND_CLASSES)[HAND_WORDS], 5)
    expected = kn.log_probs_for_context([1])[np.array(HAND_CLASSES)] + np.log([float(p_word[w]) for w in range(8)])
    assert np.abs(model.log_probs_for_context([6]) - expected).max() < 1e-12
    # labels need not be 0..C-1: they are renumbered in sorted order
    relabelled = ClassNgram(2, 5, word_smoothing=0.5).fit(HAND_WORDS, 8, classes=np.array(HAND_CLASSES) * 10 + 3)
    assert relabelled.classes.tolist() == HAND_CLASSES


def test_with_word_smoothing_scores_as_a_fresh_fit_with_that_smoothing():
    fitted = ClassNgram(order=2, num_classes=5, word_smoothing=0.5).fit(HAND_WORDS, 8, classes=np.array(HAND_CLASSES))
    refit = ClassNgram(order=2, num_classes=5, word_smoothing=4.0).fit(HAND_WORDS, 8, classes=np.array(HAND_CLASSES))
    changed = fitted.with_word_smoothing(4.0)
    assert changed.word_smoothing == 4.0 and changed.class_model is fitted.class_model
    assert np.abs(changed.log_probs_for_context([6]) - refit.log_probs_for_context([6])).max() < 1e-12
    # class 4 = {4, 5, 7} with n = 3, 2, 0: P(7 | c) = a / (5 + 3a), 4 / 17 at a = 4; the original keeps 1 / 13
    assert math.exp(changed.log_p_word[7]) == pytest.approx(4 / 17) and math.exp(fitted.log_p_word[7]) == pytest.approx(1 / 13)
    with pytest.raises(UserError, match=re.escape("word_smoothing=-1.0 must be a number > 0")):
        fitted.with_word_smoothing(-1.0)


@pytest.mark.parametrize("interpolate", [False, True])
@pytest.mark.parametrize("order", [1, 3, 4])
def test_one_class_per_word_is_word_level_kneser_ney(order, interpolate):
    # num_classes >= V: class = word, P(w | c) = 1 whatever the smoothing, so the model is KN on words
    model = ClassNgram(order, num_classes=V + 5, interpolate=interpolate).fit(TRAIN, V)
    assert model.C == V and model.classes.tolist() == list(range(V)) and not model.log_p_word.any()
    kn = KneserNey(order, interpolate).fit(TRAIN, V)
    assert np.array_equal(model.score(VALID, TRAIN), kn.score(VALID, TRAIN))
    assert model.perplexity(VALID) == kn.perplexity(VALID)


def test_bad_arguments_raise_one_line_user_errors():
    for num_classes in (1, 0, 2.5, True):
        with pytest.raises(UserError, match=re.escape(f"num_classes={num_classes!r} must be an integer >= 2 "
                                                      "(Bengio et al. 2003 used 150 to 2000)")):
            ClassNgram(3, num_classes)
    for order in (0, 6):
        with pytest.raises(UserError, match=re.escape(f"order={order} must be an integer n-gram order from 1 to 5")):
            ClassNgram(order, 150)
    with pytest.raises(UserError, match=re.escape("sweeps=-1 must be an integer >= 0")):
        ClassNgram(3, 150, sweeps=-1)
    with pytest.raises(UserError, match=re.escape("word_smoothing=0 must be a number > 0")):
        ClassNgram(3, 150, word_smoothing=0)
    with pytest.raises(UserError, match=re.escape("min_count=-1 must be an integer >= 0")):
        ClassNgram(3, 150, min_count=-1)
    with pytest.raises(UserError, match="ClassNgram is not fitted"):
        ClassNgram(3, 150).score(VALID)
    with pytest.raises(UserError, match=re.escape("classes has shape (7,) and dtype int64; pass one integer "
                                                  "class label per word: shape (8,)")):
        ClassNgram(2, 5).fit(HAND_WORDS, 8, classes=np.arange(7))
    with pytest.raises(UserError, match=re.escape(f"training ids holds id {V} outside the vocabulary [0, {V})")):
        ClassNgram(2, 5).fit(torch.tensor([1, 2, V]), V)
    with pytest.raises(UserError, match="order=3 needs at least 4"):
        ClassNgram(3, 5).fit([1, 2, 3], V)
