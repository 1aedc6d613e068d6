"""nplm-eval and nplm-mix read the data the checkpoint's run read, or refuse: a changed or missing corpus file
is named with the command's own flag; on the unchanged data they print what the run's record says."""

from __future__ import annotations

import json

import pytest

from conftest import TOY_FAST, compose_cfg
from nplm.cli.evaluate import evaluate
from nplm.cli.generate import generate
from nplm.errors import UserError
from nplm.inference.mixture import mix
from nplm.training.checkpoint import read_checkpoint, DATA_FILES_KEY
from nplm.training.train import train

LINES = ["the cat sat on the mat", "a dog sat on the log", "the cat saw a dog", "a mat on a log"]


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A run on three text files: (its folder, the files' folder)."""
    root = tmp_path_factory.mktemp("textrun")
    data = root / "data"
    data.mkdir()
    for i, split in enumerate(("train", "valid", "test")):
        (data / f"{split}.txt").write_text("\n".join(LINES[i:] + LINES[:i]) * 8 + "\n")
    train(compose_cfg(root, *TOY_FAST, "corpus=text_files", *(f"corpus.{s}={data / f'{s}.txt'}"
                                                              for s in ("train", "valid", "test"))))
    return root / "run", data


def test_re_evaluating_the_unchanged_data_prints_the_records_figures(text_run):
    run, _ = text_run
    record = json.loads((run / "metrics.json").read_text())
    result = evaluate(record["best_checkpoint"], "test")
    assert result["ppl"] == pytest.approx(record["metrics"]["test/ppl"], rel=1e-5)
    assert result["tokens"] == record["corpus"]["test_predicted"]
    assert read_checkpoint(record["best_checkpoint"])[DATA_FILES_KEY] == record["data_files"]


def test_a_changed_or_missing_corpus_file_is_refused_naming_the_flag(text_run, tmp_path):
    run, data = text_run
    ckpt = str(run / "checkpoints" / "last.ckpt")
    test = data / "test.txt"
    original = test.read_text()
    try:
        test.write_text(original + "the dog sat\n")
        with pytest.raises(UserError, match=rf"^{test}: changed since the checkpoint's run read it \(.*; put the file "
                                            r"back as it was, or pass --changed-data to use the data as it is now$"):
            evaluate(ckpt, "test")
        with pytest.raises(UserError, match=r"pass --changed-data"):
            mix(ckpt)
        recorded = json.loads((run / "metrics.json").read_text())["corpus"]["test_predicted"]
        assert evaluate(ckpt, "test", changed_data=True)["tokens"] == recorded + 4  # the new line: 3 words and <eos>
        test.unlink()
        with pytest.raises(UserError, match=rf"^corpus.test={test}: no such file \(.*\), a file of the checkpoint's "
                                            r"corpus; put it back, or evaluate another file with --text FILE$"):
            evaluate(ckpt, "test")
    finally:
        test.write_text(original)
    assert evaluate(ckpt, "test")["tokens"] > 0  # put back: accepted again


def test_generation_reads_no_corpus_file(text_run, tmp_path):
    """nplm-generate takes the vocabulary from the checkpoint and reads nothing of the corpus, so there is no
    data to check: with every corpus file moved away it writes the same text."""
    run, data = text_run
    ckpt = str(run / "checkpoints" / "last.ckpt")
    before = generate(ckpt, "the cat", length=8, temperature=0.7, seed=3)
    away = tmp_path / "away"
    data.rename(away)
    try:
        assert generate(ckpt, "the cat", length=8, temperature=0.7, seed=3) == before
    finally:
        away.rename(data)
    assert before.startswith("the cat ") and len(before.split()) == 10
