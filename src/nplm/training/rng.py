"""The random number generators training draws from (dropout, sampled heads), saved in each checkpoint: the
CPU's, and the training GPU's. A resumed run starts from them, so that it draws what the run it continues
would have drawn: the same numbers as one never stopped."""

from __future__ import annotations

import torch


def rng_state(device: torch.device) -> dict:
    """The generators' state for a checkpoint; `device`: the one training runs on."""
    cuda = device.type == "cuda"
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if cuda else None}


def restore_rng(state: dict | None, device: torch.device) -> None:
    """Set the generators to a checkpoint's `state` (`rng_state`); None (a fresh run, or a checkpoint written
    before the state was saved): nothing."""
    if state is None:
        return
    torch.set_rng_state(state["cpu"])
    if state.get("cuda") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
