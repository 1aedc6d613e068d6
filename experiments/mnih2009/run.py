"""Mnih & Hinton (2009) on Brown, Morin & Bengio's protocol (|V| = 10,000), and Mnih & Teh's (2012) NCE
beside the softmax and importance sampling for the same LBL.

    make replicate-mnih2009                         # = python experiments/mnih2009/run.py
    python experiments/mnih2009/run.py --rows lbl,hlbl-random --threads 2
    python experiments/mnih2009/run.py --rows timing
    python experiments/mnih2009/run.py --budget-s 3600     # every row stops by then; call again to go on
    python experiments/mnih2009/run.py --report-only

Rows (conf/experiment/mnih2009/*.yaml; one recipe, so only the output layer differs): the LBL with the
full softmax, with NCE and with importance sampling; the HLBL (logistic nodes, P(d_i = 1) =
sigmoid(r_hat . q_i + b_i)) on a random tree, and on the learned trees of the paper: BALANCED,
ADAPTIVE, ADAPTIVE(0.4) and ADAPTIVE(0.4) x2 and x4 (several codes per word). As in the paper the
learned trees cluster the predicted representations of a first model trained on a random tree: the
hlbl-random row's best checkpoint (`tree.bootstrap_checkpoint`), so that row trains first and the
learned rows wait for it. Every row trains to early stopping (patience PATIENCE; MAX_EPOCHS is a
safety net). `timing` measures training and test examples per second of the LBL with each output
layer, side by side on the same Brown windows (interleaved rounds, the best of each kept).

Resumable: a row whose run converged is skipped; a killed row, or one a `--budget-s` stopped before
it converged (its result says "converged": false), goes on from its last checkpoint on the next call.
Runs live in outputs/mnih2009/<row>; each result is results/<row>.json; README.md is written from
INTRO.md and the result files only.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
import replication
from driver import Driver, Row, Wait, first_model, sibling
from head_timing import best_of_rounds, examples_per_s, timing_batches
from replication import DATA_DIR, corpus_datamodule, machine, run_summary, stopped_by

HERE = Path(__file__).resolve().parent
MORIN = HERE.parent / "morin2005" / "results"  # the NPLM's rows on the same protocol

report = sibling(__file__, "report")  # the paper's figures, and the README's tables from the result files
LBL, NETWORKS = report.LBL, report.NETWORKS
FIRST_MODEL = "hlbl-random"  # the learned trees' first model
TIMED = {"softmax": {"name": "softmax"}, "importance_sampling": {"name": "importance_sampling"},
         "nce": {"name": "nce"}, "hierarchical (random tree)": {"name": "hierarchical", "node_form": "logistic"}}
MAX_EPOCHS, PATIENCE = 100, 2  # as conf/experiment/mnih2009/base.yaml


# -- training ----------------------------------------------------------------------------------------------
def network_result(row: str, spec: Row, record: dict) -> dict:
    """What results/<row>.json keeps: valid and test perplexity, epochs, best epoch, what stopped the run,
    the time per training example, and for the trees their kind and codes per word."""
    result = {"row": row, **run_summary(record, "nplm-train " + " ".join(spec.overrides)),
              "stopped_by": stopped_by(record["history"], PATIENCE),
              "converged": replication.converged(record, PATIENCE, MAX_EPOCHS)}
    tokens = (record.get("corpus") or {}).get("train_tokens")
    if tokens:  # from the epochs' own times (train_s_per_epoch is rounded to 0.1 s: 0.0 for a tiny corpus)
        seconds = sum(r["train/epoch_time_s"] for r in record["history"]) / len(record["history"])
        result["train_us_per_example"] = round(1e6 * seconds / tokens, 2)
    if record.get("tree"):
        tree = record["tree"]
        result["tree"] = {**tree, "codes_per_word": tree.get("codes_per_word", 1.0)}
    return result


# -- time per example --------------------------------------------------------------------------------------
@functools.cache
def brown():
    return corpus_datamodule(LBL)


def measure_timing(threads: int = 2, rounds: int = 3, steps: int = 20, warmup: int = 3) -> dict:
    """Training (forward, backward, Adam step; batch 256, autograd as nplm-train trains the LBL) and test
    (exact NLL; batch 1024) examples per second of the recipe's LBL with each output layer."""
    import torch
    from nplm.heads import build_head
    from nplm.models import build_model
    from nplm.optimizers import build_optimizer
    from nplm.trees import TreeContext, build_tree

    torch.set_num_threads(threads)
    dm = brown()
    V, counts = len(dm.vocab), dm.vocab.counts
    model_cfg = dict(replication.compose(LBL).model)
    tree = build_tree({"name": "random"}, TreeContext(dm.vocab, dm.ids["train"], counts, 0, DATA_DIR))
    train_batches, test_batches = timing_batches(dm, steps, warmup)

    def rates(head_cfg: dict) -> tuple[float, float]:
        torch.manual_seed(0)
        model = build_model(model_cfg, V)
        head = build_head(head_cfg, model.feature_dim, V, counts, tree)
        optimizer = build_optimizer(torch.nn.ModuleList([model, head]), {"name": "adam", "lr": 1e-3})

        def step(context, target):
            optimizer.zero_grad(set_to_none=True)
            head.loss(model(context), target).mean().backward()
            optimizer.step()
        return examples_per_s(model, head, step, train_batches, test_batches, warmup)

    best = best_of_rounds(rates, TIMED, rounds)
    from nplm.tracking.records import git_commit

    return {"vocab_size": V, "machine": machine(), "git_commit": git_commit(), "rounds": rounds, "steps": steps,
            "model": model_cfg, "examples_per_s": best, "command": "python experiments/mnih2009/run.py --rows timing"}


def tables(results: Path | None = None, morin: Path | None = None) -> str:
    return report.tables(results or DRIVER.results, morin or MORIN)


ROWS = {"timing": Row(measure=measure_timing),
        **{row: Row(overrides, max_epochs=MAX_EPOCHS, patience=PATIENCE,
                    first=first_model(FIRST_MODEL, lambda: DRIVER.runs) if "tree=learned" in overrides else None)
           for row, (overrides, _, _) in NETWORKS.items()}}
DRIVER = Driver(HERE, ROWS, network_result, tables, margin_s=120,
                said=lambda r: f"valid {r['valid']:.1f} test {r['test']:.1f}, {r['epochs']} epochs (best "
                               f"{r['best_epoch']}), stopped by {r['stopped_by']}")

if __name__ == "__main__":
    DRIVER.main(__doc__)
