"""Class-based trigram on Brown: fit time, valid/test perplexity for 150 to 2000 classes.

Bengio et al. (2003), table 1, "class-based back-off n = 3" with 150/200/500/1000/2000 classes:
test perplexity 334/340/312/319/326 on their Brown split (Brown et al. 1992 class n-gram:
P(w | h) = P(c(w) | c(h)) P(w | c(w))). Here `nplm.ngram.ClassNgram`: classes by the exchange algorithm
of `nplm.trees.brown` on the training bigrams (at most `--sweeps` passes, timed: "cluster s"), modified
Kneser-Ney over the class stream (back-off, the paper's row, and interpolated, with the same classes),
and P(w | c) from training counts with add-a inside each class; a is picked from `--word-smoothing`
on the validation split (the valid ppl of every a is listed). Data as experiments/bench/ngram_speed.py:
NLTK's Brown, 800,000 training words, 200,000 validation words, the rest for test, |V| = 17,905 (words
seen >= 4 times in the whole corpus); each split's first words get the previous split's tail as
history. Word-level KN trigrams are the first rows.

    OMP_NUM_THREADS=1 python experiments/bench/class_ngram.py [--classes 150 200 500 1000 2000] [--sweeps 10]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time

import numpy as np

from nplm.ngram import ClassNgram, KneserNey, split_context
from replication import corpus_datamodule

PAPER = {150: 334, 200: 340, 500: 312, 1000: 319, 2000: 326}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nltk-data", default="/work/shared/data/nltk_data")
    parser.add_argument("--classes", type=int, nargs="+", default=sorted(PAPER))
    parser.add_argument("--sweeps", type=int, default=10, help="at most this many exchange passes")
    parser.add_argument("--word-smoothing", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 8.0],
                        help="candidate a for P(w | c) = (n(w) + a) / (n(c) + a |c|), picked on valid")
    parser.add_argument("--variants", nargs="+", default=["backoff", "interpolated"],
                        choices=["backoff", "interpolated"])
    args = parser.parse_args()
    t0 = time.perf_counter()
    dm = corpus_datamodule(["corpus=brown", f"corpus.nltk_data={args.nltk_data}", "corpus.download=false"])
    V = len(dm.vocab)
    train, valid, test = (dm.ids[s].numpy() for s in ("train", "valid", "test"))
    counts = np.bincount(train, minlength=V)
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}. Brown: |V| = {V:,} ({(counts == 0).sum():,} "
          f"words unseen in training: {(counts[valid] == 0).mean():.1%} of valid, {(counts[test] == 0).mean():.1%} "
          f"of test tokens), train {len(train):,}, valid {len(valid):,}, test {len(test):,} tokens (loaded in "
          f"{time.perf_counter() - t0:.1f} s). Exchange: at most {args.sweeps} sweeps, one thread.\n")
    print("| model | cluster s | fit s | class AMI bits | valid ppl by a | a | valid ppl | test ppl | "
          "Bengio et al. 2003 test |")
    print("|---|---|---|---|---|---|---|---|---|")

    def ppl(model, split, ids):
        return math.exp(-model.score(ids, split_context(dm, split, model.order)).mean())

    for variant in args.variants:
        t0 = time.perf_counter()
        kn = KneserNey(3, interpolate=variant == "interpolated").fit(train, V)
        fit_s = time.perf_counter() - t0
        print(f"| {kn.name} | | {fit_s:.1f} | | | | {ppl(kn, 'valid', valid):.1f} | {ppl(kn, 'test', test):.1f} | "
              f"{323 if variant == 'backoff' else ''} |", flush=True)
    for C in args.classes:
        clustered = ClassNgram(3, C, sweeps=args.sweeps).fit(train, V)
        for variant in args.variants:
            tried = {}
            for a in args.word_smoothing:
                t0 = time.perf_counter()
                model = ClassNgram(3, C, interpolate=variant == "interpolated", sweeps=args.sweeps, word_smoothing=a)
                model.fit(train, V, classes=clustered.classes)
                fit_s = clustered.cluster_seconds + time.perf_counter() - t0  # clustering + counting, one a
                tried[a] = (ppl(model, "valid", valid), model, fit_s)
            best = min(tried, key=lambda a: tried[a][0])
            valid_ppl, model, fit_s = tried[best]
            by_a = ", ".join(f"{a:g}: {p:.1f}" for a, (p, _, _) in tried.items())
            paper = PAPER.get(model.C, "") if variant == "backoff" else ""
            print(f"| {model.name} | {clustered.cluster_seconds:.1f} | {fit_s:.1f} | {model.ami_bits:.3f} | {by_a} | "
                  f"{best:g} | {valid_ppl:.1f} | {ppl(model, 'test', test):.1f} | {paper} |", flush=True)


if __name__ == "__main__":
    main()
