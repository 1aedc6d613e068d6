"""The Python API (`nplm.api`): docs/api.md's examples run as written, and on one checkpoint the API gives the
commands' numbers: perplexity (nplm-eval), generated text (nplm-generate, same seed), predictions
(nplm-predict), the comparison table (nplm-compare); bad overrides are refused with nplm-train's line."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TOY_FAST, run_cli

import nplm
from nplm.cli import compare, evaluate, generate, predict
from nplm.cli import train as train_command
from nplm.errors import UserError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "api.md"
TEXT = "the cat sat on the mat .\na dog barked at the moon .\n"


def python_blocks(markdown: str) -> list[str]:
    """The ```python fenced blocks of a Markdown page, in order."""
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def test_the_docs_examples_run(tmp_path, monkeypatch):
    """Every python block of docs/api.md, in order, in one namespace, in a temporary folder: the runs it trains
    land there, and what it shows holds (the two runs' comparison, the refused override)."""
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(DOCS.read_text())
    assert len(blocks) >= 8
    names: dict = {}
    for n, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {n}", "exec"), names)
        except Exception as err:  # which block, in the failure's message
            raise AssertionError(f"docs/api.md block {n} failed: {type(err).__name__}: {err}\n{block}") from err
    run, table = names["run"], names["table"]
    assert run.status == "finished" and run.path.is_relative_to(tmp_path / "outputs" / "default" / "runs")
    assert len(run.history) == 3 and (run.path / "train.log").read_text().count("epoch ") >= 3
    assert sorted(row["head"] or "softmax" for row in table) == ["hierarchical", "softmax"]
    assert Path("curves.png").stat().st_size > 0


def test_train_is_nplm_trains_run(toy_run, tmp_path, monkeypatch):
    """The overrides of the shared toy run, trained by `nplm.train` into `run_dir`: the same numbers, its record
    and checkpoints there, its overrides recorded as nplm-train records them."""
    monkeypatch.chdir(tmp_path)
    run = nplm.train(*TOY_FAST, "logger=none", threads=1, run_dir=tmp_path / "again")
    assert run.path == tmp_path / "again" and run.best_checkpoint.parent == tmp_path / "again" / "checkpoints"
    for key in ("val/ppl_best", "test/ppl"):
        assert run.metrics[key] == pytest.approx(toy_run.metrics[key], rel=1e-6)
    assert run.config["model"]["context_size"] == 3
    assert json.loads((run.path / "metrics.json").read_text())["overrides"] == sorted([*TOY_FAST, "logger=none"])


@pytest.mark.parametrize("overrides", [["model.context_size=2.5"], ["corpus=wikipedia"], ["foo=1"],
                                       ["head.node_dim=4"], ["corpus=toy", "-m"]])
def test_bad_overrides_are_refused_as_nplm_train_refuses_them(overrides, tmp_path, monkeypatch):
    """The same one line as nplm-train's (without its `nplm: error: `), before anything is written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as refused:
        nplm.train(*overrides)
    if overrides[-1] != "-m":
        command = run_cli(train_command.main, *overrides)
        assert command.code == 2 and command.err.strip() == f"nplm: error: {refused.value}"
    else:
        assert "one run" in str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def model(toy_run):
    return nplm.load(toy_run.best)


def test_perplexity_is_nplm_evals(model, toy_run, tmp_path):
    """A text, the same text as a file, and the test split: nplm-eval's perplexity; the per-token log
    probabilities average to its log."""
    (tmp_path / "text.txt").write_text(TEXT)
    out = tmp_path / "eval.json"
    assert run_cli(evaluate.main, toy_run.best, "--text", tmp_path / "text.txt", "--json", out).code == 0
    command = json.loads(out.read_text())
    assert model.perplexity(TEXT) == model.perplexity(file=tmp_path / "text.txt") == command["ppl"]
    assert model.evaluate(TEXT) == {**command, "source": "text"}
    scores = model.log_probs(TEXT)
    assert len(scores) == command["tokens"] and scores[0][0] == "on"
    assert math.exp(-sum(lp for _, lp in scores) / len(scores)) == pytest.approx(command["ppl"], rel=1e-9)
    assert run_cli(evaluate.main, toy_run.best, "--split", "test", "--data-dir", toy_run.data_dir, "--json", out).code == 0
    test_ppl = model.perplexity(split="test", data_dir=toy_run.data_dir)
    assert test_ppl == json.loads(out.read_text())["ppl"] == pytest.approx(toy_run.metrics["test/ppl"], rel=1e-5)
    assert nplm.load(toy_run.folder).checkpoint == Path(toy_run.best)  # a run folder: its best checkpoint


def test_generation_is_nplm_generates(model, toy_run):
    command = run_cli(generate.main, toy_run.best, "--prompt", "the cat", "--length", 15, "--seed", 7,
                      "--temperature", 0.8, "--top-k", 5)
    assert command.code == 0
    text = model.generate("the cat", tokens=15, seed=7, temperature=0.8, top_k=5)
    assert command.out == text + "\n" and len(text.split()) == 17
    assert model.generate("the cat", tokens=15, seed=8, temperature=0.8, top_k=5) != text  # the seed matters


def test_prediction_is_nplm_predicts(model, toy_run):
    command = run_cli(predict.main, toy_run.best, "the cat", "--top-k", 4)
    assert command.code == 0
    assert command.out == "".join(f"{p:.4f}\t{token!r}\n" for token, p in model.predict("the cat", k=4))
    assert len(model.predict("the cat")) == 5


def test_compare_is_nplm_compares(toy_run):
    command = run_cli(compare.main, toy_run.folder)
    table = nplm.compare(toy_run.folder)
    assert command.code == 0 and command.out == f"{table}\n"
    assert table[0]["test_ppl_mean"] == toy_run.metrics["test/ppl"] and table[0]["status"] == "finished"
    assert nplm.compare(f"{toy_run.folder.parent}/ru*") == table  # a glob
    run = nplm.Run.load(toy_run.folder)
    assert run.metrics == toy_run.record["metrics"] and str(run.best_checkpoint) == toy_run.best
    assert nplm.compare(run)[0]["val_ppl_mean"] == run.metrics["val/ppl_best"]


def test_bad_arguments_are_one_line_naming_the_key(model, tmp_path):
    refusals = [
        (lambda: nplm.load(tmp_path / "missing.ckpt"), r"^checkpoint=.*missing.ckpt: does not exist"),
        (lambda: nplm.Run.load(tmp_path), r"^run=.*: has no readable metrics.json"),
        (lambda: model.generate("the", tokens=0), r"^tokens=0: must be an integer >= 1$"),
        (lambda: model.generate("the", temperature=float("nan")), r"^temperature=nan: must be a finite number >= 0"),
        (lambda: model.predict("the", k=0), r"^k=0: must be an integer >= 1$"),
        (lambda: model.predict("the", oov="guess"), r"^oov=guess: must be one of: unk, bengio$"),
        (lambda: model.perplexity(""), r"^text='': must be a non-empty string$"),
        (lambda: model.perplexity("the"), r"^text: has \d+ tokens; the model needs at least 4$"),
        (lambda: model.perplexity(file=tmp_path / "none.txt"), r"^file=.*none.txt: does not exist$"),
        (lambda: model.perplexity(split="dev"), r"^split=dev: must be one of: train, valid, test$"),
        (lambda: nplm.compare(tmp_path / "nothing*"), r"^paths=.*nothing\*: matches no folder$"),
    ]
    for call, message in refusals:
        with pytest.raises(UserError, match=message) as refused:
            call()
        assert "\n" not in str(refused.value)


def test_import_nplm_loads_no_torch():
    """`import nplm` and reaching its API stay cheap: neither torch nor Lightning loads until a call needs it."""
    code = ("import sys, nplm; nplm.train, nplm.load, nplm.compare, nplm.Run; "
            "print(sorted(m for m in ('torch', 'pytorch_lightning', 'hydra') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        nplm.nothing  # noqa: B018
