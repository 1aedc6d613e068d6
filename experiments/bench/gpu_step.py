"""The training step on one CUDA GPU, in one run: nplm-train eager (cuda_graphs=false), nplm-train captured
(cuda_graphs=true), and a plain captured loop of the same model and head (the reference: nplm's modules,
torch's fused capturable AdamW, one torch.cuda.graph of forward + backward + clipping + update, each batch
copied into its static inputs), all bf16-mixed.

    python3 experiments/bench/gpu_step.py [--shapes brown,wikitext103,brown-lstm,...] [--batches 256,1024,4096]
                                          [--out DIR]
                                          [--paths eager,captured,...] [--dry-run]

Shapes (synthetic corpora made on the fly, Zipfian words, text_files):
- brown: `experiment=sun2021/brown` (the modern NPLM, context 32, window 8, 4 blocks of 256/1,024, tied
  adaptive softmax, AdamW) on |V| = 10,000 words, batch 256, 1,024 and 4,096 windows;
- wikitext103: `experiment=sun2021/wikitext103` (d 410, 16 blocks of 2,100, the first 1,500, context 511,
  tied adaptive softmax with cutoffs 20k/40k/200k) on |V| = 267,735 words, `data.block_size=512`, 20
  blocks a batch (10,240 tokens);
- the models that replaced the NPLM, on brown's |V| = 10,000 beside it (experiments/successors): brown-lstm,
  `experiment=zaremba2014/small` (2 layers of 200, 35 steps unrolled) at 20 and 128 streams, eager only (it
  carries its state between batches: nplm-train does not capture it, and no plain captured loop stands for
  it); brown-transformer and brown-transformer_n, `experiment=sun2021/transformer_small` and
  `transformer_n_small` (width 256, blocks of 96) at 32 and 256 blocks a batch.

nplm-train's rate is its second epoch's `train/tokens_per_s` (the first warms up and captures the step, which
the second replays from its first batch). The captured run and the reference train a whole epoch of the
synthetic corpus, as a run's epoch does (brown: 3,906 batches of 256, 244 of 4,096: what an epoch costs
once, such as drawing its order, is spread as in a run); the eager run, 5-10x slower, the first 400,000
tokens of it (at most 300 batches). MFU is `train/mfu` (the reference's from the same FLOPs
per token); peak memory is torch.cuda.max_memory_allocated over the run; the projection is 2.05e9
training tokens (Sun & Iyyer's WikiText-103 budget, 200,000 steps of 10,240) at that rate. Writes
<out>/<card>/gpu_step.json (harness.write_result; out: experiments/bench/results; with `--part NAME`,
gpu_step-NAME.json, kept beside the other parts' files) after every row.
`--dry-run` composes and checks every config and builds the reference loop's model on the CPU (no GPU needed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (puts the repository's src/ on sys.path)

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

BUDGET_TOKENS = 2.05e9
# block: the tokens a batch's row predicts (a window model's 1); eager_only: a model nplm-train trains eagerly
# (the LSTM carries its state from batch to batch: the capture refuses it, and the plain captured loop, which
# replays one batch's step, cannot stand for it)
BROWN_VOCAB = 10_000  # the brown shapes' vocabulary: a Zipfian corpus of about Brown's size (write_corpus)
SHAPES = {
    "brown": {"overrides": ["experiment=sun2021/brown"], "vocab": BROWN_VOCAB, "train_tokens": 1_000_000,
              "block": 1, "batches": (256, 1024, 4096)},
    "wikitext103": {"overrides": ["experiment=sun2021/wikitext103", "data.block_size=512", "data.eval_batch_size=20"],
                    "vocab": 267_735, "train_tokens": 1_500_000, "block": 512, "batches": (20,)},
    # the models that replaced the NPLM (experiments/successors' recipes), on brown's vocabulary beside it (the
    # Transformers' epochs are longer: 976 and 122 batches)
    "brown-lstm": {"overrides": ["experiment=zaremba2014/small"], "vocab": BROWN_VOCAB, "train_tokens": 1_000_000,
                   "block": 35, "batches": (20, 128), "eager_only": True},
    "brown-transformer": {"overrides": ["experiment=sun2021/transformer_small"], "vocab": BROWN_VOCAB,
                          "train_tokens": 3_000_000, "block": 96, "batches": (32, 256)},
    "brown-transformer_n": {"overrides": ["experiment=sun2021/transformer_n_small"], "vocab": BROWN_VOCAB,
                            "train_tokens": 3_000_000, "block": 96, "batches": (32, 256)},
}
# name, cuda_graphs, compile. compiled: inductor's step captured by nplm (cuda_graphs); the others: compiled, with
# their OVERRIDES
PATHS = [("eager", False, False), ("captured", True, False), ("compiled", True, True),
         ("compiled-reduce-overhead", True, True), ("compiled-s64", True, True), ("compiled-head-all", True, True)]
# a path's config overrides beside the shape's: torch.compile's own CUDA graphs (its reduce-overhead mode), 64
# batches a Lightning step (the recipe's 16: Lightning's cost per step is paid once per that many batches), the
# adaptive head's every-cluster loss
OVERRIDES = {"compiled-reduce-overhead": ["compile_mode=reduce-overhead"], "compiled-s64": ["steps_per_execution=64"],
             "compiled-head-all": ["head.training_path=all"]}
EAGER_TOKENS = 400_000  # training tokens of the eager run's epoch (steps = this / tokens per batch, 20 to 300)


def steps_for(shape: str, batch: int, whole: bool) -> int:
    """Batches of a measured epoch: the whole training corpus (`whole`), else the eager run's share of it."""
    tokens = batch * SHAPES[shape]["block"]
    if whole:
        return SHAPES[shape]["train_tokens"] // tokens
    return max(20, min(300, EAGER_TOKENS // tokens))


def write_corpus(folder: Path, vocab: int, tokens: int, seed: int = 0) -> dict[str, str]:
    """train.txt (Zipfian draws and every word once, shuffled) and valid.txt, 50 words a line."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    words = np.array([f"w{i}" for i in range(vocab)])
    paths = {}
    for split, n in (("train", tokens), ("valid", 60_000)):
        ids = rng.choice(vocab, size=n, p=p / p.sum())
        if split == "train":  # every word at least once, at random places (not a sorted run of rare words)
            ids = rng.permutation(np.concatenate([np.arange(vocab), ids]))
        lines = [" ".join(words[ids[i:i + 50]]) for i in range(0, len(ids), 50)]
        path = folder / f"{split}.txt"
        path.write_text("\n".join(lines) + "\n")
        paths[split] = str(path)
    return paths


def compose(shape: str, batch: int, graphs: bool, compile_: bool, corpus: dict, tmp: str, steps: int,
            extra: list[str] = ()):
    """nplm-train's config of a run at `shape` and `batch` on `corpus`, writing under `tmp`; `extra`: more overrides."""
    from hydra import compose as hydra_compose, initialize_config_dir

    from nplm.config import CONF_DIR

    overrides = [*SHAPES[shape]["overrides"], "corpus=text_files", f"corpus.train={corpus['train']}",
                 f"corpus.valid={corpus['valid']}", f"data.batch_size={batch}", "trainer=gpu",
                 "trainer.precision=bf16-mixed", *([] if graphs else ["cuda_graphs=false"]), f"compile={str(compile_).lower()}",
                 "trainer.max_epochs=2", f"trainer.limit_train_batches={steps}", "trainer.limit_val_batches=2",
                 "callbacks.early_stopping_patience=null", "trainer.enable_progress_bar=false", "logger=none",
                 f"paths.output_dir={tmp}/run-{shape}-{batch}-{graphs}-{compile_}", f"paths.data_dir={tmp}/data-{shape}",
                 *extra]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def check(cfg) -> None:
    """nplm-train's own check of a run's config, on this CPU (a dry run): a bad key or value fails here."""
    from nplm.config.schema import validate

    validate(OmegaConf.merge(cfg, {"trainer": {"accelerator": "cpu", "devices": 1}}))


def nplm_train(cfg) -> dict:
    from nplm.training.train import train

    torch._dynamo.reset()
    torch.cuda.reset_peak_memory_stats()
    metrics = train(cfg)
    return {"tokens_per_s": metrics["train/tokens_per_s"], "mfu": metrics.get("train/mfu"),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "graph_steps": metrics.get("train/graph_steps"),
            "flops_per_token": metrics.get("train/flops_per_token"), "peak_flops": metrics.get("device/peak_flops")}


def reference_model(cfg, vocab: int, device: str):
    """The run's model and head (nplm's modules, no Lightning) on Zipfian word counts."""
    from nplm.data.vocabulary import Vocabulary
    from nplm.training.module import LanguageModel

    counts = [int(1e7 / (r + 1)) + 1 for r in range(vocab)]
    words = Vocabulary([f"w{i}" for i in range(vocab)], counts, unk=None)
    plain = OmegaConf.to_container
    return LanguageModel(plain(cfg.model), plain(cfg.head), plain(cfg.optimizer), words).to(device).train()


def reference_loop(cfg, shape: str, batch: int, vocab: int, steps: int, compile_=None,
                   around=contextlib.nullcontext) -> dict:
    """The plain captured loop: static inputs, warm-up on a side stream, one graph of the whole step.
    `compile_`: a function that compiles the loss before the warm-up (gpu_profile_train.py --compile); `around`:
    a context manager factory entered around the timed replays (gpu_profile_train.py's profiler)."""
    lm = reference_model(cfg, vocab, "cuda")
    loss_of = compile_(lm._train_loss) if compile_ else lm._train_loss
    k, block = cfg.model.context_size, cfg.data.get("block_size")
    opt = torch.optim.AdamW(lm.parameters(), lr=torch.tensor(float(cfg.optimizer.lr), device="cuda"),
                            weight_decay=float(cfg.optimizer.get("weight_decay") or 0.0), fused=True, capturable=True)
    clip = cfg.trainer.get("gradient_clip_val")
    g = torch.Generator(device="cuda").manual_seed(0)
    p = 1.0 / torch.arange(1, vocab + 1, device="cuda", dtype=torch.float32)
    shape_in = (batch, block + k) if block else (batch, k)
    pool = []
    for _ in range(8):
        ids = torch.multinomial(p, shape_in[0] * shape_in[1], replacement=True, generator=g).view(shape_in)
        target = ids[:, k:] if block else torch.multinomial(p, batch, replacement=True, generator=g)
        pool.append((ids, target.contiguous()))
    static = [t.clone() for t in pool[0]]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = loss_of(*static).mean()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(lm.parameters(), clip)
        opt.step()

    torch.cuda.reset_peak_memory_stats()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        step()
    for i in range(10):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with around():
        start.record()
        for i in range(steps):
            for s, x in zip(static, pool[i % len(pool)]):
                s.copy_(x)
            graph.replay()
        end.record()
        end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    tokens = batch * (block or 1) * steps
    return {"tokens_per_s": tokens / seconds, "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "step_ms": 1e3 * seconds / steps}


def failure(err: Exception) -> dict:
    """A failed run's entry in its row: the table names the error in place of its figures."""
    return {"error": f"{type(err).__name__}: {str(err)[:200]}"}


def reference_row(cfg, shape: str, batch: int, vocab: int, steps: int, captured: dict) -> dict:
    """The plain captured loop's figures (`reference_loop`), its MFU from the captured run's FLOPs per token; or
    its error."""
    try:
        ref = reference_loop(cfg, shape, batch, vocab, steps)
    except Exception as err:  # noqa: BLE001 - the table names it
        ref = failure(err)
    if "tokens_per_s" in ref and captured.get("flops_per_token") and captured.get("peak_flops"):
        ref["mfu"] = ref["tokens_per_s"] * captured["flops_per_token"] / captured["peak_flops"]
    print(shape, batch, "reference", ref, flush=True)
    return ref


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="brown,wikitext103",
                        help=f"comma-separated, of: {', '.join(SHAPES)} (default: brown,wikitext103)")
    parser.add_argument("--batches", default=None, help="brown's batch sizes (default 256,1024,4096)")
    parser.add_argument("--paths", default="eager,captured", help="comma-separated nplm-train paths, of: "
                        + ", ".join(name for name, *_ in PATHS) + " (default: eager,captured)")
    parser.add_argument("--out", type=Path, default=harness.RESULTS, help="the results folder (default: results/)")
    parser.add_argument("--part", help="a result file of this part's own: <out>/<card>/gpu_step-PART.json")
    parser.add_argument("--dry-run", action="store_true", help="compose the configs, build the model; no GPU")
    args = parser.parse_args(argv)
    shapes = args.shapes.split(",")
    if unknown := sorted(set(shapes) - set(SHAPES)):
        sys.exit(f"gpu_step: --shapes {','.join(unknown)}: unknown; shapes are {', '.join(SHAPES)}")
    names = [name for name, *_ in PATHS]
    paths = args.paths.split(",")
    if unknown := sorted(set(paths) - set(names)):
        sys.exit(f"gpu_step: --paths {','.join(unknown)}: unknown; paths are {', '.join(names)}")
    batches = {"brown": tuple(int(b) for b in args.batches.split(","))} if args.batches else {}
    os.environ.setdefault("WANDB_MODE", "disabled")
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("gpu_step: no CUDA device (--dry-run checks the script without one)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            spec = SHAPES[shape]
            corpus = {"train": f"{tmp}/{shape}/train.txt", "valid": f"{tmp}/{shape}/valid.txt"}
            if not args.dry_run:
                (Path(tmp) / shape).mkdir()
                corpus = write_corpus(Path(tmp) / shape, spec["vocab"], spec["train_tokens"])
            for batch in batches.get(shape, spec["batches"]):
                steps = steps_for(shape, batch, whole=True)
                row = {"shape": shape, "vocab": spec["vocab"], "batch": batch, "steps": steps,
                       "eager_steps": steps_for(shape, batch, whole=False)}
                for name, graphs, compile_ in [p for p in PATHS if p[0] in paths
                                               and not (spec.get("eager_only") and p[1])]:
                    cfg = compose(shape, batch, graphs, compile_, corpus, tmp, steps if graphs else row["eager_steps"],
                                  OVERRIDES.get(name, []))
                    cfg.paths.output_dir = f"{cfg.paths.output_dir}-{name}"  # (nplm-train skips a finished run)
                    if args.dry_run:
                        check(cfg)
                        continue
                    try:
                        row[name] = nplm_train(cfg)
                    except Exception as err:  # noqa: BLE001 - the table names it
                        row[name] = failure(err)
                    print(shape, batch, name, row[name], flush=True)
                if args.dry_run:
                    reference_model(cfg, 1000, "cpu")  # (a small vocabulary: the CPU builds it)
                    print(f"gpu_step: {shape} batch {batch}: {steps} steps, configs composed", flush=True)
                    continue
                if not spec.get("eager_only"):
                    row["reference"] = reference_row(cfg, shape, batch, spec["vocab"], steps, row.get("captured", {}))
                rows.append(row)  # written after every row, so a run cut short keeps what it measured
                harness.write_result("gpu_step", table(rows), {"rows": rows}, args.out, device="cuda",
                                     part=args.part)
    if args.dry_run:
        print("gpu_step: --dry-run done (nothing measured)")


def table(rows: list[dict]) -> list[str]:
    """The markdown table of rows (gpu_step.json's `data.rows`)."""
    lines = ["bf16-mixed. tokens/s: nplm-train's second epoch (steps: its batches), or the reference loop's replays; "
             "time: 2.05e9 training tokens at that rate; of the reference: the rate as a fraction of the plain "
             "captured loop's.", "",
             "| shape | batch | path | steps | tokens/s | MFU | peak GiB | graph steps | hours for 2.05e9 tokens | "
             "of the reference |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        ref = row.get("reference", {}).get("tokens_per_s")
        for name in [p[0] for p in PATHS] + ["reference"]:
            m = row.get(name)
            if m is None:
                continue
            if "error" in m:
                lines.append(f"| {row['shape']} | {row['batch']} | {name} | | {m['error']} | | | | | |")
                continue
            rate = m["tokens_per_s"]
            mfu = f"{m['mfu']:.3f}" if m.get("mfu") is not None else ""
            share = f"{rate / ref:.2f}" if ref else ""
            steps = row.get("eager_steps", row["steps"]) if name == "eager" else row["steps"]
            graph_steps = f"{m['graph_steps']:.0f}" if m.get("graph_steps") else ""
            lines.append(f"| {row['shape']} | {row['batch']} | {name} | {steps} | {rate:,.0f} | {mfu} | "
                         f"{m['peak_gib']:.2f} | {graph_steps} | {BUDGET_TOKENS / rate / 3600:,.1f} | {share} |")
    return lines


if __name__ == "__main__":
    main()
