"""The LightningModule: a model (`nplm.models`) + an output head (`nplm.heads`) -> NLL, perplexity, logging."""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch

from nplm.data.vocabulary import Vocabulary
from nplm.heads import build_head, head_class
from nplm.models import build_model
from nplm.optimizers import build_optimizer
from nplm.training.checkpoint_entry import CHECKPOINT_KEY, read_entry, write_entry  # noqa: F401 (CHECKPOINT_KEY: its readers import it here)
from nplm.training.divergence import Diverged, divergence_fix
from nplm.training.epoch_state import TrainingEpoch
from nplm.training.execution import StepOptions
from nplm.training.flops import FlopReport
from nplm.training.lightning_counters import LOG_AXIS, lightning_counter
from nplm.training.perplexity import Perplexity
from nplm.training.rng import restore_rng
from nplm.training.steps import TrainingStep, choose_step, compile_loss
from nplm.training.steps.compiled import CUDAGRAPH_TREES, compiles
from nplm.training.steps.schedules import step_epoch_schedules
from nplm.training.sync_debug import sync_debug_applies, sync_mode
from nplm.training.text_metrics import TextFigures
from nplm.training.throughput import speed_figures
from nplm.trees.tree import Tree



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
    Each batch's step is taken by one `nplm.training.steps.TrainingStep`, chosen when training starts:
    on a CUDA device, with `cuda_graphs` (the default), the whole step replays a captured CUDA graph;
    where `nplm.fast.backprop.possible` (a model and head that differentiate themselves, on a CPU, in
    float32, not compiled) the gradients are computed by hand; else through autograd.
    """

    def __init__(self, model: dict, head: dict, optimizer: dict, vocab: Vocabulary | dict, data: dict | None = None,
                 tree: Tree | dict | None = None):
        """`model`, `head`, `optimizer`: their config groups; `vocab`: a `Vocabulary` or its `to_dict()`;
        `data`: the corpus config and batch sizes, kept so a checkpoint can be evaluated again;
        `tree`: for tree-structured heads, a `Tree` or its `to_dict()` (an object is used as it is, not
        copied: at a large vocabulary a round trip through the dict is slow). Vocabulary and
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
        self.capture_dry = False  # the captured step's dry run, on any device (config key capture_dry)
        self.sync_debug = False  # a host-device sync in a training step raises, on CUDA (config key sync_debug)
        self._sync_debug = False  # sync_debug, where the training device is CUDA (on_train_start)
        self.stepper: TrainingStep | None = None  # takes each batch's step (nplm.training.steps), from on_train_start
        self.text_figures = TextFigures()  # bits per byte, per-word perplexity (nplm.training.text_metrics)
        self.flops: FlopReport | None = None  # the training step's FLOPs and the device's peak (FlopCount)
        self._resumed_rng: dict | None = None  # the checkpoint's generators, until training resumes (on_train_start)
        self._epoch_so_far: dict | None = None  # a checkpoint's epoch stopped inside, until training resumes
        self._now: TrainingEpoch | None = None  # the epoch being trained

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
    def compile_training_step(self, backend: str = "inductor", mode: str | None = None) -> None:
        """`compile=true`: the training loss through `torch.compile(fullgraph=True)` with torch.compile's
        `backend` and `mode` (config keys `compile_backend`, `compile_mode`: `nplm.training.steps.compiled`), where
        the model `compiles` (else one log line says why, and the loss trains through autograd)."""
        if compiles(self.model):
            self._train_loss, self._compiled = compile_loss(self._train_loss, backend, mode), True
            self._cudagraph_trees = mode == CUDAGRAPH_TREES

    def _train_loss(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.head.loss(*self.features(context, target))  # [N]

    def on_fit_start(self) -> None:
        """Whole-block training (`data.block_size`): the head calibrates what it sizes per batch on up to
        8,192 of the training split's blocks, spread evenly over it (`Head.calibrate`)."""
        data = getattr(self.trainer, "datamodule", None)
        if data is not None and getattr(data, "block_size", None) and data.blocks("train").whole:
            self.head.calibrate(data.blocks("train").spread_targets(8192))  # [U, T]

    def on_train_start(self) -> None:
        state, self._resumed_rng = self._resumed_rng, None  # a resumed run: the generators as its checkpoint saved them
        restore_rng(state, self.device)
        self._log_axis = lightning_counter(self.trainer, *LOG_AXIS)
        self._sync_debug = sync_debug_applies(self.sync_debug, self.device)
        self.stepper = choose_step(self)
        so_far, self._epoch_so_far = self._epoch_so_far, None
        if so_far is not None:  # resumed inside an epoch (Lightning calls no on_train_epoch_start for it)
            self.on_train_epoch_start()
            self._now.restore(so_far)
            self.model.restore_state("train", so_far["carried"], self.device)

    def on_train_epoch_start(self) -> None:
        self._now = TrainingEpoch(self.device)  # (nplm.training.epoch_state)
        self.stepper.new_epoch()
        self.model.reset_state("train")  # (a model that carries its state: every epoch starts from zeros)

    def training_epoch(self) -> TrainingEpoch | None:
        """The epoch being trained (None between epochs: once its end hooks have begun)."""
        return self._now if self._now is not None and not self._now.ended else None

    def training_step(self, batches, batch_idx: int) -> dict:
        """`batches`: the `steps_per_execution` consecutive batches `[(context [B, k], target [B]), ...]`
        (or of blocks, `[(ids [B, T + k], targets [B, T]), ...]`: B T tokens each) of one Lightning step
        (`nplm.training.execution`). Each batch gets its own forward, backward and optimizer step, in
        order, exactly as with one batch per step; Lightning's own cost per step (hooks, callbacks,
        logging) is paid once per group.

        No host-device sync: the loss and NLL sums, and where the first NaN/inf loss is (`DivergenceWatch`),
        stay on the device; they are read, and checked (`check_finite`), every `log_every_n_steps` optimizer
        steps, at each validation and at the end of the epoch."""
        group = [batches] if isinstance(batches[0], torch.Tensor) else batches  # (a loader of single batches)
        stepper, watch = self.stepper, self._now.watch
        max_steps, accumulate = self.trainer.max_steps, self.step_options.accumulate_grad_batches
        log_every = self.step_options.log_every_n_steps or self.trainer.log_every_n_steps
        done = tokens = 0
        steps_before = step = self.global_step  # (counted here per batch: Lightning's counter is a chain of reads)
        epoch_batches = self._now.batches  # trained so far this epoch
        last = len(group) - 1 if self.trainer.is_last_batch else -1
        with sync_mode(self._sync_debug, "error" if steps_before > stepper.setup_steps else "default"):
            for i, (context, target) in enumerate(group):
                if 0 < max_steps <= step:
                    break
                epoch_batches += 1
                stepped = epoch_batches % accumulate == 0 or i == last  # (a partial last one)
                stepper.train(context, target, stepped)
                step += stepped
                done += 1
                tokens += target.numel()
                watch.add_batch(target.numel(), step + (not stepped), epoch_batches)
        if not done:  # max_steps was reached before this group
            return {"batches": 0, "tokens": 0}
        losses, group_sum = stepper.take_losses()  # [N] (or [1]: their sum), float64 []
        watch.watch(losses, group_sum, tokens)
        self._now.add(group_sum, done, tokens)
        if self.global_step // log_every > steps_before // log_every:
            self._log_window()  # a multiple of log_every_n_steps optimizer steps was passed in this group
        # Lightning adds one step per call to its loggers' axis; make the axis count optimizer steps, as
        # it does for automatic optimization (gradient accumulation included)
        if self._log_axis is not None:
            self._log_axis._batches_that_stepped = self.global_step - 1
        return {"loss": (group_sum / tokens).float(), "batches": done, "tokens": tokens}

    def check_finite(self, epoch_end: bool = False) -> None:
        """Raise `Diverged`, naming the optimizer step, if a training loss since the last check was not finite;
        first the head's own check (`Head.check_training`, at an epoch's end also its resizing), whose
        counters say why a loss was not finite. Called where the loss is read anyway (a log line, the end
        of an epoch, a validation)."""
        with sync_mode(self._sync_debug, "default"):
            self.head.check_training(epoch_end)
            self._now.watch.check(self.current_epoch, self.divergence_fix)

    def divergence_fix(self) -> str:
        """What to change when the training diverged."""
        return divergence_fix(self.hparams.optimizer["lr"], self.step_options.gradient_clip_val)

    def _log_window(self, epoch_end: bool = False) -> None:
        """Log the mean per-token training loss since the last call, after `check_finite` (a non-finite loss
        stops training with a one-line error).

        Inside the epoch the value goes to the loggers themselves, at the last optimizer step's place on
        their axis: `self.log` would leave it in Lightning's step results, which Lightning writes again
        at every later step it flushes (each step of several batches) until a new value comes."""
        self.check_finite(epoch_end)  # the read of the device every log_every_n_steps steps
        window = self._now.take_window()
        if window.batches == 0:
            return
        if epoch_end:
            self.log("train/loss", window.mean(), prog_bar=True, sync_dist=True)
        else:
            for logger in self.loggers:
                logger.log_metrics({"train/loss": window.mean().item()}, step=self.global_step - 1)

    def _validating_inside_fit(self) -> bool:
        return self.trainer.state.fn == "fit" and not self.trainer.sanity_checking

    def on_validation_start(self) -> None:
        if self._validating_inside_fit():  # validation inside a training epoch: not training time
            self._now.clock.pause()

    def on_validation_end(self) -> None:
        if self._validating_inside_fit():
            self._now.clock.resume()

    def on_train_epoch_end(self) -> None:
        self._now.ended = True  # (the checkpoints written from here on are of a whole epoch)
        self._log_window(epoch_end=True)
        seconds = self._now.clock.elapsed()
        nll_sum = self.trainer.strategy.reduce(self._now.loss.loss, reduce_op="sum")
        tokens = self._now.loss.tokens * self.trainer.world_size  # every rank trains as many batches
        self.log(self.train_ppl_name, torch.exp(nll_sum.double() / max(tokens, 1)), sync_dist=True)  # (float64: > 88 nats)
        figures, self.flops = speed_figures(tokens, seconds, self.flops, self.trainer.world_size)
        for name, value in figures.items():  # tokens per second, MFU, epoch time
            self.log(name, value, sync_dist=True)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]  # this epoch's (a copy: a captured step's is filled in place)
        self.log("train/lr", lr.clone() if isinstance(lr, torch.Tensor) else lr, sync_dist=True)
        if self.stepper.graph_steps() is not None:  # batches of this epoch that replayed the captured step
            self.log("train/graph_steps", float(self.stepper.graph_steps()), sync_dist=True)
        step_epoch_schedules(self.trainer, getattr(self, "_plateau_monitor", None))

    # -- evaluation ------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:  # a model that carries its state: its evaluation slot, reset
        self.model.reset_state("eval")  # (the training state stays as it was)

    on_test_epoch_start = on_validation_epoch_start

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

    def _log_text_figures(self, stage: str, split: str, metric: Perplexity, ppl: float) -> None:
        """`<stage>/bpb` and `<stage>/word_ppl` where the epoch scored every token of `split` (`TextFigures`)."""
        for name, value in self.text_figures.of_epoch(self.trainer, stage, split, metric, ppl).items():
            self.log(name, value, sync_dist=True)

    def best_val_figures(self) -> dict[str, float]:
        """`val/bpb_best` and `val/word_ppl_best`: those of `best_val_ppl`."""
        return self.text_figures.best(self.best_val_ppl)

    def configure_optimizers(self):
        # T of optimizer.cosine: nplm-train's plan counts optimizer steps (Lightning's estimate counts groups)
        total_steps = self.step_options.total_steps or self.trainer.estimated_stepping_batches
        config = build_optimizer(self, self.hparams.optimizer, total_steps)
        if isinstance(config, dict):  # manual optimization: training_step and step_epoch_schedules step them
            # (Lightning ignores, with a warning, a monitor under manual optimization: kept here instead)
            self._plateau_monitor = config["lr_scheduler"].pop("monitor", None)
        return config

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        write_entry(self, checkpoint)  # (nplm.training.checkpoint_entry)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        entry = read_entry(checkpoint)
        self.best_val_ppl, self._resumed_rng, self._epoch_so_far = entry["best_val_ppl"], entry["rng"], entry["epoch_so_far"]
        self.head.restore_sizes(entry["head_sizes"])
