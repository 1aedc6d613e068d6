"""Count-based n-gram baselines (`nplm.ngram`): counts, modified Kneser-Ney, deleted interpolation, ARPA."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
import torch

from nplm.errors import UserError
from nplm.ngram import (DeletedInterpolationTrigram, KneserNey, NgramCounts, counts_of_counts,
                        modified_kn_discounts, split_context, write_arpa)

V = 12
UNK = V - 1  # an <unk> id that never occurs in training
HAND = [2, 1, 4, 4, 3, 1, 1, 1, 4, 3, 2, 2, 1, 1, 4, 1, 4]  # V = 5; word 0 never occurs


def markov_stream(length: int, seed: int, vocab: int = V - 2) -> np.ndarray:
    """Ids 0..vocab-1 from a sparse random Markov chain (each word has 3 likely successors)."""
    rng = np.random.default_rng(seed)
    succ = np.random.default_rng(123).integers(0, vocab, size=(vocab, 3))
    out = [0]
    for _ in range(length - 1):
        nxt = succ[out[-1], rng.integers(0, 3)] if rng.random() < 0.8 else rng.integers(0, vocab)
        out.append(int(nxt))
    return np.array(out, dtype=np.int64)


TRAIN = markov_stream(600, seed=1)
VALID = np.concatenate([markov_stream(300, seed=2), [UNK, 10, UNK, 3]])  # ends with unseen words/contexts


def reference_kn(train, n: int, vocab: int, interpolate: bool, min_counts=None):
    """Modified Kneser-Ney from the equations with Counters and dicts (no numpy): p(history, w).
    `min_counts` [n]: k-grams with level count below min_counts[k-1] are dropped (they back off)."""
    cutoff = [1] + list(min_counts or [1] * n)  # cutoff[k] for order k
    train = [int(x) for x in train]
    level = {n: Counter(tuple(train[i:i + n]) for i in range(len(train) - n + 1))}
    for k in range(1, n):
        left = defaultdict(set)
        for i in range(1, len(train) - k + 1):
            left[tuple(train[i:i + k])].add(train[i - 1])
        level[k] = Counter({g: len(s) for g, s in left.items()})
        level[k][tuple(train[:k])] += 1  # the start counts as one more distinct left neighbour
    disc = {}
    for k in range(1, n + 1):
        nr = Counter(level[k].values())
        y = nr[1] / (nr[1] + 2 * nr[2]) if nr[1] + nr[2] else 0.0
        d = [0.0]
        for r, fb in zip((1, 2, 3), (0.5, 1.0, 1.5)):
            est = r - (r + 1) * y * nr[r + 1] / nr[r] if nr[r] else -1
            d.append(est if 0 < est < r else fb)
        disc[k] = d
    followers = {k: defaultdict(dict) for k in level}
    for k, cnt in level.items():
        for g, c in cnt.items():
            followers[k][g[:-1]][g[-1]] = c

    @lru_cache(maxsize=None)
    def p(h: tuple, w: int) -> float:
        k = len(h) + 1
        f = followers[k].get(h)
        if not f:
            return p(h[1:], w)
        total = sum(f.values())
        gamma = sum(disc[k][min(c, 3)] for c in f.values()) / total
        c = f.get(w, 0)
        lower = (lambda x: 1.0 / vocab) if k == 1 else (lambda x: p(h[1:], x))
        kept = [x for x, cx in f.items() if cx >= cutoff[k]]
        dropped = sum(cx - disc[k][min(cx, 3)] for cx in f.values() if cx < cutoff[k]) / total
        if interpolate or k == 1:
            if c >= cutoff[k]:
                return (c - disc[k][min(c, 3)]) / total + gamma * lower(w)
            bow = gamma + (dropped / (1.0 - sum(lower(x) for x in kept)) if dropped else 0.0)
            return bow * lower(w)
        if c >= cutoff[k]:
            return (c - disc[k][min(c, 3)]) / total / ((1 - gamma) if len(kept) == vocab else 1.0)
        return (gamma + dropped) / (1.0 - sum(lower(x) for x in kept)) * lower(w)

    return p


def naive_score(p, n: int, ids, prefix=()) -> np.ndarray:
    stream = [int(x) for x in prefix] + [int(x) for x in ids]
    start = len(prefix)
    return np.array([math.log(p(tuple(stream[max(0, i - n + 1):i]), stream[i]))
                     for i in range(start, len(stream))])


def test_counts_match_a_counter_and_keys_fit_int64_at_order_5_with_a_brown_sized_vocabulary():
    vocab = 17_905
    ids = np.random.default_rng(0).integers(0, vocab, size=3000)
    ids[1000:1500] = ids[:500]  # the 496 5-grams inside the copy count 2: 2996 - 2 * 496 singletons
    counts = NgramCounts(ids, 5, vocab)
    for k in range(2, 6):
        expected = Counter(tuple(ids[i:i + k]) for i in range(len(ids) - k + 1))
        got = {tuple(row): int(c) for row, c in zip(counts.words(k).tolist(), counts.counts[k])}
        assert got == {tuple(int(x) for x in g): c for g, c in expected.items()}
        assert np.all(np.diff(counts.keys[k]) > 0)  # sorted, distinct
    assert counts.keys[5].max() < counts.size(4) * vocab < 2**63
    assert counts_of_counts(counts.counts[5]).tolist()[1:3] == [2004, 496]


def test_hand_computed_counts_discounts_and_kn_probabilities():
    # bigram counts of HAND: (1,4) 4, (1,1) 3, (2,1) 2, (4,3) 2, (4,4) (3,1) (3,2) (2,2) (4,1) 1
    model = KneserNey(order=2, interpolate=True).fit(HAND, 5)
    assert counts_of_counts(model.level_counts[2]).tolist() == [0, 5, 2, 1, 1]
    y = Fraction(5, 5 + 2 * 2)
    d2 = [1 - 2 * y * Fraction(2, 5), 2 - 3 * y * Fraction(1, 2), 3 - 4 * y * Fraction(1, 1)]
    assert d2 == [Fraction(5, 9), Fraction(7, 6), Fraction(7, 9)]
    assert model.discounts[2] == pytest.approx([float(d) for d in d2], abs=1e-12)
    # continuation counts N1+(. w): w=1 after {2,3,1,4}; w=4 after {1,4}; w=3 after {4};
    # w=2 after {3,2} plus the start; w=0 never
    assert model.level_counts[1].tolist() == [0, 4, 3, 1, 2]
    d1 = [Fraction(1, 3), Fraction(1), Fraction(5, 3)]  # n1 = n2 = n3 = n4 = 1, Y = 1/3
    assert model.discounts[1] == pytest.approx([float(d) for d in d1], abs=1e-12)
    gamma1 = (d1[0] + d1[1] + 2 * d1[2]) / 10
    d1_of = [Fraction(0)] + d1  # D(0), D1, D2, D3+
    p1 = {w: max(c - d1_of[min(c, 3)], Fraction(0)) / 10 + gamma1 / 5 for w, c in enumerate([0, 4, 3, 1, 2])}
    assert p1[4] == Fraction(29, 150) and p1[0] == Fraction(7, 75)
    # p(4 | 1): c(1 4) = 4, c(1 .) = 7, gamma(1) = 2 D3+ / 7 = 2/9
    expected = (4 - d2[2]) / 7 + Fraction(2, 9) * p1[4]
    assert expected == Fraction(21402, 42525)
    assert math.exp(model.log_probs_for_context([1])[4]) == pytest.approx(float(expected), abs=1e-12)
    backoff = KneserNey(order=2, interpolate=False).fit(HAND, 5)
    lp = backoff.log_probs_for_context([1])
    assert math.exp(lp[4]) == pytest.approx(29 / 63, abs=1e-12)
    # bow(1) = gamma(1) / (1 - p1(4) - p1(1)) = 25/54, p(2 | 1) = 25/54 p1(2)
    assert math.exp(lp[2]) == pytest.approx(float(Fraction(25, 54) * p1[2]), abs=1e-12)
    assert float(Fraction(17, 162)) == pytest.approx(float(Fraction(25, 54) * p1[2]), abs=1e-15)


@pytest.mark.parametrize("interpolate", [True, False])
@pytest.mark.parametrize("order", [3, 4])
def test_kn_distributions_of_every_seen_context_sum_to_one(order, interpolate):
    model = KneserNey(order, interpolate).fit(TRAIN, V)
    contexts = {tuple(TRAIN[i:i + order - 1]) for i in range(len(TRAIN) - order + 2)}
    contexts |= {(UNK,) * (order - 1), (), (3,)}  # unseen, empty (start) and short contexts
    worst = max(abs(np.exp(model.log_probs_for_context(list(c))).sum() - 1.0) for c in contexts)
    assert len(contexts) > 50
    assert worst < 1e-9


def test_backoff_context_followed_by_every_word_still_sums_to_one():
    ids = [0, 0, 1, 0, 2, 1, 2, 0, 1, 1, 0, 0]  # word 0 is followed by 0, 1 and 2: all of V = 3
    for order in (2, 3):
        model = KneserNey(order, interpolate=False).fit(ids, 3)
        assert np.exp(model.log_probs_for_context([0])).sum() == pytest.approx(1.0, abs=1e-12)
        assert np.isneginf(model.log_bow[2][0])


def test_unseen_words_and_contexts_get_lower_order_probabilities():
    model = KneserNey(3, interpolate=True).fit(TRAIN, V)
    gamma1 = float((model._discount(1, model.level_counts[1])).sum() / model.level_counts[1].sum())
    unigram = model.log_probs_for_context([])
    assert unigram[UNK] == pytest.approx(math.log(gamma1 / V), abs=1e-12)  # only the uniform share
    # a history never seen backs off to the shorter history, unchanged (interpolated: bow = 1)
    assert np.allclose(model.log_probs_for_context([UNK, 3]), model.log_probs_for_context([3]), atol=1e-12)
    lp = model.score(VALID)
    assert np.isfinite(lp).all()
    # after the unseen histories (<unk>, 10) and (10, <unk>) only the unigram level is left
    assert lp[-2] == pytest.approx(math.log(gamma1 / V), abs=1e-12)
    assert lp[-1] == pytest.approx(unigram[3], abs=1e-12)


@pytest.mark.parametrize("interpolate", [True, False])
@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_vectorised_score_equals_a_naive_per_token_computation(order, interpolate):
    model = KneserNey(order, interpolate).fit(torch.from_numpy(TRAIN), V)
    ref = reference_kn(TRAIN, order, V, interpolate)
    assert np.abs(model.score(VALID) - naive_score(ref, order, VALID)).max() < 1e-10
    prefix = TRAIN[-(order - 1):] if order > 1 else TRAIN[:0]
    got = model.score(torch.from_numpy(VALID), context_prefix=torch.from_numpy(TRAIN))
    assert np.abs(got - naive_score(ref, order, VALID, prefix)).max() < 1e-10
    assert model.perplexity(VALID) == pytest.approx(math.exp(-naive_score(ref, order, VALID).mean()), rel=1e-10)


@pytest.mark.parametrize("interpolate", [True, False])
@pytest.mark.parametrize("order", [3, 4, 5])
@pytest.mark.parametrize("min_counts", ["srilm", (1, 2, 3, 2, 2)])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_count_cutoffs_keep_every_distribution_normalised_and_match_the_reference(order, interpolate, min_counts):
    cutoffs = min_counts if isinstance(min_counts, str) else min_counts[:order]
    model = KneserNey(order, interpolate, min_counts=cutoffs).fit(TRAIN, V)
    assert all((~model.kept[k]).any() for k in range(3, order + 1))  # something was dropped at every order >= 3
    contexts = {tuple(TRAIN[i:i + order - 1]) for i in range(len(TRAIN) - order + 2)}
    contexts |= {(UNK,) * (order - 1), (), (3,)}
    worst = max(abs(math.fsum(np.exp(model.log_probs_for_context(list(c)))) - 1.0) for c in contexts)
    assert worst < 1e-9
    ref = reference_kn(TRAIN, order, V, interpolate, model.min_counts)
    assert np.abs(model.score(VALID, TRAIN) - naive_score(ref, order, VALID, TRAIN[-(order - 1):])).max() < 1e-10
    assert np.abs(model.score(TRAIN[:200]) - naive_score(ref, order, TRAIN[:200])).max() < 1e-10


def test_a_dropped_singleton_trigram_scores_its_back_off_value():
    # trigrams of HAND: (1 1 4) twice, 13 others once, so n1 = 13, n2 = 1, n3 = n4 = 0: Y = 13/15,
    # D1 = 1 - 2 Y / 13 = 13/15, D2 and D3+ undefined -> fallback 1 and 1.5 (counts before the cutoff)
    full = KneserNey(3, interpolate=False).fit(HAND, 5)
    cut = KneserNey(3, interpolate=False, min_counts="srilm").fit(HAND, 5)
    assert cut.min_counts == (1, 1, 2) and cut.name == "kn3_backoff_min1-1-2"
    assert cut.discounts[3] == pytest.approx([13 / 15, 1.0, 1.5], abs=1e-12)
    assert all(np.array_equal(a, b) for a, b in zip(cut.discounts[1:], full.discounts[1:]))
    # the bigram level (cutoff 1, continuation counts of all trigrams) is unchanged
    p2 = np.exp(cut.log_probs_for_context([1]))  # [5] p_2(w | 1)
    assert np.allclose(p2, np.exp(full.log_probs_for_context([1])), atol=1e-15)
    # history (1 1): followed by 4 twice (kept) and by 1 once (dropped); c(1 1 .) = 3
    gamma = (Fraction(13, 15) + 1) / 3  # D1 N1 + D2 N2 over c(1 1 .) = 28/45
    dropped = (1 - Fraction(13, 15)) / 3  # R: the dropped singleton's undiscounted share = 2/45
    assert gamma + dropped == 1 - Fraction(2 - 1, 3)  # all that p(4 | 1 1) = (2 - D2) / 3 leaves
    bow = float(gamma + dropped) / (1.0 - p2[4])
    p = np.exp(cut.log_probs_for_context([1, 1]))
    assert p[4] == pytest.approx(1 / 3, abs=1e-12)
    assert p[1] == pytest.approx(bow * p2[1], abs=1e-12)  # the dropped singleton: the back-off value
    assert p[2] == pytest.approx(bow * p2[2], abs=1e-12)  # as an unseen word
    assert math.exp(full.log_probs_for_context([1, 1])[1]) == pytest.approx(2 / 45, abs=1e-12)  # kept: (1 - D1) / 3
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    interp = KneserNey(3, interpolate=True, min_counts="srilm").fit(HAND, 5)
    pi = np.exp(interp.log_probs_for_context([1, 1]))
    p2i = np.exp(interp.log_probs_for_context([1]))
    assert pi[4] == pytest.approx(1 / 3 + float(gamma) * p2i[4], abs=1e-12)
    assert pi[1] == pytest.approx((float(gamma) + float(dropped) / (1 - p2i[4])) * p2i[1], abs=1e-12)
    assert cut.summary()["kept_ngrams_3"] == 1 and cut.summary()["min_counts"] == [1, 1, 2]


def test_bad_min_counts_raise_one_line_user_errors():
    for bad, message in [("sri", "min_counts='sri' is not a preset; use one of: srilm, None, or 3 integer cutoffs"),
                         ((1, 1), "min_counts=(1, 1) must be 3 integer cutoffs >= 1, one per order 1..3"),
                         ((2, 1, 2), "min_counts=(2, 1, 2) must be 3 integer cutoffs >= 1"),
                         ((1, 0, 2), "min_counts=(1, 0, 2) must be 3 integer cutoffs >= 1"),
                         ([1, 1, 2.5], "min_counts=[1, 1, 2.5] must be 3 integer cutoffs >= 1"),
                         ((1, True, 2), "min_counts=(1, True, 2) must be 3 integer cutoffs >= 1"),
                         (2, "min_counts=2 must be 3 integer cutoffs >= 1, one per order 1..3, the unigram one 1")]:
        with pytest.raises(UserError) as err:
            KneserNey(3, min_counts=bad)
        assert message in str(err.value) and "\n" not in str(err.value)
    assert KneserNey(5, min_counts=" SRILM ").min_counts == (1, 1, 2, 2, 2)
    assert KneserNey(2, min_counts="srilm").min_counts == (1, 1)
    assert KneserNey(3, min_counts=np.array([1, 3, 2])).min_counts == (1, 3, 2)


def test_deleted_interpolation_em_raises_validation_likelihood_and_weights_are_distributions():
    model = DeletedInterpolationTrigram(bin_base=2.0).fit(TRAIN, VALID, V, valid_prefix=TRAIN[-2:])
    ll = model.valid_log_likelihood
    assert ll[-1] > ll[0] + 0.05
    assert all(b >= a - 1e-12 for a, b in zip(ll, ll[1:]))  # EM never lowers it
    assert ((model.lambdas >= 0) & (model.lambdas <= 1)).all()
    assert np.abs(model.lambdas.sum(axis=1) - 1).max() < 1e-12
    assert model.lambdas[0, :2].tolist() == [0.0, 0.0] and model.lambdas[1, 0] == 0.0
    assert -model.score(VALID, TRAIN[-2:]).mean() == pytest.approx(-ll[-1], abs=1e-12)
    contexts = {tuple(TRAIN[i:i + 2]) for i in range(len(TRAIN) - 1)} | {(UNK, UNK), (UNK, 3), ()}
    worst = max(abs(np.exp(model.log_probs_for_context(list(c))).sum() - 1.0) for c in contexts)
    assert worst < 1e-9
    # one token by hand: p(w | u v) = l3 c(uvw)/c(uv.) + l2 c(vw)/c(v.) + l1 c(w)/L + l0/V
    u, v, w = (int(x) for x in TRAIN[10:13])
    tri = Counter(zip(TRAIN, TRAIN[1:], TRAIN[2:]))
    bi = Counter(zip(TRAIN, TRAIN[1:]))
    c_uv = sum(c for (a, b, _), c in tri.items() if (a, b) == (u, v))
    c_v = sum(c for (a, _), c in bi.items() if a == v)
    lam = model.lambdas[min(2 + int(math.floor(math.log2(c_uv) + 1e-9)), model.num_bins - 1)]
    p = (lam[0] * tri[(u, v, w)] / c_uv + lam[1] * bi[(v, w)] / c_v
         + lam[2] * int((TRAIN == w).sum()) / len(TRAIN) + lam[3] / V)
    assert model.log_probs_for_context([u, v])[w] == pytest.approx(math.log(p), abs=1e-12)


def read_arpa(path):
    sizes, entries, order = {}, {}, 0
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("ngram "):
            k, m = line[6:].split("=")
            sizes[int(k)] = int(m)
        elif line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1:].split("-")[0])
        elif line and order and not line.startswith("\\"):
            fields = line.split("\t")
            entries[tuple(fields[1].split(" "))] = (float(fields[0]), float(fields[2]) if len(fields) > 2 else 0.0)
    return sizes, entries


@pytest.mark.parametrize("min_counts", [None, "srilm"])
@pytest.mark.parametrize("interpolate", [False, True])
def test_arpa_export_header_counts_and_log10_values(tmp_path, interpolate, min_counts):
    model = KneserNey(3, interpolate, min_counts=min_counts).fit(TRAIN, V)
    tokens = [f"w{i}" for i in range(V - 1)] + ["<unk>"]
    sizes = write_arpa(model, tokens, tmp_path / "kn3.arpa")
    header, entries = read_arpa(tmp_path / "kn3.arpa")
    distinct = {k: len({tuple(TRAIN[i:i + k]) for i in range(len(TRAIN) - k + 1)}) for k in (2, 3)}
    assert header == sizes == {1: V, 2: distinct[2], 3: distinct[3]}
    assert len(entries) == V + distinct[2] + distinct[3]
    ln10 = math.log(10)
    u, v, w = (int(x) for x in TRAIN[20:23])  # a seen trigram
    lp = model.log_probs_for_context([u, v])
    assert entries[(tokens[u], tokens[v], tokens[w])][0] == pytest.approx(lp[w] / ln10, abs=1e-8)
    assert entries[("<unk>",)][0] == pytest.approx(model.log_probs_for_context([])[UNK] / ln10, abs=1e-8)

    def arpa_log10(h, x):  # the ARPA back-off rule, from the file alone
        if tuple(h) + (x,) in entries:
            return entries[tuple(h) + (x,)][0]
        return (entries[tuple(h)][1] if tuple(h) in entries else 0.0) + arpa_log10(h[1:], x)

    words = [tokens[i] for i in VALID]
    ours = model.score(VALID) / ln10
    theirs = [arpa_log10(words[max(0, i - 2):i], words[i]) for i in range(len(words))]
    assert np.abs(ours - np.array(theirs)).max() < 1e-7


@pytest.mark.parametrize("order,interpolate,min_counts", [(3, False, None), (3, True, None), (4, False, "srilm"),
                                                       (5, True, "srilm")])
def test_kenlm_reads_our_arpa_file_and_scores_every_token_as_we_do(tmp_path, order, interpolate, min_counts):
    """The optional check of an independent reader: KenLM (`pip install kenlm`, query only) loads the
    exported file and its per-token log10 scores equal ours (KenLM stores float32)."""
    kenlm = pytest.importorskip("kenlm")
    model = KneserNey(order, interpolate, min_counts=min_counts).fit(TRAIN, V)
    tokens = [f"w{i}" for i in range(V - 1)] + ["<unk>"]
    write_arpa(model, tokens, tmp_path / "kn.arpa", sentence_markers=True)
    lm = kenlm.Model(str(tmp_path / "kn.arpa"))
    theirs = np.array([s[0] for s in lm.full_scores(" ".join(tokens[i] for i in VALID), bos=False, eos=False)])
    ours = model.score(VALID) / math.log(10)  # [L] log10, the same truncated history at the start
    assert theirs.shape == ours.shape
    assert np.abs(theirs - ours).max() < 2e-5


def test_split_context_follows_the_datamodule_contiguity(tmp_path):
    from nplm.data.datamodule import LMDataModule

    from conftest import make_fake_brown

    root = make_fake_brown(tmp_path)
    dm = LMDataModule({"name": "brown", "nltk_data": str(root), "download": False, "train_size": 300,
                       "valid_size": 100, "test_size": None}, 2, 8, 8, data_dir=str(tmp_path))
    dm.setup()
    assert split_context(dm, "train", 4) is None
    assert split_context(dm, "test", 4).tolist() == dm.ids["valid"][-3:].tolist()
    toy = LMDataModule({"name": "toy"}, 2, 8, 8, data_dir=str(tmp_path))
    toy.setup()
    assert split_context(toy, "valid", 4) is None
    kn = KneserNey(3).fit(dm.ids["train"], len(dm.vocab))
    lp = kn.score(dm.ids["test"], split_context(dm, "test", 3))
    assert lp.shape == (len(dm.ids["test"]),) and np.isfinite(lp).all()


def test_bad_input_raises_one_line_user_errors():
    for order in (0, 6, 2.5):
        with pytest.raises(UserError, match=r"order=.* must be an integer n-gram order from 1 to 5"):
            KneserNey(order)
    with pytest.raises(UserError, match="not fitted"):
        KneserNey(3).score(VALID)
    model = KneserNey(3).fit(TRAIN, V)
    with pytest.raises(UserError, match=f"id {V} outside the vocabulary"):
        model.score(np.array([1, V]))
    with pytest.raises(UserError, match="whitespace"):
        write_arpa(model, ["a b"] + [f"w{i}" for i in range(V - 1)], "/dev/null")
    with pytest.raises(UserError, match="needs at least 4"):
        KneserNey(3).fit([1, 2, 3], V)
    # only singletons: D1 = 1 - 0 = 1 is out of (0, 1), D2 and D3+ undefined -> KenLM's fallback
    discounts, fallback = modified_kn_discounts(np.array([0, 4, 0, 0, 0]))
    assert discounts.tolist() == [0.5, 1.0, 1.5] and fallback is True
