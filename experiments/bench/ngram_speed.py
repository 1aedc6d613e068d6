"""Count-based baselines on Brown: fit and scoring time, valid/test perplexity.

Fits modified Kneser-Ney (orders 3, 4, 5; interpolated and back-off, each keeping every n-gram and with
SRILM ngram-count's default count cutoffs, `min_counts="srilm"`: n-grams of order >= 3 seen once are
dropped) and the deleted-interpolation trigram (lambdas by EM on the validation split) on the 800,000
training words of NLTK's Brown corpus (|V| = 17,905: words seen >= 4 times in the whole corpus, as
Bengio et al. 2003), and scores the 200,000 validation words and the test rest, each split's first
words with the previous split's tail as history (the corpus is one contiguous text). Bengio et al.
(2003), table 1, on their Brown split (|V| = 16,383), valid/test: deleted-interpolation trigram
352/336, back-off Kneser-Ney (SRILM) n = 3/4/5: 334/323, 332/321, 332/321.

    OMP_NUM_THREADS=1 python experiments/bench/ngram_speed.py [--nltk-data /work/shared/data/nltk_data]

Prints one row per model (times and perplexities), then the Kneser-Ney rows side by side.
"""

from __future__ import annotations

import argparse
import math
import platform
import time

import numpy as np

from nplm.ngram import DeletedInterpolationTrigram, KneserNey, split_context, write_arpa
from replication import corpus_datamodule

PAPER = {"deleted_interpolation3": (352, 336), 3: (334, 323), 4: (332, 321), 5: (332, 321)}  # (valid, test)
ORDERS = (3, 4, 5)
VARIANTS = [(False, None, "back-off"), (False, "srilm", "back-off, SRILM cutoffs"),
            (True, None, "interpolated"), (True, "srilm", "interpolated, SRILM cutoffs")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nltk-data", default="/work/shared/data/nltk_data")
    args = parser.parse_args()
    t0 = time.perf_counter()
    dm = corpus_datamodule(["corpus=brown", f"corpus.nltk_data={args.nltk_data}", "corpus.download=false"])
    V = len(dm.vocab)
    train, valid, test = (dm.ids[s].numpy() for s in ("train", "valid", "test"))
    print(f"Machine: {platform.machine()}, numpy {np.__version__}. Brown: |V| = {V:,}, train {len(train):,}, "
          f"valid {len(valid):,}, test {len(test):,} tokens (loaded in {time.perf_counter() - t0:.1f} s)\n")
    print("| model | fit s | score valid s | valid ppl | test ppl | Bengio et al. 2003 valid / test |")
    print("|---|---|---|---|---|---|")
    models = [KneserNey(n, interpolate, min_counts=cutoffs) for interpolate, cutoffs, _ in VARIANTS for n in ORDERS]
    models.append(DeletedInterpolationTrigram())
    ppl = {}  # (interpolate, cutoffs, n) -> (valid, test)
    for model in models:
        t0 = time.perf_counter()
        if isinstance(model, DeletedInterpolationTrigram):
            model.fit(train, valid, V, valid_prefix=split_context(dm, "valid", 3))
        else:
            model.fit(train, V)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        lp_valid = model.score(valid, split_context(dm, "valid", model.order))
        score_s = time.perf_counter() - t0
        lp_test = model.score(test, split_context(dm, "test", model.order))
        ppl_valid, ppl_test = math.exp(-lp_valid.mean()), math.exp(-lp_test.mean())
        if isinstance(model, KneserNey):
            cutoffs = None if model.min_counts == (1,) * model.order else "srilm"
            ppl[model.interpolate, cutoffs, model.order] = (ppl_valid, ppl_test)
            paper = PAPER[model.order] if not model.interpolate else None
        else:
            paper = PAPER[model.name]
        print(f"| {model.name} | {fit_s:.2f} | {score_s:.2f} | {ppl_valid:.1f} | {ppl_test:.1f} | "
              f"{'' if paper is None else '%d / %d' % paper} |", flush=True)

    print("\nModified Kneser-Ney, valid / test perplexity (SRILM cutoffs: min_counts = (1, 1, 2, 2, 2)[:n])\n")
    print("| n | " + " | ".join(label for *_, label in VARIANTS) + " | Bengio et al. 2003 back-off |")
    print("|---|" + "---|" * (len(VARIANTS) + 1))
    for n in ORDERS:
        cells = ["%.1f / %.1f" % ppl[interpolate, cutoffs, n] for interpolate, cutoffs, _ in VARIANTS]
        print(f"| {n} | " + " | ".join(cells) + " | %d / %d |" % PAPER[n])
    kenlm_check(dm, test)


def kenlm_check(dm, test) -> None:
    """The optional independent check: KenLM reads our ARPA export of the 5-gram back-off model with
    SRILM cutoffs and scores the test split; the largest per-token difference from our scores."""
    try:
        import kenlm
    except ImportError:
        print("\nKenLM check skipped: `pip install kenlm` (it builds from source) to run it.")
        return
    import tempfile
    from pathlib import Path

    model = KneserNey(5, interpolate=False, min_counts="srilm").fit(dm.ids["train"].numpy(), len(dm.vocab))
    with tempfile.TemporaryDirectory() as tmp:
        write_arpa(model, dm.vocab, Path(tmp) / "kn5.arpa", sentence_markers=True)
        lm = kenlm.Model(str(Path(tmp) / "kn5.arpa"))
    prefix = split_context(dm, "test", 5)  # the previous split's tail, scored but not compared
    words = " ".join(dm.vocab.tokens[i] for i in np.concatenate([prefix, test]))
    theirs = np.array([s[0] for s in lm.full_scores(words, bos=False, eos=False)])[len(prefix):]  # [L] log10
    ours = model.score(test, prefix) / math.log(10)  # [L]
    print(f"\nKenLM reading our ARPA export ({model.name}): test tokens {len(ours):,}, "
          f"max |log10 p difference| {np.abs(theirs - ours).max():.2e}, KenLM perplexity "
          f"{10 ** -theirs.mean():.2f} vs ours {math.exp(-model.score(test, prefix).mean()):.2f}")


if __name__ == "__main__":
    main()
