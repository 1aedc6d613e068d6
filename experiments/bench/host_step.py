"""What nplm-train costs the host per optimizer step, beside the step itself.

On a GPU a captured training step is one graph replay, so what else the loop does per step (Lightning's
hooks once per `steps_per_execution` batches, the batch gather and the copies into the static inputs, the
schedules, the moving average of the weights, nplm's counters) decides whether the card waits for the
host: at `experiment=sun2021/brown`'s batch 256 with `compile=true` the replayed step takes about 0.55 ms
on an H200 (gpu_compile_capture_e165a55.md) and nplm-train ran 0.66 ms a step.

This measures that host work with the step's own work left out: nplm-train in the captured step's dry mode
(`NPLM_CAPTURE_DRY=1`: the step function on static input buffers, without a graph, on any device) with that
step function replaced by nothing, so a step costs what the loop around it costs. `experiment=sun2021/brown`
on a synthetic Zipfian corpus of |V| = 10,000 (gpu_step.py's), batch 256, 1 torch thread; on a CPU the model
is shrunk (width 8, hidden 16) so that each of the loop's own tensor ops (a lerp of a parameter, a copy)
costs about what launching it on a GPU costs the host. A step's time is the median, over the second epoch's
Lightning steps, of the time from one Lightning step's start to the next's over its optimizer steps. Beside
it, in the same run, the plain captured loop's host work per step (the two copies into its static inputs;
the replay itself is the same call in both). `--baseline REV` measures a git revision's nplm the same way, alternating with this checkout's.

    python experiments/bench/host_step.py [--device cpu|cuda] [--batches 2000] [--rounds 3]
                                          [--baseline REV] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

VARIANTS = {  # name: nplm-train overrides
    "default (steps_per_execution=16, EMA)": [],
    "no EMA (callbacks.ema_decay=null)": ["callbacks.ema_decay=null"],
    "steps_per_execution=64": ["steps_per_execution=64"],
    "steps_per_execution=1": ["steps_per_execution=1"],
}
TINY = ["model.embed_dim=8", "model.hidden_dim=16"]  # the CPU's stand-in for launch-sized ops


def child(src: str, variant: str, device: str, batches: int, corpus: dict, tmp: str) -> dict:
    """One nplm-train run of `variant` with the nplm package at `src` (in this process)."""
    sys.path.insert(0, src)
    import nplm.training.capture as capture

    if not capture.__file__.startswith(src):
        raise SystemExit(f"host_step: imported nplm from {capture.__file__}, not from {src}")
    clock = GroupClock()
    metrics = stepless_run(corpus, tmp, batches, device, VARIANTS[variant], clock)
    return {"us_per_step": clock.median_us(), "epoch_us_per_step": 1e6 * 256 / metrics["train/tokens_per_s"],
            "graph_steps": metrics.get("train/graph_steps") or 0}


def stepless_run(corpus: dict, folder: str, batches: int, device: str, extra: list[str], callback: pl.Callback) -> dict:
    """nplm-train's metrics for `experiment=sun2021/brown` at batch 256 on `corpus`, two epochs of `batches` batches,
    1 thread, `extra` overrides, in the captured step's dry mode with the step's own work left out, `callback` added
    to its Trainer; on a CPU with the model shrunk (TINY), on CUDA bf16-mixed."""
    os.environ["NPLM_CAPTURE_DRY"] = "1"
    from hydra import compose, initialize_config_dir

    import nplm.training.capture as capture
    import nplm.training.train as train_module
    from nplm.config import CONF_DIR

    capture.CapturedStep._eager = lambda self, context, target: None  # the step's own work, left out
    overrides = ["experiment=sun2021/brown", "corpus=text_files", f"corpus.train={corpus['train']}",
                 f"corpus.valid={corpus['valid']}", "data.batch_size=256", "trainer.max_epochs=2",
                 f"trainer.limit_train_batches={batches}", "trainer.limit_val_batches=1", "threads=1",
                 "callbacks.early_stopping_patience=null", "logger=none", "trainer.enable_progress_bar=false",
                 f"paths.output_dir={folder}/run", f"paths.data_dir={folder}/data", *extra]
    overrides += ["trainer=gpu", "trainer.precision=bf16-mixed"] if device == "cuda" else TINY
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    # the callback through build_trainer's `extra_callbacks` rather than train's `callbacks`, which a --baseline
    # revision may predate
    build = train_module.build_trainer
    train_module.build_trainer = lambda *args, extra_callbacks=(), **kwargs: build(
        *args, extra_callbacks=[*extra_callbacks, callback], **kwargs)
    try:
        return train_module.train(cfg)
    finally:
        train_module.build_trainer = build


class GroupClock(pl.Callback):
    """The time from one Lightning step's start to the next's, over the optimizer steps between them, in the
    second epoch: the median of these is robust to a garbage collection or a neighbour's burst."""

    def __init__(self):
        self.marks: list[tuple[float, int]] = []

    def on_train_batch_start(self, trainer, *args) -> None:
        if trainer.current_epoch == 1:
            self.marks.append((time.perf_counter(), trainer.global_step))

    def median_us(self) -> float:
        rates = [1e6 * (t1 - t0) / (s1 - s0) for (t0, s0), (t1, s1) in zip(self.marks, self.marks[1:]) if s1 > s0]
        return statistics.median(rates)


def loop_host(device: str, batches: int) -> float:
    """The plain captured loop's host work per step: a batch copied into the two static inputs."""
    import torch

    context = torch.randint(0, 10_000, (256, 33), device=device)
    static = (torch.empty(256, 32, dtype=torch.long, device=device), torch.empty(256, dtype=torch.long, device=device))
    start = time.perf_counter()
    for _ in range(batches):
        static[0].copy_(context[:, :-1])
        static[1].copy_(context[:, -1])
    if device == "cuda":
        torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - start) / batches


def worktree(rev: str, root: Path) -> str:
    """A detached worktree of `rev` under `root`; its src folder."""
    path = root / f"baseline-{rev}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return str(path / "src")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batches", type=int, default=2000, help="training batches of 256 per epoch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", help="a git revision measured beside this checkout")
    parser.add_argument("--variants", help="comma-separated names' first words (default: all)")
    parser.add_argument("--out", type=Path, help="writes host_step.json and host_step.md there")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print("RESULT " + json.dumps(child(**spec)), flush=True)
        return
    sys.path.insert(0, str(REPO / "src"))
    sys.path.insert(0, str(HERE))
    import torch

    import gpu_step
    from provenance import stamp, write_result

    torch.set_num_threads(1)  # (as the runs: the stamp names the parent's threads)

    names = list(VARIANTS)
    if args.variants:
        names = [n for n in names if n.split()[0] in args.variants.split(",")]
    rows: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = gpu_step.write_corpus(Path(tmp), 10_000, 256 * args.batches + 10_000)
        sources = {"this checkout": str(REPO / "src")}
        if args.baseline:
            sources[args.baseline] = worktree(args.baseline, Path(tmp))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
        runs = 0
        for r in range(args.rounds):
            for label, src in sources.items():
                for name in names:
                    runs += 1  # a folder per run (nplm-train hands back a finished run's metrics from its folder)
                    spec = {"src": src, "variant": name, "device": args.device, "batches": args.batches,
                            "corpus": corpus, "tmp": f"{tmp}/run{runs}"}
                    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                                          text=True, env=env, timeout=900)
                    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
                    if not lines:
                        sys.exit(f"host_step: {label} {name} failed: {done.stderr.strip().splitlines()[-1:]}")
                    rows.setdefault((label, name), []).append(json.loads(lines[-1][7:])["us_per_step"])
                    print(f"round {r + 1} {label:>14} {name}: {rows[label, name][-1]:.1f} us a step", flush=True)
        if args.baseline:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", sources[args.baseline][:-4]],
                           capture_output=True)
    loop = statistics.median(loop_host(args.device, args.batches) for _ in range(args.rounds))
    result = {"stamp": stamp(), "device": args.device, "batches": args.batches, "rounds": args.rounds,
              "loop_us_per_step": loop,
              "rows": [{"source": label, "variant": name, "us_per_step": values, "median": statistics.median(values)}
                       for (label, name), values in rows.items()]}
    write_result(args.out, "host_step", result, table(result))


def table(result: dict) -> list[str]:
    sources = list(dict.fromkeys(r["source"] for r in result["rows"]))
    median = {(r["source"], r["variant"]): r["median"] for r in result["rows"]}
    head = "| variant | " + " | ".join(f"{s}: us a step" for s in sources)
    head += " | ratio |" if len(sources) == 2 else " |"
    lines = [f"# nplm-train's host work per optimizer step ({result['device']})", "", result["stamp"], "",
             f"Medians of {result['rounds']} rounds (alternated), each the median Lightning step of the second of two "
             f"epochs of {result['batches']} batches of 256, the step's own work left out (host_step.py's docstring). "
             f"The plain captured loop's host work per step, measured after them: {result['loop_us_per_step']:.1f} us.",
             "", head, "|---|" + "---:|" * (len(sources) + (len(sources) == 2))]
    for variant in dict.fromkeys(r["variant"] for r in result["rows"]):
        cells = [f"{median[s, variant]:.1f}" for s in sources]
        if len(sources) == 2:
            cells.append(f"{median[sources[1], variant] / median[sources[0], variant]:.2f}x")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    if len(sources) == 2:
        lines += ["", f"ratio: {sources[1]}'s time over this checkout's (above 1: this checkout's host work is less)."]
    return lines


if __name__ == "__main__":
    main()
