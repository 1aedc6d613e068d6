"""experiments/seeds.py: a verdict from several seeds holds only beyond their spread, and says how many seeds it
rests on when it has fewer than it needs."""

from __future__ import annotations

import json

import pytest

from seeds import NEEDED, SEEDS, Spread, seed_note, seed_rows, spread, verdict


def test_a_verdict_holds_only_beyond_the_seeds_spread():
    low, high = Spread(100.0, 1.0, 3), Spread(103.0, 1.5, 3)  # a gap of 3 > 1 + 1.5
    assert verdict((low, high)) == "holds"
    assert verdict((low, Spread(102.0, 1.5, 3))) == "within noise"  # a gap of 2 < 2.5
    assert verdict((high, low)) == "does not hold"  # reversed beyond noise
    assert verdict((Spread(102.0, 1.5, 3), low)) == "within noise"  # reversed, within noise
    assert verdict((low, high), (high, Spread(104.0, 1.0, 3))) == "within noise"  # every gap must be beyond it


def test_with_fewer_seeds_the_means_decide_and_the_note_says_how_many():
    one, other = Spread(100.0, 0.0, 1), Spread(100.5, 0.0, 1)
    assert (verdict((one, other)), verdict((other, one))) == ("holds", "does not hold")
    assert seed_note(one, other) == f" (from 1 seed per row; {NEEDED} needed to tell it from noise)"
    assert seed_note(Spread(1, 0, 2), Spread(1, 0, 3)) == f" (from 2 seeds per row; {NEEDED} needed to tell it from noise)"
    assert seed_note(Spread(1, 0, NEEDED), Spread(1, 0, NEEDED)) == ""


def test_a_row_over_its_finished_seeds(tmp_path):
    def result(name, test, epochs=3, best=1):  # finished: early stopping after the best epoch
        history = [{"epoch": e, "val/ppl": 10 - e if e <= best else 10} for e in range(epochs)]
        (tmp_path / f"{name}.json").write_text(json.dumps({"test": test, "epochs": epochs, "best_epoch": best,
                                                           "history": history, "converged": True}))
    assert spread(tmp_path, "row") is None
    result("row", 10.0)
    assert spread(tmp_path, "row") == Spread(10.0, 0.0, 1)
    result(f"row-seed{SEEDS[0]}", 12.0)
    assert spread(tmp_path, "row") == Spread(11.0, pytest.approx(2 ** 0.5), 2)
    assert seed_rows("row", ["a=1"]) == {f"row-seed{s}": ["a=1", f"seed={s}"] for s in SEEDS}
