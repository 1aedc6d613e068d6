"""experiments/tokenizations/run.py: the Kneser-Ney 5-gram converted to bits per byte and per-word perplexity
with the row's own counts, the table and the verdicts from the result files alone (its README: tests/test_reports.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import experiment_driver

ROOT = Path(__file__).resolve().parents[1]


def driver():
    return experiment_driver("tokenizations")


def result(folder: Path, row: str, bpb: float, **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"row": row, "command": f"nplm-train {row}", "git_commit": "abcdef0123", "machine": "m",
              "vocab_size": 512, "epochs": 6, "best_epoch": 5, "stopped_by": "early stopping", "converged": True,
              "train_s_per_epoch": 90.0, "wall_time_s": 600, "valid_ppl": 20.0, "valid_bpb": bpb,
              "valid_word_ppl": None, "valid_tokens": 1000, "valid_oov_rate": 0.0, "kn5_valid_ppl": 25.0,
              "kn5_valid_bpb": bpb + 0.1, "kn5_valid_word_ppl": None,
              "history": [{"epoch": e, "valid_ppl": 21.0, "valid_bpb": bpb + 0.01 * (6 - e), "tokens_per_s": 5000.0,
                           "epoch_time_s": 90.0} for e in range(1, 7)]}
    (folder / f"{row}.json").write_text(json.dumps({**record, **extra}))


def test_the_kn5_is_converted_with_the_rows_own_byte_and_word_counts(monkeypatch):
    """The same tokens, so bits per byte scale with ln ppl: a KN5 of perplexity 25 beside a model of 20 with 2.0
    bits per byte and 400 per word has 2 ln 25 / ln 20 bits per byte and 400^(ln 25 / ln 20) per word."""
    import nplm.inference.mixture

    run = driver()
    history = [{"epoch": 0, "step": 9, "val/ppl": 20.0, "val/bpb": 2.0, "val/word_ppl": 400.0,
                "train/tokens_per_s": 1.0, "train/epoch_time_s": 1.0}]
    record = {"history": history, "git_commit": "abc", "machine": {"platform": "p", "cpus": 2, "torch_threads": 1},
              "wall_time_s": 5, "best_checkpoint": "x", "corpus": {"vocab_size": 70, "valid_oov_rate": 0.02},
              "metrics": {"val/ppl_best": 20.0, "test/ppl": 30.0, "test/bpb": 2.5, "test/word_ppl": 900.0}}
    scored = {"valid": {"ngram": 25.0}, "test": {"ngram": 36.0}, "tokens": {"valid": 100}}
    monkeypatch.setattr(nplm.inference.mixture, "mix", lambda *a: scored)
    got = run.row_result("brown-words", run.Row(["corpus=brown"], max_epochs=8, patience=1), record)
    ratio = math.log(25) / math.log(20)
    assert got["kn5_valid_bpb"] == pytest.approx(2.0 * ratio) and got["kn5_valid_word_ppl"] == pytest.approx(400 ** ratio)
    assert got["kn5_test_bpb"] == pytest.approx(2.5 * math.log(36) / math.log(30))
    assert (got["vocab_size"], got["valid_oov_rate"], got["epochs"]) == (70, 0.02, 1)


def test_the_table_and_verdicts_come_from_the_result_files(tmp_path):
    run = driver()
    assert "Tiny Shakespeare: no finished row yet." in run.tables(tmp_path)
    result(tmp_path, "ts-chars", 2.4, vocab_size=65)
    result(tmp_path, "ts-bpe512", 2.3)
    result(tmp_path, "ts-bpe1024", 2.2, stopped_by="time limit (0 epochs after the best)", converged=False)
    text = run.tables(tmp_path)
    assert "| Tiny Shakespeare | byte-level BPE, 512 | 512 | 0.0% | 20.000 | 2.3000 | 2.4000 |" in text
    assert "| Tiny Shakespeare | byte-level BPE, 1,024* | 512 |" in text and "| 6* / 5 |" in text
    assert ("Tiny Shakespeare: the NPLM does best on byte-level BPE, 512 (byte-level BPE, 512 2.3000, characters "
            "2.4000 valid bits per byte; finished rows only, 2 of 3); +0.180 bits per byte from nanoGPT's 2.120 "
            "(+8.5%).") in text
    assert "| characters: nanoGPT's character Transformer (published, its README) | 65 | 0.0% | 4.348 | 2.1203 |" in text
    result(tmp_path, "brown-words", 1.7, valid_oov_rate=0.0436)
    assert ("Brown: the NPLM does best on words (words 1.7000 valid bits per byte; finished rows only, 1 of 2), with "
            "4.4% of its validation tokens <unk> (a lower bound: see above).") in run.tables(tmp_path)
