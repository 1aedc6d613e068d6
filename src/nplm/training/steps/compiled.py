"""`compile=true`: the model + head training loss through `torch.compile(fullgraph=True)` (a graph break
fails loudly: it is a bug, and on a GPU often a host-device sync), with torch.compile's `compile_backend`
and `compile_mode`.

On CUDA nplm's capture (`cuda_graphs`, `nplm.training.steps.captured`) then replays the compiled step,
optimizer update included, as one graph (experiments/bench/README.md: gpu_step.py's compile table);
elsewhere `CompiledStep` trains it as the autograd step does. `compile_mode=reduce-overhead` instead:
torch.compile's own CUDA graphs (cudagraph trees) of the compiled forward and backward, the optimizer
update running eagerly after them; nplm's capture is then off (the two captures do not nest)."""

from __future__ import annotations

import logging
from typing import Callable

import torch

from nplm.training.steps.autograd import AutogradStep
from nplm.training.steps.base import RunParts

CUDAGRAPH_TREES = "reduce-overhead"  # the compile_mode that captures its own CUDA graphs
log = logging.getLogger(__name__)


def compiles(model) -> bool:
    """Whether compile=true applies to `model`: not to one that carries its state from batch to batch
    (`Model.carries_state`: the state is written outside the compiled graph), which says so in one log line."""
    if model.carries_state:
        log.warning("compile=true: model=%s carries its state from one batch to the next, which a compiled step "
                    "would not hand on; training without torch.compile", type(model).option_name)
    return not model.carries_state


def compile_loss(loss: Callable, backend: str = "inductor", mode: str | None = None) -> Callable:
    """`loss(context, target) -> nll [N]` compiled whole (`fullgraph=True`); `backend`, `mode`: torch.compile's
    (config keys `compile_backend`, `compile_mode`; tests use "aot_eager": the same graph capture as inductor,
    no code generation). torch.compile's caches are emptied first: the loss of every run is the same code, so in
    one process (a sweep's jobs under Hydra's basic launcher, tests) each run would add a recompilation until
    its limit (8) stops the ninth with a traceback."""
    torch.compiler.reset()
    return torch.compile(loss, fullgraph=True, backend=backend, mode=mode)


class CompiledStep(AutogradStep):
    """The autograd step of a compiled loss. `cudagraph_trees` (compile_mode=reduce-overhead): each batch
    starts a new cudagraph step, and its losses are copied out before the next replay reuses the graphs'
    memory."""

    def __init__(self, parts: RunParts, cudagraph_trees: bool):
        super().__init__(parts)
        self.cudagraph_trees = cudagraph_trees
        if cudagraph_trees:  # the first step compiles, the next two record
            self.setup_steps = 2

    def loss(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.cudagraph_trees:  # a new step: the graphs' outputs of the last one are reused
            torch.compiler.cudagraph_mark_step_begin()
        return super().loss(context, target)

    def kept(self, nll: torch.Tensor) -> torch.Tensor:
        return nll.detach().clone() if self.cudagraph_trees else nll.detach()
