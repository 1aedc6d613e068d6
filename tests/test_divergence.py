"""A run whose loss is no longer finite stops there: one line naming the optimizer step and the keys to change,
exit 2, its record "diverged", its earlier checkpoints kept. And model.tie_embeddings=auto: every model trains
with every head, tied where the head has one output vector per word, and the record says which."""

from __future__ import annotations

import json
import math
import os

import pytest

from nplm.training.module import Diverged, LanguageModel
from nplm.training.steps import AutogradStep

from conftest import TOY_FAST, compose_cfg, error_lines, run_cli
from nplm.cli.train import main as train_main

FIX = r"lower optimizer.lr \(e.g. optimizer.lr=1e\+29\) or set trainer.gradient_clip_val=1.0$"


def record(tmp_path) -> dict:
    return json.loads((tmp_path / "run" / "metrics.json").read_text())


def test_a_nan_training_loss_stops_the_run_naming_the_step(tmp_path):
    from nplm.training.train import train

    with pytest.raises(Diverged) as info:
        train(compose_cfg(tmp_path, *TOY_FAST, "optimizer=sgd", "optimizer.lr=1e30"))
    message = str(info.value)
    assert "\n" not in message
    assert __import__("re").match(r"^(training loss became (nan|inf) at optimizer step \d+ \(epoch \d+, batch \d+\)"
                                  r"|validation perplexity became (nan|inf) after optimizer step \d+ \(epoch \d+\)); "
                                  + FIX, message), message
    run = record(tmp_path)  # the folder stays, saying why the run stopped
    assert run["status"] == "diverged" and run["error"] == message
    assert (tmp_path / "run" / "config.yaml").is_file()


def test_divergence_after_a_good_epoch_keeps_its_checkpoint(tmp_path, monkeypatch):
    """The weights turn NaN after optimizer step 5 (toy: 4 batches of 32 an epoch): step 6, epoch 1's second
    batch, is named; epoch 0's best and last checkpoints stay, and no later one is written."""
    from nplm.training.train import train

    update = AutogradStep.update  # (the NPLM with the softmax head on a CPU: ByHandStep, whose update it is)

    def poisoned(self):
        update(self)
        if self.module.global_step == 5:
            for p in self.module.parameters():
                p.data.fill_(math.nan)

    monkeypatch.setattr(AutogradStep, "update", poisoned)
    with pytest.raises(Diverged, match=r"^training loss became nan at optimizer step 6 \(epoch 1, batch 2\); "
                                       r"lower optimizer.lr \(e.g. optimizer.lr=0.001\) or set "
                                       r"trainer.gradient_clip_val=1.0$"):
        train(compose_cfg(tmp_path, *TOY_FAST, "trainer.max_epochs=3"))
    run = record(tmp_path)
    assert run["status"] == "diverged" and run["epochs"] == 1
    assert run["best_checkpoint"].endswith("best-epoch000.ckpt") and os.path.isfile(run["best_checkpoint"])
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["best-epoch000.ckpt", "last.ckpt"]
    assert [row["epoch"] for row in run["history"]] == [0]
    import torch

    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4


def test_a_clipped_run_is_told_to_clip_harder(tmp_path, monkeypatch):
    from nplm.training.train import train

    monkeypatch.setattr(LanguageModel, "_train_loss",
                        lambda self, context, target: self.head.loss(self.model(context), target) * math.inf)
    with pytest.raises(Diverged, match=r"^training loss became inf at optimizer step 1 \(epoch 0, batch 1\); lower "
                                       r"optimizer.lr \(e.g. optimizer.lr=0.001\) or trainer.gradient_clip_val "
                                       r"\(now 0.5\)$"):
        train(compose_cfg(tmp_path, *TOY_FAST, "head=nce", "trainer.gradient_clip_val=0.5"))  # (nce: autograd)


def test_a_diverged_first_phase_of_a_learned_tree_is_recorded_in_both_records(tmp_path):
    from nplm.training.train import train

    with pytest.raises(Diverged) as info:
        train(compose_cfg(tmp_path, *TOY_FAST, "head=hierarchical", "tree=learned", "tree.bootstrap_epochs=1",
                          "optimizer=sgd", "optimizer.lr=1e30"))
    phase = json.loads((tmp_path / "run" / "bootstrap" / "metrics.json").read_text())
    assert phase["status"] == "diverged" and record(tmp_path)["status"] == "diverged"
    assert record(tmp_path)["error"] == phase["error"] == str(info.value)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_command_line_says_one_line_and_exits_2(tmp_path):
    """The issue's case: a learning rate of 1e9 used to end "finished" with an infinite perplexity."""
    result = run_cli(train_main, f"hydra.run.dir={tmp_path / 'run'}", "logger=none", "corpus=toy", "optimizer=sgd",
                     "optimizer.lr=1e9", cwd=tmp_path)
    assert result.code == 2, result.err[-2000:]
    lines = error_lines(result)
    assert len(lines) == 1 and " optimizer step " in lines[0] and "optimizer.lr=1e+08" in lines[0], lines
    assert record(tmp_path)["status"] == "diverged"


@pytest.mark.parametrize("overrides,tied", [
    (["model=modern", "head=hierarchical"], False),
    (["model=modern", "head=class_based"], False),
    (["model=modern", "head=softmax"], True),
    (["model=modern", "head=softmax", "model.tie_embeddings=false"], False),
    (["model=lbl", "head=class_based"], False),
    (["model=lbl", "head=softmax", "model.tie_embeddings=auto"], True),
    (["model=nplm", "head=softmax"], False),  # (no output word vectors)
])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_every_model_trains_with_every_head_tied_where_it_can(tmp_path, overrides, tied):
    from nplm.training.train import train

    small = ["model.context_size=4", "model.embed_dim=8"] + (
        ["model.window=4", "model.summaries=0", "model.hidden_dim=16", "model.num_layers=1"]
        if "model=modern" in overrides else [])
    metrics = train(compose_cfg(tmp_path, "corpus=toy", "debug=fast", *overrides, *small))
    run = record(tmp_path)
    assert run["status"] == "finished" and run["tied_embeddings"] is tied
    assert math.isfinite(metrics["val/ppl_best"])
    assert run["metrics"]["val/ppl_best"] == metrics["val/ppl_best"]
