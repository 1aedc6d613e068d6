"""experiments/tinyshakespeare_char/README.md below its INTRO.md, from the result files only: the rows beside the
Kneser-Ney 5-gram and nanoGPT's character Transformer, the target, and each row's learning curve."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from replication import finished, load_result, pct, provenance_footnote, provenance_mark, row_marks, seconds_per_epoch

TIE = 0.0005  # a row within 0.05% of the KN5 is level with it to one decimal of a per cent: the target shows 5 digits
TARGET_AVERAGED = 4.55  # the modern NPLM with the recipe's default (the moving average), finished, at most this
NANOGPT_LOSS = 1.4697  # karpathy/nanoGPT README, "quick start": "the best validation loss is 1.4697"
BASE_ROW = "modern"  # the modern NPLM as its experiment file has it; the other modern-* rows change it
SHOWN_VARIANTS = 5  # the variants listed against `modern` under the table, best first (the table has every row)
HELDOUT_PREFIX = "heldout-"  # rows on the held-out split (80/10/10): a table of their own, their test figures



def tables(results: Path, specs: dict) -> str:
    """The README's tables under INTRO.md: every row of `specs` (name -> driver.Row) from its result file in
    `results`, beside the Kneser-Ney 5-gram and nanoGPT; the target; each row's run (its learning curve: its file)."""
    rows = {row: load_result(results, row) for row in specs}
    heldout = {row: rows.pop(row) for row in list(rows) if row.startswith(HELDOUT_PREFIX)}
    kn5 = next((r["kn5_valid"] for r in rows.values() if r), None)
    nanogpt = math.exp(NANOGPT_LOSS)
    lines = ["Validation perplexity per character on the notebook's split (the first 90% of the text trains, "
             "the last 10%, 111,540 characters, validates; no test split). vs KN5: against the modified "
             "Kneser-Ney 5-gram of the same training characters, scored by `nplm-mix CKPT --ngram kn5` on "
             "the same characters; epochs trained / best; * = not finished (stopped by a time limit, or before early "
             "stopping, or an epoch cut short inside the run), s / epoch of the whole epochs; empty = not run yet.",
             "",
             "| model | context (characters) | parameters | valid ppl | valid loss (nats) | vs KN5 | epochs | "
             "stopped by | s / epoch |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    if kn5 is not None:
        lines.append(f"| Kneser-Ney 5-gram, modified, interpolated (counted) | 4 |  | {kn5:.3f} | {math.log(kn5):.4f} "
                     "| +0.0% |  |  |  |")
    for row, what in ((name, specs[name].what) for name in rows):
        r = rows[row]
        if not r:
            lines.append(f"| {what} |  |  |  |  |  |  |  |  |")
            continue
        star = "" if finished(r) else "*"
        lines.append(f"| {what}{row_marks(r)} | {r['context']} | {r['parameters']:,} | {r['valid']:.3f} | "
                     f"{math.log(r['valid']):.4f} | {pct(r['valid'], r['kn5_valid'])} | "
                     f"{r['epochs']}{star} / {r['best_epoch']} | {r['stopped_by']} | {epoch_seconds(r):.0f} |")
        lines.append(f"| {what} mixed with the KN5 (EM weight {r['mix_weight']:.2f}){row_marks(r)} |  |  | {r['mix_valid']:.3f} | "
                     f"{math.log(r['mix_valid']):.4f} | {pct(r['mix_valid'], r['kn5_valid'])} |  |  |  |")
    lines.append(f"| nanoGPT's character Transformer (published: its README) | 256 | 10.7M | {nanogpt:.3f} | "
                 f"{NANOGPT_LOSS:.4f} | " + (pct(nanogpt, kn5) if kn5 else "") + " |  |  |  |")
    lines += ["", "Target: the modern NPLM below the Kneser-Ney 5-gram on the same validation split, "
              "toward nanoGPT's 4.35.", ""]
    lines += target_lines(rows, nanogpt, specs)
    lines += heldout_lines(heldout, specs)
    lines += ["", "### Each row's run", "",
              "Each row's learning curve (training and validation perplexity, tokens/s and time of every epoch) is in "
              "its result file, with the commit it was trained at.", "", "| row | command | machine | wall time (min) | note |",
              "|---|---|---|---:|---|"]
    for row in specs:
        r = rows.get(row) or heldout.get(row)
        if r:
            lines.append(f"| [{row}](results/{row}.json) | `{r['command']}` | "
                         f"{r['machine']} | {r['wall_time_s'] / 60:.0f} | {inner_cuts(r)} |")
    lines += ["", *provenance_footnote(r for r in [*rows.values(), *heldout.values()] if r)]
    return "\n".join(lines) + "\n"


def heldout_lines(rows: dict[str, dict | None], specs: dict) -> list[str]:
    """The rows trained again on the held-out split (80% train, 10% valid, the last 10% test, which no row's
    choice saw), beside the KN5 counted on the same 80%: the test figures are the headline's."""
    lines = ["", "### On a split that chose nothing", "",
             "The rows above were chosen on the notebook's validation characters. The best of them, trained again "
             "on the first 80% of the text (`corpus=tiny_shakespeare_heldout`), validated on the next 10% and tested "
             "once on the last 10%, beside the KN5 counted on the same 80% (`nplm-mix CKPT --ngram kn5`); * = not "
             "finished.", "",
             "| model | valid ppl | test ppl | test bits per byte | test vs KN5 | KN5 valid / test | mixed with the KN5, "
             "test | epochs |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row, r in rows.items():
        if not r:
            lines.append(f"| {specs[row].what} |  |  |  |  |  |  |  |")
            continue
        lines.append(f"| {specs[row].what}{row_marks(r)} | {r['valid']:.3f} | {r['test']:.3f} | {r['test_bpb']:.4f} | "
                     f"{pct(r['test'], r['kn5_test'])} | {r['kn5_valid']:.3f} / {r['kn5_test']:.3f} | "
                     f"{r['mix_test']:.3f} | {r['epochs']}{'' if finished(r) else '*'} / {r['best_epoch']} |")
    for row, r in rows.items():
        if r and finished(r):
            lines += ["", f"- {specs[row].what}{row_marks(r)}: valid {pct(r['valid'], r['kn5_valid'], 2)} against the "
                          f"KN5 of the same split, test {pct(r['test'], r['kn5_test'], 2)} ({r['test']:.4f} against "
                          f"{r['kn5_test']:.4f}); mixed with it, test {pct(r['mix_test'], r['kn5_test'], 2)}."]
    return lines


def heldout_headline(r: dict) -> str:
    """The held-out row's test figure for the project README's table, beside the KN5's on the same characters."""
    return f"{r['test']:.3f} (KN5 {r['kn5_test']:.3f})"


def epoch_seconds(r: dict) -> float:
    """A row's training time per whole epoch: epochs cut short by a time limit are left out."""
    return seconds_per_epoch([h["epoch_time_s"] for h in r["history"]],
                             r.get("cut_epochs") or r["stopped_by"].startswith("time limit"))


def inner_cuts(r: dict) -> str:
    """What a row's epochs cut short inside its run (not its last: `stopped_by` says that) cost it in updates,
    in words ("" where none was): a budget stopped it inside an epoch, and it resumed from that epoch's end."""
    cut = [e for e in r.get("cut_epochs") or [] if e < r["epochs"]]
    if not cut:
        return ""
    steps = {h["epoch"]: h["steps"] for h in r["history"]}
    whole = max(steps.values())
    missing = sum(whole - steps[e] for e in cut) / whole
    return (f"epoch{'s' * (len(cut) > 1)} {', '.join(map(str, cut))} cut short by a time limit "
            f"({', '.join(f'{steps[e]:,} of {whole:,} updates' for e in cut)}), the run resumed from "
            f"{'their' if len(cut) > 1 else 'its'} end: {missing:.2f} of an epoch's updates fewer than its command plans")


def modern_rows(rows: dict[str, dict | None]) -> dict[str, dict]:
    """The modern NPLM's rows that have a result: `modern` and the variants of it (`modern-*`)."""
    return {row: r for row, r in rows.items() if r and row.split("-")[0] == BASE_ROW}


def train_ppl_at_best(r: dict) -> float | None:
    """The training perplexity (dropout on) of the result's best epoch (its `best_epoch`, counted from 1)."""
    return next(h["train_ppl"] for h in r["history"] if h["epoch"] == r["best_epoch"])


SEED_SUFFIX = re.compile(r"-seed\d+$")  # a row trained again with another seed: <row>-seed<N>


def seed_group(rows: dict[str, dict], row: str) -> tuple[list[dict], int]:
    """The results of `row` and of the finished rows that train it again with other seeds
    (`<row>-seed<N>`), and how many of those are still training (left out: not yet at their best)."""
    base = SEED_SUFFIX.sub("", row)
    siblings = {name: r for name, r in rows.items() if r and SEED_SUFFIX.sub("", name) == base}
    return ([r for name, r in siblings.items() if name == row or r["converged"]],
            sum(not r["converged"] for name, r in siblings.items() if name != row))


def target_lines(rows: dict[str, dict | None], nanogpt: float, specs: dict) -> list[str]:
    """The target's line for the best finished modern NPLM row (a better unfinished one named, not counted), then
    what each variant changes against `modern`. Where that row was trained with several seeds, the target is
    judged by their mean."""
    modern = modern_rows(rows)
    done = {name: r for name, r in modern.items() if finished(r)}
    if not done:
        return ["- not measured (no modern NPLM row has finished)"]
    row, r = min(done.items(), key=lambda item: item[1]["valid"])
    group, unfinished = seed_group(modern, row)
    ahead = sorted((v["valid"], name) for name, v in modern.items() if name not in done and v["valid"] < r["valid"])
    kn5, seeds = r["kn5_valid"], [s["valid"] for s in group]
    mean = statistics.fmean(seeds)
    gap = math.log(r["valid"]) - NANOGPT_LOSS
    level = abs(r["valid"] / kn5 - 1) < TIE
    d, p = (5, 3) if level or abs(mean / kn5 - 1) < TIE else (3, 1)  # level to 3 decimals: 5 of them
    notes = []
    if level:  # and the fp32 score
        notes.append("level with it" + (f"; its best checkpoint scored again in fp32 by nplm-mix: {r['scored_valid']:.5f}, "
                                        f"{pct(r['scored_valid'], kn5, 3)}" if r.get("scored_valid") else ""))
    if len(seeds) > 1:
        notes.append(f"its {len(seeds)} seeds from {min(seeds):.{d}f} to {max(seeds):.{d}f}, mean {mean:.{d}f}, "
                     f"{pct(mean, kn5, p)}")
    if unfinished:
        notes.append(f"{unfinished} more seed{'s' * (unfinished > 1)} still training, left out")
    notes.append(("met" if mean < kn5 else "missed")
                 + (f" by the mean of its {len(seeds)} seeds" if len(seeds) > 1 else ""))
    versus = f"{r['valid']:.{d}f} against the KN5's {kn5:.{d}f}: {pct(r['valid'], kn5, p)} ({'; '.join(notes)})"
    if cuts := inner_cuts(r):
        versus += f"; {cuts}"
    lines = [f"- The best modern NPLM row, {specs[row].what}{provenance_mark(r)}: {versus}; "
             f"{gap:+.4f} nats per character from nanoGPT's {NANOGPT_LOSS} ({pct(r['valid'], nanogpt)})."]
    averaged = {name: v for name, v in done.items()
                if any(o.startswith("callbacks.ema_decay=") and o != "callbacks.ema_decay=null" for o in specs[name].overrides)}
    if averaged:  # the rows with the recipe's default, the weights' moving average
        name, v = min(averaged.items(), key=lambda item: item[1]["valid"])
        lines.append(f"- Target: the modern NPLM with the recipe's moving average at most {TARGET_AVERAGED}, "
                     f"finished: {v['valid']:.3f} ({name}), "
                     + ("met" if v["valid"] <= TARGET_AVERAGED else f"missed by {v['valid'] - TARGET_AVERAGED:.3f}") + ".")
    lines += [f"- Not counted, not finished ({modern[name]['stopped_by']} after {modern[name]['epochs']} epochs): "
              f"{specs[name].what}{provenance_mark(modern[name])}, valid {valid:.3f} ({pct(valid, kn5)})."
              for valid, name in ahead]
    base = modern.get(BASE_ROW)
    variants = {k: v for k, v in modern.items() if k != BASE_ROW}
    if base and variants:
        best = sorted(variants.items(), key=lambda item: item[1]["valid"])
        lines += ["", f"What the {min(len(best), SHOWN_VARIANTS)} best variants change against {specs[BASE_ROW].what} "
                      f"(valid {base['valid']:.3f}; training perplexity, dropout on, at its best epoch "
                      f"{train_ppl_at_best(base):.3f}); every other variant is a row of the table above:", ""]
        for row, v in best[:SHOWN_VARIANTS]:
            lines.append(f"- {specs[row].what}{provenance_mark(v)}: valid {v['valid']:.3f} "
                         f"({pct(v['valid'], base['valid'])}), training "
                         f"{train_ppl_at_best(v):.3f} at its best epoch, {v['parameters']:,} parameters, "
                         f"{epoch_seconds(v):.0f} s an epoch"
                         + ("" if finished(v) else "; not finished"))
    return lines
