"""The LightningModule: an NPLM feature extractor + an output head -> NLL, perplexity, logging."""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager

import pytorch_lightning as pl
import torch

from nplm.data.vocabulary import Vocabulary
from nplm.errors import UserError
from nplm.heads import build_head
from nplm.models import NPLM, NPLMConfig
from nplm.optim import OptimizerConfig, build_optimizer
from nplm.perplexity import Perplexity
from nplm.trees.tree import Tree

CHECKPOINT_KEY = "nplm"  # our entry in Lightning checkpoints: vocabulary and tree, as plain lists


def use_tf32(enabled: bool) -> None:
    """Config key `tf32`: on a CUDA GPU, float32 matmuls on TF32 tensor cores (Ampere and later) or in
    full float32; nothing on a CPU."""
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.set_float32_matmul_precision("high" if enabled else "highest")


class LanguageModel(pl.LightningModule):
    """Trains `head.loss(model(context), target)` and evaluates the exact `head.nll`; logs
    `train/ppl` (`train/ppl_sampled` for heads trained on a sampled loss), `val/ppl`, `val/ppl_best`,
    `test/ppl` (token-weighted over the whole split), `train/tokens_per_s` and `train/lr`.

    Hyperparameters are plain dicts, so checkpoints load with `torch.load(weights_only=True)`.
    """

    def __init__(self, model: dict, head: dict, optimizer: dict, vocab: dict, data: dict | None = None,
                 tree: dict | None = None):
        """`model`, `head`, `optimizer`: their config groups; `vocab`: `Vocabulary.to_dict()`;
        `data`: the corpus config and batch sizes, kept so a checkpoint can be evaluated again;
        `tree`: `Tree.to_dict()` for tree-structured heads. Vocabulary and tree travel in the
        checkpoint's own entry, not in the hyperparameters."""
        super().__init__()
        self.save_hyperparameters(ignore=["vocab", "tree"])
        self.vocab = Vocabulary.from_dict(vocab)
        self.tree = Tree.from_dict(tree) if tree is not None else None
        self.model_cfg = NPLMConfig.from_dict(model)
        self.optim_cfg = OptimizerConfig.from_dict(optimizer)
        self.model = NPLM(len(self.vocab), self.model_cfg)
        self.head = build_head(head, self.model.feature_dim, len(self.vocab), self.vocab.counts, self.tree)
        # Heads that train on a sampled objective report its perplexity under another name.
        self.train_ppl_name = "train/ppl" if self.head.exact_training_loss else "train/ppl_sampled"
        self.val_ppl, self.test_ppl = Perplexity(), Perplexity()
        self.best_val_ppl = math.inf

    # -- the model ---------------------------------------------------------------------------
    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """Context ids `[B, n-1]` -> log-distribution over the next token `[B, V]`."""
        return self.head.log_probs(self.model(context))

    def nll(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.head.nll(self.model(context), target)  # [B]

    # -- training --------------------------------------------------------------------------
    def compile_training_step(self, backend: str | None = None) -> None:
        """`compile=true`: the model + head training loss through `torch.compile(fullgraph=True)`
        (a graph break fails loudly: it is a bug, and on a GPU often a host-device sync). `backend`:
        torch.compile's, default env `NPLM_COMPILE_BACKEND` or "inductor" (tests use "aot_eager":
        the same graph capture, no code generation)."""
        backend = backend or os.environ.get("NPLM_COMPILE_BACKEND", "inductor")
        self._train_loss = torch.compile(self._train_loss, fullgraph=True, backend=backend)

    def _train_loss(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.head.loss(self.model(context), target)  # [B]

    def on_train_start(self) -> None:
        # NPLM_SYNC_DEBUG=1 on a GPU: any host-device sync in a training step (forward, backward,
        # optimizer update) raises (experiments/bench/gpu_check.py)
        self._sync_debug = os.environ.get("NPLM_SYNC_DEBUG") == "1" and self.device.type == "cuda"

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

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        # the closure runs training_step and backward; the first step (compilation, the optimizer's
        # state) is left unchecked
        with self._sync_mode("error" if self.global_step > 0 else "default"):
            optimizer.step(closure=optimizer_closure)

    def on_train_epoch_start(self) -> None:
        self._train_seconds, self._clock = 0.0, time.perf_counter()
        self._epoch_tokens = 0
        self._nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)  # sum of per-token NLL
        self._reset_window()

    def _reset_window(self) -> None:
        """The loss summed over the steps since the last log line (a device tensor: no sync per step)."""
        self._window_loss = torch.zeros((), device=self.device)
        self._window_steps = 0

    def training_step(self, batch, batch_idx):
        """No host-device sync: the loss and NLL sums stay on the device; they are read, and checked
        for a NaN/inf, every `trainer.log_every_n_steps` steps and at the end of the epoch."""
        context, target = batch
        nll = self._train_loss(context, target)  # [B]
        loss = nll.mean()
        detached = nll.detach()
        self._nll_sum += detached.sum(dtype=torch.float64)
        self._window_loss += loss.detach()
        self._window_steps += 1
        self._epoch_tokens += target.numel()
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:  # the steps Lightning's loggers write
            self._log_window()
        return loss

    def _log_window(self) -> None:
        """Log the mean training loss since the last call; a non-finite sum (one NaN or inf step makes
        it so for good) stops training with a one-line error."""
        if self._window_steps == 0:
            return
        mean = self._window_loss / self._window_steps
        with self._sync_mode("default"):  # the one read of the device every log_every_n_steps steps
            if not torch.isfinite(mean):
                last = self.global_step
                raise UserError(
                    f"training loss became {mean.item()} between steps {last - self._window_steps + 1} and "
                    f"{last + 1} (epoch {self.current_epoch}); lower the learning rate, e.g. "
                    f"optimizer.lr={self.optim_cfg.lr / 10:g}"
                )
        self.log("train/loss", mean, prog_bar=True)
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
        self._log_window()
        seconds = self._train_seconds + (time.perf_counter() - self._clock)
        strategy = self.trainer.strategy
        nll_sum = strategy.reduce(self._nll_sum, reduce_op="sum")
        tokens = self._epoch_tokens * self.trainer.world_size  # every rank trains as many batches
        self.log(self.train_ppl_name, torch.exp(nll_sum / max(tokens, 1)).float(), sync_dist=True)
        self.log("train/tokens_per_s", tokens / max(seconds, 1e-9), sync_dist=True)
        self.log("train/epoch_time_s", seconds, sync_dist=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], sync_dist=True)

    # -- evaluation ------------------------------------------------------------------------
    def validation_step(self, batch, batch_idx):
        self.val_ppl.update(self.nll(*batch))

    def on_validation_epoch_end(self) -> None:
        ppl = self.val_ppl.compute().item()
        self.val_ppl.reset()
        if not self.trainer.sanity_checking:
            self.best_val_ppl = min(self.best_val_ppl, ppl)
        self.log("val/ppl", ppl, prog_bar=True, sync_dist=True)
        self.log("val/ppl_best", self.best_val_ppl, sync_dist=True)

    def test_step(self, batch, batch_idx):
        self.test_ppl.update(self.nll(*batch))

    def on_test_epoch_end(self) -> None:
        self.log("test/ppl", self.test_ppl.compute().item(), sync_dist=True)
        self.test_ppl.reset()

    def configure_optimizers(self):
        return build_optimizer(self, self.optim_cfg)

    # -- checkpoints -----------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = {"vocab": self.vocab.to_dict(), "best_val_ppl": self.best_val_ppl,
                                      "tree": self.tree.to_dict() if self.tree is not None else None}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.best_val_ppl = checkpoint[CHECKPOINT_KEY]["best_val_ppl"]
