"""`resume=true` picks the right run or says why not; a run killed at any moment resumes to the numbers
of an uninterrupted one; a sweep with a killed and a failed job, run again, redoes only those two."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import warm_python
from conftest import CliResult, run_cli
from nplm.cli.train import main as train_main
from nplm.tracking.records import write_json
from nplm.tracking.runs import latest_to_continue, observed_status, resolve_resume

TESTS = Path(__file__).resolve().parent
ENV = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
# 117 toy windows, batches of 8: 15 batches (one Lightning step each: steps_per_execution=1) per epoch
TOY = ["corpus=toy", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=16", "data.batch_size=8",
       "data.eval_batch_size=8", "optimizer.lr=0.01", "trainer.max_epochs=4", "logger=csv", "threads=1",
       "steps_per_execution=1"]


def dead_pid() -> int:
    """The id of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def fake_run(folder: Path, status: str, overrides: list[str], checkpoint: bool, pid: int | None = None) -> Path:
    folder.mkdir(parents=True)
    write_json(folder / "metrics.json", {"status": status, "overrides": overrides, "metrics": {},
                                         "pid": pid or dead_pid(), "host": os.uname().nodename})
    if checkpoint:
        (folder / "checkpoints").mkdir()
        torch.save({"epoch": 0}, folder / "checkpoints" / "last.ckpt")
    return folder


SAME = ["corpus=toy", "trainer.max_epochs=400"]


def test_a_fixed_run_folder_is_considered_first(tmp_path):
    """The case of issue 29: hydra.run.dir=$D/r killed, an unrelated earlier run $D/q beside it."""
    fake_run(tmp_path / "q", "finished", ["corpus=toy", "seed=7"], checkpoint=True)
    r = fake_run(tmp_path / "r", "running", SAME, checkpoint=True)
    assert resolve_resume(True, r, SAME) == (r, r / "checkpoints" / "last.ckpt")


def test_earlier_runs_with_the_same_overrides_newest_first(tmp_path):
    old = fake_run(tmp_path / "a", "running", SAME, checkpoint=True)
    time.sleep(0.02)
    new = fake_run(tmp_path / "b", "running", SAME, checkpoint=True)
    time.sleep(0.02)
    fake_run(tmp_path / "c", "running", ["corpus=toy"], checkpoint=True)  # newest, other overrides
    fresh = tmp_path / "fresh"
    assert latest_to_continue(fresh, SAME, allow_changes=False) == new
    assert latest_to_continue(fresh, ["corpus=toy"], allow_changes=False) == tmp_path / "c"
    assert old != new


def test_a_finished_run_ends_the_search(tmp_path):
    fake_run(tmp_path / "a", "running", SAME, checkpoint=True)
    time.sleep(0.02)
    done = fake_run(tmp_path / "b", "finished", SAME, checkpoint=True)
    assert resolve_resume(True, tmp_path / "fresh", SAME) == (done, None)


def test_nothing_to_continue_says_why_for_each_run_and_starts_afresh(tmp_path, caplog):
    """Killed before its first checkpoint, still running, other overrides: one line, a fresh start."""
    killed = fake_run(tmp_path / "killed", "running", SAME, checkpoint=False)
    fake_run(tmp_path / "alive", "running", SAME, checkpoint=True, pid=os.getppid())
    fake_run(tmp_path / "other", "running", ["corpus=toy", "seed=3"], checkpoint=True)
    fresh = tmp_path / "fresh"
    with caplog.at_level(logging.WARNING, logger="nplm.tracking.runs"):
        assert resolve_resume(True, fresh, SAME) == (fresh, None)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("resume=true: nothing to continue (")
    assert "killed: killed, no checkpoint (killed before its first checkpoint)" in line
    assert f"alive: still running (pid {os.getppid()})" in line
    assert "other: other overrides (seed=3 -> (default); trainer.max_epochs=(default) -> 400)" in line
    assert line.endswith(f"starting afresh in {fresh}")
    record = json.loads((killed / "metrics.json").read_text())  # recorded as such, once seen dead
    assert record["status"] == "killed" and record["checkpoint"] is None
    assert record["error"] == "killed before its first checkpoint"


def test_a_fixed_run_folder_holding_a_run_with_other_overrides_is_refused(tmp_path):
    """Pointing at a run's own folder means that run: with other overrides, one line and the fix."""
    from nplm.errors import UserError

    r = fake_run(tmp_path / "r", "running", ["corpus=toy"], checkpoint=True)
    with pytest.raises(UserError) as err:
        resolve_resume(True, r, SAME)
    assert str(err.value) == (f"resume: {r} was run with other overrides (trainer.max_epochs=(default) -> 400); "
                              "repeat its overrides, or add resume_allow_changes=true to continue it with these")
    assert resolve_resume(True, r, SAME, allow_changes=True) == (r, r / "checkpoints" / "last.ckpt")


def test_other_overrides_are_continued_only_when_allowed(tmp_path):
    other = fake_run(tmp_path / "other", "running", ["corpus=toy"], checkpoint=True)
    assert latest_to_continue(tmp_path / "fresh", SAME, allow_changes=False) is None
    assert latest_to_continue(tmp_path / "fresh", SAME, allow_changes=True) == other


def test_a_running_record_of_a_live_process_is_running(tmp_path):
    alive = fake_run(tmp_path / "alive", "running", SAME, checkpoint=False, pid=os.getppid())
    assert observed_status(alive, json.loads((alive / "metrics.json").read_text())) == "running"


def runner(cwd: Path, moment: str, n: int, *args: str, job: str | None = None,
           failing_job: str | None = None) -> subprocess.CompletedProcess:
    env = {**ENV, **({"NPLM_FAULT_JOB": job} if job else {}), **({"NPLM_FAIL_JOB": failing_job} if failing_job else {})}
    return warm_python.run([sys.executable, str(TESTS / "kill_runner.py"), moment, str(n), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def nplm_train(cwd: Path, *args: str) -> CliResult:
    """nplm-train in this process (`run_cli`): the killed runs are the runner's, in processes of their own."""
    return run_cli(train_main, *args, cwd=cwd)


def record(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("whole")
    done = nplm_train(tmp, *TOY, f"paths.data_dir={tmp}", f"hydra.run.dir={tmp / 'whole'}")
    assert done.code == 0, done.err[-2000:]
    return record(tmp / "whole")


@pytest.mark.slow
@pytest.mark.parametrize("moment, n", [("train", 22), ("validation", 3), ("checkpoint", 3)],
                         ids=["inside an epoch", "during validation", "during a checkpoint write"])
def test_sigkill_at_any_moment_then_resume_gives_the_uninterrupted_numbers(tmp_path, uninterrupted, moment, n):
    """Killed in epoch 1's 7th step, in epoch 0's 3rd validation batch, or half-way through writing the
    3rd checkpoint; `resume=true` with the same fixed run folder goes on in it, to the same numbers."""
    run = tmp_path / "run"
    args = [*TOY, f"paths.data_dir={tmp_path}", f"hydra.run.dir={run}"]
    killed = runner(tmp_path, moment, n, *args)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert record(run)["status"] == "running"
    if (run / "checkpoints" / "last.ckpt").exists():  # whatever is there loads: never a torn file
        torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    resumed = nplm_train(tmp_path, *args, "resume=true")
    assert resumed.code == 0, resumed.err[-3000:]
    assert "Experiment logs directory" not in resumed.err + resumed.out  # no third-party warning
    again = record(run)
    assert again["status"] == "finished" and again["epochs"] == uninterrupted["epochs"]
    assert again["metrics"]["val/ppl_best"] == uninterrupted["metrics"]["val/ppl_best"]
    assert again["metrics"]["test/ppl"] == uninterrupted["metrics"]["test/ppl"]
    assert [r["val/ppl"] for r in again["history"]] == [r["val/ppl"] for r in uninterrupted["history"]]


@pytest.mark.slow
def test_killed_before_its_first_checkpoint_then_resume_starts_it_afresh(tmp_path, uninterrupted):
    run = tmp_path / "run"
    args = [*TOY, f"paths.data_dir={tmp_path}", f"hydra.run.dir={run}"]
    killed = runner(tmp_path, "train", 3, *args)  # in epoch 0: no checkpoint yet
    assert killed.returncode == -9 and not (run / "checkpoints" / "last.ckpt").exists()
    assert record(run)["status"] == "running"  # it says what it was from its first moment
    resumed = nplm_train(tmp_path, *args, "resume=true")
    assert resumed.code == 0, resumed.err[-3000:]
    assert "killed before its first checkpoint" in resumed.err + resumed.out
    assert record(run)["metrics"]["val/ppl_best"] == uninterrupted["metrics"]["val/ppl_best"]


@pytest.mark.slow
def test_a_sweep_with_a_killed_and_a_failed_job_redoes_only_those_two(tmp_path):
    """Four jobs (seed=0..3): seed=1 fails, seed=3 is killed in its second epoch. Run again, the two
    finished jobs are skipped (their records untouched), seed=1 runs again, seed=3 goes on from its
    checkpoint."""
    sweep = tmp_path / "sweep"
    args = ["-m", *TOY, "trainer.max_epochs=2", "seed=0,1,2,3", f"paths.data_dir={tmp_path}",
            f"hydra.sweep.dir={sweep}"]
    killed = runner(tmp_path, "train", 20, *args, job="seed=3", failing_job="seed=1")  # 3: killed in epoch 1
    assert killed.returncode == -9, killed.stderr[-2000:]
    jobs = {int(record(p)["overrides"][[o.split("=")[0] for o in record(p)["overrides"]].index("seed")]
                .split("=")[1]): p for p in sweep.iterdir() if (p / "metrics.json").exists()}
    assert sorted(jobs) == list(range(4))
    status = {seed: record(p)["status"] for seed, p in jobs.items()}
    assert status == {0: "finished", 1: "failed", 2: "finished", 3: "running"}
    stamps = {seed: (p / "metrics.json").stat().st_mtime for seed, p in jobs.items()}
    again = nplm_train(tmp_path, *args)
    assert again.code == 0, again.err[-3000:]
    assert {seed: record(p)["status"] for seed, p in jobs.items()} == {s: "finished" for s in range(4)}
    redone = sorted(seed for seed, p in jobs.items() if (p / "metrics.json").stat().st_mtime != stamps[seed])
    assert redone == [1, 3]
    log = again.out + again.err
    assert log.count("skipping") == 2 and f"continuing {jobs[3]}" in log


def test_compare_shows_a_dead_run_as_killed(tmp_path):
    from nplm.cli.compare import find_jobs

    fake_run(tmp_path / "a", "running", SAME, checkpoint=True)
    fake_run(tmp_path / "b", "running", SAME, checkpoint=False)
    fake_run(tmp_path / "c", "running", SAME, checkpoint=False, pid=os.getppid())
    assert sorted((j.path.name, j.status) for j in find_jobs([tmp_path])) == [
        ("a", "killed"), ("b", "killed"), ("c", "running")]
    assert record(tmp_path / "b")["error"] == "killed before its first checkpoint"


def test_a_finished_run_goes_on_with_changes_only_when_allowed(tmp_path):
    """resume_allow_changes=true on a finished run (e.g. a higher trainer.max_epochs): its last checkpoint."""
    done = fake_run(tmp_path / "a", "finished", ["corpus=toy"], checkpoint=True)
    assert resolve_resume(True, tmp_path / "fresh", SAME) == (tmp_path / "fresh", None)  # other overrides: afresh
    assert resolve_resume(True, tmp_path / "fresh", SAME, allow_changes=True) == (done, done / "checkpoints" / "last.ckpt")



@pytest.mark.slow
def test_a_run_stopped_by_stop_at_is_stopped_and_resume_trains_it_on(tmp_path):
    """The drivers' way to go on with a row a time limit stopped: the same overrides with a later
    `stop_at`, hydra.run.dir=<run> resume=<run> continues it in its folder. The stopped run is "stopped",
    never "finished"; the same command without resume is refused, and the run stays as it was."""
    run = tmp_path / "run"
    args = [*TOY, "trainer.max_epochs=1000", f"paths.data_dir={tmp_path}", f"hydra.run.dir={run}"]
    first = nplm_train(tmp_path, *args, f"stop_at={time.time() + 4:.0f}")  # (a toy epoch: a fraction of a second)
    assert first.code == 0, first.err[-3000:]
    cut = record(run)["history"]
    assert record(run)["status"] == "stopped" and record(run)["stopped"]["by"] == "stop_at" and 0 < len(cut) < 1000
    again = nplm_train(tmp_path, *args, f"stop_at={time.time() + 4:.0f}")
    assert again.code == 2 and again.err.strip().splitlines()[-1] == (
        f"nplm: error: hydra.run.dir={run}: holds a run that was stopped before its end (by stop_at); add "
        "resume=true to continue it, or give another hydra.run.dir")
    assert record(run)["history"] == cut
    on = nplm_train(tmp_path, *args, f"stop_at={time.time() + 4:.0f}", f"resume={run}")
    assert on.code == 0, on.err[-3000:]
    longer = record(run)["history"]
    assert len(longer) > len(cut) and [r["val/ppl"] for r in longer[:len(cut)]] == [r["val/ppl"] for r in cut]
    assert [p["status"] for p in record(run)["pieces"]] == ["stopped", "stopped"]
