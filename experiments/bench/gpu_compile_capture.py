"""Whether inductor's fused kernels survive nplm's own CUDA-graph capture, and what they buy: the plain
captured loop of gpu_step.py (the brown shape: nplm's modern NPLM and tied adaptive head, fused AdamW, one
torch.cuda.graph of forward + backward + update) with the loss as written, and with it through
torch.compile (inductor, default mode, fullgraph) before the capture; inductor's own random numbers
(dropout) and, `fallback-random`, aten's (torch._inductor.config.fallback_random, a private switch: the
one variant checked). Each variant runs in its own process (a failed capture leaves the CUDA generator
unusable), all in one call, on one card.

    python3 experiments/bench/gpu_compile_capture.py [--batches 256,4096] [--variants A,B] [--out DIR] [--report FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE))

VARIANTS = ("eager-loss", "inductor", "inductor, fallback-random")
# candidates for a faster step at batch 256, each measured against "inductor" (--variants picks them):
# head-all: the adaptive head scores every tail cluster for every row (`AdaptiveSoftmax.path = "all"`: no
# grouping kernels, more FLOPs: at |V| = 10,000 and batch 256, 10.8 GFLOP a step against 8.2, counted by
# torch.utils.flop_counter on the CPU);
# combo-kernels: inductor's horizontal fusion of independent kernels (torch._inductor.config.combo_kernels,
# a private switch, measured only); max-autotune: torch.compile(mode="max-autotune-no-cudagraphs"), inductor
# tunes its matmul and pointwise kernels (minutes of compiling).
CANDIDATES = ("inductor, head-all", "inductor, combo-kernels", "inductor, max-autotune")


def one(variant: str, batch: int, tmp: str) -> dict:
    """The captured loop of one variant at one batch size (in this process)."""
    import torch

    import gpu_step

    corpus = {"train": f"{tmp}/train.txt", "valid": f"{tmp}/valid.txt"}
    cfg = gpu_step.compose("brown", batch, True, False, corpus, tmp, 1)
    if variant != "eager-loss":
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = variant.endswith("fallback-random")
        inductor_config.combo_kernels = variant.endswith("combo-kernels")
    mode = "max-autotune-no-cudagraphs" if variant.endswith("max-autotune") else None
    compile_ = None if variant == "eager-loss" else (lambda f: torch.compile(f, fullgraph=True, mode=mode))

    def prepare(lm) -> None:
        if variant.endswith("head-all"):
            lm.head.path = "all"

    steps = gpu_step.steps_for("brown", batch, whole=True)
    start = time.time()
    result = gpu_step.reference_loop(cfg, "brown", batch, gpu_step.SHAPES["brown"]["vocab"], steps, compile_=compile_,
                                     prepare=prepare)
    return {**result, "wall_s": round(time.time() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="256,4096")
    parser.add_argument("--variants", default=";".join(VARIANTS),
                        help="variants joined by ';' (the first is each batch's baseline), of: "
                        + "; ".join(VARIANTS + CANDIDATES))
    parser.add_argument("--out", type=Path, default=None, help="writes gpu_compile_capture.json there")
    parser.add_argument("--report", type=Path, help="print the table of a result file (gpu_compile_capture.json)")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.report:
        print("\n".join(table(json.loads(args.report.read_text()))))
        return
    if args.variant:  # the child: one measurement, one JSON line
        print("RESULT " + json.dumps(one(args.variant, args.batch, os.environ["NPLM_PROBE_TMP"])), flush=True)
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_compile_capture: no CUDA device")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        import gpu_step

        gpu_step.write_corpus(Path(tmp), 100, 1000)  # (compose needs the files; the loop draws its own ids)
        for batch in (int(b) for b in args.batches.split(",")):
            for variant in args.variants.split(";"):
                done = subprocess.run([sys.executable, __file__, "--variant", variant, "--batch", str(batch)],
                                      capture_output=True, text=True, timeout=240,
                                      env={**os.environ, "NPLM_PROBE_TMP": tmp})
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
                row = json.loads(lines[-1][7:]) if lines else {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
                rows.append({"batch": batch, "variant": variant, **row})
                print(json.dumps(rows[-1]), flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("NPLM_GIT_COMMIT", "unknown"), "rows": rows}
    print("\n".join(table(result)))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_compile_capture.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "gpu_compile_capture.md").write_text("\n".join(table(result)) + "\n")


def table(result: dict) -> list[str]:
    """The markdown table of a result (`--report FILE` writes it again from a result file)."""
    rows = result["rows"]
    lines = [f"# A compiled loss in nplm's captured step on {result['device']}", "",
             f"torch {result['torch']}, commit {result.get('commit', 'unknown')}, bf16 autocast, the brown shape "
             "(`experiment=sun2021/brown`'s model and head, |V| = 10,000), the plain captured loop of gpu_step.py "
             "over a whole epoch of batches: `python3 experiments/bench/gpu_compile_capture.py`.", "",
             f"| batch | loss | ms a step | tokens/s | vs {rows[0]['variant']} | error |", "|---:|---|---:|---:|---:|---|"]
    base = {}  # each batch's first row: the baseline of its ratios
    for r in rows:
        base.setdefault(r["batch"], r.get("step_ms"))
    for r in rows:
        ratio = f"{base[r['batch']] / r['step_ms']:.2f}" if r.get("step_ms") and base.get(r["batch"]) else ""
        ms = f"{r['step_ms']:.3f}" if r.get("step_ms") else ""
        tps = f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else ""
        lines.append(f"| {r['batch']} | {r['variant']} | {ms} | {tps} | {ratio} | {r.get('error', '')} |")
    return lines


if __name__ == "__main__":
    main()
