"""A WikiText-103-shaped corpus for measuring: Zipf-distributed words with WikiText-103's vocabulary
size and token counts, written as text files like the real ones, deterministic from a seed.

    python experiments/scale/make_corpus.py [--out DIR] [--seed 0] [--zipf 1.0]

Writes DIR/wiki.{train,valid,test}.tokens (default DIR: data_cache/scale/wikitext103-zipf, git-ignored:
the files are generated where they are needed, never committed; ~0.5 GB). The shape is the one
`corpus=wikitext103` checks a real copy against (nplm.data.corpora.wikitext.WikiText103.published):

- per split the published number of lines (1,801,350 / 3,760 / 4,358) and whitespace words
  (101,425,671 / 213,886 / 241,211), so with one <eos> per line the published token counts
  103,227,021 / 217,646 / 245,569;
- 267,734 distinct words, so |V| = 267,735 with <eos>: rank r (0-based) drawn with probability
  proportional to 1 / (r + 1)^zipf; rank 19 is the literal `<unk>` (~0.4% of the words, WikiText-103's
  out-of-vocabulary rate), the others are letter strings, shortest for the most frequent ranks. Every
  word occurs in the training split (the rare ranks missing from the draw replace random training
  words), so valid and test have no unseen word, as in the real corpus;
- lines as in the files: " w1 w2 ... \\n" and blank " \\n" lines, every other line blank, the words
  spread over the others at random (a multinomial).

`corpus=wikitext103 corpus.path=DIR` therefore loads it and passes the published-statistics check.
Not the real text: no sentences, no topical bursts, no headings; for timing and memory, not perplexity.
"""

from __future__ import annotations

import argparse
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "data_cache" / "scale" / "wikitext103-zipf"
SPLITS = ("train", "valid", "test")
UNK_RANK = 19
CHUNK_LINES = 1 << 15  # lines generated and written at a time


@dataclass(frozen=True)
class Shape:
    """Distinct words (`<eos>` not counted), and per split whitespace words and lines."""

    types: int
    words: dict[str, int]
    lines: dict[str, int]

    @classmethod
    def wikitext103(cls) -> "Shape":
        from nplm.data.corpora.wikitext import WikiText103

        p = WikiText103.published
        return cls(types=p.types - 1, words=dict(p.words), lines=dict(p.lines))


def word_strings(types: int) -> np.ndarray:
    """The word of each rank: letter strings by rank in base 26 (a, b, ..., z, aa, ab, ...), `<unk>` at
    UNK_RANK. An object array, so that `words[ids]` gathers Python strings."""
    letters = string.ascii_lowercase
    out = []
    for r in range(types):
        if r == UNK_RANK:
            out.append("<unk>")
            continue
        s, n = "", r + 1
        while n > 0:
            n, d = divmod(n - 1, 26)
            s = letters[d] + s
        out.append(s)
    return np.array(out, dtype=object)


def zipf_cdf(types: int, zipf: float) -> np.ndarray:
    p = 1.0 / np.arange(1, types + 1, dtype=np.float64) ** zipf
    cdf = np.cumsum(p)
    return cdf / cdf[-1]


def make_corpus(out: Path, shape: Shape, seed: int = 0, zipf: float = 1.0, log=print) -> dict[str, Path]:
    """Write the three split files into `out`; returns {split: path}. The same arguments give the
    same bytes."""
    out.mkdir(parents=True, exist_ok=True)
    words = word_strings(shape.types)
    cdf = zipf_cdf(shape.types, zipf)
    seeds = np.random.SeedSequence(seed).spawn(len(SPLITS))
    paths = {}
    for split, seq in zip(SPLITS, seeds):
        start = time.perf_counter()
        rng = np.random.default_rng(seq)
        n_lines, n_words = shape.lines[split], shape.words[split]
        text_lines = np.arange(0, n_lines, 2)  # every other line has words
        per_line = np.zeros(n_lines, dtype=np.int64)
        per_line[text_lines] = rng.multinomial(n_words, np.full(len(text_lines), 1 / len(text_lines)))
        ids = np.empty(n_words, dtype=np.int32)  # [words] ranks, drawn by inverse CDF a chunk at a time
        for lo in range(0, n_words, 1 << 23):
            hi = min(n_words, lo + (1 << 23))
            ids[lo:hi] = np.minimum(np.searchsorted(cdf, rng.random(hi - lo), side="right"), shape.types - 1)
        if split == "train":  # every word at least once: the missing ranks replace random positions
            missing = np.flatnonzero(np.bincount(ids, minlength=shape.types) == 0)
            if len(missing):
                where = rng.choice(n_words, size=len(missing), replace=False)
                ids[where] = missing
                assert (np.bincount(ids, minlength=shape.types) > 0).all()
        path = out / f"wiki.{split}.tokens"
        tmp = path.with_name(path.name + ".part")
        ends = np.cumsum(per_line)
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for first in range(0, n_lines, CHUNK_LINES):
                last = min(n_lines, first + CHUNK_LINES)
                lo = int(ends[first - 1]) if first else 0
                hi = int(ends[last - 1])
                tokens = words[ids[lo:hi]].tolist()
                bounds = (ends[first:last] - lo).tolist()
                lines, prev = [], 0
                for b in bounds:
                    lines.append(" " + " ".join(tokens[prev:b]) + " \n" if b > prev else " \n")
                    prev = b
                f.write("".join(lines))
        tmp.replace(path)
        paths[split] = path
        log(f"{path}: {n_words:,} words in {n_lines:,} lines, {path.stat().st_size / 1e6:.0f} MB, "
            f"{time.perf_counter() - start:.0f} s")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent s: P(rank r) ~ 1/r^s (default 1)")
    args = parser.parse_args()
    make_corpus(args.out, Shape.wikitext103(), args.seed, args.zipf)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    main()
