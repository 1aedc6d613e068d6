"""What a run sets for its whole process before it trains: CPU threads, TF32, the seed, and (when asked
for) malloc keeping freed memory."""

from __future__ import annotations

import os

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from nplm.fast.malloc import keep_freed_memory


def use_tf32(enabled: bool) -> None:
    """Config key `tf32`: on a CUDA GPU, float32 matmuls on TF32 tensor cores (Ampere and later) or in
    full float32; nothing on a CPU."""
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.set_float32_matmul_precision("high" if enabled else "highest")


def threads_of(cfg: DictConfig) -> int | None:
    """`threads`, or under the parallel (joblib) launcher each job's share of the cores."""
    if cfg.get("threads"):
        return int(cfg.threads)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        launcher = HydraConfig.get().launcher
        if "joblib" in str(launcher.get("_target_", "")):
            return max(1, (os.cpu_count() or 1) // max(1, int(launcher.get("n_jobs") or 1)))
    return None


def set_up_process(cfg: DictConfig) -> None:
    """Threads (`threads`), TF32 on CUDA (`tf32`), `malloc_keep_freed`, and every seed (`seed`)."""
    threads = threads_of(cfg)
    if threads:
        torch.set_num_threads(threads)
    use_tf32(bool(cfg.get("tf32", True)))
    if cfg.get("malloc_keep_freed", False):  # asked for: it changes malloc for the whole process (nplm.fast.malloc)
        keep_freed_memory()
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
