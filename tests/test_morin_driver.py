"""experiments/morin2005/run.py's parallel driver: when a row counts as converged, and the first model
a learned-tree row takes from its random-tree row."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from replication import load_result

ROOT = Path(__file__).resolve().parents[1]


def driver():
    spec = importlib.util.spec_from_file_location("morin_run", ROOT / "experiments" / "morin2005" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(valid: list[float], status: str = "finished", last_epoch_s: float = 60.0,
           steps: list[int] | None = None) -> dict:
    times = [60.0] * (len(valid) - 1) + [last_epoch_s]
    history = [{"val/ppl": v, "train/epoch_time_s": t} for v, t in zip(valid, times)]
    for row, step in zip(history, steps or []):
        row["step"] = step
    return {"status": status, "history": history}


def test_a_row_has_converged_when_patience_epochs_passed_its_best():
    run = driver()
    assert run.PATIENCE == 2
    assert run.converged(record([300, 250, 240, 241, 245]))  # best at epoch 3, two worse after it
    assert not run.converged(record([300, 250, 240, 241]))  # stopped by the budget one epoch after the best
    assert not run.converged(record([300, 250, 240, 241, 245], status="running"))
    # the second epoch after the best cut short by the budget (stop_at): not early stopping, as in the
    # Bengio driver's stopped_by (one definition, replication)
    assert not run.converged(record([300, 250, 240, 241, 245], last_epoch_s=10.0))
    assert run.converged(record(list(range(run.MAX_EPOCHS, 0, -1))))  # the safety net
    # with the step column, whole epochs are counted in optimizer steps, not timed: a last epoch that
    # ran faster on a shared machine is whole; one with fewer steps was cut short
    assert run.converged(record([300, 250, 240, 241, 245], last_epoch_s=10.0, steps=[100, 200, 300, 400, 500]))
    assert not run.converged(record([300, 250, 240, 241, 245], steps=[100, 200, 300, 400, 460]))


def test_learned_rows_take_the_random_rows_model_after_boot_epochs_or_when_it_finished(tmp_path, monkeypatch):
    run = driver()
    monkeypatch.setattr(run.DRIVER, "runs", tmp_path)
    dep = tmp_path / "hierarchical-random-logistic"
    (dep / "checkpoints").mkdir(parents=True)
    assert run.bootstrap_row("hierarchical-learned-eps0.4-x2-logistic") == "hierarchical-random-logistic"
    assert run.bootstrap_row("hierarchical-learned") == "hierarchical-random"
    assert run.bootstrap_row("hierarchical-brown") is None
    csv = "epoch,val/ppl\n" + "".join(f"{e},{300 - e}\n" for e in range(run.BOOT_EPOCHS - 1))
    (dep / "metrics.csv").write_text(csv)
    torch.save({"epoch": 3}, dep / "checkpoints" / "last.ckpt")
    assert run.bootstrap_checkpoint("hierarchical-random-logistic") is None  # one epoch short
    (dep / "metrics.csv").write_text(csv + f"{run.BOOT_EPOCHS},200\n")
    snapshot = run.bootstrap_checkpoint("hierarchical-random-logistic")
    assert snapshot == tmp_path / "hierarchical-random-logistic-bootstrap.ckpt"
    assert torch.load(snapshot, weights_only=True) == {"epoch": 3}
    (dep / "metrics.json").write_text(json.dumps({"status": "finished", "best_checkpoint": "best.ckpt"}))
    assert run.bootstrap_checkpoint("hierarchical-random-logistic") == Path("best.ckpt")


def test_fix_rows_are_compared_with_the_softmax_of_the_same_recipe():
    run = driver()
    assert run.reference("hierarchical-brown-logistic-lr3e-3") == "nplm-lr3e-3"
    assert run.reference("hierarchical-brown-logistic") == "nplm"
    fixes = [r for r in run.NETWORKS if r.endswith(("-dropout0.25", "-lr3e-3")) and r.startswith("hierarchical")]
    assert fixes and all(run.reference(r) in run.NETWORKS for r in fixes)


def test_a_fix_row_without_its_softmax_partner_is_compared_with_the_base_softmax_and_says_so(tmp_path, monkeypatch):
    run = driver()
    monkeypatch.setattr(run.DRIVER, "results", tmp_path)
    for row, test in (("nplm", 140.0), ("hierarchical-brown-logistic", 168.0), ("hierarchical-brown-logistic-lr3e-3", 154.0)):
        (tmp_path / f"{row}.json").write_text(json.dumps({"valid": test + 8, "test": test}))
    best = run.targets(load_result(tmp_path, "nplm"))[3]
    assert best == ("- best single-code tree (target: within +5%): hierarchical-brown-logistic-lr3e-3 154.0, +10.0% "
                    "vs nplm 140.0 (nplm-lr3e-3, the same recipe's softmax, not run yet)")
    (tmp_path / "nplm-lr3e-3.json").write_text(json.dumps({"valid": 146.0, "test": 137.5}))
    best = run.targets(load_result(tmp_path, "nplm"))[3]
    assert best.endswith("hierarchical-brown-logistic-lr3e-3 154.0, +12.0% vs nplm-lr3e-3 137.5")
