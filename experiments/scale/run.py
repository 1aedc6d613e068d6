"""WikiText-103-sized vocabularies on a laptop: every head and the trees on the
WikiText-103-shaped corpus (make_corpus.py: 267,735 words, 103,227,021 training tokens).

    python experiments/scale/run.py [--only corpus,id_cache,heads,side_by_side,trees] [--rerun]
    python experiments/scale/run.py --report-only     # rewrite README.md from results/*.json
    make scale                                        # the same, from the repository root

Each stage writes results/<name>.json when it finishes (committed) and is skipped when that file is
there (`--rerun` measures it again); README.md is written from those files only. The heavy parts run
single-threaded (`threads=1`, OMP_NUM_THREADS=1), each in its own process (`timed_run.py`), so peak
memory and time to first batch are the process's own:

- corpus: make_corpus.py (into data_cache/scale/wikitext103-zipf, git-ignored), timed;
- id_cache: `corpus=wikitext103 corpus.path=...` with an empty cache (built) and again (read);
- heads: nplm-train itself at MLP1's shape (n=5, m=60, h=50, direct), batch 1024, Adam,
  `model.sparse_embeddings=true` (and `head.sparse=true` where the head has it), for a bounded number of
  batches of the first epoch, then one validation and one test batch; time per training example from
  the steps after the first, the epoch time extrapolated from it (stated so in the table);
- second_run: nplm-train with the hierarchical head again, the ids and the tree cached: the time to
  its first batch, and where it goes (imports, config, ids, tree, model, Lightning);
- side_by_side: the full softmax and the hierarchical head timed in one process, alternating, the
  same training step as nplm-train's (`nplm.fast.backprop.mean_loss_backward` + the lazy optimizer);
- trees: balanced, Huffman and Brown trees built over the 267,735 words, timed; for Brown, where its
  exchange algorithm does not finish at this size, the part that does is measured and the rest
  extrapolated, and the whole tree built at smaller vocabularies (the corpus' top-N words).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT / "data_cache" / "scale"
CORPUS = DATA / "wikitext103-zipf"
DATA_DIR = DATA / "data"
RUNS = DATA / "runs"
PY = sys.executable
sys.path.insert(0, str(ROOT / "experiments"))  # the drivers' loop and shared helpers
sys.path.insert(0, str(HERE))
from driver import Driver, Row, bad_input  # noqa: E402
from readme import tables  # noqa: E402

CORPUS_ARGS = ["corpus=wikitext103", f"corpus.path={CORPUS}", f"paths.data_dir={DATA_DIR}", "threads=1",
               "logger=none", "seed=1234"]
MLP1 = ["model.context_size=4", "model.embed_dim=60", "model.hidden_dim=50", "model.direct=true",
        "model.sparse_embeddings=true", "optimizer=adam", "optimizer.lr=0.001", "data.batch_size=1024",
        "data.eval_batch_size=1024"]
# head -> (its overrides, training batches measured, batches per Lightning step)
HEADS = {
    "hierarchical-huffman": (["head=hierarchical", "head.sparse=true", "tree=huffman"], 640, 16),
    "hierarchical-balanced": (["head=hierarchical", "head.sparse=true", "tree=balanced"], 640, 16),
    "adaptive": (["head=adaptive"], 320, 16),  # the default cutoffs [V/20, V/4]: a 13,387-word shortlist
    "adaptive-2k": (["head=adaptive", "head.cutoffs=[2000,20000,100000]"], 320, 16),  # a large-V choice
    "importance_sampling": (["head=importance_sampling", "head.sparse=true"], 320, 16),
    "class_based": (["head=class_based"], 64, 4),
    "softmax": (["head=softmax"], 6, 1),
}
TRAIN_WINDOWS = 103_227_021 - 4  # one window per training token after the first n-1 = 4


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANDB_MODE": "disabled",
            "PYTHONPATH": str(ROOT / "src")}


def child(cmd: list[str], timeout: float | None = None) -> dict:
    """Run `cmd`; its wall time, exit status and peak resident memory (its own rusage, os.wait4)."""
    start = time.time()
    proc = subprocess.Popen(cmd, env=env(), cwd=ROOT)
    try:
        deadline = None if timeout is None else start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.time() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                return {"wall_s": time.time() - start, "timed_out": True, "peak_rss_mb": usage.ru_maxrss / 1024}
            time.sleep(0.2)
    except BaseException:
        proc.kill()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed with exit status {proc.returncode}")
    return {"wall_s": time.time() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024}


def timed(mode: str, name: str, overrides: list[str], timeout: float | None = None) -> dict:
    """experiments/scale/timed_run.py in its own process; its JSON plus the parent's view of it."""
    out = RUNS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    shutil.rmtree(RUNS / name, ignore_errors=True)  # a finished run's folder: nplm-train would not train again
    outer = child([PY, str(HERE / "timed_run.py"), mode, str(out), f"{time.time():.6f}", *overrides,
                   f"paths.output_dir={RUNS / name}"], timeout)
    result = json.loads(out.read_text()) if out.exists() else {}
    return {**result, "process": outer}


def measured(name: str, stage) -> Row:
    """The row `name`, measured by `stage()`: its figures, with when, at which commit and on what machine."""
    def measure(threads: int) -> dict:
        from nplm.tracking.records import git_commit

        data, commit = stage(), git_commit()  # the short commit, "-dirty" where the code differs from it
        return {"name": name, "measured_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                "commit": commit[:7] + ("-dirty" if commit.endswith("-dirty") else "") if commit else "unknown",
                "machine": machine_line(), **data}
    return Row(measure=measure)


def machine_line() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} when the stage ended"


# -- stages -----------------------------------------------------------------------------------------------
def stage_corpus() -> dict:
    import hashlib

    run = child([PY, str(HERE / "make_corpus.py"), "--out", str(CORPUS), "--seed", "0"])
    files = {}
    for path in sorted(CORPUS.glob("wiki.*.tokens")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files[path.name] = {"bytes": path.stat().st_size, "sha256": digest}
    return {"command": "python experiments/scale/make_corpus.py --seed 0", **run, "files": files}


def stage_id_cache() -> dict:
    shutil.rmtree(DATA_DIR / "ids", ignore_errors=True)
    built = timed("setup", "id_cache_build", CORPUS_ARGS)
    read = timed("setup", "id_cache_read", CORPUS_ARGS)
    meta = json.loads((Path(built["id_cache"]["folder"]) / "meta.json").read_text())
    return {"build": built, "read": read, "build_phases_s": meta.get("build_seconds"), "overrides": CORPUS_ARGS}


def stage_head(name: str) -> dict:
    head, batches, per_step = HEADS[name]
    overrides = [*CORPUS_ARGS, *MLP1, *head, "trainer.max_epochs=1", f"trainer.limit_train_batches={batches}",
                 "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", f"steps_per_execution={per_step}",
                 "progress.interval=60"]
    run = timed("train", f"head-{name}", overrides)
    steps = run["steps"][1:]  # the first Lightning step (its batches) is warm-up
    examples = sum(s[2] for s in steps)
    seconds = steps[-1][1] - steps[0][0]
    rate = examples / seconds
    return {"head": name, "overrides": overrides, "batches": batches, "measured_examples": examples,
            "measured_s": seconds, "examples_per_s": rate, "us_per_example": 1e6 / rate,
            "epoch_s_extrapolated": TRAIN_WINDOWS / rate, "run": run}


def stage_second_run() -> dict:
    """nplm-train with the hierarchical head once more, the token ids and the Huffman tree cached by the
    runs before: the time to first batch of a second run (and of every job of a sweep)."""
    head, _, per_step = HEADS["hierarchical-huffman"]
    overrides = [*CORPUS_ARGS, *MLP1, *head, "trainer.max_epochs=1", f"trainer.limit_train_batches={per_step}",
                 "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", f"steps_per_execution={per_step}"]
    timed("train", "second_run_warm", overrides)  # (makes sure both caches are there)
    return {"overrides": overrides, "run": timed("train", "second_run", overrides)}


def stage_side_by_side() -> dict:
    out = RUNS / "side_by_side.json"
    proc = child([PY, str(HERE / "side_by_side.py"), str(out), str(CORPUS), str(DATA_DIR)])
    return {**json.loads(out.read_text()), "process": proc}


def stage_tree(tree: str) -> dict:
    run = timed("tree", f"tree-{tree}", [*CORPUS_ARGS, "head=hierarchical", f"tree={tree}"])
    return {"tree": tree, "build_s": run["tree_s"], "stats": run["tree"], "run": run}


def stage_brown_tree() -> dict:
    out = RUNS / "brown_probe.json"
    proc = child([PY, str(HERE / "brown_probe.py"), str(out), str(DATA_DIR)])
    return {**json.loads(out.read_text()), "process": proc}


ROWS = {"corpus": measured("corpus", stage_corpus), "id_cache": measured("id_cache", stage_id_cache),
        **{f"head-{name}": measured(f"head-{name}", functools.partial(stage_head, name)) for name in HEADS},
        "second_run": measured("second_run", stage_second_run),
        "side_by_side": measured("side_by_side", stage_side_by_side),
        **{f"tree-{tree}": measured(f"tree-{tree}", functools.partial(stage_tree, tree)) for tree in ("balanced", "huffman")},
        "tree-brown": measured("tree-brown", stage_brown_tree)}
STAGES = {"corpus": ["corpus"], "id_cache": ["id_cache"], "heads": [f"head-{name}" for name in HEADS],
          "second_run": ["second_run"], "side_by_side": ["side_by_side"],
          "trees": ["tree-balanced", "tree-huffman", "tree-brown"]}
DRIVER = Driver(HERE, ROWS, result=None, tables=lambda: tables(DRIVER.results), said=lambda r: "measured")


def choose(args) -> list[str]:
    """--rows, or the rows of the --only stages (--heads: of those heads); the corpus first where it is missing."""
    if args.rows:
        return DRIVER.chosen(args)
    stages = args.only.split(",")
    if unknown := sorted(set(stages) - set(STAGES)):
        bad_input(f"--only: unknown stages {unknown}; stages are {', '.join(STAGES)}")
    if not CORPUS.joinpath("wiki.train.tokens").exists() and "corpus" not in stages:
        stages.insert(0, "corpus")
    heads = args.heads.split(",") if args.heads else list(HEADS)
    return [row for stage in stages for row in STAGES[stage] if not row.startswith("head-") or row[5:] in heads]


if __name__ == "__main__":
    parser = DRIVER.arguments(__doc__)
    parser.add_argument("--only", default=",".join(STAGES), help="stages, comma-separated (default: all)")
    parser.add_argument("--heads", default=None, help="with heads: only these, e.g. softmax,adaptive")
    DRIVER.main(__doc__, parser, choose)
