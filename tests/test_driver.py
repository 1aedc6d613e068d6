"""experiments/driver.py, the loop every experiment driver runs: a row is measured or trained once, a done row is
skipped, a row that cannot start says why, and a search's rows are the jobs of its sweep config."""

from __future__ import annotations

import json

import pytest
from conftest import compose_cfg, experiment_driver

import replication
from driver import Driver, Row, Wait, sweep_job


def toy_driver(tmp_path, rows: dict[str, Row]) -> Driver:
    (tmp_path / "INTRO.md").write_text("# Toy\n\n<!-- tables -->\nNotes.\n")
    return Driver(tmp_path, rows, result=lambda name, row, record: {"row": name, "git_commit": "abc1234",
                                                                    "command": " ".join(row.overrides),
                                                                    "epochs": len(record["history"]),
                                                                    "converged": False},
                  tables=lambda: "| row |\n", results=tmp_path / "results", runs=tmp_path / "runs")


def test_a_measured_row_is_measured_once_and_again_with_rerun(tmp_path, capsys):
    calls = []
    driver = toy_driver(tmp_path, {"timing": Row(measure=lambda threads: calls.append(threads) or
                                                 {"git_commit": "abc1234", "rate": len(calls)})})
    driver.run_row("timing", threads=3, deadline=None, extra=[], rerun=False)
    driver.run_row("timing", threads=3, deadline=None, extra=[], rerun=False)
    assert calls == [3] and "timing: done, skipping (--rerun to redo it)" in capsys.readouterr().out
    driver.run_row("timing", threads=1, deadline=None, extra=[], rerun=True)
    assert json.loads((tmp_path / "results" / "timing.json").read_text())["rate"] == 2


def test_a_row_trains_unless_its_result_is_done_and_waits_for_what_it_needs(tmp_path, monkeypatch, capsys):
    history = [{"val/ppl": 9.0}, {"val/ppl": 8.0}]
    calls = []
    monkeypatch.setattr(replication, "train_to_convergence", lambda name, overrides, run_dir, *rest: calls.append(
        (name, overrides, run_dir, rest)) or {"history": history, "git_commit": "abc1234"})
    ready = []

    def first() -> list[str]:
        if not ready:
            raise Wait("its first model (a) has not finished")
        return ["tree.bootstrap_checkpoint=a.ckpt"]

    driver = toy_driver(tmp_path, {"a": Row(["x=1"], max_epochs=9, patience=2),
                                   "b": Row(["x=2"], max_epochs=9, patience=2, first=first)})
    driver.run_row("b", threads=1, deadline=None, extra=["y=3"], rerun=False)
    assert calls == [] and capsys.readouterr().out == "b: skipped, its first model (a) has not finished\n"
    ready.append(True)
    driver.run_row("b", threads=1, deadline=123.0, extra=["y=3"], rerun=False)
    assert calls == [("b", ["x=2", "tree.bootstrap_checkpoint=a.ckpt", "y=3", "logger=none"], tmp_path / "runs" / "b",
                      (1, 123.0, 2, 9, 120))]
    result = json.loads((tmp_path / "results" / "b.json").read_text())
    assert result == {"row": "b", "git_commit": "abc1234", "command": "x=2 tree.bootstrap_checkpoint=a.ckpt",
                      "epochs": 2, "converged": False}  # the overrides it trained with, without --extra's
    driver.run_row("b", threads=1, deadline=None, extra=[], rerun=False)  # not finished: goes on, nothing new
    assert len(calls) == 2 and capsys.readouterr().out.endswith("b: result up to date\n")
    (tmp_path / "results" / "b.json").write_text(json.dumps({**result, "converged": True}))
    driver.run_row("b", threads=1, deadline=None, extra=[], rerun=False)  # finished: not trained again
    assert len(calls) == 2


def test_a_row_trained_once_is_skipped_once_it_has_a_result(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(replication, "train_row", lambda name, overrides, run_dir, threads, rerun: calls.append(
        (overrides, rerun)) or {"history": [{}], "git_commit": "abc1234"})
    driver = toy_driver(tmp_path, {"once": Row(["x=1"])})
    driver.run_row("once", threads=1, deadline=None, extra=["y=2"], rerun=False)
    driver.run_row("once", threads=1, deadline=None, extra=[], rerun=False)
    driver.run_row("once", threads=1, deadline=None, extra=[], rerun=True)
    assert calls == [(["x=1", "y=2"], False), (["x=1"], True)]


def test_rows_run_in_the_order_declared_and_the_readme_takes_the_tables_at_its_marker(tmp_path, capsys):
    import argparse

    driver = toy_driver(tmp_path, {"first": Row(), "second": Row(), "third": Row()})
    assert driver.chosen(argparse.Namespace(rows="third,first")) == ["first", "third"]
    with pytest.raises(SystemExit) as stopped:
        driver.chosen(argparse.Namespace(rows="first,fourth"))
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "--rows: unknown rows ['fourth']; rows are first, second, third\n"
    driver.rows["second"].sweep = "search"  # a job of conf/sweep/search.yaml: picked by the sweep's name
    assert driver.chosen(argparse.Namespace(rows="third,search")) == ["second", "third"]
    with pytest.raises(SystemExit):
        driver.chosen(argparse.Namespace(rows="fourth"))
    assert capsys.readouterr().err.endswith("; rows are first, second, third; sweeps search\n")
    assert driver.readme() == "# Toy\n\n\n| row |\n\nNotes.\n"
    (tmp_path / "INTRO.md").write_text("# Toy\n")
    assert driver.readme() == "# Toy\n\n| row |\n"
    driver.headline = lambda: "It holds.\n"  # the verdicts, in the README's first lines
    with pytest.raises(ValueError, match="INTRO.md: no <!-- headline --> line for the headline"):
        driver.readme()
    (tmp_path / "INTRO.md").write_text("# Toy\n\n<!-- headline -->\nWhy.\n<!-- tables -->\nNotes.\n")
    assert driver.readme() == "# Toy\n\nIt holds.\nWhy.\n\n| row |\n\nNotes.\n"


def test_a_sweep_job_is_the_one_job_of_the_sweep_that_sets_the_choice():
    job = sweep_job("tinyshakespeare_gpu_w4_weight_decay", optimizer__weight_decay=0.4)
    assert job[:2] == ["experiment=sun2021/tinyshakespeare_char", "trainer=gpu"]
    assert "optimizer.weight_decay=0.4" in job and "optimizer.cosine=true" in job
    with pytest.raises(ValueError, match=r"sweep tinyshakespeare_gpu_w4_weight_decay: 0 jobs set "
                                         r"\['optimizer.weight_decay=0.5'\], not one"):
        sweep_job("tinyshakespeare_gpu_w4_weight_decay", optimizer__weight_decay=0.5)
    with pytest.raises(ValueError, match="3 jobs"):
        sweep_job("tinyshakespeare_gpu_w4_weight_decay")


def test_the_tiny_shakespeare_rows_of_a_search_compose_as_its_sweep_sets_them(tmp_path):
    run = experiment_driver("tinyshakespeare_char")
    cfg = compose_cfg(tmp_path, *run.ROWS["modern-gpu-d256-w4-dropout2-wd6-cosine12-ema-fp32"].overrides)
    assert (cfg.model.embed_dim, cfg.model.window, cfg.model.summaries, cfg.model.dropout) == (256, 4, 12, 0.2)
    assert (cfg.optimizer.name, cfg.optimizer.weight_decay, cfg.optimizer.cosine) == ("adamw", 0.6, True)
    assert (cfg.trainer.accelerator, cfg.trainer.max_epochs, cfg.callbacks.ema_decay) == ("gpu", 12, 0.9995)
    cfg = compose_cfg(tmp_path, *run.ROWS["modern-gpu-d256-w4-dropout2-cosine10"].overrides)
    assert cfg.callbacks.ema_decay is None and cfg.trainer.precision == "bf16-mixed"
    assert run.ROWS["modern-d256-w4-dropout2-wd3-cosine16-ema-block16"].what == (
        "the modern NPLM, width 256, a window of 4 and 12 averages of the 60 before it, trained on batches of 16 "
        "blocks of 16 consecutive characters, dropout 0.2, AdamW (weight decay 0.3), step annealed along a cosine "
        "over 16 epochs, validated on the weights' moving average (decay 0.9995)")


def test_a_scale_stage_is_a_measured_row_that_records_when_where_and_at_which_commit():
    import re

    run = experiment_driver("scale")
    got = run.ROWS["head-softmax"], run.measured("probe", lambda: {"wall_s": 1.5}).measure(1)
    assert got[0].measure is not None and got[0].overrides == []
    assert got[1]["name"] == "probe" and got[1]["wall_s"] == 1.5 and "CPUs, load average" in got[1]["machine"]
    assert re.fullmatch(r"[0-9a-f]{7}(-dirty)?|unknown", got[1]["commit"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", got[1]["measured_utc"])
