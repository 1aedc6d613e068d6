"""Models (config group `model`): context ids [B, k] -> features [B, F] for an output head.

Each model is a module of this package that registers itself by name:

    @register_model("nplm", keys=NPLMConfig)
    class NPLM(Model): ...

`build_model(cfg, vocab_size)` builds the one `cfg["name"]` names; no code outside this package names
a concrete model.
"""

from __future__ import annotations

import dataclasses

from nplm.config.registry import Registry
from nplm.models.base import Model, resolve_tie

MODELS = Registry("model", __name__)
register_model = MODELS.register


def model_options(cfg: dict) -> tuple[str, dict]:
    """(name, the other keys) of a `model` config group; a checkpoint from before models had names
    holds the NPLM's keys alone."""
    options = dict(cfg)
    return options.pop("name", "nplm"), options


def data_layout(cfg: dict, block_size: int | None) -> tuple[int, int | None, bool]:
    """(context size k, block size T or None, whether the model carries its state) of the model `cfg` names
    with `data.block_size` = `block_size`: k its `context_size` key (else its class's), T `block_size` (else,
    for a model that carries its state, its class's `default_block_size`)."""
    cls = MODELS.get(model_options(cfg)[0])
    context_size = cfg["context_size"] if "context_size" in cfg else cls.context_size
    return context_size, block_size or (cls.default_block_size if cls.carries_state else None), cls.carries_state


def build_model(cfg: dict, vocab_size: int, head_can_tie: bool = False) -> Model:
    """The model `cfg["name"]` names, over a vocabulary of `vocab_size` words (the values were
    checked against the schema). `head_can_tie`: whether the head has one output vector per word, what
    `tie_embeddings=auto` ties to."""
    name, options = model_options(cfg)
    cls = MODELS.get(name)
    defaults = {f.name: f.default for f in dataclasses.fields(cls.config_class)}
    if "tie_embeddings" in defaults:  # (given or not: "auto" is resolved, never left a truthy string)
        options["tie_embeddings"] = resolve_tie(options.get("tie_embeddings", defaults["tie_embeddings"]), head_can_tie)
    return cls(vocab_size, cls.config_class(**options))


__all__ = ["MODELS", "Model", "build_model", "data_layout", "model_options", "register_model"]
