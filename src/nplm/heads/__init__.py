"""Output layers ("heads", config group `head`): features [B, F] -> per-token NLL [B] and log-distribution [B, V].

Every head implements `nplm.heads.base.Head` in a module of this package and registers itself by
name with the keys its yaml file may set (`register_head`); `build_head` builds the one a config names.
"""

from __future__ import annotations

from nplm.config.registry import Registry
from nplm.heads.base import Head

HEADS = Registry("head", __name__)
register_head = HEADS.register


def head_class(name: str) -> type[Head]:
    return HEADS.get(name)


def build_head(cfg: dict, feature_dim: int, vocab_size: int, counts: list[int] | None = None, tree=None) -> Head:
    """The head named by `cfg["name"]`, with the rest of `cfg` as its options. `counts`: unigram
    counts per word id (training split); `tree`: an `nplm.trees.Tree` for tree-structured heads."""
    options = dict(cfg)
    name = options.pop("name", None)
    return head_class(name).from_config(options, feature_dim=feature_dim, vocab_size=vocab_size, counts=counts,
                                        tree=tree)


__all__ = ["HEADS", "Head", "build_head", "head_class", "register_head"]
