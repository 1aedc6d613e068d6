"""ARPA back-off file of a fitted Kneser-Ney model (the format of SRILM, KenLM and the CMU toolkit).

    \\data\\
    ngram 1=M_1
    ...
    \\1-grams:
    log10 p(w)      w       log10 bow(w)
    ...
    \\n-grams:
    log10 p(w_n | w_1..w_{n-1})     w_1 ... w_n
    \\end\\

A reader scores p(w | h) = p(h w) when (h w) is listed, else bow(h) p(w | h') (bow = 1 when h is not
listed or has no weight): exactly `KneserNey._log_probs`, for both variants (an interpolated model's
listed probabilities are its interpolated ones and its weights gamma(h)). The 1-grams list all V
words (`<unk>` included); k-grams (k >= 2) the k-grams seen in training, a set closed under prefixes
and suffixes (`nplm.ngram.counts`). Words are the vocabulary's tokens, so they may not contain
whitespace. A bow of 0 (a back-off history followed by every word) is written as -99.

Optional check with KenLM (not a dependency of nplm; install it yourself, `pip install kenlm`):
KenLM refuses files without <s> and </s>, so write with `sentence_markers=True` (both listed with
log10 p = -99, never predicted here), then compare per-token log10 scores of an id stream `ids`:

    import kenlm
    lm = kenlm.Model("kn3.arpa")
    words = " ".join(vocab.decode(ids))
    kenlm_log10 = [s[0] for s in lm.full_scores(words, bos=False, eos=False)]
    ours_log10 = model.score(ids) / math.log(10)      # the same start context: a truncated history

KenLM stores probabilities quantised to float32, so expect agreement to about 1e-6.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from nplm.errors import UserError
from nplm.ngram.kneser_ney import KneserNey

LOG10_ZERO = -99.0


def _log10(x: np.ndarray) -> np.ndarray:
    out = x / math.log(10.0)
    return np.where(np.isfinite(out), out, LOG10_ZERO)


def write_arpa(model: KneserNey, tokens, path, sentence_markers: bool = False, digits: int = 8) -> dict[int, int]:
    """Write `model` to `path` with words from `tokens` (a `Vocabulary` or a list of V strings);
    returns {order: number of entries} as in the header."""
    if not isinstance(model, KneserNey) or getattr(model, "counts", None) is None:
        raise UserError("write_arpa needs a fitted KneserNey model; call KneserNey(order).fit(train_ids, V) first")
    words = list(getattr(tokens, "tokens", tokens))
    if len(words) != model.V:
        raise UserError(f"the vocabulary has {len(words)} tokens but the model was fitted with V={model.V}; "
                        "pass the vocabulary the ids were encoded with")
    bad = next((w for w in words if not w or any(ch.isspace() for ch in w)), None)
    if bad is not None:
        raise UserError(f"token {bad!r} is empty or holds whitespace, which ARPA files cannot represent; "
                        "export a word-level model")
    markers = [m for m in ("<s>", "</s>") if sentence_markers and m not in words]
    counts, n = model.counts, model.order
    sizes = {k: counts.size(k) + (len(markers) if k == 1 else 0) for k in range(1, n + 1)}
    fmt = f"{{:.{digits}f}}"
    with Path(path).open("w", encoding="utf-8") as f:
        f.write("\\data\\\n")
        for k in range(1, n + 1):
            f.write(f"ngram {k}={sizes[k]}\n")
        for k in range(1, n + 1):
            f.write(f"\n\\{k}-grams:\n")
            log_p = _log10(model.log_p[k])  # [M_k]
            if k < n:  # a bow for the k-grams that are histories of (k+1)-grams
                bow = model.log_bow[k + 1]  # [M_k] ln bow; 0 for histories with no followers
                has_bow = np.bincount(counts.prefix(k + 1), minlength=counts.size(k)) > 0  # [M_k]
                log_bow = _log10(bow)
            grams = counts.words(k)  # [M_k, k]
            for i in range(counts.size(k)):
                text = " ".join(words[j] for j in grams[i])
                line = fmt.format(log_p[i]) + "\t" + text
                if k < n and has_bow[i]:
                    line += "\t" + fmt.format(log_bow[i])
                f.write(line + "\n")
            if k == 1:
                for m in markers:
                    f.write(fmt.format(LOG10_ZERO) + "\t" + m + "\n")
        f.write("\n\\end\\\n")
    return sizes
