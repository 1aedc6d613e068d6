"""Config key `sync_debug`: on a CUDA device, any host-device sync inside a training step raises
(`torch.cuda.set_sync_debug_mode("error")`: forward, backward, the optimizer update). A sync drains the
queue of work the host has issued ahead and leaves the GPU idle while the host catches up
(experiments/bench/gpu_check.py trains with it on)."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import torch

log = logging.getLogger(__name__)


def sync_debug_applies(asked: bool, device: torch.device) -> bool:
    """Whether `sync_debug=true` (`asked`) checks anything on `device`: only a CUDA device's syncs are
    checked (nplm-train refuses the key on a CPU run; a LanguageModel in your own Trainer logs this line)."""
    if asked and device.type != "cuda":
        log.warning("sync_debug=true: no effect on a %s device (only CUDA host-device syncs are checked)",
                    device.type)
    return asked and device.type == "cuda"


@contextmanager
def sync_mode(enabled: bool, mode: str):
    """torch.cuda.set_sync_debug_mode(mode) inside the block where `enabled` (`sync_debug_applies`)."""
    if not enabled:
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)
