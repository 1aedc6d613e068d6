"""Mnih & Hinton (2009) on Brown, Morin & Bengio's protocol (|V| = 10,000), and Mnih & Teh's (2012) NCE
beside the softmax and importance sampling for the same LBL (issue 27, items 4 and 5).

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
from driver import Driver, Row, Wait
from head_timing import best_of_rounds, examples_per_s, timing_batches
from replication import (DATA_DIR, corpus_datamodule, finished, load_result, machine, pct, provenance_footnote,
                         provenance_mark, read_record, row_marks, run_summary, stopped_by, valid_test)

HERE = Path(__file__).resolve().parent
MORIN = HERE.parent / "morin2005" / "results"  # the NPLM's rows on the same protocol

LBL, HLBL = ["experiment=mnih2009/lbl"], ["experiment=mnih2009/hlbl"]
LEARNED = ["tree=learned", "tree.bootstrap=random"]
SINGLE_CODE = "123-131"  # the issue quotes "learned single-code trees about 131 to 123", not tree by tree
# row: (overrides, Mnih & Hinton's APNews test perplexity as quoted in issue 27, the experiments/morin2005 NPLM row
# with the same output layer or tree)
NETWORKS = {
    "lbl": (LBL, "117", "nplm"),
    "lbl-nce": ([*LBL, "head=nce"], "", None),
    "lbl-nce-k100": ([*LBL, "head=nce", "head.num_samples=100"], "", None),  # 4x the paper's noise words
    "lbl-importance_sampling": ([*LBL, "head=importance_sampling"], "", "importance_sampling"),
    "hlbl-random": (HLBL, "151", "hierarchical-random-logistic"),
    "hlbl-balanced": ([*HLBL, *LEARNED, "tree.split=balanced"], SINGLE_CODE,
                      "hierarchical-learned-balanced-logistic"),
    "hlbl-adaptive": ([*HLBL, *LEARNED], SINGLE_CODE, "hierarchical-learned-logistic"),
    "hlbl-adaptive0.4": ([*HLBL, *LEARNED, "tree.eps=0.4"], SINGLE_CODE,
                         "hierarchical-learned-eps0.4-logistic"),
    "hlbl-adaptive0.4-x2": ([*HLBL, *LEARNED, "tree.eps=0.4", "tree.runs=2"], "",
                            "hierarchical-learned-eps0.4-x2-logistic"),
    "hlbl-adaptive0.4-x4": ([*HLBL, *LEARNED, "tree.eps=0.4", "tree.runs=4"], "112",
                            "hierarchical-learned-eps0.4-x4-logistic-unigram-init"),
}
FIRST_MODEL = "hlbl-random"  # the learned trees' first model
SAMPLED = {"lbl": "softmax", "lbl-nce": "nce", "lbl-nce-k100": "nce (k = 100)",  # item 5: the softmax and its
           "lbl-importance_sampling": "importance_sampling"}  # sampled trainings: row -> name in `timing`
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


def first_model() -> list[str]:
    """A learned-tree row's first model: the hlbl-random row's best checkpoint (Wait while it has not finished)."""
    first = read_record(DRIVER.runs / FIRST_MODEL)
    if not first or first.get("status") != "finished" or not first.get("best_checkpoint"):
        raise Wait(f"its first model ({FIRST_MODEL}) has not finished")
    return [f"tree.bootstrap_checkpoint={first['best_checkpoint']}"]


# -- time per example (item 5) --------------------------------------------------------------------------------
@functools.cache
def brown():
    return corpus_datamodule(LBL)


def measure_timing(threads: int = 2, rounds: int = 3, steps: int = 20, warmup: int = 3) -> dict:
    """Training (forward, backward, Adam step; batch 256, autograd as nplm-train trains the LBL) and test
    (exact NLL; batch 1024) examples per second of the recipe's LBL with each output layer."""
    import torch
    from hydra import compose, initialize_config_dir

    from nplm.config import CONF_DIR
    from nplm.heads import build_head
    from nplm.models import build_model
    from nplm.optimizers import build_optimizer
    from nplm.trees import TreeContext, build_tree

    torch.set_num_threads(threads)
    dm = brown()
    V, counts = len(dm.vocab), dm.vocab.counts
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        model_cfg = dict(compose(config_name="train", overrides=LBL).model)
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


# -- the README -----------------------------------------------------------------------------------------------
def tables(results: Path | None = None, morin: Path | None = None) -> str:
    results, morin = results or DRIVER.results, morin or MORIN
    lbl, nplm = load_result(results, "lbl"), load_result(morin, "nplm")
    lines = ["Perplexity on Brown (Morin & Bengio's protocol; valid / test, test against the same model's full "
             "softmax; epochs trained / best, * = stopped before early stopping; empty = not run yet):", "",
             "| row | tree | codes per word | ours valid / test | vs LBL softmax | epochs | stopped by | "
             "paper, APNews test (as quoted) | NPLM row (morin2005) | NPLM test | NPLM vs its softmax |",
             "|---|---|---:|---:|---:|---:|---|---:|---|---:|---:|"]
    for row, (_, paper, nplm_row) in NETWORKS.items():
        got = load_result(results, row)
        theirs = load_result(morin, nplm_row) if nplm_row else None
        tree = (got or {}).get("tree") or {}
        cells = [row + provenance_mark(got), tree.get("kind", ""), f"{tree['codes_per_word']:.2f}" if tree else "",
                 valid_test(got["valid"], got["test"], 1) if got else "",
                 pct(got["test"], lbl["test"]) if got and lbl else "",
                 f"{got['epochs']} / {got['best_epoch']}{'' if finished(got) else '*'}" if got else "",
                 got.get("stopped_by", "") if got else "", paper, nplm_row or "",
                 f"{theirs['test']:.1f}{provenance_mark(theirs)}" if theirs else "",
                 pct(theirs["test"], nplm["test"]) if theirs and nplm else ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += sampled_table(results) + targets(results, morin) + same_trees(results, morin)
    shown = [load_result(results, name) for name in [*NETWORKS, "timing"]]
    shown += [load_result(morin, name) for name in ["nplm", *(r for _, _, r in NETWORKS.values() if r),
                                                    *(row for _, _, theirs in TREE_GAPS for row in theirs)]]
    lines += ["", *provenance_footnote(r for r in shown if r)]
    return "\n".join(lines) + "\n"


TREE_GAPS = (  # (what, the LBL's rows, the NPLM's rows (morin2005)): (row, reference row) each
    ("a learned single-code tree (ADAPTIVE) against the random tree",
     ("hlbl-adaptive", "hlbl-random"), ("hierarchical-learned-logistic", "hierarchical-random-logistic")),
    ("the ADAPTIVE(0.4) x4 tree against the random tree",
     ("hlbl-adaptive0.4-x4", "hlbl-random"),
     ("hierarchical-learned-eps0.4-x4-logistic-unigram-init", "hierarchical-random-logistic")),
    ("the ADAPTIVE(0.4) x4 tree against the model's own full softmax",
     ("hlbl-adaptive0.4-x4", "lbl"), ("hierarchical-learned-eps0.4-x4-logistic-unigram-init", "nplm")),
)


def same_trees(results: Path, morin: Path) -> list[str]:
    """The same tree code under the two models: test perplexity of each tree against its reference."""
    out = ["", "The same trees under each model (test perplexity, change against the reference row):", "",
           "| comparison | LBL / HLBL | NPLM (morin2005) |", "|---|---:|---:|"]
    for what, ours, theirs in TREE_GAPS:
        cells = []
        for folder, (row, reference) in ((results, ours), (morin, theirs)):
            a, b = load_result(folder, row), load_result(folder, reference)
            cells.append(f"{pct(a['test'], b['test'])} ({a['test']:.1f} / {b['test']:.1f})"
                         f"{provenance_mark(a) or provenance_mark(b)}" if a and b else "")
        out.append(f"| {what} | {cells[0]} | {cells[1]} |")
    return out


def sampled_table(results: Path) -> list[str]:
    """Item 5: NCE and importance sampling against the softmax, perplexity and time per example."""
    lbl, timing = load_result(results, "lbl"), load_result(results, "timing")
    rows = {r: load_result(results, r) for r in SAMPLED}
    if not timing and not any(rows.values()):
        return []
    out = ["", "The LBL's softmax against its sampled trainings (train s/epoch and µs/example: the whole runs, "
               "data and validation excluded; examples/s: `--rows timing`, the training step alone"
           + (f", {timing['machine']}, best of {timing['rounds']} rounds" if timing else "") + "):", "",
           "| training | ours valid / test | vs softmax | µs / training example (run) | training examples/s "
           "(timing) | speed-up | test examples/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    rates = (timing or {}).get("examples_per_s", {})
    for row, name in SAMPLED.items():
        got, rate = rows[row], rates.get(name)
        out.append("| " + " | ".join([
            name + (row_marks(got) if got else ""), valid_test(got["valid"], got["test"], 1) if got else "",
            pct(got["test"], lbl["test"]) if got and lbl else "",
            f"{got['train_us_per_example']:.1f}" if got and "train_us_per_example" in got else "",
            f"{rate[0]:,.0f}{provenance_mark(timing)}" if rate else "",
            f"{rate[0] / rates['softmax'][0]:.1f}x" if rate and "softmax" in rates else "",
            f"{rate[1]:,.0f}" if rate else ""]) + " |")
    if "hierarchical (random tree)" in rates and "softmax" in rates:
        rate = rates["hierarchical (random tree)"]
        out.append(f"| hierarchical (random tree) | | | | {rate[0]:,.0f}{provenance_mark(timing)} | {rate[0] / rates['softmax'][0]:.1f}x | "
                   f"{rate[1]:,.0f} |")
    return out


def targets(results: Path, morin: Path) -> list[str]:
    """Issue 27's targets, each from the result files (a target whose rows have not run is listed as such)."""
    got = {r: g if (g := load_result(results, r)) and finished(g) else None for r in NETWORKS}  # finished rows only
    lbl, random = got["lbl"], got["hlbl-random"]
    out = ["", "Targets:", ""]
    single = {r: g for r, g in got.items() if g and g.get("tree", {}).get("kind") == "learned"
              and g["tree"]["codes_per_word"] == 1.0}
    multi = {r: g for r, g in got.items() if g and g.get("tree", {}).get("codes_per_word", 1.0) > 1.0}
    if random and single:
        best = min(single, key=lambda r: single[r]["test"])
        gain = 100 * (1 - single[best]["test"] / random["test"])
        nplm_random, nplm_learned = load_result(morin, "hierarchical-random-logistic"), load_result(
            morin, "hierarchical-learned-logistic")
        nplm = (f"; under the NPLM (experiments/morin2005) the learned tree gains "
                f"{100 * (1 - nplm_learned['test'] / nplm_random['test']):.1f}%") if nplm_random and nplm_learned else ""
        out.append(f"- a learned tree at least 10% better than the random tree: {best} {single[best]['test']:.1f} "
                   f"against {random['test']:.1f}, {gain:.1f}% better ({'met' if gain >= 10 else 'missed'}){nplm}")
    else:
        out.append("- a learned tree at least 10% better than the random tree: not measured (rows not run)")
    if lbl and multi:
        best = min(multi, key=lambda r: multi[r]["test"])
        ok = multi[best]["test"] <= lbl["test"]
        out.append(f"- the best multi-code tree at or below the LBL's softmax: {best} "
                   f"({multi[best]['tree']['codes_per_word']:.2f} codes per word) {multi[best]['test']:.1f} against "
                   f"{lbl['test']:.1f}, {pct(multi[best]['test'], lbl['test'])} ({'met' if ok else 'missed'})")
    else:
        out.append("- the best multi-code tree at or below the LBL's softmax: not measured (rows not run)")
    nces = {r: got[r] for r in ("lbl-nce", "lbl-nce-k100") if got[r]}
    timing = load_result(results, "timing")
    if lbl and nces:
        parts = []
        for row, nce in nces.items():
            gap = 100 * (nce["test"] / lbl["test"] - 1)
            parts.append(f"{SAMPLED[row]} {nce['test']:.1f}, {gap:+.1f}% ({'met' if gap <= 3 else 'missed'})")
        out.append(f"- NCE within 3% of the softmax's perplexity ({lbl['test']:.1f}): " + "; ".join(parts))
    else:
        out.append("- NCE within 3% of the softmax's perplexity: not measured (rows not run)")
    if timing:
        rates = timing["examples_per_s"]
        speed = rates["nce"][0] / rates["softmax"][0]
        runs = "".join(f"; {SAMPLED[row]}, whole runs: {lbl['train_us_per_example'] / nce['train_us_per_example']:.1f}x"
                       for row, nce in nces.items() if lbl and "train_us_per_example" in nce
                       and "train_us_per_example" in lbl)
        out.append(f"- NCE at least 5x faster per training example at 10,000 words: {speed:.1f}x "
                   f"({'met' if speed >= 5 else 'missed'}; the training step alone, `--rows timing`){runs}")
    else:
        out.append("- NCE at least 5x faster per training example: not measured (`--rows timing` not run)")
    return out


ROWS = {"timing": Row(measure=measure_timing),
        **{row: Row(overrides, max_epochs=MAX_EPOCHS, patience=PATIENCE,
                    first=first_model if "tree=learned" in overrides else None)
           for row, (overrides, _, _) in NETWORKS.items()}}
DRIVER = Driver(HERE, ROWS, network_result, tables, margin_s=120,
                said=lambda r: f"valid {r['valid']:.1f} test {r['test']:.1f}, {r['epochs']} epochs (best "
                               f"{r['best_epoch']}), stopped by {r['stopped_by']}")

if __name__ == "__main__":
    DRIVER.main(__doc__)
