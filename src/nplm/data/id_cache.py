"""Tokenised once: a corpus read line by line into token-id streams, cached under `paths.data_dir`.

A corpus whose splits are text files (`Corpus.line_files`: ptb, wikitext2, wikitext103) is read once,
streamed a block of lines at a time: each token becomes a provisional id (the order of first appearance,
one dictionary lookup per token), kept as int32 arrays; their counts give the statistics checked against
the published ones and the vocabulary, and each split's final ids are then written, through one
provisional -> vocabulary id table, into an int64 `.npy` file. Memory is bounded by the id arrays and
the vocabulary, never by the text: WikiText-103's 103 million training tokens are 413 MB of provisional
and 826 MB of final ids, where a Python list of its token strings would take several GB.

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
import shutil
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from nplm.data import sources, subwords
from nplm.data.subwords import Subwords
from nplm.data.vocabulary import EOS, UNK, Vocabulary
from nplm.errors import UserError, WriteError
from nplm.files import atomic_write, cannot_write

log = logging.getLogger(__name__)

FORMAT = 2  # bump when the cache's layout or the tokenisation code changes meaning
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
    settings = lines.settings()
    if corpus_cfg.get("tokenizer") is not None:  # a learned subword vocabulary (nplm.data.subwords)
        settings["subwords"] = {"kind": corpus_cfg["tokenizer"], "vocab_size": corpus_cfg.get("vocab_size"),
                                "format": subwords.FORMAT}
    if vocab is None:
        vocab_key = {k: corpus_cfg.get(k, default) for k, default in
                     zip(VOCAB_KEYS, ("train", 1, None, UNK, "frequency"))}
    else:
        given = (vocab.subword.to_dict()["json"] if vocab.subword is not None
                 else "\n".join([vocab.unk or "", *vocab.tokens]))
        vocab_key = {"given": hashlib.sha256(given.encode()).hexdigest()}
    material = {"format": FORMAT, "corpus": lines.name, "files": shas, "tokenisation": settings,
                "vocabulary": vocab_key}
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:20]
    folder = root / f"{lines.name}-{key}"
    built = False
    with _lock(root / f"{folder.name}.lock"):
        if not (folder / "meta.json").is_file():
            build = _build_subwords if "subwords" in settings else _build
            build(lines, corpus_cfg, vocab, material, folder)
            built = True
    meta = json.loads((folder / "meta.json").read_text())
    if lines.check is not None:
        lines.check(meta["stats"])
    if vocab is None:
        vocab = Vocabulary.from_dict(json.loads((folder / "vocab.json").read_text()))
        if "subwords" in settings:
            vocab.subword = Subwords.from_dict(json.loads((folder / "tokenizer.json").read_text()))
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
    """Read every split once into provisional ids (`_read_split`), make the vocabulary from their
    counts, then write each split's final ids into a temporary folder renamed to `folder`."""
    start = time.perf_counter()
    first_seen = defaultdict(itertools.count().__next__)  # token -> provisional id, in order of appearance
    read, stats = {}, {}
    for split in lines.files:
        read[split], stats[split] = _read_split(lines, split, first_seen)
    if lines.check is not None:  # refuse wrong files before spending time on them
        lines.check(stats)
    seconds = {"read": time.perf_counter() - start}
    tokens = list(first_seen)  # provisional id -> token
    n = len(tokens)
    counts = {split: _counts(chunks, n) for split, chunks in read.items()}  # provisional id -> count
    if vocab is None:
        source = ["train"] if corpus_cfg.get("vocab_from", "train") == "train" else list(lines.files)
        counted = sum((counts[s] for s in source if s in counts), np.zeros(n, dtype=np.int64))
        vocab = Vocabulary.from_counts(Counter({t: int(c) for t, c in zip(tokens, counted) if c}),
                                       min_count=int(corpus_cfg.get("min_count", 1)),
                                       max_vocab=corpus_cfg.get("max_vocab"), unk=corpus_cfg.get("unk", UNK),
                                       order=corpus_cfg.get("order", "frequency"))
    unk = vocab.unk_id
    remap = np.array([vocab.index.get(t, -1) for t in tokens], dtype=np.int64)  # provisional id -> vocabulary id
    missing = remap < 0
    if missing.any() and unk is None:
        split = next(s for s in read if counts[s][missing].any())
        bad = tokens[int(np.flatnonzero(missing & (counts[split] > 0))[0])]
        raise UserError(f"token {bad!r} of the {split} split is not in the vocabulary and it has no <unk> entry")
    remap[missing] = unk if unk is not None else 0
    if material["vocabulary"].get("given") is None:  # built here: training-split counts (bincount of its ids)
        vocab.counts = np.bincount(remap, weights=counts.get("train", np.zeros(n)), minlength=len(vocab)
                                   ).astype(np.int64).tolist()
    is_unknown = missing.copy()
    if unk is not None:
        is_unknown |= remap == unk  # a literal <unk> counts as out of vocabulary, as Vocabulary.oov_rate
    oov = {split: float(c[is_unknown].sum() / c.sum()) if c.sum() else 0.0 for split, c in counts.items()}
    seconds["vocabulary"] = time.perf_counter() - start - seconds["read"]
    seconds["write"] = 0.0
    _write_cache(folder, read, remap, vocab, {**material, "stats": stats, "oov_rate": oov, "build_seconds": seconds})


def _write_cache(folder: Path, read: dict[str, list[np.ndarray]], remap: np.ndarray, vocab: Vocabulary, meta: dict,
                 extra: dict[str, str] | None = None) -> None:
    """Each split's ids (`read` through `remap`), the vocabulary, the `extra` files {name: text} and
    `meta` into a temporary folder renamed to `folder` once complete."""
    start = time.perf_counter()
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".part"))
    except OSError as err:
        raise cannot_write(folder.parent, err, "paths.data_dir") from None
    try:
        for split in SPLITS:
            _write_ids(read.get(split, []), remap, tmp / f"{split}.npy")
        (tmp / "vocab.json").write_text(json.dumps(vocab.to_dict()))
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
        if "write" in meta["build_seconds"]:
            meta["build_seconds"]["write"] = time.perf_counter() - start
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if folder.exists():  # a cache without meta.json: an older, unfinished one
            shutil.rmtree(folder)
        tmp.rename(folder)
    except OSError as err:  # a full disk: nothing of the cache is left, the run stops in one line
        raise cannot_write(folder, err, "",
                           "free space under paths.data_dir, or point paths.data_dir at another disk") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _rendered(lines: LineFiles, split: str):
    """Blocks of `split`'s lines rendered as its tokens render (`nplm.data.tokenizers.render`): the words of
    a line joined by spaces, then a line break where the line gets an `<eos>`; without `<eos>` the words of
    every line follow one another, a space apart."""
    first = True
    for block in lines.blocks(split):
        out = []
        for line in block:
            words = (line.lower() if lines.lowercase else line).split()
            if lines.eos:
                if words or lines.blank_lines:
                    out.append(" ".join(words) + "\n")
            elif words:
                out.append(("" if first else " ") + " ".join(words))
                first = False
        yield out


def _build_subwords(lines: LineFiles, corpus_cfg: dict, vocab: Vocabulary | None, material: dict,
                    folder: Path) -> None:
    """`_build` for a learned subword vocabulary: trained on the training file's rendered lines (`vocab`'s own
    when given), then every split encoded a block of lines at a time into ids written like `_build`'s, with
    the tokenizer beside the vocabulary. The published counts are checked on the words read on the way."""
    start = time.perf_counter()
    subword = vocab.subword if vocab is not None else Subwords.train(
        corpus_cfg["tokenizer"], int(corpus_cfg["vocab_size"]),
        lambda: (line for block in _rendered(lines, "train") for line in block), "whitespace")
    read, stats = {}, {}
    for split in lines.files:
        chunks, types, n_lines, words, text_bytes, text_words = [], set(), 0, 0, 0, 0
        for block in _rendered(lines, split):
            text = "".join(block)
            chunks.append(np.array(subword.encode(text), dtype=np.int32))
            line_words = text.split()
            types.update(line_words)
            n_lines, words = n_lines + len(block), words + len(line_words)
            text_bytes += len(text.encode("utf-8"))
            text_words += len(line_words) + text.count("\n")
        read[split] = chunks
        stats[split] = {"words": words, "lines": n_lines if lines.eos else 0, "tokens": sum(map(len, chunks)),
                        "types": len(types) + (1 if lines.eos else 0), "text_bytes": text_bytes,
                        "text_words": text_words}
    if lines.check is not None and lines.eos and lines.blank_lines:  # the published line counts count every line
        lines.check(stats)
    if vocab is None:
        train = np.concatenate(read.get("train", []) or [np.zeros(0, np.int32)])
        vocab = Vocabulary.of_subwords(subword, torch.from_numpy(train.astype(np.int64)))
    unk = vocab.unk_id
    counts = {s: _counts(c, len(vocab)) for s, c in read.items()}
    oov = {s: float(c[unk] / c.sum()) if unk is not None and c.sum() else 0.0 for s, c in counts.items()}
    identity = np.arange(len(vocab), dtype=np.int64)
    _write_cache(folder, read, identity, vocab, {**material, "stats": stats, "oov_rate": oov,
                                                 "build_seconds": {"all": time.perf_counter() - start}},
                 {"tokenizer.json": json.dumps(subword.to_dict())})


def _read_split(lines: LineFiles, split: str, first_seen: defaultdict) -> tuple[list[np.ndarray], dict]:
    """One pass over a split file: its tokens as provisional ids (`first_seen`: one dictionary lookup
    per token, in C), a list of int32 arrays, one per block of lines; and its statistics: whitespace
    words, lines (blank ones included), tokens (words and `<eos>`), and distinct words plus one for
    `<eos>` (the published |V|)."""
    chunks: list[np.ndarray] = []
    words = n_lines = eos = word_bytes = word_lines = 0
    lookup = first_seen.__getitem__
    for block in lines.blocks(split):
        n_lines += len(block)
        word_lines += sum(1 for line in block if not line.isspace())
        text = "".join(block)
        if lines.lowercase:
            text = text.lower()
        if lines.eos and lines.blank_lines:  # every line ends in <eos>: one replace, one split
            pieces = text.replace("\n", f" {EOS} ").split()
            added = text.count("\n")
            if not text.endswith("\n"):  # the file's last line, without a newline
                pieces.append(EOS)
                added += 1
        elif lines.eos:  # <eos> after the lines with words only
            pieces = [tok for line in block for tok in lines._line(line)]
            added = sum(1 for line in block if line.split())
        else:
            pieces, added = text.split(), 0
        words += len(pieces) - added
        eos += added
        word_bytes += len("".join(pieces).encode("utf-8")) - added * len(EOS)
        chunks.append(np.fromiter(map(lookup, pieces), dtype=np.int32, count=len(pieces)))
    seen = _counts(chunks, len(first_seen)) > 0
    eos_id = first_seen.get(EOS)  # (.get: no new entry)
    types = int(seen.sum()) + (0 if eos_id is not None and seen[eos_id] else 1)  # the words and <eos>
    # the text the tokens render to (nplm.data.tokenizers.render): a space between two words of a line, a
    # line break per <eos>; without <eos> every word after the first follows a space
    spaces = words - word_lines if lines.eos else max(words - 1, 0)
    return chunks, {"words": words, "lines": n_lines, "tokens": words + eos, "types": types,
                    "text_bytes": word_bytes + spaces + eos, "text_words": words + eos}


def _counts(chunks: list[np.ndarray], n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    for c in chunks:
        out += np.bincount(c, minlength=n)
    return out


def _write_ids(chunks: list[np.ndarray], remap: np.ndarray, path: Path) -> None:
    """The final ids of one split (provisional ids through `remap`) written into the int64 array file
    `path`, chunk by chunk."""
    n = sum(len(c) for c in chunks)
    if n == 0:
        np.save(path, np.zeros(0, dtype=np.int64))
        return
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(n,))
    pos = 0
    for c in chunks:
        np.take(remap, c, out=out[pos:pos + len(c)])
        pos += len(c)
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
    try:
        atomic_write(memo_file, json.dumps(memo))  # last writer wins; a lost entry only costs a hash
    except WriteError:  # (a full disk too: the hash is known, the memo only saves hashing again)
        pass
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
