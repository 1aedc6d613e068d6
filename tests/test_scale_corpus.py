"""experiments/scale/make_corpus.py: the WikiText-103-shaped Zipf corpus, at a tiny size."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from nplm.data.corpora.published import Published
from nplm.data.corpora.wikitext import WikiText103
from nplm.data.datamodule import LMDataModule

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("make_corpus", REPO / "experiments" / "scale" / "make_corpus.py")
make_corpus = importlib.util.module_from_spec(spec)
sys.modules["make_corpus"] = make_corpus  # dataclasses look their module up
spec.loader.exec_module(make_corpus)

TINY = make_corpus.Shape(types=3000, words={"train": 300_000, "valid": 6_000, "test": 7_000},
                         lines={"train": 5_001, "valid": 120, "test": 141})


def test_the_default_shape_is_wikitext103s_published_one():
    shape = make_corpus.Shape.wikitext103()
    assert shape.types + 1 == 267_735
    assert [shape.words[s] + shape.lines[s] for s in ("train", "valid", "test")] == [103_227_021, 217_646, 245_569]
    assert shape.lines == {"train": 1_801_350, "valid": 3_760, "test": 4_358}


def test_tiny_corpus_is_deterministic_shaped_and_zipfian(tmp_path):
    paths = make_corpus.make_corpus(tmp_path / "a", TINY, seed=3, log=lambda *a: None)
    assert sorted(p.name for p in paths.values()) == ["wiki.test.tokens", "wiki.train.tokens", "wiki.valid.tokens"]
    again = make_corpus.make_corpus(tmp_path / "b", TINY, seed=3, log=lambda *a: None)
    other = make_corpus.make_corpus(tmp_path / "c", TINY, seed=4, log=lambda *a: None)
    for split in paths:
        assert paths[split].read_bytes() == again[split].read_bytes()
        assert paths[split].read_bytes() != other[split].read_bytes()
        text = paths[split].read_text()
        assert len(text.split()) == TINY.words[split] and text.count("\n") == TINY.lines[split]
        assert all(line.startswith(" ") and line.endswith(" ") for line in text.split("\n")[:-1])
    train = Counter(paths["train"].read_text().split())
    assert len(train) == TINY.types and "<unk>" in train  # every word in train
    assert set(paths["valid"].read_text().split()) <= set(train)
    # Zipf: count ~ 1 / rank, so log count against log rank has slope about -1 over the frequent ranks
    counts = np.array(sorted(train.values(), reverse=True)[:200], dtype=float)
    slope = np.polyfit(np.log(np.arange(1, 201)), np.log(counts), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.1)
    top = counts[0] / TINY.words["train"]
    harmonic = sum(1 / r for r in range(1, TINY.types + 1))
    assert top == pytest.approx(1 / harmonic, rel=0.05)
    assert train["<unk>"] / TINY.words["train"] == pytest.approx(1 / (20 * harmonic), rel=0.1)
    assert math.isclose(sum(train.values()), TINY.words["train"])


def test_corpus_wikitext103_loads_it_and_passes_the_statistics_check(tmp_path, monkeypatch):
    make_corpus.make_corpus(tmp_path / "zipf", TINY, seed=0, log=lambda *a: None)
    monkeypatch.setattr(WikiText103, "published", Published(words=TINY.words, lines=TINY.lines,
                                                            types=TINY.types + 1, source="tiny"))
    cfg = {"name": "wikitext103", "path": str(tmp_path / "zipf"), "download": False, "url": "-", "sha256": None,
           "verify": True, "eos": True, "vocab_from": "train", "min_count": 1, "max_vocab": None, "unk": "<unk>",
           "order": "frequency"}
    dm = LMDataModule(cfg, 4, 64, 64, data_dir=str(tmp_path / "data"))
    dm.setup()
    assert len(dm.vocab) == TINY.types + 1
    assert dm.stats["train"].tokens == TINY.words["train"] + TINY.lines["train"]
