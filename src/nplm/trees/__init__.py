"""Trees over the vocabulary (config group `tree`), built from the training split.

Each builder lives in its own module and is registered here by name; `build_tree(cfg, ctx)` runs
the one named by `cfg["name"]` and validates the result.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from nplm.data.vocabulary import Vocabulary
from nplm.errors import UserError
from nplm.trees.tree import Tree, vocab_fingerprint

BUILDERS: dict[str, str] = {
    "balanced": "nplm.trees.balanced:build",
    "random": "nplm.trees.random_tree:build",
    "huffman": "nplm.trees.huffman:build",
    "brown": "nplm.trees.brown:build",
    "wordnet": "nplm.trees.wordnet:build",
    "learned": "nplm.trees.learned:build",
}


@dataclass
class TreeContext:
    """What a builder may use: the vocabulary, the training id stream, unigram counts of the training
    split, a seed, a data dir (for downloads), and learned word vectors (the `learned` tree)."""

    vocab: Vocabulary
    train_ids: torch.Tensor  # [N] int64
    counts: list[int]  # [V] training-split counts per word id
    seed: int = 0
    data_dir: str = "data_cache"
    embeddings: torch.Tensor | None = None  # [V, m]


# Options of the training procedure around a builder (the learned tree's first phase), not of the builder.
PHASE_OPTIONS = ("bootstrap", "bootstrap_epochs", "bootstrap_checkpoint")


def build_tree(cfg: dict, ctx: TreeContext) -> Tree:
    cfg = {k: v for k, v in cfg.items() if k not in PHASE_OPTIONS}
    name = cfg.pop("name", None)
    if name not in BUILDERS:
        raise UserError(f"tree={name!r} is not one of: {', '.join(BUILDERS)}")
    module, fn = BUILDERS[name].split(":")
    tree = getattr(importlib.import_module(module), fn)(ctx, **cfg)
    tree.kind = name
    tree.fingerprint = vocab_fingerprint(ctx.vocab.tokens)
    tree.validate()
    return tree


__all__ = ["BUILDERS", "Tree", "TreeContext", "build_tree"]
