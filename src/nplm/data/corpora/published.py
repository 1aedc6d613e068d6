"""The standard language-modelling benchmarks as distributed (ptb, wikitext2, wikitext103): their files
found locally or downloaded with the published checksum, unpacked and cached, and checked against the
published statistics. Each corpus is a `PublishedCorpus` subclass in its own module (ptb.py, wikitext.py).

Where the split files come from, first found first:
1. `corpus.path` (default: the corpus' environment variable, e.g. $NPLM_PTB_DIR): a folder holding the
   three files (or the archive's folder layout under it), or the archive itself, which is then
   unpacked into the cache;
2. the cache, `<paths.data_dir>/<corpus>/` (`$NPLM_DATA_DIR`, default ./data_cache): files put there
   by hand or by an earlier download;
3. a download of `corpus.url` into the cache (`corpus.download=true`): the archive is written under a
   temporary name, checked against `corpus.sha256` (the published SHA-256; refused with both checksums
   named when it differs), the split files unpacked under temporary names (each checked against its own
   published SHA-256 where there is one) and renamed into place, then the archive deleted. A failure at
   any point leaves nothing in the cache that looks complete.
Offline with no copy, one line says which files to put where.

Every load compares the files' word, line and type counts with the published ones (`Published`;
`corpus.verify=false` to use other versions), so a different copy or preprocessing is refused rather
than silently giving incomparable perplexities.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nplm.config.rules import Bool, SearchDir, Str
from nplm.data import sources
from nplm.data.corpora import Corpus, CorpusText
from nplm.data.id_cache import LineFiles
from nplm.errors import UserError
from nplm.files import atomic_write

SPLITS = ("train", "valid", "test")
KEYS = {
    "path": SearchDir(nullable=True, doc="a local copy: the folder holding the split files, or the downloaded "
                                         "archive (default: the corpus' environment variable)"),
    "download": Bool(doc="download corpus.url into paths.data_dir when there is no local copy"),
    "url": Str(doc="the archive to download (a URL ending in /: the split files one by one from that folder)"),
    "sha256": Str(nullable=True, doc="the archive's published SHA-256 (null: none published, the download is "
                                     "checked by its files' checksums and counts)"),
    "verify": Bool(doc="refuse split files whose word, line and type counts differ from the published ones"),
    "eos": Bool(doc="an <eos> token after every line (blank lines too), as the published token counts"),
}


@dataclass(frozen=True)
class Published:
    """A corpus' published statistics: whitespace words and lines per split (blank lines included),
    and the distinct words of the training split with `<eos>` counted (|V| as papers report it)."""

    words: dict[str, int]
    lines: dict[str, int]
    types: int
    source: str  # where the figures are published

    def tokens(self, split: str) -> int:
        """Tokens with one `<eos>` per line, as Merity et al. (2016) count them."""
        return self.words[split] + self.lines[split]

    def check(self, name: str, stats: dict, files: dict[str, Path]) -> None:
        """Raise a one-line `UserError` when the counted `stats` (`nplm.data.id_cache`) differ."""
        for split in SPLITS:
            got = stats.get(split, {})
            want = {"words": self.words[split], "lines": self.lines[split]}
            if split == "train":
                want["types"] = self.types
            if any(got.get(k) != v for k, v in want.items()):
                have = ", ".join(f"{got.get(k, 0):,} {k}" for k in want)
                expected = ", ".join(f"{v:,} {k}" for k, v in want.items())
                raise UserError(f"corpus={name}: {files.get(split, split)} has {have}; the published {split} split "
                                f"has {expected} ({self.source}): a different version or preprocessing; replace "
                                f"it with the distributed file, or set corpus.verify=false to use it anyway")


class PublishedCorpus(Corpus):
    """Three split files of a published archive (module docstring). Subclasses set the class attributes."""

    folder: str  # the cache folder under paths.data_dir
    env: str  # the environment variable naming a local copy (the yaml's default for corpus.path)
    files: dict[str, str]  # split -> file name
    members: dict[str, str]  # split -> the file's name in the archive
    member_sha256: dict[str, str] = {}  # split -> the file's published SHA-256, where published
    subdirs: tuple[str, ...] = ("",)  # where under a local folder the files may be
    origin: str  # the files' place in the archive, for messages: "the data/ folder of simple-examples.tgz"
    published: Published

    # -- Corpus ------------------------------------------------------------------------------------------
    @classmethod
    def line_files(cls, cfg: dict, data_dir: Path) -> LineFiles:
        files = cls.locate(cfg, Path(data_dir).expanduser())
        check = None
        if cfg.get("verify", True):
            check = lambda stats: cls.published.check(cfg["name"], stats, files)  # noqa: E731
        return LineFiles(cfg["name"], files, eos=bool(cfg.get("eos", True)), blank_lines=True, check=check)

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> CorpusText:
        """The splits as token lists (the datamodule streams them through `line_files` instead)."""
        lines = cls.line_files(cfg, data_dir)
        splits = {split: lines.tokens(sources.read_text(path, "utf-8", "corpus.path"))
                  for split, path in lines.files.items()}
        return CorpusText(splits["train"], splits["valid"], splits["test"], "whitespace", contiguous=False,
                          files={str(p): sources.sha256(p) for p in lines.files.values()})

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        return LineFiles(cfg.get("name", cls.folder), {}, eos=bool(cfg.get("eos", True))).tokens(text)

    # -- finding the files ----------------------------------------------------------------------------------
    @classmethod
    def locate(cls, cfg: dict, data_dir: Path) -> dict[str, Path]:
        """{split: file}: from corpus.path, the cache, or a download (module docstring)."""
        name, cache = cfg["name"], data_dir / cls.folder
        path = cfg.get("path") or None
        if path is not None:
            given = Path(path).expanduser()
            if given.is_dir():
                found = cls._files_in(given)
                if found is None:
                    raise UserError(f"corpus.path={path}: no {', '.join(cls.files.values())} in this folder "
                                    f"(nor in {', '.join(d + '/' for d in cls.subdirs if d)}); give the folder "
                                    f"holding them ({cls.origin}) or the archive")
                return found
            if given.is_file():  # an archive: unpacked into the cache once (again when it changes)
                stamp = f"{given.resolve()} {given.stat().st_size} {given.stat().st_mtime_ns}\n"
                marker = cache / ".unpacked-from"
                found = cls._files_in(cache, subdirs=("",))
                if found is not None and marker.is_file() and marker.read_text() == stamp:
                    return found
                marker.unlink(missing_ok=True)
                found = cls._unpack(given, cfg.get("sha256"), cache, f"corpus.path={path}")
                atomic_write(marker, stamp)
                return found
            raise UserError(f"corpus.path={path}: no such file or folder; give the folder holding "
                            f"{', '.join(cls.files.values())} or the archive (unset {cls.env} to download)")
        found = cls._files_in(cache, subdirs=("",))
        if found is not None:
            return found
        fix = (f"put {', '.join(cls.files.values())} ({cls.origin}) in {cache}, or set {cls.env}=/folder/with/them "
               f"(or corpus.path=...)")
        if not cfg.get("download", True):
            raise UserError(f"corpus={name}: no local copy and corpus.download=false; {fix}")
        url = cfg["url"]
        if url.endswith("/"):  # a folder of the split files (a mirror): each one checked on its own
            for split, file in cls.files.items():
                sources.download(url + file, cache / file, cls.member_sha256.get(split), fix=fix)
            return {split: cache / file for split, file in cls.files.items()}
        archive = sources.download(url, cache / url.rstrip("/").rsplit("/", 1)[-1], cfg.get("sha256"), fix=fix)
        try:
            return cls._unpack(archive, None, cache, url)
        finally:
            archive.unlink(missing_ok=True)  # the split files are what is cached

    @classmethod
    def _files_in(cls, folder: Path, subdirs: tuple[str, ...] | None = None) -> dict[str, Path] | None:
        for sub in cls.subdirs if subdirs is None else subdirs:
            files = {split: folder / sub / file for split, file in cls.files.items()}
            if all(f.is_file() for f in files.values()):
                return files
        return None

    @classmethod
    def _unpack(cls, archive: Path, sha256: str | None, cache: Path, where: str) -> dict[str, Path]:
        """The split files of `archive` (checked against `sha256` when given) unpacked into `cache`."""
        if sha256:
            got = sources.sha256(archive)
            if got != sha256.lower():
                raise UserError(f"{where}: {archive} has sha256 {got}, expected {sha256}: not the published "
                                "archive; download it again, or set corpus.sha256=null to use it anyway")
        targets = {split: cache / file for split, file in cls.files.items()}
        sources.unpack(archive, {cls.members[s]: targets[s] for s in SPLITS},
                       {cls.members[s]: h for s, h in cls.member_sha256.items()},
                       fix=f"{where}: download the archive again, or put the files ({cls.origin}) in {cache}")
        return targets
