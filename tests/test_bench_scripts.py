"""The logic of the GPU benchmark scripts that a CPU can check (experiments/bench): what they compute from a
profile or from result rows, and one run of each on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "experiments" / "bench"
sys.path.insert(0, str(BENCH))

import gpu_compile_capture  # noqa: E402
import gpu_step  # noqa: E402
import gpu_profile_train  # noqa: E402
import host_step  # noqa: E402


def test_the_device_is_busy_for_the_union_of_its_kernels_intervals():
    assert gpu_profile_train.busy_us([(20, 30), (0, 10), (5, 15), (6, 9)]) == 25
    assert gpu_profile_train.busy_us([]) == 0


def test_the_training_profile_reports_busy_time_kernels_and_waits_per_step():
    """The CUDA branch of gpu_profile_train.report, on a stand-in profile: 2 steps in 1,000 us of host events,
    kernels busy for 280 us (two overlap), a graph launch and a copy each step, one synchronize."""
    from types import SimpleNamespace as Event

    from torch.autograd import DeviceType

    def event(name, device, start, end, cpu=0.0):
        return Event(name=name, device_type=device, time_range=Event(start=start, end=end), cpu_time_total=cpu)

    cpu, cuda = DeviceType.CPU, DeviceType.CUDA
    events = [event("training_step", cpu, 0, 1000), event("cudaGraphLaunch", cpu, 10, 20),
              event("cudaGraphLaunch", cpu, 510, 520), event("cudaMemcpyAsync", cpu, 5, 8),
              event("cudaMemcpyAsync", cpu, 505, 508), event("cudaStreamSynchronize", cpu, 900, 990, cpu=90.0),
              event("k1", cuda, 20, 120), event("k2", cuda, 100, 150), event("k3", cuda, 520, 670)]
    prof = Event(events=lambda: events, key_averages=lambda: Event(table=lambda **kw: "TABLE"))
    lines = gpu_profile_train.report(prof, 2, "cuda")
    assert lines[0] == "2 optimizer steps profiled: 500.0 us of wall time a step"
    assert lines[1] == "device busy 140.0 us a step (28% of the wall time), 1.5 kernels a step"
    assert lines[2] == "runtime calls a step: cudaGraphLaunch 1.00, cudaMemcpyAsync 1.00, cudaStreamSynchronize 0.50"
    assert lines[3] == "host waits on the device: 1 in 2 steps, 45.0 us a step"


def test_the_kernel_diff_lists_what_a_step_runs_more_often_by_device_time():
    """nplm-train's 2 steps against the loop's 4: the same gemm a step, 2 fills more (3 us each), a copy fewer."""
    from collections import Counter

    ours = (Counter({"gemm": 2, "fill": 4}), Counter({"gemm": 100.0, "fill": 12.0}))
    theirs = (Counter({"gemm": 4, "copy": 4}), Counter({"gemm": 200.0, "copy": 8.0}))
    lines = gpu_profile_train.kernel_diff(ours, 2, theirs, 4)
    assert lines[0] == "kernels a step, nplm-train minus the plain loop: +1.00 launches, +4.0 us of kernel time"
    assert lines[1:] == ["    +2.00 a step     +6.0 us  fill", "    -1.00 a step     -2.0 us  copy"]


def test_the_sync_watch_counts_each_sync_under_its_stack_and_shows_other_warnings():
    import warnings

    watch = gpu_profile_train.SyncWatch()
    shown = []
    watch._show = lambda *args: shown.append(str(args[0]))

    def fetch():
        watch.record(UserWarning("called a synchronizing CUDA operation"), UserWarning, "x.py", 1)

    for _ in range(2):  # (the same stack twice)
        fetch()
    watch.record(UserWarning("something else"), UserWarning, "x.py", 1)
    assert shown == ["something else"]
    lines = watch.lines(4, 64)
    assert lines[0] == "host-device syncs in 4 Lightning steps (64 optimizer steps) under sync debug mode: 2"
    (stack, count), = watch.stacks.items()
    assert count == 2 and stack[-1].startswith("test_bench_scripts.py:") and stack[-1].endswith(" fetch")
    assert lines[1].startswith("  2 from (innermost last): test_bench_scripts.py:") and len(lines) == 2
    assert warnings.showwarning is not watch.record  # (start() installs it, stop() restores)


def test_each_batch_of_the_candidates_table_is_compared_with_its_first_row():
    rows = [{"batch": 256, "variant": "inductor", "step_ms": 0.5, "tokens_per_s": 512_000},
            {"batch": 256, "variant": "inductor, head-all", "step_ms": 0.4, "tokens_per_s": 640_000},
            {"batch": 4096, "variant": "inductor", "step_ms": 2.0, "tokens_per_s": 2_048_000},
            {"batch": 4096, "variant": "inductor, head-all", "error": "RuntimeError: x"}]
    lines = gpu_compile_capture.table({"device": "X", "torch": "2", "rows": rows})
    assert "| vs inductor |" in lines[4]
    assert lines[-3] == "| 256 | inductor, head-all | 0.400 | 640,000 | 1.25 |  |"
    assert lines[-2] == "| 4096 | inductor | 2.000 | 2,048,000 | 1.00 |  |"
    assert lines[-1].endswith("|  |  |  | RuntimeError: x |")


def test_the_host_table_gives_the_baseline_over_this_checkout():
    result = {"stamp": "s", "device": "cpu", "batches": 10, "rounds": 1, "loop_us_per_step": 2.0,
              "rows": [{"source": "this checkout", "variant": "default", "us_per_step": [100.0], "median": 100.0},
                       {"source": "abc1234", "variant": "default", "us_per_step": [150.0], "median": 150.0}]}
    lines = host_step.table(result)
    assert "| default | 100.0 | 150.0 | 1.50x |" in lines


@pytest.mark.slow
def test_the_training_profile_runs_on_the_cpu():
    """gpu_profile_train.py's check on the CPU: nplm-train with the dry captured step, profiled over 3 Lightning
    steps of its second epoch (48 optimizer steps)."""
    done = subprocess.run([sys.executable, str(BENCH / "gpu_profile_train.py"), "--device", "cpu", "--groups", "3"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "48 optimizer steps profiled" in done.stdout


@pytest.mark.slow
def test_every_gpu_step_path_composes_a_config_nplm_train_accepts():
    """gpu_step.py --dry-run: each path's config (its overrides included) composed and checked as nplm-train checks it."""
    paths = ",".join(name for name, *_ in gpu_step.PATHS)
    done = subprocess.run([sys.executable, str(BENCH / "gpu_step.py"), "--dry-run", "--shapes", "brown", "--batches", "256",
                           "--paths", paths], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gpu_step: brown batch 256: 3906 steps, configs composed" in done.stdout
