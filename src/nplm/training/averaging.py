"""`callbacks.ema_decay`: validate, checkpoint and test an exponential moving average of the weights.

After every optimizer step t the averaged weights follow the trained ones (Polyak & Juditsky 1992's
averaging, in its exponential form),

    theta_ema <- decay * theta_ema + (1 - decay) * theta_t,

and every validation, the best checkpoint's `state_dict` (what the test, `nplm-mix`, `nplm-generate`
and `nplm-eval` read) and the end of training use theta_ema; training itself goes on with theta_t.
Lightning's public `WeightAveraging` callback (pytorch-lightning >= 2.6) does the work: the trained
weights travel in the checkpoint beside the averaged ones, so `resume=` goes on with both.

Lightning calls the callback once per Lightning step, which is `steps_per_execution` optimizer steps
(`nplm.training.execution`). The average then takes the k steps since its last update at once,

    theta_ema <- decay^k * theta_ema + (1 - decay^k) * theta_t,

the same time constant, 1 / (1 - decay) optimizer steps, with the weights read every k steps; with
`steps_per_execution=1` it is the update above, after every step.

The update runs without reading the device: Lightning's goes through `AveragedModel.update_parameters`,
which tests its device-side count (`n_averaged == 0`, `> 0`) on the host, two syncs per Lightning step
that drain a GPU's queue of captured steps. Here the first update copies and every later one lerps, as
there, decided by the callback's own host-side count; the count on the device is still advanced. That
needs Lightning's averaged model (`WeightAveraging._average_model`, a private attribute): checked once,
and where it is not an `AveragedModel` of parameters, Lightning's own update runs.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn

from nplm.errors import UserError


def updates_directly(average: Any) -> bool:
    """Whether `average` (Lightning's `WeightAveraging._average_model`) is what the direct update expects: a
    torch `AveragedModel` averaging its parameters only, with its device-side count `n_averaged`."""
    from torch.optim.swa_utils import AveragedModel

    return (isinstance(average, AveragedModel) and not average.use_buffers
            and isinstance(getattr(average, "n_averaged", None), torch.Tensor))


def ema_callback(decay: float) -> pl.Callback:
    """The callback for `callbacks.ema_decay=decay`; a one-line error where this Lightning has none."""
    try:
        from pytorch_lightning.callbacks import WeightAveraging
    except ImportError:
        raise UserError(f"callbacks.ema_decay={decay}: needs pytorch-lightning >= 2.6 (installed: {pl.__version__}); "
                        "upgrade it, or set callbacks.ema_decay=null") from None

    class WeightEMA(WeightAveraging):
        """EMA of the parameters; buffers (a tree's integer codes) are copied, never averaged."""

        def __init__(self):
            super().__init__(use_buffers=False, multi_avg_fn=self._follow)
            self.decay = decay
            self._weight = 1 - decay  # 1 - decay^k, for the k optimizer steps since the last update
            self._updated_at = 0  # trainer.global_step at the last update; saved with the callback's state
            self._direct: bool | None = None  # whether on_train_batch_end updates without Lightning's syncs
            self._pairs: tuple | None = None  # (averaged model, its parameters, the module's, their buffers)

        def _follow(self, averaged: list[torch.Tensor], current: list[torch.Tensor], _n: torch.Tensor | None) -> None:
            """a + w (c - a) = (1 - w) a + w c for every pair: torch's EMA of a parameter list, whose one
            `_foreach_lerp_` is a kernel or two for them all on a GPU (a `lerp_` each: ~30 launches). The average
            keeps the dtype it was made in, float32, where `trainer.precision` (16-true, bf16-true, 64-true) gives
            the trained weights another: they are converted (a half-precision average would not move by 1e-6)."""
            current = [c if c.dtype == a.dtype else c.to(a.dtype) for a, c in zip(averaged, current)]
            get_ema_multi_avg_fn(1 - self._weight)(averaged, current, _n)

        def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            """After a Lightning step: Lightning's update (first a copy, then the average) without a host sync."""
            if self._direct is None:  # checked once (module docstring)
                self._direct = updates_directly(getattr(self, "_average_model", None))
            if not self._direct:
                return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            first = self._updated_at == 0  # no update yet (a resumed run restores the count)
            if trainer.global_step <= self._updated_at or not self.should_update(step_idx=trainer.global_step - 1):
                return
            average = self._average_model
            if self._pairs is None or self._pairs[0] is not average:  # the lists, once per averaged model
                self._pairs = (average, list(average.parameters()), list(pl_module.parameters()),
                               list(average.module.buffers()), list(pl_module.buffers()))
            _, averaged, current, averaged_buffers, buffers = self._pairs
            with torch.no_grad():
                if first:
                    for a, c in zip(averaged, current):
                        a.copy_(c)
                else:
                    self._follow(averaged, current, None)
                for a, c in zip(averaged_buffers, buffers):  # buffers follow, as in torch's
                    a.copy_(c)
                average.n_averaged += 1

        def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
            """After optimizer steps (`step_idx`: the last one's zero-based index), never at an epoch's
            end; sets the weight for the k steps since the last update."""
            if step_idx is None:
                return False
            self._weight = 1 - self.decay ** max(step_idx + 1 - self._updated_at, 1)
            self._updated_at = step_idx + 1
            return True

        def state_dict(self) -> dict[str, Any]:
            return {**super().state_dict(), "updated_at": self._updated_at}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            super().load_state_dict(state_dict)
            # a checkpoint of an earlier nplm has only Lightning's own count, the same number
            self._updated_at = state_dict.get("updated_at", state_dict.get("latest_update_step", 0))

        def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                               checkpoint: dict[str, Any]) -> None:
            # Testing the best checkpoint after fit: its state_dict, the averaged weights, is loaded
            # already. Lightning's hook would load the trained weights over it.
            if trainer.state.fn == "fit":
                super().on_load_checkpoint(trainer, pl_module, checkpoint)

    return WeightEMA()
