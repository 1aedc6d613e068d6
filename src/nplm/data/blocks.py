"""Whole blocks of consecutive tokens (`data.block_size` = T): every position of a block trained at once.

For a stream w_1..w_L and context size k, window mode predicts the L - k tokens w_{k+1}..w_L, each from
its own k previous tokens. Block b holds the ids w_{bT+1}..w_{bT+T+k}: the k tokens before the block and
its T tokens, which are the targets. Position t of the block (0-based) is predicted from ids[t : t + k],
exactly window bT + t, so a model that shares work across positions (`Model.block_features`) reads each
token's vector once per block instead of once per window that holds it.

The blocks tile the predicted tokens: ceil((L - k) / T) blocks, the last one shorter where T does not
divide L - k. Evaluation scores all of them in order (the partial block as a batch of its own), so the
same tokens as window mode, each once. Training shuffles the whole blocks with `BatchIndices` (a seeded
permutation per epoch: reproducible and resumable) and leaves the partial block out: at most T - 1 tokens
of an epoch are not trained on.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.data import Dataset, Sampler

from nplm.data.windows import BatchIndices, Windows


class Blocks(Dataset):
    """`blocks[idx]` for a LongTensor `idx` of B whole-block indices -> (ids [B, T + k], targets [B, T]);
    `blocks[b]` for an int b (the partial last block too) -> one block (ids [1, T_b + k], targets [1, T_b])."""

    def __init__(self, ids: torch.Tensor, context_size: int, block_size: int):
        if ids.dim() != 1:
            raise ValueError("ids must be a 1-D stream")
        self.ids, self.context_size, self.block_size = ids, context_size, block_size
        predicted = max(len(ids) - context_size, 0)  # the windows
        self.whole = predicted // block_size  # blocks of T targets
        self.count = -(-predicted // block_size)  # and the partial last one
        span = block_size + context_size
        self.blocks = (ids[: self.whole * block_size + context_size].unfold(0, span, block_size) if self.whole
                       else ids.new_empty(0, span))  # [whole, T + k], a view of ids

    def __len__(self) -> int:
        return self.count

    def spread_targets(self, count: int) -> torch.Tensor:
        """The targets of up to `count` whole blocks spread evenly over the split `[U, T]` (a head's calibration)."""
        picked = torch.linspace(0, self.whole - 1, min(self.whole, count)).long()  # [U]
        return self.blocks[picked, self.context_size:]

    def to(self, device: torch.device | str) -> "Blocks":
        """The same blocks over a copy of the stream on `device` (self when it is already there)."""
        if self.ids.device == torch.device(device):
            return self
        return Blocks(self.ids.to(device), self.context_size, self.block_size)

    def _split(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rows, rows[:, self.context_size:]  # [B, T + k], [B, T]

    def __getitem__(self, idx: int | torch.Tensor | list[torch.Tensor]):
        """See the class docstring; a list of index batches (`GroupedBatches`) -> a list of such pairs."""
        if isinstance(idx, list):
            rows = self.blocks[torch.cat(idx)]  # [sum B, T + k]
            return [self._split(batch) for batch in rows.split([len(i) for i in idx])]
        if isinstance(idx, int):
            start = idx * self.block_size
            return self._split(self.ids[start: start + self.block_size + self.context_size].unsqueeze(0))
        return self._split(self.blocks[idx])


class BlockBatches(Sampler):
    """Batches of `batch_size` whole-block indices (`BatchIndices` over them: shuffled per epoch for
    training, in order and shared out among ranks for evaluation); in evaluation the partial last
    block follows as the int index of a batch of its own (on the last rank)."""

    def __init__(self, blocks: Blocks, batches: BatchIndices):
        self.batches, self.whole = batches, blocks.whole
        last_rank = batches.rank == batches.world_size - 1
        self.partial = blocks.whole if blocks.count > blocks.whole and not batches.shuffle and last_rank else None

    def set_epoch(self, epoch: int) -> None:
        self.batches.set_epoch(epoch)

    def __len__(self) -> int:
        return (len(self.batches) if self.whole else 0) + (self.partial is not None)

    def __iter__(self):
        if self.whole:  # (no empty batch where there is no whole block)
            yield from self.batches
        if self.partial is not None:
            yield self.partial


def index_batches(dataset: Windows | Blocks, batch_size: int, shuffle: bool, seed: int = 0, rank: int = 0,
                  world_size: int = 1, epoch_fn: Callable[[], int] | None = None,
                  device: torch.device | str = "cpu") -> Sampler:
    """The index batches of `dataset` (`BatchIndices`' arguments): its windows, or its whole blocks and in
    evaluation the partial last one."""
    items = dataset.whole if isinstance(dataset, Blocks) else len(dataset)
    batches = BatchIndices(items, batch_size, shuffle, seed, rank, world_size, epoch_fn, device)
    return BlockBatches(dataset, batches) if isinstance(dataset, Blocks) else batches
