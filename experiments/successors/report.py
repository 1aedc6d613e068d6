"""The rows of experiments/successors (the NPLM beside the models that replaced it) and the README's tables at
INTRO.md's marker, from the result files only: per corpus the modern NPLM, the LSTMs, the Transformer,
Transformer-N and Transformer-C beside the Kneser-Ney 5-gram, and the output layers side by side on the LSTM and
the Transformer; and the README's headline: whether Sun & Iyyer's ordering holds on each corpus, and whether Morin &
Bengio's trade-off holds on the LSTM and the Transformer."""

from __future__ import annotations

from pathlib import Path

from replication import (UNFINISHED, finished, load_result, pct, provenance_footnote, provenance_mark,
                         row_marks, valid_test)
from seeds import RULE, seed_note, seed_rows, spread, verdict

BROWN, SHAKESPEARE = ["corpus=brown_bengio2003"], ["corpus=tiny_shakespeare_heldout"]
# Every neural row has the parameters of its corpus's modern NPLM recipe within 5% (tests/test_successors_driver.py),
# but Zaremba et al.'s small LSTM, which is the paper's. Brown: the modern NPLM's recipe (experiment=sun2021/brown:
# 9,066,277 parameters, width 256, the tied adaptive softmax, AdamW, the weights' moving average) and the same head,
# optimizer and average for the LSTM (width 384) and the Transformers (sun2021/*_small). The weights' moving average
# spans the NPLMs' 512,000 tokens in every row (0.9995 at their 256 tokens a step): its decay is 1 - (tokens a step)
# / 512,000
LSTM_384 = ["model=lstm", "model.hidden_dim=384", "model.num_layers=2", "model.dropout=0.3", "optimizer=adamw",
            "optimizer.lr=0.001", "optimizer.eps=1e-5", "optimizer.weight_decay=0.1", "data.block_size=35",
            "data.batch_size=20", "trainer.max_epochs=40", "callbacks.early_stopping_patience=2",
            "callbacks.ema_decay=0.9986"]
TIED_ADAPTIVE = ["model.tie_embeddings=true", "head=adaptive", "head.cutoffs=null", "head.div_value=1.0"]
# Tiny Shakespeare's characters: experiment=sun2021/tinyshakespeare_char's NPLM (1,781,633 parameters, width 128),
# an LSTM of width 336, Transformers of width 192; as the NPLM the softmax, Adam at 1e-3, dropout 0.2 and the weights'
# moving average (the Transformers warm up over 500 steps, as on Brown)
CHAR_LSTM = ["model=lstm", "model.hidden_dim=336", "model.num_layers=2", "model.dropout=0.2", "head=softmax",
             "optimizer=adam", "optimizer.lr=0.001", "data.block_size=64", "data.batch_size=32",
             "trainer.max_epochs=40", "callbacks.early_stopping_patience=2", "callbacks.ema_decay=0.996"]
NOT_ADAPTIVE = ["~head.div_value"]  # the adaptive head's key the small Transformers' experiment files set
CHAR_TRANSFORMER = [*SHAKESPEARE, "head=softmax", *NOT_ADAPTIVE, "model.embed_dim=192", "model.hidden_dim=768",
                    "model.num_layers=4", "model.context_size=64", "model.dropout=0.2", "data.block_size=128",
                    "optimizer=adam", "optimizer.lr=0.001", "optimizer.weight_decay=0.0", "optimizer.eps=1e-8",
                    "optimizer.warmup_steps=500", "callbacks.ema_decay=0.992"]
# name: (overrides, the table's words, its corpus); the neural rows train to early stopping but zaremba-small,
# which trains its 13 epochs as the paper's schedule has it
MODELS = {
    "brown-modern": (["experiment=sun2021/brown"], "the modern NPLM (`experiment=sun2021/brown`, experiments/bengio2003's "
                     "run)", "brown"),
    "brown-lstm": ([*BROWN, *LSTM_384, *TIED_ADAPTIVE], "an LSTM, 2 layers of 384, tied adaptive softmax, AdamW",
                   "brown"),
    "brown-zaremba-small": (["experiment=zaremba2014/small", *BROWN],
                            "Zaremba et al.'s small LSTM (`experiment=zaremba2014/small`, its 13 epochs)", "brown"),
    "brown-transformer": (["experiment=sun2021/transformer_small"], "the Transformer (`sun2021/transformer_small`)",
                          "brown"),
    "brown-transformer-n": (["experiment=sun2021/transformer_n_small"], "Transformer-N (`sun2021/transformer_n_small`)",
                            "brown"),
    "brown-transformer-n-same-depth": (["experiment=sun2021/transformer_n_small_same_depth"],
                                       "Transformer-N at the Transformer's depth, its first layer replaced "
                                       "(`sun2021/transformer_n_small_same_depth`)", "brown"),
    "brown-transformer-c": (["experiment=sun2021/transformer_c_small"], "Transformer-C (`sun2021/transformer_c_small`)",
                            "brown"),
    "ts-modern": (["experiment=sun2021/tinyshakespeare_char", *SHAKESPEARE],
                  "the modern NPLM (`experiment=sun2021/tinyshakespeare_char`)", "shakespeare"),
    "ts-lstm": ([*SHAKESPEARE, *CHAR_LSTM], "an LSTM, 2 layers of 336, softmax, Adam", "shakespeare"),
    "ts-transformer": (["experiment=sun2021/transformer_small", *CHAR_TRANSFORMER],
                       "the Transformer, 4 layers of width 192", "shakespeare"),
    "ts-transformer-n": (["experiment=sun2021/transformer_n_small", *CHAR_TRANSFORMER, "model.num_layers=3",
                          "model.window=4", "model.summaries=1"],
                         "Transformer-N, width 192: the concatenation (a window of 4, 1 average), 2 attention layers",
                         "shakespeare"),
    "ts-transformer-n-same-depth": (["experiment=sun2021/transformer_n_small", *CHAR_TRANSFORMER, "model.window=4",
                                    "model.summaries=1"],
                                   "Transformer-N, width 192, at the Transformer's depth: the concatenation (a window "
                                   "of 4, 1 average), 3 attention layers", "shakespeare"),
    "ts-transformer-c": (["experiment=sun2021/transformer_c_small", *CHAR_TRANSFORMER],
                         "Transformer-C, 4 layers of width 192", "shakespeare"),
}
KN5 = {"brown": ("brown-kn5", BROWN), "shakespeare": ("ts-kn5", SHAKESPEARE)}
CORPORA = {"brown": "Brown (Bengio et al.'s split, |V| = 17,907; per word)",
           "shakespeare": "Tiny Shakespeare's characters (the first 80% train, the next 10% valid, the last 10% "
                          "test; per character)"}
# the output layers on the recurrent and the attention rows of Brown: (row, head overrides)
HEADS = {"softmax": ["head=softmax", "model.tie_embeddings=true"],
         "hierarchical": ["head=hierarchical", "tree=huffman", "model.tie_embeddings=false"],
         # the same tree, word2vec's node (Mnih & Hinton 2009): b_n + q_n . f instead of Morin & Bengio's node network
         "hierarchical-logistic": ["head=hierarchical", "tree=huffman", "head.node_form=logistic",
                                   "model.tie_embeddings=false"],
         # the trees for the models people train now: Brown clusters of the training bigrams, and Mnih & Hinton's
         # tree learned from the hierarchical-logistic row's predicted representations (its best checkpoint)
         "hierarchical-brown": ["head=hierarchical", "tree=brown", "head.node_form=logistic",
                                "model.tie_embeddings=false"],
         "hierarchical-learned": ["head=hierarchical", "tree=learned", "head.node_form=logistic",
                                  "model.tie_embeddings=false"],
         "class_based": ["head=class_based", "model.tie_embeddings=false"],
         "adaptive": [],
         "importance_sampling": ["head=importance_sampling", "model.tie_embeddings=true"],
         "nce": ["head=nce", "model.tie_embeddings=true"]}
HEAD_BASES = {"brown-lstm": [*BROWN, *LSTM_384], "brown-transformer": ["experiment=sun2021/transformer_small",
                                                                      *NOT_ADAPTIVE]}
BASE_WORDS = {"brown-lstm": "Brown's LSTM", "brown-transformer": "Brown's Transformer"}
# The sampled heads draw k noise words per batch, shared by its targets: the same draws per target on every
# base, the heads' default k at the LSTM's 700 targets a batch (20 blocks of 35), scaled by the targets of the
# other base's batch (the Transformer's 32 blocks of 96: 3,072, so 4.4 times as many words)
TARGETS_PER_BATCH = {"brown-lstm": 20 * 35, "brown-transformer": 32 * 96}
DEFAULT_K = {"importance_sampling": 100, "nce": 25}  # the heads' yamls


def sampled_k(head: str, base: str) -> list[str]:
    """`head.num_samples=...` for a sampled head on `base` (nothing for another head)."""
    if head not in DEFAULT_K:
        return []
    return [f"head.num_samples={round(DEFAULT_K[head] * TARGETS_PER_BATCH[base] / TARGETS_PER_BATCH['brown-lstm'])}"]


HEAD_ROWS = {f"{base}-{head}": ([*overrides, *extra, *sampled_k(head, base)], head, base)
             for base, overrides in HEAD_BASES.items() for head, extra in HEADS.items() if extra}
SPEED = "brown-heads-speed"  # the row that times every head row beside its base, in one process (speed.py)
LEARNED_FROM = "hierarchical-logistic"  # the head row whose best checkpoint a learned tree clusters (run.py)
# (a learned tree's row joins them once its first model has finished: run.py's timed_rows)
SPEED_BASE = {**{base: base for base in HEAD_BASES},
              **{name: base for name, (_, head, base) in HEAD_ROWS.items() if head != "hierarchical-learned"}}
SPEED_CONFIGS = {name: MODELS[name][0] if name in HEAD_BASES else HEAD_ROWS[name][0] for name in SPEED_BASE}


ORDER = ("transformer-n", "transformer", "modern")  # Sun & Iyyer's ordering, lowest perplexity first
ORDERED_ALSO = ("transformer-n-same-depth", "transformer-c")  # given against the Transformer beside it


def ordering(results: Path, corpus: str) -> str:
    """Whether Sun & Iyyer's ordering (Transformer-N ahead of the Transformer ahead of the modern NPLM, in test
    perplexity, mean over seeds: `seeds.verdict`) holds on `corpus`, and by how much; "not measured" until the
    three rows have finished. Transformer-N at the Transformer's depth and Transformer-C, once finished, are given
    against the Transformer too."""
    prefix, name = "brown" if corpus == "brown" else "ts", CORPORA[corpus].split(" (")[0]
    got = {key: spread(results, f"{prefix}-{key}") for key in ORDER}
    if not all(got.values()):
        missing = ", ".join(f"{prefix}-{k}" for k, r in got.items() if not r)
        return f"- {name}: not measured ({missing} not finished)"
    n, t, m = (got[k] for k in ORDER)
    words = {"transformer-n-same-depth": "Transformer-N at the Transformer's depth", "transformer-c": "Transformer-C"}
    beside = "".join(f"; {words[key]} {r} ({pct(r.mean, t.mean)} against the Transformer)"
                     for key in ORDERED_ALSO if (r := spread(results, f"{prefix}-{key}")))
    return (f"- {name}: {verdict((n, t), (t, m))}{seed_note(n, t, m)}: Transformer-N {n}, "
            f"the Transformer {t} ({pct(n.mean, t.mean)} for Transformer-N), the modern NPLM {m} "
            f"({pct(t.mean, m.mean)} for the Transformer){beside}, test perplexity")


def head_row(base: str, head: str) -> str:
    """The row of `base` (brown-lstm or brown-transformer) with `head`: the base row itself for the adaptive head."""
    return base if head == "adaptive" else f"{base}-{head}"


def against_softmax(speed: dict | None, base: str, head: str) -> float | None:
    """How many times as fast as `base`'s softmax row its `head` row trains, by the speed file `speed`; None
    where the file does not time both."""
    timed = (speed or {}).get("tokens_per_s", {})
    mine, softmax = timed.get(head_row(base, head)), timed.get(head_row(base, "softmax"))
    return mine / softmax if mine and softmax else None


PAIR = ("softmax", "hierarchical")  # the two heads Morin & Bengio's trade-off compares
# the rows the verdicts compare, each trained again with each of seeds.SEEDS: {`<row>-seed<s>`: (its overrides, row)}
SEEDED = [*(f"{prefix}-{key}" for prefix in ("brown", "ts") for key in (*ORDER, *ORDERED_ALSO)),
          *(f"{base}-{head}" for base in HEAD_BASES for head in PAIR)]
SEED_ROWS = {seeded: (overrides, name) for name in SEEDED
             for seeded, overrides in seed_rows(name, (MODELS.get(name) or HEAD_ROWS[name])[0]).items()}


def trade_off(results: Path, base: str) -> str:
    """Whether Morin & Bengio's trade-off holds on `base`: its hierarchical softmax trains faster than its softmax
    (tokens per second, the medians of the side-by-side measurement) and pays in test perplexity; whether another
    head dominates it (trains faster and scores lower, so the trade is not worth making); with every other finished
    head's speed (where the speed file times it) and test perplexity against the softmax's. "Not measured"
    until the softmax's and the hierarchical softmax's rows have finished and the speed file times both."""
    speed = load_result(results, SPEED)
    done = {head: r for head in HEADS if (r := load_result(results, head_row(base, head))) and finished(r)}
    missing = [head_row(base, h) for h in PAIR if h not in done]
    missing += [] if speed else [SPEED]
    if missing:
        return f"- {BASE_WORDS[base]}: not measured ({', '.join(missing)} not finished)"
    timed = speed["tokens_per_s"]
    untimed = [head_row(base, h) for h in PAIR if head_row(base, h) not in timed]
    if untimed:
        return f"- {BASE_WORDS[base]}: not measured ({SPEED} has no {', '.join(untimed)}: run it again)"
    faster = {head: ratio for head in done if (ratio := against_softmax(speed, base, head))}
    spreads = {head: spread(results, head_row(base, head)) for head in done}
    test = {head: r.mean for head, r in spreads.items()}
    paid = verdict((spreads["softmax"], spreads["hierarchical"]))  # the hierarchical softmax pays in perplexity
    holds = faster["hierarchical"] > 1 and paid == "holds"
    better = sorted((head for head in faster if head not in PAIR and faster[head] > faster["hierarchical"]
                     and test[head] < test["hierarchical"]), key=test.get) if holds else []
    said = ("holds, but is dominated" if better else "holds" if holds
            else "within noise" if paid == "within noise" else "does not hold")
    dominated = ("; faster by the medians and lower in test perplexity: "
                 f"{', '.join(f'{head} ({faster[head]:.2f}x, {test[head]:.2f})' for head in better)}" if better else "")
    others = [f"{head} {f'{faster[head]:.2f}x' if head in faster else '(speed not measured)'}, {test[head]:.2f} "
              f"({pct(test[head], test['softmax'])})" for head in done if head not in PAIR]
    waiting = [head_row(base, head) for head in HEADS if head not in done]
    return (f"- {BASE_WORDS[base]}: {said}{seed_note(spreads['softmax'], spreads['hierarchical'])}: the "
            f"hierarchical softmax trains {faster['hierarchical']:.2f}x as fast as the softmax, test perplexity "
            f"{spreads['hierarchical']} against {spreads['softmax']} ({pct(test['hierarchical'], test['softmax'])})"
            f"{dominated}"
            + (f"; the other heads (speed, test perplexity against the softmax's): {'; '.join(others)}"
               if others else "") + (f"; not finished: {', '.join(waiting)}" if waiting else ""))


TREES = [head for head in HEADS if head.startswith("hierarchical")]  # the hierarchical heads: one tree, node form each
TREE_TARGET = {"brown-lstm": (10, 2.5), "brown-transformer": (15, None)}  # within +x% of the softmax, y times as fast


def best_tree(results: Path, base: str) -> str:
    """The hierarchical head of `base` with the lowest mean test perplexity over its finished rows, against the
    softmax's and its target (TREE_TARGET): the gap, and its training speed against the softmax's where the speed
    file times both; "not measured" until the softmax and one hierarchical row have finished."""
    softmax = spread(results, head_row(base, "softmax"))
    trees = {head: got for head in TREES if (got := spread(results, head_row(base, head)))}
    if not (softmax and trees):
        return f"- {BASE_WORDS[base]}: not measured ({head_row(base, 'softmax') if not softmax else 'no tree'} " \
               "finished)"
    head, best = min(trees.items(), key=lambda item: item[1].mean)
    gap, faster = 100 * (best.mean / softmax.mean - 1), against_softmax(load_result(results, SPEED), base, head)
    most, fastest = TREE_TARGET[base]
    met = gap <= most and (fastest is None or (faster is not None and faster >= fastest))
    wanted = f"within +{most}%" + (f", at least {fastest}x as fast" if fastest else "")
    return (f"- {BASE_WORDS[base]}: {head} {best} against the softmax's {softmax} ({gap:+.1f}%"
            + (f", {faster:.2f}x as fast" if faster else ", speed not measured") + f"){seed_note(best, softmax)}; "
            f"target {wanted}: {'met' if met else 'not met'}; the trees: "
            + ", ".join(f"{h} {got.mean:.2f}" for h, got in trees.items()))


def headline(results: Path) -> str:
    """The README's first lines: Sun & Iyyer's ordering on each corpus, Morin & Bengio's trade-off on each base."""
    return "\n".join([
        "Sun & Iyyer's ordering (Transformer-N ahead of the Transformer ahead of the modern NPLM):", "",
        *(ordering(results, corpus) for corpus in CORPORA), "",
        "Morin & Bengio's trade-off (their hierarchical softmax trained 258x as fast as the softmax, for +13.0% test "
        "perplexity: 220.7 against 195.3):", "", *(trade_off(results, base) for base in HEAD_BASES), "",
        "The best hierarchical head (any tree, either node form) against the softmax:", "",
        *(best_tree(results, base) for base in HEAD_BASES), "",
        RULE, ""]) + "\n"


def epochs_cell(r: dict) -> str:
    """A trained row's "epochs trained / best" cell, marked UNFINISHED where the row did not finish."""
    return f"{r['epochs']} / {r['best_epoch']}{'' if finished(r) else UNFINISHED}"


def seeds_cell(results: Path, name: str) -> str:
    """"mean ± std (n)" of a row the verdicts compare (`SEEDED`), over its finished seeds; "" for another row."""
    got = spread(results, name) if name in SEEDED else None
    return "" if got is None else f"{got.mean:.2f} ± {got.std:.2f} ({got.seeds})"


def model_table(results: Path, corpus: str) -> list[str]:
    kn5_name, _ = KN5[corpus]
    kn5 = load_result(results, kn5_name)
    lines = [f"{CORPORA[corpus]}: valid / test perplexity, test bits per byte, parameters, epochs trained / best "
             "(* = not finished), what stopped it, seconds per epoch; empty = not run yet.", "",
             "| model | parameters | valid / test | test bpb | vs KN5 (test) | epochs | stopped by | s / epoch "
             "| test over seeds |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    if kn5:
        lines.append(f"| Kneser-Ney 5-gram, modified, interpolated (counted){row_marks(kn5)} |  | {kn5['valid']:.2f} / "
                     f"{kn5['test']:.2f} | {kn5['test_bpb']:.4f} | +0.0% |  |  |  |  |")
    for name, (_, what, where) in MODELS.items():
        if where != corpus:
            continue
        r = load_result(results, name)
        cells = [""] * 8 if not r else [
            f"{r['parameters']:,}", valid_test(r["valid"], r["test"], 2), f"{r['test_bpb']:.4f}",
            pct(r["test"], kn5["test"]) if kn5 else "", epochs_cell(r),
            r["stopped_by"], f"{r['train_s_per_epoch']:.0f}", seeds_cell(results, name)]
        lines.append("| " + " | ".join([what + (row_marks(r) if r else ""), *cells]) + " |")
    return lines


def head_table(results: Path) -> list[str]:
    speed = load_result(results, SPEED)
    lines = ["The output layers on Brown's LSTM and Transformer (each row: the base row with its head changed; "
             "adaptive is the base row itself): valid / test perplexity, parameters, epochs trained / best (* = not "
             "finished), and training tokens per second measured side by side in one process "
             f"(`--rows {SPEED}`: {speed['rounds'] if speed else 'its'} rounds, the median; the ratio to adaptive's, "
             "the median of the rounds' ratios and their range); empty = not run yet.", "",
             "| model | head | valid / test | parameters | epochs | tokens/s | vs adaptive | test over seeds |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for base in HEAD_BASES:
        for head in HEADS:
            name = head_row(base, head)
            r = load_result(results, name)
            cells = ["", "", ""] if not r else [
                valid_test(r["valid"], r["test"], 2) + provenance_mark(r), f"{r['parameters']:,}", epochs_cell(r)]
            timed = speed and name in speed["tokens_per_s"]
            cells += [f"{speed['tokens_per_s'][name]:,.0f}", speed["ratio"][name]] if timed else ["", ""]
            cells.append(seeds_cell(results, name) if r else "")
            lines.append(f"| {BASE_WORDS[base]} | {head} | " + " | ".join(cells) + " |")
    if speed:
        lines += ["", f"Speed measured on {speed['machine']}, {speed['warmup']} batches of warm-up then "
                  f"{speed['steps']} timed, each config in turn."]
    return lines


def tables(results: Path) -> str:
    shown = [load_result(results, name) for name in [*MODELS, *HEAD_ROWS, *SEED_ROWS, *(n for n, _ in KN5.values()),
                                                       SPEED]]
    lines = []
    for corpus in CORPORA:
        lines += [*model_table(results, corpus), ""]
    lines += head_table(results)
    return "\n".join([*lines, *provenance_footnote([r for r in shown if r])]) + "\n"
