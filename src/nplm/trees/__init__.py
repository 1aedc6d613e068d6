"""Trees over the vocabulary (config group `tree`), built from the training split.

Each builder is a function `build(ctx, **keys) -> Tree` in a module of this package, registered by
name with the keys its yaml file may set (`register_tree`); `build_tree(cfg, ctx)` runs the one
named by `cfg["name"]` and validates the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nplm.data.vocabulary import Vocabulary
from nplm.config.registry import Registry
from nplm.trees.tree import Tree, vocab_fingerprint

TREES = Registry("tree", __name__)
register_tree = TREES.register
# What the training code asks of a tree, registered as its traits (`register_tree(name, trait=True)`):
CACHED = "cached"  # it depends only on the training ids, the vocabulary, their counts, the seed and its keys:
# kept next to the corpus's id cache and read by later runs (`nplm.training.tree_phase`)
FROM_FIRST_MODEL = "from_first_model"  # it clusters a first model's word vectors, computed by the function
# registered as this trait, `(model, training windows [N, n], V) -> [V, m]`: a training phase before the
# run's own (Mnih & Hinton 2009's learned tree)
DEFAULT_TREE = "balanced"  # the tree of a head that needs one when the config chooses none


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
    tree = TREES.get(name)(ctx, **cfg)
    tree.kind = tree.kind or name  # (a saved tree keeps the kind it was built as)
    tree.fingerprint = vocab_fingerprint(ctx.vocab.tokens)
    tree.validate()
    return tree


__all__ = ["CACHED", "DEFAULT_TREE", "FROM_FIRST_MODEL", "TREES", "Tree", "TreeContext", "build_tree", "register_tree"]
