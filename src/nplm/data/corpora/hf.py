"""`corpus=hf`: a text column of a Hugging Face `datasets` dataset (the optional extra: `pip install 'nplm-lab[hf]'`).

`corpus.dataset` is a Hub name (`wikitext`, with `corpus.config=wikitext-2-raw-v1`), a folder written by
`DatasetDict.save_to_disk` (read with `datasets.load_from_disk`), or a local folder of data files
(`datasets.load_dataset` picks the builder from their extension). A Hub dataset is downloaded once into
the Hugging Face cache ($HF_HOME, $HF_DATASETS_CACHE) and read from there afterwards, offline too
(HF_DATASETS_OFFLINE=1); offline with no copy, one line says what to do.

Tokens as `corpus=text_files` gives them: whitespace words of each non-blank line of each row, `<eos>`
after each line (a row holding a whole document has one per line). The splits are the dataset's
`corpus.train_split` / `valid_split` / `test_split` (null: none). The run records, per split, the SHA-256
of the rows read (`Corpus.files`): the same rows give the same checksum wherever the dataset is stored.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from nplm.config.rules import Bool, Str
from nplm.data.corpora import Corpus, CorpusText, register_corpus
from nplm.data.corpora.text_files import line_words
from nplm.errors import UserError

SPLIT_KEYS = {"train": "train_split", "valid": "valid_split", "test": "test_split"}
ROWS = 1024  # rows read at a time


@register_corpus("hf", keys={
    "dataset": Str(required=True, hint="e.g. corpus.dataset=wikitext corpus.config=wikitext-2-raw-v1, or a "
                   "save_to_disk folder", doc="a Hugging Face Hub dataset name, or a save_to_disk folder (or a "
                                             "folder of data files)"),
    "config": Str(nullable=True, doc="the dataset's configuration (e.g. wikitext-2-raw-v1; null: its default)"),
    "train_split": Str(default="train", doc="the dataset's split to train on"),
    "valid_split": Str(default="validation", doc="the dataset's split to validate on"),
    "test_split": Str(nullable=True, default="test", doc="the dataset's split to test on (null: none)"),
    "text_column": Str(default="text", doc="the column holding the text"),
    "eos": Bool(default=True, doc="an <eos> token after each line"),
    "lowercase": Bool(doc="lowercase the text")})
class HuggingFace(Corpus):
    """A Hugging Face `datasets` dataset's text column: whitespace words, `<eos>` after each line."""

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> CorpusText:
        dataset = open_dataset(cfg)
        column, where = cfg.get("text_column", "text"), dataset_label(cfg)
        splits, files = {}, {}
        for split, key in SPLIT_KEYS.items():
            name = cfg.get(key)
            if name is None:
                splits[split] = []
                continue
            if name not in dataset:
                fix = " (or null: no test split)" if split == "test" else ""
                raise UserError(f"corpus.{key}={name}: {where} has no such split; its splits: "
                                f"{', '.join(dataset)}; set corpus.{key} to one of them{fix}")
            splits[split], files[f"{where}[{name}].{column}"] = split_words(dataset[name], cfg, key)
        return CorpusText(splits["train"], splits["valid"], splits["test"], "whitespace", contiguous=False,
                          files=files)

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        return line_words(text, cfg)


def split_words(rows, cfg: dict, key: str) -> tuple[list[str], str]:
    """The tokens of one split (`datasets.Dataset`) and the SHA-256 of its text column's rows."""
    column = cfg.get("text_column", "text")
    if column not in rows.column_names:
        raise UserError(f"corpus.text_column={column}: no such column in split {cfg.get(key)} of "
                        f"{dataset_label(cfg)}; its columns: {', '.join(rows.column_names)}")
    dtype = getattr(rows.features[column], "dtype", None)
    if dtype not in ("string", "large_string"):
        texts = [c for c, f in rows.features.items() if getattr(f, "dtype", None) in ("string", "large_string")]
        raise UserError(f"corpus.text_column={column}: a column of {dtype or type(rows.features[column]).__name__}, "
                        f"not text; the text columns of {dataset_label(cfg)}: {', '.join(texts) or 'none'}")
    words, digest = [], hashlib.sha256()
    for batch in rows.select_columns([column]).iter(batch_size=ROWS):
        for row in batch[column]:
            row = row or ""  # a missing value: an empty row
            digest.update(row.encode() + b"\n")
            words += line_words(row, cfg)
    if not words:
        raise UserError(f"corpus.{key}={cfg.get(key)}: column {column} of this split of {dataset_label(cfg)} has "
                        f"no words; choose another split or corpus.text_column")
    return words, digest.hexdigest()


def dataset_label(cfg: dict) -> str:
    """The dataset as messages and the run record name it: `wikitext/wikitext-2-raw-v1`, or its folder."""
    name = str(cfg.get("dataset"))
    return name + (f"/{cfg['config']}" if cfg.get("config") and not saved_folder(name) else "")


def saved_folder(name: str) -> bool:
    """`name` is a folder written by `save_to_disk` (a DatasetDict's, or one Dataset's)."""
    folder = Path(name).expanduser()
    return folder.is_dir() and any((folder / f).is_file() for f in ("dataset_dict.json", "state.json"))


def open_dataset(cfg: dict):
    """The `datasets.DatasetDict` that `corpus.dataset` names: a save_to_disk folder, a local folder of data
    files, or a Hub dataset from the Hugging Face cache (downloading it once when online)."""
    try:
        import datasets
    except ImportError:
        raise UserError("corpus=hf: needs the Hugging Face datasets package; pip install 'nplm-lab[hf]' "
                        "(or pip install datasets)") from None
    name, config = str(cfg.get("dataset")), cfg.get("config")
    folder = Path(name).expanduser()
    if saved_folder(name):  # corpus.config does not apply
        try:
            loaded = datasets.load_from_disk(str(folder))
        except (OSError, ValueError) as err:
            raise UserError(f"corpus.dataset={name}: cannot be read as a save_to_disk folder ({first_line(err)}); "
                            "save it again with DatasetDict.save_to_disk") from None
        if not isinstance(loaded, datasets.DatasetDict):
            raise UserError(f"corpus.dataset={name}: one Dataset, not a DatasetDict of splits; save "
                            "DatasetDict(train=..., validation=...) with save_to_disk")
        return loaded
    if name.startswith((".", "/", "~")) and not folder.exists():
        raise UserError(f"corpus.dataset={name}: no such folder ({folder.resolve()}); give a save_to_disk folder "
                        "or a Hugging Face Hub dataset name")
    try:
        return datasets.load_dataset(name, config)
    except ConnectionError:  # offline (HF_DATASETS_OFFLINE=1) or no network, and not in the cache
        raise UserError(f"corpus.dataset={name}: no local copy (not in the Hugging Face cache "
                        f"{datasets.config.HF_DATASETS_CACHE}, not a save_to_disk folder) and no network; download "
                        "it once online, or point corpus.dataset at a save_to_disk folder") from None
    except FileNotFoundError as err:  # datasets.exceptions.DatasetNotFoundError, a folder without data files
        raise UserError(f"corpus.dataset={name}: {first_line(err)}; give a Hugging Face Hub dataset name or a "
                        "save_to_disk folder") from None
    except ValueError as err:  # an unknown configuration, among others
        raise UserError(f"corpus.config={config}: {first_line(err)}") from None


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
