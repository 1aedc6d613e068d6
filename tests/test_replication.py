"""The paper-replication pieces: experiment files with the papers' shapes, and rows run once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import experiment_driver, REPO, TOY_FAST, compose_cfg
from replication import run_summary, train_row, valid_test

# Bengio et al. (2003), Table 1: (context words n-1, h, m, direct)
TABLE1 = {"mlp1": (4, 50, 60, True), "mlp3": (4, 0, 60, True), "mlp5": (4, 50, 30, True),
          "mlp7": (2, 50, 30, True), "mlp9": (4, 100, 30, False)}


@pytest.mark.parametrize("row", TABLE1)
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_bengio2003_rows_have_the_papers_shapes_and_recipes(tmp_path, row):
    paper = compose_cfg(tmp_path, f"experiment=bengio2003/{row}")
    m = paper.model
    assert (m.context_size, m.hidden_dim, m.embed_dim, m.direct) == TABLE1[row]
    assert (paper.corpus.name, paper.corpus.markers, paper.head.name, paper.optimizer.name) == ("brown", True, "softmax", "sgd")
    assert paper.optimizer.lr == pytest.approx(1e-3 * paper.data.batch_size)  # eps_0 per example x batch
    assert paper.optimizer.weight_decay == 1e-4
    modern = compose_cfg(tmp_path, f"experiment=[bengio2003/{row},bengio2003/modern]")
    assert (modern.model.context_size, modern.model.hidden_dim, modern.model.embed_dim) == TABLE1[row][:3]
    assert (modern.head.name, modern.optimizer.name, modern.model.dropout) == ("adaptive", "adamw", 0.5)
    assert (modern.optimizer.weight_decay, modern.optimizer.eps, modern.corpus.markers) == (0.1, 1e-5, True)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_morin2005_protocol(tmp_path):
    cfg = compose_cfg(tmp_path, "experiment=morin2005/hierarchical", "tree=huffman")
    assert (cfg.corpus.max_vocab, cfg.corpus.train_size, cfg.corpus.valid_size) == (10000, 900000, 100000)
    assert (cfg.head.name, cfg.tree.name) == ("hierarchical", "huffman")
    assert compose_cfg(tmp_path, "experiment=morin2005/importance_sampling").head.name == "importance_sampling"
    two_level = compose_cfg(tmp_path, "experiment=morin2005/class_based")
    assert (two_level.head.name, two_level.corpus.max_vocab, two_level.model.hidden_dim) == ("class_based", 10000, 50)


def test_the_wide_row_is_mlp9_widened_under_the_modern_recipe(tmp_path):
    cfg = compose_cfg(tmp_path, "experiment=[bengio2003/wide,bengio2003/modern]")
    m = cfg.model
    assert (m.context_size, m.hidden_dim, m.embed_dim, m.direct) == (4, 400, 100, False)
    assert (cfg.head.name, cfg.optimizer.name, cfg.optimizer.eps, cfg.trainer.max_epochs) == ("adaptive", "adamw", 1e-5, 40)


@pytest.mark.slow
def test_a_row_is_trained_once_and_summarised(tmp_path, warm_children):
    run_dir = tmp_path / "row"
    overrides = [*TOY_FAST, "logger=none", f"paths.data_dir={tmp_path / 'data'}"]
    record = train_row("toy", overrides, run_dir, threads=1)
    assert record["status"] == "finished"
    stamp = (run_dir / "metrics.json").stat().st_mtime_ns
    assert train_row("toy", overrides, run_dir, threads=1) == record  # done: not trained again
    assert (run_dir / "metrics.json").stat().st_mtime_ns == stamp
    summary = run_summary(record, "nplm-train corpus=toy")
    assert summary["epochs"] == 2 and summary["test"] == pytest.approx(record["metrics"]["test/ppl"])
    assert summary["valid"] == pytest.approx(min(r["val/ppl"] for r in record["history"]))


@pytest.mark.slow
def test_rerun_trains_a_finished_row_on_to_a_raised_epoch_cap(tmp_path, warm_children):
    run_dir = tmp_path / "row"
    overrides = [*TOY_FAST, "logger=none", f"paths.data_dir={tmp_path / 'data'}"]
    first = train_row("toy", overrides, run_dir, threads=1)
    longer = train_row("toy", [*overrides, "trainer.max_epochs=3"], run_dir, threads=1, rerun=True)
    assert [r["epoch"] for r in longer["history"]] == [0, 1, 2]  # the two finished epochs kept, one more trained
    assert longer["history"][:2] == first["history"]
    assert longer["status"] == "finished"


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_failed_row_returns_none_and_keeps_its_error(tmp_path, capsys, warm_children):
    run_dir = tmp_path / "bad"
    assert train_row("bad", ["corpus=toy", "model.context_size=0", "logger=none"], run_dir, threads=1) is None
    assert "bad: exit 2" in capsys.readouterr().out
    assert "model.context_size=0: must be an integer >= 1" in (tmp_path / "bad.log").read_text()


def _driver_with_a_sleeping_child(tmp_path) -> tuple[subprocess.Popen, int]:
    """A driver process whose run_child runs a child that sleeps a minute; the driver and the child's pid."""
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    driver = ("import sys; sys.path.insert(0, 'experiments'); import replication; "
              f"replication.run_child([sys.executable, '-c', {child!r}], open({str(tmp_path / 'log')!r}, 'w'))")
    proc = subprocess.Popen([sys.executable, "-c", driver], cwd=REPO)
    deadline = time.time() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    return proc, child_pid


def test_killing_a_driver_stops_its_training_child(tmp_path):
    """`kill DRIVER` passes the SIGTERM on to the child run_child started, waits for it, then stops too."""
    proc, child_pid = _driver_with_a_sleeping_child(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # the driver stopped by the same signal
    with pytest.raises(ProcessLookupError):  # and its child is gone (reaped by the driver, not orphaned)
        os.kill(child_pid, 0)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie waits for whatever adopts it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_driver_killed_by_sigkill_takes_its_training_child_with_it(tmp_path):
    """No handler sees a SIGKILL: the child asked the kernel for a SIGTERM when its driver dies."""
    proc, child_pid = _driver_with_a_sleeping_child(tmp_path)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.time() + 10
    while _running(child_pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _running(child_pid)


def test_valid_test_cell():
    assert valid_test(284.44, 268.0) == "284 / 268"
    assert valid_test(None, None) == ""
    assert valid_test(1.26, 2.5, 1) == "1.3 / 2.5"


def bengio_driver():
    return experiment_driver("bengio2003")


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_every_modern_nplm_row_composes_and_changes_one_part(tmp_path):
    run = bengio_driver()
    recipe = compose_cfg(tmp_path, "experiment=sun2021/brown").model
    assert (recipe.name, recipe.context_size, recipe.window, recipe.summaries, recipe.num_layers) == ("modern", 32, 8, 2, 4)
    assert compose_cfg(tmp_path, "experiment=sun2021/brown").callbacks.ema_decay == 0.9995  # the recipe as shipped
    base = compose_cfg(tmp_path, "experiment=sun2021/brown", *run.NO_EMA)  # the ablations' base: no averaging
    for row, (overrides, _) in run.SUN2021.items():
        cfg = compose_cfg(tmp_path, "experiment=sun2021/brown", *overrides)
        changed = {f"{group}.{k}" for group in ("model", "callbacks") for k in base[group]
                   if cfg[group][k] != base[group][k]}
        assert changed == {o.split("=")[0] for o in overrides if o not in run.NO_EMA}, row
    shipped = compose_cfg(tmp_path, "experiment=sun2021/brown")
    assert compose_cfg(tmp_path, "experiment=sun2021/brown", *run.SUN2021[run.SUN2021_RECIPE][0]) == shipped


def test_the_modern_nplm_table_and_target_come_from_the_result_files(tmp_path, monkeypatch):
    import json

    run = bengio_driver()
    monkeypatch.setattr(run.DRIVER, "results", tmp_path)
    common = {"epochs": 9, "best_epoch": 7, "train_s_per_epoch": 800.0, "parameters": 5_000_000, "mixture": None,
              "git_commit": "abcdef0123"}
    (tmp_path / "converged-mlp9-lr0.384.json").write_text(json.dumps({**common, "row": "mlp9", "lr": 0.384,
                                                                      "valid": 250.0, "test": 237.9}))
    assert "Target: test 226.0 or lower, 5% below MLP9 `converged` (237.9): not measured" in run.sun2021_table()
    (tmp_path / "sun2021.json").write_text(json.dumps({**common, "valid": 240.0, "test": 230.0, "converged": False,
                                                       "stopped_by": "time limit (1 epochs after the best)"}))
    (tmp_path / "sun2021-untied.json").write_text(json.dumps({**common, "valid": 250.0, "test": 241.5, "converged": True,
                                                              "stopped_by": "early stopping"}))
    text = run.sun2021_table()
    assert "| sun2021 | the recipe without the moving average: 4 residual blocks, a window of 8 and 2 averages of " \
           "the 24 before it, tied | 5,000,000 | 240.0 / 230.0 | +0.0% | -3.3% | 9* / 7 | time limit (1 epochs after " \
           "the best) | 800 |" in text
    assert "| sun2021-untied | output vectors apart from the input table | 5,000,000 | 250.0 / 241.5 | +5.0% | +1.5% |" in text
    assert "| sun2021-depth1 | depth: 1 block |  |" in text  # not run: empty
    (tmp_path / "sun2021-window16.json").write_text(json.dumps({**common, "valid": 230.0, "test": 225.4, "converged": False,
                                                                "stopped_by": "time limit (0 epochs after the best)"}))
    text = run.sun2021_table()
    assert ("test perplexity with the change, against sun2021's 230.0; valid against its 240.0):\n\n"
            "- output vectors apart from the input table: test 241.5 (+5.0%), valid 250.0 (+4.2%)\n"
            "- window of 16 (16 averaged): test 225.4 (-2.0%), valid 230.0 (-4.2%); not yet at early stopping, "
            "so an upper bound\n") in text
    # the recipe as shipped (the row sun2021-ema) stopped by a time limit: shown, not judged
    (tmp_path / "sun2021-ema.json").write_text(json.dumps({**common, "valid": 240.0, "test": 230.0, "converged": False,
                                                           "stopped_by": "time limit (1 epochs after the best)"}))
    text = run.sun2021_table()
    assert "5% below MLP9 `converged` (237.9): not judged: the row has not finished (time limit (1 epochs after " \
           "the best); test 230.0 so far)." in text
    (tmp_path / "sun2021-ema.json").write_text(json.dumps({**common, "valid": 240.0, "test": 230.0, "converged": True,
                                                           "stopped_by": "early stopping"}))
    assert "(237.9): 230.0, 3.3% below (missed by 4.0)." in run.sun2021_table()
    # a better network of Table 1 that a time limit stopped is not the reference
    (tmp_path / "converged-mlp1-lr0.384.json").write_text(json.dumps({
        **common, "row": "mlp1", "lr": 0.384, "valid": 240.0, "test": 220.0,
        "stopped_by": "time limit (2 epochs after the best)"}))
    assert "(237.9): 230.0, 3.3% below (missed by 4.0)." in run.sun2021_table()


def test_a_modern_nplm_row_result_keeps_what_stopped_it_and_its_validation_curve(tmp_path, monkeypatch):
    import json

    import torch

    import replication

    run = bengio_driver()
    monkeypatch.setattr(run.DRIVER, "results", tmp_path)
    history = [{"epoch": e, "step": 3124 + 3125 * e, "val/ppl": v, "train/epoch_time_s": 400.0}
               for e, v in enumerate([301.25, 262.5, 250.125, 253.0, 255.0])]
    record = {"status": "finished", "history": history, "git_commit": "abc1234", "wall_time_s": 2100.4,
              "machine": {"platform": "Linux", "cpus": 2, "torch_threads": 1}, "best_checkpoint": "best.ckpt",
              "metrics": {"val/ppl_best": 250.125, "test/ppl": 230.5}}
    calls = []
    monkeypatch.setattr(replication, "train_to_convergence", lambda name, overrides, *a: calls.append(overrides) or record)
    # the driver's own name for it: patching nplm.training.checkpoint.load_model instead left the fake in any
    # module first imported meanwhile (nplm.inference.mixture binds load_model when imported)
    monkeypatch.setattr(run, "parameters", lambda path: sum(p.numel() for p in torch.nn.Linear(3, 2).parameters()))
    run.DRIVER.run_row("sun2021-depth1", threads=1, deadline=None, extra=[], rerun=False)
    assert calls == [["experiment=sun2021/brown", "callbacks.ema_decay=null", "model.num_layers=1", "logger=none"]]
    result = json.loads((tmp_path / "sun2021-depth1.json").read_text())
    assert (result["valid"], result["test"], result["epochs"], result["best_epoch"]) == (250.125, 230.5, 5, 3)
    assert (result["stopped_by"], result["converged"], result["parameters"]) == ("early stopping", True, 8)
    assert result["valid_by_epoch"] == [301.25, 262.5, 250.12, 253.0, 255.0]
    assert result["command"] == "nplm-train experiment=sun2021/brown callbacks.ema_decay=null model.num_layers=1"


def test_train_to_convergence_skips_converged_rows_resumes_others_and_respects_the_budget(tmp_path, monkeypatch,
                                                                                          capsys):
    import json
    import time

    import replication

    calls = []
    monkeypatch.setattr(replication, "train_row", lambda name, overrides, run_dir, threads, rerun=False:
                        calls.append((overrides, rerun)) or {"status": "finished", "called": True, "history": [{}]})

    def record(epochs: int, best: int) -> None:  # val/ppl falls to epoch `best`, then rises
        history = [{"epoch": e, "step": 10 * (e + 1), "val/ppl": 100 - e if e < best else 100 - best + e,
                    "train/epoch_time_s": 1.0} for e in range(epochs)]
        (tmp_path / "metrics.json").write_text(json.dumps({"status": "finished", "history": history}))
        (tmp_path / "checkpoints").mkdir(exist_ok=True)
        (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")

    record(5, 3)  # two epochs after the best: converged, not trained again
    got = replication.train_to_convergence("r", ["a=1"], tmp_path, 1, None, patience=2, max_epochs=40)
    assert got["history"] and calls == []
    record(4, 4)  # still improving when a budget stopped it: goes on from its checkpoint, stopped by the new one
    deadline = time.time() + 3600
    assert replication.train_to_convergence("r", ["a=1"], tmp_path, 1, deadline, 2, 40)["called"]
    assert calls == [(["a=1", f"stop_at={deadline - 120:.0f}"], True)]
    late = replication.train_to_convergence("r", ["a=1"], tmp_path, 1, time.time() + 100, 2, 40)
    assert len(calls) == 1 and late["status"] == "finished" and "called" not in late  # its last record as it is
    assert "r: not started, less than 240 s of the budget left" in capsys.readouterr().out
    (tmp_path / "metrics.json").unlink()  # a budget that ends inside the first epoch: no epoch, no result
    monkeypatch.setattr(replication, "train_row", lambda *args, **kwargs: {"status": "finished", "history": []})
    assert replication.train_to_convergence("r", ["a=1"], tmp_path, 1, deadline, 2, 40) is None
    assert "r: stopped before its first epoch ended; no result yet" in capsys.readouterr().out


def test_stopped_by_tells_a_cut_second_epoch_from_a_whole_one():
    from replication import stopped_by

    def history(*steps: int) -> list[dict]:  # the cumulative step at the end of each epoch, val/ppl falling
        return [{"step": s, "val/ppl": 100 - i, "train/epoch_time_s": 1.0} for i, s in enumerate(steps)]

    assert stopped_by(history(3125, 4900), patience=2) == "time limit (0 epochs after the best)"
    assert stopped_by(history(3125, 6250), patience=2) == "epoch limit"
    rising = [{"step": 10 * (i + 1), "val/ppl": v, "train/epoch_time_s": 1.0} for i, v in enumerate((9, 8, 8.5, 8.6))]
    assert stopped_by(rising, patience=2) == "early stopping"


def test_the_machine_line_names_the_gpu_where_the_run_had_one():
    from replication import machine_line

    cpu = {"platform": "Linux-6.18", "cpus": 2, "torch_threads": 1, "gpu": None}
    assert machine_line(cpu) == "Linux-6.18, 2 CPUs, 1 torch thread"
    assert machine_line({**cpu, "gpu": "NVIDIA H200"}) == "Linux-6.18, 2 CPUs, 1 torch thread, GPU NVIDIA H200"
    del cpu["gpu"]  # records written before the key existed
    assert machine_line(cpu) == "Linux-6.18, 2 CPUs, 1 torch thread"
    assert machine_line({**cpu, "torch_threads": 2}) == "Linux-6.18, 2 CPUs, 2 torch threads"


def test_the_speed_machine_line_counts_its_threads_in_words(monkeypatch):
    import torch
    from replication import machine

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert machine().endswith(f"torch {torch.__version__} with 1 thread")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert machine().endswith(f"torch {torch.__version__} with 2 threads")


def test_the_checkout_is_dirty_when_its_code_differs_untracked_files_included(tmp_path):
    """A new heads/x.py changes what runs (the registries import every module): untracked code counts;
    result files that drivers write, and a shell script of one's own outside the code folders, do not."""
    import subprocess
    from nplm.tracking.provenance import checkout_state

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    head, dirty = checkout_state(tmp_path / "src")
    assert len(head) == 40 and not dirty
    (tmp_path / "experiments" / "e" / "results").mkdir(parents=True)
    (tmp_path / "experiments" / "e" / "results" / "row.json").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("not code\n")
    assert checkout_state(tmp_path) == (head, False)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "queue.sh").write_text("nplm-train\n")  # one's own script outside the code: clean
    assert checkout_state(tmp_path) == (head, False) == checkout_state(tmp_path / "src")
    (tmp_path / "experiments" / "e" / "go.sh").write_text("nplm-train\n")  # a new script among the experiments'
    assert checkout_state(tmp_path) == (head, True) == checkout_state(tmp_path / "src")
    (tmp_path / "experiments" / "e" / "go.sh").unlink()
    (tmp_path / "src" / "x.py").write_text("y = 2\n")  # untracked code
    assert checkout_state(tmp_path) == (head, True) == checkout_state(tmp_path / "src")
    (tmp_path / "src" / "x.py").unlink()
    (tmp_path / "src" / "a.py").write_text("x = 2\n")  # a tracked change
    assert checkout_state(tmp_path) == (head, True)
    assert checkout_state(tmp_path.parent / "nowhere") is None


def test_report_keeps_the_whole_command_but_the_programs_folder():
    from report import command_line

    assert command_line("/venv/bin/nplm-train a=1 hydra.run.dir=/tmp/x") == "nplm-train a=1 hydra.run.dir=/tmp/x"
    assert command_line("nplm-train") == "nplm-train"


def test_a_run_record_names_a_gpu_only_where_the_run_trains_on_one(monkeypatch):
    import torch
    from omegaconf import OmegaConf

    from nplm.tracking.records import gpu_trained_on

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    assert gpu_trained_on(OmegaConf.create({"trainer": {"accelerator": "gpu"}})) == "NVIDIA H200"
    assert gpu_trained_on(OmegaConf.create({"trainer": {"accelerator": "cpu"}})) is None  # a CPU run on a GPU machine
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_trained_on(OmegaConf.create({"trainer": {"accelerator": "auto"}})) is None


@pytest.mark.parametrize("key, commit", [("git_commit", "3a4b0201583b0c73a09ed6d9bb32429483aa4aa6-dirty"),
                                         ("git_commit", None), ("commit", "595705d+dirty"), ("commit", "unknown")])
def test_a_result_from_a_dirty_or_unrecorded_commit_is_refused_unless_allowed(tmp_path, monkeypatch, capsys, key,
                                                                              commit):
    from replication import write_result

    monkeypatch.delenv("NPLM_ALLOW_DIRTY", raising=False)
    assert write_result(tmp_path, "row", {"row": "row", key: commit, "valid": 1.0}) is False
    assert not (tmp_path / "row.json").exists()
    shown = "unrecorded" if commit is None else commit
    assert capsys.readouterr().out == (f"row: result not written, commit {shown}: commit the code and run the row "
                                       "again, or NPLM_ALLOW_DIRTY=1 to keep it, marked \u2020\n")
    monkeypatch.setenv("NPLM_ALLOW_DIRTY", "1")
    assert write_result(tmp_path, "row", {"row": "row", key: commit, "valid": 1.0}) is True
    assert json.loads((tmp_path / "row.json").read_text())[key] == commit


def test_a_result_from_a_clean_commit_is_written_without_a_word(tmp_path, monkeypatch, capsys):
    from replication import write_result

    monkeypatch.delenv("NPLM_ALLOW_DIRTY", raising=False)
    assert write_result(tmp_path, "row", {"row": "row", "git_commit": "3a4b0201583b0c73a09ed6d9bb32429483aa4aa6"})
    assert json.loads((tmp_path / "row.json").read_text())["git_commit"].startswith("3a4b020")
    assert capsys.readouterr().out == ""


def test_the_provenance_mark_and_its_footnote():
    from replication import provenance_footnote, provenance_mark, short_commit

    clean, dirty = {"git_commit": "3a4b0201583b0c73a09ed6d9bb32429483aa4aa6"}, {"commit": "595705d+dirty"}
    assert [provenance_mark(r) for r in (clean, dirty, {"git_commit": None}, {}, None)] == ["", "†", "†", "†", ""]
    assert [short_commit(c) for c in ("3a4b0201583b", "3a4b0201583b-dirty", None, "unknown")] == [
        "3a4b020", "3a4b020-dirty", "unrecorded", "unrecorded"]
    assert provenance_footnote([clean]) == []
    assert provenance_footnote([clean, dirty, {"git_commit": "ea0914f6138f-dirty"}, {"row": "ngram"}]) == [
        "† trained or measured from uncommitted code (`595705d+dirty`, `ea0914f-dirty`) or an unrecorded commit: no "
        "commit holds exactly the code behind the figure; run the row again from a clean checkout to replace it."]


def test_a_row_stopped_by_a_time_limit_is_not_finished_and_its_cut_epoch_is_not_averaged():
    from replication import finished, seconds_per_epoch

    assert finished({"converged": True, "stopped_by": "early stopping"})
    assert finished({"row": "kn5"})  # an n-gram: nothing stops it
    assert not finished({"converged": False, "stopped_by": "early stopping"})
    assert not finished({"converged": True, "stopped_by": "time limit (0 epochs after the best)"})
    times = [570.0, 512.0, 582.0, 530.0, 562.0, 522.0, 41.0]  # the 7th epoch cut after 41 s
    assert seconds_per_epoch(times, cut=True) == 546.3
    assert seconds_per_epoch(times, cut=False) == 474.1
    assert seconds_per_epoch([41.0], cut=True) == 41.0  # one epoch: nothing else to average


def test_an_epoch_cut_inside_a_resumed_run_is_found_and_not_averaged():
    """A budget stopped the run inside its 3rd epoch; the next call resumed from that epoch's end and ran to the
    5th: the 3rd is cut (1,472 of 3,922 steps), the run's last is whole."""
    from replication import cut_epochs, last_epoch_cut, seconds_per_epoch, stopped_by

    ends = [3922, 7844, 9316, 13238, 17160]  # the optimizer-step count at each epoch's end
    history = [{"step": n, "val/ppl": 10 - i, "train/epoch_time_s": t}
               for i, (n, t) in enumerate(zip(ends, [1000.0, 1010.0, 390.0, 1020.0, 1030.0]))]
    assert cut_epochs(history) == [3] and not last_epoch_cut(history)
    assert stopped_by(history, patience=2) == "epoch limit"
    assert seconds_per_epoch([h["train/epoch_time_s"] for h in history], cut_epochs(history)) == 1015.0
    assert cut_epochs(history[:3]) == [3] and last_epoch_cut(history[:3])
    assert cut_epochs([{"val/ppl": 1.0, "train/epoch_time_s": 1.0}] * 3) == []  # records without the column


def test_run_summary_averages_the_whole_epochs_only():
    history = [{"epoch": e, "step": s, "val/ppl": 300.0 - e, "train/epoch_time_s": t}
               for e, (s, t) in enumerate([(99, 500.0), (199, 520.0), (229, 60.0)])]  # the third cut at 30 steps
    record = {"history": history, "git_commit": "abc", "wall_time_s": 1100.0,
              "machine": {"platform": "Linux", "cpus": 2, "torch_threads": 1},
              "metrics": {"val/ppl_best": 298.0, "test/ppl": 290.0}}
    assert run_summary(record, "nplm-train")["train_s_per_epoch"] == 510.0
