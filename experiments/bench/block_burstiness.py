"""Why whole-block batches need the adaptive head's capacities calibrated: on Brown (Bengio et al.'s
vocabulary of the 10,000 most frequent words here, lower-cased), how much a tail cluster's count varies in a
batch of B blocks of T consecutive tokens against the binomial count of shuffled windows, and how many rows
each capacity rule leaves beyond capacity and spill (`AdaptiveHead.capacities`, `spill_rows`).

    python experiments/bench/block_burstiness.py [--batches 3000] > experiments/bench/block_burstiness.md

dispersion: a block's count variance over the binomial variance of T tokens with the cluster's share;
unscored: rows beyond capacity and spill summed over the sampled batches (10,240 rows each).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from provenance import stamp  # noqa: E402

from nplm.heads.adaptive import AdaptiveHead, auto_cutoffs  # noqa: E402

V = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=3000)
    args = parser.parse_args()
    from nltk.corpus import brown

    words = [w.lower() for w in brown.words()]
    vocab = [w for w, _ in collections.Counter(words).most_common(V - 1)]
    rank = {w: i for i, w in enumerate(vocab)}
    ids = np.array([rank.get(w, V - 1) for w in words])  # the last id: every other word
    counts = np.bincount(ids, minlength=V)
    print(stamp(), "\n")
    print(f"Brown, {len(ids):,} tokens, |V| = {V:,}; {args.batches:,} random batches of 10,240 rows per line.\n")
    print("| cutoffs | T | blocks a batch | dispersion per tail cluster | binomial capacities | unscored (binomial) "
          "| calibrated capacities | unscored (calibrated) |")
    print("|---|---:|---:|---|---|---:|---|---:|")
    for cutoffs in (auto_cutoffs(V), [2000, 6000]):
        head = AdaptiveHead(16, V, counts.tolist(), cutoffs)
        rng = np.random.default_rng(0)
        order = np.argsort(np.argsort(-counts, kind="stable"), kind="stable")  # id -> frequency rank
        clusters = np.searchsorted(np.array(cutoffs), order[ids], side="right")  # [N] 0: shortlist
        for T, per_batch in ((512, 20), (128, 80)):
            blocks = ids[: len(ids) // T * T].reshape(-1, T)
            rows = T * per_batch
            binomial, spill = head.capacities(rows), head.spill_rows(rows)
            head.calibrate(torch.from_numpy(blocks))
            calibrated = head.capacities(rows)
            head.block_counts = None
            per_block = np.stack([(clusters[: len(blocks) * T].reshape(-1, T) == i + 1).sum(1)
                                  for i in range(len(cutoffs))], 1)  # [blocks, n]
            share = per_block.mean(0) / T
            dispersion = per_block.var(0) / (T * share * (1 - share))
            lost = {"binomial": 0, "calibrated": 0}
            for _ in range(args.batches):
                pick = rng.choice(len(blocks), per_batch, replace=False)
                sizes = per_block[pick].sum(0)
                for name, caps in (("binomial", binomial), ("calibrated", calibrated)):
                    lost[name] += max(int(np.maximum(sizes - np.array(caps), 0).sum()) - spill, 0)
            print(f"| {cutoffs} | {T} | {per_batch} | {', '.join(f'{d:.2f}' for d in dispersion)} | {binomial} | "
                  f"{lost['binomial']:,} | {calibrated} | {lost['calibrated']:,} |")


if __name__ == "__main__":
    main()
