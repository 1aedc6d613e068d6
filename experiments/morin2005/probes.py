"""Cheap probes of why binary trees trail the full softmax, on validation.

    python experiments/morin2005/probes.py                 # every probe that has no result yet
    python experiments/morin2005/probes.py --only dropout-0,logistic

Each probe is the Morin protocol (Brown, 10,000 words, MLP1 shape, Adam 1e-3, batch 256) with one
change, trained for PROBE_EPOCHS quarter-epochs (`trainer.limit_train_batches=0.25`, 1 thread,
no early stopping): far from convergence, so a probe only ranks candidate fixes by how fast
validation perplexity falls. The GPU script (gpu_runs.sh) trains the promising ones to convergence.
Results: results/probes.json ({probe: {overrides, valid per epoch, s: the run's wall time, codes_per_word}}).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
from replication import read_record, train_row, writable

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "probes.json"
OUT = HERE.parents[1] / "outputs" / "morin2005_probes"
PROBE_EPOCHS = 2
BASE = ["experiment=morin2005/hierarchical", "logger=none", f"trainer.max_epochs={PROBE_EPOCHS}",
        "trainer.limit_train_batches=0.25", "callbacks.early_stopping_patience=null"]
PROBES = {  # probe: overrides on top of BASE (the baseline: balanced tree, Morin-Bengio nodes)
    "softmax": ["head=softmax"],
    "balanced": [],
    "logistic": ["head.node_form=logistic"],
    "dropout-0.25": ["model.dropout=0.25"],
    "dropout-0": ["model.dropout=0"],
    "logistic-dropout-0.25": ["head.node_form=logistic", "model.dropout=0.25"],
    "node-hidden-64": ["head.node_hidden=64", "head.node_dim=64"],
    "softmax-lr-3e-3": ["head=softmax", "optimizer.lr=0.003"],
    "lr-3e-3": ["optimizer.lr=0.003"],
    "logistic-lr-3e-3": ["head.node_form=logistic", "optimizer.lr=0.003"],
    "logistic-zero-init": ["head.node_form=logistic", "head.node_init=zero"],
    "logistic-unigram-init": ["head.node_form=logistic", "head.node_init=unigram"],
    "brown-logistic": ["tree=brown", "head.node_form=logistic"],
    "random-logistic": ["tree=random", "head.node_form=logistic"],
    # learned trees clustering the random-logistic probe's model ({random-logistic}: its best checkpoint)
    "learned-logistic": ["tree=learned", "head.node_form=logistic", "tree.bootstrap_checkpoint={random-logistic}"],
    "learned-eps0.4-x2-logistic": ["tree=learned", "head.node_form=logistic", "tree.eps=0.4", "tree.runs=2",
                                   "tree.bootstrap_checkpoint={random-logistic}"],
}


def best_checkpoint(run_dir: Path) -> str:
    record = read_record(run_dir)
    return record["best_checkpoint"] if record else "missing: run the random-logistic probe first"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(PROBES)}")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=0,
                        help=f"full epochs instead of {PROBE_EPOCHS} quarter-epochs (results under '<probe>@<n>ep')")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in (args.only.split(",") if args.only else PROBES):
        key = f"{name}@{args.epochs}ep" if args.epochs else name
        if key in results:
            continue
        base = BASE if not args.epochs else [*BASE[:2], f"trainer.max_epochs={args.epochs}", *BASE[4:]]
        overrides = [o.replace("{random-logistic}", str(best_checkpoint(OUT / "random-logistic"))) for o in PROBES[name]]
        record = train_row(key, base + overrides, OUT / key, args.threads)
        if record is None:
            continue
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}  # another call may have added some
        probe = {"overrides": base[1:] + PROBES[name], "git_commit": record["git_commit"],
                 "valid": [round(r["val/ppl"], 1) for r in record["history"]], "s": round(record["wall_time_s"])}
        if record.get("tree"):
            probe["codes_per_word"] = round(record["tree"].get("codes_per_word", 1.0), 3)
        if not writable(key, probe):
            continue
        results[key] = probe
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        print(f"{key}: valid {results[key]['valid']} ({results[key]['s']} s)", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    main()
