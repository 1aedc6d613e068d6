"""Where nplm-train's time goes: torch.profiler over Lightning steps of a real run.

It profiles nplm-train itself (Lightning, the loader, the captured step's replays, the schedules, the moving
average) over `--groups` Lightning steps (each `steps_per_execution` optimizer steps) of its second epoch, and
says per optimizer step: the wall time, the time the device was busy (the union of its kernels' intervals),
the kernels a step and the host waits on the device (`cudaStreamSynchronize`, `cudaDeviceSynchronize`,
`cudaEventSynchronize`, synchronous copies); then the top kernels by device time (where the step's GPU time
goes) and the host operators by CPU time. Busy well below wall: the card waits for the host. One of gpu_step.py's
shapes (`--shape brown`: `experiment=sun2021/brown`, |V| = 10,000; `wikitext103`: the WikiText-103 recipe,
|V| = 267,735) on its synthetic corpus, bf16-mixed; `--compile`: compile=true (inductor's fused kernels);
`--eager`: cuda_graphs=false (each kernel launched by the host).

    python3 experiments/bench/gpu_profile_train.py [--shape brown] [--batch 256] [--groups 20] [--compile] [--eager]
                                                   [--watch 4] [--reference] [--device cuda|cpu] [--out DIR] [--dry-run]

After the profile, `--watch` more Lightning steps run under torch's sync debug mode ("warn"): every host-device
sync torch knows of (a read of a device tensor, a synchronous copy, a stream synchronize) anywhere in the
loop, the loader, the callbacks or the step is listed with the Python stack that made it, so that a sync the
profile counts is found without another run. `--reference` then profiles the plain captured loop
(gpu_step.reference_loop: the same model and head, compiled as `--compile` compiles them) over as many steps
and lists, per step, the kernels nplm-train runs that the loop does not, and the reverse: the device-side
work nplm-train adds.

`--device cpu` checks the script on a CPU (the captured step's dry mode, `capture_dry=true`, CPU operators only;
no sync watch and no reference there); `--dry-run` composes and checks the run's config only. `--out`: also
write <out>/<machine>/gpu_profile_train.json (harness; `--part NAME`: gpu_profile_train-NAME.json).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import gpu_step  # noqa: E402  (puts the repo's src/ on sys.path)
import harness  # noqa: E402
from nplm.training.train import train  # noqa: E402

WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


class SyncWatch:
    """The host-device syncs torch reports in its sync debug mode ("warn") while active, counted by the Python
    stack that made each (its innermost `STACK_DEPTH` frames)."""

    STACK_DEPTH = 10
    MESSAGE = "synchronizing CUDA operation"  # torch's warning (c10/cuda: warn_or_error_on_sync)

    def __init__(self):
        self.stacks: Counter = Counter()
        self.active = False

    def start(self) -> None:
        self._warnings = warnings.catch_warnings()  # (restores the filters and showwarning on exit)
        self._warnings.__enter__()
        warnings.simplefilter("always")
        self._show = warnings.showwarning
        warnings.showwarning = self.record
        self._mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        self.active = True

    def stop(self) -> None:
        if self.active:
            torch.cuda.set_sync_debug_mode(self._mode)
            self._warnings.__exit__(None, None, None)
            self.active = False

    def record(self, message, category, filename, lineno, file=None, line=None) -> None:
        """`warnings.showwarning`'s signature: a sync's warning is counted under its stack; others are shown."""
        if self.MESSAGE not in str(message):
            return self._show(message, category, filename, lineno, file, line)
        frames = traceback.extract_stack()[:-1][-self.STACK_DEPTH:]
        self.stacks[tuple(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames)] += 1
        return None

    def lines(self, groups: int, steps: int) -> list[str]:
        """The syncs seen in `groups` Lightning steps (`steps` optimizer steps), the most frequent stack first."""
        total = sum(self.stacks.values())
        lines = [f"host-device syncs in {groups} Lightning steps ({steps} optimizer steps) under sync debug mode: {total}"]
        for stack, n in self.stacks.most_common(4):
            lines.append(f"  {n} from (innermost last): " + " <- ".join(reversed(stack)))
        return lines


class ProfileGroups(pl.Callback):
    """torch.profiler over `groups` Lightning training steps of the second epoch; then, on CUDA, `watch` more
    Lightning steps under the sync watch (`SyncWatch`, from one step's end to a later one's: the loader's
    fetch and Lightning's hooks between steps included)."""

    def __init__(self, groups: int, device: str, watch: int = 0):
        self.groups, self.device, self.watch = groups, device, watch
        self.seen = 0
        self.prof = None
        self.optimizer_steps = 0
        self.syncs = SyncWatch() if device == "cuda" and watch > 0 else None
        self.watched = self.watched_steps = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.current_epoch != 1 or self.prof is not None or batch_idx < 2:
            return
        self._sync()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])
        self.prof = profile(activities=activities)
        self.prof.__enter__()
        self.steps_at = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.prof is None:
            return
        if self.seen < self.groups:
            self.seen += 1
            if self.seen == self.groups:
                self._sync()
                self.prof.__exit__(None, None, None)
                self.optimizer_steps = trainer.global_step - self.steps_at
                if self.syncs is not None:
                    self.syncs.start()
                    self.watch_from = trainer.global_step
            return
        if self.syncs is not None and self.syncs.active:
            self.watched += 1
            if self.watched == self.watch:
                self.syncs.stop()
                self.watched_steps = trainer.global_step - self.watch_from

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.syncs is not None and self.syncs.active:  # the epoch ended first
            self.syncs.stop()
            self.watched_steps = trainer.global_step - self.watch_from

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


def report(prof, steps: int, device: str, rows: int = 25) -> list[str]:
    """The per-step summary of a finished profile of `steps` optimizer steps, then the top `rows` kernels by
    device time (on CUDA) and host operators by CPU time."""
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
    averages = prof.key_averages()
    tables = []
    if device == "cuda":
        tables = ["", "kernels by self CUDA time:",
                  averages.table(sort_by="self_cuda_time_total", row_limit=rows, max_name_column_width=60)]
    ops = averages.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60)
    return lines + tables + ["", "host operators by self CPU time:", ops]


def kernel_counts(prof) -> tuple[Counter, Counter]:
    """(launches, microseconds) of each CUDA kernel name in a finished profile."""
    launches, us = Counter(), Counter()
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            launches[e.name] += 1
            us[e.name] += e.time_range.end - e.time_range.start
    return launches, us


def kernel_diff(ours: tuple[Counter, Counter], steps: int, theirs: tuple[Counter, Counter], their_steps: int,
                rows: int = 12) -> list[str]:
    """The kernels a step of one profile (`kernel_counts`, over `steps` optimizer steps) runs more or less often
    than a step of the other, by name, the largest difference in device time first."""
    (n1, us1), (n2, us2) = ours, theirs
    names = set(n1) | set(n2)
    diff = {k: (n1[k] / steps - n2[k] / their_steps, us1[k] / steps - us2[k] / their_steps) for k in names}
    changed = sorted((k for k in names if abs(diff[k][0]) >= 0.01), key=lambda k: -abs(diff[k][1]))
    total = sum(n1.values()) / steps - sum(n2.values()) / their_steps
    lines = [f"kernels a step, nplm-train minus the plain loop: {total:+.2f} launches, "
             f"{sum(us1.values()) / steps - sum(us2.values()) / their_steps:+.1f} us of kernel time"]
    lines += [f"  {diff[k][0]:+7.2f} a step {diff[k][1]:+8.1f} us  {k[:110]}" for k in changed[:rows]]
    return lines


def profile_reference(cfg, shape: str, batch: int, steps: int, compiled: bool):
    """(profile, result) of the plain captured loop (gpu_step.reference_loop) over `steps` replays."""
    profiled = {}

    @contextmanager
    def around():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            yield
        profiled["prof"] = prof

    compile_ = (lambda f: torch.compile(f, fullgraph=True)) if compiled else None
    torch._dynamo.reset()
    result = gpu_step.reference_loop(cfg, shape, batch, gpu_step.SHAPES[shape]["vocab"], steps,
                                     compile_=compile_, around=around)
    return profiled["prof"], result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="brown", choices=sorted(gpu_step.SHAPES))
    parser.add_argument("--batch", type=int, default=None, help="default: the shape's first batch size")
    parser.add_argument("--groups", type=int, default=20, help="Lightning steps profiled")
    parser.add_argument("--compile", action="store_true", help="compile=true (inductor's step, captured)")
    parser.add_argument("--eager", action="store_true", help="cuda_graphs=false: the step uncaptured")
    parser.add_argument("--watch", type=int, default=4, help="Lightning steps under the sync watch after the profile")
    parser.add_argument("--reference", action="store_true", help="profile the plain captured loop too, and compare")
    parser.add_argument("--rows", type=int, default=25, help="rows of the kernel and operator tables")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", type=Path, default=None, help="also write <out>/<machine>/gpu_profile_train.json")
    parser.add_argument("--part", help="with --out, a result file of this part's own: gpu_profile_train-PART.json")
    parser.add_argument("--dry-run", action="store_true", help="compose and check the run's config; no GPU, no run")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available() and not args.dry_run:
        sys.exit("gpu_profile_train: no CUDA device (--device cpu checks the script)")
    spec = gpu_step.SHAPES[args.shape]
    batch = args.batch or spec["batches"][0]
    row_tokens = 512 if args.shape == "wikitext103" else 1
    callback = ProfileGroups(args.groups, args.device, args.watch)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = {"train": f"{tmp}/train.txt", "valid": f"{tmp}/valid.txt"}
        batches = max(4 * (args.groups + args.watch) * 16, 200)
        # the script's check on a CPU: the captured step's dry mode (--eager: the eager step, as on the GPU)
        extra = ["capture_dry=true"] if args.device == "cpu" and not args.eager else []
        cfg = gpu_step.compose(args.shape, batch, not args.eager, args.compile, corpus, tmp, batches, extra)
        if args.device == "cpu":  # on the CPU, a small model
            cfg.trainer.accelerator, cfg.trainer.precision, cfg.trainer.devices = "cpu", "32-true", 1
            cfg.model.embed_dim, cfg.model.hidden_dim = 8, 16
        if args.dry_run:
            gpu_step.check(cfg)
            print(f"gpu_profile_train: {args.shape} batch {batch}: config composed (--dry-run: nothing profiled)")
            return
        # an epoch of the profiled and watched Lightning steps and a few more
        tokens = (args.groups + args.watch + 3) * cfg.steps_per_execution * batch * row_tokens
        gpu_step.write_corpus(Path(tmp), spec["vocab"], max(tokens, 400_000))
        metrics = train(cfg, callbacks=[callback])
        if callback.prof is None or not callback.optimizer_steps:
            sys.exit("gpu_profile_train: nothing profiled (too few batches in the second epoch?)")
        name = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
        how = " compile=true" if args.compile else ""
        how += " cuda_graphs=false" if args.eager else ""
        lines = [f"nplm-train {args.shape} batch {batch}{how} on {name}: {metrics['train/tokens_per_s']:,.0f} tokens/s "
                 f"over its second epoch, {metrics.get('train/graph_steps')} graph steps"]
        lines += report(callback.prof, callback.optimizer_steps, args.device, args.rows)
        if callback.syncs is not None:
            lines[2:2] = callback.syncs.lines(callback.watched, callback.watched_steps)
        if args.reference and args.device == "cuda":
            prof, result = profile_reference(cfg, args.shape, batch, callback.optimizer_steps, args.compile)
            steps = callback.optimizer_steps
            lines[2:2] = [f"the plain captured loop, {steps} steps: {result['step_ms'] * 1e3:.1f} us a step "
                          "unprofiled; "
                          "profiled: " + "; ".join(report(prof, steps, "cuda")[:2]),
                          *kernel_diff(kernel_counts(callback.prof), steps, kernel_counts(prof), steps)]
    if args.out is None:
        print("\n".join(lines))
        return
    table = ["```text", *"\n".join(lines).splitlines(), "```"]
    data = {"tokens_per_s": metrics["train/tokens_per_s"], "optimizer_steps": callback.optimizer_steps}
    harness.write_result("gpu_profile_train", table, data, args.out, args.device, part=args.part)


if __name__ == "__main__":
    main()
