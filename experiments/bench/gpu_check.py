"""GPU readiness check of every head: the tests with CUDA, then short `nplm-train` runs with
`torch.cuda.set_sync_debug_mode("error")` active in every training step (NPLM_SYNC_DEBUG=1).

Run on a CUDA machine from the repository root (needs hydra-core, omegaconf and wandb besides torch,
Lightning and pytest):

    python3 experiments/bench/gpu_check.py [--steps 300] [--no-compile | --compile-only] [--skip-tests]

(All of it takes over 10 minutes, most of it compiling; in three parts: `--no-compile`,
`--skip-tests --compile-only`, or the tests alone with `NPLM_TEST_INDUCTOR=1 python3 -m pytest ...`.)

1. pytest tests/test_fast_paths.py (its CUDA tests: every head's NLL and gradient on the GPU equal the
   CPU's; a training step of every head, fp32 and bf16 autocast, with sync debug mode "error"), with
   NPLM_TEST_INDUCTOR=1 so compile=true is checked against eager with inductor's code, not only the
   graph capture; and the head tests (test_heads_more, test_hierarchical, test_model);
2. for every head x precision (32-true, bf16-mixed) x compile (false, true): `train(cfg)` of
   experiment=tinyshakespeare_char with trainer=gpu, `--steps` training batches and 20 validation
   batches, NPLM_SYNC_DEBUG=1 (a host-device sync in forward, backward or the optimizer update
   raises; validation and the every-50-steps log are outside the checked region).

Prints one summary table (status, train/val perplexity, training tokens/s) and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADS = {
    "softmax": ["head=softmax"],
    "hierarchical (Morin-Bengio)": ["head=hierarchical"],
    "hierarchical (logistic)": ["head=hierarchical", "head.node_form=logistic"],
    "class_based (frequency)": ["head=class_based"],
    "class_based (tree)": ["head=class_based", "head.classes=tree", "tree=balanced"],
    "adaptive": ["head=adaptive"],
    "importance_sampling": ["head=importance_sampling", "head.num_samples=20"],
}


def run_tests() -> int:
    env = {**os.environ, "NPLM_TEST_INDUCTOR": "1", "PYTHONPATH": f"{REPO / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "tests/test_fast_paths.py", "tests/test_heads_more.py",
           "tests/test_hierarchical.py", "tests/test_model.py"]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO, env=env).returncode


def train_run(head: list[str], precision: str, compile_: bool, steps: int) -> dict:
    import torch
    from hydra import compose, initialize_config_dir

    from nplm.config import CONF_DIR
    from nplm.training.train import train

    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["experiment=tinyshakespeare_char", "trainer=gpu", f"trainer.precision={precision}",
                     f"compile={str(compile_).lower()}", "trainer.max_epochs=1", f"trainer.limit_train_batches={steps}",
                     "trainer.limit_val_batches=20", "trainer.enable_progress_bar=false", "logger=none",
                     f"paths.output_dir={tmp}/run", f"paths.data_dir={tmp}/data", *head]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
        start = time.perf_counter()
        metrics = train(cfg)
        metrics["wall_s"] = time.perf_counter() - start
        return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training batches per run (default 300)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compile=true runs")
    parser.add_argument("--compile-only", action="store_true", help="only the compile=true runs")
    parser.add_argument("--skip-tests", action="store_true", help="skip pytest")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    os.environ["NPLM_SYNC_DEBUG"] = "1"
    os.environ.setdefault("WANDB_MODE", "offline")
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    tests_rc = 0 if args.skip_tests else run_tests()
    logging.disable(logging.WARNING)
    rows, failed = [], 0
    for name, head in HEADS.items():
        for precision in ("32-true", "bf16-mixed"):
            for compile_ in (False,) if args.no_compile else (True,) if args.compile_only else (False, True):
                try:
                    m = train_run(head, precision, compile_, args.steps)
                    ppl = m.get("train/ppl", m.get("train/ppl_sampled"))
                    row = (f"| {name} | {precision} | {compile_} | ok | {ppl:.3f} | {m['val/ppl']:.3f} | "
                           f"{m['train/tokens_per_s']:,.0f} | {m['wall_s']:.1f} |")
                except Exception as err:  # noqa: BLE001 - the summary names every failure
                    failed += 1
                    trace = traceback.format_exc().strip().splitlines()
                    print(f"## {name} {precision} compile={compile_} FAILED\n" + "\n".join(trace[-25:]), flush=True)
                    row = f"| {name} | {precision} | {compile_} | FAILED: {type(err).__name__}: {str(err)[:120]} | | | | |"
                print(row, flush=True)
                rows.append(row)
    print(f"\n## nplm-train, {args.steps} steps, NPLM_SYNC_DEBUG=1 (sync debug mode 'error' in every step after the first)")
    print("| head | precision | compile | status | train ppl | val ppl | train tokens/s | wall s |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\npytest: {'passed' if tests_rc == 0 else f'FAILED (exit {tests_rc})'}; runs failed: {failed}")
    sys.exit(1 if failed or tests_rc else 0)


if __name__ == "__main__":
    main()
