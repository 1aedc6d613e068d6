"""The tree a run's head needs: built from the training split, and for `tree=learned` (Mnih & Hinton
2009) after a first model whose predicted word representations it clusters."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from nplm.data.datamodule import LMDataModule
from nplm.errors import UserError
from nplm.files import atomic_write
from nplm.heads import head_class
from nplm.tracking.runs import read_record
from nplm.training.checkpoint import load_model
from nplm.trees import CACHED, DEFAULT_TREE, FROM_FIRST_MODEL, TREES, Tree, TreeContext, build_tree

log = logging.getLogger(__name__)


def container(node) -> dict:
    """A config node as a plain dict, interpolations resolved."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)


def tree_for_head(cfg: DictConfig, dm: LMDataModule, embeddings: torch.Tensor | None = None) -> Tree | None:
    """The tree the head needs (built from the training split, or read from `tree.path`), or None.
    A tree given to a head that uses none is reported once and ignored."""
    tree_cfg = container(cfg.tree) if cfg.get("tree") else None
    if not head_class(cfg.head.name).uses_tree(cfg.head):
        if tree_cfg:
            log.warning("tree=%s has no effect with head=%s, which uses no tree", tree_cfg["name"], cfg.head.name)
        return None
    if tree_cfg is None:
        log.info("head=%s needs a tree and none was given: using tree=%s", cfg.head.name, DEFAULT_TREE)
        tree_cfg = {"name": DEFAULT_TREE}
    start = time.perf_counter()
    cached = _tree_cache(tree_cfg, dm, cfg.seed) if embeddings is None else None
    if cached is not None and cached.is_file():
        tree = Tree.load(cached)
        tree.check_vocabulary(dm.vocab.tokens)
        log.info("tree=%s read from %s in %.1f s", tree.kind, cached, time.perf_counter() - start)
        return tree
    ctx = TreeContext(dm.vocab, dm.ids["train"], dm.vocab.counts, cfg.seed, cfg.paths.data_dir, embeddings)
    tree = build_tree(tree_cfg, ctx)
    log.info("tree=%s built in %.1f s: %s", tree.kind, time.perf_counter() - start, tree.stats(dm.vocab.counts))
    if cached is not None:
        tree.save(cached)  # atomically
    return tree


# Part of every cached tree's key: raise it when a builder's output changes, so no cache serves an old tree.
TREE_CACHE_FORMAT = 2


def _tree_cache(tree_cfg: dict, dm: LMDataModule, seed: int) -> Path | None:
    """Where the tree of a corpus tokenised once (`dm.id_cache`, `nplm.data.id_cache`) is kept, next to
    its ids: `<cache>/trees/<name>-<hash of the options, seed and TREE_CACHE_FORMAT>.json`, so that later runs and every
    job of a sweep read it instead of building it again (a Brown tree takes minutes at WikiText-103's
    size). None for other corpora and for trees not registered as `cached`."""
    if dm.id_cache is None or not TREES.trait(tree_cfg["name"], CACHED):
        return None
    import hashlib
    import json

    key = hashlib.sha256(json.dumps({"tree": tree_cfg, "seed": seed, "format": TREE_CACHE_FORMAT}, sort_keys=True).encode()).hexdigest()[:16]
    folder = dm.id_cache.cache_dir / "trees"
    folder.mkdir(exist_ok=True)
    return folder / f"{tree_cfg['name']}-{key}.json"


def learned_tree(cfg: DictConfig, dm: LMDataModule, out_dir: Path, train_first: Callable) -> Tree:
    """`tree=learned` (Mnih & Hinton 2009), phases 1-2 in `out_dir` (<run>/bootstrap), each resumable:

    1. train a first model with `tree.bootstrap` (default random) for `tree.bootstrap_epochs` epochs
       (null: as the run itself, trainer.max_epochs with its early stopping); a killed phase goes on
       from bootstrap/checkpoints/last.ckpt, a finished one (bootstrap/metrics.json) is not redone;
       `tree.bootstrap_checkpoint` (a .ckpt of a model trained on a random tree, e.g. another run's
       best) skips this phase, so several learned trees can share one first model;
    2. average its predicted representations per word (`trees.learned.predicted_word_vectors`) ->
       bootstrap/word_vectors.pt, and cluster them into the tree -> bootstrap/learned_tree.json.

    Each artifact is written whole (a temporary file renamed), so a kill leaves it complete or absent.
    `train_first(cfg, out_dir, checkpoint or None) -> metrics` trains phase 1 (`nplm.training.train`'s
    run of one config)."""
    name = cfg.tree.name
    word_vectors = TREES.trait(name, FROM_FIRST_MODEL)  # the first model's word vectors the tree clusters
    tree_path, vectors_path = out_dir / "learned_tree.json", out_dir / "word_vectors.pt"
    given = cfg.tree.get("bootstrap_checkpoint")  # phase 1 done elsewhere: a finished run on a random tree
    if tree_path.exists():
        tree = Tree.load(tree_path)
        tree.check_vocabulary(dm.vocab.tokens)
        log.info("tree=%s: phases 1-2 done, tree read from %s", name, tree_path)
        return tree
    if not vectors_path.exists():
        record, ckpt = read_record(out_dir), out_dir / "checkpoints" / "last.ckpt"
        if given:
            best = given
        elif record and record.get("status") == "finished":
            best = record["best_checkpoint"]
        else:
            sub = OmegaConf.to_container(cfg, resolve=True)
            sub["tree"] = {"name": cfg.tree.bootstrap}
            if cfg.tree.get("bootstrap_epochs") is not None:
                sub["trainer"]["max_epochs"] = int(cfg.tree.bootstrap_epochs)
            sub["paths"]["output_dir"] = str(out_dir)
            sub["logger"] = {"csv": False, "wandb": None}
            log.info("tree=%s, phase 1: up to %d epochs with tree=%s in %s%s", name, sub["trainer"]["max_epochs"],
                     sub["tree"]["name"], out_dir, f" (resumed from {ckpt})" if ckpt.exists() else "")
            best = train_first(OmegaConf.create(sub), out_dir, ckpt if ckpt.exists() else None)["best_checkpoint"]
        if not best:  # phase 1 never validated (stopped by trainer.max_steps or a time limit first): its last weights
            if not ckpt.exists():
                raise UserError(f"tree={name}: its first model (in {out_dir}) stopped before it validated and saved no "
                                "checkpoint to learn the tree from; let it train an epoch (trainer.max_steps, "
                                "trainer.max_time, tree.bootstrap_epochs)")
            best = str(ckpt)
        first = load_model(best)
        if first.vocab.tokens != dm.vocab.tokens:
            raise UserError(f"tree.bootstrap_checkpoint={best}: that model was trained on another vocabulary "
                            f"({len(first.vocab)} words) than this corpus' ({len(dm.vocab)}); train it on this corpus")
        vectors = word_vectors(first, dm.windows["train"].windows, len(dm.vocab))
        buffer = io.BytesIO()
        torch.save(vectors, buffer)
        atomic_write(vectors_path, buffer.getbuffer())
    vectors = torch.load(vectors_path, map_location="cpu", weights_only=True)
    tree = tree_for_head(cfg, dm, vectors)
    tree.save(tree_path)  # atomically
    return tree


def tree_of_run(cfg: DictConfig, dm: LMDataModule, out_dir: Path, train_first: Callable) -> Tree | None:
    """The run's tree: learned from a first model (phases in <run>/bootstrap), built, or none."""
    learned = cfg.get("tree") and TREES.trait(cfg.tree.name, FROM_FIRST_MODEL)
    if learned and head_class(cfg.head.name).uses_tree(cfg.head):
        return learned_tree(cfg, dm, out_dir / "bootstrap", train_first)
    return tree_for_head(cfg, dm)
