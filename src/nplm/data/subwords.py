"""Learned subword vocabularies (`corpus.tokenizer`, `corpus.vocab_size`) through Hugging Face `tokenizers`.

| kind        | model                         | pre-tokenizer                 | alphabet (smallest vocab_size)  |
|-------------|-------------------------------|-------------------------------|---------------------------------|
| `bpe`       | byte-level BPE (GPT-2)        | GPT-2's regex on bytes        | the 256 bytes: no unknown token |
| `wordpiece` | WordPiece (BERT), `##` pieces | spaces as `▁` (Metaspace)     | the training text's characters + `[UNK]` |
| `unigram`   | unigram LM (Kudo 2018)        | spaces as `▁` (Metaspace)     | the training text's characters + `<unk>` |

A subword model is trained on the training split's text only: the corpus's own tokens rendered back to
text (`nplm.data.tokenizers.render`: words joined by spaces, one line break per `<eos>`; characters and
GPT-2 pre-tokens as they are). Text is encoded a line at a time (each line with its line break), so a
file, a split and a prompt give the same ids for the same lines; each pre-token is encoded once and
remembered (the corpus repeats its words: Brown's 1.3 million tokens are about 50,000 distinct pre-tokens).
Decoding is exact: byte-level BPE gives back the bytes, the others their pieces with `▁` as a space.

The trained model travels as its `tokenizers` JSON (`to_str`): `tokenizer.json` in the run folder and
the checkpoint's `nplm` entry, so evaluation, prediction, generation and the n-gram baselines encode
with the ids the model was trained on.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from nplm.errors import UserError

KINDS = ("bpe", "wordpiece", "unigram")
FORMAT = 1  # bump when the encoding of a text changes (part of the id cache's key)
UNKNOWN = {"bpe": None, "wordpiece": "[UNK]", "unigram": "<unk>"}
BYTES = 256  # byte-level BPE's alphabet
CHUNK = 4096  # characters of a long line pre-tokenized at a time (`chunks`)
SAFE_CUT = re.compile(r"(?<=\S) (?=\S)")


def lines(text: str) -> list[str]:
    """`text` cut after each line break, the breaks kept: the units a text is encoded in."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def chunks(line: str, size: int = CHUNK) -> list[str]:
    """`line` cut into pieces of about `size` characters, each cut before a single space between two
    non-spaces: where both pre-tokenizers start a new pre-token anyway (GPT-2's regex: " word"; Metaspace:
    "▁word"), so the pieces pre-tokenize as the line does (pre-tokenizing a long line at once is slow)."""
    out, start = [], 0
    while len(line) - start > size:
        cut = SAFE_CUT.search(line, start + size)
        if cut is None:
            break
        out.append(line[start:cut.start()])
        start = cut.start()
    return out + [line[start:]]


def smallest_size(kind: str, alphabet: int) -> int:
    """The smallest `corpus.vocab_size` of `kind` for a training text of `alphabet` distinct characters."""
    return BYTES if kind == "bpe" else alphabet + 1  # + the unknown token


class Subwords:
    """A trained subword model: text <-> ids, ids in the order of its vocabulary (`tokens`)."""

    def __init__(self, tokenizer, kind: str, base: str):
        """`tokenizer`: a `tokenizers.Tokenizer`; `base`: the corpus's own tokenizer (chars, whitespace,
        gpt2), whose tokens are rendered back to text before encoding."""
        self.tokenizer, self.kind, self.base = tokenizer, kind, base
        vocab = tokenizer.get_vocab()
        self.tokens = sorted(vocab, key=vocab.get)  # id -> piece
        self.unk = UNKNOWN[kind]
        self._model, self._pre = tokenizer.model, tokenizer.pre_tokenizer
        self._cache: dict[str, list[int]] = {}

    # -- training -------------------------------------------------------------------------------------
    @classmethod
    def train(cls, kind: str, vocab_size: int, units: Callable[[], Iterable[str]], base: str,
              option: str = "corpus.vocab_size") -> "Subwords":
        """A `kind` model of `vocab_size` pieces trained on the lines `units()` yields (the training split's
        text; called once more to count the characters of kinds whose alphabet is the text's). A size
        below the alphabet is refused before training, naming the smallest that works."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        alphabet = BYTES
        if kind != "bpe":
            seen: set[str] = set()
            for unit in units():
                seen.update(unit)
            alphabet = len(seen)
        if vocab_size < smallest_size(kind, alphabet):
            what = ("the 256 bytes of byte-level BPE" if kind == "bpe" else
                    f"the {alphabet} distinct characters of the training text and {UNKNOWN[kind]}")
            raise UserError(f"{option}={vocab_size}: smaller than the alphabet of corpus.tokenizer={kind} ({what}); "
                            f"use {option} >= {smallest_size(kind, alphabet)}")
        if kind == "bpe":
            tokenizer = Tokenizer(models.BPE())
            tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            tokenizer.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                          special_tokens=[], show_progress=False)
        else:
            space = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
            if kind == "wordpiece":
                tokenizer = Tokenizer(models.WordPiece(unk_token=UNKNOWN[kind]))
                trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=[UNKNOWN[kind]],
                                                    show_progress=False)
            else:
                tokenizer = Tokenizer(models.Unigram())
                trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=[UNKNOWN[kind]],
                                                  unk_token=UNKNOWN[kind], show_progress=False)
            tokenizer.pre_tokenizer = space
        tokenizer.train_from_iterator(units(), trainer=trainer)
        return cls(tokenizer, kind, base)

    # -- text <-> ids ---------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """The ids of `text`, encoded a line at a time (`tokenizers.Tokenizer.encode` of each line)."""
        ids: list[int] = []
        cache, pre, tokenize = self._cache, self._pre, self._model.tokenize
        for chunk in (c for line in lines(text) for c in chunks(line)):
            for piece, _ in pre.pre_tokenize_str(chunk):
                found = cache.get(piece)
                if found is None:
                    found = cache[piece] = [t.id for t in tokenize(piece)]
                ids.extend(found)
        return ids

    def pieces(self, text: str) -> list[str]:
        """The pieces of `text` (its ids as vocabulary tokens)."""
        return [self.tokens[i] for i in self.encode(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`: exact for byte-level BPE (bytes that are not whole UTF-8 characters become
        U+FFFD); the pieces with `▁` as a space (`##` dropped) for the others."""
        ids = [int(i) for i in ids]
        if self.kind == "bpe":
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        pieces = (self.tokens[i] for i in ids)
        if self.kind == "wordpiece":
            pieces = (p[2:] if p.startswith("##") else p for p in pieces)
        return "".join(pieces).replace("▁", " ")

    def byte_length(self, ids: Iterable[int]) -> int:
        """UTF-8 bytes of the text `ids` cover: for byte-level BPE one per character of each piece
        (each stands for one byte), exact even where a character's bytes fall in two pieces."""
        if self.kind == "bpe":
            return sum(len(self.tokens[int(i)]) for i in ids)
        return len(self.decode(ids).encode("utf-8"))

    # -- saving -----------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain strings (checkpoints load with `torch.load(weights_only=True)`)."""
        return {"kind": self.kind, "base": self.base, "format": FORMAT, "json": self.tokenizer.to_str()}

    @classmethod
    def from_dict(cls, d: dict) -> "Subwords":
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(d["json"]), d["kind"], d["base"])
