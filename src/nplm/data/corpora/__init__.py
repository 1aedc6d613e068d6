"""Corpora (config group `corpus`): each turns its config into token streams for the train/valid/test splits.

| name             | tokens                    | default split                                    |
|------------------|---------------------------|--------------------------------------------------|
| toy              | words of 20 sentences     | all three splits are the 20 sentences            |
| tiny_shakespeare | characters (65 symbols)   | first 90% train, last 10% valid (notebook)       |
| brown            | NLTK Brown words          | 800,000 / 200,000 / rest (Bengio et al. 2003)    |
| brown_gpt2       | GPT-2 pre-tokens of Brown | 80% / 10% / rest                                 |
| text_files       | whitespace words          | the user's three files                           |
| ptb              | Mikolov's PTB words       | ptb.train/valid/test.txt as distributed          |
| wikitext2        | WikiText-2 (v1) words     | wiki.train/valid/test.tokens as distributed      |
| wikitext103      | WikiText-103 (v1) words   | wiki.train/valid/test.tokens as distributed      |
| hf               | words of a `datasets` set | the dataset's named splits (nplm-lab[hf] extra)  |

Each corpus is a class in a module of this package, registered by name with the keys its yaml file
may set (`register_corpus`): `load(cfg, data_dir) -> CorpusText` reads its splits, and
`tokens(cfg, text)` tokenises any text as the corpus tokenises its own (`nplm-eval --text`).
A corpus whose splits are text files read line by line may also give `line_files(cfg, data_dir)`:
the datamodule then streams them into token ids once and caches those (`nplm.data.id_cache`).
Every corpus takes the common keys: its vocabulary settings, and `tokenizer` / `vocab_size`, a learned
subword vocabulary over its tokens rendered back to text (`nplm.data.subwords`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nplm.config.registry import Registry
from nplm.config.rules import Check, Choice, FilePath, Int, Size, Str, show
from nplm.data import sources
from nplm.data.subwords import BYTES
from nplm.data.subwords import KINDS as SUBWORD_KINDS
from nplm.errors import UserError


def _one_rest(c: dict) -> str | None:
    if "train_size" in c and c.get("valid_size") is None and c.get("test_size") is None:
        return "a number when corpus.test_size=null (only one of valid_size / test_size may be the rest)"
    return None


def _trains(c: dict) -> str | None:
    """A training split of 0 tokens (or 0% of the text) trains nothing, whatever the corpus holds."""
    if c.get("train_size", 1) == 0:
        return "a token count >= 1 or a fraction in (0, 1] (0 leaves no training split)"
    return None


def _subword_size(c: dict) -> str | None:
    if c.get("tokenizer") is not None and c.get("vocab_size") is None:
        return f"a number of pieces with corpus.tokenizer={c['tokenizer']}, e.g. corpus.vocab_size=2000"
    if c.get("tokenizer") == "bpe" and c.get("vocab_size") is not None and c["vocab_size"] < BYTES:
        return f"at least {BYTES} with corpus.tokenizer=bpe (its alphabet is the {BYTES} bytes), e.g. corpus.vocab_size=512"
    if c.get("tokenizer") is None and c.get("vocab_size") is not None:
        return "null without corpus.tokenizer (set corpus.tokenizer=bpe to learn a subword vocabulary)"
    return None


CORPORA = Registry("corpus", __name__, common={
    "vocab_from": Choice(options=("train", "all"), doc="count the vocabulary on the training split or all splits"),
    "min_count": Int(1, doc="words seen fewer times become <unk>"),
    "max_vocab": Int(2, nullable=True, doc="keep only the N most frequent (<unk> included)"),
    "unk": Str(nullable=True, doc="the unknown-word token (null: none; every word must be in the vocabulary)"),
    "order": Choice(options=("frequency", "sorted"), doc="word ids by frequency or in sorted order"),
    "tokenizer": Choice(options=SUBWORD_KINDS, nullable=True, doc="a learned subword vocabulary trained on the "
                        "training split (nplm.data.subwords; null: the corpus's own tokens)"),
    "vocab_size": Int(2, nullable=True, doc="pieces of the subword vocabulary (with corpus.tokenizer)"),
}, checks=(Check("valid_size", _one_rest), Check("vocab_size", _subword_size), Check("train_size", _trains)))
register_corpus = CORPORA.register
# The vocabulary keys a learned subword vocabulary (corpus.tokenizer) makes meaningless: its pieces are
# corpus.vocab_size, learned on the training split, in the tokenizer's order, with its own unknown token.
SUBWORD_IGNORES = ("vocab_from", "min_count", "max_vocab", "unk", "order")


def missing_file(cfg: dict, fix: str) -> None:
    """Refuse corpus `cfg` (as a checkpoint recorded it) where a key naming a file (a `FilePath` rule) names one
    that is gone, before anything is read: the file, and besides putting it back, `fix` (the command's own)."""
    for key, rule in CORPORA[cfg["name"]].keys.items():
        path = cfg.get(key)
        if isinstance(rule, FilePath) and path and not Path(path).expanduser().is_file():
            raise UserError(f"corpus.{key}={path}: no such file ({Path(path).expanduser().resolve()}), a file of "
                            f"the checkpoint's corpus; put it back, or {fix}")
# The split sizes of a corpus that is one text cut in three (`split`).
SIZES = {"train_size": Size(required=True, doc="training tokens (a count, or a fraction of the corpus)"),
         "valid_size": Size(nullable=True, doc="validation tokens (null: the rest)"),
         "test_size": Size(nullable=True, doc="test tokens (null: the rest)")}


class Corpus:
    """A corpus option: `load` its splits; `tokens` of any text as it tokenises its own."""

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> "CorpusText":
        raise NotImplementedError

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        raise NotImplementedError

    @classmethod
    def line_files(cls, cfg: dict, data_dir: Path):
        """The split files and how their lines become tokens (`nplm.data.id_cache.LineFiles`) for a corpus
        the datamodule should tokenise once and cache; None (the default): it calls `load`."""
        return None


@dataclass
class CorpusText:
    """Token streams of the three splits. `contiguous`: valid follows train and test follows valid
    in one text, so a split's first tokens take their context from the end of the previous split."""

    train: list[str]
    valid: list[str]
    test: list[str]
    tokenizer: str
    contiguous: bool
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256, for reproducibility


def split_sizes(total: int, train_size, valid_size, test_size) -> tuple[int, int, int]:
    """Sizes of train/valid/test in tokens. Each size is a count (int), a fraction of `total`
    (float <= 1), or null for "the rest" (at most one of valid/test; nplm.config.schema checks them)."""

    def resolve(size) -> int | None:
        return None if size is None else int(size * total) if isinstance(size, float) else int(size)

    n_train, n_valid, n_test = resolve(train_size), resolve(valid_size), resolve(test_size)
    if n_valid is None:
        n_valid = total - n_train - n_test
    if n_test is None:
        n_test = total - n_train - n_valid
    if min(n_valid, n_test) < 0 or n_train + n_valid + n_test > total:
        asked = n_train + max(n_valid, 0) + max(n_test, 0)
        raise UserError(f"corpus.train_size={show(train_size)}: with corpus.valid_size={show(valid_size)} and "
                        f"corpus.test_size={show(test_size)} the splits need {asked} tokens, more than the corpus' "
                        f"{total}; lower them")
    return n_train, n_valid, n_test


def split(tokens: list[str], cfg: dict, tokenizer: str, files: dict[str, str]) -> CorpusText:
    n_train, n_valid, n_test = split_sizes(len(tokens), cfg["train_size"], cfg.get("valid_size"),
                                           cfg.get("test_size"))
    return CorpusText(
        train=tokens[:n_train],
        valid=tokens[n_train:n_train + n_valid],
        test=tokens[n_train + n_valid:n_train + n_valid + n_test],
        tokenizer=tokenizer,
        contiguous=True,
        files=files,
    )


def file_tokens(cfg: dict, path: str | Path, option: str) -> list[str]:
    """The tokens of any text file as corpus `cfg` tokenises its own text (its encoding, lowercasing,
    `<eos>` per line, tokenizer), so a model trained on that corpus scores the file as it scored
    its own splits. `option` names the setting or flag in error messages."""
    text = sources.read_text(path, cfg.get("encoding", "utf-8"), option)
    return CORPORA.get(cfg.get("name")).tokens(cfg, text)


def load_corpus(cfg: dict, data_dir: str | Path) -> CorpusText:
    return CORPORA.get(cfg.get("name")).load(cfg, Path(data_dir).expanduser())
