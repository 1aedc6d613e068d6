"""Output layers ("heads"): features [B, F] -> per-token NLL [B] and log-distribution [B, V].

Every head implements `nplm.heads.base.Head`; `build_head` picks one by its config name.
"""

from __future__ import annotations

from nplm.errors import UserError
from nplm.heads.base import Head
from nplm.heads.softmax import SoftmaxHead

HEADS: dict[str, type[Head]] = {"softmax": SoftmaxHead}


def build_head(cfg: dict, feature_dim: int, vocab_size: int, counts: list[int] | None = None) -> Head:
    """The head named by `cfg["name"]`, with the rest of `cfg` as its options."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    if name not in HEADS:
        raise UserError(f"head={name!r} is not one of: {', '.join(HEADS)}")
    return HEADS[name].from_config(cfg, feature_dim=feature_dim, vocab_size=vocab_size, counts=counts)


__all__ = ["Head", "HEADS", "SoftmaxHead", "build_head"]
