"""Context windows as a zero-copy view of an id stream, and batches sliced from it.

For a stream w_1..w_L and context size k = n-1, window t is (w_{t-k}, ..., w_{t-1}; w_t). `unfold`
gives all of them as a `[L-k, k+1]` view that shares the stream's memory; a batch is one gather
`windows[idx]` of a slice of a seeded permutation, never a per-item collate. On a GPU the stream and
each epoch's permutation move to the device once (`Windows.to`, `BatchIndices(device=...)`), so batches
are gathered there: no host-to-device copy per batch.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable

import torch
from torch.utils.data import Dataset, Sampler


class Windows(Dataset):
    """`windows[idx]` for a 1-D LongTensor `idx` of B window indices -> (context [B, k], target [B])."""

    def __init__(self, ids: torch.Tensor, context_size: int):
        if ids.dim() != 1:
            raise ValueError("ids must be a 1-D stream")
        self.ids = ids
        self.context_size = context_size
        self.windows = ids.unfold(0, context_size + 1, 1)  # [L-k, k+1], a view of ids

    def __len__(self) -> int:
        return self.windows.shape[0]

    def to(self, device: torch.device | str) -> "Windows":
        """The same windows over a copy of the stream on `device` (self when it is already there)."""
        return self if self.ids.device == torch.device(device) else Windows(self.ids.to(device), self.context_size)

    def __getitem__(self, idx: torch.Tensor | list[torch.Tensor]):
        """One batch `idx` [B] -> (context [B, k], target [B]); a list of them (`GroupedBatches`) ->
        a list of such pairs, gathered in one go."""
        if isinstance(idx, list):
            rows = self.windows[torch.cat(idx)]  # [sum B, k+1]
            return [(batch[:, :-1], batch[:, -1]) for batch in rows.split([len(i) for i in idx])]
        batch = self.windows[idx]  # [B, k+1]
        return batch[:, :-1], batch[:, -1]  # [B, k], [B]


class BatchIndices(Sampler):
    """Yields LongTensors of window indices, `batch_size` at a time.

    Shuffled with a permutation seeded by `seed + epoch`, so an epoch's order depends only on the seed
    and the epoch: runs are reproducible and resumable. The epoch comes from `epoch_fn` when given
    (the trainer's epoch, right also after resuming from a checkpoint), else from `set_epoch`. With
    `world_size > 1`, a shuffled (training) sampler gives rank r every world_size-th batch, all ranks
    the same count (so the ranks' batches of one step are the single-process batches of consecutive
    steps); an ordered (evaluation) sampler gives each rank a contiguous share of the windows.
    """

    def __init__(self, n: int, batch_size: int, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1,
                 epoch_fn: Callable[[], int] | None = None, device: torch.device | str = "cpu"):
        """`device`: where the index batches are (the permutation is drawn on the CPU, the same for
        every device, and copied once per epoch)."""
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.device = torch.device(device)
        self.rank, self.world_size = rank, world_size
        self.epoch, self.epoch_fn = 0, epoch_fn
        self._ahead: DrawnAhead | None = None  # the next epoch's order, being drawn (`_order`)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _num_batches(self) -> int:
        return -(-self.n // self.batch_size)

    def _eval_share(self) -> torch.Tensor:
        bounds = [self.n * r // self.world_size for r in range(self.world_size + 1)]
        return torch.arange(bounds[self.rank], bounds[self.rank + 1])

    def __len__(self) -> int:
        if self.world_size == 1:
            return self._num_batches()
        if self.shuffle:
            return self._num_batches() // self.world_size
        return -(-len(self._eval_share()) // self.batch_size)

    def __iter__(self):
        if not self.shuffle:
            order = self._eval_share() if self.world_size > 1 else torch.arange(self.n)
            return iter(order.to(self.device).split(self.batch_size))
        epoch = self.epoch_fn() if self.epoch_fn is not None else self.epoch
        # the epoch's batch numbers this rank trains (every world_size-th one)
        numbers = range(self.rank, len(self) * self.world_size, self.world_size) if self.world_size > 1 \
            else range(self._num_batches())
        size = self.batch_size
        if self.n > LAZY_SHUFFLE:  # the permutation batch by batch: the first batch without waiting for all
            permutation = KeyedPermutation(self.n, torch.Generator().manual_seed(self.seed + epoch))
            return (permutation(torch.arange(i * size, min(self.n, (i + 1) * size))).to(self.device) for i in numbers)
        order = self._order(epoch)  # [n]
        # sliced batch by batch (a split into all of an epoch's views at once delays its first batch; bench
        # notes in git: experiments/bench/README.md at efe32f1, the CPU training step: an epoch's start)
        return (order[i * size: (i + 1) * size] for i in numbers)

    def _order(self, epoch: int) -> torch.Tensor:
        """The epoch's permutation of range(n) [n] on `device`, drawn on the CPU (the same on every device).
        Off the CPU (`draws_ahead`) the next epoch's is drawn meanwhile in a thread of its own (CPU work only):
        torch.randperm of Brown's million windows keeps the host busy, while a GPU would wait at the epoch's
        start (bench notes in git: experiments/bench/README.md at efe32f1, the CPU training step: an
        epoch's start)."""
        ahead, self._ahead = self._ahead, None
        order = ahead.result() if ahead is not None and ahead.epoch == epoch else None
        if order is None:  # the first epoch, one not drawn ahead (a resumed run, set_epoch), or a failed draw
            order = self._draw(epoch)
        if draws_ahead(self.device):
            self._ahead = DrawnAhead(self._draw, epoch + 1)
        # (copied from pageable memory: pinning it in the thread would allocate through CUDA, which no thread
        # may do while the training step is being captured as a CUDA graph; at an epoch's start the device's
        # queue is drained anyway)
        return order.to(self.device, non_blocking=True)

    def _draw(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + epoch))  # [n] (no CUDA call)


def draws_ahead(device: torch.device) -> bool:
    """Whether `BatchIndices` draws the next epoch's order while this one trains: where the training runs off
    the host (on a CPU the draw would take a core from the training)."""
    return device.type != "cpu"


class DrawnAhead(threading.Thread):
    """`draw(epoch)` in a thread of its own (torch releases the GIL while it draws); `result()` waits for it, None
    where it failed. Not a daemon: the interpreter waits for a draw at exit (a daemon thread inside torch then
    aborts the process)."""

    def __init__(self, draw: Callable[[int], torch.Tensor], epoch: int):
        super().__init__(name=f"nplm-order-{epoch}")
        self.draw, self.epoch, self.order = draw, epoch, None
        self.start()

    def run(self) -> None:
        try:
            self.order = self.draw(self.epoch)
        except Exception:  # noqa: BLE001 - the epoch that needs it draws again, and raises there
            self.order = None

    def result(self) -> torch.Tensor | None:
        self.join()
        return self.order


# Above this many windows an epoch's order is a `KeyedPermutation`, drawn batch by batch: torch.randperm
# of WikiText-103's 103 million windows (random writes over 826 MB) keeps a small machine's first batch
# waiting for the whole permutation; the keyed permutation costs a little per batch instead. Below it,
# torch.randperm as always.
LAZY_SHUFFLE = 1 << 24


class KeyedPermutation:
    """A pseudo-random permutation of range(n), evaluated at any positions: on b-bit integers (2^b >= n,
    b as small as possible) four rounds of x -> (a x + c) mod 2^b (a odd) then x -> x xor (x >> s), each
    a bijection, with (a, c) drawn from `generator`; positions that land outside range(n) are permuted
    again until they are inside ("cycle walking", which keeps it a bijection of range(n); 2^b < 2n, so
    about two steps). `perm(positions)` -> the windows at those positions of the epoch's order: every
    window once per epoch, as with torch.randperm, and the same order for the same seed and epoch."""

    ROUNDS = 4

    def __init__(self, n: int, generator: torch.Generator):
        self.n = n
        bits = max(1, (n - 1).bit_length())
        self.mask, self.shift = (1 << bits) - 1, (bits + 1) // 2
        draws = torch.randint(0, 1 << 31, (self.ROUNDS, 2), generator=generator).tolist()
        self.keys = [(a | 1, c & self.mask) for a, c in draws]  # x < 2^b <= 2^54, a < 2^31: no int64 overflow

    def _permute(self, x: torch.Tensor) -> torch.Tensor:
        for a, c in self.keys:
            x = (x * a + c) & self.mask
            x = x ^ (x >> self.shift)
        return x

    def __call__(self, positions: torch.Tensor) -> torch.Tensor:
        out = self._permute(positions.long())
        outside = out >= self.n
        while outside.any():  # cycle walking
            out[outside] = self._permute(out[outside])
            outside = out >= self.n
        return out


class GroupedBatches(Sampler):
    """The first `limit` batches of `batches` (an epoch of index batches), `size` at a time: lists of
    consecutive batches, the last list shorter (`nplm.training.execution`: several batches per Lightning step).
    `skip_once(n)`: the next epoch's iteration leaves out its first n batches (a run resumed inside an epoch:
    `nplm.data.resumable`); its length stays the whole epoch's, as Lightning counts the trained ones."""

    def __init__(self, batches: Sampler, size: int, limit: int | None = None):
        self.batches, self.size = batches, size
        self.limit = len(batches) if limit is None else min(limit, len(batches))
        self.skip = 0

    def __len__(self) -> int:
        return -(-self.limit // self.size)

    def skip_once(self, batches: int) -> None:
        self.skip = batches

    def __iter__(self):
        skip, self.skip = self.skip, 0
        batches = itertools.islice(iter(self.batches), skip, self.limit)  # the epoch's order, fixed now
        return iter(lambda: list(itertools.islice(batches, self.size)), [])  # groups drawn as they are needed
