"""Surviving failure: a SIGKILLed run resumes to the same result; sweeps skip finished jobs and
record failed ones; nplm-compare reads all of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nplm
import warm_python
from conftest import run_cli
from nplm.cli.compare import find_jobs, main as compare_main
from nplm.cli.train import main as train_main

ENV = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
SMALL = ["corpus=tiny_shakespeare", "model.context_size=4", "model.embed_dim=8", "model.hidden_dim=16",
         "data.batch_size=16", "trainer.max_epochs=4", "logger=none", "threads=1"]


def nplm_train(cwd: Path, *args: str):
    """nplm-train in this process (`run_cli`)."""
    return run_cli(train_main, *args, cwd=cwd)


def killable(cwd: Path, *args: str):
    """nplm-train in a process of its own, to be killed (forked from the warm interpreter: `warm_python`)."""
    return warm_python.popen([sys.executable, "-m", "nplm.cli.train", *args], cwd=cwd, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def history(run: Path) -> list[str]:
    return (run / "metrics.csv").read_text().splitlines() if (run / "metrics.csv").exists() else []


def shakespeare_text(folder: Path) -> Path:
    """The shipped Tiny Shakespeare's first 24,000 characters as a text file: epochs of about 1 s with SMALL,
    so that a kill lands inside one even on an idle machine."""
    text = folder / "text.txt"
    text.write_text((Path(__file__).parents[1] / "src/nplm/data/shipped/tinyshakespeare/input.txt").read_text()[:24_000])
    return text


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_equals_an_uninterrupted_run(tmp_path):
    text = shakespeare_text(tmp_path)
    args = [*SMALL, f"corpus.path={text}", f"paths.data_dir={tmp_path}"]
    whole = nplm_train(tmp_path, *args, f"hydra.run.dir={tmp_path / 'runs' / 'whole'}")
    assert whole.code == 0, whole.err[-2000:]

    killed_dir = tmp_path / "runs" / "killed"
    proc = killable(tmp_path, *args, f"hydra.run.dir={killed_dir}")
    deadline = time.time() + 300
    while len(history(killed_dir)) < 3 and time.time() < deadline:  # header + 2 epochs
        time.sleep(0.05)
    time.sleep(0.3)  # into the third epoch
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    record = json.loads((killed_dir / "metrics.json").read_text())
    assert record["status"] == "running" and (killed_dir / "checkpoints" / "last.ckpt").exists()

    resumed = nplm_train(tmp_path, *args, "resume=true", f"hydra.run.dir={tmp_path / 'runs' / 'again'}")
    assert resumed.code == 0, resumed.err[-2000:]
    again = tmp_path / "runs" / "again"
    assert not again.exists(), (list(again.iterdir()), resumed.err[-3000:])  # it went on in the old folder
    a = json.loads((tmp_path / "runs" / "whole" / "metrics.json").read_text())
    b = json.loads((killed_dir / "metrics.json").read_text())
    assert b["status"] == "finished" and b["epochs"] == a["epochs"] == 4
    assert b["metrics"]["val/ppl_best"] == a["metrics"]["val/ppl_best"]
    assert [r["val/ppl"] for r in b["history"]] == [r["val/ppl"] for r in a["history"]]


@pytest.mark.slow  # a two-job sweep trained, then run again
def test_sweep_records_a_failed_job_skips_finished_ones_and_compares(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    train_text, empty = tmp_path / "train.txt", tmp_path / "empty.txt"
    train_text.write_text("the cat sat on the mat\n" * 50)
    empty.write_text("")  # a job whose data is bad fails alone (a bad setting stops the sweep before any job)
    args = ["-m", "corpus=text_files", f"corpus.train={train_text}", f"corpus.valid={train_text},{empty}",
            "model.embed_dim=8", "trainer.max_epochs=1", "logger=none", "threads=1", f"hydra.sweep.dir={sweep}",
            f"paths.data_dir={tmp_path}"]
    first = nplm_train(tmp_path, *args)
    assert first.code == 1
    log = first.out + first.err  # not a terminal: plain per-epoch lines, no progress bar
    assert "epoch 0: train/ppl" in log and "it/s]" not in log
    assert "1 job(s) of the sweep failed" in first.err
    ok, bad = (json.loads((sweep / n / "metrics.json").read_text()) for n in ("0", "1"))
    assert ok["status"] == "finished"
    error = f"corpus.valid={empty}: the file is empty (0 bytes, no text); give corpus.valid a file with text"
    assert bad == {"status": "failed", "error": error,
                   "overrides": ["corpus.train=" + str(train_text), "corpus.valid=" + str(empty), "corpus=text_files",
                                 "logger=none", "model.embed_dim=8", "paths.data_dir=" + str(tmp_path),
                                 "trainer.max_epochs=1"]}  # threads=1 does not change what is trained
    stamp = (sweep / "0" / "metrics.json").stat().st_mtime
    again = nplm_train(tmp_path, *args)
    assert "skipping" in again.err + again.out
    assert (sweep / "0" / "metrics.json").stat().st_mtime == stamp

    jobs = find_jobs([sweep])
    assert [j.status for j in jobs] == ["finished", "failed"]
    compare_main([str(sweep), "--markdown", str(tmp_path / "t.md"), "--csv", str(tmp_path / "t.csv"),
                  "--plots", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert f"failed: {error[:120]}" in out  # (the table's status column shows an error's first 120 characters)
    assert (tmp_path / "t.md").read_text().count("\n") == 4
    assert (tmp_path / "plots" / "learning_curves.png").stat().st_size > 1000


def test_compare_refuses_folders_without_runs(tmp_path):
    from nplm.errors import UserError

    with pytest.raises(UserError, match=r"no metrics.json below"):
        find_jobs([tmp_path])


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_resuming_from_a_mismatched_checkpoint_is_refused(toy_run, tmp_path):
    from conftest import TOY_FAST, compose_cfg
    from nplm.errors import UserError
    from nplm.training.train import train

    ckpt = Path(toy_run.last)
    with pytest.raises(UserError, match=r"has another model \(model.hidden_dim differ\); resume with the settings"):
        train(compose_cfg(tmp_path / "b", *TOY_FAST, "model.hidden_dim=7", f"resume={ckpt}"))
    with pytest.raises(UserError, match=r"has another model"):  # naming the run folder: it is kept
        train(compose_cfg(tmp_path / "d", *TOY_FAST, "model.hidden_dim=7", f"resume={toy_run.folder}"))
    assert ckpt.exists()
    with pytest.raises(UserError, match=r"was trained with corpus=toy, not corpus=text_files; resume it with corpus=toy"):
        (tmp_path / "t.txt").write_text("a b c d\n" * 10)
        train(compose_cfg(tmp_path / "c", *TOY_FAST, "corpus=text_files", f"corpus.train={tmp_path / 't.txt'}",
                          f"corpus.valid={tmp_path / 't.txt'}", f"resume={ckpt}"))


@pytest.mark.slow  # a run, then one continued
def test_last_checkpoint_is_the_last_epoch_even_when_it_did_not_improve(run_train, tmp_path):
    """Lightning 2.6's save_last=True rewrites last.ckpt only with a new best; a step this large makes
    the third epoch worse than the second, and continuing the run must start after it, not train it again."""
    import torch
    from conftest import TOY_FAST, compose_cfg
    from nplm.training.train import train

    steep = [*TOY_FAST, "data.batch_size=4", "optimizer.lr=0.3"]
    run = tmp_path / "run"
    run_train(*steep, "trainer.max_epochs=3")
    vals = [r["val/ppl"] for r in json.loads((run / "metrics.json").read_text())["history"]]
    assert vals[2] > min(vals[:2])  # the last epoch is not the best one
    assert torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["epoch"] == 2
    train(compose_cfg(tmp_path / "more", *steep, "trainer.max_epochs=4", f"resume={run}"))  # continues in `run`
    assert torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["epoch"] == 3
    record = json.loads((run / "metrics.json").read_text())
    assert [r["val/ppl"] for r in record["history"]][:3] == vals
    assert record["wall_time_s"] >= record["history"][-1]["elapsed_s"]  # both invocations, as elapsed_s counts
    assert record["nplm_version"] == nplm.__version__  # the package that trained it, beside its commit


def epochs(path: Path, column: str) -> list[int]:
    """The epochs of the CSV rows that have a value in `column`."""
    import csv

    with open(path, newline="") as f:
        return [int(float(row["epoch"])) for row in csv.DictReader(f) if row.get(column)]


def values(path: Path, column: str) -> list[float]:
    """The values of `column` in a metrics CSV, in its rows' order."""
    import csv

    with open(path, newline="") as f:
        return [round(float(row[column]), 5) for row in csv.DictReader(f) if row.get(column)]


def kill_after_epochs(proc, run: Path, n: int) -> None:
    """SIGKILL once the run's record has n epochs and a checkpoint (the first epoch's is written after its line)."""
    deadline = time.time() + 300
    while (len(history(run)) < n + 1 or not (run / "checkpoints" / "last.ckpt").exists()) and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_kill_9_twice_and_resume_keeps_one_wandb_run_and_every_epoch_once(tmp_path):
    text = shakespeare_text(tmp_path)
    args = [*(a for a in SMALL if not a.startswith(("logger=", "trainer.max_epochs="))), "logger=wandb",
            "trainer.max_epochs=3", f"corpus.path={text}", f"paths.data_dir={tmp_path}"]
    run, runs = tmp_path / "runs" / "r", tmp_path / "runs"
    kill_after_epochs(killable(tmp_path, *args, f"hydra.run.dir={run}"), run, 1)
    kill_after_epochs(killable(tmp_path, *args, "resume=true", f"hydra.run.dir={runs / 'r2'}"), run, 2)
    last = nplm_train(tmp_path, *args, "resume=true", f"hydra.run.dir={runs / 'r3'}")
    assert last.code == 0, last.err[-3000:]
    assert sorted(p.name for p in runs.iterdir()) == ["r"]  # every invocation went on in the first folder

    run_id = (run / "wandb_id.txt").read_text().strip()
    offline = sorted(p.name for p in (run / "wandb").glob("offline-run-*"))
    assert len(offline) == 3 and all(name.endswith("-" + run_id) for name in offline)
    assert epochs(run / "metrics.csv", "val/ppl") == list(range(3))
    assert epochs(run / "csv" / "metrics.csv", "val/ppl") == list(range(3))  # Lightning's log
    assert epochs(run / "csv" / "metrics.csv", "train/epoch_time_s") == list(range(3))
    assert values(run / "csv" / "metrics.csv", "val/ppl") == values(run / "metrics.csv", "val/ppl")  # they agree
    assert values(run / "csv" / "metrics.csv", "train/ppl") == values(run / "metrics.csv", "train/ppl")
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"

    # Raising max_epochs is another run unless the user says so: in the run's own folder, refused
    refused = nplm_train(tmp_path, *args[:-3], "trainer.max_epochs=4", *args[-2:], "resume=true",
                         f"hydra.run.dir={run}")
    assert refused.code == 2 and refused.err.strip().splitlines()[-1] == (
        f"nplm: error: resume: {run} was run with other overrides (trainer.max_epochs=3 -> 4); repeat its "
        "overrides, or add resume_allow_changes=true to continue it with these")
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 3  # untouched
    more = nplm_train(tmp_path, *args[:-3], "trainer.max_epochs=4", *args[-2:], "resume=true",
                      "resume_allow_changes=true", f"hydra.run.dir={runs / 'r5'}")
    assert more.code == 0, more.err[-3000:]
    assert epochs(run / "metrics.csv", "val/ppl") == epochs(run / "csv" / "metrics.csv", "val/ppl") == list(range(4))
    assert (run / "wandb_id.txt").read_text().strip() == run_id and len(list((run / "wandb").glob("offline-run-*"))) == 4


def test_resume_names_every_changed_override(tmp_path):
    from nplm.errors import UserError
    from nplm.tracking.runs import override_changes, resolve_resume, training_overrides

    assert override_changes(["corpus=toy", "model.embed_dim=8", "seed=1"], ["corpus=toy", "seed=2", "+x.y=3"]) == [
        "model.embed_dim=8 -> (default)", "seed=1 -> 2", "x.y=(default) -> 3"]
    old = tmp_path / "runs" / "old"
    (old / "checkpoints").mkdir(parents=True)
    (old / "checkpoints" / "last.ckpt").write_bytes(b"")
    (old / "metrics.json").write_text(json.dumps({"status": "running", "overrides": ["seed=1"]}))
    fresh = tmp_path / "runs" / "new"
    with pytest.raises(UserError, match=r"^resume: .*old was run with other overrides \(seed=1 -> 2\); repeat"):
        resolve_resume(f"{old}", fresh, ["seed=2"])
    assert resolve_resume(True, fresh, ["seed=2"], allow_changes=True) == (old, old / "checkpoints" / "last.ckpt")
    assert resolve_resume(True, fresh, ["seed=1"]) == (old, old / "checkpoints" / "last.ckpt")
    # a record that still lists keys which no longer count (stop_at, threads: written before they joined
    # NOT_TRAINING); continuing with more threads is the same job
    (old / "metrics.json").write_text(json.dumps({"status": "running", "overrides": ["seed=1", "stop_at=1",
                                                                                    "threads=1"]}))
    assert resolve_resume(f"{old}", fresh, training_overrides(["threads=2", "seed=1"])) == (
        old, old / "checkpoints" / "last.ckpt")
    assert training_overrides(["threads=2", "seed=1", "stop_at=5"]) == ["seed=1"]


@pytest.mark.slow  # a run, then the same job found finished
def test_a_new_deadline_grouping_or_thread_count_is_the_same_job(tmp_path):
    """stop_at (a driver's wall-clock budget), steps_per_execution and threads do not change what is
    trained: a second call with other values finds the finished run (and would resume a killed one)."""
    import time

    args = ["corpus=toy", "logger=none", "trainer.max_epochs=1", f"hydra.run.dir={tmp_path / 'a'}"]
    first = nplm_train(tmp_path, *args, f"stop_at={time.time() + 3600:.0f}", "threads=1")
    assert first.code == 0, first.err[-3000:]
    again = nplm_train(tmp_path, *args[:-1], f"hydra.run.dir={tmp_path / 'b'}", f"stop_at={time.time() + 7200:.0f}",
                       "steps_per_execution=4", "threads=2", "resume=true")
    assert again.code == 0, again.err[-3000:]
    assert "already finished" in again.out + again.err


def test_the_wandb_name_and_notes_a_user_sets_reach_the_wandb_run(tmp_path):
    """logger.wandb.name and .notes are W&B's run name and notes (else the run's folder name names it)."""
    from conftest import compose_cfg
    from nplm.tracking.records import build_loggers

    cfg = compose_cfg(tmp_path, "logger=wandb", "logger.wandb.name=my-run", "logger.wandb.notes=a first try")
    loggers = build_loggers(cfg, tmp_path / "run", "folder-name", None)
    run = next(lg for lg in loggers if type(lg).__name__ == "WandbLogger").experiment
    try:
        assert (run.name, run.notes) == ("my-run", "a first try")
    finally:
        run.finish()
