"""Tokenised once: a corpus read line by line into token-id streams, cached under `paths.data_dir`.

A corpus whose splits are text files (`Corpus.line_files`: ptb, wikitext2, wikitext103) is read twice,
streamed a block of lines at a time: once to count the tokens of every split (the vocabulary, the
statistics checked against the published ones), once to write each split's ids straight into an
int64 `.npy` file. Memory is bounded by the id arrays and the counts, never by the text: WikiText-103's
103 million training tokens are 826 MB of ids, where a Python list of its token strings would take
several GB.

The arrays, the vocabulary and the statistics go to `<data_dir>/ids/<corpus>-<key>/`, the key a hash
of the split files' SHA-256, the tokenisation settings and the vocabulary settings (or the given
vocabulary's tokens). A later run with the same files and settings, and every job of a sweep, memory-maps
the arrays (`np.load(mmap_mode="c")`: pages read on demand and shared through the page cache) instead
of reading the text; a changed file or setting gives another key, so a new cache. A cache is built in a
temporary folder renamed into place when complete (an interrupted build leaves nothing that looks
finished), under a lock so that jobs of a sweep starting together build it once. The files' SHA-256 are
remembered by (size, mtime, inode) in `ids/hashes.json`, so an unchanged 500 MB file is not hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from nplm.data import sources
from nplm.data.vocabulary import EOS, UNK, Vocabulary
from nplm.errors import UserError

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the cache's layout or the tokenisation code changes meaning
SPLITS = ("train", "valid", "test")
VOCAB_KEYS = ("vocab_from", "min_count", "max_vocab", "unk", "order")
BLOCK = 1 << 22  # characters of text per block of lines read at a time


@dataclass
class LineFiles:
    """A corpus as text files, one per split, and how a line becomes tokens: its whitespace words, then
    `<eos>` if `eos` (after blank lines too if `blank_lines`, as WikiText's published counts have it).
    `check(stats)`: called with the per-split statistics (`SplitCounts` as dicts) on every load, e.g.
    against the corpus' published figures; raises a `UserError` to refuse the files."""

    name: str
    files: dict[str, Path]  # split -> file; a split left out has no tokens
    eos: bool = True
    blank_lines: bool = True
    lowercase: bool = False
    encoding: str = "utf-8"
    check: Callable[[dict], None] | None = field(default=None, compare=False)

    def settings(self) -> dict:
        """The tokenisation settings, part of the cache key."""
        return {"eos": self.eos, "blank_lines": self.blank_lines, "lowercase": self.lowercase,
                "encoding": self.encoding, "tokenizer": "whitespace"}

    def tokens(self, text: str) -> list[str]:
        """The tokens of `text` as a split file's lines become tokens."""
        text = text.replace("\r\n", "\n").replace("\r", "\n")  # the lines `open` reads (universal newlines)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [tok for line in lines for tok in self._line(line)]

    def _line(self, line: str) -> list[str]:
        words = (line.lower() if self.lowercase else line).split()
        return words + [EOS] if self.eos and (words or self.blank_lines) else words

    def blocks(self, split: str):
        """Lists of lines of `split`'s file, about BLOCK characters at a time."""
        path = self.files[split]
        try:
            with open(path, encoding=self.encoding, newline=None) as f:
                yield from iter(lambda: f.readlines(BLOCK), [])
        except UnicodeDecodeError as err:
            raise UserError(f"{path}: not valid {self.encoding} ({err.reason} at byte {err.start} of a block); "
                            "the file is damaged or not this corpus; replace it") from None


@dataclass
class IdStreams:
    """What `load_ids` returns: per split its ids (int64, memory-mapped), token count and OOV rate; the
    vocabulary (its `counts` the training-split counts); the files read {path: sha256}."""

    ids: dict[str, torch.Tensor]
    tokens: dict[str, int]
    oov_rate: dict[str, float]
    vocab: Vocabulary
    files: dict[str, str]
    stats: dict[str, dict]
    cache_dir: Path
    built: bool  # this call built the cache (False: it was there)
    seconds: float  # time to build or open it


def load_ids(lines: LineFiles, corpus_cfg: dict, data_dir: str | Path, vocab: Vocabulary | None = None) -> IdStreams:
    """The id streams of `lines` with the vocabulary `corpus_cfg` asks for (or `vocab`, given), from the
    cache under `data_dir` when there, else built and cached first."""
    start = time.perf_counter()
    root = Path(data_dir).expanduser() / "ids"
    root.mkdir(parents=True, exist_ok=True)
    shas = {split: file_sha256(path, root) for split, path in lines.files.items()}
    if vocab is None:
        vocab_key = {k: corpus_cfg.get(k, default) for k, default in
                     zip(VOCAB_KEYS, ("train", 1, None, UNK, "frequency"))}
    else:
        vocab_key = {"given": hashlib.sha256("\n".join([vocab.unk or "", *vocab.tokens]).encode()).hexdigest()}
    material = {"format": FORMAT, "corpus": lines.name, "files": shas, "tokenisation": lines.settings(),
                "vocabulary": vocab_key}
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:20]
    folder = root / f"{lines.name}-{key}"
    built = False
    with _lock(root / f"{folder.name}.lock"):
        if not (folder / "meta.json").is_file():
            _build(lines, corpus_cfg, vocab, material, folder)
            built = True
    meta = json.loads((folder / "meta.json").read_text())
    if lines.check is not None:
        lines.check(meta["stats"])
    given = vocab
    vocab = Vocabulary.from_dict(json.loads((folder / "vocab.json").read_text())) if given is None else given
    ids = {split: _open_ids(folder / f"{split}.npy") for split in SPLITS}
    seconds = time.perf_counter() - start
    log.info("corpus %s: token ids %s %s in %.1f s", lines.name, "built into" if built else "read from", folder,
             seconds)
    return IdStreams(ids, {s: meta["stats"].get(s, {}).get("tokens", 0) for s in SPLITS}, meta["oov_rate"], vocab,
                     {str(lines.files[s]): shas[s] for s in lines.files}, meta["stats"], folder, built, seconds)


def _open_ids(path: Path) -> torch.Tensor:
    array = np.load(path, mmap_mode="c")  # copy-on-write map: read on demand, writable, the file unchanged
    if array.size == 0:  # numpy cannot map an empty array's file: it loads as a plain empty array
        return torch.zeros(0, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.from_numpy(array)


def _build(lines: LineFiles, corpus_cfg: dict, vocab: Vocabulary | None, material: dict, folder: Path) -> None:
    """Count, make the vocabulary, encode every split into a temporary folder, rename it to `folder`."""
    counters: dict[str, Counter] = {}
    stats: dict[str, dict] = {}
    for split in lines.files:
        counters[split], stats[split] = _count(lines, split)
    if lines.check is not None:  # refuse wrong files before spending time encoding them
        lines.check(stats)
    if vocab is None:
        source = corpus_cfg.get("vocab_from", "train")
        counted = Counter()
        for split in (["train"] if source == "train" else list(lines.files)):
            counted.update(counters.get(split, {}))
        vocab = Vocabulary.from_counts(counted, min_count=int(corpus_cfg.get("min_count", 1)),
                                       max_vocab=corpus_cfg.get("max_vocab"), unk=corpus_cfg.get("unk", UNK),
                                       order=corpus_cfg.get("order", "frequency"))
        train = counters.get("train", Counter())
        counts = [train.get(tok, 0) for tok in vocab.tokens]  # = bincount of the training ids
        if vocab.unk is not None:
            counts[vocab.unk_id] = sum(train.values()) - sum(c for i, c in enumerate(counts) if i != vocab.unk_id)
        vocab.counts = counts
    elif vocab.unk is None:
        for split, counter in counters.items():
            missing = next((t for t in counter if t not in vocab.index), None)
            if missing is not None:
                raise UserError(f"token {missing!r} of the {split} split is not in the vocabulary and it has no "
                                "<unk> entry")
    oov = {}
    for split, counter in counters.items():
        total = sum(counter.values())
        unknown = sum(c for tok, c in counter.items() if tok not in vocab.index or tok == vocab.unk)
        oov[split] = unknown / total if total else 0.0
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".part"))
    try:
        for split in SPLITS:
            _encode(lines, split, vocab, stats.get(split, {}).get("tokens", 0), tmp / f"{split}.npy")
        (tmp / "vocab.json").write_text(json.dumps(vocab.to_dict()))
        (tmp / "meta.json").write_text(json.dumps({**material, "stats": stats, "oov_rate": oov}, indent=1))
        if folder.exists():  # a cache without meta.json: an older, unfinished one
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _count(lines: LineFiles, split: str) -> tuple[Counter, dict]:
    """Token counts of one split, and its statistics: whitespace words, lines (blank ones included),
    tokens (words and `<eos>`), and the distinct words plus one for `<eos>`."""
    counter: Counter = Counter()
    words = n_lines = blank = 0
    for block in lines.blocks(split):
        text = "".join(block)
        pieces = (text.lower() if lines.lowercase else text).split()
        counter.update(pieces)
        words += len(pieces)
        n_lines += len(block)
        blank += sum(1 for line in block if line.isspace() or not line)
    types = len(counter) + (EOS not in counter)
    eos = (n_lines if lines.blank_lines else n_lines - blank) if lines.eos else 0
    if eos:
        counter[EOS] += eos
    return counter, {"words": words, "lines": n_lines, "tokens": words + eos, "types": types}


def _encode(lines: LineFiles, split: str, vocab: Vocabulary, n: int, path: Path) -> None:
    """Write `split`'s ids into the int64 array file `path` ([n]), block by block."""
    if split not in lines.files or n == 0:
        np.save(path, np.zeros(0, dtype=np.int64))
        return
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(n,))
    index, unk = vocab.index, vocab.unk_id
    pos = 0
    for block in lines.blocks(split):
        if lines.eos:
            tokens: list[str] = []
            for line in block:
                tokens += lines._line(line)
        else:
            text = "".join(block)
            tokens = (text.lower() if lines.lowercase else text).split()
        if unk is None:
            ids = np.fromiter(map(index.__getitem__, tokens), dtype=np.int64, count=len(tokens))
        else:
            ids = np.fromiter(map(index.get, tokens, itertools.repeat(unk)), dtype=np.int64, count=len(tokens))
        out[pos:pos + len(ids)] = ids
        pos += len(ids)
    if pos != n:
        raise UserError(f"{lines.files[split]}: changed while it was read ({pos:,} tokens, {n:,} counted); run again")
    out.flush()
    del out


def file_sha256(path: Path, root: Path) -> str:
    """SHA-256 of `path`, remembered in `root/hashes.json` by (size, mtime, inode) so that an unchanged
    file is hashed once."""
    path = Path(path).resolve()
    st = path.stat()
    stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
    memo_file = root / "hashes.json"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    entry = memo.get(str(path))
    if entry and entry[:3] == stamp:
        return entry[3]
    digest = sources.sha256(path)
    memo[str(path)] = [*stamp, digest]
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".hashes.", suffix=".part")
    with os.fdopen(fd, "w") as f:
        json.dump(memo, f)
    os.replace(tmp, memo_file)  # last writer wins; a lost entry only costs a hash
    return digest


@contextlib.contextmanager
def _lock(path: Path):
    """An exclusive lock on `path` (POSIX flock; no lock where there is none)."""
    try:
        import fcntl
    except ImportError:  # Windows: jobs starting together may each build the cache; the rename keeps one
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
