"""`corpus=brown` and `corpus=brown_gpt2`: NLTK's Brown corpus (Bengio et al. 2003; Morin & Bengio 2005)."""

from __future__ import annotations

from pathlib import Path

from nplm.config.rules import Bool, SearchDir
from nplm.data import sources
from nplm.data.corpora import SIZES, Corpus, CorpusText, register_corpus, split
from nplm.data.tokenizers import TOKENIZERS, clean_brown_text

PARAGRAPH_MARK, TEXT_MARK = "<p>", "<text>"  # Brown's paragraph and text boundaries (corpus.markers)
NLTK = {"nltk_data": SearchDir(nullable=True, doc="a folder holding corpora/brown.zip (default $NLTK_DATA)"),
        "download": Bool(default=True, doc="nltk.download it into paths.data_dir when no local copy is found")}


def reader(cfg: dict, data_dir: Path):
    """NLTK's reader of the local (or downloaded) Brown corpus, and {its file: sha256}."""
    from nltk.corpus.reader import CategorizedTaggedCorpusReader

    pointer, root = sources.nltk_corpus_root("brown", cfg.get("nltk_data"), str(data_dir / "nltk_data"),
                                             bool(cfg.get("download", True)))
    brown = CategorizedTaggedCorpusReader(pointer, r"c[a-z]\d\d", cat_file="cats.txt", tagset="brown",
                                          encoding="ascii")
    return brown, ({str(root): sources.sha256(root)} if root.is_file() else {})


@register_corpus("brown", keys={**NLTK, "markers": Bool(doc="<p> after each paragraph, <text> after each text"),
                                **SIZES})
class Brown(Corpus):
    """NLTK's Brown words in corpus order, case and punctuation kept (Bengio et al. 2003, section 4.1:
    first 800,000 words train, next 200,000 valid, rest test).

    `markers`: a PARAGRAPH_MARK token after every paragraph and a TEXT_MARK after every text, the
    paper's "syntactical marks used to separate texts and paragraphs" (1,177,359 tokens; the paper's
    stream had 1,181,041, NLTK's words alone are 1,161,192)."""

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> CorpusText:
        brown, files = reader(cfg, data_dir)
        if not cfg.get("markers"):
            return split(list(brown.words()), cfg, "whitespace", files)
        tokens = []
        for fileid in brown.fileids():
            for paragraph in brown.paras(fileid):
                tokens.extend(word for sentence in paragraph for word in sentence)
                tokens.append(PARAGRAPH_MARK)
            tokens.append(TEXT_MARK)
        return split(tokens, cfg, "whitespace", files)

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        return TOKENIZERS["whitespace"](text)


@register_corpus("brown_gpt2", keys={**NLTK, **SIZES})
class BrownGPT2(Corpus):
    """Brown sentences joined into text, quotes and punctuation spacing repaired, then split with the
    GPT-2 pre-tokenizer pattern (tokens keep their leading space)."""

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> CorpusText:
        brown, files = reader(cfg, data_dir)
        text = clean_brown_text(" ".join(" ".join(sent) for sent in brown.sents()))
        return split(TOKENIZERS["gpt2"](text), cfg, "gpt2", files)

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        return TOKENIZERS["gpt2"](text)
