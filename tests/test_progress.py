"""Watching a run: plain progress lines when stdout is a pipe, and no third-party noise by default."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import warm_python
from nplm.tracking.progress import _Pass, duration
from nplm.training.flops import FlopReport
from nplm.training.peak import Peak

# No WANDB_SILENT from the environment: nplm itself must keep W&B quiet.
ENV = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"} | {"WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
# toy: 117 training windows = 15 batches of 8; max_steps=10 stops inside the first epoch, before any
# validation (what made ModelCheckpoint complain); the test split is 15 batches too.
TOY_PIPED = ["corpus=toy", "threads=1", "data.batch_size=8", "data.eval_batch_size=8", "trainer.max_epochs=2",
             "+trainer.max_steps=10", "logger=wandb"]
NOISE = ["GPU available", "TPU available", "HPU available", "litlogger", "LeafSpec", "anonymous setting",
         "could not find the monitored key", "`Trainer.fit` stopped", "Restoring states"]
TRAIN_LINE = re.compile(r"\]\[nplm\.tracking\.progress\]\[INFO\] - epoch 0  batch (\d+)/15  loss \d+\.\d{3}  ppl \d+\.\d  "
                        r"[\d,]+ tokens/s  MFU \d+\.\d\d%  ETA \d+s$")
TEST_LINE = re.compile(r"\]\[nplm\.tracking\.progress\]\[INFO\] - test  batch (\d+)/15  [\d,]+ tokens/s  ETA \d+s$")


def piped_run(tmp_path: Path, name: str, *args: str, fresh: bool = False) -> str:
    """nplm-train's output through a pipe, forked from the warm interpreter (`warm_python`), or with `fresh` in a
    fresh one: what its imports print, too."""
    result = warm_python.run([sys.executable, "-m", "nplm.cli.train", *TOY_PIPED, f"paths.data_dir={tmp_path}",
                             f"hydra.run.dir={tmp_path / name}", *args], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, fresh=fresh)
    assert result.returncode == 0, result.stdout[-3000:]
    return result.stdout


def test_duration_is_short_and_readable():
    assert [duration(s) for s in (0.4, 45, 252, 3600 + 120 + 59, -3)] == ["0s", "45s", "4m12s", "1h02m", "0s"]


def test_a_training_line_shows_the_model_flop_utilisation():
    flops = FlopReport(per_step=6000, tokens_per_step=30, peak=Peak(4e6, "measured", "fp32"))  # 200 FLOPs a token
    train, val = _Pass("epoch 0", 10, training=True, flops=flops), _Pass("val", 10, training=False)
    for p in (train, val):
        p.add(batches=2, tokens=60, loss=None)
    assert train.numbers(train.start + 2.0) == "30 tokens/s  MFU 0.15%"  # 30 x 200 / 4e6
    assert val.numbers(val.start + 2.0) == "30 tokens/s"


@pytest.mark.slow
def test_piped_run_prints_timed_plain_lines_and_no_third_party_noise(tmp_path):
    # every step is "due": the format of each line; a training step is 4 batches (max_steps=10 ends in the third)
    out = piped_run(tmp_path, "a", "progress.interval=0.000001", "steps_per_execution=4", fresh=True)
    assert "\r" not in out
    train = [int(m.group(1)) for m in map(TRAIN_LINE.search, out.splitlines()) if m]
    test = [int(m.group(1)) for m in map(TEST_LINE.search, out.splitlines()) if m]
    assert train == [4, 8, 10] and test == list(range(1, 16)), out[-3000:]
    assert "test/ppl" in out.splitlines()[-1]
    assert [noise for noise in NOISE if noise in out] == [], out

    quiet = piped_run(tmp_path, "b", "progress.interval=1000")  # the default, 30 s, is longer than this run
    assert "nplm.tracking.progress" not in quiet and "epoch 0: train/ppl" in quiet  # the epoch's summary line only


@pytest.mark.slow
def test_verbose_shows_what_is_silenced(tmp_path):
    out = piped_run(tmp_path, "a", "verbose=true", "progress.interval=1000")
    assert "GPU available" in out and "litlogger" in out and "LeafSpec" in out and "`Trainer.fit` stopped" in out
