"""Third-party chatter, silenced where it starts; `verbose=true` shows all of it.

Each entry names one known message and the setting that removes it. Warnings from anywhere else,
including Lightning's and W&B's about the user's own setup, still show.

| message                                                   | silenced by                               |
|-----------------------------------------------------------|-------------------------------------------|
| GPU / TPU / HPU available, the litlogger tip, "fit stopped", "Restoring states" | Lightning's INFO loggers at WARNING |
| "`isinstance(treespec, LeafSpec)` is deprecated"          | that FutureWarning's exact text           |
| "smaller than the logging interval" (debug runs)          | that warning's exact text                 |
| "Checkpoint directory ... exists and is not empty" (resume) | that warning's exact text               |
| CSVLogger's "Experiment logs directory ... exists and is not empty" (resume) | that warning's exact text |
| W&B "The anonymous setting has no effect"                 | `tracking.build_loggers` (not passed on)  |
| W&B's banner and sync hints                               | `WANDB_SILENT=true`                       |
| ModelCheckpoint "could not find the monitored key" (max_steps) | `train.build_trainer`: the best checkpoint is saved after validation only |
"""

from __future__ import annotations

import logging
import os
import warnings

LIGHTNING_LOGGERS = ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric")
KNOWN_WARNINGS = [  # (exact message start, as a regular expression; category)
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
    (r"The number of training batches \(\d+\) is smaller than the logging interval", UserWarning),
    # a resumed run goes on in its own folder (a fresh one always starts in an empty folder)
    (r"Checkpoint directory .* exists and is not empty", UserWarning),
    (r"Experiment logs directory .* exists and is not empty", UserWarning),
]


def quiet(verbose: bool = False) -> None:
    """Silence the known messages above, or (`verbose=True`) show them again. Idempotent: each
    `filterwarnings` call puts its entry first and drops an identical one further down; a "default"
    entry (show once per place) put before an earlier "ignore" undoes it."""
    for pattern, category in KNOWN_WARNINGS:
        warnings.filterwarnings("default" if verbose else "ignore", message=pattern, category=category)
    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    if not verbose:
        os.environ.setdefault("WANDB_SILENT", "true")
