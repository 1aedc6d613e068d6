"""Vocabulary: token <-> id, counts, and the `<unk>` fallback (Bengio et al. 2003, section 4.1)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch

from nplm.errors import UserError

UNK = "<unk>"
EOS = "<eos>"


@dataclass
class Vocabulary:
    """An ordered list of tokens with their counts (the DataModule sets them to training-split counts).

    `joiner` is the string that glues decoded tokens back into text ("" for characters and GPT-2
    pre-tokens, " " for whitespace words); `tokenizer` names how raw text is split into tokens. A learned
    subword vocabulary (`tokenizer` bpe, wordpiece or unigram) carries its model in `subword`
    (`nplm.data.subwords.Subwords`, saved beside the vocabulary, not in `to_dict`).
    """

    tokens: list[str]
    counts: list[int]
    unk: str | None = UNK
    joiner: str = " "
    tokenizer: str = "whitespace"
    index: dict[str, int] = field(init=False, repr=False)
    subword: object | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.index = {tok: i for i, tok in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise ValueError("vocabulary tokens must be unique")
        if self.unk is not None and self.unk not in self.index:
            raise ValueError(f"unknown-word token {self.unk!r} is not in the vocabulary")

    @classmethod
    def build(
        cls,
        streams: Iterable[Sequence[str]],
        *,
        min_count: int = 1,
        max_vocab: int | None = None,
        unk: str | None = UNK,
        order: str = "frequency",
        joiner: str = " ",
        tokenizer: str = "whitespace",
    ) -> "Vocabulary":
        """Count tokens in `streams`; keep those seen >= `min_count` times, at most `max_vocab` (the
        most frequent, `<unk>` included); map the rest to `unk`. `order` is "frequency" (most frequent
        first, ties by token) or "sorted" (lexicographic, as the character notebooks do)."""
        counter: Counter[str] = Counter()
        for stream in streams:
            counter.update(stream)
        return cls.from_counts(counter, min_count=min_count, max_vocab=max_vocab, unk=unk, order=order,
                               joiner=joiner, tokenizer=tokenizer)

    @classmethod
    def from_counts(
        cls,
        counter: Counter[str],
        *,
        min_count: int = 1,
        max_vocab: int | None = None,
        unk: str | None = UNK,
        order: str = "frequency",
        joiner: str = " ",
        tokenizer: str = "whitespace",
    ) -> "Vocabulary":
        """`build` from token counts already taken (a corpus read line by line, `nplm.data.id_cache`)."""
        by_freq = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
        kept = [(tok, c) for tok, c in by_freq if c >= min_count and tok != unk]
        if max_vocab is not None:
            kept = kept[: max_vocab - (1 if unk is not None else 0)]
        dropped = sum(counter.values()) - sum(c for _, c in kept)
        if unk is None and dropped:
            limits = f"corpus.min_count={min_count}" + (f" or corpus.max_vocab={max_vocab}" if max_vocab else "")
            raise UserError(f"corpus.unk=null: {dropped} tokens fall below {limits}, and without an unknown-word "
                            "token they cannot be kept; set corpus.unk=<unk>, or lower corpus.min_count (raise corpus.max_vocab)")
        if order == "sorted":
            kept.sort(key=lambda kv: kv[0])
        elif order != "frequency":
            raise UserError(f"corpus.order={order!r} is not one of: frequency, sorted")
        if unk is not None:
            kept.append((unk, dropped))
        return cls([t for t, _ in kept], [c for _, c in kept], unk=unk, joiner=joiner, tokenizer=tokenizer)

    @classmethod
    def of_subwords(cls, subword, train_ids: torch.Tensor) -> "Vocabulary":
        """The vocabulary of a subword model (its pieces in id order), counted on the training ids."""
        counts = torch.bincount(train_ids, minlength=len(subword.tokens)).tolist()
        return cls(list(subword.tokens), counts, unk=subword.unk, joiner="", tokenizer=subword.kind, subword=subword)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def unk_id(self) -> int | None:
        return None if self.unk is None else self.index[self.unk]

    def encode(self, tokens: Sequence[str]) -> torch.Tensor:
        """Token strings -> int64 ids `[L]`; unknown tokens become `<unk>` (or raise without one)."""
        unk_id = self.unk_id
        if unk_id is None:
            missing = next((t for t in tokens if t not in self.index), None)
            if missing is not None:
                raise UserError(f"token {missing!r} is not in the vocabulary and it has no <unk> entry")
            return torch.tensor([self.index[t] for t in tokens], dtype=torch.long)
        get = self.index.get
        return torch.tensor([get(t, unk_id) for t in tokens], dtype=torch.long)

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[int(i)] for i in ids]

    def oov_rate(self, tokens: Sequence[str]) -> float:
        """Fraction of `tokens` that are not in the vocabulary (mapped to `<unk>`)."""
        if not tokens:
            return 0.0
        return sum(1 for t in tokens if t not in self.index or t == self.unk) / len(tokens)

    def to_dict(self) -> dict:
        """Plain lists and strings, so checkpoints load with `torch.load(weights_only=True)`."""
        return {"tokens": list(self.tokens), "counts": list(self.counts), "unk": self.unk,
                "joiner": self.joiner, "tokenizer": self.tokenizer}

    @classmethod
    def from_dict(cls, d: dict) -> "Vocabulary":
        return cls(list(d["tokens"]), list(d["counts"]), unk=d["unk"], joiner=d["joiner"],
                   tokenizer=d["tokenizer"])
