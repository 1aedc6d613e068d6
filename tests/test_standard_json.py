"""Run records, nplm-eval's and nplm-mix's JSON are standard JSON: a figure that is not finite (a sampled
training perplexity that overflowed, a diverged loss) is null, never Python's `Infinity` or `NaN`."""

from __future__ import annotations

import json
import math

import torch

from nplm.tracking.records import _number, standard_json, write_json


def strict_loads(text: str):
    def refuse(constant):
        raise ValueError(f"not standard JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_a_record_with_an_overflowed_figure_is_standard_json(tmp_path):
    record = {"metrics": {"train/ppl_sampled": math.inf, "val/ppl": 7.25},
              "history": [{"train/ppl_sampled": float("inf"), "val/ppl": float("nan")}, {"val/ppl": -math.inf}]}
    write_json(tmp_path / "metrics.json", record)
    assert strict_loads((tmp_path / "metrics.json").read_text()) == {
        "metrics": {"train/ppl_sampled": None, "val/ppl": 7.25},
        "history": [{"train/ppl_sampled": None, "val/ppl": None}, {"val/ppl": None}]}
    assert strict_loads(standard_json({"ppl": (1.5, math.nan)})) == {"ppl": [1.5, None]}


def test_a_logged_tensor_that_overflowed_float32_is_recorded_as_null():
    assert _number(torch.exp(torch.tensor(100.0))) is None  # exp(100) overflows float32
    assert _number(torch.tensor(2.5)) == 2.5 and _number(None) is None
