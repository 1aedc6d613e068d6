"""Stopped anywhere, continued exactly: for every model family (and the adaptive head) and every way of
stopping (`stop_at`, `trainer.max_time`, SIGTERM, SIGINT inside an epoch; SIGKILL after a checkpoint), the
stopped run resumed ends with the uninterrupted run's metrics and optimizer steps, epoch by epoch."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import nplm.training.stopping as stopping
import nplm.training.train as train_module
import warm_python
from conftest import run_cli
from nplm.cli.train import main as train_main

TESTS = Path(__file__).resolve().parent
# toy: about 120 tokens; 15 training batches an epoch for every family (the LSTM evaluates one block per batch)
COMMON = ["corpus=toy", "optimizer.lr=0.01", "trainer.max_epochs=3", "logger=csv",
          "threads=1", "steps_per_execution=2"]
EVAL = ["data.eval_batch_size=8"]  # (the LSTM reads each evaluation split as one stream: no evaluation batch size)
FAMILIES = {
    "nplm": [*EVAL, "model=nplm", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=16", "data.batch_size=8"],
    "lbl": [*EVAL, "model=lbl", "model.context_size=3", "model.embed_dim=8", "data.batch_size=8"],
    "modern": [*EVAL, "model=modern", "model.context_size=6", "model.window=3", "model.summaries=1", "model.embed_dim=8",
               "model.hidden_dim=16", "model.num_layers=2", "data.block_size=4", "data.batch_size=2"],
    "lstm": ["model=lstm", "model.hidden_dim=12", "model.dropout=0.2", "data.block_size=4", "data.batch_size=2"],
    "transformer": [*EVAL, "model=transformer", "model.context_size=4", "model.embed_dim=8", "model.num_heads=2",
                    "model.hidden_dim=16", "model.num_layers=2", "data.block_size=4", "data.batch_size=2"],
    "adaptive": [*EVAL, "model=nplm", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=16",
                 "head=adaptive", "head.cutoffs=[4,10]", "data.batch_size=8"],
}
TRIGGER_STEP = 20  # the optimizer step after which a stop is asked for: inside epoch 1 for every family


def record(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def args_of(tmp: Path, family: str, run: Path) -> list[str]:
    return [*COMMON, *FAMILIES[family], f"paths.data_dir={tmp}", f"hydra.run.dir={run}"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """family -> the record of its run never stopped (made once)."""
    done = {}

    def get(family: str) -> dict:
        if family not in done:
            tmp = tmp_path_factory.mktemp(family)
            result = run_cli(train_main, *args_of(tmp, family, tmp / "whole"), cwd=tmp)
            assert result.code == 0, result.err[-3000:]
            done[family] = record(tmp / "whole")
        return done[family]

    return get


def same_training(resumed: dict, whole: dict) -> None:
    """The figures an interrupted run must share with the uninterrupted one (1e-6 relative)."""
    assert resumed["status"] == "finished" and resumed["epochs"] == whole["epochs"]
    for key in ("val/ppl_best", "test/ppl", "train/ppl"):
        assert resumed["metrics"][key] == pytest.approx(whole["metrics"][key], rel=1e-6), key
    for column in ("step", "val/ppl", "train/ppl"):
        assert [r[column] for r in resumed["history"]] == pytest.approx([r[column] for r in whole["history"]],
                                                                         rel=1e-6), column


class Trigger(pl.Callback):
    """Calls `action(the LightningModule)` once, after the optimizer step `step` (StopRequests, before it in the
    list, sees it one Lightning step later)."""

    def __init__(self, step: int, action):
        self.step, self.action, self.fired = step, action, False

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        if not self.fired and trainer.global_step >= self.step:
            self.fired = True
            self.action(pl_module)


@pytest.fixture
def trigger(monkeypatch):
    """install(action): every Trainer made in this test gets a `Trigger(TRIGGER_STEP, action)`."""
    real = train_module.build_trainer

    def install(action):
        def build(*args, **kwargs):
            trainer = real(*args, **kwargs)
            trainer.callbacks.append(Trigger(TRIGGER_STEP, action))
            return trainer

        monkeypatch.setattr(train_module, "build_trainer", build)
        return lambda: monkeypatch.setattr(train_module, "build_trainer", real)

    return install


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("way", ["stop_at", "max_time", "SIGTERM", "SIGINT"])
def test_stopped_inside_an_epoch_then_resumed_ends_as_the_uninterrupted_run(tmp_path, family, way, uninterrupted,
                                                                            trigger, monkeypatch):
    if way.startswith("SIG") and threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    whole = uninterrupted(family)
    run = tmp_path / "run"
    args = args_of(tmp_path, family, run)
    later = [0.0]  # the clock's jump: a deadline or a budget passes at once
    monkeypatch.setattr(stopping, "clock", lambda: time.time() + later[0])
    action = {"stop_at": lambda _: later.__setitem__(0, 1e7), "max_time": lambda _: later.__setitem__(0, 3601),
              "SIGTERM": lambda _: os.kill(os.getpid(), signal.SIGTERM),
              "SIGINT": lambda _: os.kill(os.getpid(), signal.SIGINT)}[way]
    extra = {"stop_at": [f"stop_at={time.time() + 3600:.0f}"], "max_time": ["trainer.max_time=00:01:00:00"]}.get(way, [])
    undo = trigger(action)
    stopped = run_cli(train_main, *args, *extra, cwd=tmp_path)
    assert stopped.code == 0, stopped.err[-3000:]
    cut = record(run)
    by = {"stop_at": "stop_at", "max_time": "trainer.max_time"}.get(way, way)
    first = whole["history"][0]["step"]  # epoch 1's steps end at first + 2, first + 4, ... (2 batches a step)
    fired = first + 2 * -(-(TRIGGER_STEP - first) // 2)
    assert cut["status"] == "stopped" and cut["stopped"] == {
        "by": by, "epoch": 1, "batch": fired + 2 - first, "inside_epoch": True}
    assert [r["epoch"] for r in cut["history"]] == [0]  # the stopped epoch is no row
    undo()
    later[0] = 0.0
    # (a spent trainer.max_time is refused: the resumed run is given a longer one)
    resumed = run_cli(train_main, *args, f"resume={run}", *(["trainer.max_time=00:02:00:00"] if way == "max_time" else []),
                      cwd=tmp_path)
    assert resumed.code == 0, resumed.err[-3000:]
    same_training(record(run), whole)
    assert [p["status"] for p in record(run)["pieces"]] == ["stopped", "finished"]
    assert record(run)["pieces"][1]["from"]["batch"] == cut["stopped"]["batch"]


def test_a_spent_max_time_is_refused_before_the_data_is_read(tmp_path, trigger, monkeypatch):
    run = tmp_path / "run"
    args = args_of(tmp_path, "nplm", run)
    later = [0.0]
    monkeypatch.setattr(stopping, "clock", lambda: time.time() + later[0])
    trigger(lambda _: later.__setitem__(0, 7200))
    assert run_cli(train_main, *args, "trainer.max_time=00:01:00:00", cwd=tmp_path).code == 0
    before = (run / "metrics.json").read_text()
    again = run_cli(train_main, *args, "trainer.max_time=00:01:00:00", f"resume={run}", cwd=tmp_path)
    assert again.code == 2
    assert again.err.strip().splitlines()[-1].startswith(
        "nplm: error: trainer.max_time=00:01:00:00: this run has already trained for 72")
    assert (run / "metrics.json").read_text() == before


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_sigkill_inside_an_epoch_then_resumed_ends_as_the_uninterrupted_run(tmp_path, family, uninterrupted):
    """SIGKILL in epoch 1 (after epoch 0's checkpoint), in a process of its own; `resume=true` goes on."""
    whole = uninterrupted(family)
    run = tmp_path / "run"
    args = args_of(tmp_path, family, run)
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    killed = warm_python.run([sys.executable, str(TESTS / "kill_runner.py"), "train", "10", *args], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = run_cli(train_main, *args, "resume=true", cwd=tmp_path)
    assert resumed.code == 0, resumed.err[-3000:]
    same_training(record(run), whole)


def lightning_rows(run: Path, column: str) -> list[tuple[int, int, float]]:
    """(epoch, step, value) of Lightning's CSV log rows that have `column`."""
    import csv

    with open(run / "csv" / "metrics.csv", newline="") as f:
        return [(int(r["epoch"]), int(r["step"]), float(r[column])) for r in csv.DictReader(f) if r.get(column)]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["nplm", "lstm"])
def test_sigkill_after_a_checkpoint_inside_an_epoch_resumes_there(tmp_path, family):
    """With two validations an epoch, last.ckpt is also written inside the epoch (after its first validation):
    SIGKILL a few steps later, and the resumed run goes on from that batch (for the LSTM, with the streams'
    state) to the uninterrupted figures; Lightning's CSV log then holds every validation once, as uninterrupted."""
    args = [*args_of(tmp_path, family, tmp_path / "whole"), "trainer.val_check_interval=0.5"]
    whole = run_cli(train_main, *args, cwd=tmp_path)
    assert whole.code == 0, whole.err[-3000:]
    run = tmp_path / "run"
    args = [*args[:-2], f"hydra.run.dir={run}", "trainer.val_check_interval=0.5"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    killed = warm_python.run([sys.executable, str(TESTS / "kill_runner.py"), "train", "26", *args], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["epoch"] == 1 and ckpt["nplm"]["epoch_so_far"] is not None  # written inside epoch 1
    resumed = run_cli(train_main, *args, "resume=true", cwd=tmp_path)
    assert resumed.code == 0, resumed.err[-3000:]
    same_training(record(run), record(tmp_path / "whole"))
    assert lightning_rows(run, "val/ppl") == lightning_rows(tmp_path / "whole", "val/ppl")
    ours, theirs = lightning_rows(run, "train/ppl"), lightning_rows(tmp_path / "whole", "train/ppl")
    assert [r[:2] for r in ours] == [r[:2] for r in theirs]
    assert [r[2] for r in ours] == pytest.approx([r[2] for r in theirs], rel=1e-6)


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["a new folder", "the run's own folder"])
def test_resume_of_a_finished_run_leaves_every_file_as_it_was(tmp_path, where, uninterrupted):
    uninterrupted("nplm")  # (its toy data in the cache)
    run = tmp_path / "run"
    args = args_of(tmp_path, "nplm", run)
    assert run_cli(train_main, *args, cwd=tmp_path).code == 0
    before = files_of(run)
    folder = run if where == "the run's own folder" else tmp_path / "again"
    again = run_cli(train_main, *args[:-1], f"hydra.run.dir={folder}", f"resume={run}", cwd=tmp_path)
    assert again.code == 0, again.err[-3000:]
    assert f"resume={run}: that run has finished and has nothing left to train" in again.out + again.err
    assert files_of(run) == before
    assert not (tmp_path / "again").exists()
    # with resume_allow_changes=true and a change that trains no further (the same max_epochs): the same
    changed = run_cli(train_main, *args[:-1], "optimizer.lr=0.02", "resume_allow_changes=true",
                      f"hydra.run.dir={folder}", f"resume={run}", cwd=tmp_path)
    assert changed.code == 0, changed.err[-3000:]
    assert files_of(run) == before


@pytest.mark.filterwarnings("ignore:Experiment logs directory")
@pytest.mark.parametrize("kill", ["torn", "lost"])
def test_lightnings_csv_log_torn_by_a_kill_is_mended_from_the_runs_record(tmp_path, kill):
    """A kill while Lightning rewrites csv/metrics.csv in place loses rows, or leaves half a line, or the file is
    not there yet: the resumed run's log holds every epoch of its checkpoint again, with the values of the run's
    own metrics.csv, and the rows Lightning appends after them land in their columns."""
    from pytorch_lightning.loggers import CSVLogger

    from nplm.tracking.records import _continue_csv

    run = tmp_path / "run"
    assert run_cli(train_main, *args_of(tmp_path, "nplm", run), cwd=tmp_path).code == 0
    log = run / "csv" / "metrics.csv"
    whole = lightning_rows(run, "val/ppl"), lightning_rows(run, "train/ppl")
    lines = log.read_text().splitlines()
    header, epoch0 = lines[0], [line for line in lines[1:] if line.startswith("0,")]
    torn = [header, *(line for line in lines[1:] if line not in epoch0 and ",test" not in line and line.split(",")[2] == "")]
    assert torn[-1].startswith("2,44,")  # (epoch 2's training row)
    log.write_text("\n".join(torn)[:-7])  # epoch 0's rows gone, the last one (epoch 2's training row) cut short
    if kill == "lost":  # (killed before Lightning first wrote it)
        log.unlink()
    logger = CSVLogger(str(run), name="csv", version="")
    _continue_csv(logger, run / "checkpoints" / "last.ckpt")
    assert lightning_rows(run, "val/ppl") == whole[0]
    mended = lightning_rows(run, "train/ppl")
    assert [r[:2] for r in mended] == [r[:2] for r in whole[1]]
    assert [r[2] for r in mended] == pytest.approx([r[2] for r in whole[1]], rel=1e-6)
    logger.log_metrics({"epoch": 3, "train/ppl": 1.5, "val/ppl": 2.5}, step=60)  # the resumed run goes on
    logger.save()
    assert lightning_rows(run, "train/ppl")[-1] == (3, 60, 1.5) and lightning_rows(run, "val/ppl")[-1] == (3, 60, 2.5)


@pytest.mark.parametrize("way", ["error", "divergence"])
def test_an_error_or_a_divergence_inside_an_epoch_resumes_from_the_last_checkpoint_exactly(tmp_path, way, uninterrupted,
                                                                                          trigger):
    """An exception raised inside training (the run is recorded failed) or a loss that is no longer finite
    (recorded diverged) leaves the last checkpoint before it (epoch 0's end); `resume` goes on from there to the
    uninterrupted figures (here the fault is gone: a fixed bug, a lower step)."""
    whole = uninterrupted("nplm")
    run = tmp_path / "run"
    args = args_of(tmp_path, "nplm", run)

    def fault(module):
        if way == "error":
            raise RuntimeError("injected")
        with torch.no_grad():  # the next steps' losses are NaN: caught at the next read of the device
            next(module.parameters()).fill_(float("nan"))

    undo = trigger(fault)
    broken = run_cli(train_main, *args, cwd=tmp_path)
    code, status = {"error": (1, "failed"), "divergence": (2, "diverged")}[way]  # (a divergence: one line, exit 2)
    assert broken.code == code and record(run)["status"] == status
    undo()
    resumed = run_cli(train_main, *args, f"resume={run}", cwd=tmp_path)
    assert resumed.code == 0, resumed.err[-3000:]
    same_training(record(run), whole)
    assert [p["status"] for p in record(run)["pieces"]] == [status, "finished"]
