"""callbacks.ema_decay: validation, the best checkpoint and the test use the weights' moving average,
the trained weights are the same as without it, and resume= goes on with both."""

from __future__ import annotations

import pytest
import torch

from nplm.errors import UserError
from nplm.training.averaging import ema_callback

from conftest import TOY_FAST


def checkpoint(run) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_average_is_validated_and_checkpointed_while_the_training_weights_are_unchanged(run_train, tmp_path):
    plain = run_train(*TOY_FAST)
    averaged = run_train(*TOY_FAST, "callbacks.ema_decay=0.9")
    trained, ema = checkpoint(tmp_path / "run"), checkpoint(tmp_path / "call2" / "run")
    # the EMA changes nothing in training: the trained weights are the plain run's, bit for bit
    assert ema["current_model_state"].keys() == trained["state_dict"].keys()
    for name, weight in trained["state_dict"].items():
        assert torch.equal(ema["current_model_state"][name], weight), name
    # the checkpoint's state_dict (what nplm-mix, generate and the test read) is the average, not them
    assert not torch.allclose(ema["state_dict"]["model.C.weight"], trained["state_dict"]["model.C.weight"])
    assert averaged["val/ppl_best"] != pytest.approx(plain["val/ppl_best"], rel=1e-4)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_vanishing_decay_averages_nothing(run_train, tmp_path):
    """decay ~ 0: the average is the last step's weights, so every figure is the plain run's."""
    plain = run_train(*TOY_FAST)
    averaged = run_train(*TOY_FAST, "callbacks.ema_decay=1e-12")
    for key in ("val/ppl_best", "test/ppl"):
        assert averaged[key] == pytest.approx(plain[key], rel=1e-5), key


def test_the_test_scores_the_averaged_weights_of_the_best_checkpoint(run_train, tmp_path):
    from nplm.cli.evaluate import evaluate

    metrics = run_train(*TOY_FAST, "callbacks.ema_decay=0.9")
    result = evaluate(metrics["best_checkpoint"], split="test", data_dir=str(tmp_path))  # load_model: the state_dict
    assert result["ppl"] == pytest.approx(metrics["test/ppl"], rel=1e-5)


@pytest.mark.slow  # a run, then one resumed
def test_resume_goes_on_with_the_average_and_the_trained_weights(run_train, tmp_path):
    whole = run_train(*TOY_FAST[:-1], "trainer.max_epochs=3", "callbacks.ema_decay=0.9")
    run_train(*TOY_FAST[:-1], "trainer.max_epochs=1", "callbacks.ema_decay=0.9")  # in call2/run
    first = tmp_path / "call2" / "run"
    resumed = run_train(*TOY_FAST[:-1], "trainer.max_epochs=3", "callbacks.ema_decay=0.9", f"resume={first}",
                        "resume_allow_changes=true")
    for key in ("val/ppl_best", "test/ppl"):
        assert resumed[key] == pytest.approx(whole[key], rel=1e-5), key


def test_the_average_takes_the_k_steps_of_a_lightning_step_at_once():
    """One Lightning step of steps_per_execution = k optimizer steps: decay^k, as k single steps of
    weights held still would give."""
    import types

    import pytorch_lightning as pl

    class One(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(3))
            self.register_buffer("codes", torch.tensor([5, 7]))  # integers: copied, never averaged

    module, callback = One(), ema_callback(0.9)
    callback.setup(None, module, "fit")
    trainer = types.SimpleNamespace(global_step=1)
    callback.on_train_batch_end(trainer, module, None, None, 0)  # the first update copies the weights: 0
    with torch.no_grad():
        module.w.fill_(1.0)
        module.codes.fill_(6)
    trainer.global_step = 17  # 16 optimizer steps later
    callback.on_train_batch_end(trainer, module, None, None, 1)
    averaged = callback._average_model.module
    assert averaged.w.tolist() == pytest.approx([1 - 0.9 ** 16] * 3, rel=1e-6)
    assert averaged.codes.tolist() == [6, 6]
    trainer.global_step = 18  # one step: 1 - decay of the way
    with torch.no_grad():
        module.w.fill_(2.0)
    callback.on_train_batch_end(trainer, module, None, None, 2)
    assert averaged.w[0].item() == pytest.approx(0.9 * (1 - 0.9 ** 16) + 0.1 * 2.0, rel=1e-6)


def test_a_lightning_without_weight_averaging_gets_a_one_line_error(monkeypatch):
    import pytorch_lightning.callbacks

    monkeypatch.delattr(pytorch_lightning.callbacks, "WeightAveraging")
    with pytest.raises(UserError, match=r"^callbacks.ema_decay=0.999: needs pytorch-lightning >= 2.6 \(installed: "
                                        r".*\); upgrade it, or set callbacks.ema_decay=null$"):
        ema_callback(0.999)


def test_the_memory_estimate_counts_the_averaged_copy_of_the_weights(tmp_path):
    from conftest import compose_cfg
    from nplm.training.memory import FLOAT_BYTES, estimate

    vocab = {"tokens": [f"w{i}" for i in range(100)], "counts": list(range(100, 0, -1)), "unk": "w0", "joiner": " ",
             "tokenizer": "whitespace"}
    plain = estimate(compose_cfg(tmp_path, *TOY_FAST), vocab)
    averaged = estimate(compose_cfg(tmp_path, *TOY_FAST, "callbacks.ema_decay=0.999"), vocab)
    assert averaged["total"] - plain["total"] == plain["params"] * FLOAT_BYTES


def test_the_average_is_updated_without_lightnings_host_syncs_and_equals_its_update(run_train, tmp_path, monkeypatch):
    """The direct update (no `AveragedModel.update_parameters`, whose tests of its device-side count sync a GPU)
    gives Lightning's own averaged weights; where Lightning's averaged model is not what it expects, Lightning's
    update runs (the fallback)."""
    from torch.optim.swa_utils import AveragedModel

    from nplm.training import averaging

    original = AveragedModel.update_parameters
    monkeypatch.setattr(AveragedModel, "update_parameters", lambda *a: pytest.fail("Lightning's update ran"))
    direct = run_train(*TOY_FAST, "callbacks.ema_decay=0.9")
    monkeypatch.setattr(AveragedModel, "update_parameters", original)
    monkeypatch.setattr(averaging, "updates_directly", lambda average: False)
    lightning = run_train(*TOY_FAST, "callbacks.ema_decay=0.9")
    a, b = checkpoint(tmp_path / "run"), checkpoint(tmp_path / "call2" / "run")
    for name, weight in b["state_dict"].items():
        torch.testing.assert_close(a["state_dict"][name], weight, rtol=1e-6, atol=1e-7, msg=name)
    assert direct["val/ppl_best"] == pytest.approx(lightning["val/ppl_best"], rel=1e-6)
    assert averaging.updates_directly(object()) is False
