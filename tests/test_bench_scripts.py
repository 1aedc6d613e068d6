"""The benchmark scripts (experiments/bench): the harness's rounds, result files and README tables, what the GPU
scripts compute from a profile, and one small run (or dry run) of each script on the CPU, in-process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "experiments" / "bench"
sys.path.insert(0, str(BENCH))

import gpu_profile_train  # noqa: E402
import gpu_step  # noqa: E402
import harness  # noqa: E402


def schema_has(*keys: str) -> bool:
    from nplm.config.schema import TOP

    return all(key in TOP for key in keys)


# the scripts pass these settings as config keys: where the schema has none of that name yet, their runs cannot compose
NEW_KEYS = pytest.mark.skipif(not schema_has("compile_mode", "sync_debug", "capture_dry"),
                              reason="the config keys compile_mode, sync_debug and capture_dry are not in the schema")


# -- the harness --------------------------------------------------------------------------------------
def test_rounds_alternate_the_contenders_and_rotate_their_order():
    calls = []
    values = harness.alternate({name: (lambda name=name: calls.append(name) or len(calls)) for name in "abc"}, 3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert values == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}
    assert harness.ratio([2.0, 3.0, 9.0], [1.0, 2.0, 3.0]) == "2.00x (1.50-3.00)"


@pytest.mark.parametrize("cpu, count, device, name", [
    ("AMD EPYC", 2, "cpu", "epyc-2cpu"), ("Intel(R) Xeon(R) Processor", 2, "cpu", "xeon-2cpu"),
    ("Intel(R) Xeon(R) Platinum 8480+", 16, "cpu", "xeon-platinum-8480-16cpu"), ("", 0, "cuda", "h200")])
def test_a_machine_is_named_by_its_card_or_its_cpu_and_count(monkeypatch, cpu, count, device, name):
    import torch

    monkeypatch.setattr("nplm.training.peak.device_name", lambda _: cpu)
    monkeypatch.setattr(os, "cpu_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H200")
    assert harness.machine_name(device) == name


def test_a_result_file_holds_the_table_its_figures_and_provenance_and_the_readme_shows_it(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "machine_name", lambda device="cpu": "box-2cpu")
    monkeypatch.setattr(sys, "argv", [str(BENCH / "x.py"), "--rounds", "1"])
    path = harness.write_result("x", ["| a |", "|---|", "| 1 |"], {"rate": 1.5}, tmp_path, notes=["n"])
    result = json.loads(path.read_text())
    assert path == tmp_path / "box-2cpu" / "x.json"
    command = "python experiments/bench/x.py --rounds 1"
    assert (result["script"], result["machine"], result["command"]) == ("x", "box-2cpu", command)
    assert result["data"] == {"rate": 1.5} and result["commit"] == harness.commit()
    lines = harness.tables(tmp_path)
    assert lines[2] == "### x.py on box-2cpu"
    assert lines[4] == f"{result['date']}, commit {result['commit']}, {result['setup']}: `{command}`"
    assert lines[6:] == ["| a |", "|---|", "| 1 |", "", "n", "", harness.END]
    readme = tmp_path / "README.md"
    readme.write_text(f"# B\n\n{harness.BEGIN}\nold\n{harness.END}\n\n## Notes\n")
    assert harness.update_readme(readme, tmp_path) and not harness.update_readme(readme, tmp_path)
    assert readme.read_text() == "# B\n\n" + "\n".join(lines) + "\n\n## Notes\n"
    part = harness.write_result("x", ["| b |"], {}, tmp_path, part="successors")  # kept beside the script's own
    assert part == tmp_path / "box-2cpu" / "x-successors.json" and path.exists()
    both = harness.tables(tmp_path)
    assert both[: len(lines) - 2] == lines[:-2]
    assert both[len(lines) - 2:] == ["", "### x.py on box-2cpu (successors)", "", both[len(lines) + 1], "", "| b |",
                                     "", harness.END]


def test_the_readme_summarises_gpu_check_one_row_per_model_and_head(tmp_path, monkeypatch):
    """gpu_check's runs (a row each) as one row per model x head, a column per precision (and per setting that
    varies), each cell `ok, <graph steps>` or the failure; the lines above its table kept, the result file linked."""
    monkeypatch.setattr(harness, "machine_name", lambda device="cpu": "h200")
    head = "| model | head | precision | compile | cuda_graphs | status | graph steps | train ppl | val ppl | " \
           "train tokens/s | wall s |"
    rows = ["| nplm | softmax | 32-true | False | True | ok | 57 | 27.029 | 19.600 | 30,900 | 2.7 |",
            "| nplm | softmax | bf16-mixed | False | True | ok | 57 | 27.031 | 19.600 | 44,531 | 0.9 |",
            "| lstm | nce | 32-true | False | True | ok | 0 | 55.767 | 28.533 | 504,095 | 1.6 |",
            "| lstm | nce | bf16-mixed | False | True | FAILED: RuntimeError: a | b | | | | | |"]
    table = ["pytest: skipped; runs failed: 1 of 4.", "", "nplm-train, 60 steps.", "", head,
             "|---|---|---|---|---|---|---:|---:|---:|---:|---:|", *rows]
    harness.write_result("gpu_check", table, {}, tmp_path, part="successors", notes=["n"])
    lines = harness.tables(tmp_path)
    shown = lines[lines.index("pytest: skipped; runs failed: 1 of 4."):]
    link = "[results/h200/gpu_check-successors.json](results/h200/gpu_check-successors.json)"
    assert shown[:4] == ["pytest: skipped; runs failed: 1 of 4.", "", "nplm-train, 60 steps.", shown[3]]
    assert "compile=false, cuda_graphs=true in every run" in shown[3] and shown[3].endswith(f"time: {link}.")
    assert shown[4:] == ["", "| model | head | 32-true | bf16-mixed |", "|---|---|---|---|",
                         "| nplm | softmax | ok, 57 | ok, 57 |",
                         "| lstm | nce | ok, 0 | FAILED: RuntimeError: a \\| b |", "", "n", "", harness.END]
    harness.write_result("gpu_check", [*table[:4], head, table[5], rows[0], rows[0].replace("False", "True")],
                         {}, tmp_path)  # the script's own file: compile varies, a column each
    both = harness.tables(tmp_path)
    own = "\n".join(both[:both.index("### gpu_check.py on h200 (successors)")])
    assert "\n| model | head | 32-true, compile=false | 32-true, compile=true |\n" in own
    assert "\n| nplm | softmax | ok, 57 | ok, 57 |\n" in own
    assert "; cuda_graphs=true in every run." in own and "compile=false, cuda_graphs" not in own


def test_the_bench_readme_shows_the_committed_result_files():
    """The README's generated part is what `python experiments/bench/harness.py` writes from results/."""
    assert "\n".join(harness.tables()) in harness.README.read_text(), "run python experiments/bench/harness.py"
    results = harness.read_results()
    assert [r["script"] for r in results][:4] == ["notebook_vs_trainer", "bench", "heads_speed", "hsm_scaling"]
    assert all(r["commit"] and r["command"].startswith("python") for r in results)


# -- gpu_profile_train's arithmetic ---------------------------------------------------------------------
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
    sorts = []
    prof = Event(events=lambda: events,
                 key_averages=lambda: Event(table=lambda sort_by, **kw: sorts.append(sort_by) or f"TABLE {sort_by}"))
    lines = gpu_profile_train.report(prof, 2, "cuda")
    assert lines[0] == "2 optimizer steps profiled: 500.0 us of wall time a step"
    assert lines[1] == "device busy 140.0 us a step (28% of the wall time), 1.5 kernels a step"
    assert lines[2] == "runtime calls a step: cudaGraphLaunch 1.00, cudaMemcpyAsync 1.00, cudaStreamSynchronize 0.50"
    assert lines[3] == "host waits on the device: 1 in 2 steps, 45.0 us a step"
    assert lines[4:] == ["", "kernels by self CUDA time:", "TABLE self_cuda_time_total", "",
                         "host operators by self CPU time:", "TABLE self_cpu_time_total"]


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


def test_the_gpu_step_table_gives_each_path_as_a_share_of_the_reference():
    row = {"shape": "brown", "batch": 256, "steps": 100, "eager_steps": 20,
           "eager": {"tokens_per_s": 1000.0, "mfu": None, "peak_gib": 0.25, "graph_steps": None},
           "captured": {"error": "RuntimeError: x"},
           "reference": {"tokens_per_s": 4000.0, "mfu": 0.5, "peak_gib": 0.5}}
    lines = gpu_step.table([row])
    assert lines[-3:] == ["| brown | 256 | eager | 20 | 1,000 |  | 0.25 |  | 569.4 | 0.25 |",
                          "| brown | 256 | captured | | RuntimeError: x | | | | | |",
                          "| brown | 256 | reference | 100 | 4,000 | 0.500 | 0.50 |  | 142.4 | 1.00 |"]


# -- each script once on the CPU (small sizes; the GPU scripts' dry runs) -------------------------------
def result(tmp_path: Path, script: str) -> dict:
    (path,) = tmp_path.glob(f"*/{script}.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_notebook_vs_trainer_runs_every_loop_and_writes_its_table(tmp_path):
    import notebook_vs_trainer

    try:
        notebook_vs_trainer.main(["--rounds", "1", "--steps", "3", "--warmup", "1", "--threads", "1",
                                  "--out", str(tmp_path)])
    finally:
        logging.disable(logging.NOTSET)
    r = result(tmp_path, "notebook_vs_trainer")
    assert list(r["data"]["examples_per_s"]) == ["notebook", "plain", "plain, autograd", "nplm-train"]
    assert r["table"][2].startswith("| notebook | ") and r["table"][2].endswith("| 1.00x (1.00-1.00) | "
                                                                                 + r["table"][2].split("| ")[-1])
    assert r["notes"][0] == "```text" and r["notes"][1].startswith("round 1: notebook ")


@pytest.mark.slow
def test_bench_measures_the_loader_the_loops_and_the_peak(tmp_path, monkeypatch, capsys):
    import bench

    monkeypatch.setattr(bench, "keep_freed_memory", lambda: True)  # (a setting of the whole test process)
    bench.main(["--synthetic", "--batch-size", "128", "--steps", "2", "--warmup", "1", "--rounds", "1",
                "--ablation-rounds", "0", "--threads", "1", "--out", str(tmp_path)])
    r = result(tmp_path, "bench")
    assert r["table"][0].startswith("Data: synthetic stream, |V| = 17,905. Batch size 128, 2 timed steps")
    assert [len(r["data"][k]) for k in ("peak", "plain", "lightning")] == [1, 1, 1]
    assert [line.split(" | ")[0] for line in r["table"][4:]] == [
        "| (a) DataModule batches", "| (b) MLP1 training, plain PyTorch loop", "| (b) MLP1 training, Lightning",
        "| (b) Lightning overhead", "| (c) measured fp32 matmul peak (2048^3)", "| (c) MLP1 training step, Lightning",
        "| (c) fraction of peak"]
    capsys.readouterr()
    bench.ablation_child("none of the three", bench.argparse.Namespace(batch_size=128, steps=2, warmup=1,
                                                                               synthetic=True))
    assert float(capsys.readouterr().out.split()[-1]) > 0


@pytest.mark.slow
def test_heads_speed_times_every_head_against_the_softmax(tmp_path, monkeypatch):
    import heads_speed

    monkeypatch.setattr(heads_speed, "keep_freed_memory", lambda: True)
    heads_speed.main(["--steps", "1", "--warmup", "1", "--rounds", "1", "--threads", "1", "--out", str(tmp_path)])
    r = result(tmp_path, "heads_speed")
    assert list(r["data"]) == list(heads_speed.head_constructors([1] * heads_speed.V))
    assert r["table"][4].startswith("| softmax |  | 5,210,355 | ") and r["table"][4].endswith("| 1.00x |")


@pytest.mark.slow
def test_hsm_scaling_writes_its_table_and_plot(tmp_path, monkeypatch):
    import hsm_scaling

    monkeypatch.setattr(hsm_scaling, "keep_freed_memory", lambda: True)
    hsm_scaling.main(["--sizes", "300", "--steps", "1", "--warmup", "1", "--rounds", "1", "--threads", "1",
                      "--out", str(tmp_path)])
    r = result(tmp_path, "hsm_scaling")
    assert [row["words"] for row in r["data"]] == [300]
    assert [line.split(" | ")[:2] for line in r["table"][5:7]] == [["| 300", "dense"], ["| 300", "sparse"]]
    assert (tmp_path / r["machine"] / "hsm_scaling.png").stat().st_size > 1000


@pytest.mark.slow
def test_every_gpu_step_path_composes_a_config_nplm_train_accepts(capsys, monkeypatch):
    """gpu_step.py --dry-run: each path's config (its overrides included) composed and checked as nplm-train checks
    it (the paths whose overrides need no new key; the next test has the other)."""
    paths = ",".join(name for name, *_ in gpu_step.PATHS if name != "compiled-reduce-overhead")
    checked, check = [], gpu_step.check
    monkeypatch.setattr(gpu_step, "check", lambda cfg: (checked.append((cfg.model.name, cfg.cuda_graphs)), check(cfg)))
    gpu_step.main(["--dry-run", "--shapes", "brown,wikitext103,brown-lstm,brown-transformer_n", "--batches", "256",
                   "--paths", paths])
    assert [graphs for model, graphs in checked if model == "lstm"] == [False, False]  # eager only, 2 batch sizes
    assert sum(model == "transformer" for model, _ in checked) == 2 * (len(gpu_step.PATHS) - 1)
    out = capsys.readouterr().out
    assert "gpu_step: brown batch 256: 3906 steps, configs composed" in out
    assert "gpu_step: wikitext103 batch 20: 146 steps, configs composed" in out
    assert "gpu_step: brown-lstm batch 128: 223 steps, configs composed" in out  # (--batches is brown's)
    assert "gpu_step: brown-transformer_n batch 32: 976 steps, configs composed" in out


@NEW_KEYS
@pytest.mark.slow
def test_torch_compiles_own_graphs_are_a_config_override(capsys):
    gpu_step.main(["--dry-run", "--shapes", "brown", "--batches", "256", "--paths", "compiled-reduce-overhead"])
    assert "configs composed" in capsys.readouterr().out


@NEW_KEYS
@pytest.mark.slow
def test_gpu_check_composes_every_run(capsys):
    import gpu_check

    gpu_check.main(["--dry-run", "--models", "modern,lstm,transformer_n", "--no-compile"])
    assert capsys.readouterr().out.strip().endswith("gpu_check: 48 runs composed (--dry-run: none trained)")


@NEW_KEYS
@pytest.mark.slow
def test_the_training_profile_runs_on_the_cpu(tmp_path):
    """gpu_profile_train.py's check on the CPU: nplm-train with the dry captured step, profiled over 2 Lightning
    steps of its second epoch (32 optimizer steps); then the WikiText-103 shape's config, composed."""
    gpu_profile_train.main(["--device", "cpu", "--groups", "2", "--watch", "0", "--rows", "5", "--out", str(tmp_path)])
    r = result(tmp_path, "gpu_profile_train")
    assert r["data"]["optimizer_steps"] == 32 and r["table"][2].startswith("32 optimizer steps profiled: ")
    gpu_profile_train.main(["--dry-run", "--shape", "wikitext103", "--compile"])
    gpu_profile_train.main(["--dry-run", "--device", "cpu", "--eager"])  # (the eager step: no dry capture)


@NEW_KEYS
@pytest.mark.slow
def test_the_gpu_session_runs_a_part_on_the_cpu_and_refuses_an_unknown_one(tmp_path):
    """gpu_session.sh --dry-run: its loop over parts, each script's log and exit status (a shell script: a process
    of its own; one part here, each script's dry run is tested in this file), and an unknown part refused before
    any part runs."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(BENCH / "gpu_session.sh"), "--dry-run", "profile"], capture_output=True,
                          text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "gpu_session.sh: done after" in done.stdout and ", 0 part(s) failed" in done.stdout
    assert "profile (gpu_profile_train.py): exit 0" in done.stdout
    assert "gpu_profile_train: wikitext103 batch" in (tmp_path / "profile.txt").read_text()
    bad = subprocess.run(["bash", str(BENCH / "gpu_session.sh"), "--dry-run", "profile,nope"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert (bad.returncode, bad.stdout) == (2, "gpu_session.sh: part nope: unknown; parts are step, compile, wt103, "
                                             "successors_step, capture, check, successors, profile, profile_train, "
                                             "profile_eager\n")
    timed = subprocess.run(["bash", str(BENCH / "gpu_session.sh"), "--parallel", "check,step"], capture_output=True,
                           text=True, env=env, timeout=300)  # parts run at once measure no speed
    assert (timed.returncode, timed.stdout) == (2, "gpu_session.sh: --parallel with part step, which measures speed: "
                                                   "run it on its own (without --parallel)\n")
