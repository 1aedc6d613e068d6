"""The training loader of a run that may stop inside an epoch (`nplm.training.stopping`) and go on from there.

Lightning saves a training loader's `state_dict()` with every checkpoint and, when it resumes from a checkpoint
written inside an epoch, gives it back through `load_state_dict` before the epoch's batches are drawn (its
protocol for resumable loaders). The state is the number of batches trained so far in the epoch; the loader
then leaves those out of the epoch's order (`GroupedBatches.skip_once`), so the resumed run trains the rest
of the epoch: the same batches, in the same order, as a run never stopped.
"""

from __future__ import annotations

from typing import Callable

from torch.utils.data import DataLoader

from nplm.data.windows import GroupedBatches


class ResumableLoader(DataLoader):
    """A DataLoader over `GroupedBatches` (its `sampler`) whose state is the batches trained in the current epoch,
    read from `trained()` (None: unknown, nothing is skipped on resume)."""

    def __init__(self, *args, trained: Callable[[], int | None], **kwargs):
        super().__init__(*args, **kwargs)
        self.trained = trained

    def state_dict(self) -> dict:
        return {"batches": self.trained(), "group": self.sampler.size}

    def load_state_dict(self, state: dict) -> None:
        # (the same batches per step as the checkpoint's: nplm.training.checkpoint.check_resumable_position)
        if state.get("batches"):
            self.sampler.skip_once(state["batches"])


def resumable(sampler, trained: Callable[[], int | None], **loader_args) -> DataLoader:
    """A `ResumableLoader` where `sampler` is a `GroupedBatches`, else a plain DataLoader."""
    if isinstance(sampler, GroupedBatches):
        return ResumableLoader(sampler=sampler, trained=trained, **loader_args)
    return DataLoader(sampler=sampler, **loader_args)
