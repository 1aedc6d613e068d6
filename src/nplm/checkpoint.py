"""Loading a trained model from a Lightning checkpoint, safely (`torch.load(weights_only=True)`)."""

from __future__ import annotations

from pathlib import Path

import torch

from nplm.errors import UserError
from nplm.lit import CHECKPOINT_KEY, LanguageModel


def read_checkpoint(path: str | Path) -> dict:
    """The checkpoint's dict; plain tensors and containers only, nothing is unpickled as code."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"checkpoint {str(p)!r} does not exist; pass a <run>/checkpoints/*.ckpt file")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, corrupt, or holding pickled objects
        raise UserError(f"checkpoint {str(p)!r} cannot be read safely ({type(err).__name__}); "
                        "is it a complete nplm checkpoint?") from None
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt or "hyper_parameters" not in ckpt:
        raise UserError(f"{str(p)!r} is not an nplm checkpoint (no vocabulary or hyperparameters in it)")
    return ckpt


def load_model(path: str | Path) -> LanguageModel:
    """Rebuild the `LanguageModel` (NPLM + head + vocabulary) of a checkpoint, in eval mode."""
    ckpt = read_checkpoint(path)
    entry = ckpt[CHECKPOINT_KEY]
    module = LanguageModel(**ckpt["hyper_parameters"], vocab=entry["vocab"], tree=entry.get("tree"))
    try:
        module.load_state_dict(ckpt["state_dict"])
    except RuntimeError as err:
        first = str(err).splitlines()[0]
        raise UserError(f"checkpoint {str(path)!r} does not match its own model config ({first})") from None
    return module.eval()
