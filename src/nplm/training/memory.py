"""Will the run fit in memory? Estimated before anything is allocated, and refused in one line if not.

The module is built on PyTorch's `meta` device (shapes only, no memory): its parameters (twice with
callbacks.ema_decay: their moving average), the optimizer's state after one step (Adam: 2 moments per
weight, SGD with momentum: 1, plain SGD: 0), the gradients, and the tensors one training batch
(`data.batch_size`) and one evaluation batch (`data.eval_batch_size`) produce (of windows, or of blocks of
`data.block_size` tokens), counted as the meta
forward pass makes them (the head's [B, V] scores where it has them). The sum is compared with the
memory available now: on a CPU the kernel's MemAvailable (and a cgroup's limit), on a GPU the free
memory of each device (`torch.cuda.mem_get_info`).
Too much: one line naming the sizes, the largest weights and the keys that set them, e.g.

    nplm: error: model.embed_dim=100000 model.hidden_dim=100000: the run needs about 480 GB of memory ...

The estimate is a bound from above of what training holds at once (every forward tensor kept for the
backward pass), so a run refused here would have failed; one let through may still be close.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch.overrides import TorchFunctionMode

from nplm.errors import UserError
from nplm.models import data_layout

log = logging.getLogger(__name__)

FLOAT_BYTES = 4


class _CountOutputs(TorchFunctionMode):
    """Adds up the bytes of every tensor the torch functions under it produce (on the meta device: none
    exist). Public API (`torch.overrides`): views are counted as new tensors, so the sum errs high."""

    def __init__(self):
        super().__init__()
        self.bytes = self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and not any(t is a for a in inputs):  # (an in-place op returns its input)
                size = t.numel() * t.element_size()
                self.bytes += size
                self.largest = max(self.largest, size)
        return out


def gigabytes(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.0f} MB"


def available_memory(accelerator: str, devices) -> tuple[int, str] | None:
    """(bytes free now, where): the smallest free memory of the GPUs the run uses, or the CPU's
    available memory (MemAvailable, within a cgroup's limit); None where it cannot be told."""
    if accelerator in ("gpu", "cuda") and torch.cuda.is_available():
        ids = list(devices) if isinstance(devices, (list, tuple)) else range(devices if isinstance(devices, int) else 1)
        free = [(torch.cuda.mem_get_info(i)[0], i) for i in ids if i < torch.cuda.device_count()]
        if not free:
            return None
        least, where = min(free)
        return least, f"free on GPU {where}"
    if accelerator == "mps":
        return None
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    if not found and hasattr(os, "sysconf"):
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError):
            pass
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap = Path(limit).read_text().strip()
            if cap.isdigit() and int(cap) < 1 << 60:
                found.append(int(cap) - int(Path(usage).read_text().strip()))
        except (OSError, ValueError):
            continue
    return (max(min(found), 0), "available") if found else None


def _processes(trainer: dict) -> int:
    """Training processes on this machine that each hold a copy (CPU DDP: one per device)."""
    devices = trainer.get("devices", 1)
    if trainer.get("accelerator", "cpu") in ("gpu", "cuda", "mps"):
        return 1  # each GPU has its own memory, checked per device
    return devices if isinstance(devices, int) else len(devices) if isinstance(devices, (list, tuple)) else 1


def _optimizer_state_bytes(module, optimizer: dict, params: int) -> int:
    """The optimizer's state after one step, measured on the meta device (fused kernels have no meta
    version: the unfused update keeps the same state)."""
    try:
        from nplm.optimizers import build_optimizer

        opt = build_optimizer(module, {**optimizer, **({"fused": False} if "fused" in optimizer else {})})
        opt = opt["optimizer"] if isinstance(opt, dict) else opt
        for p in module.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        return sum(t.numel() * t.element_size() for state in opt.state.values() for t in state.values()
                   if isinstance(t, torch.Tensor) and t.dim() > 0)
    except Exception:  # an optimizer that cannot step on meta: Adam's two moments, the most any has
        return 2 * params * FLOAT_BYTES


def _batch_bytes(module, batch: int, train: bool, block_size: int | None = None) -> int | None:
    k, T = module.model.context_size, block_size or 0
    context = torch.zeros(batch, T + k, dtype=torch.long, device="meta")  # [B, k] windows, [B, T + k] blocks
    target = torch.zeros(batch, *([T] if T else []), dtype=torch.long, device="meta")  # [B] or [B, T]
    count = _CountOutputs()
    try:
        with count, torch.set_grad_enabled(train):
            if train:
                module.head.loss(*module.features(context, target))
            else:
                module.head.nll(*module.features(context, target))
    except Exception:
        return None
    if train:  # every forward tensor kept for the backward pass, which holds about two gradients at a time
        return count.bytes + 2 * count.largest
    return min(count.bytes, 3 * count.largest)  # without gradients, each tensor is freed once used


def estimate(cfg: DictConfig, vocab, tree=None) -> dict | None:
    """Bytes the run needs: {"weights", "optimizer", "gradients", "activations", "total", "params",
    "largest": [(name, shape), ...], "vocab_size"}; `vocab` and `tree` as LanguageModel takes them (objects or
    dicts); None where the module cannot be built on the meta device (its
    real build then reports what is wrong)."""
    from nplm.training.module import LanguageModel

    plain = {g: OmegaConf.to_container(cfg[g], resolve=True) for g in ("model", "head", "optimizer")}
    try:
        with torch.device("meta"):
            module = LanguageModel(plain["model"], plain["head"], copy.deepcopy(plain["optimizer"]), vocab, tree=tree)
    except UserError:
        raise  # a bad combination of settings: the same line the real build would give
    except Exception as err:  # e.g. a head that reads a tensor's value while it is built
        log.debug("memory estimate skipped: %s cannot be built on the meta device (%s)", plain["head"]["name"], err)
        return None
    named = [(name, tuple(p.shape), p.numel()) for name, p in module.named_parameters()]
    params = sum(n for *_, n in named)
    vocab_size = len(module.vocab)
    per_word = sum(n for _, shape, n in named if vocab_size in shape)  # weights with a row per word
    weights = params * FLOAT_BYTES
    optimizer = _optimizer_state_bytes(module, plain["optimizer"], params)
    _, block_size, one_stream = data_layout(plain["model"], cfg.data.get("block_size"))
    train = _batch_bytes(module, int(cfg.data.batch_size), train=True, block_size=block_size) or 0
    eval_batch = 1 if one_stream else int(cfg.data.eval_batch_size)  # (evaluation in one stream: LMDataModule)
    evaluation = _batch_bytes(module, eval_batch, train=False, block_size=block_size) or 0
    activations = max(train, evaluation)
    averaged = weights if (cfg.get("callbacks") or {}).get("ema_decay") else 0  # callbacks.ema_decay's copy
    return {"params": params, "weights": weights + averaged, "gradients": weights, "optimizer": optimizer,
            "activations": activations, "activations_of": "data.batch_size" if train >= evaluation else "data.eval_batch_size",
            "total": 2 * weights + averaged + optimizer + activations,
            "largest": [(name, shape) for name, shape, _ in sorted(named, key=lambda t: -t[2])[:2]],
            "per_word": per_word, "vocab_size": vocab_size}


def _keys_behind(cfg: DictConfig, need: dict, vocab_size: int) -> list[str]:
    """The model and head keys whose values are dimensions of the largest weights, and the vocabulary
    where the weights with a row per word are a quarter of all or more."""
    dims = {d for _, shape in need["largest"] for d in shape}
    keys = [f"{group}.{key}={value}" for group in ("model", "head") for key, value in cfg[group].items()
            if isinstance(value, int) and not isinstance(value, bool) and value > 1 and value in dims]
    if need["per_word"] >= need["params"] / 4:
        keys.append(f"the vocabulary ({vocab_size:,} words: corpus.max_vocab / corpus.min_count)")
    return keys


def check_memory(cfg: DictConfig, vocab, tree=None) -> None:
    """Refuse, before it is allocated, a run whose model, optimizer state and batches cannot fit in
    the memory available now (`module docstring`). Rank 0 only: it counts every process of CPU DDP."""
    from pytorch_lightning.utilities import rank_zero_only

    if rank_zero_only.rank != 0:
        return
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    free = available_memory(trainer.get("accelerator", "cpu"), trainer.get("devices", 1))
    need = estimate(cfg, vocab, tree)
    if free is None or need is None:
        return
    processes = _processes(trainer)
    total = need["total"] * processes
    log.debug("memory: needs about %s (x%d processes), %s %s", gigabytes(need["total"]), processes,
              gigabytes(free[0]), free[1])
    if total <= free[0]:
        return
    keys = _keys_behind(cfg, need, need["vocab_size"])
    largest = ", ".join(f"{name} {list(shape)}" for name, shape in need["largest"])
    batch = need["activations_of"]
    batch = f"{batch}={cfg.data[batch.split('.')[1]]}"
    if need["activations"] > need["total"] / 2:  # the batch is most of the memory
        keys = [batch]
    elif need["activations"] > need["total"] / 4:
        keys.append(batch)
    lower = [k.split("=")[0] if "=" in k else k for k in keys]
    copies = f" x {processes} processes (trainer.devices)" if processes > 1 else ""
    raise UserError(
        f"{' '.join(k for k in keys if '=' in k) or 'this model'}: the run needs about {gigabytes(total)} of "
        f"memory{copies} ({need['params']:,} parameters: weights {gigabytes(need['weights'])}, gradients "
        f"{gigabytes(need['gradients'])}, optimizer state {gigabytes(need['optimizer'])}; activations of a batch "
        f"{gigabytes(need['activations'])}) but {gigabytes(free[0])} is {free[1]}; its largest weights are {largest}: "
        f"lower {', '.join(lower) or 'the model size'}")
