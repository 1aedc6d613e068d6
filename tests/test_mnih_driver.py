"""experiments/mnih2009/run.py: its README tables and targets come from the result files alone, the
learned-tree rows take the random-tree row's model, and the driver runs end to end on a tiny Brown."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conftest import make_fake_brown, run_driver

ROOT = Path(__file__).resolve().parents[1]


def driver():
    spec = importlib.util.spec_from_file_location("mnih_run", ROOT / "experiments" / "mnih2009" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result(folder: Path, row: str, test: float, codes: float | None = None, kind: str = "learned", **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"row": row, "git_commit": "abcdef0123", "valid": test + 10, "test": test, "epochs": 12, "best_epoch": 10,
              "stopped_by": "early stopping", "converged": True, **extra}
    if codes is not None:
        record["tree"] = {"kind": kind, "codes_per_word": codes}
    (folder / f"{row}.json").write_text(json.dumps(record))


def test_tables_and_targets_come_from_the_result_files(tmp_path):
    run = driver()
    ours, morin = tmp_path / "ours", tmp_path / "morin"
    result(ours, "lbl", 140.0, train_us_per_example=300.0)
    result(ours, "hlbl-random", 170.0, 1.0, kind="random")
    result(ours, "hlbl-adaptive", 150.0, 1.0)
    result(ours, "hlbl-adaptive0.4-x4", 141.4, 4.4)
    result(ours, "lbl-nce", 143.0, train_us_per_example=40.0)
    (ours / "timing.json").write_text(json.dumps({"machine": "m", "git_commit": "abcdef0123", "rounds": 3,
                                                  "examples_per_s": {
        "softmax": [1000.0, 5000.0], "nce": [6000.0, 5000.0], "importance_sampling": [4000.0, 5000.0]}}))
    result(morin, "nplm", 139.5)
    result(morin, "hierarchical-random-logistic", 171.4)
    result(morin, "hierarchical-learned-logistic", 166.1)
    text = run.tables(ours, morin)
    assert "| hlbl-adaptive | learned | 1.00 | 160.0 / 150.0 | +7.1% | 12 / 10 | early stopping |" in text
    assert "| 123-131 | hierarchical-learned-logistic | 166.1 | +19.1% |" in text  # the paper's, the NPLM's row
    assert "| hlbl-balanced |  |  |  |  |  |  | 123-131 |" in text  # not run: empty cells
    assert "| nce | 153.0 / 143.0 | +2.1% | 40.0 | 6,000 | 6.0x | 5,000 |" in text
    assert ("- a learned tree at least 10% better than the random tree: hlbl-adaptive 150.0 against 170.0, "
            "11.8% better (met); under the NPLM (experiments/morin2005) the learned tree gains 3.1%") in text
    assert ("- the best multi-code tree at or below the LBL's softmax: hlbl-adaptive0.4-x4 (4.40 codes per word) "
            "141.4 against 140.0, +1.0% (missed)") in text
    assert "- NCE within 3% of the softmax's perplexity (140.0): nce 143.0, +2.1% (met)" in text
    assert "the training step alone, `--rows timing`); nce, whole runs: 7.5x" in text  # 300 / 40 us
    assert "6.0x (met" in text
    assert ("| a learned single-code tree (ADAPTIVE) against the random tree | -11.8% (150.0 / 170.0) | "
            "-3.1% (166.1 / 171.4) |") in text
    assert "| the ADAPTIVE(0.4) x4 tree against the model's own full softmax | +1.0% (141.4 / 140.0) |  |" in text
    empty = run.tables(tmp_path / "none", morin)
    assert "not measured (rows not run)" in empty and "`--rows timing` not run" in empty


def test_learned_rows_wait_for_the_random_rows_model(tmp_path, monkeypatch):
    run = driver()
    monkeypatch.setattr(run.DRIVER, "runs", tmp_path)
    assert run.ROWS["hlbl-random"].overrides == ["experiment=mnih2009/hlbl"] and run.ROWS["hlbl-random"].first is None
    learned = run.ROWS["hlbl-adaptive0.4-x2"]
    assert learned.overrides == ["experiment=mnih2009/hlbl", "tree=learned", "tree.bootstrap=random", "tree.eps=0.4",
                                 "tree.runs=2"]
    with pytest.raises(run.Wait, match=r"its first model \(hlbl-random\) has not finished"):
        learned.first()
    (tmp_path / "hlbl-random").mkdir()
    (tmp_path / "hlbl-random" / "metrics.json").write_text(json.dumps({"status": "finished",
                                                                       "best_checkpoint": "/r/best.ckpt"}))
    assert learned.first() == ["tree.bootstrap_checkpoint=/r/best.ckpt"]
    assert list(run.ROWS).index("hlbl-random") < list(run.ROWS).index("hlbl-adaptive")  # trained before them


@pytest.mark.slow
def test_the_driver_trains_its_rows_on_a_tiny_brown(tmp_path, monkeypatch, warm_children):
    """The random-tree row first, then a multi-code learned tree from its model; results carry the tree's kind
    and codes per word, epochs, best epoch and what stopped the run (going on with a row not converged:
    tests/test_replication.py)."""
    nltk_data = make_fake_brown(tmp_path)
    readme = ROOT / "experiments" / "mnih2009" / "README.md"
    before = readme.read_text() if readme.exists() else None

    def call(rows: str, epochs: int) -> dict:
        extra = (f"corpus.nltk_data={nltk_data} corpus.download=false corpus.train_size=0.8 corpus.valid_size=0.1 "
                 f"paths.data_dir={tmp_path / 'data'} model.embed_dim=8 model.context_size=2 "
                 f"trainer.max_epochs={epochs} data.batch_size=32")
        run_driver("mnih2009", monkeypatch, "--rows", rows, "--threads", "1", "--extra", extra, "--results",
                   str(tmp_path / "results"), "--runs", str(tmp_path / "runs"))
        return {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")}

    got = call("hlbl-adaptive0.4-x2,hlbl-random", 2)
    assert sorted(got) == ["hlbl-adaptive0.4-x2", "hlbl-random"]
    assert got["hlbl-random"]["tree"]["kind"] == "random"
    tree = got["hlbl-adaptive0.4-x2"]["tree"]
    assert tree["kind"] == "learned" and tree["codes_per_word"] > 1
    assert "tree.bootstrap_checkpoint=" in got["hlbl-adaptive0.4-x2"]["command"]
    for row in got.values():
        assert row["epochs"] == 2 and row["stopped_by"] == "epoch limit" and not row["converged"]
        assert row["test"] > 1 and row["train_us_per_example"] > 0
    assert (readme.read_text() if readme.exists() else None) == before  # a smoke test's results stay out of it
