"""Every head, and for `head=hierarchical` every tree, on Brown with the same model and budget.

    python experiments/heads_trees/run.py [--epochs 2] [--threads 2] [--only softmax,hierarchical-huffman]

Runs `nplm-train` for each variant that has no finished run yet (a killed run resumes from its last
checkpoint),
then writes `experiments/heads_trees/README.md` from the runs' own metrics.json: validation and test
perplexity, training time per epoch, and tree statistics. Runs live in outputs/heads_trees/<variant>/.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
from replication import read_record, train_row
from nplm.trees.wordnet import wordnet_installed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "outputs" / "heads_trees"

# MLP1's shape (Bengio et al. 2003): n=5, m=60, h=50, direct connections, dropout 0.5; Adam, batch 256
# (the recipe of experiment=brown_mlp1).
COMMON = ["corpus=brown", "model.context_size=4", "model.embed_dim=60", "model.hidden_dim=50",
          "model.direct=true", "model.dropout=0.5", "optimizer=adam", "optimizer.lr=0.001", "data.batch_size=256", "logger=csv"]
VARIANTS = {
    "softmax": ["head=softmax"],
    "class_based": ["head=class_based"],
    "adaptive": ["head=adaptive"],
    "importance_sampling": ["head=importance_sampling"],
    **{f"hierarchical-{tree}": ["head=hierarchical", f"tree={tree}"]
       for tree in ("balanced", "random", "huffman", "brown", "learned", "wordnet")},
}


def table() -> str:
    rows, machine = [], None
    for name in VARIANTS:
        record = read_record(OUT / name)
        if record is None:
            continue
        if record["status"] != "finished":
            rows.append(f"| {name} | {record['status']} | | | | |")
            continue
        machine = machine or record["machine"]
        history = record["history"]
        per_epoch = sum(r["train/epoch_time_s"] for r in history) / len(history)
        tree = record.get("tree") or {}
        tree_cell = (f"depth {tree['mean_depth']:.1f} (max {tree['max_depth']}), code {tree['expected_code_length_bits']:.2f} "
                     f"bits / entropy {tree['unigram_entropy_bits']:.2f}" if tree else "")
        rows.append(f"| {name} | {record['metrics']['val/ppl_best']:.1f} | {record['metrics'].get('test/ppl', float('nan')):.1f} | "
                    f"{len(history)} | {per_epoch:.0f} | {tree_cell} |")
    header = ["| variant | best valid ppl | test ppl | epochs | train s/epoch | tree |", "|---|---:|---:|---:|---:|---|"]
    where = (f"Machine: {machine['platform']}, {machine['cpus']} CPUs, {machine['torch_threads']} torch threads."
             if machine else "")
    return "\n".join(header + rows) + "\n\n" + where + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2, help="training epochs per variant (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run (default 2)")
    parser.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    parser.add_argument("--report-only", action="store_true", help="only rewrite the README from existing runs")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    chosen = [v for v in VARIANTS if not args.only or v in args.only.split(",")]
    if not args.report_only:
        for name in chosen:
            if name == "hierarchical-wordnet" and not wordnet_installed():
                print("hierarchical-wordnet: skipped, NLTK's WordNet is not installed (python -m nltk.downloader wordnet)")
                continue
            train_row(name, [*COMMON, *VARIANTS[name], f"trainer.max_epochs={args.epochs}",
                             "experiment_name=heads_trees"], OUT / name, args.threads)
    intro = (HERE / "INTRO.md").read_text() if (HERE / "INTRO.md").exists() else ""
    (HERE / "README.md").write_text(intro + "\n" + table())
    print(table())


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    main()
