"""Output layers ("heads"): features [B, F] -> per-token NLL [B] and log-distribution [B, V].

Every head implements `nplm.heads.base.Head`; `build_head` picks one by its config name. Heads are
imported on first use, each from its own module.
"""

from __future__ import annotations

import importlib

from nplm.errors import UserError
from nplm.heads.base import Head

HEADS: dict[str, str] = {
    "softmax": "nplm.heads.softmax:SoftmaxHead",
    "hierarchical": "nplm.heads.hierarchical:HierarchicalHead",
    "class_based": "nplm.heads.class_based:ClassBasedHead",
    "adaptive": "nplm.heads.adaptive:AdaptiveHead",
    "importance_sampling": "nplm.heads.importance_sampling:ImportanceSamplingHead",
}


def head_class(name: str) -> type[Head]:
    if name not in HEADS:
        raise UserError(f"head={name!r} is not one of: {', '.join(HEADS)}")
    module, cls = HEADS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_head(cfg: dict, feature_dim: int, vocab_size: int, counts: list[int] | None = None, tree=None) -> Head:
    """The head named by `cfg["name"]`, with the rest of `cfg` as its options. `counts`: unigram
    counts per word id (training split); `tree`: an `nplm.trees.Tree` for tree-structured heads."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    return head_class(name).from_config(cfg, feature_dim=feature_dim, vocab_size=vocab_size, counts=counts, tree=tree)


__all__ = ["Head", "HEADS", "build_head", "head_class"]
