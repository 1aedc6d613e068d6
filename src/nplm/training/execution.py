"""Several training batches per Lightning step (`steps_per_execution`, as in Keras' `Model.compile`).

For a small model, Lightning's own work per training step (a dozen module hooks, six rounds of
callback hooks, the logger connector, the optimization closure) costs about as much as the model's
matmuls at batch 128 (experiments/bench/notebook_vs_trainer.py). So the training loader hands
`LanguageModel.training_step` S consecutive batches at once, and the module runs forward, backward
and an optimizer step for each of them in order (manual optimization): the same updates in the same
order as one batch per step, with Lightning's cost paid once per S batches.

Under DDP a Lightning step stays one batch (DDP's gradient reducer pairs each backward with one
forward through its wrapper). The trainer options that count batches keep meaning batches: `ExecutionPlan` turns them into
Lightning's units (groups of S batches), lowers S where an interval needs it (S divides the
validation interval), and hands the options Lightning does not support under manual optimization
(gradient clipping, accumulation) to the module, which also decides when to log: `train/loss` is
logged after the group in which each `log_every_n_steps`-th optimizer step falls, at that group's last
optimizer step on the loggers' axis (which counts optimizer steps, as with one batch per step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nplm.errors import UserError


@dataclass
class StepOptions:
    """What `LanguageModel.training_step` does per batch, in optimizer steps (= batches)."""

    log_every_n_steps: int | None = None  # None: the trainer's
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str = "norm"
    accumulate_grad_batches: int = 1
    total_steps: int | None = None  # the run's optimizer steps (T of optimizer.cosine); None: Lightning's estimate


@dataclass
class ExecutionPlan:
    batches_per_step: int  # S, batches per Lightning step
    train_batches: int  # batches per training epoch (after trainer.limit_train_batches)
    step_options: StepOptions
    trainer_options: dict  # the pytorch_lightning.Trainer arguments, in Lightning's units

    @classmethod
    def build(cls, trainer_cfg: dict, epoch_batches: int, steps_per_execution: int) -> "ExecutionPlan":
        """`trainer_cfg`: the `trainer` group (checked by nplm.config.schema); `epoch_batches`: the
        training split's batches; `steps_per_execution`: S asked for."""
        options = dict(trainer_cfg)
        limit = options.pop("limit_train_batches", None)
        if limit is None:
            batches = epoch_batches
        elif isinstance(limit, float):
            batches = int(epoch_batches * limit)  # as Lightning counts a fraction
        else:
            batches = min(int(limit), epoch_batches)
        batches = max(batches, 1)
        size = max(1, min(int(steps_per_execution), batches))
        if "ddp" in str(options.get("strategy", "")):  # DDP's reducer expects one backward per forward of its wrapper
            size = 1
        interval = options.get("val_check_interval", 1.0)
        if isinstance(interval, int) and interval > batches:  # (validation every check_val_every_n_epoch epochs)
            raise UserError(f"trainer.val_check_interval={interval}: more than the {batches} training batches of an "
                            f"epoch; use at most {batches}, or a fraction of the epoch such as 0.5")
        if interval is not None and not (isinstance(interval, float) and interval == 1.0):
            every = int(interval) if isinstance(interval, int) else max(1, int(batches * interval))
            size = math.gcd(size, every)  # validation falls between two groups
            options["val_check_interval"] = every // size
        step = StepOptions(log_every_n_steps=int(options.get("log_every_n_steps", 50)),
                           gradient_clip_val=options.pop("gradient_clip_val", None),
                           gradient_clip_algorithm=options.pop("gradient_clip_algorithm", None) or "norm",
                           accumulate_grad_batches=int(options.pop("accumulate_grad_batches", 1) or 1))
        # an optimizer step per accumulate_grad_batches batches, and one for a partial last group
        epochs, max_steps = options.get("max_epochs") or -1, options.get("max_steps") or -1
        by_epochs = int(epochs) * math.ceil(batches / step.accumulate_grad_batches) if epochs > 0 else None
        step.total_steps = min(by_epochs or int(max_steps), int(max_steps)) if max_steps > 0 else by_epochs
        return cls(size, batches, step, options)
