"""`corpus=tiny_shakespeare`: the characters of Tiny Shakespeare (Karpathy's char-rnn), shipped with the package."""

from __future__ import annotations

from pathlib import Path

from nplm.config.rules import Bool, Encoding, Str
from nplm.data import sources
from nplm.data.corpora import SIZES, Corpus, CorpusText, register_corpus, split
from nplm.data.tokenizers import TOKENIZERS

SHIPPED = Path(__file__).resolve().parents[1] / "shipped"  # nplm/data/shipped


@register_corpus("tiny_shakespeare", keys={
    "path": Str(nullable=True, doc="a local copy (null: the shipped one)"),
    "download": Bool(doc="download `url` when the file is missing"), "url": Str(doc="where to download it"),
    "sha256": Str(nullable=True, doc="the download's checksum"), "encoding": Encoding(doc="the file's text encoding"),
    **SIZES})
class TinyShakespeare(Corpus):
    """65 characters; first 90% train, last 10% valid, as in the reference notebook."""

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> CorpusText:
        """The shipped copy, `corpus.path`, or a checked download."""
        path = cfg.get("path") or SHIPPED / "tinyshakespeare" / "input.txt"
        path = Path(path).expanduser()
        if not path.is_file() and cfg.get("download") and cfg.get("path") is None:
            path = sources.download(cfg["url"], data_dir / "tinyshakespeare" / "input.txt", cfg.get("sha256"))
        text = sources.read_text(path, cfg.get("encoding", "utf-8"), "corpus.path")
        return split(list(text), cfg, "chars", {str(path): sources.sha256(path)})

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        return TOKENIZERS["chars"](text)
