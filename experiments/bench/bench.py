"""Speed benchmark of the training pipeline, measured side by side in one run.

(a) batches from the LMDataModule: training examples per second (target >= 1M/s);
(b) training examples/s of Bengio's MLP1 (n=5, m=60, h=50, direct, softmax) at the Brown vocabulary,
    inside Lightning and in a plain PyTorch loop on the same batches (target: overhead <= 10%);
(c) the training step's FLOP rate as a fraction of this machine's measured fp32 matmul peak
    (target >= 60%);
then an ablation of the CPU speed-ups of the full softmax's step, in the plain loop: the gradients by
hand (`nplm.fast.backprop`), the output layer's matmuls through `nplm.fast.cpu_gemm` and malloc keeping
large buffers (`nplm.fast.malloc`).

    python experiments/bench/bench.py [--batch-size 1024] [--steps 40] [--out experiments/bench/results]

Brown is read from NLTK_DATA when present; otherwise (or with `--synthetic`) a random stream with the same |V|.
Writes results/<machine>/bench.json (harness.write_result).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

from nplm.fast import backprop
from nplm.data.datamodule import LMDataModule
from nplm.errors import UserError
from nplm.training.module import LanguageModel
from nplm.heads.softmax import SoftmaxNLL
from nplm.fast.malloc import keep_freed_memory
from nplm.optimizers import build_optimizer
from nplm.optimizers.lazy import step_without_profiler
from nplm.data.vocabulary import Vocabulary

ADAM = {"name": "adam", "lr": 1e-3}
MLP1 = {"context_size": 4, "embed_dim": 60, "hidden_dim": 50, "direct": True}
BROWN = {"name": "brown", "nltk_data": os.environ.get("NLTK_DATA"), "download": False, "train_size": 800_000,
         "valid_size": 200_000, "test_size": None, "vocab_from": "all", "min_count": 4}


def datamodule(batch_size: int, synthetic: bool = False) -> tuple[LMDataModule, str]:
    """Brown's batches, or (`synthetic`, or where Brown is missing) a random stream with Brown's |V|."""
    try:
        if not synthetic:
            dm = LMDataModule(BROWN, MLP1["context_size"], batch_size, 1024)
            dm.setup()
            return dm, "Brown (NLTK), |V| = 17,905"
    except UserError:
        pass
    vocab = Vocabulary([f"w{i}" for i in range(17_904)] + ["<unk>"], [1] * 17_905)
    dm = LMDataModule({"name": "synthetic"}, MLP1["context_size"], batch_size, 1024, vocab=vocab)
    ids = torch.randint(0, 17_905, (1_000_000,), generator=torch.Generator().manual_seed(0))
    from nplm.data.windows import Windows

    dm.windows = {split: Windows(ids, MLP1["context_size"]) for split in ("train", "valid")}
    return dm, "synthetic stream, |V| = 17,905"


def loader_rate(dm: LMDataModule) -> float:
    """Training examples per second delivered by one full epoch of the train dataloader."""
    start, n = time.perf_counter(), 0
    for context, target in dm.train_dataloader():
        n += target.numel()
    return n / (time.perf_counter() - start)


def matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    """Best fp32 FLOP/s of an n x n x n matmul on this machine."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def step_flops(batch: int, vocab: int, k: int, m: int, h: int) -> float:
    """Matmul FLOPs of one training step: 2 per multiply-add; the backward pass costs twice the
    forward (a gradient for each layer's weights and one for its input, which flows on to C)."""
    features = k * m + h
    forward = 2 * batch * (k * m * h + features * vocab)
    return 3 * forward


def make_module(dm: LMDataModule) -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(MLP1, {"name": "softmax"}, ADAM, dm.vocab.to_dict())


def plain_loop(dm: LMDataModule, steps: int, warmup: int, nll=None) -> float:
    """Examples/s of a hand-written loop: the same module, optimizer and batches, no Lightning, the
    gradients and optimizer step as the module's training step does them (`nplm.fast.backprop`,
    `step_without_profiler`). `nll(module)`: the per-example loss to train on instead, through
    autograd and `optimizer.step()` (the ablation)."""
    module = make_module(dm)
    optimizer = build_optimizer(module, ADAM)  # what configure_optimizers builds
    batches = iter(dm.train_dataloader())
    n, start = 0, None
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        context, target = next(batches)
        optimizer.zero_grad(set_to_none=True)
        if nll is None:
            backprop.train_loss(module.model, module.head, context, target, 1 / len(target))  # nplm-train's step
            step_without_profiler(optimizer)
        else:
            nll(module)(context, target).mean().backward()
            optimizer.step()
        n += target.numel() if i >= warmup else 0
    return n / (time.perf_counter() - start)


def old_output_layer(module: LanguageModel):
    """The NLL as before the CPU path: nn.Linear's addmm (MKL) and autograd's weight gradient."""
    head = module.head
    return lambda context, target: SoftmaxNLL.apply(head.out(module.model(context)), target)


ABLATION = {  # name: (gradients by hand, the output layer's CPU path, malloc keeps large buffers)
    "as shipped": (True, True, True), "autograd": (False, True, True),
    "autograd, nn.Linear output layer": (False, False, True), "glibc's default malloc": (True, True, False),
    "none of the three": (False, False, False)}


def ablation_child(name: str, args: argparse.Namespace) -> None:
    """One measurement of the ablation, in a process of its own: malloc's setting cannot be undone in a
    process (its heap keeps the buffers it was allowed to keep), so each variant starts from glibc's
    defaults and sets what it needs."""
    by_hand, cpu_path, keep = ABLATION[name]
    if keep:
        keep_freed_memory()
    dm, _ = datamodule(args.batch_size, args.synthetic)
    nll = None if by_hand else (lambda module: module.nll) if cpu_path else old_output_layer
    print(plain_loop(dm, args.steps, args.warmup, nll))


def ablation(args: argparse.Namespace) -> tuple[list[str], dict[str, list[float]]]:
    """Examples/s of the plain loop with the CPU speed-ups off in turn, a fresh process per measurement,
    interleaved: rows of a markdown table with the median ratio to 'none of the three', and the rates."""
    rates = {name: [] for name in ABLATION}
    for _ in range(args.ablation_rounds):
        for name in ABLATION:
            command = [sys.executable, __file__, "--ablation-child", name, "--threads", str(torch.get_num_threads()),
                       *(["--synthetic"] if args.synthetic else []),
                       "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            rates[name].append(float(out.split()[-1]))
    base = rates["none of the three"]
    rows = ["| plain loop, MLP1 | examples/s (median) | vs none of the three (min-max per round) |", "|---|---:|---:|"]
    rows += [f"| {name} | {harness.median(v):,.0f} | {harness.ratio(v, base)} |" for name, v in rates.items()]
    return rows, rates


class _Clock(pl.Callback):
    def __init__(self, warmup: int):
        self.warmup, self.start, self.end, self.examples = warmup, None, None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.warmup:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            self.examples += batch[1].numel()
            self.end = time.perf_counter()


def lightning_loop(dm: LMDataModule, steps: int, warmup: int) -> float:
    """Examples/s of the same training inside `pl.Trainer`, one batch per Lightning step (no logger)."""
    module = make_module(dm)
    clock = _Clock(warmup)
    trainer = pl.Trainer(max_steps=warmup + steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
                         accelerator="cpu", devices=1)
    trainer.fit(module, train_dataloaders=dm.train_dataloader())
    return clock.examples / (clock.end - clock.start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=1024, help="training batch size (default 1024)")
    parser.add_argument("--steps", type=int, default=40, help="timed training steps per loop (default 40)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds, median ratio (default 5)")
    parser.add_argument("--ablation-rounds", type=int, default=5,
                        help="rounds of the ablation of the three CPU speed-ups (0: none; default 5)")
    parser.add_argument("--synthetic", action="store_true", help="a random stream with Brown's |V| instead of Brown")
    parser.add_argument("--out", type=Path, default=harness.RESULTS, help="the results folder (default: results/)")
    parser.add_argument("--ablation-child", choices=list(ABLATION), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.ablation_child:
        return ablation_child(args.ablation_child, args)
    keep_freed_memory()  # as nplm-train with malloc_keep_freed=true: both loops reuse the [B, V] buffers between steps

    dm, source = datamodule(args.batch_size, args.synthetic)
    V = len(dm.vocab)
    rate_loader = loader_rate(dm)
    # the peak, the plain loop and Lightning in alternated rounds; ratios are taken within a round
    measured = harness.alternate({"peak": matmul_peak, "plain": lambda: plain_loop(dm, args.steps, args.warmup),
                                  "lightning": lambda: lightning_loop(dm, args.steps, args.warmup)}, args.rounds)
    peaks, plains, lits = measured["peak"], measured["plain"], measured["lightning"]
    flops_per_example = step_flops(1, V, MLP1["context_size"], MLP1["embed_dim"], MLP1["hidden_dim"])
    overheads = [p / q - 1 for p, q in zip(plains, lits)]
    fractions = [q * flops_per_example / k for q, k in zip(lits, peaks)]
    overhead, fraction, med = harness.median(overheads), harness.median(fractions), harness.median

    def spread(values, scale=100.0):
        return f"({min(values) * scale:.1f} to {max(values) * scale:.1f} per round)"

    rows = [
        ("(a) DataModule batches", f"{rate_loader:,.0f} examples/s", ">= 1,000,000 examples/s",
         "yes" if rate_loader >= 1e6 else "no"),
        ("(b) MLP1 training, plain PyTorch loop", f"{med(plains):,.0f} examples/s (median)", "", ""),
        ("(b) MLP1 training, Lightning", f"{med(lits):,.0f} examples/s (median)", "", ""),
        ("(b) Lightning overhead", f"{overhead * 100:.1f}% {spread(overheads)}", "<= 10%",
         "yes" if overhead <= 0.10 else "no"),
        ("(c) measured fp32 matmul peak (2048^3)", f"{med(peaks) / 1e9:.1f} GFLOP/s (median)", "", ""),
        ("(c) MLP1 training step, Lightning", f"{med(lits) * flops_per_example / 1e9:.1f} GFLOP/s (median)", "", ""),
        ("(c) fraction of peak", f"{fraction * 100:.1f}% {spread(fractions)}", ">= 60%",
         "yes" if fraction >= 0.6 else "no"),
    ]
    table = [f"Data: {source}. Batch size {args.batch_size}, {args.steps} timed steps after {args.warmup} warm-up "
             f"steps, {args.rounds} rounds; MLP1 = n=5, m=60, h=50, direct, full softmax, Adam. Matmul FLOPs per "
             f"training example: {flops_per_example / 1e6:.1f} M.", "",
             "| measurement | value | target | met |", "|---|---|---|---|"]
    table += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    data = {"loader_examples_per_s": rate_loader, **measured, "flops_per_example": flops_per_example}
    if args.ablation_rounds:
        table += ["", f"Ablation, the plain loop ({args.ablation_rounds} interleaved rounds): the gradients by hand "
                  "(`nplm.fast.backprop`, else autograd and `optimizer.step()`), the output layer's CPU path "
                  "(`nplm.fast.cpu_gemm`) and malloc keeping large buffers (`nplm.fast.malloc`), off in turn; a "
                  "fresh process per measurement.", ""]
        rows, data["ablation"] = ablation(args)
        table += rows
    harness.write_result("bench", table, data, args.out)


if __name__ == "__main__":
    main()
