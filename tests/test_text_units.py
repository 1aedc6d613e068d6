"""Bits per byte and per-word perplexity (nplm.data.text_units): the docstring's hand-computed case, a word
corpus's per-word perplexity equal to its per-token one, a character model's bits per byte equal to log2 of
its per-character perplexity on ASCII text."""

from __future__ import annotations

import math

import pytest

from conftest import compose_cfg
from nplm.data.datamodule import LMDataModule
from nplm.data.text_units import TextUnits, figures, text_units
from nplm.data.tokenizers import render
from nplm.training.train import train


def test_the_worked_example_of_the_docstring():
    tokens = ["the", "cat", "<eos>", "sat"]
    text = render(tokens, " ")
    assert text == "the cat\nsat"
    whole = text_units(text, 4)
    assert whole == TextUnits(4, 11, 4)
    scored = whole.less(1, text_units(render(tokens[:1], " "), 1))
    assert scored == TextUnits(3, 8, 3)
    got = figures(6.0, scored)
    assert got["bpb"] == pytest.approx(6 / (8 * math.log(2)))
    assert got["bpb"] == pytest.approx(1.0820, abs=1e-4)
    assert got["word_ppl"] == pytest.approx(math.exp(2.0))


def test_render_puts_a_line_break_per_eos_and_no_space_around_it():
    assert render(["a", "<eos>", "<eos>", "b", "c", "<eos>"], " ") == "a\n\nb c\n"
    assert render(["H", "i", "\n"], "") == "Hi\n"
    assert figures(1.0, None) == {} and "word_ppl" not in figures(1.0, TextUnits(1, 3, 0))


def test_datamodule_units_of_a_non_contiguous_corpus_leave_out_the_first_context(tmp_path):
    dm = LMDataModule({"name": "toy", "vocab_from": "train", "min_count": 1, "max_vocab": None, "unk": "<unk>",
                       "order": "frequency"}, 2, 4, 4, data_dir=str(tmp_path))
    dm.setup()
    # toy: every split is the 20 sentences; scored: all but the first 2 words ("the cat ")
    total = render(dm.vocab.decode(dm.ids["valid"].tolist()), " ")
    units = dm.units["valid"]
    assert units.tokens == dm.stats["valid"].predicted == len(dm.ids["valid"]) - 2
    assert units.bytes == len(total.encode()) - len("the cat")
    assert units.words == units.tokens  # a word corpus: one word per token (<eos> one line break)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("units")
    small = ("model.context_size=3", "model.embed_dim=8", "model.hidden_dim=8", "data.batch_size=64",
             "trainer.max_epochs=1", "trainer.limit_train_batches=3")
    word = train(compose_cfg(tmp / "w", "corpus=toy", *small))
    char = train(compose_cfg(tmp / "c", "corpus=tiny_shakespeare", "corpus.train_size=3000", "corpus.valid_size=800",
                             "corpus.test_size=500", *small))
    return word, char


def test_per_word_perplexity_of_a_word_corpus_is_its_per_token_perplexity(runs):
    word, _ = runs
    assert word["val/word_ppl_best"] == pytest.approx(word["val/ppl_best"], rel=1e-12)
    assert word["test/word_ppl"] == pytest.approx(word["test/ppl"], rel=1e-6)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_bits_per_byte_of_a_character_model_on_ascii_text_is_log2_of_its_perplexity(runs):
    _, char = runs
    assert char["val/bpb_best"] == pytest.approx(math.log2(char["val/ppl_best"]), rel=1e-12)
    assert char["test/bpb"] == pytest.approx(math.log2(char["test/ppl"]), rel=1e-6)
