"""Every configuration the schema accepts trains; every one it does not is refused in one line naming the key.

A small seeded draw of `config_draw` (every group's options, keys at their rules' bounds) trained on a batch
each; the large draw is `make fuzz`. Below it, the cases earlier draws found, each as its own test.
"""

from __future__ import annotations

import pytest

from config_draw import Fixtures, draw_nth, try_config
from conftest import TOY_FAST, compose_cfg
from nplm.errors import UserError
from nplm.training.train import train

SEED, COUNT = 20261129, 12


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return Fixtures.make(tmp_path_factory.mktemp("fixtures"))


@pytest.mark.parametrize("index", range(COUNT))
@pytest.mark.slow  # trains (make test-fast stays fast)
def test_a_drawn_configuration_trains_or_is_refused_in_one_line(fixtures, tmp_path, index):
    overrides = draw_nth(SEED, index, fixtures)
    outcome = try_config(overrides, tmp_path)
    assert outcome.kind in ("trained", "refused", "diverged"), f"{outcome.replay()}\n{outcome.message}"
    if outcome.kind != "trained":
        assert "\n" not in outcome.message and outcome.key, outcome.message


def refused(tmp_path, *overrides: str) -> str:
    with pytest.raises(UserError) as err:
        train(compose_cfg(tmp_path, *TOY_FAST, *overrides))
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_batch_fraction_that_leaves_overfit_batches_no_batch_is_refused(tmp_path):
    # data.overfit_batches=2 validates on the first 2 training batches: half of one batch... Lightning's traceback
    message = refused(tmp_path, "data.overfit_batches=1", "trainer.limit_val_batches=0.5")
    assert message == ("trainer.limit_val_batches=0.5: leaves no batch of the valid split (data.overfit_batches=1: the "
                       "first training batches) (1 batches of 32 windows); use at least 1, or a count like 1")


def test_a_training_split_of_no_tokens_is_refused_before_the_data(tmp_path, monkeypatch):
    from nplm.data.datamodule import LMDataModule

    monkeypatch.setattr(LMDataModule, "setup", lambda *_: pytest.fail("the corpus was read"))
    assert refused(tmp_path, "corpus=tiny_shakespeare", "corpus.train_size=0") == (
        "corpus.train_size=0: must be a token count >= 1 or a fraction in (0, 1] (0 leaves no training split)")


def test_a_training_split_that_rounds_to_no_tokens_is_refused_naming_its_key_not_min_count(tmp_path):
    # (the vocabulary of an empty split has only <unk>: the refusal blamed corpus.min_count)
    (tmp_path / "text.txt").write_text("the cat sat down\n" * 20)
    split = ["corpus.train_size=0.001", "corpus.valid_size=0.5", "corpus.test_size=0", "corpus.vocab_from=train"]
    assert refused(tmp_path, "corpus=tiny_shakespeare", f"corpus.path={tmp_path / 'text.txt'}", "corpus.sha256=null",
                   *split) == (
        "corpus.train_size=0.001: the train split of corpus 'tiny_shakespeare' has no tokens; raise corpus.train_size")


@pytest.mark.slow  # trains (make test-fast stays fast)
def test_compiled_runs_one_after_another_in_a_process_all_train(tmp_path):
    # each run's loss is the same code: without torch.compile's caches emptied per run, the ninth compiled run of
    # a process (a sweep under Hydra's basic launcher) hit the recompilation limit (here lowered to 1: the second)
    import torch._dynamo.config

    with torch._dynamo.config.patch(recompile_limit=1):
        for run, model in (("first", "model.direct=true"), ("second", "model.direct=false")):  # two graphs, one code
            metrics = train(compose_cfg(tmp_path / run, *TOY_FAST, model, "trainer.max_epochs=1",
                                        "trainer.limit_train_batches=1", "compile=true", "compile_backend=eager"))
            assert metrics["train/loss"] > 0


@pytest.mark.parametrize("precision", ["16-true", "64-true"])
@pytest.mark.slow  # trains (make test-fast stays fast)
def test_a_weight_average_trains_with_weights_of_another_precision(run_train, precision):
    # the float32 average and the 16-true/64-true weights: torch's lerp of mixed dtypes raised at the second step
    metrics = run_train(*TOY_FAST, "trainer.max_epochs=1", "trainer.limit_train_batches=3", "steps_per_execution=1",
                        f"trainer.precision={precision}", "optimizer.eps=1e-4", "callbacks.ema_decay=0.5")
    assert metrics["val/ppl"] < 100


def test_adam_with_float16_weights_and_a_small_eps_is_refused_before_the_data(tmp_path, monkeypatch):
    # (it trained to NaN at the first steps, reported as a divergence: "lower optimizer.lr")
    from nplm.data.datamodule import LMDataModule

    monkeypatch.setattr(LMDataModule, "setup", lambda *_: pytest.fail("the corpus was read"))
    assert refused(tmp_path, "trainer.precision=16-true") == (
        "optimizer.eps=1e-08: too small for Adam's float16 state with trainer.precision=16-true (squared gradients "
        "underflow to 0, and the steps to NaN); set optimizer.eps=0.0001 or more, or trainer.precision=bf16-true")


def test_words_beyond_the_vocabulary_limits_without_unk_are_refused_naming_the_keys(tmp_path):
    # (the message began "79 tokens fall below min_count=1 or max_vocab=2": no key as the user types it)
    assert refused(tmp_path, "corpus.unk=null", "corpus.max_vocab=2") == (
        "corpus.unk=null: 79 tokens fall below corpus.min_count=1 or corpus.max_vocab=2, and without an unknown-word "
        "token they cannot be kept; set corpus.unk=<unk>, or lower corpus.min_count (raise corpus.max_vocab)")


def test_a_learned_tree_whose_first_model_would_never_validate_is_refused_before_the_data(tmp_path, monkeypatch):
    # (its first phase saved no checkpoint, and the run stopped on "checkpoint=.: is a folder")
    from nplm.data.datamodule import LMDataModule

    monkeypatch.setattr(LMDataModule, "setup", lambda *_: pytest.fail("the corpus was read"))
    assert refused(tmp_path, "head=hierarchical", "tree=learned", "tree.bootstrap_epochs=1",
                   "trainer.check_val_every_n_epoch=2") == (
        "trainer.check_val_every_n_epoch=2: tree=learned's first model trains 1 epoch(s) and would never validate, "
        "leaving no checkpoint to learn the tree from; set trainer.check_val_every_n_epoch=1 or less, or "
        "tree.bootstrap_epochs=2")


def test_more_min_epochs_than_max_epochs_is_refused(tmp_path):
    # (Lightning trained max_epochs and said nothing)
    assert refused(tmp_path, "trainer.max_epochs=1", "+trainer.min_epochs=3") == (
        "trainer.min_epochs=3: must be at most trainer.max_epochs=1 (Lightning stops there whatever min_epochs says)")


@pytest.mark.slow  # trains (make test-fast stays fast)
def test_a_run_whose_test_perplexity_is_inf_is_not_finished(tmp_path):
    # no validation ran (trainer.check_val_every_n_epoch=2) to catch lr=10: the run said "finished", test/ppl inf
    import json

    from nplm.training.module import Diverged

    with pytest.raises(Diverged, match=r"^test perplexity became inf with the last weights, after optimizer step 1; "
                                       r"lower optimizer.lr"):
        train(compose_cfg(tmp_path, "corpus=toy", "model=lbl", "model.context_size=2", "model.embed_dim=2",
                          "model.dropout=0.5", "head=importance_sampling", "head.num_samples=2", "optimizer.lr=10.0",
                          "trainer.max_epochs=1", "trainer.limit_train_batches=1", "trainer.check_val_every_n_epoch=2",
                          "corpus.order=sorted", "model.tie_embeddings=false"))
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "diverged"


@pytest.mark.slow  # trains (make test-fast stays fast)
def test_a_sampled_training_loss_above_float32s_exp_range_is_a_finite_figure(tmp_path):
    # an LSTM started from weights in [-10, 10] under NCE: a sampled loss of well over 88 nats a token, whose exp
    # float32 cannot hold (train/ppl_sampled was inf in a finished run); float64 holds it to 709 nats
    import math

    metrics = train(compose_cfg(tmp_path, "corpus=toy", "corpus.min_count=3", "model=lstm", "model.hidden_dim=8",
                                "model.init_scale=10", "head=nce", "head.num_samples=500", "trainer.max_epochs=1",
                                "trainer.limit_train_batches=1"))
    assert math.log(metrics["train/ppl_sampled"]) > 88 and math.isfinite(metrics["train/ppl_sampled"])
