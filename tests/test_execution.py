"""Several batches per Lightning step (`steps_per_execution`, nplm.training.execution): the same training as one
batch per step, with every trainer option that counts batches still counting batches."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch
from conftest import TOY_FAST, compose_cfg

from nplm.training.train import train

from nplm.data.windows import BatchIndices, GroupedBatches, Windows
from nplm.training.execution import ExecutionPlan


@pytest.mark.parametrize("trainer, size, lightning, per_epoch", [
    ({}, 16, {}, 100),
    ({"val_check_interval": 1.0}, 16, {"val_check_interval": 1.0}, 100),
    ({"val_check_interval": 50}, 2, {"val_check_interval": 25}, 100),  # S = gcd(16, 50)
    ({"val_check_interval": 0.25}, 1, {"val_check_interval": 25}, 100),  # every 25 batches
    ({"limit_train_batches": 10}, 10, {}, 10),
    ({"limit_train_batches": 0.5}, 16, {}, 50),
])
def test_plan_keeps_batch_counts_in_batches(trainer, size, lightning, per_epoch):
    """An epoch of 100 batches, S = 16 asked for."""
    plan = ExecutionPlan.build(trainer, 100, 16)
    assert (plan.batches_per_step, plan.train_batches, plan.trainer_options) == (size, per_epoch, lightning)
    # what Lightning sees: the training loader's groups
    grouped = GroupedBatches(BatchIndices(100 * 8, 8, shuffle=False), plan.batches_per_step, plan.train_batches)
    assert len(grouped) == len(list(grouped)) == -(-per_epoch // size)


def test_plan_keeps_one_batch_per_step_under_ddp():
    assert ExecutionPlan.build({"strategy": "ddp", "devices": 2}, 100, 16).batches_per_step == 1


def test_plan_hands_clipping_accumulation_and_logging_to_the_module():
    plan = ExecutionPlan.build({"gradient_clip_val": 0.5, "gradient_clip_algorithm": "value",
                                "accumulate_grad_batches": 4, "log_every_n_steps": 7}, 100, 16)
    assert (plan.step_options.gradient_clip_val, plan.step_options.gradient_clip_algorithm,
            plan.step_options.accumulate_grad_batches, plan.step_options.log_every_n_steps) == (0.5, "value", 4, 7)
    assert plan.trainer_options == {"log_every_n_steps": 7}


@pytest.mark.parametrize("trainer, steps", [
    ({"max_epochs": 3}, 300),
    ({"max_epochs": 3, "accumulate_grad_batches": 8}, 39),  # 13 per epoch: 12 full groups and the last 4 batches
    ({"max_epochs": 3, "limit_train_batches": 0.5}, 150),
    ({"max_epochs": 3, "max_steps": 120}, 120),
    ({"max_epochs": 1, "max_steps": 120}, 100),
    ({"max_steps": 120}, 120),
    ({}, None),  # no bound known: Lightning's own estimate
])
def test_plan_counts_the_runs_optimizer_steps(trainer, steps):
    """T of optimizer.cosine: optimizer steps, not Lightning's groups of S = 16 batches."""
    assert ExecutionPlan.build(trainer, 100, 16).step_options.total_steps == steps


def test_grouped_batches_are_the_single_batches_in_order():
    windows = Windows(torch.arange(103), 3)  # 100 windows
    single = list(BatchIndices(len(windows), 8, shuffle=True, seed=5))
    groups = list(GroupedBatches(BatchIndices(len(windows), 8, shuffle=True, seed=5), 5, limit=12))
    assert [len(g) for g in groups] == [5, 5, 2]
    flat = [b for g in groups for b in g]
    assert all(torch.equal(a, b) for a, b in zip(flat, single[:12]))
    pairs = windows[groups[0]]  # one gather for the group, split back into its batches
    for (context, target), idx in zip(pairs, groups[0]):
        assert torch.equal(target, windows[idx][1]) and torch.equal(context, windows[idx][0])


def _train(folder, *overrides: str) -> dict:
    """A run in its own folder (a run folder that holds a finished run with the same overrides is reused)."""
    return train(compose_cfg(folder, *TOY_FAST, "data.batch_size=8", *overrides))


def _checkpoint(folder) -> dict:
    return torch.load(folder / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


@pytest.mark.parametrize("extra", [
    [],
    ["trainer.accumulate_grad_batches=3", "trainer.gradient_clip_val=0.05"],
    ["optimizer=sgd", "optimizer.lr=0.5", "optimizer.lr_decay=0.01"],
])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_any_steps_per_execution_trains_as_one_batch_per_step(tmp_path, extra):
    """Toy corpus, 2 epochs of 15 batches: S = 1, 3 (not a divisor: a short last group) and 16 give the
    same perplexities, with gradient accumulation, clipping and a per-step schedule too."""
    results = []
    for size in (1, 3, 16):
        metrics = _train(tmp_path / str(size), f"steps_per_execution={size}", *extra)
        results.append((metrics["val/ppl_best"], metrics["test/ppl"], metrics["train/lr"]))
        steps = 10 if "trainer.accumulate_grad_batches=3" in extra else 30
        assert _checkpoint(tmp_path / str(size))["global_step"] == steps
    for got in results[1:]:
        assert got == pytest.approx(results[0], rel=1e-6)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_gradient_clipping_and_accumulation_are_applied(tmp_path):
    sgd = ["optimizer=sgd", "optimizer.lr=0.5", "optimizer.lr_decay=0"]  # (Adam's step barely depends on the scale)
    plain = _train(tmp_path / "a", *sgd)["val/ppl_best"]
    for name, option in (("b", "trainer.gradient_clip_val=0.01"), ("c", "trainer.accumulate_grad_batches=3")):
        assert abs(_train(tmp_path / name, *sgd, option)["val/ppl_best"] - plain) > 1e-3 * plain, option


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_clipping_with_a_fused_optimizer_under_bf16_mixed_trains(tmp_path):
    """Lightning refuses to clip for a fused optimizer under any mixed precision; bf16 has no gradient scaler,
    so nplm clips with torch's utilities (`experiment=sun2021/wikitext103`: fused AdamW, clip 0.25, bf16)."""
    bf16 = ["optimizer=adamw", "optimizer.fused=true", "trainer.precision=bf16-mixed", "optimizer.lr=0.5"]
    plain = _train(tmp_path / "a", *bf16)["val/ppl_best"]
    clipped = _train(tmp_path / "b", *bf16, "trainer.gradient_clip_val=1e-4")["val/ppl_best"]
    assert math.isfinite(clipped) and abs(clipped - plain) > 1e-3 * plain


def test_max_steps_stops_at_that_optimizer_step(tmp_path):
    _train(tmp_path, "steps_per_execution=16", "+trainer.max_steps=7")
    assert _checkpoint(tmp_path)["global_step"] == 7


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_run_stopped_before_any_validation_records_no_best_perplexity(tmp_path):
    """max_steps inside the quick start's first epoch (6,972 batches): metrics.json's val/ppl_best is null (it
    was Infinity, which is not JSON), the test split scored on the last weights."""
    metrics = train(compose_cfg(tmp_path, "experiment=quickstart", "+trainer.max_steps=20", "logger=none"))
    assert metrics["val/ppl_best"] is None and math.isfinite(metrics["test/ppl"])
    record = json.loads((tmp_path / "run" / "metrics.json").read_text(), parse_constant=lambda name: name)
    assert record["metrics"]["val/ppl_best"] is None
    from nplm.cli.train import sweep_objective  # a sweeper (Optuna) gets NaN: a trial without a value

    assert math.isnan(sweep_objective(metrics)) and sweep_objective({"val/ppl_best": 5.25}) == 5.25


def test_logged_steps_count_optimizer_steps(tmp_path):
    """Lightning's CSV logger: train/loss about every log_every_n_steps batches, on an axis of batches."""
    _train(tmp_path, "logger=csv", "steps_per_execution=4", "trainer.log_every_n_steps=5")
    rows = list(csv.DictReader(open(next((tmp_path / "run").rglob("csv/**/metrics.csv")))))
    steps = [int(r["step"]) for r in rows if r.get("train/loss")]
    # 15 batches per epoch in groups of 4, 4, 4, 3: the last batch (0-based) of each group in which a
    # multiple of 5 fell (batches 1-based 5, 10, 15 | 20, 25, 30; none in 16-19)
    assert steps == [7, 11, 14, 22, 26, 29]
    losses = [r["train/loss"] for r in rows if r.get("train/loss")]
    assert len(losses) == len(set(losses))  # each written once, not again at every later step
    assert max(int(r["step"]) for r in rows) == 30  # the epoch rows: after 2 epochs of 15 batches


def test_plateau_schedule_halves_the_step_after_an_epoch_without_a_better_val_ppl(tmp_path):
    """With a step too small to change anything, every epoch after the first is no better: the step
    size is halved after each (ReduceLROnPlateau under nplm's manual optimization)."""
    _train(tmp_path, "optimizer=sgd", "optimizer.lr=1e-6", "optimizer.lr_decay=0", "optimizer.plateau_factor=0.5",
              "trainer.max_epochs=3")
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    lrs = [float(r["train/lr"]) for r in rows]
    assert lrs == pytest.approx([1e-6, 1e-6, 5e-7])
    assert math.isclose(float(rows[0]["epoch"]), 0)


def test_cosine_schedule_anneals_the_step_over_the_runs_updates(tmp_path):
    """optimizer.cosine=true: T is the run's updates (3 epochs of 15 batches); the step logged at the end
    of epoch e is lr (1 + cos(pi 15 e / 45)) / 2."""
    _train(tmp_path, "optimizer.lr=0.01", "optimizer.cosine=true", "trainer.max_epochs=3")
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    lrs = [float(r["train/lr"]) for r in rows]
    assert lrs == pytest.approx([0.01 * (1 + math.cos(math.pi * e / 3)) / 2 for e in (1, 2, 3)], rel=1e-6, abs=1e-9)


def test_a_loader_of_single_batches_trains_too(tmp_path):
    """A LanguageModel fitted on the datamodule's own loader (one batch per Lightning step, as a library
    user would) takes its optimizer step per batch."""
    import pytorch_lightning as pl

    from nplm.data.datamodule import LMDataModule
    from nplm.training.module import LanguageModel

    dm = LMDataModule({"name": "toy"}, 3, 8, 64)
    dm.setup()
    module = LanguageModel({"context_size": 3, "embed_dim": 8, "hidden_dim": 16}, {"name": "softmax"},
                           {"name": "adam", "lr": 0.01}, dm.vocab.to_dict())
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", default_root_dir=str(tmp_path))
    trainer.fit(module, train_dataloaders=dm.train_dataloader())
    assert trainer.global_step == dm.train_batches() == 15


def test_a_callback_on_the_per_batch_hooks_gets_them_and_the_same_training(tmp_path):
    """With a callback on on_after_backward / on_before_optimizer_step the step goes through Lightning
    (manual_backward, LightningOptimizer.step): every hook fires once per batch, and the model is the
    one the direct path trains."""
    import pytorch_lightning as pl

    from nplm.data.datamodule import LMDataModule
    from nplm.training.module import LanguageModel

    class Count(pl.Callback):
        backward = steps = 0

        def on_after_backward(self, trainer, pl_module):
            Count.backward += 1

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            Count.steps += 1

    weights = []
    for callbacks in ([], [Count()]):
        pl.seed_everything(0, verbose=False)
        dm = LMDataModule({"name": "toy"}, 3, 8, 64)
        dm.setup()
        dm.group_training(4)
        module = LanguageModel({"context_size": 3, "embed_dim": 8, "hidden_dim": 16}, {"name": "softmax"},
                               {"name": "adam", "lr": 0.01}, dm.vocab.to_dict())
        trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", callbacks=callbacks,
                             default_root_dir=str(tmp_path))
        trainer.fit(module, train_dataloaders=dm.train_dataloader())
        assert module.stepper.parts.direct is (not callbacks)
        weights.append(module.head.out.weight.detach().clone())
    assert (Count.backward, Count.steps) == (30, 30)
    assert torch.allclose(weights[0], weights[1], rtol=1e-6, atol=1e-7)


def test_logged_steps_count_optimizer_steps_under_accumulation(tmp_path):
    """accumulate_grad_batches=3: 15 batches are 5 optimizer steps per epoch; train/loss every 2 of them."""
    _train(tmp_path, "logger=csv", "steps_per_execution=4", "trainer.log_every_n_steps=2",
           "trainer.accumulate_grad_batches=3")
    rows = list(csv.DictReader(open(next((tmp_path / "run").rglob("csv/**/metrics.csv")))))
    within = [int(r["step"]) for r in rows if r.get("train/loss") and not r.get("epoch")]
    # per epoch, groups of 4 batches end after optimizer steps 1, 2, 4, 5; the second epoch's after 6, 7, 9, 10:
    # a log where an even step was passed, at the group's last step (0-based on the axis)
    assert within == [1, 3, 5, 8, 9]
    losses = [r["train/loss"] for r in rows if r.get("train/loss")]
    # no value written twice; the first epoch-end window is the sixth (the second is empty)
    assert len(losses) == len(set(losses)) == 6
    assert max(int(r["step"]) for r in rows) == 10  # the epoch rows: after 2 epochs of 5 optimizer steps


def test_without_lightnings_loop_counters_the_training_is_the_same(tmp_path, monkeypatch):
    """Lightning's count of optimizer steps and its loggers' step axis have no public API
    (`nplm.training.lightning_counters`). Forced missing: every optimizer step goes through
    `LightningOptimizer.step`, and the run is the same bit for bit (weights, global step, perplexities,
    the logged training losses and their steps); only the epoch-end rows keep Lightning's own axis."""
    from pytorch_lightning.core.optimizer import LightningOptimizer

    from nplm.training import lightning_counters

    overrides = ("logger=csv", "steps_per_execution=4", "trainer.log_every_n_steps=5")
    runs, real = [], LightningOptimizer.step
    for counters in (True, False):
        monkeypatch.setattr(lightning_counters, "LIGHTNING_COUNTERS", counters)
        calls = []
        monkeypatch.setattr(LightningOptimizer, "step", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
        folder = tmp_path / str(counters)
        metrics = _train(folder, *overrides)
        rows = list(csv.DictReader(open(next((folder / "run").rglob("csv/**/metrics.csv")))))
        losses = [(int(r["step"]), r["train/loss"]) for r in rows if r.get("train/loss") and not r.get("epoch")]
        runs.append((metrics, _checkpoint(folder), losses, len(calls)))
    (fast, fast_ckpt, fast_losses, fast_calls), (plain, plain_ckpt, plain_losses, plain_calls) = runs
    assert (fast_calls, plain_calls) == (0, 30)  # 2 epochs of 15 batches
    assert plain_ckpt["global_step"] == fast_ckpt["global_step"] == 30
    for key, value in fast_ckpt["state_dict"].items():
        assert torch.equal(plain_ckpt["state_dict"][key], value), key
    for key in ("val/ppl_best", "test/ppl", "train/ppl"):
        assert plain[key] == fast[key], key
    assert plain_losses == fast_losses and len(fast_losses) == 6


def test_without_lightnings_epoch_progress_the_batches_are_the_same(tmp_path, monkeypatch):
    """The training sampler shuffles for the epoch Lightning gives its own samplers (its epoch progress,
    not a public API: `nplm.data.datamodule.training_epoch`). Forced missing, it takes
    `trainer.current_epoch`: the same epochs 0 and 1 and the same run bit for bit."""
    from nplm.data import datamodule

    real = datamodule.training_epoch
    runs = []
    for available in (True, False):
        monkeypatch.setattr(datamodule, "LIGHTNING_EPOCH_PROGRESS", available)
        epochs = []

        def spy(trainer, epochs=epochs):
            epoch = real(trainer)
            return lambda: epochs.append(epoch()) or epochs[-1]

        monkeypatch.setattr(datamodule, "training_epoch", spy)
        folder = tmp_path / str(available)
        runs.append((_train(folder), _checkpoint(folder)["state_dict"], epochs))
    (fast, fast_weights, fast_epochs), (plain, plain_weights, plain_epochs) = runs
    assert fast_epochs == plain_epochs == [0, 1]
    assert all(torch.equal(plain_weights[key], value) for key, value in fast_weights.items())
    assert (plain["val/ppl_best"], plain["test/ppl"]) == (fast["val/ppl_best"], fast["test/ppl"])
