"""GPU readiness check of every model x head: the tests with CUDA, then short `nplm-train` runs with
`torch.cuda.set_sync_debug_mode("error")` active in every training step (`sync_debug=true`).

Run on a CUDA machine from the repository root (needs hydra-core, omegaconf and wandb besides torch,
Lightning and pytest):

    python3 experiments/bench/gpu_check.py [--steps 300] [--no-compile | --compile-only] [--skip-tests]
                                           [--graphs on|off|both] [--models nplm,lbl,modern]
                                           [--out experiments/bench/results] [--part NAME] [--note TEXT]
                                           [--dry-run]

(All of it takes over 10 minutes, most of it compiling; in three parts: `--no-compile`,
`--skip-tests --compile-only`, or the tests alone with `NPLM_TEST_INDUCTOR=1 python3 -m pytest ...`.)

1. pytest tests/test_fast_paths.py (its CUDA tests: every head's NLL and gradient on the GPU equal the
   CPU's; a training step of every head, fp32 and bf16 autocast, with sync debug mode "error") and
   tests/test_capture.py (every registered model x head captured as a CUDA graph, replayed with sync
   debug mode "error", its losses and parameters against the eager step's), with
   NPLM_TEST_INDUCTOR=1 so compile=true is checked against eager with inductor's code, not only the
   graph capture (not with --no-compile); and the head tests (test_heads_more, test_hierarchical,
   test_model);
2. for every model x head x precision (32-true, bf16-mixed) x compile (false, true): `train(cfg)` on
   Tiny Shakespeare characters with trainer=gpu (the NPLM as experiment=tinyshakespeare_char, the LBL
   with a context of 10 and width 64, the modern NPLM as experiment=sun2021/tinyshakespeare_char; its
   output vectors tied to the input table where the head has one per word), `--steps` training batches
   and 20 validation batches, `sync_debug=true` (a host-device sync in forward, backward or the
   optimizer update raises; validation and the every-50-steps log are outside the checked region).
   With `--graphs on` (the default) every run trains with cuda_graphs=true and must have replayed its
   captured step (`train/graph_steps` > 0: a capture that fails, or a configuration that cannot be
   captured, fails the row); `off`: the eager step (cuda_graphs=false); `both`: each run twice.

`--dry-run` composes every run's config and prints the runs, without a GPU (a check of the script).

Prints one summary table (status, train/val perplexity, training tokens/s), writes it to
<out>/<card>/gpu_check.json (with `--part NAME`: gpu_check-NAME.json, kept beside the other parts' files;
`--note` adds a line under the table) and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (puts the repository's src/ on sys.path)

REPO = harness.REPO
HEADS = {
    "softmax": ["head=softmax"],
    "hierarchical (Morin-Bengio)": ["head=hierarchical"],
    "hierarchical (logistic)": ["head=hierarchical", "head.node_form=logistic"],
    "class_based (frequency)": ["head=class_based"],
    "class_based (tree)": ["head=class_based", "head.classes=tree", "tree=balanced"],
    "adaptive": ["head=adaptive"],
    "importance_sampling": ["head=importance_sampling", "head.num_samples=20"],
    "nce": ["head=nce", "head.num_samples=20"],
}
MODELS = {
    "nplm": ["experiment=tinyshakespeare_char"],
    "lbl": ["corpus=tiny_shakespeare", "model=lbl", "model.context_size=10", "model.embed_dim=64", "optimizer=adam",
            "optimizer.lr=0.001", "data.batch_size=128"],
    "modern": ["experiment=sun2021/tinyshakespeare_char"],
    # the models that replaced it (experiments/successors' character rows): the LSTM carries its state between
    # batches, so the capture refuses it and it trains eagerly (EAGER); the Transformer and Transformer-N capture
    "lstm": ["corpus=tiny_shakespeare", "model=lstm", "model.hidden_dim=128", "model.dropout=0.2", "optimizer=adam",
             "optimizer.lr=0.001", "data.block_size=64", "data.batch_size=32"],
    "transformer": ["corpus=tiny_shakespeare", "model=transformer", "model.embed_dim=128", "model.hidden_dim=512",
                    "model.context_size=64", "data.block_size=128", "optimizer=adam", "optimizer.lr=0.001"],
    "transformer_n": ["corpus=tiny_shakespeare", "model=transformer", "model.first_layer=nplm", "model.window=16",
                      "model.summaries=4", "model.embed_dim=128", "model.hidden_dim=512", "model.context_size=64",
                      "data.block_size=128", "optimizer=adam", "optimizer.lr=0.001"],
}
EAGER = {"lstm"}  # models whose steps the capture refuses (nplm.training.capture.capture_blocker says why)


def model_head(model: str, head: str) -> list[str]:
    """The overrides of a model x head run: the modern NPLM ties its output vectors (its experiment's
    default) only where the head has one per word (its class's `can_tie`); the LBL ties them there too,
    to check that path."""
    from nplm.heads import head_class

    can_tie = head_class(HEADS[head][0].split("=", 1)[1]).can_tie  # HEADS[head][0] is "head=<name>"
    tie = []
    if model == "modern" and not can_tie:
        tie = ["model.tie_embeddings=false"]
    elif model == "lbl" and can_tie:
        tie = ["model.tie_embeddings=true"]
    return [*MODELS[model], *HEADS[head], *tie]


def run_tests(inductor: bool) -> int:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
    if inductor:
        env["NPLM_TEST_INDUCTOR"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "tests/test_fast_paths.py", "tests/test_capture.py",
           "tests/test_heads_more.py",
           "tests/test_hierarchical.py", "tests/test_model.py"]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO, env=env).returncode


def run_config(overrides: list[str], precision: str, compile_: bool, graphs: bool, steps: int, tmp: str):
    """The composed config of one check run, writing under `tmp`."""
    from hydra import compose, initialize_config_dir

    from nplm.config import CONF_DIR

    overrides = [*overrides, "trainer=gpu", f"trainer.precision={precision}", f"compile={str(compile_).lower()}",
                 "sync_debug=true",
                 *([] if graphs else ["cuda_graphs=false"]), "trainer.max_epochs=1", f"trainer.limit_train_batches={steps}",
                 "trainer.limit_val_batches=20", "trainer.enable_progress_bar=false", "logger=none",
                 f"paths.output_dir={tmp}/run", f"paths.data_dir={tmp}/data"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def train_run(overrides: list[str], precision: str, compile_: bool, graphs: bool, steps: int) -> dict:
    import torch

    from nplm.training.train import train

    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = run_config(overrides, precision, compile_, graphs, steps, tmp)
        start = time.perf_counter()
        metrics = train(cfg)
        metrics["wall_s"] = time.perf_counter() - start
        return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training batches per run (default 300)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compile=true runs")
    parser.add_argument("--compile-only", action="store_true", help="only the compile=true runs")
    parser.add_argument("--skip-tests", action="store_true", help="skip pytest")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--out", type=Path, default=harness.RESULTS, help="the results folder (default: results/)")
    parser.add_argument("--part", help="a result file of this part's own: <out>/<card>/gpu_check-PART.json")
    parser.add_argument("--note", action="append", default=[], help="a line shown under the table (repeatable)")
    parser.add_argument("--graphs", choices=("on", "off", "both"), default="on",
                        help="cuda_graphs=true (each run must replay its captured step), false, or both")
    parser.add_argument("--dry-run", action="store_true", help="compose every run's config and list the runs; no GPU")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    if unknown := sorted(set(models) - set(MODELS)):
        sys.exit(f"gpu_check: --models {','.join(unknown)}: unknown; models are {', '.join(MODELS)}")
    os.environ.setdefault("WANDB_MODE", "offline")
    import torch

    runs = list(itertools.product(models, HEADS, ("32-true", "bf16-mixed"),
                                  (False,) if args.no_compile else (True,) if args.compile_only else (False, True),
                                  {"on": (True,), "off": (False,), "both": (False, True)}[args.graphs]))
    if args.dry_run:
        with tempfile.TemporaryDirectory() as tmp:
            from nplm.config.schema import validate

            for model, name, precision, compile_, graphs in runs:
                cfg = run_config(model_head(model, name), precision, compile_, graphs, args.steps, tmp)
                cfg.trainer.accelerator, cfg.sync_debug = "cpu", False  # the schema's checks but the device's
                validate(cfg)
        print(f"gpu_check: {len(runs)} runs composed (--dry-run: none trained)")
        return
    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    tests_rc = 0 if args.skip_tests else run_tests(inductor=not args.no_compile)
    logging.disable(logging.WARNING)
    rows, failed = [], 0
    for model, name, precision, compile_, graphs in runs:
        where = f"| {model} | {name} | {precision} | {compile_} | {graphs} |"
        try:
            m = train_run(model_head(model, name), precision, compile_, graphs, args.steps)
            ppl = m.get("train/ppl", m.get("train/ppl_sampled"))
            replayed = int(m.get("train/graph_steps", 0))
            if graphs and replayed == 0 and model not in EAGER:
                raise RuntimeError("cuda_graphs=true but no step replayed a captured graph (see the log line)")
            row = (f"{where} ok | {replayed if graphs else ''} | {ppl:.3f} | {m['val/ppl']:.3f} | "
                   f"{m['train/tokens_per_s']:,.0f} | {m['wall_s']:.1f} |")
        except Exception as err:  # noqa: BLE001 - the summary names every failure
            failed += 1
            trace = traceback.format_exc().strip().splitlines()
            print(f"## {model} {name} {precision} compile={compile_} cuda_graphs={graphs} FAILED\n"
                  + "\n".join(trace[-25:]), flush=True)
            row = f"{where} FAILED: {type(err).__name__}: {str(err)[:120]} | | | | | |"
        print(row, flush=True)
        rows.append(row)
    tests = "skipped" if args.skip_tests else "passed" if tests_rc == 0 else f"FAILED (exit {tests_rc})"
    table = [f"pytest (the CUDA tests and the head tests): {tests}; runs failed: {failed} of {len(rows)}.", "",
             f"nplm-train, {args.steps} steps, `sync_debug=true` (sync debug mode 'error' in every step after the "
             "first); "
             "graph steps: the training batches that replayed the captured step (cuda_graphs=true).", "",
             "| model | head | precision | compile | cuda_graphs | status | graph steps | train ppl | val ppl | "
             "train tokens/s | wall s |", "|---|---|---|---|---|---|---:|---:|---:|---:|---:|", *rows]
    harness.write_result("gpu_check", table, {"tests": tests, "failed": failed, "runs": len(rows)}, args.out, "cuda",
                         args.note, args.part)
    sys.exit(1 if failed or tests_rc else 0)


if __name__ == "__main__":
    main()
