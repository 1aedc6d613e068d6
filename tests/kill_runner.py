"""nplm-train with a fault injected at a chosen moment, for tests/test_resume.py (not a test module).

    python tests/kill_runner.py MOMENT N [overrides ...]

MOMENT: `train` (SIGKILL after the N-th training step), `validation` (after the N-th validation batch
outside the sanity check), `checkpoint` (SIGKILL in the middle of writing the N-th checkpoint: half of
its bytes written to where the checkpoint writer sends them), or `none`. With NPLM_FAULT_JOB=key=value,
only the job whose overrides hold that one; with NPLM_FAIL_JOB=key=value, that job raises a
RuntimeError at its first training step.
"""

from __future__ import annotations

import io
import os
import signal
import sys

import pytorch_lightning as pl
import torch

import nplm.training.train as train_module
from nplm.cli.train import main

MOMENT, N = sys.argv[1], int(sys.argv[2])
sys.argv = ["nplm-train", *sys.argv[3:]]


def kill() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class Fault(pl.Callback):
    def __init__(self, moment: str):
        self.moment = moment
        self.train_steps = self.validation_batches = 0

    def on_train_batch_end(self, trainer, *args) -> None:
        self.train_steps += 1
        if self.moment == "fail":
            raise RuntimeError("injected failure")
        if self.moment == "train" and self.train_steps == N:
            kill()

    def on_validation_batch_end(self, trainer, *args) -> None:
        if trainer.sanity_checking:
            return
        self.validation_batches += 1
        if self.moment == "validation" and self.validation_batches == N:
            kill()


def half_written_then_killed(real_save):
    def save(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()[: len(buffer.getvalue()) // 2]
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        else:
            f.write(data)
            f.flush()
        kill()

    return save


def this_job(variable: str) -> bool:
    wanted = os.environ.get(variable)
    if not wanted:
        return variable == "NPLM_FAULT_JOB"
    from hydra.core.hydra_config import HydraConfig

    return wanted in HydraConfig.get().overrides.task


real_build_trainer = train_module.build_trainer


def build_trainer(*args, **kwargs):
    trainer = real_build_trainer(*args, **kwargs)
    if this_job("NPLM_FAIL_JOB"):
        trainer.callbacks.append(Fault("fail"))
    if not this_job("NPLM_FAULT_JOB"):
        return trainer
    trainer.callbacks.append(Fault(MOMENT))
    if MOMENT == "checkpoint":
        io_ = trainer.strategy.checkpoint_io
        real = io_.save_checkpoint
        calls = []

        def save_checkpoint(checkpoint, path, *a, **k):
            calls.append(path)
            if len(calls) == N:
                torch.save = half_written_then_killed(torch.save)
            return real(checkpoint, path, *a, **k)

        io_.save_checkpoint = save_checkpoint
    return trainer


train_module.build_trainer = build_trainer
main()
