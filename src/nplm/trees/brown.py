"""`tree=brown`: a Brown et al. (1992) class hierarchy from the training bigram statistics.

Brown, deSouza, Mercer, Della Pietra & Lai, "Class-based n-gram models of natural language"
(Computational Linguistics 18(4), 1992), section 3: start with every word in its own class and
repeatedly merge the two classes whose merge loses the least average mutual information (AMI)
between adjacent classes, I = sum_{c,d} p(c,d) log p(c,d) / (p_l(c) p_r(d)); the merge order is a
binary tree over the words.

Exact agglomeration over all |V| = 17,905 Brown words costs O(|V|^3) even with Brown's O(C^2)
update, so this module uses a documented approximation in three steps:

1. Flat classes by the exchange algorithm (Kneser & Ney 1993; Martin, Liermann & Ney 1998), which
   maximises the same class-bigram AMI for a fixed number C of classes: the C-1 most frequent words
   start in classes of their own, all others in one class; then, in frequency order, each word moves
   to the class that raises the AMI most, for a few sweeps (until no word moves). Brown et al.
   themselves improve their clusters by moving words between classes (section 3); here that
   move is the whole flat step. It vectorises over classes (numpy), where Liang's (2005) windowed
   agglomeration needs O(|V| C^2) Python-level updates. A class never loses its last word.
2. The class hierarchy by Brown's greedy merging of those C classes, exactly (minimal AMI loss,
   with Brown's O(C^2)-per-merge update of all pair losses).
3. The words inside a class form a Huffman (1952) tree by their counts (`within=huffman`), so
   frequent words stay shallow, or a balanced one (`within=balanced`).

With C >= |V| (small vocabularies) steps 1 and 3 vanish and the tree is Brown et al.'s exactly.
Bigrams are counted over the training id stream as it is (sentence ends included). On Brown
(|V| = 17,905, 800k training tokens, C = 1000, 10 sweeps) almost all of the build's time goes to the
exchange sweeps (bench notes in git: experiments/bench/README.md at efe32f1, heads, trees and n-grams).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from nplm.errors import UserError
from nplm.trees.assemble import from_merges
from nplm.trees.huffman import huffman_merges
from nplm.config.rules import Choice, Int
from nplm.trees import register_tree
from nplm.trees.tree import Tree

log = logging.getLogger(__name__)


def xlogx(x: np.ndarray) -> np.ndarray:
    return x * np.log(np.where(x > 0, x, 1.0))


class Bigrams:
    """Word bigram counts of an id stream as successor and predecessor lists (self-bigrams apart)."""

    def __init__(self, ids: np.ndarray, V: int):
        keys, cnt = np.unique(ids[:-1] * V + ids[1:], return_counts=True)
        a, b, cnt = keys // V, keys % V, cnt.astype(np.float64)  # [B] left word, right word, count
        self.a, self.b, self.cnt = a, b, cnt
        self.left_total = np.bincount(a, weights=cnt, minlength=V)  # [V] times w is the left word
        self.right_total = np.bincount(b, weights=cnt, minlength=V)  # [V] times w is the right word
        self.self_count = np.zeros(V)  # [V] count of (w, w)
        same = a == b
        self.self_count[a[same]] = cnt[same]
        a, b, cnt = a[~same], b[~same], cnt[~same]
        self.succ_ptr = np.concatenate([[0], np.cumsum(np.bincount(a, minlength=V))])  # [V+1]
        self.succ, self.succ_cnt = b, cnt  # sorted by left word
        order = np.argsort(b, kind="stable")
        self.pred_ptr = np.concatenate([[0], np.cumsum(np.bincount(b, minlength=V))])  # [V+1]
        self.pred, self.pred_cnt = a[order], cnt[order]  # sorted by right word


def class_bigrams(bg: Bigrams, assign: np.ndarray, C: int) -> np.ndarray:
    M = np.zeros((C, C))  # [C, C] class bigram counts
    np.add.at(M, (assign[bg.a], assign[bg.b]), bg.cnt)
    return M


def exchange(bg: Bigrams, order: np.ndarray, C: int, sweeps: int) -> np.ndarray:
    """Flat classes [V] in 0..C-1 by the exchange algorithm, words visited in `order`."""
    V = len(order)
    assign = np.full(V, C - 1)
    assign[order[: C - 1]] = np.arange(C - 1)
    M = class_bigrams(bg, assign, C)
    NL = np.bincount(assign, weights=bg.left_total, minlength=C)  # [C] left marginals
    NR = np.bincount(assign, weights=bg.right_total, minlength=C)  # [C] right marginals
    members = np.bincount(assign, minlength=C)
    for sweep in range(sweeps):
        moved = 0
        for w in order:
            c0, nl, nr, s = assign[w], bg.left_total[w], bg.right_total[w], bg.self_count[w]
            if members[c0] == 1 or nl + nr == 0:
                continue
            lo, hi = bg.succ_ptr[w], bg.succ_ptr[w + 1]
            r = np.bincount(assign[bg.succ[lo:hi]], weights=bg.succ_cnt[lo:hi], minlength=C)  # [C]
            lo, hi = bg.pred_ptr[w], bg.pred_ptr[w + 1]
            l = np.bincount(assign[bg.pred[lo:hi]], weights=bg.pred_cnt[lo:hi], minlength=C)  # [C]
            M[c0] -= r
            M[:, c0] -= l
            M[c0, c0] -= s
            NL[c0] -= nl
            NR[c0] -= nr
            gain = _insertion_gain(M, NL, NR, r, l, s, nl, nr)  # [C]
            best = int(np.argmax(gain))
            if gain[best] <= gain[c0] + 1e-7:
                best = c0
            M[best] += r
            M[:, best] += l
            M[best, best] += s
            NL[best] += nl
            NR[best] += nr
            if best != c0:
                assign[w], moved = best, moved + 1
                members[c0] -= 1
                members[best] += 1
        ami = (xlogx(M).sum() - xlogx(NL).sum() - xlogx(NR).sum()) / NL.sum() + np.log(NL.sum())
        log.info("brown exchange sweep %d: %d words moved, AMI %.4f bits", sweep + 1, moved, ami / np.log(2))
        if moved == 0:
            break
    return assign


def flat_classes(bg: Bigrams, counts: np.ndarray, C: int, sweeps: int) -> np.ndarray:
    """Step 1 alone: the class [V] in 0..C-1 of every word, by `exchange` with the words visited most
    frequent first (`counts` [V], ties by id); C >= V: every word its own class (arange(V)). Words
    with no bigram (never in the stream) never move: they stay where the initialisation put them."""
    V = len(counts)
    if C >= V:
        return np.arange(V)
    order = np.argsort(-np.asarray(counts, dtype=np.float64), kind="stable")  # [V] most frequent first
    return exchange(bg, order, C, sweeps)


def _insertion_gain(M, NL, NR, r, l, s, nl, nr) -> np.ndarray:
    """[C] change of sum h(M) - sum h(NL) - sum h(NR) (h = x log x) when a word with successor class
    counts r [C], predecessor class counts l [C], s self-bigrams and totals nl, nr joins each class."""
    rz, lz = np.flatnonzero(r), np.flatnonzero(l)
    Mr = M[:, rz]  # [C, |rz|] the columns its successors fall in
    gain = (xlogx(Mr + r[rz]) - xlogx(Mr)).sum(1)
    Ml = M[lz]  # [|lz|, C] the rows its predecessors fall in
    gain += (xlogx(Ml + l[lz, None]) - xlogx(Ml)).sum(0)
    d = M.diagonal()  # [C] the cell (c, c) gets r[c] + l[c] + s, not two separate increments
    gain += xlogx(d + r + l + s) - xlogx(d + r) - xlogx(d + l) + xlogx(d)
    gain -= xlogx(NL + nl) - xlogx(NL) + xlogx(NR + nr) - xlogx(NR)
    return gain


def _merge_gains(P: np.ndarray, hP: np.ndarray, L: np.ndarray, R: np.ndarray, i: int) -> np.ndarray:
    """[C] change of sum h(P) - sum h(L) - sum h(R) (h = x log x; C * AMI in counts, up to a constant)
    when class i merges with each class j. Only cells where both rows (columns) are non-zero change."""
    rz, cz = np.flatnonzero(P[i]), np.flatnonzero(P[:, i])
    X = xlogx(P[i, rz] + P[:, rz]) - hP[i, rz] - hP[:, rz]  # [j, k in rz] rows i and j merged
    Y = xlogx(P[cz, i, None] + P[cz]) - hP[cz, i, None] - hP[cz]  # [k in cz, j] columns i and j merged
    row, col, d = P[i], P[:, i], P.diagonal()  # [C] P_ij, P_ji, P_jj
    hrow, hcol, hd, pii, hii = hP[i], hP[:, i], hP.diagonal(), P[i, i], hP[i, i]
    gain = X.sum(1) + Y.sum(0)
    gain -= xlogx(pii + col) - hii - hcol + xlogx(row + d) - hrow - hd  # X at k = i and k = j
    gain -= xlogx(pii + row) - hii - hrow + xlogx(col + d) - hcol - hd  # Y at k = i and k = j
    gain += xlogx(pii + row + col + d) - hii - hrow - hcol - hd  # the merged cell (i+j, i+j)
    gain -= xlogx(L[i] + L) - xlogx(L[i]) - xlogx(L) + xlogx(R[i] + R) - xlogx(R[i]) - xlogx(R)
    return gain


def _add_through(G: np.ndarray, P: np.ndarray, k: int, sign: float) -> None:
    """G[i, j] += sign * (the part of the gain of merging i and j that class k's row and column give)."""
    for u in (P[:, k], P[k]):
        nz = np.flatnonzero(u)
        hu = xlogx(u[nz])
        G[np.ix_(nz, nz)] += sign * (xlogx(u[nz, None] + u[nz]) - hu[:, None] - hu)


def merge_classes(P: np.ndarray, codes: list[int], first_code: int) -> list[tuple[int, int]]:
    """Brown's greedy agglomeration of classes with bigram counts P [C, C] (row = left class) and
    tree-node codes `codes`; the k-th merge gets code first_code + k. A merged-away class keeps its
    index with zero counts, so it adds nothing to any gain."""
    P = P.copy()
    C = len(P)
    hP, L, R = xlogx(P), P.sum(1), P.sum(0)  # [C, C], [C] left and right marginals
    codes = list(codes)
    active = np.ones(C, dtype=bool)
    G = np.stack([_merge_gains(P, hP, L, R, i) for i in range(C)])  # [C, C] symmetric
    G[np.diag_indices(C)] = -np.inf
    merges: list[tuple[int, int]] = []
    for _ in range(C - 1):
        a, b = sorted(np.unravel_index(int(np.argmax(G)), G.shape))
        _add_through(G, P, a, -1.0)  # pairs apart from a and b: drop what a and b added ...
        _add_through(G, P, b, -1.0)
        P[a] += P[b]
        P[:, a] += P[:, b]
        P[b] = P[:, b] = 0.0
        hP[a], hP[:, a], hP[b], hP[:, b] = xlogx(P[a]), xlogx(P[:, a]), 0.0, 0.0
        L[a], R[a], L[b], R[b] = L[a] + L[b], R[a] + R[b], 0.0, 0.0
        active[b] = False
        _add_through(G, P, a, +1.0)  # ... and add what the merged class adds
        G[a] = G[:, a] = np.where(active, _merge_gains(P, hP, L, R, a), -np.inf)
        G[b] = G[:, b] = G[a, a] = -np.inf
        merges.append((codes[a], codes[b]))
        codes[a] = first_code + len(merges) - 1
    return merges


@register_tree("brown", cached=True, keys={
    "num_classes": Int(2, doc="C, flat classes before the hierarchy (>= |V|: exact Brown merging)"),
    "sweeps": Int(0, doc="at most this many exchange passes"),
    "within": Choice(options=("huffman", "balanced"), doc="the tree inside a class")})
def build(ctx, num_classes: int = 1000, sweeps: int = 10, within: str = "huffman") -> Tree:
    """`num_classes`: C, flat classes before the hierarchy (>= |V|: exact Brown merging);
    `sweeps`: at most this many exchange passes; `within`: huffman | balanced, the tree inside a class."""
    V = len(ctx.vocab.tokens)  # (the keys' types and ranges: checked by the rules registered above)
    ids = np.asarray(ctx.train_ids, dtype=np.int64)  # [N]
    if len(ids) < 2:
        raise UserError(f"tree=brown needs training bigrams; the training split has {len(ids)} tokens")
    start = time.perf_counter()
    C = min(int(num_classes), V)
    bg = Bigrams(ids, V)
    counts = np.asarray(ctx.counts, dtype=np.float64)  # [V]
    assign = flat_classes(bg, counts, C, int(sweeps))
    merges: list[tuple[int, int]] = []
    codes = []
    for c in range(C):
        words = np.flatnonzero(assign == c)
        weights = counts[words] if within == "huffman" else np.ones(len(words))
        inner, root = huffman_merges(words.tolist(), weights.tolist(), V + len(merges))
        merges += inner
        codes.append(root)
    merges += merge_classes(class_bigrams(bg, assign, C), codes, V + len(merges))
    log.info("brown tree: %d classes over %d words in %.1f s", C, V, time.perf_counter() - start)
    return from_merges(merges, V)
