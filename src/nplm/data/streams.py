"""Batches of parallel streams for a model that carries its state from one block to the next
(`Model.carries_state`: model=lstm), as Zaremba et al. (2014) train: their `ptb.traindataset(batch_size)`.

The split's whole blocks of T tokens (`nplm.data.blocks.Blocks`, blocks 0..W-1 in the order of the text)
are cut into B = `data.batch_size` streams of n = W // B consecutive blocks: stream s holds blocks
s n .. s n + n - 1. Batch i (i = 0..n-1) is block i of every stream, [s n + i for s = 0..B-1], so row s of
batch i + 1 continues row s of batch i exactly (with context size k = 1, block b's last id is block b + 1's
first). Never shuffled: the same order every epoch. The W - B n blocks after the last stream's end (fewer
than B) and the partial last block are not trained on, as in the paper's code (its reshape drops the
split's tail).
"""

from __future__ import annotations

import torch
from torch.utils.data import Sampler


class StreamBatches(Sampler):
    """Yields the n = `whole` // `batch_size` index batches [B] of `batch_size` parallel streams over `whole`
    consecutive blocks (module docstring), in order, on `device`."""

    def __init__(self, whole: int, batch_size: int, device: torch.device | str = "cpu"):
        self.per_stream = whole // batch_size  # n, blocks per stream
        self.starts = torch.arange(batch_size, device=device) * self.per_stream  # [B] each stream's first block

    def __len__(self) -> int:
        return self.per_stream

    def __iter__(self):
        return (self.starts + i for i in range(self.per_stream))  # [B] block i of every stream
