"""`corpus=text_files`: the user's own train/valid/test files, whitespace words, `<eos>` per line."""

from __future__ import annotations

from pathlib import Path

from nplm.config.rules import Bool, Encoding, FilePath
from nplm.data import sources
from nplm.data.corpora import Corpus, CorpusText, register_corpus
from nplm.data.vocabulary import EOS


def line_words(text: str, cfg: dict) -> list[str]:
    """Whitespace words of each non-blank line (lowercased if `corpus.lowercase`), `<eos>` after each
    line if `corpus.eos` (default true): the tokens of a text_files split."""
    if cfg.get("lowercase"):
        text = text.lower()
    eos = [EOS] if cfg.get("eos", True) else []
    return [tok for line in text.splitlines() if line.split() for tok in line.split() + eos]


@register_corpus("text_files", keys={
    "train": FilePath(required=True, hint="e.g. corpus.train=/path/to/train.txt", doc="the training text"),
    "valid": FilePath(required=True, hint="e.g. corpus.valid=/path/to/valid.txt", doc="the validation text"),
    "test": FilePath(nullable=True, doc="the test text (null: none)"),
    "eos": Bool(doc="an <eos> token after each line"), "lowercase": Bool(doc="lowercase the text"),
    "encoding": Encoding(doc="the files' text encoding")})
class TextFiles(Corpus):
    """Your own files: whitespace words, `<eos>` after each line."""

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> CorpusText:
        encoding = cfg.get("encoding", "utf-8")
        splits, files = {}, {}
        for split in ("train", "valid", "test"):
            path = cfg.get(split)
            if not path:
                splits[split] = []
                continue
            splits[split] = line_words(sources.read_text(path, encoding, f"corpus.{split}"), cfg)
            files[str(Path(path).expanduser())] = sources.sha256(Path(path).expanduser())
        return CorpusText(splits["train"], splits["valid"], splits["test"], "whitespace", contiguous=False,
                          files=files)

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        return line_words(text, cfg)
