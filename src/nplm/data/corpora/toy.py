"""`corpus=toy`: the 20 short sentences of the hierarchical-softmax notebook, every split the same."""

from __future__ import annotations

from pathlib import Path

from nplm.data.corpora import Corpus, CorpusText, register_corpus
from nplm.data.corpora.text_files import line_words
from nplm.data.vocabulary import EOS

# Short sentences whose continuations ("the cat sat" -> "down", "a dog barked" -> "loudly") a model
# should learn exactly.
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


@register_corpus("toy")
class Toy(Corpus):
    """The notebook's 20 sentences, `<eos>` after each; train, valid and test are all of them."""

    @classmethod
    def load(cls, cfg: dict, data_dir: Path) -> CorpusText:
        tokens = [tok for s in TOY_SENTENCES for tok in s.split() + [EOS]]
        return CorpusText(tokens, list(tokens), list(tokens), "whitespace", contiguous=False)

    @classmethod
    def tokens(cls, cfg: dict, text: str) -> list[str]:
        return line_words(text, {})  # every sentence (line) ends in <eos>, like its own text
