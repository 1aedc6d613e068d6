"""Training speed of the Tiny Shakespeare character model: the reference notebook's loop vs nplm.

Side by side in one process, the contenders alternated in rounds (so a load on the shared machine
hits all of them alike; the order rotated by one every round), each timing `--steps` training steps
after `--warmup` untimed ones:

- `notebook`: a faithful copy of the notebook's loop: windows built as Python lists then
  `torch.tensor`, `TensorDataset` + `DataLoader(batch_size=128, shuffle=True)`, y = W x + U tanh(H x) + b
  from an `nn.Embedding` and three `nn.Linear`, `nn.CrossEntropyLoss`, `torch.optim.Adam(lr=1e-3)`;
- `plain`: nplm's model + softmax head + optimizer (fused Adam) on nplm's batches, a hand-written loop,
  the gradients and the optimizer step as nplm-train does them for this model (by hand:
  `nplm.fast.backprop`; `nplm.optimizers.lazy.step_without_profiler`);
- `plain, autograd`: the same loop with `loss.backward()` and `optimizer.step()` (as nplm-train did
  before those two);
- `nplm-train`: `train(cfg)` of `experiment=tinyshakespeare_char` (what `nplm-train` runs, its callbacks,
  checkpoints and CSV + W&B-offline loggers), its own `train/tokens_per_s` (the epoch's training time,
  validation excluded, the warm-up steps included);
- with `--compile`: `plain+compile`, the plain loop with the training loss through
  `torch.compile(fullgraph=True)` as `compile=true` does (compiled in the warm-up steps; nplm-train's
  own tokens/s would count the compilation);
- with `--fallbacks`: `nplm-train, LightningOptimizer.step` (Lightning's step counter taken as
  missing, `nplm.training.lightning_counters.LIGHTNING_COUNTERS`: every optimizer step through Lightning) and
  `nplm-train, public APIs only` (every speed path's capability check forced to say no, as on a
  torch and Lightning without the private parts they use: `every_fallback`).

Context 10, m = 32, h = 128, direct connections, batch 128, Adam 1e-3, `--threads` torch threads. Malloc
as glibc sets it (nplm-train's default, `malloc_keep_freed=false`; this model's buffers are small).

    python experiments/bench/notebook_vs_trainer.py [--rounds 5] [--steps 3000] [--threads 2] [--compile] [--fallbacks]
                                                    [--out experiments/bench/results]

Writes results/<machine>/notebook_vs_trainer.json (harness.write_result).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

K, M, H, BATCH = 10, 32, 128, 128
MODEL = {"context_size": K, "embed_dim": M, "hidden_dim": H, "direct": True}


def character_datamodule():
    """nplm's Tiny Shakespeare batches for the notebook's model: 90% train, characters in sorted order."""
    from nplm.data.datamodule import LMDataModule

    dm = LMDataModule({"name": "tiny_shakespeare", "train_size": 0.9, "test_size": 0, "vocab_from": "all",
                       "min_count": 1, "unk": None, "order": "sorted"}, K, BATCH, 1024)
    dm.setup()
    return dm


# -- the notebook's loop, as it is written there -------------------------------------------------
class NotebookNPLM(nn.Module):
    def __init__(self, vocab_size: int, context: int, m: int, h: int):
        super().__init__()
        self.C = nn.Embedding(vocab_size, m)
        self.H = nn.Linear(context * m, h)
        self.U = nn.Linear(h, vocab_size)
        self.W = nn.Linear(context * m, vocab_size, bias=False)

    def forward(self, x):
        x = self.C(x).view(x.shape[0], -1)
        return self.W(x) + self.U(torch.tanh(self.H(x)))


def notebook_loop(text: str, steps: int, warmup: int) -> float:
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = [stoi[c] for c in text[: int(0.9 * len(text))]]
    X, Y = [], []
    for i in range(len(data) - K):
        X.append(data[i:i + K])
        Y.append(data[i + K])
    X, Y = torch.tensor(X), torch.tensor(Y)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=BATCH, shuffle=True)
    model = NotebookNPLM(len(chars), K, M, H)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    n, start, i = 0, 0.0, 0
    while i < warmup + steps:
        for xb, yb in loader:
            if i == warmup:
                start = time.perf_counter()
            logits = model(xb)
            loss = criterion(logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            n += yb.numel() if i >= warmup else 0
            i += 1
            if i == warmup + steps:
                break
    return n / (time.perf_counter() - start)


# -- nplm's model, head and optimizer in a plain loop ------------------------------------------------
def plain_loop(dm, steps: int, warmup: int, compile_step: bool = False, autograd: bool = False) -> float:
    from nplm.fast import backprop
    from nplm.heads import build_head
    from nplm.models.nplm import NPLM, NPLMConfig
    from nplm.optimizers import build_optimizer

    from nplm.optimizers.lazy import step_without_profiler

    model = NPLM(len(dm.vocab), NPLMConfig(**MODEL))
    head = build_head({"name": "softmax"}, model.feature_dim, len(dm.vocab))
    both = nn.ModuleDict({"model": model, "head": head})
    optimizer = build_optimizer(both, {"name": "adam", "lr": 1e-3})

    def step(context, target):
        return head.loss(model(context), target)

    if compile_step:
        step = torch.compile(step, fullgraph=True)
    by_hand = not (compile_step or autograd)  # as nplm-train trains this model (nplm.fast.backprop)
    n, start, i = 0, 0.0, 0
    while i < warmup + steps:
        for context, target in dm.train_dataloader():
            if i == warmup:
                start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            if by_hand:
                backprop.train_loss(model, head, context, target, 1 / len(target))  # nplm-train's step
                step_without_profiler(optimizer)
            else:
                step(context, target).mean().backward()
                optimizer.step()
            n += target.numel() if i >= warmup else 0
            i += 1
            if i == warmup + steps:
                break
    return n / (time.perf_counter() - start)


# -- nplm-train ------------------------------------------------------------------------------------
def nplm_train(steps: int, warmup: int, threads: int, *extra: str) -> float:
    from hydra import compose, initialize_config_dir

    from nplm.config import CONF_DIR
    from nplm.training.train import train

    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["experiment=tinyshakespeare_char", f"paths.output_dir={tmp}/run", f"paths.data_dir={tmp}/data",
                     f"threads={threads}",
                     "trainer.max_epochs=1", f"trainer.limit_train_batches={warmup + steps}",
                     "trainer.limit_val_batches=1", "trainer.enable_progress_bar=false", *extra]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
        return train(cfg)["train/tokens_per_s"]


# Each speed path's capability check and the value that makes it say no (module, name, value)
FALLBACKS = [("nplm.training.lightning_counters", "LIGHTNING_COUNTERS", False),
             ("nplm.data.datamodule", "LIGHTNING_EPOCH_PROGRESS", False),
             ("nplm.fast.backprop", "hooks_visible", lambda: False),
             ("nplm.fast.cpu_gemm", "onednn_linear_works", lambda: False),
             ("nplm.optimizers.lazy", "fused_adam_kernels", lambda: False),
             ("nplm.optimizers.lazy", "torch_step_wrapper", lambda: False)]


@contextmanager
def fallbacks(*names: str):
    """Inside the block, the capability checks `names` (all of FALLBACKS when none) say no."""
    saved = []
    for module, name, value in FALLBACKS:
        if names and name not in names:
            continue
        found = importlib.import_module(module)
        saved.append((found, name, getattr(found, name)))
        setattr(found, name, value)
    try:
        yield
    finally:
        for found, name, value in saved:
            setattr(found, name, value)


def nplm_train_with(steps: int, warmup: int, threads: int, *names: str) -> float:
    with fallbacks(*names):
        return nplm_train(steps, warmup, threads)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds of all contenders (default 5)")
    parser.add_argument("--steps", type=int, default=3000, help="timed steps per contender and round")
    parser.add_argument("--warmup", type=int, default=200, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the notebook's 2)")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (compile=true)")
    parser.add_argument("--fallbacks", action="store_true", help="also time nplm-train with its speed paths' fallbacks")
    parser.add_argument("--out", type=Path, default=harness.RESULTS, help="the results folder (default: results/)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import logging

    logging.disable(logging.INFO)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")

    dm = character_datamodule()
    from nplm.data.corpora import load_corpus

    corpus = load_corpus({"name": "tiny_shakespeare", "train_size": 0.9, "test_size": 0}, "data_cache")
    text = "".join(corpus.train) + "".join(corpus.valid)

    contenders = {
        "notebook": lambda: notebook_loop(text, args.steps, args.warmup),
        "plain": lambda: plain_loop(dm, args.steps, args.warmup),
        "plain, autograd": lambda: plain_loop(dm, args.steps, args.warmup, autograd=True),
        "nplm-train": lambda: nplm_train(args.steps, args.warmup, args.threads),
    }
    if args.compile:
        contenders["plain+compile"] = lambda: plain_loop(dm, args.steps, args.warmup, compile_step=True)
    if args.fallbacks:
        contenders["nplm-train, LightningOptimizer.step"] = lambda: nplm_train_with(
            args.steps, args.warmup, args.threads, "LIGHTNING_COUNTERS")
        contenders["nplm-train, public APIs only"] = lambda: nplm_train_with(args.steps, args.warmup, args.threads)
    print(harness.stamp(), flush=True)
    rounds: list[str] = []

    def progress(r: int, rates: dict[str, list[float]]) -> None:
        rounds.append(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in rates.items()))
        print(rounds[-1], flush=True)

    rates = harness.alternate(contenders, args.rounds, progress)
    harness.write_result("notebook_vs_trainer", table(rates, args.steps, args.rounds), {"examples_per_s": rates},
                         args.out, notes=["```text", *rounds, "```"])


def table(rates: dict[str, list[float]], steps: int, rounds: int) -> list[str]:
    """Each loop's median examples/s and its per-round ratios to the notebook's loop and to the plain loop."""
    lines = [f"| training loop (batch {BATCH}, {steps} timed steps x {rounds} rounds) | examples/s, median "
             "| vs notebook, median (min-max per round) | vs plain, median (min-max per round) |",
             "|---|---:|---:|---:|"]
    for name, v in rates.items():
        lines.append(f"| {name} | {harness.median(v):,.0f} | {harness.ratio(v, rates['notebook'])} | "
                     f"{harness.ratio(v, rates['plain'])} |")
    return lines


if __name__ == "__main__":
    main()
