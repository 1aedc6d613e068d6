"""Learned subword vocabularies (corpus.tokenizer, nplm.data.subwords): exact round trips, training with
every model and head, the tokenizer in the run folder and the checkpoint, generation that re-encodes to
its own ids, and bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import compose_cfg
from nplm.cli.evaluate import evaluate
from nplm.cli.generate import generate, sample_ids
from nplm.data.subwords import Subwords, lines
from nplm.errors import UserError
from nplm.heads import HEADS
from nplm.models import MODELS
from nplm.training.checkpoint import load_model
from nplm.training.module import CHECKPOINT_KEY
from nplm.training.train import train

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n  café naïve  \n"
SMALL = ("data.batch_size=32", "trainer.max_epochs=1", "trainer.limit_train_batches=2", "corpus.train_size=4000",
         "corpus.valid_size=1000", "corpus.test_size=500")


@pytest.mark.parametrize("kind", ["bpe", "wordpiece", "unigram"])
def test_encoding_is_the_tokenizers_own_a_line_at_a_time_and_decodes_exactly(kind):
    sub = Subwords.train(kind, 300, lambda: lines(TEXT * 5), "chars")
    ids = sub.encode(TEXT)
    assert ids == [i for line in lines(TEXT) for i in sub.tokenizer.encode(line).ids]
    assert sub.decode(ids) == TEXT  # every character of TEXT is in the training text
    assert sub.byte_length(ids) == len(TEXT.encode("utf-8"))
    restored = Subwords.from_dict(json.loads(json.dumps(sub.to_dict())))
    assert restored.encode(TEXT) == ids and restored.tokens == sub.tokens


def test_byte_level_bpe_decodes_text_it_never_saw():
    sub = Subwords.train("bpe", 260, lambda: ["abc abc\n"], "whitespace")
    unseen = "Ωμέγα 😀 tab\there\n"
    assert sub.decode(sub.encode(unseen)) == unseen
    assert sub.byte_length(sub.encode(unseen)) == len(unseen.encode())


@pytest.mark.parametrize("kind, size, smallest", [("bpe", 255, 256), ("unigram", 5, 9)])
def test_a_vocab_size_below_the_alphabet_is_refused_in_one_line(kind, size, smallest):
    with pytest.raises(UserError, match=rf"corpus.vocab_size={size}: smaller than the alphabet .* use "
                                        rf"corpus.vocab_size >= {smallest}$"):
        Subwords.train(kind, size, lambda: ["abcdefg\n"], "chars")  # 7 letters and \n, + <unk>


def test_an_unknown_kind_or_a_missing_size_is_refused_by_the_schema(tmp_path):
    with pytest.raises(UserError, match=r"corpus.tokenizer=sentencepiece: must be one of: bpe, wordpiece, unigram"):
        train(compose_cfg(tmp_path, "corpus=toy", "corpus.tokenizer=sentencepiece", "corpus.vocab_size=300"))
    with pytest.raises(UserError, match=r"corpus.vocab_size=null: must be a number of pieces with corpus.tokenizer"):
        train(compose_cfg(tmp_path, "corpus=toy", "corpus.tokenizer=bpe"))
    assert not (tmp_path / "run" / "checkpoints").exists()


MODEL_SMALL = ("model.context_size=12", "model.embed_dim=8", "model.hidden_dim=16")


def small_model(model: str) -> list[str]:
    """`MODEL_SMALL`'s overrides of the keys model `model` has (the LSTM reads one token: no context_size)."""
    from dataclasses import fields

    keys = {f.name for f in fields(MODELS.get(model).config_class)}
    return [o for o in MODEL_SMALL if o.split("=")[0].removeprefix("model.") in keys]


def _combinations():
    """Every model with the softmax head and every head with the nplm model (tree heads: a balanced tree)."""
    return sorted({(m, "softmax") for m in MODELS.names()} | {("nplm", h) for h in HEADS.names()})


@pytest.mark.parametrize("model, head", _combinations())
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_every_model_and_head_trains_on_byte_level_bpe(tmp_path, model, head):
    tree = ["tree=balanced"] if head in ("hierarchical",) else []
    metrics = train(compose_cfg(tmp_path, "corpus=tiny_shakespeare", "corpus.tokenizer=bpe", "corpus.vocab_size=300",
                                f"model={model}", f"head={head}", *tree, *small_model(model), *SMALL))
    assert metrics["val/ppl"] < 300 * 10 and 0 < metrics["test/bpb"] < 8 * 3


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bpe_run")
    metrics = train(compose_cfg(tmp, "corpus=tiny_shakespeare", "corpus.tokenizer=bpe", "corpus.vocab_size=320",
                                *small_model("nplm"), *SMALL))
    return metrics, tmp


def test_the_tokenizer_is_saved_with_the_run_and_in_the_checkpoint(bpe_run):
    metrics, tmp = bpe_run
    ckpt = Path(metrics["best_checkpoint"])
    saved = json.loads((ckpt.parents[1] / "tokenizer.json").read_text())
    entry = torch.load(ckpt, map_location="cpu", weights_only=True)[CHECKPOINT_KEY]
    assert entry["tokenizer"] == saved and saved["kind"] == "bpe"
    module = load_model(ckpt)
    assert len(module.vocab) == 320 and module.vocab.subword.tokens == module.vocab.tokens
    # nplm-eval of the run's own split gives the run's figures
    result = evaluate(str(ckpt), split="test", data_dir=str(tmp / "data"))
    assert result["ppl"] == pytest.approx(metrics["test/ppl"], rel=1e-5)
    assert result["bpb"] == pytest.approx(metrics["test/bpb"], rel=1e-5)


def test_generated_text_re_encodes_to_the_generated_ids(bpe_run):
    metrics, _ = bpe_run
    module = load_model(metrics["best_checkpoint"])
    prompt = "ROMEO:\nWhat"
    for seed in range(3):
        ids = sample_ids(module, prompt, 60, temperature=1.5, seed=seed)
        text = generate(metrics["best_checkpoint"], prompt, 60, temperature=1.5, seed=seed)
        assert text.startswith(prompt)
        assert module.vocab.subword.encode(text) == module.vocab.subword.encode(prompt) + ids


def test_a_checkpoint_without_its_tokenizer_is_refused_in_one_line(bpe_run, tmp_path):
    metrics, _ = bpe_run
    ckpt = torch.load(metrics["best_checkpoint"], map_location="cpu", weights_only=True)
    del ckpt[CHECKPOINT_KEY]["tokenizer"]
    torch.save(ckpt, tmp_path / "no_tokenizer.ckpt")
    with pytest.raises(UserError, match=r"no_tokenizer.ckpt: its bpe vocabulary has no tokenizer \(the 'nplm' entry "
                                        r"lacks 'tokenizer'\)"):
        load_model(tmp_path / "no_tokenizer.ckpt")
