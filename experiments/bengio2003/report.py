"""Bengio et al. (2003)'s Table 1, the n-grams beside it and the modern NPLM's ablations: what
experiments/bengio2003 compares (run.py trains and counts its rows), and the README's tables below INTRO.md,
from the result files only."""

from __future__ import annotations

from pathlib import Path

import replication
from replication import finished, load_result, pct, provenance_footnote, provenance_mark, row_marks, valid_test

# Table 1 of Bengio et al. (2003): (valid, test) perplexity as published.
NETWORKS = {  # row: (n, h, m, direct, published alone, published mixed with the trigram, mixed row's name)
    "mlp1": (5, 50, 60, True, (284, 268), (275, 257), "MLP2"),
    "mlp3": (5, 0, 60, True, (327, 310), (286, 272), "MLP4"),
    "mlp5": (5, 50, 30, True, (296, 279), (273, 259), "MLP6"),
    "mlp7": (3, 50, 30, True, (309, 293), (284, 270), "MLP8"),
    "mlp9": (5, 100, 30, False, (280, 276), (265, 252), "MLP10"),
    "wide": (5, 400, 100, False, None, None, "WIDE + trigram"),  # not in the paper (no published figures): `modern` only
}
NGRAMS = {  # key: (label, published (valid, test))
    "interpolated-trigram": ("Deleted-interpolation trigram", (352, 336)),
    **{f"kn{n}-backoff-srilm": (f"Kneser-Ney back-off, n={n} (SRILM's default count cutoffs)", pub)
       for n, pub in ((3, (334, 323)), (4, (332, 321)), (5, (332, 321)))},
    "kn5": ("Kneser-Ney interpolated, n=5 (not in the paper)", None),
    **{f"class{c}": (f"class-based back-off, n=3, {c} classes", pub)
       for c, pub in ((150, (348, 334)), (200, (354, 340)), (500, (326, 312)), (1000, (335, 319)),
                      (2000, (343, 326)))},
}
RECIPES = ("paper", "modern", "converged")
BEST_PUBLISHED_MIX = 252  # MLP10's test perplexity, the paper's best row
# The modern NPLM (Sun & Iyyer 2021): conf/experiment/sun2021/brown.yaml, and one part changed at a
# time. row: (overrides after the recipe, what the row changes). The recipe validates on the weights' moving
# average since its sun2021-ema row measured it; the rows before that train without it (NO_EMA), as they ran.
NO_EMA = ["callbacks.ema_decay=null"]
SUN2021_RECIPE = "sun2021-ema"  # the row that trains conf/experiment/sun2021/brown.yaml as it is shipped
SUN2021 = {
    "sun2021": (NO_EMA, "the recipe without the moving average: 4 residual blocks, a window of 8 and 2 averages of "
                        "the 24 before it, tied"),
    "sun2021-depth1": ([*NO_EMA, "model.num_layers=1"], "depth: 1 block"),
    "sun2021-depth2": ([*NO_EMA, "model.num_layers=2"], "depth: 2 blocks"),
    "sun2021-no-residual": ([*NO_EMA, "model.residual=false"], "no residual sums"),
    "sun2021-window4": ([*NO_EMA, "model.window=4"], "window of 4 (28 averaged)"),
    "sun2021-window16": ([*NO_EMA, "model.window=16"], "window of 16 (16 averaged)"),
    "sun2021-no-distant": ([*NO_EMA, "model.summaries=0", "model.context_size=8"],
                           "no distant context: the window of 8 alone"),
    "sun2021-untied": ([*NO_EMA, "model.tie_embeddings=false"], "output vectors apart from the input table"),
    "sun2021-ema": (["callbacks.ema_decay=0.9995"], "the recipe: validated and tested on the weights' moving average "
                                                    "(decay 0.9995)"),
}
SUN2021_GAIN = 0.05  # the target: the modern NPLM at least 5% below the best network of the table on test


def _load(results: Path, name: str) -> dict | None:
    """A row's result; for `converged-<row>`, the step size with the best validation perplexity, with
    every candidate's validation perplexity under "lr_candidates"."""
    if name.startswith("converged-"):
        runs = [r for path in sorted(results.glob(f"{name}-lr*.json")) if (r := load_result(results, path.stem))]
        if not runs:
            return None
        best = min(runs, key=lambda r: r["valid"])
        return {**best, "lr_candidates": {f"{r['lr']:g}": round(r["valid"], 1) for r in runs}}
    return load_result(results, name)


def tables(results: Path) -> str:
    lines = ["| row | n | h | m | direct | mix | published valid / test | `paper` recipe (20 epochs) | `modern` recipe "
             "| `converged` (paper recipe, early stopping) |",
             "|---|---:|---:|---:|---|---|---:|---:|---:|---:|"]
    for row, (n, h, m, direct, alone, mixed, mixed_name) in NETWORKS.items():
        runs = {r: _load(results, f"{r}-{row}") for r in RECIPES}
        cells = [valid_test(runs[r]["valid"], runs[r]["test"]) + row_marks(runs[r]) if runs[r] else "" for r in RECIPES]
        published = valid_test(*alone) if alone else "not in the paper"
        lines.append(f"| {row.upper()} | {n} | {h} | {m} | {'yes' if direct else 'no'} | no | {published} | "
                     + " | ".join(cells) + " |")
        cells = [valid_test(runs[r]["mixture"]["valid"]["mix_fixed"], runs[r]["mixture"]["test"]["mix_fixed"])
                 + row_marks(runs[r]) if runs[r] else "" for r in RECIPES]
        lines.append(f"| {mixed_name} | {n} | {h} | {m} | {'yes' if direct else 'no'} | yes | "
                     f"{valid_test(*mixed) if mixed else 'not in the paper'} | "
                     + " | ".join(cells) + " |")
    for key, (label, published) in NGRAMS.items():
        got = _load(results, f"ngram-{key}")
        lines.append(f"| {label} | | | | | | {valid_test(*published) if published else ''} | "
                     f"{valid_test(got['valid'], got['test']) + row_marks(got) if got else ''} | |")
    lines += ["", "Mixture weights fitted by EM on validation (network share w; 0.5/0.5 above):", "",
              "| row | recipe | w | valid | test | network alone, test |", "|---|---|---:|---:|---:|---:|"]
    runs_table = ["| row | recipe | epochs | best epoch | stopped by | step sizes tried: valid | train s/epoch | "
                  "training time, all epochs (min) | command | machine |",
                  "|---|---|---:|---:|---|---|---:|---:|---|---|"]
    for row in NETWORKS:
        for recipe in RECIPES:
            got = _load(results, f"{recipe}-{row}")
            if not got:
                continue
            mixed = got["mixture"]
            lines.append(f"| {row.upper()} | {recipe}{row_marks(got)} | {mixed['weights']['em']:.2f} | {mixed['valid']['mix_em']:.1f} | "
                         f"{mixed['test']['mix_em']:.1f} | {got['test']:.1f} |")
            stopped = got.get("stopped_by", "")
            tried = ", ".join(f"{lr}: {v}" for lr, v in got.get("lr_candidates", {}).items())
            runs_table.append(f"| {row.upper()} | {recipe}{row_marks(got)} | {got['epochs']} | {got['best_epoch']} | {stopped} | {tried} | "
                              f"{got['train_s_per_epoch']:.0f} | {got['train_s_per_epoch'] * got['epochs'] / 60:.0f} | "
                              f"`{got['command']}` | "
                              f"{got['machine']} |")
    shown = [r for name in [*(f"{recipe}-{row}" for recipe in RECIPES for row in NETWORKS),
                            *(f"ngram-{key}" for key in NGRAMS), *SUN2021] if (r := _load(results, name))]
    unfinished = ["", f"`{replication.UNFINISHED}`: stopped by a time limit before early stopping: shown, not counted by the "
                      "lines below."] if not all(map(finished, shown)) else []
    return ("\n".join(lines + unfinished + ["", "Runs:", ""] + runs_table) + "\n\n" + conclusions(results) + "\n\n"
            + sun2021_table(results) + "\n" + "".join(f"\n{line}\n" for line in provenance_footnote(shown)))



def best_network(results: Path) -> tuple[str, float] | None:
    """(row, test perplexity) of the best finished network of Table 1 under any recipe."""
    nets = [(f"{row.upper()} `{recipe}`", r["test"]) for row in NETWORKS for recipe in RECIPES
            if (r := _load(results, f"{recipe}-{row}")) and finished(r)]
    return min(nets, key=lambda t: t[1]) if nets else None


def sun2021_table(results: Path) -> str:
    """The modern NPLM's rows: the recipe, and what each part is worth (test perplexity with it changed)."""
    best = best_network(results)
    base, recipe = _load(results, "sun2021"), _load(results, SUN2021_RECIPE)  # the ablations' base (no averaging); the recipe as shipped
    lines = ["## The modern NPLM (Sun & Iyyer 2021) on this protocol", "",
             "`experiment=sun2021/brown` ([brown.yaml](../../conf/experiment/sun2021/brown.yaml)) and one part "
             "changed at a time (`python experiments/bengio2003/run.py --rows sun2021,sun2021-depth1,...`). The recipe "
             "validates on the weights' moving average since the row sun2021-ema measured it; every other row trains "
             "without it (`callbacks.ema_decay=null`), as they ran before that change (their recorded commands "
             "predate it); every "
             "row trained to early stopping (patience 2); epochs trained / best, * = stopped before early "
             "stopping (a `--budget-s`; the next call goes on); empty = not run yet.", "",
             "| row | change | parameters | valid / test | test vs sun2021 | test vs "
             + (f"{best[0]} ({best[1]:.1f})" if best else "the best network") + " | epochs | stopped by | s / epoch |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for row, (_, change) in SUN2021.items():
        r = _load(results, row)
        if not r:
            lines.append(f"| {row} | {change} |  |  |  |  |  |  |  |")
            continue
        star = "" if r["converged"] else "*"
        versus = pct(r['test'], base['test']) if base else ""
        lines.append(f"| {row}{provenance_mark(r)} | {change} | {r['parameters']:,} | {valid_test(r['valid'], r['test'], 1)} | {versus} | "
                     + (pct(r['test'], best[1]) if best else "")
                     + f" | {r['epochs']}{star} / {r['best_epoch']} | {r['stopped_by']} | {r['train_s_per_epoch']:.0f} |")
    lines += ["", *sun2021_parts(results, base), ""]
    if best is None:
        return "\n".join(lines + ["Target: no network of Table 1 has a result yet."])
    goal = (1 - SUN2021_GAIN) * best[1]
    target = f"Target: test {goal:.1f} or lower, {100 * SUN2021_GAIN:.0f}% below {best[0]} ({best[1]:.1f}): "
    if not recipe:
        return "\n".join(lines + [target + "not measured (the row has not run)."])
    if not finished(recipe):
        return "\n".join(lines + [target + f"not judged: the row has not finished ({recipe['stopped_by']}; "
                                            f"test {recipe['test']:.1f} so far)."])
    met = recipe["test"] <= goal
    lines.append(target + f"{recipe['test']:.1f}, {100 * (1 - recipe['test'] / best[1]):.1f}% below "
                 + f"({'met' if met else 'missed by ' + format(recipe['test'] - goal, '.1f')}).")
    return "\n".join(lines)


def sun2021_parts(results: Path, recipe: dict | None) -> list[str]:
    """What each part is worth: the rows that change one part of `recipe` (the row sun2021), the costliest first."""
    changed = [(row, r) for row in SUN2021 if row != "sun2021" and (r := _load(results, row))]
    if not recipe or not changed:
        return []
    lines = [f"What each part is worth, the costliest change first (test perplexity with the change, against "
             f"sun2021's {recipe['test']:.1f}; valid against its {recipe['valid']:.1f}):", ""]
    for row, r in sorted(changed, key=lambda item: -item[1]["test"]):
        lines.append(f"- {SUN2021[row][1]}: test {r['test']:.1f} ({pct(r['test'], recipe['test'])}), "
                     f"valid {r['valid']:.1f} ({pct(r['valid'], recipe['valid'])})"
                     + ("" if r["converged"] else "; not yet at early stopping, so an upper bound"))
    return lines


def conclusions(results: Path) -> str:
    """The paper's two claims, checked on our numbers where the rows exist."""
    ngram_tests = {k: r["test"] for k in NGRAMS if (r := _load(results, f"ngram-{k}"))}
    out = []
    for recipe in RECIPES:
        loaded = {row: r for row in NETWORKS if (r := _load(results, f"{recipe}-{row}"))}
        nets = {row: r for row, r in loaded.items() if finished(r)}
        left_out = [row.upper() for row in loaded if row not in nets]
        if not nets or not ngram_tests:
            continue
        best_row = min(nets, key=lambda row: nets[row]["test"])
        best_ngram = min(ngram_tests, key=ngram_tests.get)
        gain = 1 - nets[best_row]["test"] / ngram_tests[best_ngram]
        helps = sum(r["mixture"]["test"]["mix_fixed"] < r["test"] for r in nets.values())
        out.append(f"- `{recipe}`" + (f" ({', '.join(left_out)} not finished, left out)" if left_out else "")
                   + f": the best network, {best_row.upper()}, test {nets[best_row]['test']:.1f}, is {100 * abs(gain):.1f}% "
                   f"{'below' if gain >= 0 else 'above'} the best n-gram ({best_ngram}) {ngram_tests[best_ngram]:.1f} "
                   f"(paper: networks beat the best "
                   f"n-gram by >= 15%). Mixing with the trigram lowers test perplexity for {helps} of {len(nets)} networks. "
                   f"The paper's best mixture, MLP10, scored {BEST_PUBLISHED_MIX}; {best_row.upper()} alone is "
                   f"{'below' if nets[best_row]['test'] < BEST_PUBLISHED_MIX else 'above'} it.")
        gaps = []  # test perplexity against the published row's, alone and mixed
        for row, r in nets.items():
            _, _, _, _, alone, mixed, mixed_name = NETWORKS[row]
            if alone:
                gaps += [(row.upper(), r["test"] / alone[1] - 1), (mixed_name, r["mixture"]["test"]["mix_fixed"] / mixed[1] - 1)]
        if gaps:
            within = [name for name, gap in gaps if gap <= 0.05]
            out.append(f"  Test perplexity against the published row: "
                       + ", ".join(f"{name} {100 * gap:+.1f}%" for name, gap in gaps)
                       + f"; within 5% or better: {', '.join(within) or 'none'}.")
    ngram_gaps = [(NGRAMS[k][0], r["test"] / NGRAMS[k][1][1] - 1) for k in NGRAMS
                  if NGRAMS[k][1] and (r := _load(results, f"ngram-{k}"))]
    if ngram_gaps:
        out.append("- n-grams, test perplexity against the published row: "
                   + ", ".join(f"{label} {100 * gap:+.1f}%" for label, gap in ngram_gaps) + ".")
    return "\n".join(out)
