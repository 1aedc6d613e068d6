"""The config keys of how a run takes its training steps (`compile_mode`, `compile_backend`, `capture_dry`,
`sync_debug`): each accepted value reaches the module and the run's record; a bad value, or one that would have
no effect, is refused in one line (exit 2 on the command line) before any data is read."""

from __future__ import annotations

import logging

import pytest
import torch
import yaml

from nplm.cli.train import command_line
from nplm.errors import EXIT_USER_ERROR, UserError
from nplm.training import capture

from conftest import TOY_FAST, compose_cfg

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

REFUSED = [
    ("compile=true compile_mode=fast", "compile_mode=fast: must be one of: default, reduce-overhead, max-autotune, "
                                       "max-autotune-no-cudagraphs or null"),
    ("compile=true compile_backend=tvm", "compile_backend=tvm: must be one of: inductor, aot_eager, eager, cudagraphs"),
    ("compile_mode=reduce-overhead", "compile_mode=reduce-overhead: applies only with compile=true; set compile=true, "
                                     "or leave compile_mode out"),
    ("compile_backend=aot_eager", "compile_backend=aot_eager: applies only with compile=true; set compile=true, or "
                                  "leave compile_backend out"),
    ("capture_dry=yes", "capture_dry=yes: must be true or false"),
    ("sync_debug=1", "sync_debug=1: must be true or false"),
]
CPU_REFUSED = [
    ("sync_debug=true", "sync_debug=true: checks a CUDA device's host-device syncs, and trainer.accelerator=cpu "
                        "trains on no CUDA device; set trainer=gpu, or sync_debug=false"),
    ("sync_debug=true trainer.accelerator=auto", "sync_debug=true: checks a CUDA device's host-device syncs, and "
                                                 "trainer.accelerator=auto finds no CUDA GPU here; set trainer=gpu, "
                                                 "or sync_debug=false"),
]


def refused_in_process(tmp_path, overrides: str) -> str:
    from nplm.training.train import train

    with pytest.raises(UserError) as info:
        train(compose_cfg(tmp_path, *TOY_FAST, *overrides.split()))
    assert not (tmp_path / "run").exists()  # nothing written: refused before the data
    return str(info.value)


@pytest.mark.parametrize("overrides,message", REFUSED)
def test_bad_step_settings_are_refused_in_one_line(tmp_path, overrides, message):
    assert refused_in_process(tmp_path, overrides) == message


@NO_GPU
@pytest.mark.parametrize("overrides,message", CPU_REFUSED)
def test_sync_debug_on_a_cpu_run_is_refused(tmp_path, overrides, message):
    assert refused_in_process(tmp_path, overrides) == message


@pytest.mark.parametrize("overrides,message", [REFUSED[2], REFUSED[0]])
def test_the_command_line_refuses_them_with_exit_2(overrides, message, capsys):
    with pytest.raises(SystemExit) as info:
        command_line(["corpus=toy", *overrides.split()])
    assert info.value.code == EXIT_USER_ERROR
    assert capsys.readouterr().err == f"nplm: error: {message}\n"


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_compile_mode_and_backend_reach_torch_compile_and_the_record(tmp_path, monkeypatch):
    """compile=true with compile_backend=eager, compile_mode=default: torch.compile gets them (and fullgraph),
    the run trains, and its config.yaml records all four keys."""
    from nplm.training.train import train

    calls, real = [], torch.compile
    monkeypatch.setattr(torch, "compile", lambda f, **kw: calls.append(kw) or real(f, **kw))
    torch._dynamo.reset()
    metrics = train(compose_cfg(tmp_path, *TOY_FAST, "trainer.max_epochs=1", "compile=true",
                                "compile_backend=eager", "compile_mode=default"))
    torch._dynamo.reset()
    assert calls == [{"fullgraph": True, "backend": "eager", "mode": "default"}]
    assert 1 < metrics["val/ppl"] < 60
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert {k: saved[k] for k in ("compile_mode", "compile_backend", "capture_dry", "sync_debug")} == {
        "compile_mode": "default", "compile_backend": "eager", "capture_dry": False, "sync_debug": False}


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_capture_dry_runs_the_captured_step_on_the_cpu(run_train, monkeypatch):
    """capture_dry=true: the captured step runs dry (no CUDA graph) on the CPU, every full batch after the warm-up
    on its static buffers; without it a CPU run takes no captured step."""
    chosen = []
    real = capture.CapturedStep.__init__

    def spied(self, *args, **kwargs):
        real(self, *args, **kwargs)
        chosen.append((self.dry, self.graphed))

    monkeypatch.setattr(capture.CapturedStep, "__init__", spied)
    overrides = [*TOY_FAST, "trainer.max_epochs=1", "data.batch_size=8"]  # 14 full batches, 1 short
    plain = run_train(*overrides)
    assert chosen == [] and "train/graph_steps" not in plain
    dry = run_train(*overrides, "capture_dry=true")
    assert chosen == [(True, False)]
    assert dry["train/graph_steps"] == 14 - capture.WARMUP_STEPS
    assert dry["train/ppl"] == pytest.approx(plain["train/ppl"], rel=1e-4)


def test_sync_debug_on_a_cpu_module_says_it_has_no_effect(tmp_path, caplog):
    """A LanguageModel in one's own Trainer on a CPU with sync_debug set: one warning line, and training goes on."""
    import pytorch_lightning as pl

    from nplm.data.datamodule import LMDataModule
    from nplm.training.module import LanguageModel

    dm = LMDataModule({"name": "toy"}, 3, 32, 64)
    dm.setup()
    module = LanguageModel({"context_size": 3, "embed_dim": 8, "hidden_dim": 16}, {"name": "softmax"},
                           {"name": "adam", "lr": 0.01}, dm.vocab.to_dict())
    module.sync_debug = True
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", default_root_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="nplm.training.sync_debug"):
        trainer.fit(module, train_dataloaders=dm.train_dataloader())
    lines = [r.getMessage() for r in caplog.records if "sync_debug" in r.getMessage()]
    assert lines == ["sync_debug=true: no effect on a cpu device (only CUDA host-device syncs are checked)"]
    assert trainer.global_step == dm.train_batches()


@CUDA
def test_sync_debug_on_cuda_raises_at_a_sync_inside_a_training_step(tmp_path, monkeypatch):
    """sync_debug=true, trainer=gpu: a training loss that reads a value on the host fails the step (after the
    first group, which may sync while it sets up), which without the key trains on."""
    from nplm.training.module import LanguageModel
    from nplm.training.train import train

    real = LanguageModel._train_loss

    def syncing(self, context, target):
        nll = real(self, context, target)
        float(nll.sum())  # a host read: a sync
        return nll

    monkeypatch.setattr(LanguageModel, "_train_loss", syncing)
    overrides = [*TOY_FAST, "trainer=gpu", "trainer.max_epochs=1", "steps_per_execution=1", "cuda_graphs=false"]
    assert train(compose_cfg(tmp_path / "plain", *overrides))["train/ppl"] > 1
    with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
        train(compose_cfg(tmp_path / "debug", *overrides, "sync_debug=true"))
