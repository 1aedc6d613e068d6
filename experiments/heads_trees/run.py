"""Every head, and for `head=hierarchical` every tree, on Brown with the same model and budget.

    python experiments/heads_trees/run.py [--epochs 2] [--threads 2] [--only softmax,hierarchical-huffman]
    python experiments/heads_trees/run.py --report-only      # only rewrite README.md from results/

Runs `nplm-train` for each variant that has no result yet (a killed run resumes from its last
checkpoint; `--rerun` trains the chosen ones again), writes each finished variant's figures to a small
JSON file in experiments/heads_trees/results/ (committed), and writes
`experiments/heads_trees/README.md` from those files only: validation and test perplexity, training
time per epoch, and tree statistics. Runs live in outputs/heads_trees/<variant>/.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
from replication import load_result, provenance_footnote, provenance_mark, run_summary, train_row, write_result
from nplm.trees.wordnet import wordnet_installed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
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


def overrides(name: str, epochs: int) -> list[str]:
    return [*COMMON, *VARIANTS[name], f"trainer.max_epochs={epochs}", "experiment_name=heads_trees"]


def train_variant(name: str, epochs: int, threads: int, rerun: bool) -> None:
    """Train (or resume) one variant and write its result file."""
    if not rerun and load_result(RESULTS, name):
        print(f"{name}: done, skipping (--rerun to train it again)")
        return
    command = overrides(name, epochs)
    record = train_row(name, command, OUT / name, threads, rerun)
    if record is None:
        return
    result = {"row": name, "max_epochs": epochs, **run_summary(record, "nplm-train " + " ".join(command)),
              "driver_command": f"python experiments/heads_trees/run.py --epochs {epochs} --only {name}"}
    if record.get("tree"):  # the tree's statistics (tree.stats)
        result["tree"] = record["tree"]
    if write_result(RESULTS, name, result):
        print(f"{name}: valid {result['valid']:.1f} test {result['test']:.1f}", flush=True)


def table() -> str:
    rows, machines, shown = [], [], []
    for name in VARIANTS:
        got = load_result(RESULTS, name)
        if got is None:
            continue
        shown.append(got)
        if got["machine"] not in machines:
            machines.append(got["machine"])
        tree = got.get("tree") or {}
        tree_cell = (f"depth {tree['mean_depth']:.1f} (max {tree['max_depth']}), code {tree['expected_code_length_bits']:.2f} "
                     f"bits / entropy {tree['unigram_entropy_bits']:.2f}" if tree else "")
        rows.append(f"| {name}{provenance_mark(got)} | {got['valid']:.1f} | {got['test']:.1f} | "
                    f"{got['epochs']} | {got['train_s_per_epoch']:.0f} | {tree_cell} |")
    header = ["| variant | best valid ppl | test ppl | epochs | train s/epoch | tree |", "|---|---:|---:|---:|---:|---|"]
    where = f"Machine{'s' if len(machines) > 1 else ''}: {'; '.join(machines)}." if machines else ""
    footnote = "".join(f"\n{line}\n" for line in provenance_footnote(shown))
    return "\n".join(header + rows) + "\n\n" + where + "\n" + footnote


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2, help="training epochs per variant (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run (default 2)")
    parser.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    parser.add_argument("--report-only", action="store_true", help="only rewrite README.md from results/")
    parser.add_argument("--rerun", action="store_true",
                        help="train the chosen variants again though they have results (on from their last "
                             "checkpoint; delete outputs/heads_trees/<variant> to train one from scratch)")
    args = parser.parse_args()
    chosen = [v for v in VARIANTS if not args.only or v in args.only.split(",")]
    if not args.report_only:
        OUT.mkdir(parents=True, exist_ok=True)
        for name in chosen:
            if name == "hierarchical-wordnet" and not wordnet_installed():
                print("hierarchical-wordnet: skipped, NLTK's WordNet is not installed (python -m nltk.downloader wordnet)")
                continue
            train_variant(name, args.epochs, args.threads, args.rerun)
    intro = (HERE / "INTRO.md").read_text()
    (HERE / "README.md").write_text(intro + "\n" + table())
    print(table())


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    main()
