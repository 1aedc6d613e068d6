"""Morin & Bengio (2005), Tables 1-3 (Brown, 10,000 words): speed and perplexity of the hierarchical model.

    make replicate-morin2005                     # = python experiments/morin2005/run.py
    python experiments/morin2005/run.py --rows timing,hierarchical-huffman --threads 2
    python experiments/morin2005/run.py --report-only
    python experiments/morin2005/run.py --rows nplm --rerun      # after raising max_epochs
    python experiments/morin2005/run.py --parallel 12 --device gpu --budget-s 1100   # gpu_runs.sh

`--parallel N` trains the network rows N at a time, each in its own process (`threads=1`), every
one to convergence (early stopping, patience 2, at most MAX_EPOCHS epochs); rows already converged
in outputs/morin2005/ are skipped, the others start afresh or go on from their last checkpoint.
With `--budget-s S` every row stops training by S seconds after the start (less a margin for its
test pass), tests its best checkpoint and writes its result with "converged": false, so a second
call goes on from there. Learned-tree rows take their first model from the random-tree row of the
same node form (`tree.bootstrap_checkpoint`): its best model once it has finished, or its model after
BOOT_EPOCHS epochs if that comes first.

Tables 1 and 2 (timing): training and test time per example of the NPLM with the full softmax, with
importance sampling and with the hierarchical output layer (balanced tree; also with row-sparse
updates of C, as the paper's per-example updates touch only the context's rows), measured side by
side in one run on real Brown windows: interleaved rounds, the best of each kept. Table 3 (perplexity): the
interpolated trigram and a class-based trigram counted here, and the networks trained by
conf/experiment/morin2005/*.yaml: full softmax, importance sampling, and the hierarchical model with
each tree (wordnet when NLTK's WordNet is installed; balanced, huffman, brown, learned always), with
the paper's node form and with the logistic node form of word2vec and Mnih & Hinton (2009).
Runs what is missing, resumes killed runs, and writes experiments/morin2005/README.md from the
result files in results/ only. Runs live in outputs/morin2005/.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
from driver import Driver, Row, Wait, sibling
from head_timing import best_of_rounds, examples_per_s, timing_batches
from replication import (DATA_DIR, ROOT, class_ngram, corpus_datamodule, machine, read_record, run_summary,
                         stopped_by, write_result)
from nplm.tracking.records import git_commit
from nplm.trees.wordnet import wordnet_installed

HERE = Path(__file__).resolve().parent

EXPERIMENT = ["experiment=morin2005/nplm"]  # its corpus: Brown, 10k words, 900k / 100k / rest
report = sibling(__file__, "report")  # the paper's tables, and the README's from the result files
TIMED, NETWORKS, NGRAMS = report.TIMED, report.NETWORKS, report.NGRAMS
reference = report.reference


def tables() -> str:
    return report.tables(DRIVER.results)


def targets(softmax: dict | None) -> list[str]:
    return report.targets(DRIVER.results, softmax)


MAX_EPOCHS, PATIENCE = 100, 2  # --parallel: to convergence; MAX_EPOCHS is only a safety net
CONVERGE = [f"trainer.max_epochs={MAX_EPOCHS}", f"callbacks.early_stopping_patience={PATIENCE}"]
MIN_START_S = 240  # --budget-s: a row is not started with less than this left (at most a quarter of the budget)
BOOT_EPOCHS = 5  # --parallel: a learned-tree row starts from its random-tree row after this many epochs of it
SHAPES = {"balanced": {"name": "balanced"}, "huffman": {"name": "huffman"},
          "wordnet (binarise=balanced)": {"name": "wordnet"},
          "wordnet (binarise=kmeans)": {"name": "wordnet", "binarise": "kmeans"}}


@functools.cache
def morin_corpus():
    """The rows' corpus, loaded once per driver run (timing and every n-gram row share it)."""
    return corpus_datamodule(EXPERIMENT)


# -- Tables 1 and 2: time per example ----------------------------------------------------------------
def measure_timing(threads: int = 2, rounds: int = 3, steps: int = 20, warmup: int = 3) -> dict:
    """Training (forward, backward, Adam step; batch 256) and test (exact NLL of the next word; batch
    1024) examples/s of each output layer on the same network and the same Brown windows."""
    import torch

    from nplm.fast import backprop
    from nplm.heads import build_head
    from nplm.fast.malloc import keep_freed_memory
    from nplm.models.nplm import NPLM, NPLMConfig
    from nplm.optimizers import build_optimizer
    from nplm.optimizers.lazy import step_without_profiler
    from nplm.trees import TreeContext, build_tree

    torch.set_num_threads(threads)
    keep_freed_memory()  # nplm-train does so with malloc_keep_freed=true (nplm.fast.malloc): the timings are those of that setting
    dm = morin_corpus()
    V, counts = len(dm.vocab), dm.vocab.counts
    tree = build_tree({"name": "balanced"}, TreeContext(dm.vocab, dm.ids["train"], counts, 0, DATA_DIR))
    shape = NPLMConfig(context_size=4, embed_dim=60, hidden_dim=50, direct=True)
    train_batches, test_batches = timing_batches(dm, steps, warmup)

    def rates(timed: tuple[str, bool]) -> tuple[float, float]:
        head_name, sparse = timed
        torch.manual_seed(0)
        model = NPLM(V, replace(shape, sparse_embeddings=sparse))
        head = build_head({"name": head_name}, model.feature_dim, V, counts, tree if head_name == "hierarchical" else None)
        optimizer = build_optimizer(torch.nn.ModuleList([model, head]), {"name": "adam", "lr": 1e-3})

        def step(context, target):
            optimizer.zero_grad(set_to_none=True)
            backprop.mean_loss_backward(model, head, context, target)  # as nplm-train: softmax by hand
            step_without_profiler(optimizer)
        return examples_per_s(model, head, step, train_batches, test_batches, warmup)

    best = best_of_rounds(rates, TIMED, rounds)
    return {"vocab_size": V, "train_tokens": len(dm.ids["train"]), "machine": machine(), "git_commit": git_commit(),
            "rounds": rounds, "steps": steps, "examples_per_s": best,
            "command": "python experiments/morin2005/run.py --rows timing"}


def tree_shapes(threads: int = 1) -> dict:
    """Depth and code length of the fixed trees on the rows' vocabulary, without training (the WordNet
    binarisations side by side)."""
    from nplm.trees import TreeContext, build_tree

    dm = morin_corpus()
    ctx = TreeContext(dm.vocab, dm.ids["train"], dm.vocab.counts, 1234, DATA_DIR)
    shapes = {name: build_tree(dict(cfg), ctx).stats(dm.vocab.counts) for name, cfg in SHAPES.items()
              if "wordnet" not in name or wordnet_installed()}
    return {"vocab_size": len(dm.vocab), "trees": shapes, "git_commit": git_commit(),
            "command": "python experiments/morin2005/run.py --rows tree-shapes"}


# -- Table 3: perplexity -----------------------------------------------------------------------------
def count_ngram(key: str, threads: int = 1) -> dict:
    from nplm.inference.mixture import build_ngram, ngram_log_probs, perplexity

    dm = morin_corpus()
    start = time.perf_counter()
    model = class_ngram(int(key[5:]), dm) if key.startswith("class") else build_ngram(key, dm)
    return {"row": key, "model": model.name, "fit_s": round(time.perf_counter() - start, 1), "machine": machine(),
            "git_commit": git_commit(), "command": f"python experiments/morin2005/run.py --rows {key}",
            **{s: perplexity(ngram_log_probs(model, dm, s)) for s in ("valid", "test")}}


def network_result(row: str, spec: Row, record: dict) -> dict:
    result = {"row": row, **run_summary(record, "nplm-train " + " ".join(spec.overrides)), "converged": converged(record)}
    if record.get("tree"):
        result["tree"] = record["tree"]
    return result


def converged(record: dict) -> bool:
    """Early stopping ended the run: PATIENCE epochs after the best one without a better val/ppl (or
    the MAX_EPOCHS safety net)."""
    history = record.get("history") or []
    if record.get("status") != "finished" or not history:
        return False
    return stopped_by(history, PATIENCE) == "early stopping" or len(history) >= MAX_EPOCHS


def bootstrap_row(row: str) -> str | None:
    """The random-tree row whose model a learned-tree row clusters (same node form), or None."""
    if "-learned" not in row:
        return None
    return "hierarchical-random-logistic" if "-logistic" in row else "hierarchical-random"


def bootstrap_checkpoint(dep: str) -> Path | None:
    """The first model for the learned-tree rows of `dep` (a random-tree row): its best checkpoint once
    it has finished, or before that a copy of its last checkpoint once it has trained BOOT_EPOCHS
    epochs (outputs/morin2005/<dep>-bootstrap.ckpt, kept for the rows that start later); None while neither."""
    import torch

    record = read_record(DRIVER.runs / dep)
    if record and record.get("status") == "finished":
        return Path(record["best_checkpoint"])
    snapshot = DRIVER.runs / f"{dep}-bootstrap.ckpt"
    if snapshot.exists():
        return snapshot
    history = DRIVER.runs / dep / "metrics.csv"
    if not history.exists() or len(history.read_text().splitlines()) - 1 < BOOT_EPOCHS:
        return None
    partial = snapshot.with_suffix(".tmp")
    try:  # last.ckpt may be half-written right now: copy, check it loads, else try again later
        partial.write_bytes((DRIVER.runs / dep / "checkpoints" / "last.ckpt").read_bytes())
        torch.load(partial, map_location="cpu", weights_only=True)
    except Exception:
        return None
    partial.replace(snapshot)
    return snapshot


def train_parallel(rows: list[str], parallel: int, device: str, budget_s: float | None,
                   extra: list[str] | None = None, margin_s: float = 90) -> None:
    """Train `rows` (network rows) `parallel` at a time, one process each (threads=1), to convergence;
    see the module docstring. Results are written as each row ends; a row that fails is reported and
    the others go on."""
    start = time.time()
    deadline = start + budget_s if budget_s else None
    pending, running = list(rows), {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    while pending or running:
        for row, (proc, log, overrides) in list(running.items()):
            if proc.poll() is None:
                if deadline is not None and time.time() > deadline and not getattr(proc, "stopped", False):
                    proc.terminate()  # its test pass overran the budget: stop it, keep its checkpoints
                    proc.stopped = True
                    print(f"[{time.time() - start:6.0f} s] {row}: still running at the end of the budget, stopped",
                          flush=True)
                continue
            log.close()
            del running[row]
            record = read_record(DRIVER.runs / row)
            if proc.returncode == 0 and record and record.get("status") == "finished":
                result = network_result(row, ROWS[row], record)
                if write_result(DRIVER.results, row, result):
                    print(f"[{time.time() - start:6.0f} s] {row}: valid {result['valid']:.1f} test "
                          f"{result['test']:.1f}, {result['epochs']} epochs (best {result['best_epoch']}), "
                          f"{'converged' if result['converged'] else 'NOT converged'}", flush=True)
            else:
                print(f"[{time.time() - start:6.0f} s] {row}: exit {proc.returncode}; see {DRIVER.runs / row}.log", flush=True)
        for row in list(pending):
            if len(running) >= parallel:
                break
            record = read_record(DRIVER.runs / row)
            if record and converged(record):
                pending.remove(row)
                if write_result(DRIVER.results, row, network_result(row, ROWS[row], record)):
                    print(f"{row}: converged earlier, result rewritten from {DRIVER.runs / row}", flush=True)
                continue
            bootstrap = []
            if (dep := bootstrap_row(row)) is not None:
                first = bootstrap_checkpoint(dep)
                if first is None and (dep in pending or dep in running):
                    continue  # waits for its first model
                if first is None:
                    pending.remove(row)
                    print(f"{row}: skipped, its first model ({dep}) did not train {BOOT_EPOCHS} epochs", flush=True)
                    continue
                bootstrap.append(f"tree.bootstrap_checkpoint={first}")
            if deadline is not None and deadline - time.time() < min(MIN_START_S, budget_s / 4):
                pending.remove(row)
                print(f"{row}: not started, less than {min(MIN_START_S, budget_s / 4):.0f} s of the budget left",
                      flush=True)
                continue
            pending.remove(row)
            run_dir = DRIVER.runs / row
            overrides = ROWS[row].overrides
            command = [*overrides, *CONVERGE, *(extra or []), *bootstrap, "threads=1", "logger=none",
                       f"hydra.run.dir={run_dir}"]
            if device == "gpu":
                command.append("trainer=gpu")
            if deadline is not None:
                command.append(f"stop_at={deadline - min(margin_s, budget_s / 10):.0f}")
            if (run_dir / "checkpoints" / "last.ckpt").exists():
                command.append(f"resume={run_dir}")
            run_dir.mkdir(parents=True, exist_ok=True)
            log = open(f"{run_dir}.log", "a")
            print(f"[{time.time() - start:6.0f} s] {row}: nplm-train {' '.join(command)}", flush=True)
            running[row] = (subprocess.Popen([sys.executable, "-m", "nplm.cli.train", *command], cwd=ROOT, stdout=log,
                                             stderr=subprocess.STDOUT, env=env), log, overrides)
        time.sleep(1)


def priority(row: str) -> int:
    """Launch order: the first models of the learned trees, then the slowest rows, then the rest."""
    if row in ("hierarchical-random", "hierarchical-random-logistic"):
        return 0
    return 1 if row.startswith(("nplm", "importance", "two-level")) else 2


def wordnet() -> list[str]:
    if not wordnet_installed():
        raise Wait("NLTK's WordNet is not installed (python -m nltk.downloader wordnet)")
    return []


ROWS = {"timing": Row(measure=measure_timing), "tree-shapes": Row(measure=tree_shapes),
        **{key: Row(measure=functools.partial(count_ngram, key)) for key in NGRAMS},
        **{row: Row(overrides, first=wordnet if "tree=wordnet" in overrides else None)
           for row, (overrides, _) in NETWORKS.items()}}
DRIVER = Driver(HERE, ROWS, network_result, tables, margin_s=90,
                said=lambda r: f"valid {r['valid']:.1f} test {r['test']:.1f}" if "valid" in r else "measured")


def parallel(args, chosen: list[str]) -> bool:
    """With --parallel: the chosen network rows trained `train_parallel`'s way (the module docstring)."""
    if args.parallel:
        rows = [r for r in chosen if r in NETWORKS and ("wordnet" not in r or wordnet_installed())]
        train_parallel(sorted(rows, key=priority), args.parallel, args.device, args.budget_s, args.extra.split(),
                       args.margin_s)
    return bool(args.parallel)


if __name__ == "__main__":
    parser = DRIVER.arguments(__doc__)
    parser.add_argument("--parallel", type=int, default=0,
                        help="train the network rows N at a time, each to convergence (module docstring)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="with --parallel: trainer=gpu or not")
    DRIVER.main(__doc__, parser, train=parallel)
