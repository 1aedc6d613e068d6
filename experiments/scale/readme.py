"""experiments/scale/README.md below its INTRO.md, written from results/*.json only (`run.py --report-only`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
from replication import provenance_footnote, provenance_mark  # noqa: E402



def load(results: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def f(x, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    h, rest = divmod(int(round(seconds)), 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def provenance(r: dict) -> str:
    commit = f"{r.get('commit', '?')}{provenance_mark(r)}"
    return f"{r.get('measured_utc', '?')} UTC, commit {commit}; {r.get('machine', '?')}"


def tables(results: Path) -> str:
    """Everything README.md shows below INTRO.md, from the result files in `results`."""
    R = load(results)
    out = []
    targets = []

    if "corpus" in R:
        r = R["corpus"]
        out += ["## The corpus", "",
                f"`{r['command']}`: {f(r['wall_s'])} s wall, {f(r.get('cpu_s'))} s CPU, peak RSS "
                f"{f(r['peak_rss_mb'])} MB ({provenance(r)}).", "",
                "| file | bytes | sha256 |", "|---|---:|---|"]
        out += [f"| {name} | {f(v['bytes'])} | `{v['sha256'][:16]}...` |" for name, v in r["files"].items()]
        out += ["", "The same seed gives the same bytes (tests/test_scale_corpus.py checks it at a tiny size).", ""]

    if "id_cache" in R:
        r = R["id_cache"]
        b, rd = r["build"], r["read"]
        phases = r.get("build_phases_s") or {}
        out += ["## Tokenised once: the id cache", "",
                "`corpus=wikitext103 corpus.path=<the corpus>` with an empty `paths.data_dir/ids/`, then again "
                f"({provenance(r)}):", "",
                "| run | setup (s) | of which | imports (s) | peak RSS (MB) |", "|---|---:|---|---:|---:|",
                f"| first: read the text, build the cache | {f(b['setup_s'], 1)} | reading {f(phases.get('read'), 1)} s, "
                f"vocabulary {f(phases.get('vocabulary'), 1)} s, writing the ids {f(phases.get('write'), 1)} s "
                f"| {f(b['imports_s'], 1)} | {f(b['peak_rss_mb'])} |",
                f"| second: memory-map the cache | {f(rd['setup_s'], 2)} | SHA-256 of the files remembered by "
                f"(size, mtime, inode) | {f(rd['imports_s'], 1)} | {f(rd['peak_rss_mb'])} |", "",
                f"Corpus as read: |V| = {f(b['corpus']['vocab_size'])}, train / valid / test tokens "
                f"{f(b['corpus']['train_tokens'])} / {f(b['corpus']['valid_tokens'])} / {f(b['corpus']['test_tokens'])} "
                f"(the published figures), OOV rate {b['corpus']['train_oov_rate']:.4f}.", ""]
        targets.append(("building the id cache < 3 min", f"{f(b['setup_s'])} s{provenance_mark(r)}",
                        b["setup_s"] < 180))

    heads = [R[k] for k in R if k.startswith("head-")]
    if heads:
        out += ["## Every head at MLP1's shape", "",
                "nplm-train itself (`timed_run.py train`): n = 5, m = 60, h = 50, direct connections, "
                "`model.sparse_embeddings=true`, Adam (lr 0.001), batch 1024, one thread, the first batches of "
                "the first epoch, then one validation and one test batch (perplexities after so little "
                "training are not results). Time per example from the Lightning steps after the first (warm-up); "
                "**the epoch time is extrapolated** from it to all 103,227,017 training windows (no head "
                "trained a whole epoch here). First batch: seconds from the process' start (interpreter, imports, "
                "config, the id cache read, the tree built, the model made) to its first training step; the id "
                "cache was there (a second run).", "",
                "| head | options | batches timed | us / example | examples (tokens) / s | epoch, extrapolated (h:mm:ss) "
                "| peak RSS (MB) | first batch (s) | of which tree (s) | load avg | commit |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in heads:
            run = r["run"]
            options = " ".join(o for o in r["overrides"] if o.startswith(("head", "tree")))
            load_avg = r["machine"].rsplit("load average ", 1)[-1].split(" ")[0]
            tree_s = f(run.get("tree_s"), 1) if "tree=" in options else "-"
            out.append(f"| {r['head']}{provenance_mark(r)} | `{options}` | {f(r['measured_examples'] / 1024)} | {f(r['us_per_example'], 1)} | "
                       f"{f(r['examples_per_s'])} | {hms(r['epoch_s_extrapolated'])} | {f(run['peak_rss_mb'])} | "
                       f"{f(run.get('first_batch_s'), 1)} | {tree_s} | {load_avg} | {r['commit']} |")
        out += ["", "Measured " + "; ".join(f"{r['head']}: {r['measured_utc']} UTC" for r in heads) +
                ". Command: `python experiments/scale/run.py --only heads` (the overrides of each run are in its "
                "result file). The peak RSS of the heads that evaluate with the full softmax (softmax, importance "
                "sampling) comes from their evaluation batch: [1024, 267,735] scores and their log-softmax, 1.1 GB "
                "each (a smaller `data.eval_batch_size` lowers it); training alone stays below it.", "",
                "Why the other heads are slow here: the class-based head's gradient for its [267,735, 290] word "
                "matrix is dense and Adam updates all of it every step; the adaptive softmax computes, for each "
                "target in a tail cluster, scores and a log-softmax over that whole cluster (torch's "
                "AdaptiveLogSoftmaxWithLoss), so its cost grows with the cluster sizes: with the default cutoffs "
                "[V/20, V/4] the last cluster holds 200,801 words, with [2000, 20000, 100000] 167,735 (a profile of "
                "its step: mm 23%, log-softmax forward and backward 38%). Neither is a [batch, |V|] tensor "
                "(tests/test_large_vocab.py), but neither avoids O(|V|) work per batch.", ""]
        hsm = R.get("head-hierarchical-huffman")
        if hsm:
            run = hsm["run"]
            targets.append(("peak RSS of a hierarchical-head run < 4 GB",
                            f"{f(run['peak_rss_mb'])} MB{provenance_mark(hsm)}",
                            run["peak_rss_mb"] < 4096))
            targets.append(("one epoch of MLP1's shape, hierarchical head < 1 hour (extrapolated)",
                            hms(hsm["epoch_s_extrapolated"]) + provenance_mark(hsm), hsm["epoch_s_extrapolated"] < 3600))

        soft = R.get("head-softmax")
        if soft and hsm:
            out += [f"In these nplm-train runs the hierarchical head (Huffman) trains "
                    f"{hsm['examples_per_s'] / soft['examples_per_s']:.0f}x{provenance_mark(hsm) or provenance_mark(soft)} "
                    "as many examples per second as the full "
                    "softmax; the side-by-side measurement below alternates the two in one process.", ""]

    if "second_run" in R:
        r = R["second_run"]
        run = r["run"]
        marks = [("imports (torch, Lightning, nplm)", 0.0, run.get("imports_s")),
                 ("config composed and checked", run.get("imports_s"), run.get("config_done_s")),
                 ("token ids memory-mapped", run.get("config_done_s"), run.get("setup_done_s")),
                 ("tree read from its cache", run.get("setup_done_s"), run.get("tree_done_s")),
                 ("memory estimate (the module built on the meta device)", None, None),
                 ("module built, record, trainer, Lightning's setup, first batch drawn", run.get("tree_done_s"),
                  run.get("first_batch_s"))]
        out += ["## A second run's first batch", "",
                f"nplm-train with the hierarchical head (Huffman, sparse), the token ids and the tree cached by "
                f"the runs before (`run.py --only second_run`; {provenance(r)}): first training step "
                f"**{f(run.get('first_batch_s'), 1)} s** after the process started.", "",
                "| phase | seconds |", "|---|---:|"]
        for name, a, b in marks:
            if name.startswith("memory"):
                out.append(f"| {name} (inside the next row) | {f(run.get('memory_check_s'), 1)} |")
            elif a is not None and b is not None:
                out.append(f"| {name} | {f(b - a, 1)} |")
        out.append("")
        targets.append(("a second run's first batch within 10 s of start (hierarchical, Huffman)",
                        f"{f(run.get('first_batch_s'), 1)} s (imports {f(run.get('imports_s'), 1)} s){provenance_mark(r)}",
                        (run.get("first_batch_s") or 1e9) <= 10))

    if "side_by_side" in R:
        r = R["side_by_side"]
        out += ["## Hierarchical against the full softmax, side by side", "",
                f"`{r['command']}` ({provenance(r)}): the two heads alternate in one process, "
                f"{r['steps']['softmax']} softmax steps then {r['steps']['hierarchical']} hierarchical steps per round "
                f"(after one untimed step each), batch {r['batch']}, one thread, nplm-train's training step.", "",
                "| round | softmax ex/s | hierarchical (Huffman, sparse) ex/s | ratio |", "|---:|---:|---:|---:|"]
        for i, row in enumerate(r["rounds"]):
            out.append(f"| {i + 1} | {f(row['softmax'], 1)} | {f(row['hierarchical'])} | {row['ratio']:.0f}x |")
        out += ["", f"Best of each: softmax {f(r['best']['softmax'], 1)} ex/s, hierarchical {f(r['best']['hierarchical'])} "
                f"ex/s: **{r['ratio_of_best']:.0f}x**. Huffman tree: mean depth {r['tree']['mean_depth']:.1f}, expected "
                f"code length {r['tree']['expected_code_length_bits']:.2f} bits (unigram entropy "
                f"{r['tree']['unigram_entropy_bits']:.2f}).", ""]
        worst = min(r["ratio_per_round"])
        targets.append(("hierarchical >= 100x the full softmax per example, side by side",
                        f"{r['ratio_of_best']:.0f}x (rounds {', '.join(f'{x:.0f}x' for x in r['ratio_per_round'])})"
                        + provenance_mark(r),
                        worst >= 100))

    trees = [R[k] for k in ("tree-balanced", "tree-huffman") if k in R]
    if trees or "tree-brown" in R:
        out += ["## The trees at 267,735 words", "",
                "| tree | build (s) | mean depth | max depth | expected code length (bits) | measured |",
                "|---|---:|---:|---:|---:|---|"]
        for r in trees:
            s = r["stats"]
            out.append(f"| {r['tree']}{provenance_mark(r)} | {f(r['build_s'], 1)} | {s['mean_depth']:.1f} | {s['max_depth']} | "
                       f"{s.get('expected_code_length_bits', 0):.2f} | {r['measured_utc']} UTC |")
        out.append("")
    if "tree-brown" in R:
        r = R["tree-brown"]
        strata = "; ".join(f"ranks {s['ranks'][0]:,}-{s['ranks'][1]:,}: {s['ms_per_word']:.2f} ms/word"
                           for s in r["sweep_strata"])
        out += ["### Brown clusters", "",
                f"`python experiments/scale/brown_probe.py` ({provenance(r)}), C = {r['classes']} classes. "
                "`tree=brown` first counts the training bigrams, then moves each word to its best class (the exchange "
                "algorithm, up to 10 sweeps over the vocabulary), then merges the classes (Brown et al.'s greedy "
                "AMI merging). At this size:", "",
                f"- bigram table of {f(r['train_tokens'])} tokens: {f(r['distinct_bigrams'])} distinct bigrams in "
                f"{f(r['bigrams_s'])} s;",
                f"- one exchange sweep over all {f(r['vocab_size'])} words, **estimated** from timed samples of "
                f"each frequency stratum: {f(r['sweep_s_estimated'])} s "
                f"({strata});",
                f"- class bigram table {f(r['class_bigrams_s'], 1)} s; merging the {r['classes']} classes "
                f"{f(r['merge_classes_s'])} s.", "",
                f"The default build (10 sweeps) would take about {hms(r['full_build_s_estimated_10_sweeps'])} "
                f"(1 sweep: {hms(r['full_build_s_estimated_1_sweep'])}); estimated, not run: the exchange "
                "algorithm as implemented (numpy over the C classes for each word, a Python loop over the words) does "
                "not scale to 267,735 words and C = 1000 in reasonable time on 2 cores. (The per-word times vary between "
                "probes by up to 2x with the machine's load.)", ""]
        if r.get("top"):
            out += ["What does finish: the whole `tree=brown` build (up to 10 sweeps) on the corpus restricted to "
                    "its N most frequent words (the rest <unk>), with fewer classes (a move costs about C times the "
                    "classes of the word's neighbours):", "",
                    "| words | classes C | build (s) | mean depth | expected code length (bits) |",
                    "|---:|---:|---:|---:|---:|"]
            for t in r["top"]:
                out.append(f"| {f(t['words'])} | {t.get('classes', r['classes'])} | {f(t['build_s'])} | "
                           f"{t['stats']['mean_depth']:.1f} | {t['stats'].get('expected_code_length_bits', 0):.2f} |")
            out += ["", "The synthetic corpus draws every word independently, so it has no bigram structure for "
                    "Brown's clustering to find: these trees' depths say nothing about Brown trees of real text "
                    "(the huge `<unk>` class of a top-N vocabulary also sits wherever the merging puts it); only "
                    "the times count."]
            out.append("")

    if targets:
        out += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        out += [f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in targets]
        out.append("")
    out += [*provenance_footnote(R.values()), ""] * bool(provenance_footnote(R.values()))
    return "\n".join(out)
