"""Which Brown preprocessing would give Morin & Bengio (2005)'s interpolated trigram, 268.7?

Their protocol (section 5): Brown, the 10,000 most frequent words (others <unk>), 900,000 words train,
100,000 valid, the rest test, 1,105,515 words in all. NLTK's copy has 1,161,192 tokens. This probe
applies candidate preprocessings to NLTK's tagged words, keeps the protocol (vocabulary counted on
train), fits the deleted-interpolation trigram (`DeletedInterpolationTrigram`, lambdas by EM on valid)
and prints the test perplexity of each, with the corpus size it implies. Two more candidates keep
NLTK's tokens but change which text lands in the test split (the corpus order is the paper's guess
too), and a second perplexity column leaves the `<unk>` targets out. No candidate matches both the
paper's size and its perplexity; the result is quoted in experiments/morin2005/INTRO.md.

    NLTK_DATA=/work/shared/data/nltk_data OMP_NUM_THREADS=1 python experiments/morin2005/preprocessing_probe.py
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from nplm.ngram import DeletedInterpolationTrigram

PUBLISHED_TRIGRAM, PUBLISHED_TOKENS = 268.7, 1_105_515
PUNCTUATION_TAGS = {".", ",", "``", "''", "--", "(", ")", ":", "'"}  # Brown tags of punctuation tokens
QUOTE_TAGS = {"``", "''"}


def trigram_test_perplexity(words: list[str]) -> tuple[float, float, float]:
    """(test perplexity, the same without <unk> targets, test <unk> rate) of the DI trigram under Morin
    & Bengio's split."""
    train, valid, test = words[:900_000], words[900_000:1_000_000], words[1_000_000:]
    index = {w: i for i, (w, _) in enumerate(Counter(train).most_common(9_999))}
    unk = len(index)  # id 9,999: every other word

    def encode(ws: list[str]) -> np.ndarray:
        return np.array([index.get(w, unk) for w in ws], dtype=np.int64)  # [len(ws)]

    a, b, c = encode(train), encode(valid), encode(test)
    model = DeletedInterpolationTrigram().fit(a, b, unk + 1, valid_prefix=a[-2:])
    log_p = model.score(c, context_prefix=np.concatenate([a, b]))  # [len(test)]
    known = c != unk  # [len(test)]
    return math.exp(-log_p.mean()), math.exp(-log_p[known].mean()), float((~known).mean())


def main() -> None:
    from nltk.corpus import brown

    tagged = list(brown.tagged_words())
    words = [w for w, _ in tagged]
    head = len(words) - 1_000_000  # tokens at the start that move to the test split
    shuffled = np.random.default_rng(0).permutation(len(brown.fileids()))
    candidates = {
        "as NLTK has it (our protocol)": words,
        "test split from the corpus start": words[head:] + words[:head],
        "files in random order (seed 0)": [w for i in shuffled for w in brown.words(brown.fileids()[i])],
        "lowercased": [w.lower() for w, _ in tagged],
        "without quote tokens": [w for w, t in tagged if t not in QUOTE_TAGS],
        "without punctuation tokens": [w for w, t in tagged if t not in PUNCTUATION_TAGS],
        "lowercased, without punctuation": [w.lower() for w, t in tagged if t not in PUNCTUATION_TAGS],
    }
    print(f"Published: {PUBLISHED_TOKENS:,} tokens, interpolated trigram test perplexity {PUBLISHED_TRIGRAM}.\n")
    print("| preprocessing | tokens | test tokens | test <unk> rate | DI trigram test ppl | without <unk> targets |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, candidate in candidates.items():
        ppl, ppl_known, unk_rate = trigram_test_perplexity(candidate)
        print(
            f"| {name} | {len(candidate):,} | {len(candidate) - 1_000_000:,} | {unk_rate:.1%} | {ppl:.1f} | {ppl_known:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
