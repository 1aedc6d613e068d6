"""Bits per byte and per-word perplexity of an evaluation (`<stage>/bpb`, `<stage>/word_ppl`; the figures
themselves: `nplm.data.text_units`), and those of the best validation (`val/bpb_best`, `val/word_ppl_best`).
They are logged only where the epoch scored every token of the split (not with trainer.limit_*_batches or
data.overfit_batches)."""

from __future__ import annotations

import math

import pytorch_lightning as pl

from nplm.data.text_units import figures
from nplm.training.perplexity import Perplexity


class TextFigures:
    """The text figures of each evaluation epoch; remembers the validation split's units for the best's."""

    def __init__(self):
        self.val_units = None  # the validation split's units, where its last epoch scored every token

    def of_epoch(self, trainer: pl.Trainer, stage: str, split: str, metric: Perplexity, ppl: float) -> dict:
        """{`<stage>/bpb`, `<stage>/word_ppl`} of an epoch of `stage` ("val", "test") on `split` ("valid",
        "test") whose perplexity `metric` gave `ppl`; {} where the split's units are unknown or not all scored."""
        units = getattr(getattr(trainer, "datamodule", None), "units", {}).get(split)  # (LMDataModule.units)
        tokens = int(trainer.strategy.reduce(metric.tokens.double(), reduce_op="sum"))
        if stage == "val":
            self.val_units = units if units is not None and tokens == units.tokens else None
        if units is None or tokens != units.tokens:
            return {}
        return {f"{stage}/{name}": value for name, value in figures(math.log(ppl) * tokens, units).items()}

    def best(self, best_val_ppl: float) -> dict[str, float]:
        """`val/bpb_best` and `val/word_ppl_best`: those of `best_val_ppl` (monotone in it: the same epoch)."""
        units = self.val_units
        if units is None or not math.isfinite(best_val_ppl):
            return {}
        return {f"val/{name}_best": v for name, v in figures(math.log(best_val_ppl) * units.tokens, units).items()}
