"""Once training has begun nothing removes the run: an error raised inside training (here by a callback)
leaves its folder, its checkpoints and a record that says why, and `resume` continues it."""

from __future__ import annotations

import json

import pytest
import pytorch_lightning as pl

from conftest import TOY_FAST, compose_cfg
from nplm.errors import UserError
from nplm.training.train import train


class StopAtEpoch(pl.Callback):
    """Raises a `UserError` as the given epoch starts (the epochs before it have their checkpoints)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch == self.epoch:
            raise UserError("head.something: a made-up mistake found in training")


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_an_error_inside_training_keeps_the_run_and_resume_continues_it(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(UserError, match="a made-up mistake found in training"):
        train(compose_cfg(tmp_path, *TOY_FAST, "trainer.max_epochs=3"), callbacks=[StopAtEpoch(1)])
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "failed"
    assert record["error"] == "UserError: head.something: a made-up mistake found in training"
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "config.yaml").is_file()

    metrics = train(compose_cfg(tmp_path / "again", *TOY_FAST, "trainer.max_epochs=3", f"resume={run}"))
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "finished" and record["epochs"] == 3
    assert metrics["val/ppl_best"] == pytest.approx(record["metrics"]["val/ppl_best"])


def test_an_error_in_the_first_epoch_keeps_the_run_and_a_mistake_found_before_training_leaves_nothing(tmp_path):
    with pytest.raises(UserError, match="a made-up mistake found in training"):
        train(compose_cfg(tmp_path, *TOY_FAST), callbacks=[StopAtEpoch(0)])
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())  # epoch 0 had begun: kept
    assert record["status"] == "failed" and not list((tmp_path / "run" / "checkpoints").glob("*.ckpt"))
    with pytest.raises(UserError):
        train(compose_cfg(tmp_path / "bad", *TOY_FAST, "model.context_size=0"))
    assert not (tmp_path / "bad" / "run").exists()
