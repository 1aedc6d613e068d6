"""The LightningModule: a model (`nplm.models`) + an output head (`nplm.heads`) -> NLL, perplexity, logging."""

from __future__ import annotations

import bisect
import logging
import math
import os
import time
from contextlib import contextmanager

import pytorch_lightning as pl
import torch

from nplm.fast import backprop
from nplm.data.text_units import figures
from nplm.data.vocabulary import Vocabulary
from nplm.errors import UserError
from nplm.training.capture import SILENCE, CapturedStep, capture_blocker, eager_optimizer_state
from nplm.training.clipping import clip_gradients, has_grad_scaler
from nplm.training.execution import StepOptions
from nplm.training.flops import FlopReport
from nplm.heads import build_head, head_class
from nplm.models import build_model
from nplm.optimizers import build_optimizer
from nplm.optimizers.lazy import step_without_profiler
from nplm.training.perplexity import Perplexity
from nplm.trees.tree import Tree

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "nplm"  # our entry in Lightning checkpoints: vocabulary and tree, as plain lists

# Two counters of Lightning's training loop that nplm's manual optimization moves itself, where
# Lightning has no public API for them: the count of optimizer steps (`trainer.global_step` reads it)
# that the direct optimizer step advances as `LightningOptimizer.step` would, and the loggers' step
# axis. `lightning_counter` looks each up once per training run; where one is missing the step goes
# through Lightning's public API instead (`LightningOptimizer.step`: the same update; the direct step
# makes the character model's training 1.07x faster, experiments/bench/lightning_step.py), or the
# epoch-end log rows stay on Lightning's own axis (one step per `training_step` call).
# LIGHTNING_COUNTERS = False forces both fallbacks (tests/test_execution.py).
LIGHTNING_COUNTERS = True


def lightning_counter(trainer: pl.Trainer, path: str, attribute: str):
    """`trainer.<path>` (dotted) where it exists and has `attribute`; None otherwise, or where
    LIGHTNING_COUNTERS is False."""
    if not LIGHTNING_COUNTERS:
        return None
    found = trainer
    for name in path.split("."):
        found = getattr(found, name, None)
    return found if hasattr(found, attribute) else None


class Diverged(UserError):
    """The training loss, or the validation perplexity, is no longer finite: the run stops at once. Its record
    says "diverged" and its folder stays, with the checkpoints written before (each after a validation with a
    finite perplexity, or after an epoch whose training loss was finite)."""


def use_tf32(enabled: bool) -> None:
    """Config key `tf32`: on a CUDA GPU, float32 matmuls on TF32 tensor cores (Ampere and later) or in
    full float32; nothing on a CPU."""
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.set_float32_matmul_precision("high" if enabled else "highest")


class LanguageModel(pl.LightningModule):
    """Trains `head.loss(model(context), target)` and evaluates the exact `head.nll`; logs
    `train/ppl` (`train/ppl_sampled` for heads trained on a sampled loss), `val/ppl`, `val/ppl_best`,
    `test/ppl` (token-weighted over the whole split), beside them `val/bpb`, `val/word_ppl`, `test/bpb`,
    `test/word_ppl` (and `val/bpb_best`, `val/word_ppl_best`: `nplm.data.text_units`), `train/tokens_per_s`,
    `train/mfu` (once the run's `nplm.training.flops.FlopCount` has set `flops`) and `train/lr`.

    Hyperparameters are plain dicts, so checkpoints load with `torch.load(weights_only=True)`.

    Training uses Lightning's manual optimization (`training_step` steps the optimizer once per batch,
    for several batches per call: `nplm.training.execution`). With your own `pl.Trainer`, set gradient
    clipping and accumulation on `step_options`, not on the Trainer (Lightning refuses them there).
    Where `nplm.fast.backprop.possible` (a model and head that differentiate themselves, on a CPU, in
    float32, not compiled) the step computes the gradients by hand rather than through autograd: the
    same gradients, faster for small models. On a CUDA device, with `cuda_graphs` (the default), each
    batch's whole step replays a captured CUDA graph (`nplm.training.capture`).
    """

    def __init__(self, model: dict, head: dict, optimizer: dict, vocab: Vocabulary | dict, data: dict | None = None,
                 tree: Tree | dict | None = None):
        """`model`, `head`, `optimizer`: their config groups; `vocab`: a `Vocabulary` or its `to_dict()`;
        `data`: the corpus config and batch sizes, kept so a checkpoint can be evaluated again;
        `tree`: for tree-structured heads, a `Tree` or its `to_dict()` (an object is used as it is, not
        copied: at 267,735 words a round trip through the dict costs about a second). Vocabulary and
        tree travel in the checkpoint's own entry, not in the hyperparameters."""
        super().__init__()
        self.save_hyperparameters(ignore=["vocab", "tree"])
        self.vocab = vocab if isinstance(vocab, Vocabulary) else Vocabulary.from_dict(vocab)
        self.tree = tree if isinstance(tree, Tree) or tree is None else Tree.from_dict(tree)
        self.model = build_model(model, len(self.vocab), head_can_tie=head_class(head["name"]).can_tie)
        # the head's output word vectors are the model's own where it defines them (model.tie_embeddings)
        tie_to = self.model.output_embeddings()
        self.head = build_head(head, self.model.feature_dim, len(self.vocab), self.vocab.counts, self.tree,
                               tie_to=tie_to)
        self.tied_embeddings = tie_to is not None  # (the run's record says so)
        # Heads that train on a sampled objective report its perplexity under another name.
        self.train_ppl_name = "train/ppl" if self.head.exact_training_loss else "train/ppl_sampled"
        self.val_ppl, self.test_ppl = Perplexity(), Perplexity()
        self.best_val_ppl = math.inf
        self.automatic_optimization = False  # training_step steps the optimizer, once per batch
        self.step_options = StepOptions()  # nplm-train sets them from the trainer config (nplm.training.execution)
        self.train_batches: int | None = None  # batches per training epoch, when known (progress lines)
        self._compiled = False  # compile_training_step was called
        self._cudagraph_trees = False  # the compiled step in torch.compile's reduce-overhead mode (its own CUDA graphs)
        self.cuda_graphs = True  # capture the training step on a CUDA device (config key cuda_graphs)
        self._captured: CapturedStep | None = None
        self.flops: FlopReport | None = None  # the training step's FLOPs and the device's peak (FlopCount)
        self._resumed_rng: dict | None = None  # the checkpoint's generators, until training resumes (_restore_rng)

    # -- the model ---------------------------------------------------------------------------
    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """Context ids `[B, n-1]` -> log-distribution over the next token `[B, V]`."""
        return self.head.log_probs(self.model(context))

    def features(self, context: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(features `[N, F]`, targets `[N]`) of a batch: N = B windows (context `[B, k]`, target `[B]`), or
        N = B T positions of B blocks (ids `[B, T + k]`, targets `[B, T]`: `Model.block_features`, flattened)."""
        if target.dim() == 1:
            return self.model(context), target
        return self.model.block_features(context).flatten(0, 1), target.flatten()  # [B T, F], [B T]

    def nll(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.head.nll(*self.features(context, target))  # [N]

    # -- training --------------------------------------------------------------------------
    def compile_training_step(self, backend: str | None = None) -> None:
        """`compile=true`: the model + head training loss through `torch.compile(fullgraph=True)`
        (a graph break fails loudly: it is a bug, and on a GPU often a host-device sync). `backend`:
        torch.compile's, default env `NPLM_COMPILE_BACKEND` or "inductor" (tests use "aot_eager":
        the same graph capture, no code generation).

        On CUDA nplm's capture (`cuda_graphs`) then replays the compiled step, optimizer update included,
        as one graph (measured on an H200: experiments/bench/gpu_compile_capture.py). Env
        `NPLM_COMPILE_MODE=reduce-overhead` instead: torch.compile's own CUDA graphs (cudagraph trees) of
        the compiled forward and backward, the optimizer update running eagerly after them; nplm's capture
        is then off (the two captures do not nest)."""
        backend = backend or os.environ.get("NPLM_COMPILE_BACKEND", "inductor")
        mode = os.environ.get("NPLM_COMPILE_MODE") or None
        self._train_loss = torch.compile(self._train_loss, fullgraph=True, backend=backend, mode=mode)
        self._compiled = True
        self._cudagraph_trees = mode == "reduce-overhead"

    def _train_loss(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.head.loss(*self.features(context, target))  # [N]

    def on_fit_start(self) -> None:
        """Whole-block training (`data.block_size`): the head calibrates what it sizes per batch on up to
        8,192 of the training split's blocks, spread evenly over it (`Head.calibrate`)."""
        data = getattr(self.trainer, "datamodule", None)
        if data is None or not getattr(data, "block_size", None):
            return
        blocks = data.blocks("train")
        if blocks.whole:
            picked = torch.linspace(0, blocks.whole - 1, min(blocks.whole, 8192)).long()  # [U]
            self.head.calibrate(blocks.blocks[picked, blocks.context_size:])  # [U, T]

    def on_train_start(self) -> None:
        self._restore_rng()  # a resumed run: the generators as its checkpoint saved them
        self._direct = self._direct_steps_possible()
        self._step_counter = lightning_counter(self.trainer, "fit_loop.epoch_loop.manual_optimization.optim_step_progress",
                                               "increment_completed")
        self._log_axis = lightning_counter(self.trainer, "fit_loop.epoch_loop", "_batches_that_stepped")
        self._by_hand = (self._direct and not self._compiled and self.trainer.precision in ("32-true", "32")
                         and backprop.possible(self.model, self.head))
        # NPLM_SYNC_DEBUG=1 on a GPU: any host-device sync in a training step (forward, backward,
        # optimizer update) raises (experiments/bench/gpu_check.py)
        self._sync_debug = os.environ.get("NPLM_SYNC_DEBUG") == "1" and self.device.type == "cuda"
        self._captured = self._captured_step()

    def _captured_step(self) -> CapturedStep | None:
        """The captured training step (`nplm.training.capture`) where `cuda_graphs` is on and the device is
        CUDA (or env NPLM_CAPTURE_DRY=1: its dry run, on any device); None, with one log line saying why
        where the configuration cannot be captured: eager steps."""
        dry = os.environ.get("NPLM_CAPTURE_DRY") == "1"
        if not self.cuda_graphs or (self.device.type != "cuda" and not dry):
            return None
        if self._cudagraph_trees:  # torch.compile captures its own graphs (compile_training_step)
            log.info("cuda_graphs: compile=true in torch.compile's reduce-overhead mode captures the compiled forward "
                     "and backward itself; the optimizer update runs after them")
            return None
        optimizer = self.optimizers().optimizer
        options = self.step_options
        why = capture_blocker(self, optimizer, options.accumulate_grad_batches, self._direct,
                              counted=self._step_counter is not None)
        if why is not None:
            log.warning("cuda_graphs: the training step cannot be captured: %s; training eagerly (%s)", why, SILENCE)
            return None
        return CapturedStep(self._train_loss, self.parameters(), optimizer, options.gradient_clip_val,
                            options.gradient_clip_algorithm, dry=dry)

    def _direct_steps_possible(self) -> bool:
        """Whether the training step may call `loss.backward()` and the torch optimizer itself rather
        than through Lightning (`manual_backward`, `LightningOptimizer.step`): one process, no loss
        scaling (16-mixed), and no callback (or subclass) listening to the per-batch backward/optimizer
        hooks. The hooks' rounds cost ~0.1 ms per batch, as much as a small model's backward."""
        from pytorch_lightning.strategies import SingleDeviceStrategy

        hooks = ("on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad")
        listening = [c for c in self.trainer.callbacks for h in hooks
                     if getattr(type(c), h) is not getattr(pl.Callback, h)]
        listening += [h for h in hooks if getattr(type(self), h) is not getattr(pl.LightningModule, h)]  # a subclass
        return (isinstance(self.trainer.strategy, SingleDeviceStrategy) and not listening
                and not has_grad_scaler(self.trainer))

    @contextmanager
    def _sync_mode(self, mode: str):
        """torch.cuda.set_sync_debug_mode(mode) inside the block when NPLM_SYNC_DEBUG=1 on a GPU."""
        if not getattr(self, "_sync_debug", False):
            yield
            return
        before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(mode)
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(before)

    def on_train_epoch_start(self) -> None:
        self._train_seconds, self._clock = 0.0, time.perf_counter()
        self._epoch_tokens = self._epoch_batches = 0
        self._nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)  # sum of per-token NLL
        self._reset_window()
        self._reset_watch()
        if self._captured is not None:  # captured again only where the head resized at the last epoch's end
            self._captured.new_epoch(self.head.graph_sizes())

    def _reset_watch(self) -> None:
        """Where the first non-finite per-token training loss since the last check is (`_watch_finite`):
        its place among the tokens trained since then (-1: none) and its value, device tensors written
        without a sync; and, on the host, each batch's last token's place, optimizer step and number in the epoch."""
        self._bad_at = torch.full((), -1, dtype=torch.int64, device=self.device)
        self._bad_value = torch.zeros((), dtype=torch.float32, device=self.device)
        self._unchecked: list[tuple[int, int, int]] = []  # (tokens up to the batch's end, its optimizer step, batch)
        self._unchecked_tokens = 0

    def _reset_window(self) -> None:
        """The per-token loss summed over the batches since the last log line (a device tensor: no sync
        per step), and their count and tokens."""
        self._window_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        self._window_steps = self._window_tokens = 0

    def training_step(self, batches, batch_idx: int) -> dict:
        """`batches`: the `steps_per_execution` consecutive batches `[(context [B, k], target [B]), ...]`
        (or of blocks, `[(ids [B, T + k], targets [B, T]), ...]`: B T tokens each) of one Lightning step
        (`nplm.training.execution`). Each batch gets its own forward, backward and optimizer step, in
        order, exactly as with one batch per step; Lightning's own cost per step (hooks, callbacks,
        logging) is paid once per group.

        No host-device sync: the loss and NLL sums, and where the first NaN/inf loss is (`_watch_finite`),
        stay on the device; they are read, and checked (`check_finite`), every `log_every_n_steps` optimizer
        steps, at each validation and at the end of the epoch."""
        group = [batches] if isinstance(batches[0], torch.Tensor) else batches  # (a loader of single batches)
        options = self.step_options
        optimizer = self.optimizers()
        schedulers = [c.scheduler for c in self.trainer.lr_scheduler_configs if c.interval == "step"]
        max_steps = self.trainer.max_steps
        log_every = options.log_every_n_steps or self.trainer.log_every_n_steps
        nlls = []  # the batches' per-token losses [N], summed once per group
        done = tokens = 0
        steps_before = step = self.global_step  # (counted here per batch: Lightning's counter is a chain of reads)
        # nn.Module attributes are slow to set: these two are counted in locals, written once a group
        epoch_batches, unchecked_tokens = self._epoch_batches, self._unchecked_tokens
        last = len(group) - 1 if self.trainer.is_last_batch else -1
        captured = self._captured
        # the first step compiles (and records, in the reduce-overhead mode, on the next two)
        with self._sync_mode("error" if steps_before > (2 if self._cudagraph_trees else 0) else "default"):
            for i, (context, target) in enumerate(group):
                if 0 < max_steps <= step:
                    break
                if captured is not None:  # the whole step, replayed (its loss sum stays in `captured`)
                    self._counted(captured.step, context, target)
                    for scheduler in schedulers:
                        scheduler.step()
                    epoch_batches += 1
                    stepped = True
                else:
                    accumulate = options.accumulate_grad_batches
                    # the gradients of a window batch's mean loss, without autograd (nplm.fast.backprop)
                    if self._by_hand and target.dim() == 1:
                        nll = backprop.train_loss(self.model, self.head, context, target,
                                                  1 / (len(target) * accumulate))
                    else:
                        if self._cudagraph_trees:  # a new step: the graphs' outputs of the last one are reused
                            torch.compiler.cudagraph_mark_step_begin()
                        nll = self._train_loss(context, target)  # [N]
                        loss = nll.mean() / accumulate
                        loss.backward() if self._direct else self.manual_backward(loss)
                    epoch_batches += 1
                    stepped = epoch_batches % accumulate == 0 or i == last  # (a partial last one)
                    if stepped:
                        self._optimizer_step(optimizer, schedulers)
                    nlls.append(nll.detach().clone() if self._cudagraph_trees else nll.detach())
                step += stepped
                done += 1
                tokens += target.numel()
                unchecked_tokens += target.numel()
                self._unchecked.append((unchecked_tokens, step + (not stepped), epoch_batches))
        self._epoch_batches, self._unchecked_tokens = epoch_batches, unchecked_tokens
        if not done:  # max_steps was reached before this group
            return {"batches": 0, "tokens": 0}
        if captured is not None:  # only the group's sum is kept: a non-finite one names the group's first batch
            group_sum = captured.take_loss_sum()
            losses = group_sum.view(1)
        else:
            losses = torch.cat(nlls)  # [N] the group's per-token losses
            group_sum = losses.sum(dtype=torch.float64)
        self._watch_finite(losses, group_sum, self._unchecked_tokens - tokens)
        self._nll_sum += group_sum
        self._window_loss += group_sum
        self._window_steps += done
        self._window_tokens += tokens
        self._epoch_tokens += tokens
        if self.global_step // log_every > steps_before // log_every:
            self._log_window()  # a multiple of log_every_n_steps optimizer steps was passed in this group
        # Lightning adds one step per call to its loggers' axis; make the axis count optimizer steps, as
        # it does for automatic optimization (gradient accumulation included)
        if self._log_axis is not None:
            self._log_axis._batches_that_stepped = self.global_step - 1
        return {"loss": (group_sum / tokens).float(), "batches": done, "tokens": tokens}

    def _watch_finite(self, losses: torch.Tensor, total: torch.Tensor, offset: int) -> None:
        """Keep, on the device, the place (`offset` + its index) and value of the first non-finite loss of the
        group's per-token `losses` [N], unless an earlier one is kept; `total`: their sum (non-finite if one is:
        a loss is >= 0 or NaN). A few small kernels per group and no host-device sync."""
        bad = ~torch.isfinite(total) & (self._bad_at < 0)
        first = (~torch.isfinite(losses)).to(torch.uint8).argmax()  # [] the first non-finite one, if any
        self._bad_at = torch.where(bad, first + offset, self._bad_at)
        self._bad_value = torch.where(bad, losses.index_select(0, first.view(1))[0].float(), self._bad_value)

    def check_finite(self, epoch_end: bool = False) -> None:
        """Raise `Diverged`, naming the optimizer step, if a training loss since the last check was not finite;
        first the head's own check (`Head.check_training`, at an epoch's end also its resizing), whose
        counters say why a loss was not finite. Called where the loss is read anyway (a log line, the end
        of an epoch, a validation)."""
        with self._sync_mode("default"):
            self.head.check_training(epoch_end)
            if not self._unchecked:
                return
            at, value = torch.stack([self._bad_at.double(), self._bad_value.double()]).tolist()
        if at >= 0:
            ends = [end for end, _, _ in self._unchecked]
            _, step, batch = self._unchecked[bisect.bisect_right(ends, int(at))]
            raise Diverged(f"training loss became {value} at optimizer step {step} (epoch {self.current_epoch}, "
                           f"batch {batch}); {self.divergence_fix()}")
        self._unchecked, self._unchecked_tokens = [], 0

    def divergence_fix(self) -> str:
        """What to change when the training diverged."""
        lr, clip = self.hparams.optimizer["lr"], self.step_options.gradient_clip_val
        return (f"lower optimizer.lr (e.g. optimizer.lr={lr / 10:g}) or "
                + (f"trainer.gradient_clip_val (now {clip:g})" if clip else "set trainer.gradient_clip_val=1.0"))

    def _optimizer_step(self, optimizer, schedulers: list) -> None:
        """Clip (`trainer.gradient_clip_val`), step, zero the gradients, step the per-step schedules."""
        options = self.step_options
        if options.gradient_clip_val and has_grad_scaler(self.trainer):  # fp16: Lightning unscales first
            self.clip_gradients(optimizer, gradient_clip_val=options.gradient_clip_val,
                                gradient_clip_algorithm=options.gradient_clip_algorithm)
        elif options.gradient_clip_val:  # (Lightning refuses a fused optimizer under bf16-mixed: nothing to unscale)
            clip_gradients([p for group in optimizer.param_groups for p in group["params"]],
                           options.gradient_clip_val, options.gradient_clip_algorithm)
        if self._direct and self._step_counter is not None:  # the torch optimizer itself, counted as Lightning counts it
            self._counted(step_without_profiler, optimizer.optimizer)
            optimizer.optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        for scheduler in schedulers:
            scheduler.step()

    def _counted(self, step, *args) -> None:
        """`step(*args)`, an optimizer step counted as `LightningOptimizer.step` counts it (trainer.global_step)."""
        self._step_counter.increment_ready()
        step(*args)
        self._step_counter.increment_completed()

    def _log_window(self, epoch_end: bool = False) -> None:
        """Log the mean per-token training loss since the last call, after `check_finite` (a non-finite loss
        stops training with a one-line error).

        Inside the epoch the value goes to the loggers themselves, at the last optimizer step's place on
        their axis: `self.log` would leave it in Lightning's step results, which Lightning writes again
        at every later step it flushes (each step of several batches) until a new value comes."""
        self.check_finite(epoch_end)  # the read of the device every log_every_n_steps steps
        if self._window_steps == 0:
            return
        mean = (self._window_loss / self._window_tokens).float()
        if epoch_end:
            self.log("train/loss", mean, prog_bar=True, sync_dist=True)
        else:
            for logger in self.loggers:
                logger.log_metrics({"train/loss": mean.item()}, step=self.global_step - 1)
        self._reset_window()

    def _validating_inside_fit(self) -> bool:
        return self.trainer.state.fn == "fit" and not self.trainer.sanity_checking

    def on_validation_start(self) -> None:
        if self._validating_inside_fit():  # validation inside a training epoch: not training time
            self._train_seconds += time.perf_counter() - self._clock

    def on_validation_end(self) -> None:
        if self._validating_inside_fit():
            self._clock = time.perf_counter()

    def on_train_epoch_end(self) -> None:
        self._log_window(epoch_end=True)
        seconds = self._train_seconds + (time.perf_counter() - self._clock)
        strategy = self.trainer.strategy
        nll_sum = strategy.reduce(self._nll_sum, reduce_op="sum")
        tokens = self._epoch_tokens * self.trainer.world_size  # every rank trains as many batches
        self.log(self.train_ppl_name, torch.exp(nll_sum / max(tokens, 1)).float(), sync_dist=True)
        rate = tokens / max(seconds, 1e-9)
        self.log("train/tokens_per_s", rate, sync_dist=True)
        if self.flops is not None:  # model FLOP utilisation of the run's devices
            self.flops = self.flops.checked(rate, self.trainer.world_size)  # a peak measured under load: again
            self.log("train/mfu", self.flops.mfu(rate, self.trainer.world_size), sync_dist=True)
        self.log("train/epoch_time_s", seconds, sync_dist=True)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]  # this epoch's (a copy: a captured step's is filled in place)
        self.log("train/lr", lr.clone() if isinstance(lr, torch.Tensor) else lr, sync_dist=True)
        if self._captured is not None:  # batches of this epoch that replayed the captured step
            self.log("train/graph_steps", float(self._captured.replays), sync_dist=True)
        self._step_epoch_schedulers()

    def _step_epoch_schedulers(self) -> None:
        """What Lightning does for automatic optimization at the end of a training epoch (after its
        validation): step the per-epoch schedules, ReduceLROnPlateau with its monitored metric."""
        for config in self.trainer.lr_scheduler_configs:
            if config.interval != "epoch":
                continue
            if isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                metric = self.trainer.callback_metrics.get(self._plateau_monitor)
                if metric is not None:  # no validation this epoch: nothing to judge by
                    config.scheduler.step(metric)
            else:
                config.scheduler.step()

    # -- evaluation ------------------------------------------------------------------------
    def validation_step(self, batch, batch_idx):
        self.val_ppl.update(self.nll(*batch))

    def on_validation_epoch_end(self) -> None:
        ppl = self.val_ppl.compute().item()
        self._log_text_figures("val", "valid", self.val_ppl, ppl)
        self.val_ppl.reset()
        if self._validating_inside_fit():  # (before the checkpoint callbacks: a diverged model is not saved)
            self.check_finite()
            if not math.isfinite(ppl):
                raise Diverged(f"validation perplexity became {ppl} after optimizer step {self.global_step} "
                               f"(epoch {self.current_epoch}); {self.divergence_fix()}")
        if not self.trainer.sanity_checking:
            self.best_val_ppl = min(self.best_val_ppl, ppl)
        self.log("val/ppl", ppl, prog_bar=True, sync_dist=True)
        self.log("val/ppl_best", self.best_val_ppl, sync_dist=True)
        for name, value in self.best_val_figures().items():
            self.log(name, value, sync_dist=True)

    def test_step(self, batch, batch_idx):
        self.test_ppl.update(self.nll(*batch))

    def on_test_epoch_end(self) -> None:
        ppl = self.test_ppl.compute().item()
        self._log_text_figures("test", "test", self.test_ppl, ppl)
        self.log("test/ppl", ppl, sync_dist=True)
        self.test_ppl.reset()

    def _split_units(self, split: str):
        """The bytes and words the scored tokens of `split` cover (`LMDataModule.units`), if known."""
        return getattr(getattr(self.trainer, "datamodule", None), "units", {}).get(split)

    def _log_text_figures(self, stage: str, split: str, metric: Perplexity, ppl: float) -> None:
        """`<stage>/bpb` and `<stage>/word_ppl` (`nplm.data.text_units`) where the epoch scored every token
        of the split (not with trainer.limit_*_batches or data.overfit_batches)."""
        units = self._split_units(split)
        tokens = int(self.trainer.strategy.reduce(metric.tokens.double(), reduce_op="sum"))
        if stage == "val":
            self._val_units = units if units is not None and tokens == units.tokens else None
        if units is None or tokens != units.tokens:
            return
        for name, value in figures(math.log(ppl) * tokens, units).items():
            self.log(f"{stage}/{name}", value, sync_dist=True)

    def best_val_figures(self) -> dict[str, float]:
        """`val/bpb_best` and `val/word_ppl_best`: those of `best_val_ppl` (monotone in it: the same epoch)."""
        units = getattr(self, "_val_units", None)
        if units is None or not math.isfinite(self.best_val_ppl):
            return {}
        return {f"val/{name}_best": v for name, v in figures(math.log(self.best_val_ppl) * units.tokens, units).items()}

    def configure_optimizers(self):
        # T of optimizer.cosine: nplm-train's plan counts optimizer steps (Lightning's estimate counts groups)
        total_steps = self.step_options.total_steps or self.trainer.estimated_stepping_batches
        config = build_optimizer(self, self.hparams.optimizer, total_steps)
        if isinstance(config, dict):  # manual optimization: training_step and _step_epoch_schedulers step them
            # (Lightning ignores, with a warning, a monitor under manual optimization: kept here instead)
            self._plateau_monitor = config["lr_scheduler"].pop("monitor", None)
        return config

    # -- checkpoints -----------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # as an eager run saves them: float step sizes, not capturable (resumable anywhere)
        if "optimizer_states" in checkpoint:
            checkpoint["optimizer_states"] = [eager_optimizer_state(s) for s in checkpoint["optimizer_states"]]
        checkpoint[CHECKPOINT_KEY] = {"vocab": self.vocab.to_dict(), "best_val_ppl": self.best_val_ppl,
                                      "tree": self.tree.to_dict() if self.tree is not None else None,
                                      "tokenizer": None if self.vocab.subword is None else self.vocab.subword.to_dict(),
                                      "rng": self._rng_state()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.best_val_ppl = checkpoint[CHECKPOINT_KEY]["best_val_ppl"]
        self._resumed_rng = checkpoint[CHECKPOINT_KEY].get("rng")

    def _rng_state(self) -> dict:
        """The random number generators training draws from (dropout, sampled heads): the CPU's, and the
        training GPU's. A resumed run starts from them (`_restore_rng`), so that it draws what the run it
        continues would have drawn: the same numbers as one never stopped."""
        cuda = self.device.type == "cuda"
        return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(self.device) if cuda else None}

    def _restore_rng(self) -> None:
        state, self._resumed_rng = self._resumed_rng, None
        if state is None:  # a fresh run, or a checkpoint written before the state was saved
            return
        torch.set_rng_state(state["cpu"])
        if state.get("cuda") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda"], self.device)
