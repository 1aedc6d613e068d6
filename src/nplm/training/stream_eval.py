"""Scoring a split with a model that carries its state from one block to the next (`Model.carries_state`,
model=lstm): the split as one stream, its blocks in order, one per batch, the state carried, so that each token's
NLL is that of the whole stream before it (nplm-eval, nplm-mix)."""

from __future__ import annotations

import torch

from nplm.data.blocks import Blocks
from nplm.models import data_layout


def stream_blocks(module, ids: torch.Tensor, block_size: int | None = None) -> Blocks:
    """The blocks of the stream `ids` [L] that `module` (a `LanguageModel`) scores in order (`block_size`, else
    its run's data.block_size, else the model's default), with its evaluation state reset and the module in
    evaluation mode."""
    run_block = (module.hparams.get("data") or {}).get("block_size")
    _, block_size, _ = data_layout(module.hparams["model"], block_size or run_block)
    module.eval()
    module.model.reset_state("eval")
    return Blocks(ids, module.model.context_size, block_size)
