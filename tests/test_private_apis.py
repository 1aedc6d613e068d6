"""Where nplm reaches past a library's public API, it checks once that the thing is there and falls
back to public calls where it is not; each fallback is tested here against what it replaces."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

from nplm.config.registry import Registry
from nplm.models.nplm import _sigmoid_grad, _tanh_grad, aten_or
from nplm.tracking.quiet import quiet
from nplm.tracking.records import drop_anonymous


@pytest.mark.parametrize("name,fallback", [("tanh_backward", _tanh_grad), ("sigmoid_backward", _sigmoid_grad)])
def test_activation_gradients_fall_back_to_the_same_arithmetic(name, fallback):
    torch.manual_seed(0)
    grad, z = torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    a = torch.tanh(z) if name == "tanh_backward" else torch.sigmoid(z)
    torch.testing.assert_close(fallback(grad, a), aten_or(name, None)(grad, a))
    zr = z.clone().requires_grad_()
    (torch.tanh(zr) if name == "tanh_backward" else torch.sigmoid(zr)).backward(grad)
    torch.testing.assert_close(fallback(grad, a), zr.grad)  # what autograd computes
    assert aten_or("no_such_kernel_anywhere", fallback) is fallback


def test_a_registry_whose_module_fails_to_import_says_why_every_time(tmp_path, monkeypatch):
    package = tmp_path / "brokenpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text("import no_such_module_for_nplm\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("head", "brokenpkg")
    for _ in range(2):  # not "head=x: no such option" on the second ask
        with pytest.raises(ModuleNotFoundError, match="no_such_module_for_nplm"):
            registry.options()
    sys.modules.pop("brokenpkg", None)


def test_quiet_silences_the_known_warnings_and_verbose_shows_them_again():
    message = "Checkpoint directory /x exists and is not empty."
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet(False)
        quiet(False)  # idempotent: one entry per known message
        warnings.warn(message, UserWarning)
        assert seen == []
        assert sum(f[0] == "ignore" and f[1] is not None and f[1].pattern.startswith("Checkpoint directory")
                   for f in warnings.filters) == 1
        quiet(True)
        warnings.warn(message, UserWarning)
        assert [str(w.message) for w in seen] == [message]


def test_the_wandb_anonymous_argument_is_dropped_where_lightning_keeps_it():
    class Logger:  # Lightning 2.x's WandbLogger keeps wandb.init's arguments here
        _wandb_init = {"anonymous": None, "project": "p"}

    logger = Logger()
    drop_anonymous(logger)
    assert logger._wandb_init == {"project": "p"}
    drop_anonymous(object())  # a logger without them: nothing to drop, W&B's warning shows


def test_weight_averaging_counts_its_own_updates_and_reads_older_checkpoints():
    from nplm.training.averaging import ema_callback

    ema = ema_callback(0.9)
    assert ema.should_update(epoch_idx=0) is False
    assert ema.should_update(step_idx=15) is True and ema._weight == pytest.approx(1 - 0.9 ** 16)
    assert ema.should_update(step_idx=31) is True and ema._weight == pytest.approx(1 - 0.9 ** 16)
    assert ema.state_dict()["updated_at"] == 32
    ema.load_state_dict({"latest_update_step": 48})  # a checkpoint written before nplm kept its own count
    assert ema.should_update(step_idx=49) is True and ema._weight == pytest.approx(1 - 0.9 ** 2)
