"""Optimizers (config group `optimizer`): SGD with Bengio et al.'s schedule, Adam, AdamW.

Bengio et al. (2003), section 4: stochastic gradient ascent with learning rate
eps_t = eps_0 / (1 + r t), t the number of parameter updates, and weight decay on the weights and the
word features C but not on the biases. The other schedules: the step multiplied by `plateau_factor`
after an epoch with no better val/ppl, or (`cosine=true`) annealed along a half cosine,
eps_t = eps_0 (1 + cos(pi t / T)) / 2 with T the run's updates (Loshchilov & Hutter 2017, SGDR,
without restarts). `warmup_steps` W > 0 puts a linear warm-up first, eps_t = eps_0 (t + 1) / W for
t < W, and starts the step-based schedule after it: the cosine then runs over the T - W updates left
and the inverse-time decay counts t - W (Sun & Iyyer 2021 train their WikiText-103 NPLM with 4,000
warm-up steps, then a cosine to 0 over 200,000). `epoch_decay` d < 1 with `epoch_decay_after` N: the first N
epochs train at eps_0, every later one at d times the one before, eps_e = eps_0 d^max(0, e + 1 - N) for
epochs e = 0, 1, ... (Zaremba et al. 2014's main.lua: d = 1/2 after N = 5 epochs for their small LSTM). `weight_decay`
here is torch's: a gradient term wd * theta, i.e. the penalty (wd / 2) ||theta||^2.

Each optimizer is a function `make(param_groups, lr=..., fused=..., **its keys) -> torch.optim.Optimizer`
in a module of this package, registered by name with its own keys (`register_optimizer`); the keys
every optimizer has (the step size and its schedule) are the registry's common keys, applied here.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from nplm.config.registry import Registry
from nplm.config.rules import Bool, Check, Float, Int


def _one_schedule(o: dict) -> str | None:
    if (o.get("lr_decay") or 0) > 0 and (o.get("plateau_factor") or 1) < 1:
        return "1 when optimizer.lr_decay > 0 (two schedules; set one of them)"
    return None


def _cosine_alone(o: dict) -> str | None:
    if o.get("cosine") and ((o.get("lr_decay") or 0) > 0 or (o.get("plateau_factor") or 1) < 1):
        return "false when optimizer.lr_decay > 0 or optimizer.plateau_factor < 1 (two schedules; set one of them)"
    return None


def _epoch_decay_alone(o: dict) -> str | None:
    others = [setting for setting, on in (("lr_decay > 0", (o.get("lr_decay") or 0) > 0),
                                          ("plateau_factor < 1", (o.get("plateau_factor") or 1) < 1),
                                          ("cosine=true", bool(o.get("cosine"))),
                                          ("warmup_steps > 0", (o.get("warmup_steps") or 0) > 0)) if on]
    if (o.get("epoch_decay") or 1) < 1 and others:
        return f"1 when optimizer.{others[0]} (two schedules; set one of them)"
    return None


def _warmup_alone(o: dict) -> str | None:
    if (o.get("warmup_steps") or 0) > 0 and (o.get("plateau_factor") or 1) < 1:
        return "0 when optimizer.plateau_factor < 1 (the plateau schedule works per epoch; warm-up per update)"
    return None


OPTIMIZERS = Registry("optimizer", __name__, common={
    "lr": Float(gt=0, required=True, doc="eps_0, the step size"),
    "weight_decay": Float(ge=0, doc="on weights and C, never on biases"),
    "lr_decay": Float(ge=0, doc="r in eps_t = eps_0 / (1 + r t), t counted in updates"),
    "plateau_factor": Float(gt=0, le=1, doc="< 1: multiply the step by this after an epoch with no better val/ppl"),
    "cosine": Bool(doc="anneal the step from lr to 0 along a half cosine over the run's updates"),
    "warmup_steps": Int(0, doc="W: raise the step linearly from lr/W to lr over the first W updates"),
    "epoch_decay": Float(gt=0, le=1, doc="< 1: multiply the step by this after every epoch past the first "
                                           "epoch_decay_after ones (1: off)"),
    "epoch_decay_after": Int(0, doc="N: the epochs trained at lr before epoch_decay starts"),
    "fused": Bool(doc="one fused update kernel (CPU and CUDA)"),
}, checks=(Check("plateau_factor", _one_schedule), Check("cosine", _cosine_alone),
                                 Check("warmup_steps", _warmup_alone), Check("epoch_decay", _epoch_decay_alone)))
register_optimizer = OPTIMIZERS.register
SCHEDULE_KEYS = ("lr_decay", "plateau_factor", "cosine", "warmup_steps", "epoch_decay", "epoch_decay_after",
                 "weight_decay")  # applied here, not by the optimizer's function


def param_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Weights and embeddings (>= 2-D) decay; biases (1-D) do not."""
    decay = [p for p in module.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in module.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class InverseTimeDecay:
    """eps_t / eps_0 = 1 / (1 + r t); a class (not a lambda) so the scheduler state is plain data."""

    def __init__(self, rate: float):
        self.rate = rate

    def __call__(self, step: int) -> float:
        return 1.0 / (1.0 + self.rate * step)


class CosineDecay:
    """eps_t / eps_0 = (1 + cos(pi min(t, T) / T)) / 2 over T updates; plain data like InverseTimeDecay."""

    def __init__(self, total_steps: int):
        self.total_steps = max(int(total_steps), 1)

    def __call__(self, step: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(step, self.total_steps) / self.total_steps))


class EpochDecay:
    """eps_e / eps_0 = d^max(0, e + 1 - N) for epochs e = 0, 1, ...: N epochs at eps_0, then d times the last
    step each epoch (a per-epoch LambdaLR, stepped at each epoch's end); plain data like InverseTimeDecay."""

    def __init__(self, factor: float, after: int):
        self.factor, self.after = float(factor), int(after)

    def __call__(self, epoch: int) -> float:
        return self.factor ** max(0, epoch + 1 - self.after)


class WarmUp:
    """eps_t / eps_0 = (t + 1) / W for the first W updates, then the cosine over `cosine_steps` updates
    (when > 0) or the inverse-time decay at `rate`, counted from the warm-up's end. Plain numbers only:
    LambdaLR saves a schedule object's attributes in the checkpoint, which loads with weights_only."""

    def __init__(self, steps: int, cosine_steps: int = 0, rate: float = 0.0):
        self.steps, self.cosine_steps, self.rate = int(steps), int(cosine_steps), float(rate)

    def __call__(self, step: int) -> float:
        if step < self.steps:
            return (step + 1) / self.steps
        if self.cosine_steps:
            return CosineDecay(self.cosine_steps)(step - self.steps)
        return InverseTimeDecay(self.rate)(step - self.steps)


def build_optimizer(module: nn.Module, cfg: dict, total_steps: int = 1):
    """Lightning's `configure_optimizers` return value for the `optimizer` config group `cfg` (checked
    against the schema; keys left out take the optimizer function's defaults). `total_steps`: the
    run's updates, T of the cosine schedule (`trainer.estimated_stepping_batches`)."""
    options = dict(cfg)
    make = OPTIMIZERS.get(options.pop("name"))
    lr_decay, plateau = options.pop("lr_decay", 0.0), options.pop("plateau_factor", 1.0)
    cosine, warmup = options.pop("cosine", False), options.pop("warmup_steps", 0) or 0
    epoch_decay, decay_after = options.pop("epoch_decay", 1.0), options.pop("epoch_decay_after", 0)
    opt = make(param_groups(module, options.pop("weight_decay", 0.0)), **options)
    if plateau < 1:
        # patience 0: the step shrinks after the first epoch that does not improve on the best
        schedule = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=plateau, patience=0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "monitor": "val/ppl", "interval": "epoch"}}
    if epoch_decay < 1:
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, EpochDecay(epoch_decay, decay_after))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "epoch"}}
    if warmup > 0:
        factor = WarmUp(warmup, max(total_steps - warmup, 1) if cosine else 0, lr_decay)
    elif cosine:
        factor = CosineDecay(total_steps)
    elif lr_decay > 0:
        factor = InverseTimeDecay(lr_decay)
    else:
        return opt
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


__all__ = ["OPTIMIZERS", "build_optimizer", "param_groups", "register_optimizer"]
