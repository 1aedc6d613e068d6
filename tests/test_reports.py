"""Every experiment README that a driver writes is what `--report-only` writes from the committed result
files: no table depends on the git-ignored outputs/ or on a figure typed into the README."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def driver(name: str):
    spec = importlib.util.spec_from_file_location(f"driver_{name}", EXPERIMENTS / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# every experiment driver: its folder has a run.py and the INTRO.md its README is written below
DRIVERS = sorted(p.parent.name for p in EXPERIMENTS.glob("*/run.py") if (p.parent / "INTRO.md").exists())


@pytest.mark.parametrize("name", DRIVERS)
def test_the_readme_is_written_from_the_committed_results_only(name):
    """The README `python experiments/<name>/run.py --report-only` writes is the committed one."""
    assert driver(name).DRIVER.readme() == (EXPERIMENTS / name / "README.md").read_text(), (
        f"experiments/{name}/README.md differs from its results/: python experiments/{name}/run.py --report-only")


def test_heads_trees_rows_come_from_result_files(tmp_path, monkeypatch):
    run = driver("heads_trees")
    monkeypatch.setattr(run.DRIVER, "results", tmp_path)  # no result files: no rows, whatever outputs/ holds
    assert run.tables().count("\n| ") == 0  # the header alone
    (tmp_path / "adaptive.json").write_text((EXPERIMENTS / "heads_trees" / "results" / "adaptive.json").read_text())
    table = run.tables()
    assert "| adaptive† | 401.3 | 377.6 | 2 | 38 |  |" in table  # recovered from a table: its commit unrecorded
    assert table.endswith("\n† trained or measured from an unrecorded commit: no commit holds exactly the code behind "
                          "the figure; run the row again from a clean checkout to replace it.\n")


@pytest.mark.slow
def test_heads_trees_writes_a_finished_variant_to_its_result_file(tmp_path, monkeypatch):
    run = driver("heads_trees")
    toy = ["corpus=toy", "model.context_size=3", "model.embed_dim=8", "model.hidden_dim=16", "data.batch_size=32",
           "logger=none", f"paths.data_dir={tmp_path / 'data'}"]
    monkeypatch.setattr(run, "COMMON", toy)
    monkeypatch.setattr(run.DRIVER, "rows", run.rows(epochs=1))
    monkeypatch.setattr(run.DRIVER, "results", tmp_path / "results")
    monkeypatch.setattr(run.DRIVER, "runs", tmp_path / "runs")
    monkeypatch.setenv("NPLM_ALLOW_DIRTY", "1")  # the tests run on uncommitted code too
    run.DRIVER.run_row("hierarchical-huffman", threads=1, deadline=None, extra=[], rerun=False)
    result = run.load_result(tmp_path / "results", "hierarchical-huffman")
    assert result["epochs"] == 1 and result["tree"]["kind"] == "huffman" and result["git_commit"]
    assert result["command"].startswith("nplm-train corpus=toy") and "tree=huffman" in result["command"]
    row = f"| hierarchical-huffman{run.provenance_mark(result)} | {result['valid']:.1f} | {result['test']:.1f} | 1 |"
    assert row in run.tables()
    assert result["driver_command"] == "python experiments/heads_trees/run.py --epochs 1 --rows hierarchical-huffman"
    run.DRIVER.run_row("hierarchical-huffman", threads=1, deadline=None, extra=[], rerun=False)  # done: skipped
    assert run.load_result(tmp_path / "results", "hierarchical-huffman") == result
