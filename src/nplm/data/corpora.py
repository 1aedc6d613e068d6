"""Corpus loaders: each turns its config into token streams for the train/valid/test splits.

| name             | tokens                    | default split                                    |
|------------------|---------------------------|--------------------------------------------------|
| toy              | words of 20 sentences     | all three splits are the 20 sentences            |
| tiny_shakespeare | characters (65 symbols)   | first 90% train, last 10% valid (notebook)       |
| brown            | NLTK Brown words          | 800,000 / 200,000 / rest (Bengio et al. 2003)    |
| brown_gpt2       | GPT-2 pre-tokens of Brown | 80% / 10% / rest                                 |
| text_files       | whitespace words          | the user's three files                           |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from nplm.config.rules import show
from nplm.data import sources
from nplm.data.tokenizers import TOKENIZERS, clean_brown_text
from nplm.data.vocabulary import EOS
from nplm.errors import UserError

SHIPPED = Path(__file__).parent / "shipped"
PARAGRAPH_MARK, TEXT_MARK = "<p>", "<text>"  # Brown's paragraph and text boundaries (corpus.markers)

# The toy corpus of the hierarchical-softmax notebook: short sentences whose continuations
# ("the cat sat" -> "down", "a dog barked" -> "loudly") a model should learn exactly.
TOY_SENTENCES = [
    "the cat sat down",
    "the cat sat down on the mat",
    "the dog sat down",
    "a dog barked loudly",
    "a cat ran away",
    "the dog ran to the park",
    "a bird sang a song",
    "the bird flew away",
    "the cat ate the fish",
    "a dog ate a bone",
    "the sun is hot",
    "the moon is bright",
    "a cat sat on a wall",
    "the dog barked at the cat",
    "a bird sat on the tree",
    "the fish swam in the pond",
    "a man walked the dog",
    "the woman fed the cat",
    "the children played in the park",
    "a dog chased the ball",
]


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


def _split(tokens: list[str], cfg: dict, tokenizer: str, files: dict[str, str]) -> CorpusText:
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


def load_toy(cfg: dict, data_dir: Path) -> CorpusText:
    tokens = [tok for s in TOY_SENTENCES for tok in s.split() + [EOS]]
    return CorpusText(tokens, list(tokens), list(tokens), "whitespace", contiguous=False)


def load_tiny_shakespeare(cfg: dict, data_dir: Path) -> CorpusText:
    """Characters of Tiny Shakespeare: the shipped copy, `corpus.path`, or a checked download."""
    path = cfg.get("path") or SHIPPED / "tinyshakespeare" / "input.txt"
    path = Path(path).expanduser()
    if not path.is_file() and cfg.get("download") and cfg.get("path") is None:
        path = sources.download(cfg["url"], data_dir / "tinyshakespeare" / "input.txt", cfg.get("sha256"))
    text = sources.read_text(path, cfg.get("encoding", "utf-8"), "corpus.path")
    return _split(list(text), cfg, "chars", {str(path): sources.sha256(path)})


def _brown(cfg: dict, data_dir: Path):
    from nltk.corpus.reader import CategorizedTaggedCorpusReader

    pointer, root = sources.nltk_corpus_root("brown", cfg.get("nltk_data"), str(data_dir / "nltk_data"),
                                             bool(cfg.get("download", True)))
    reader = CategorizedTaggedCorpusReader(pointer, r"c[a-z]\d\d", cat_file="cats.txt",
                                           tagset="brown", encoding="ascii")
    files = {str(root): sources.sha256(root)} if root.is_file() else {}
    return reader, files


def load_brown(cfg: dict, data_dir: Path) -> CorpusText:
    """NLTK's Brown corpus as one word stream in corpus order, case and punctuation kept
    (Bengio et al. 2003, section 4.1: first 800,000 words train, next 200,000 valid, rest test).

    `markers`: a PARAGRAPH_MARK token after every paragraph and a TEXT_MARK after every text, the
    paper's "syntactical marks used to separate texts and paragraphs" (1,177,359 tokens; the paper's
    stream had 1,181,041, NLTK's words alone are 1,161,192)."""
    reader, files = _brown(cfg, data_dir)
    if not cfg.get("markers"):
        return _split(list(reader.words()), cfg, "whitespace", files)
    tokens = []
    for fileid in reader.fileids():
        for paragraph in reader.paras(fileid):
            tokens.extend(word for sentence in paragraph for word in sentence)
            tokens.append(PARAGRAPH_MARK)
        tokens.append(TEXT_MARK)
    return _split(tokens, cfg, "whitespace", files)


def load_brown_gpt2(cfg: dict, data_dir: Path) -> CorpusText:
    """Brown sentences joined into text, quotes and punctuation spacing repaired, then split with the
    GPT-2 pre-tokenizer pattern (tokens keep their leading space)."""
    reader, files = _brown(cfg, data_dir)
    text = clean_brown_text(" ".join(" ".join(sent) for sent in reader.sents()))
    return _split(TOKENIZERS["gpt2"](text), cfg, "gpt2", files)


def load_text_files(cfg: dict, data_dir: Path) -> CorpusText:
    """The user's own train/valid/test files: whitespace tokens, `<eos>` after each line if `eos`."""
    encoding = cfg.get("encoding", "utf-8")
    splits, files = {}, {}
    for split in ("train", "valid", "test"):
        path = cfg.get(split)
        if not path:
            splits[split] = []
            continue
        splits[split] = _line_words(sources.read_text(path, encoding, f"corpus.{split}"), cfg)
        files[str(Path(path).expanduser())] = sources.sha256(Path(path).expanduser())
    return CorpusText(splits["train"], splits["valid"], splits["test"], "whitespace", contiguous=False, files=files)


def _line_words(text: str, cfg: dict) -> list[str]:
    """Whitespace words of each non-blank line (lowercased if `corpus.lowercase`), `<eos>` after each
    line if `corpus.eos` (default true): the tokens of a text_files split."""
    if cfg.get("lowercase"):
        text = text.lower()
    eos = [EOS] if cfg.get("eos", True) else []
    return [tok for line in text.splitlines() if line.split() for tok in line.split() + eos]


def file_tokens(cfg: dict, path: str | Path, option: str) -> list[str]:
    """The tokens of any text file as corpus `cfg` tokenises its own text (its encoding, lowercasing,
    `<eos>` per line, tokenizer), so a model trained on that corpus scores the file as it scored
    its own splits. `option` names the setting or flag in error messages."""
    name = cfg.get("name")
    text = sources.read_text(path, cfg.get("encoding", "utf-8"), option)
    if name in ("text_files", "toy"):  # toy: every sentence (line) ends in <eos>, like its own text
        return _line_words(text, cfg if name == "text_files" else {})
    if name == "tiny_shakespeare":
        return TOKENIZERS["chars"](text)
    if name == "brown_gpt2":
        return TOKENIZERS["gpt2"](text)
    if name == "brown":
        return TOKENIZERS["whitespace"](text)
    raise UserError(f"corpus.name={name!r} is not one of: {', '.join(LOADERS)}")


LOADERS: dict[str, Callable[[dict, Path], CorpusText]] = {
    "toy": load_toy,
    "tiny_shakespeare": load_tiny_shakespeare,
    "brown": load_brown,
    "brown_gpt2": load_brown_gpt2,
    "text_files": load_text_files,
}


def load_corpus(cfg: dict, data_dir: str | Path) -> CorpusText:
    name = cfg.get("name")
    if name not in LOADERS:
        raise UserError(f"corpus.name={name!r} is not one of: {', '.join(LOADERS)}")
    return LOADERS[name](cfg, Path(data_dir).expanduser())
