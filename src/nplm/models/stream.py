"""A model that carries its state from one block of text to the next (`Model.carries_state`: model=lstm), and
every part of how nplm trains, evaluates, checkpoints and checks one, from here:

- the state: `StreamModel` (below), the base of such a model: slots "train" (training mode) and "eval"
  (evaluation mode) of the state after the last block, read as the next block's start where it fits its batch;
  `carried_state` / `restore_state` keep the "train" slot in a checkpoint written inside an epoch
  (`nplm.training.stopping`), so a resumed run goes on with the state it stopped with;
- training batches: the training split cut into `data.batch_size` parallel streams, block i of each in turn
  (`nplm.data.streams.StreamBatches`, which `nplm.data.datamodule.LMDataModule` uses for such a model, and the
  default batch size cut to the streams a short corpus holds);
- evaluation: each split read as one stream, one block per batch, the state carried (`LMDataModule`; for the
  commands, `nplm.training.stream_eval.stream_blocks`: nplm-eval, nplm-mix; prompts: `nplm.inference.prompting`);
- the training loop: the "train" slot reset at each epoch's start, the "eval" slot at each validation and test
  (`nplm.training.module.LanguageModel`'s hooks); no compiled or captured step writes it
  (`nplm.training.steps.compiled.compiles`, `nplm.training.capture`);
- what such a model refuses, before any data is read: `config_problem` (below; the schema asks it), and
  nplm-eval's `--batch-size` (`nplm.cli.evaluate`).
"""

from __future__ import annotations

import torch

from nplm.config.rules import show
from nplm.models.base import Model

TRAIN, EVAL = "train", "eval"  # the state's slots (training mode, evaluation mode)


class StreamModel(Model):
    """A `Model` whose `block_features` starts from the state the previous block left (`initial_state`) and leaves
    its own (`keep_state`): a tuple of tensors whose dimension `batch_dim` is the batch's."""

    carries_state = True
    trains_on_blocks = True
    batch_dim = 1  # (torch.nn.LSTM's h and c: [L, B, H])

    def __init__(self):
        super().__init__()
        self.carried: dict[str, tuple[torch.Tensor, ...]] = {}  # slot -> the state after its last block

    def _slot(self) -> str:
        return TRAIN if self.training else EVAL

    def reset_state(self, slot: str | None = None) -> None:
        """Forget the state of `slot` (TRAIN or EVAL; None: both)."""
        for name in (TRAIN, EVAL) if slot is None else (slot,):
            self.carried.pop(name, None)

    def initial_state(self, batch: int, device: torch.device) -> tuple[torch.Tensor, ...] | None:
        """The current slot's state where it fits a batch of `batch` rows on `device`; else None (zeros)."""
        state = self.carried.get(self._slot())
        if state is None or state[0].shape[self.batch_dim] != batch or state[0].device != device:
            return None
        return state

    def keep_state(self, state: tuple[torch.Tensor, ...]) -> None:
        """The state after a block, detached (truncated backpropagation through time), for the next block."""
        self.carried[self._slot()] = tuple(s.detach() for s in state)

    def carried_state(self, slot: str) -> tuple[torch.Tensor, ...] | None:
        """The slot's state on the CPU, for a checkpoint (None: it starts from zeros)."""
        state = self.carried.get(slot)
        return None if state is None else tuple(s.cpu() for s in state)

    def restore_state(self, slot: str, state, device: torch.device) -> None:
        """A checkpoint's state carried in `slot` again (a run resumed inside an epoch goes on from it)."""
        if state is not None:
            self.carried[slot] = tuple(s.to(device) for s in state)


def config_problem(cfg: dict, default_eval_batch: int) -> str | None:
    """What a run of a model that carries its state cannot do (a line naming the key and the fix), or None: train
    in several processes (they would split its streams), read windows (data.block_size=0), or evaluate in batches
    (data.eval_batch_size other than the default, `default_eval_batch`: each split is one stream, a block a batch)."""
    from nplm.models import MODELS, model_options

    name, _ = model_options(cfg["model"])
    cls = MODELS.get(name)
    if not cls.carries_state:
        return None
    devices = cfg["trainer"].get("devices", 1)
    count = len(devices) if isinstance(devices, (list, tuple)) else devices if isinstance(devices, int) else 1
    if devices in ("auto", -1, "-1") and cfg["trainer"].get("accelerator", "cpu") != "cpu":
        count = 2  # one process per GPU Lightning finds: several on a host with several
    if count > 1:
        return (f"trainer.devices={show(devices)}: model={name} carries its state from one batch to the next along "
                "data.batch_size parallel streams, which several processes would split"
                + ("" if isinstance(devices, int) else " (auto: one process per GPU found)") + "; use trainer.devices=1")
    if cfg["data"].get("block_size") == 0:
        return (f"data.block_size=0: model={name} trains on blocks of T tokens, carrying its state from one to the "
                f"next, and has no window mode; give data.block_size a T > 0, or null for its T = "
                f"{cls.default_block_size}")
    given = cfg["data"].get("eval_batch_size")
    if given != default_eval_batch:
        return (f"data.eval_batch_size={show(given)}: model={name} reads each evaluation split as one stream, one "
                "block per batch, so it has no evaluation batch size; leave data.eval_batch_size out")
    return None
