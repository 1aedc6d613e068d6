"""Checkpoints written atomically: Lightning's `TorchCheckpointIO` with the write going through
`nplm.files` (a temporary file beside the checkpoint, renamed over it when complete).

A SIGKILL in the middle of writing `last.ckpt` leaves the previous `last.ckpt` whole and loadable; a
full disk (or a folder that became read-only) leaves it too and stops the run with one line
(`WriteError`), after which `resume=true` continues from it. Passed to the Trainer as a plugin by
`nplm.training.trainer.build_trainer`.
"""

from __future__ import annotations

import io
import os
from typing import IO, Any

import torch
from pytorch_lightning.plugins.io import TorchCheckpointIO

from nplm.errors import WriteError
from nplm.files import atomic_open

KEPT = "the previous checkpoint is kept; fix this, then continue the run with resume=true"


def _write(f: IO[bytes], data: memoryview) -> None:
    """The write of a checkpoint's bytes into its temporary file (tests make it slow, to kill it)."""
    f.write(data)


class AtomicCheckpointIO(TorchCheckpointIO):
    """`torch.save` into memory, then one atomic write of the bytes (as Lightning's own `_atomic_save`
    does for remote file systems), so a failure is always an `OSError` of the write."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        try:
            with atomic_open(path, "wb") as f:
                _write(f, buffer.getbuffer())
        except WriteError as err:
            raise WriteError(f"{err}; {KEPT}") from None
