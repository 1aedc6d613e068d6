"""Tokenizers: characters, whitespace words, and the GPT-2 pre-tokenizer on cleaned Brown text."""

from __future__ import annotations

from typing import Callable

import regex

from nplm.data.vocabulary import EOS

# The pre-tokenizer pattern of OpenAI's GPT-2 (encoder.py); `regex` provides \p{L} and \p{N}.
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

# Brown's detokenisation fixes: ``/'' quote pairs become " hugging the quoted words, and no space
# before closing punctuation.
_OPEN_QUOTE = regex.compile(r"`` *")
_CLOSE_QUOTE = regex.compile(r" *''")
_SPACE_BEFORE_PUNCT = regex.compile(r" +([.,;:!?)\]}]|'s\b|n't\b)")
_SPACE_AFTER_OPEN = regex.compile(r"([(\[{]) +")


def chars(text: str) -> list[str]:
    return list(text)


def whitespace(text: str) -> list[str]:
    return text.split()


def gpt2(text: str) -> list[str]:
    """GPT-2 pre-tokens: words keep their leading space (" the"), so decoding joins with ""."""
    return GPT2_PATTERN.findall(text)


def clean_brown_text(text: str) -> str:
    """Undo Brown's tokenisation: ``x'' becomes "x", no space before , . ; : ! ? ) or 's / n't."""
    text = _CLOSE_QUOTE.sub('"', _OPEN_QUOTE.sub('"', text))
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return _SPACE_AFTER_OPEN.sub(r"\1", text)


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {"chars": chars, "whitespace": whitespace, "gpt2": gpt2}
JOINERS = {"chars": "", "whitespace": " ", "gpt2": ""}


def render(tokens: list[str], joiner: str) -> str:
    """A corpus's tokens as text: joined with `joiner` ("" for characters and GPT-2 pre-tokens, which
    carry their own whitespace); words (" ") joined by spaces with each `<eos>` a line break and no space
    around it: ["a", "b", "<eos>", "c"] -> "a b\\nc". The text subword models train on and encode, and
    whose bytes and words `nplm.data.text_units` counts."""
    if joiner == "":
        return "".join(tokens)
    out, line = [], []
    for tok in tokens:
        if tok == EOS:
            out.append(" ".join(line) + "\n")
            line = []
        else:
            line.append(tok)
    out.append(" ".join(line))
    return "".join(out)
