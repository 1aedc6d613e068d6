"""Where nplm-train's time goes between the captured steps: torch.profiler over Lightning steps of a real run.

gpu_profile.py profiles the plain step; this profiles nplm-train itself (Lightning, the loader, the captured
step's replays, the schedules, the moving average), over `--groups` Lightning steps (each `steps_per_execution`
optimizer steps) of its second epoch, and says per optimizer step: the wall time, the time the device was
busy (the union of its kernels' intervals), the kernels launched outside the captured graph and the host
waits on the device (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`, synchronous
copies). Busy well below wall: the card waits for the host; kernels outside the graph: work the plain loop
does not have. `experiment=sun2021/brown` on gpu_step.py's synthetic corpus (|V| = 10,000), bf16-mixed.

    python3 experiments/bench/gpu_profile_train.py [--batch 256] [--groups 20] [--compile] [--device cuda|cpu]

`--device cpu` checks the script on a CPU (the captured step's dry mode, CPU operators only).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import gpu_step  # noqa: E402

WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


class ProfileGroups(pl.Callback):
    """torch.profiler over `groups` Lightning training steps of the second epoch."""

    def __init__(self, groups: int, device: str):
        self.groups, self.device = groups, device
        self.seen = 0
        self.prof = None
        self.optimizer_steps = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.current_epoch != 1 or self.prof is not None or batch_idx < 2:
            return
        self._sync()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])
        self.prof = profile(activities=activities)
        self.prof.__enter__()
        self.steps_at = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.prof is None or self.seen >= self.groups:
            return
        self.seen += 1
        if self.seen == self.groups:
            self._sync()
            self.prof.__exit__(None, None, None)
            self.optimizer_steps = trainer.global_step - self.steps_at

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals (microseconds)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def report(prof, steps: int, device: str) -> list[str]:
    """The per-step summary of a finished profile of `steps` optimizer steps."""
    events = prof.events()
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    wall = (max(e.time_range.end for e in cpu) - min(e.time_range.start for e in cpu))  # us
    lines = [f"{steps} optimizer steps profiled: {wall / steps:.1f} us of wall time a step"]
    if device == "cuda":
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        busy = busy_us([(e.time_range.start, e.time_range.end) for e in kernels])
        lines.append(f"device busy {busy / steps:.1f} us a step ({busy / wall:.0%} of the wall time), "
                     f"{len(kernels) / steps:.1f} kernels a step")
        launches = {}
        for e in cpu:
            if e.name.startswith(("cudaLaunchKernel", "cudaGraphLaunch", "cuLaunchKernel", "cudaMemcpyAsync",
                                  "cudaMemsetAsync")) or e.name in WAITS:
                launches[e.name] = launches.get(e.name, 0) + 1
        lines.append("runtime calls a step: " + ", ".join(f"{name} {n / steps:.2f}" for name, n in
                                                          sorted(launches.items(), key=lambda kv: -kv[1])))
        waits = [e for e in cpu if e.name in WAITS or e.name.endswith("Synchronize")]
        lines.append(f"host waits on the device: {len(waits)} in {steps} steps, "
                     f"{sum(e.cpu_time_total for e in waits) / steps:.1f} us a step")
    ops = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60)
    return lines + ["", "host operators by self CPU time:", ops]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--groups", type=int, default=20, help="Lightning steps profiled")
    parser.add_argument("--compile", action="store_true", help="compile=true (inductor's step, captured)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_profile_train: no CUDA device (--device cpu checks the script)")
    callback = ProfileGroups(args.groups, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = gpu_step.write_corpus(Path(tmp), 10_000, 400_000)
        batches = max(4 * args.groups * 16, 200)
        cfg = gpu_step.compose("brown", args.batch, True, args.compile, corpus, tmp, batches)
        if args.device == "cpu":  # the script's check: the dry captured step, a small model, on the CPU
            os.environ["NPLM_CAPTURE_DRY"] = "1"
            cfg.trainer.accelerator, cfg.trainer.precision, cfg.trainer.devices = "cpu", "32-true", 1
            cfg.model.embed_dim, cfg.model.hidden_dim = 8, 16
        metrics = gpu_step.train_with(cfg, callback)
    if callback.prof is None or not callback.optimizer_steps:
        sys.exit("gpu_profile_train: nothing profiled (too few batches in the second epoch?)")
    name = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    print(f"nplm-train brown batch {args.batch}{' compile=true' if args.compile else ''} on {name}: "
          f"{metrics['train/tokens_per_s']:,.0f} tokens/s over its second epoch, {metrics.get('train/graph_steps')} "
          "graph steps")
    print("\n".join(report(callback.prof, callback.optimizer_steps, args.device)))


if __name__ == "__main__":
    main()
