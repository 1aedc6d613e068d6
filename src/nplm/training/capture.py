"""Captured training steps (config key `cuda_graphs`): on a CUDA device the whole training step of one
batch (forward, backward, gradient clipping, the optimizer update and the sum of the per-token losses
for logging) is captured once as a CUDA graph and replayed for every later batch of the same shape.

A small model's step is hundreds of small kernel launches: eager, the host takes far longer to issue them
than the GPU takes to run them (experiments/bench/README.md: gpu_step.py's table, its eager rows against the
captured ones); a replay issues them all at once. The capture follows
PyTorch's whole-network recipe (torch.cuda.graph): a few eager warm-up steps on the capture's own side
stream (they create the optimizer state and compile what `compile=true` compiles), then one capture of
the step on static input buffers; each batch is then copied into those buffers and the graph replayed.
The optimizer is made `capturable` and its step size is a 0-dim device tensor that the schedules
(LambdaLR, ReduceLROnPlateau) update in place (torch's schedulers `fill_` a tensor `lr`). Dropout and
the sampled heads draw from the default CUDA generator, whose Philox offsets torch.cuda.graph
registers: every replay draws new numbers. Autocast (bf16-mixed) is captured with its weight cache off.

The graph lives across epochs; it is captured again at an epoch's start only where the head changed
the host-side sizes it bakes in (`Head.graph_sizes`: the adaptive head's cluster capacities grow at an
epoch's end after an overflow). Capturing costs 3 eager warm-up steps and the capture itself, the time
of some replayed steps, paid once rather than every step. A batch of another shape
(a last partial one) trains eagerly through the same step function. A capture that fails leaves one log line and the run
trains eagerly. `dry=True` (config key `capture_dry` in nplm-train) runs the same step function on the
same static buffers without a graph, on any device: the CPU tests check it against the eager step.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from typing import Callable, Iterable

import torch
from torch import nn

from nplm.training.clipping import clip_gradients

log = logging.getLogger(__name__)

WARMUP_STEPS = 3  # eager steps before each capture (PyTorch's recipe: a few, on the capture stream)
SILENCE = "cuda_graphs=false silences this"


def capture_blocker(module: nn.Module, optimizer: torch.optim.Optimizer, accumulate: int, direct: bool,
                    counted: bool) -> str | None:
    """Why the training step of `module` with `optimizer` cannot be captured, or None. `direct`: the
    step may call backward and the optimizer itself (`nplm.training.steps.direct_steps_possible`);
    `counted`: Lightning's optimizer-step counter was found (the step counts itself). A compiled step (compile=true,
    inductor's fused kernels) is captured as an eager one is: its first warm-up step compiles."""
    if getattr(getattr(module, "model", None), "carries_state", False):
        return (f"model={type(module.model).option_name} carries its state from one batch to the next (a graph "
                "would need it in static buffers, copied in and out around each replay; not implemented)")
    if any(getattr(m, "sparse", False) is True for m in module.modules()):  # nn.Embedding's, the heads' `sparse`
        return "row-sparse gradients (model.sparse_embeddings=true or head.sparse=true: lazy updates of varying size)"
    if accumulate > 1:
        return f"trainer.accumulate_grad_batches={accumulate} (one optimizer step per several batches)"
    if not direct:
        return ("the step goes through Lightning (several devices, 16-mixed loss scaling, or a callback on the "
                "per-batch backward/optimizer hooks)")
    if not counted:
        return "Lightning's optimizer-step counter was not found"
    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)):
        return f"optimizer {type(optimizer).__name__}: only Adam, AdamW and SGD are known to capture"
    if isinstance(optimizer, torch.optim.SGD) and not all(g.get("fused") for g in optimizer.param_groups):
        return "optimizer=sgd with optimizer.fused=false (its update reads a tensor step size on the host)"
    return None


def device_step_size(optimizer: torch.optim.Optimizer, capturable: bool) -> None:
    """Make each group's `lr` a 0-dim float32 tensor on its parameters' device (the schedulers then
    update it in place), and, where `capturable`, the group capturable: Adam's step counts move to the
    device."""
    for group in optimizer.param_groups:
        device = group["params"][0].device
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        if capturable and "capturable" in group:
            group["capturable"] = True
            for p in group["params"]:
                state = optimizer.state.get(p, {})
                if isinstance(state.get("step"), torch.Tensor):
                    state["step"] = state["step"].to(device=p.device, dtype=torch.float32)


def eager_optimizer_state(state: dict) -> dict:
    """An optimizer `state_dict()` as an eager run saves it (checkpoints stay portable): float step
    sizes, capturable off, and step counts on the host where the group is not fused."""
    for group in state["param_groups"]:
        if isinstance(group.get("lr"), torch.Tensor):
            group["lr"] = group["lr"].item()
        if group.get("capturable"):
            group["capturable"] = False
            if not group.get("fused"):
                for index in group["params"]:  # (the state's entries are the optimizer's own dicts: copied)
                    entry = state["state"].get(index, {})
                    if isinstance(entry.get("step"), torch.Tensor):
                        state["state"][index] = {**entry, "step": entry["step"].cpu()}
    return state


@contextmanager
def _quiet_capturable():
    """torch warns once that a capturable optimizer steps outside a capture: the warm-up steps do so."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
        yield


@contextmanager
def _no_sync_check():
    """Capture synchronizes the device (once, at setup): outside what sync debug mode checks."""
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


class CaptureBrokeGenerator(RuntimeError):
    """A failed capture left the device's random number generator unusable: eager steps cannot go on."""


def random_numbers_work(device: torch.device) -> bool:
    """Whether `device`'s default generator still draws. After some failed captures PyTorch's CUDA generator
    refuses every random op ("Offset increment outside graph capture encountered unexpectedly"), so the
    eager fallback would fail at its first dropout with that message."""
    try:
        torch.rand(1, device=device)
    except RuntimeError:
        return False
    return True


class CapturedStep:
    """One training step per call: `step(context, target)` trains on one batch, replaying the captured
    graph where the batch has the captured shape. `loss_sum` (float64, on the device) accumulates the
    batches' summed per-token losses; `take_loss_sum()` reads and resets it.

    `loss_fn(context, target) -> nll [N]`: the training loss per token; `parameters`: those the
    optimizer updates; `clip_val`, `clip_algorithm`: gradient clipping ("norm" or "value"), None: none.
    """

    def __init__(self, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 parameters: Iterable[nn.Parameter], optimizer: torch.optim.Optimizer,
                 clip_val: float | None = None, clip_algorithm: str = "norm", dry: bool = False):
        self.loss_fn, self.optimizer = loss_fn, optimizer
        self.params = [p for p in parameters if p.requires_grad]
        self.clip_val, self.clip_algorithm = clip_val, clip_algorithm
        self.device = self.params[0].device
        self.dry = dry
        self.graphed = not dry and self.device.type == "cuda"
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.failed: str | None = None  # why a capture failed: then every step is eager
        self.replays = 0  # steps that replayed a graph (or, dry, ran on the static buffers) this epoch
        self._sizes: tuple | None = None  # the head's graph_sizes() the graph was captured with
        device_step_size(optimizer, capturable=self.graphed)
        self.reset()

    def new_epoch(self, sizes: tuple) -> None:
        """At an epoch's start: keep the graph where the head's host-side sizes `sizes` (`Head.graph_sizes`)
        are those it was captured with, else drop it (`reset`); the epoch's replays count from 0."""
        if sizes != self._sizes:
            self.reset()
            self._sizes = sizes
        self.replays = 0

    def reset(self) -> None:
        """Drop the graph and its buffers: the next steps warm up and capture again."""
        self._graph = None
        self._shapes: tuple[torch.Size, torch.Size] | None = None  # the (context, target) shapes replayed
        self._inputs: tuple[torch.Tensor, torch.Tensor] | None = None  # the static (context, target)
        self._grads: list[torch.Tensor] = []  # the gradients the graph writes (kept alive with it)
        self._warm = 0
        self.replays = 0
        for p in self.params:
            p.grad = None
        self._stream = torch.cuda.Stream(self.device) if self.graphed else None

    # -- the step, the same in every mode ----------------------------------------------------------
    def _step(self, context: torch.Tensor, target: torch.Tensor) -> None:
        """Forward, backward, clipping, the optimizer update, the loss sum. Gradients must be None
        before: backward writes them (in a capture: into the graph's memory)."""
        nll = self.loss_fn(context, target)  # [N]
        nll.mean().backward()
        if self.clip_val:
            clip_gradients(self.params, self.clip_val, self.clip_algorithm)
        self.optimizer.step()
        self.loss_sum += nll.detach().sum(dtype=torch.float64)

    def _autocast(self):
        """The caller's autocast state (Lightning's bf16-mixed), with the cast-weight cache off: a
        captured cast must be recomputed on every replay (the weights change)."""
        kind = self.device.type
        return torch.autocast(kind, dtype=torch.get_autocast_dtype(kind), enabled=torch.is_autocast_enabled(kind),
                              cache_enabled=False)

    def _eager(self, context: torch.Tensor, target: torch.Tensor) -> None:
        for p in self.params:
            p.grad = None
        with self._autocast(), _quiet_capturable():
            self._step(context, target)
        for p in self.params:
            p.grad = None

    # -- per batch ---------------------------------------------------------------------------------
    def step(self, context: torch.Tensor, target: torch.Tensor) -> None:
        """Train on one batch: eager for a batch of another shape or after a failed capture; else copied into
        the static buffers, on which the warm-up steps run eagerly and the captured graph replays. (The
        warm-up sees the buffers the capture records: a compiled loss, guarded on its inputs' strides, is
        compiled once, in the first warm-up step, never inside the capture; a batch is often a strided view.)"""
        shapes = (context.shape, target.shape)
        if self._shapes is None:  # the first batch's: the epoch's full batches (a partial last one trains eagerly)
            self._shapes = shapes
        if self.failed is not None or shapes != self._shapes:
            return self._eager(context, target)
        if self._inputs is None:
            self._inputs = (torch.empty_like(context, memory_format=torch.contiguous_format),
                            torch.empty_like(target, memory_format=torch.contiguous_format))
        static_context, static_target = self._inputs
        static_context.copy_(context)
        static_target.copy_(target)
        if self._warm < WARMUP_STEPS:
            self._warm += 1
            if self._stream is None:
                return self._eager(static_context, static_target)
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self._stream):
                self._eager(static_context, static_target)
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
            return None
        if self.graphed and self._graph is None and not self._capture():
            return self._eager(context, target)
        self.replays += 1
        if self._graph is not None:
            self._graph.replay()
        else:  # dry: the same step on the static buffers, without a graph
            self._eager(static_context, static_target)
        return None

    def _capture(self) -> bool:
        """Capture `_step` on the static inputs; False (and one log line) where that fails."""
        for p in self.params:
            p.grad = None
        try:
            graph = torch.cuda.CUDAGraph()
            with _no_sync_check(), self._autocast():
                self._stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.graph(graph, stream=self._stream):
                    self._step(*self._inputs)
                torch.cuda.current_stream(self.device).wait_stream(self._stream)
        except Exception as err:  # noqa: BLE001 - any failure: train eagerly, say why in one line
            self.failed = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:200]
            if not random_numbers_work(self.device):
                raise CaptureBrokeGenerator(
                    f"cuda_graphs: capturing the training step failed ({self.failed}) and left the GPU's random number "
                    "generator refusing to draw (PyTorch's, after some failed captures); run again with "
                    "cuda_graphs=false") from err
            log.warning("cuda_graphs: capturing the training step failed (%s); training eagerly (%s)",
                        self.failed, SILENCE)
            for p in self.params:
                p.grad = None
            return False
        self._graph = graph
        self._grads = [p.grad for p in self.params]
        return True

    def take_loss_sum(self) -> torch.Tensor:
        """The summed per-token losses of the steps since the last call (float64, on the device); no sync."""
        total = self.loss_sum.clone()
        self.loss_sum.zero_()
        return total
