"""Sweep presets, the optional sweepers/launchers (Optuna, joblib, submitit) and DDP on 2 CPU processes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import warm_python
from conftest import CliResult, run_cli
from nplm.cli.train import main as train_main

ENV = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
FAST = ["corpus=toy", "trainer.max_epochs=1", "logger=none"]


def nplm_train(cwd: Path, *args: str) -> CliResult:
    """nplm-train in this process (`run_cli`); it must succeed."""
    result = run_cli(train_main, *args, cwd=cwd)
    assert result.code == 0, result.err[-3000:]
    return result


def nplm_train_process(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """nplm-train in a process of its own: where it starts processes of its own (DDP, the launchers), forked
    from the warm interpreter (`warm_python`; the processes it starts are fresh interpreters)."""
    result = warm_python.run([sys.executable, "-m", "nplm.cli.train", *args], cwd=cwd, env=ENV, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def records(sweep: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep.glob("*/metrics.json"))]


def installed(module: str) -> bool:
    """find_spec of a dotted name raises when its parent package (hydra_plugins) is absent."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def needs(module: str):
    return pytest.mark.skipif(not installed(module), reason=f"{module} not installed (pip install -e '.[sweep]')")


def test_the_heads_preset_sweeps_every_registered_head():
    """+sweep=heads says "every output layer": a head registered later joins it, or this fails."""
    from nplm.config import CONF_DIR
    from nplm.heads import HEADS

    params = yaml.safe_load((CONF_DIR / "sweep" / "heads.yaml").read_text())["hydra"]["sweeper"]["params"]
    assert sorted(params["head"].split(",")) == HEADS.names()


@pytest.mark.slow  # six runs
def test_context_length_preset_runs_six_jobs(tmp_path):
    nplm_train(tmp_path, "-m", "+sweep=context_length", *FAST, "threads=1", f"hydra.sweep.dir={tmp_path / 's'}")
    got = sorted(int(next(o for o in r["overrides"] if o.startswith("model.context_size=")).split("=")[1])
                 for r in records(tmp_path / "s"))
    assert got == [1, 2, 3, 4, 6, 8]


@pytest.mark.slow  # four runs
@needs("hydra_plugins.hydra_optuna_sweeper")
def test_optuna_search_minimises_validation_perplexity(tmp_path):
    command = ["-m", "+sweep=optuna", *FAST, "threads=1", "hydra.sweeper.n_trials=3", f"hydra.sweep.dir={tmp_path / 's'}"]
    nplm_train(tmp_path, *command)
    best = yaml.safe_load((tmp_path / "s" / "optimization_results.yaml").read_text())["best_value"]
    jobs = records(tmp_path / "s")
    assert len(jobs) == 3 and best == pytest.approx(min(j["metrics"]["val/ppl_best"] for j in jobs))

    # An interrupted sweep, re-run: the finished trials are skipped (their results feed the sampler, so it
    # proposes the same trials again) and only the missing one runs.
    stamps = [(tmp_path / "s" / n / "metrics.json").stat().st_mtime for n in ("0", "1")]
    shutil.rmtree(tmp_path / "s" / "2")
    again = nplm_train(tmp_path, *command)
    assert (again.out + again.err).count("already finished") == 2
    assert [(tmp_path / "s" / n / "metrics.json").stat().st_mtime for n in ("0", "1")] == stamps
    redone = records(tmp_path / "s")[2]
    assert redone["status"] == "finished" and redone["overrides"] == jobs[2]["overrides"]


@pytest.mark.slow  # the launcher's worker processes
@needs("hydra_plugins.hydra_joblib_launcher")
def test_parallel_launcher_gives_each_job_its_share_of_threads(tmp_path):
    nplm_train_process(tmp_path, "-m", "hydra/launcher=parallel", *FAST, "model.context_size=2,3",
               f"hydra.sweep.dir={tmp_path / 's'}")
    jobs = records(tmp_path / "s")
    assert [j["status"] for j in jobs] == ["finished", "finished"]
    assert {j["machine"]["torch_threads"] for j in jobs} == {max(1, (os.cpu_count() or 1) // 2)}


@pytest.mark.slow  # the executor's job processes
@needs("hydra_plugins.hydra_submitit_launcher")
def test_submitit_local_executor_runs_the_sweep(tmp_path):
    nplm_train_process(tmp_path, "-m", "hydra/launcher=submitit_local", *FAST, "threads=1", "model.context_size=2",
               f"hydra.sweep.dir={tmp_path / 's'}")  # (one job: a process of its own each)
    assert [j["status"] for j in records(tmp_path / "s")] == ["finished"]


@pytest.mark.slow  # two DDP processes (the reference run in this one)
@pytest.mark.parametrize("sparse", ["false", "true"])
def test_ddp_on_two_cpu_processes_matches_one_process(tmp_path, sparse):
    """2 ranks x batch 8 == 1 process x batch 16 (the ranks' batches are consecutive single-process
    batches), also with row-sparse gradients of C (all-reduced, then lazy Adam); only rank 0 writes
    the run folder."""
    words = " ".join(f"w{i % 23}" for i in range(131))  # 131 tokens - 3 context = 128 windows = 8 x 16
    (tmp_path / "t.txt").write_text(words)
    common = ["corpus=text_files", f"corpus.train={tmp_path / 't.txt'}", f"corpus.valid={tmp_path / 't.txt'}",
              "corpus.eos=false", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=8",
              "trainer.max_epochs=3", "threads=1", "optimizer.lr=0.01",
              f"model.sparse_embeddings={sparse}"]
    nplm_train(tmp_path, *common, "data.batch_size=16", "logger=none", f"hydra.run.dir={tmp_path / 'one'}")
    ddp = nplm_train_process(tmp_path, *common, "trainer=ddp", "trainer.devices=2", "data.batch_size=8", "logger=csv",
                     f"hydra.run.dir={tmp_path / 'two'}")
    assert (ddp.stdout + ddp.stderr).count("val/ppl_best ") == 1  # the run's last line, once, not once per rank
    one, two = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert two["status"] == "finished" and len(two["history"]) == 3
    for a, b in zip(one["history"], two["history"]):
        assert b["val/ppl"] == pytest.approx(a["val/ppl"], rel=1e-4)
        assert b["train/ppl"] == pytest.approx(a["train/ppl"], rel=1e-4)
    assert len((tmp_path / "two" / "metrics.csv").read_text().splitlines()) == 4
    # Lightning's CSV log, which rank 1, starting later, used to delete under rank 0 (a crash)
    lightning_csv = (tmp_path / "two" / "csv" / "metrics.csv").read_text()
    assert lightning_csv.count("\n") >= 7 and "val/ppl" in lightning_csv.splitlines()[0]
