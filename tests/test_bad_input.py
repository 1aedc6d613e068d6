"""User mistakes: one clear line naming the value and the fix, a non-zero exit, no half-written run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nplm.errors import UserError

from conftest import TOY_FAST, compose_cfg


def expect_error(tmp_path, pattern: str, *overrides: str) -> None:
    from nplm.train import train

    with pytest.raises(UserError, match=pattern) as info:
        train(compose_cfg(tmp_path, *overrides))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists(), "a failed run must not leave a half-written directory"


def text_files(tmp_path, train_text: bytes | None, valid_text: bytes = b"a b c d e f\n") -> list[str]:
    train, valid = tmp_path / "train.txt", tmp_path / "valid.txt"
    if train_text is not None:
        train.write_bytes(train_text)
    valid.write_bytes(valid_text)
    return ["corpus=text_files", f"corpus.train={train}", f"corpus.valid={valid}"]


def test_missing_corpus_file(tmp_path):
    expect_error(tmp_path, r"train.txt' does not exist; set corpus.train=", *text_files(tmp_path, None))


def test_empty_corpus_file(tmp_path):
    expect_error(tmp_path, r"train.txt' is empty", *text_files(tmp_path, b"  \n"))


def test_non_utf8_corpus_file(tmp_path):
    expect_error(tmp_path, r"is not valid utf-8: byte 0xe9 at offset 4; .*corpus.encoding=latin-1",
                 *text_files(tmp_path, b"caf \xe9 au lait\n"))


def test_corpus_shorter_than_the_context(tmp_path):
    expect_error(tmp_path, r"the train split of corpus 'text_files' has 3 tokens but model.context_size=5 needs "
                 r"at least 6", *text_files(tmp_path, b"a b\n"), "model.context_size=5")


@pytest.mark.parametrize("override,pattern", [
    ("model.context_size=0", r"model.context_size=0 must be >= 1"),
    ("model.embed_dim=0", r"model.embed_dim=0 must be >= 1"),
    ("data.batch_size=0", r"data.batch_size=0 must be >= 1"),
    ("model.hidden_dim=-3", r"model.hidden_dim=-3 must be >= 0"),
    ("optimizer.lr=0", r"optimizer.lr=0 must be > 0"),
    ("optimizer.lr=-0.1", r"optimizer.lr=-0.1 must be > 0"),
    ("+model.foo=1", r"unknown model option model.foo; valid options: "),
])
def test_bad_sizes_and_values(tmp_path, override, pattern):
    expect_error(tmp_path, pattern, *TOY_FAST, override)


def test_nan_loss_stops_and_names_the_step(tmp_path):
    expect_error(tmp_path, r"training loss became (nan|inf) between steps \d+ and \d+ \(epoch \d+\); lower the learning rate, "
                 r"e.g. optimizer.lr=1e\+29", *TOY_FAST, "optimizer=sgd", "optimizer.lr=1e30")


def test_brown_offline_without_a_local_copy(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [])
    monkeypatch.delenv("NLTK_DATA", raising=False)
    expect_error(tmp_path, r"NLTK corpus 'brown' not found .* downloads are off; set NLTK_DATA=/dir/with/corpora/"
                 r"brown.zip", "corpus=brown", f"corpus.nltk_data={tmp_path / 'empty'}", "corpus.download=false")


def cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nplm.train", f"hydra.run.dir={tmp_path / 'run'}",
                           "logger=none", *args], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "WANDB_MODE": "offline"})


def test_cli_user_error_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    result = cli(tmp_path, "corpus=toy", "model.embed_dim=-1")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("nplm: error:")]
    assert errors == ["nplm: error: model.embed_dim=-1 must be >= 1 (m, the word feature size)"]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_cli_unknown_option_is_refused_by_hydra(tmp_path):
    result = cli(tmp_path, "corpus=toy", "model.embedding=16")
    assert result.returncode != 0
    assert "Could not override 'model.embedding'" in result.stderr and "Traceback" not in result.stderr
    result = cli(tmp_path, "corpus=wikipedia")
    assert result.returncode != 0 and "Could not find 'corpus/wikipedia'" in result.stderr


def test_checkpoint_errors(tmp_path):
    from nplm.checkpoint import read_checkpoint

    with pytest.raises(UserError, match=r"does not exist; pass a <run>/checkpoints/\*.ckpt file"):
        read_checkpoint(tmp_path / "nope.ckpt")
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=r"cannot be read safely \(UnpicklingError\)"):
        read_checkpoint(tmp_path / "bad.ckpt")
