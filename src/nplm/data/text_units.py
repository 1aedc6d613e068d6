"""Figures that compare across tokenisations: bits per byte and per-word perplexity.

Per-token perplexity exp(L / N) (L: the summed NLL in nats of the N scored tokens) depends on what a
token is. The same L divided by what those tokens cover of the text does not:

    bits per byte      bpb      = L / (B ln 2)      B: UTF-8 bytes of the text the scored tokens cover
    per-word perplexity word_ppl = exp(L / W)       W: its whitespace words, plus one per line break

The text is the corpus's tokens rendered back to text (`nplm.data.tokenizers.render`: words joined by
spaces, each `<eos>` a line break), so a word model and a subword model of the same corpus divide by the
same B and W. A word-level corpus's W is its token count (each word one, each `<eos>` one line break),
so its word_ppl is its per-token perplexity exactly; a character model's B on ASCII text is its token
count, so its bpb is log2 of its per-character perplexity.

What the scored tokens cover (`LMDataModule.setup`): every token of a split that follows the previous
split in one text (its first k predicted from that split's tail); otherwise all but the first k tokens
(the first window's context). The figures of the whole split's text less those of the first k tokens'
text: a word the cut falls inside counts with the first k (a word counts where it starts), and its
space before it counts with the word (as GPT-2's pieces carry it).

Worked example: "the cat\\nsat" is 11 bytes and 4 words (the, cat, the line break, sat); tokens the,
cat, <eos>, sat with k = 1 score cat, <eos>, sat: the text less "the" (3 bytes, 1 word) = 8 bytes,
3 words; with L = 6 nats, bpb = 6 / (8 ln 2) = 1.0820 and word_ppl = exp(6 / 3) = 7.389.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TextUnits:
    """What a split's scored tokens cover: `tokens` scored, UTF-8 `bytes` and `words` of their text."""

    tokens: int
    bytes: int
    words: int

    def less(self, tokens: int, prefix: "TextUnits") -> "TextUnits":
        """These units less the `prefix` (its `tokens` first tokens, unscored)."""
        return TextUnits(self.tokens - tokens, self.bytes - prefix.bytes, self.words - prefix.words)


def text_units(text: str, tokens: int) -> TextUnits:
    """The units of `text`, which `tokens` tokens make up."""
    return TextUnits(tokens, len(text.encode("utf-8")), len(text.split()) + text.count("\n"))


def units_of_ids(vocab, ids) -> TextUnits:
    """The units of the text of token ids `ids` of `vocab` (a `nplm.data.vocabulary.Vocabulary`): decoded by
    its subword model (bytes counted per piece, `Subwords.byte_length`), or its tokens rendered."""
    from nplm.data.tokenizers import render

    ids = [int(i) for i in ids]
    if vocab.subword is not None:
        text = vocab.subword.decode(ids)
        return TextUnits(len(ids), vocab.subword.byte_length(ids), len(text.split()) + text.count("\n"))
    return text_units(render(vocab.decode(ids), vocab.joiner), len(ids))


def figures(nll_sum: float, units: TextUnits | None) -> dict[str, float]:
    """{"bpb", "word_ppl"} of a summed NLL `nll_sum` (nats) over the scored tokens of `units`
    (module docstring); {} without units, word_ppl left out for a text without words."""
    if units is None or units.bytes <= 0:
        return {}
    out = {"bpb": nll_sum / (units.bytes * math.log(2))}
    if units.words > 0:
        out["word_ppl"] = math.exp(min(nll_sum / units.words, 700.0))
    return out
