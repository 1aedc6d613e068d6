"""experiments/tinyshakespeare_char/run.py: its tables come from the result files alone, and the driver
trains a row and scores it beside the Kneser-Ney 5-gram, on a small text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import experiment_driver, run_driver

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "tinyshakespeare_char"


def driver():
    return experiment_driver("tinyshakespeare_char")


def result(folder: Path, row: str, valid: float, kn5: float, converged: bool = True, **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"row": row, "command": f"nplm-train experiment={row}", "git_commit": "abcdef0123", "machine": "m",
              "parameters": 1234567, "context": 64, "epochs": 9, "best_epoch": 7, "converged": converged,
              "stopped_by": "early stopping" if converged else "time limit (1 epochs after the best)",
              "train_s_per_epoch": 400.0, "wall_time_s": 3600, "valid": valid, "kn5_valid": kn5,
              "mix_valid": valid - 0.2, "mix_weight": 0.8,
              "history": [{"epoch": epoch, "train_ppl": 6.0 if epoch == 7 else 7.0,
                           "valid_ppl": valid if epoch == 7 else valid + 1, "tokens_per_s": 2500.0,
                           "epoch_time_s": 400.0} for epoch in range(1, 10)]}  # 9 epochs, the best the 7th
    (folder / f"{row}.json").write_text(json.dumps({**record, **extra}))


def test_an_epoch_cut_inside_a_row_is_said_with_the_updates_it_lost_and_leaves_it_unfinished(tmp_path):
    run = driver()
    steps = [3922] * 9
    steps[4] = 1472  # the 5th epoch cut short by a session's budget; the row resumed from its end
    result(tmp_path, "modern", 4.5, 4.76, cut_epochs=[5])
    record = json.loads((tmp_path / "modern.json").read_text())
    record["history"] = [{**h, "steps": n} for h, n in zip(record["history"], steps)]
    (tmp_path / "modern.json").write_text(json.dumps(record))
    said = ("epoch 5 cut short by a time limit (1,472 of 3,922 updates), the run resumed from its end: 0.62 of an "
            "epoch's updates fewer than its command plans")
    text = run.tables(tmp_path)
    # said under the row's own heading; the batches it never trained leave it unfinished: no target counts it
    assert text.count(said) == 1 and "- not measured (no modern NPLM row has finished)" in text
    assert run.epoch_seconds(record) == 400.0


def test_the_moving_average_target_line_counts_the_finished_rows_with_the_moving_average_only(tmp_path):
    run = driver()
    result(tmp_path, "modern", 4.40, 4.76)  # no moving average: not the recipe's default
    result(tmp_path, "modern-d256-w4-dropout2-wd3-cosine12-ema", 4.57, 4.76)
    result(tmp_path, "modern-gpu-d256-w4-dropout2-wd4-cosine12-ema-fp32", 4.50, 4.76, converged=False)
    assert ("- Target: the modern NPLM with the recipe's moving average at most 4.55, finished: 4.570 "
            "(modern-d256-w4-dropout2-wd3-cosine12-ema), missed by 0.020.") in run.tables(tmp_path)
    result(tmp_path, "modern-gpu-d256-w4-dropout2-wd3-cosine12-ema", 4.549, 4.76)
    assert "finished: 4.549 (modern-gpu-d256-w4-dropout2-wd3-cosine12-ema), met." in run.tables(tmp_path)


def test_the_tables_and_the_target_come_from_the_result_files(tmp_path):
    run = driver()
    result(tmp_path, "modern", 4.5, 4.76)
    text = run.tables(tmp_path)
    assert "| Kneser-Ney 5-gram, modified, interpolated (counted) | 4 |  | 4.760 | 1.5602 | +0.0% |" in text
    assert ("| the modern NPLM (`experiment=sun2021/tinyshakespeare_char`, no moving average) | 64 | 1,234,567 | 4.500 | 1.5041 | "
            "-5.5% | 9 / 7 | early stopping | 400 |") in text
    assert "| nanoGPT's character Transformer (published: its README) | 256 | 10.7M | 4.348 | 1.4697 | -8.7% |" in text
    assert "| the notebook's network (`experiment=tinyshakespeare_char`) |  |" in text  # not run: empty
    assert ("- The best modern NPLM row, the modern NPLM (`experiment=sun2021/tinyshakespeare_char`, no moving average): 4.500 against "
            "the KN5's 4.760: -5.5% (met); +0.0344 nats per character from nanoGPT's 1.4697") in text
    result(tmp_path, "modern", 4.9, 4.76, converged=False)
    text = run.tables(tmp_path)
    assert "- not measured (no modern NPLM row has finished)" in text  # a time limit stopped it: not judged
    result(tmp_path, "modern-regularised", 4.7, 4.76)  # a variant: the target names the best row
    text = run.tables(tmp_path)
    assert "- The best modern NPLM row, the modern NPLM, dropout 0.3, AdamW (weight decay 0.1)" in text
    assert ": 4.700 against the KN5's 4.760: -1.3% (met)" in text
    assert ("- the modern NPLM, dropout 0.3, AdamW (weight decay 0.1), step halved on a plateau: valid 4.700 (-4.1%), "
            "training 6.000 at its best epoch, 1,234,567 parameters, 400 s an epoch") in text
    assert "| 9* / 7 |" in text
    assert "not measured" in run.tables(tmp_path / "none")
    # level with the KN5 to 3 decimals: 5 digits, the gap to 3 decimals of a per cent, and the fp32 score
    result(tmp_path / "level", "modern-cosine", 4.76423, 4.76418, scored_valid=4.76408)
    assert (": 4.76423 against the KN5's 4.76418: +0.001% (level with it; its best checkpoint scored again in fp32 "
            "by nplm-mix: 4.76408, -0.002%; missed); ") in run.tables(tmp_path / "level")
    # the same row with another seed: the target is judged by the mean of the seeds
    result(tmp_path / "level", "modern-d256-w8-dropout2-cosine10", 4.75, 4.76418)
    result(tmp_path / "level", "modern-d256-w8-dropout2-cosine10-seed2", 4.78, 4.76418)
    assert ("4.75000 against the KN5's 4.76418: -0.298% (its 2 seeds from 4.75000 to 4.78000, mean 4.76500, "
            "+0.017%; missed by the mean of its 2 seeds); ") in run.tables(tmp_path / "level")
    result(tmp_path / "level", "modern-d256-w8-dropout2-cosine10-seed2", 4.76, 4.76418)
    assert ("4.750 against the KN5's 4.764: -0.3% (its 2 seeds from 4.750 to 4.760, mean 4.755, -0.2%; met by the "
            "mean of its 2 seeds); ") in run.tables(tmp_path / "level")
    # a seed stopped by a time limit, before its best, stays out of the mean
    result(tmp_path / "level", "modern-d256-w8-dropout2-cosine10-seed2", 4.9, 4.76418, converged=False)
    assert "4.750 against the KN5's 4.764: -0.3% (1 more seed still training, left out; met); " in (
        run.tables(tmp_path / "level"))


@pytest.mark.slow
def test_the_driver_trains_and_scores_beside_kn5(tmp_path, monkeypatch, warm_children):
    text = tmp_path / "input.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 60)
    readme_before = (EXPERIMENT / "README.md").read_text()

    def call(epochs: int) -> dict:  # (going on with a row not converged: tests/test_replication.py)
        extra = (f"corpus.path={text} paths.data_dir={tmp_path / 'data'} model.context_size=8 model.window=4 "
                 f"model.summaries=1 model.embed_dim=8 model.hidden_dim=16 model.num_layers=1 "
                 f"trainer.max_epochs={epochs} data.batch_size=64")
        monkeypatch.setenv("NPLM_DATA_DIR", str(tmp_path / "data"))
        run_driver("tinyshakespeare_char", monkeypatch, "--rows", "modern", "--threads", "1", "--extra", extra,
                   "--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs"))
        return json.loads((tmp_path / "results" / "modern.json").read_text())

    got = call(2)
    assert got["epochs"] == 2 and got["stopped_by"] == "epoch limit" and not got["converged"]
    assert 1 < got["kn5_valid"] < 65 and 1 < got["valid"] < 65 and 0 <= got["mix_weight"] <= 1
    assert abs(got["scored_valid"] - got["valid"]) < 1e-3 * got["valid"]  # nplm-mix scores what training validated
    assert got["context"] == 8 and got["parameters"] > 0 and len(got["history"]) == 2
    assert (EXPERIMENT / "README.md").read_text() == readme_before  # a smoke test's results stay out of it


def test_an_unfinished_row_is_shown_marked_and_left_out_of_the_target(tmp_path):
    run = driver()
    result(tmp_path, "modern-d256-w8-dropout2-cosine10", 4.70, 4.76)
    cut = [{"epoch": e, "train_ppl": 4.0, "valid_ppl": 4.60 + (7 - e) / 100, "tokens_per_s": 2500.0,
            "epoch_time_s": 40.0 if e == 7 else 550.0} for e in range(1, 8)]  # the 7th epoch cut after 40 s
    result(tmp_path, "modern-d256-w4-dropout2-cosine10-ema", 4.60, 4.76, converged=False, history=cut, epochs=7,
           git_commit="85e3451648309b7acede37c66dbe752a7b1e3640-dirty")
    text = run.tables(tmp_path)
    assert ("decay 0.9995)*† | 64 | 1,234,567 | 4.600 | 1.5261 | -3.4% | 7* / 7 | time limit (1 epochs after the best) "
            "| 550 |") in text  # the cut epoch not averaged in: (6 x 550 + 40) / 7 would be 477
    assert "over 10 epochs, bf16: 4.700 against the KN5's 4.760: -1.3% (met)" in text  # the finished row judged
    assert ("- Not counted, not finished (time limit (1 epochs after the best) after 7 epochs): the modern NPLM, width "
            "256, a window of 4 and 12 averages") in text
    assert "weights' moving average (decay 0.9995)†, valid 4.600 (-3.4%)." in text  # its commit is dirty
    assert text.endswith("\n† trained or measured from uncommitted code (`85e3451-dirty`): no commit holds exactly "
                         "the code behind the figure; run the row again from a clean checkout to replace it.\n")


def test_the_held_out_rows_have_a_table_of_their_own_with_their_test_figures(tmp_path):
    """A row trained on the held-out split is judged on its test characters against the KN5 of the same split, in
    a table apart from the notebook split's (its validation characters differ) and out of that split's target."""
    run = driver()
    row = "heldout-d256-l6-w3-dropout2-wd3-cosine12-ema"
    result(tmp_path, row, 4.3, 4.59, test=5.2, test_bpb=2.3789, kn5_test=5.63, mix_test=5.1)
    text = run.tables(tmp_path)
    assert (" trained on the first 80% and tested on the held-out last 10% | 4.300 | 5.200 | 2.3789 | -7.6% | "
            "4.590 / 5.630 | 5.100 | 9 / 7 |") in text
    assert "- not measured (no modern NPLM row has finished)" in text  # not a row of the notebook's split
    assert "| Kneser-Ney 5-gram, modified, interpolated (counted) |" not in text  # no KN5 of the notebook's split yet
    assert ("held-out last 10%: valid -6.32% against the KN5 of the same split, test -7.64% (5.2000 against 5.6300); "
            "mixed with it, test -9.41%.") in text
    assert run.report.heldout_headline(json.loads((tmp_path / f"{row}.json").read_text())) == "5.200 (KN5 5.630)"
