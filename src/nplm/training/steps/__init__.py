"""The ways of taking a training step, each behind one interface (`TrainingStep`), chosen once when
training starts (`choose_step`):

- `ReplayStep` (captured.py): the whole step captured once as a CUDA graph and replayed (`cuda_graphs`);
- `CompiledStep` (compiled.py): the autograd step of a `torch.compile`d loss (`compile`, `compile_mode`);
- `ByHandStep` (by_hand.py): hand-written gradients (`nplm.fast.backprop`), on a CPU;
- `AutogradStep` (autograd.py): `backward()` and the optimizer update, directly or through Lightning.
"""

from __future__ import annotations

from nplm.fast import backprop
from nplm.training.lightning_counters import STEP_COUNTER, lightning_counter
from nplm.training.steps.autograd import AutogradStep
from nplm.training.steps.base import RunParts, TrainingStep, direct_steps_possible
from nplm.training.steps.by_hand import ByHandStep
from nplm.training.steps.captured import ReplayStep, replay_step
from nplm.training.steps.compiled import CompiledStep, compile_loss

__all__ = ["AutogradStep", "ByHandStep", "CompiledStep", "ReplayStep", "RunParts", "TrainingStep", "choose_step",
           "compile_loss", "direct_steps_possible"]


def choose_step(module) -> TrainingStep:
    """The step `module` (a LanguageModel whose training starts) takes: captured where `cuda_graphs` (on
    CUDA, or `capture_dry`) and the configuration allow; else compiled (`compile=true`); else by hand where
    `nplm.fast.backprop.possible` (directly called, float32); else autograd."""
    parts = RunParts.of(module, lightning_counter(module.trainer, *STEP_COUNTER))
    replay = replay_step(parts, module.cuda_graphs, module.capture_dry, module._cudagraph_trees)
    if replay is not None:
        return replay
    if module._compiled:
        return CompiledStep(parts, module._cudagraph_trees)
    if parts.direct and module.trainer.precision in ("32-true", "32") and backprop.possible(module.model, module.head):
        return ByHandStep(parts)
    return AutogradStep(parts)
