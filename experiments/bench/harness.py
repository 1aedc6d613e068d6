"""What every benchmark here shares: alternated rounds and their medians, the provenance of a measurement
(machine, commit, command, date) and its result file, and the bench README's tables written from those files.

A result file is `results/<machine>/<script>.json` (or `<script>-<part>.json` for a part of a script's runs
kept beside its others), one per script, part and machine, the latest run's: its
`table` (markdown lines, what the README shows), its `data` (every figure) and where it was measured.
A script in SUMMARIES has its table summarised in the README (gpu_check: one row per model x head, a column per
precision; every run's figures stay in its result file, which the README links).
`python experiments/bench/harness.py` rewrites the README's generated part from the committed files;
`--check` exits 1 where the README differs from them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS = HERE / "results"
README = HERE / "README.md"
BEGIN = "<!-- tables: written by `python experiments/bench/harness.py` from results/; do not edit -->"
END = "<!-- end of tables -->"
# the README's order; a script not named here comes after these, by name
ORDER = ("notebook_vs_trainer", "bench", "heads_speed", "hsm_scaling", "gpu_step", "gpu_check", "gpu_profile_train")
if str(REPO / "src") not in sys.path:  # (the device machine runs the scripts without installing nplm)
    sys.path.insert(0, str(REPO / "src"))


# -- rounds ------------------------------------------------------------------------------------------
def alternate(contenders: dict[str, Callable[[], float]], rounds: int,
              on_round: Callable[[int, dict[str, list[float]]], None] | None = None) -> dict[str, list[float]]:
    """Each contender's value in each of `rounds` rounds, the contenders taking turns within a round and the
    order rotated by one every round (a load on a shared machine slows a round's contenders alike);
    `torch.manual_seed(round)` before each. `on_round(r, values)` after each round (a progress line)."""
    import torch

    values: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            torch.manual_seed(r)
            values[name].append(contenders[name]())
        if on_round is not None:
            on_round(r, values)
    return values


def ratio(values: list[float], base: list[float]) -> str:
    """The median of the per-round ratios values / base and their range: `1.23x (1.10-1.30)`."""
    ratios = [a / b for a, b in zip(values, base)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def median(values: list[float]) -> float:
    return statistics.median(values)


# -- provenance --------------------------------------------------------------------------------------
def commit() -> str:
    """The short commit of the code that runs, `-dirty` where the code differs from it
    (`nplm.tracking.records.code_version`, as a training run records it: its checkout, or a copy's verified
    PROVENANCE.json); `unknown` where neither names one."""
    from nplm.tracking.records import git_commit

    sha = git_commit()
    if not sha:
        return "unknown"
    return sha[:7] + ("-dirty" if sha.endswith("-dirty") else "")


def commit_from() -> str | None:
    """Where `commit` was read: "checkout", "PROVENANCE.json", or None."""
    from nplm.tracking.records import code_version

    return code_version()[1]


def machine_name(device: str = "cpu") -> str:
    """The results folder of this machine: the GPU's model (`h200`) or the CPU's and its count (`epyc-2cpu`)."""
    import torch

    from nplm.training.peak import device_name

    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        name = device_name(torch.device("cpu"))
        name = f"{re.sub(r'^(intel|amd)', '', name.strip(), flags=re.I)} {os.cpu_count()}cpu"
    words = re.sub(r"\(r\)|\(tm\)|\b(nvidia|processor|cpu @.*)\b", " ", name, flags=re.I).lower().split()
    return "-".join(re.sub(r"[^a-z0-9.]", "", w) for w in words if re.sub(r"[^a-z0-9.]", "", w))


def machine_detail() -> str:
    """The CPU, its load and torch: `AMD EPYC, 2 CPUs, load average 0.43 at the start; torch 2.13.0+cpu, 2 torch
    threads`."""
    import torch

    from nplm.training.peak import device_name

    cpu = device_name(torch.device("cpu"))
    load = f", load average {os.getloadavg()[0]:.2f} at the start" if hasattr(os, "getloadavg") else ""
    threads = torch.get_num_threads()
    return f"{cpu}, {os.cpu_count()} CPUs{load}; torch {torch.__version__}, {threads} torch thread{'s' * (threads != 1)}"


def command() -> str:
    """This process's command line, the script relative to the repository: `python experiments/bench/x.py --a 1`."""
    script = os.path.relpath(sys.argv[0], REPO) if sys.argv and sys.argv[0] else "?"
    return f"python {script} {' '.join(sys.argv[1:])}".rstrip()


def stamp() -> str:
    """`Measured <date> UTC at commit <sha> on <machine>: `<command>``, the first line of a printed table."""
    now = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    return f"Measured {now} at commit {commit()} on {machine_detail()}: `{command()}`"


# -- result files ------------------------------------------------------------------------------------
def write_result(script: str, table: list[str], data: dict, out: Path | None = None, device: str = "cpu",
                 notes: list[str] | None = None, part: str | None = None) -> Path:
    """Print `table` and write `<out>/<machine>/<script>.json` (out: results/; `<script>-<part>.json` with a
    `part`), replacing the machine's last result of that script and part: the table, `notes` (lines shown
    under it), `data` (every figure) and provenance."""
    path = (out or RESULTS) / machine_name(device) / f"{script}{f'-{part}' if part else ''}.json"
    result = {"script": script, "part": part, "machine": path.parent.name, "commit": commit(),
              "commit_from": commit_from(),
              "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "command": command(),
              "setup": machine_detail() + (f"; {torch_device_line()}" if device == "cuda" else ""),
              "table": table, "notes": notes or [], "data": data}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print("\n".join(table + (notes or [])), flush=True)
    print(f"{script}: wrote {path}", flush=True)
    return path


def torch_device_line() -> str:
    import torch

    return f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"


def read_results(root: Path = RESULTS) -> list[dict]:
    """Every result file under root, in the README's order (ORDER, then by name; machines by name)."""
    results = [json.loads(p.read_text()) for p in sorted(root.glob("*/*.json"))]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(results, key=lambda r: (rank.get(r["script"], len(ORDER)), r["script"], r.get("part") or "",
                                          r["machine"]))


def cells(row: str, width: int | None = None) -> list[str]:
    """The cells of a markdown table row; of `width` columns, a status cell (the 6th) that holds a `|` keeps it."""
    found = row.strip().removeprefix("|").removesuffix("|").split("|")
    extra = len(found) - (width or len(found))
    if extra > 0:
        found = [*found[:5], "|".join(found[5:6 + extra]), *found[6 + extra:]]
    return [c.strip() for c in found]


def gpu_check_summary(result: dict) -> list[str]:
    """gpu_check's table (a row per model x head x precision x compile x cuda_graphs run) as one row per
    model x head and a column per precision (and per compile / cuda_graphs setting where the runs differ in it):
    each cell the run's status, `ok` and its graph steps or `FAILED` and its error. The lines above the table
    (the pytest result, the count of failed runs, what was run) are kept, a key to the cells added to their last
    paragraph; every run's perplexities, tokens/s and wall time stay in the result file, which the key links."""
    table = result["table"]
    head = next((i for i, line in enumerate(table) if line.startswith("| model | head | precision |")), None)
    if head is None:  # not the table gpu_check writes: shown as it is
        return table
    names = cells(table[head])
    rows = [dict(zip(names, cells(line, len(names)))) for line in table[head + 2:] if line.startswith("|")]
    settings = ("precision", "compile", "cuda_graphs")
    varies = [s for s in settings if s == "precision" or len({r[s] for r in rows}) > 1]
    same = [f"{s}={rows[0][s].lower()}" for s in settings if s not in varies and rows]
    columns = list(dict.fromkeys(tuple(r[s] for s in varies) for r in rows))
    by_pair: dict[tuple[str, str], dict[tuple[str, ...], str]] = {}
    for r in rows:
        ok = r["status"] == "ok"
        cell = (f"ok, {r['graph steps']}" if r["graph steps"] else "ok") if ok else r["status"].replace("|", "\\|")
        by_pair.setdefault((r["model"], r["head"]), {})[tuple(r[s] for s in varies)] = cell

    def label(column: tuple[str, ...]) -> str:
        return ", ".join(v if s == "precision" else f"{s}={v.lower()}" for s, v in zip(varies, column))

    path = f"results/{result['machine']}/{result['script']}{'-' + result['part'] if result.get('part') else ''}.json"
    above = table[:head - 1] if head and not table[head - 1] else table[:head]  # the key continues their last line
    return [*above,
            "A cell: `ok, <graph steps>` where the run trained with no host-device sync in any checked step (0 graph "
            "steps: it trained eagerly, its model one the capture refuses; gpu_check fails any other run that "
            "replays none), else `FAILED` and the error"
            f"{'; ' + ', '.join(same) + ' in every run' if same else ''}. Each run's perplexities, tokens/s and wall "
            f"time: [{path}]({path}).", "",
            f"| model | head | {' | '.join(label(c) for c in columns)} |", "|---|---|" + "---|" * len(columns),
            *(f"| {model} | {name} | {' | '.join(runs.get(c, '') for c in columns)} |"
              for (model, name), runs in by_pair.items())]


# scripts whose tables the README summarises: script -> the lines shown, from its result
SUMMARIES: dict[str, Callable[[dict], list[str]]] = {"gpu_check": gpu_check_summary}


def tables(root: Path = RESULTS) -> list[str]:
    """The README's generated part: each result file's table (or its summary, SUMMARIES) under its script, machine
    and provenance."""
    lines = [BEGIN]
    for r in read_results(root):
        part = f" ({r['part']})" if r.get("part") else ""
        shown = SUMMARIES[r["script"]](r) if r["script"] in SUMMARIES else r["table"]
        lines += ["", f"### {r['script']}.py on {r['machine']}{part}", "",
                  f"{r['date']}, commit {r['commit']}, {r['setup']}: `{r['command']}`", "", *shown]
        if r["notes"]:
            lines += ["", *r["notes"]]
    return lines + ["", END]


def update_readme(readme: Path = README, root: Path = RESULTS) -> bool:
    """Replace the README's generated part (between BEGIN and END) with `tables(root)`; True where it changed."""
    text = readme.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + "\n".join(tables(root)) + text[end:]
    if new != text:
        readme.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 where the README differs from the result files")
    args = parser.parse_args(argv)
    if args.check:
        text = README.read_text()
        ok = "\n".join(tables()) in text
        print("harness: the README's tables are " + ("the result files'" if ok else "NOT the result files': run "
                                                      "python experiments/bench/harness.py"))
        return 0 if ok else 1
    print("harness: README " + ("rewritten" if update_readme() else "unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
