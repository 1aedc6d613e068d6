"""One loop for every experiment driver (experiments/<name>/run.py): a driver declares its rows and its
README's tables; `Driver.main` trains each chosen row (to early stopping, resumable across calls), skips what
is up to date, writes one result file per row (results/<row>.json) and the README from the result files only.

A row is a name and the `nplm-train` overrides that train it, or a measurement that needs no training run
(an n-gram counted, a timing). Searches over a recipe are Hydra sweep configs (conf/sweep/<name>.yaml, also
runnable as `nplm-train -m +sweep=<name>`); `sweep_job` makes one of their jobs a row.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, NoReturn

import replication
from replication import ROOT, finished, load_result, write_result

INTRO, MARKER = "INTRO.md", "<!-- tables -->\n"  # a README is INTRO.md with the tables at MARKER (or after it)
HEADLINE = "<!-- headline -->\n"  # and, where a driver has one, its `headline()` (the verdicts) at HEADLINE


class Wait(Exception):
    """A row that cannot start yet; the message says why (its first model has not trained, a corpus is missing)."""


@dataclass
class Row:
    """`nplm-train *overrides` (`what`: the row in the tables' words), trained to early stopping (`patience` epochs
    without a better val/ppl, at most `max_epochs`) across calls, or once to its configured end where `patience` is
    None; or, with `measure`, a result computed without a training run. `first`: overrides known only when the
    row starts (a first model's checkpoint); it raises Wait while the row cannot start. `sweep`: the search
    (conf/sweep/<sweep>.yaml) the row is a job of."""

    overrides: list[str] = field(default_factory=list)
    what: str = ""
    max_epochs: int | None = None
    patience: int | None = None
    measure: Callable[[int], dict] | None = None  # given the torch threads
    first: Callable[[], list[str]] | None = None
    sweep: str | None = None  # the sweep config whose job it is (`sweep_job`): --rows <sweep> picks its rows


@dataclass
class Driver:
    """An experiment: its folder, its rows, what a finished run's result file keeps (`result(name, row, record)`),
    the README's generated part (`tables()`, from `self.results`; `headline()`, the verdicts its first lines give),
    and the line printed for a written result."""

    here: Path
    rows: dict[str, Row]
    result: Callable[[str, Row, dict], dict]
    tables: Callable[[], str]
    said: Callable[[dict], str] = lambda result: "result written"
    margin_s: float = 120  # --budget-s: a row stops training this long before the end (its test pass, scoring)
    results: Path | None = None  # default: <here>/results
    runs: Path | None = None  # default: outputs/<here's name>
    headline: Callable[[], str] | None = None

    def __post_init__(self):
        self.results = self.results or self.here / "results"
        self.runs = self.runs or ROOT / "outputs" / self.here.name

    # -- the README -----------------------------------------------------------------------------------------
    def readme(self) -> str:
        """INTRO.md with the tables written from the result files at its MARKER, or after it, and the headline at
        its HEADLINE."""
        intro = (self.here / INTRO).read_text()
        if self.headline:
            if HEADLINE not in intro:
                raise ValueError(f"{self.here / INTRO}: no {HEADLINE.strip()} line for the headline")
            intro = intro.replace(HEADLINE, self.headline(), 1)
        head, marker, notes = intro.partition(MARKER)
        return head + "\n" + self.tables() + ("\n" + notes if marker else "")

    # -- one row --------------------------------------------------------------------------------------------
    def run_row(self, name: str, threads: int, deadline: float | None, extra: list[str], rerun: bool) -> None:
        """Measure or train the row unless its result is done (`rerun`: measure again, train on), and write its
        result file unless the result there is up to date."""
        row, old = self.rows[name], load_result(self.results, name)
        if old and not rerun and (row.measure or row.patience is None or finished(old)):
            print(f"{name}: done, skipping (--rerun to redo it)", flush=True)
            return
        if row.measure:
            return self.write(name, row.measure(threads))
        try:
            overrides = [*row.overrides, *(row.first() if row.first else [])]
        except Wait as why:
            print(f"{name}: skipped, {why}", flush=True)
            return
        run_dir = self.runs / name
        if row.patience is None:
            record = replication.train_row(name, [*overrides, *extra], run_dir, threads, rerun)
        else:
            record = replication.train_to_convergence(name, [*overrides, *extra, "logger=none"], run_dir, threads,
                                                      deadline, row.patience, row.max_epochs, self.margin_s)
        if record is None:
            return
        if not rerun and old and (old.get("epochs"), old.get("git_commit")) == (len(record["history"]),
                                                                            record["git_commit"]):
            print(f"{name}: result up to date", flush=True)
            return
        self.write(name, self.result(name, replace(row, overrides=overrides), record))

    def write(self, name: str, result: dict) -> None:
        if write_result(self.results, name, result):
            print(f"{name}: {self.said(result)}", flush=True)

    # -- the command line -----------------------------------------------------------------------------------
    def arguments(self, doc: str, rows: str = "") -> argparse.ArgumentParser:
        """The options of every driver: --rows (`rows`: their help where a driver chooses them its own way),
        --threads, --report-only, --rerun, --budget-s, --margin-s, --extra, --results, --runs. A driver adds its
        own."""
        parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--rows", default="",
                            help=rows or f"comma-separated, of: {', '.join(self.rows)} (default all)")
        parser.add_argument("--threads", type=int, default=2, help="torch threads per run (default 2)")
        parser.add_argument("--report-only", action="store_true", help="only rewrite README.md from results/")
        parser.add_argument("--rerun", action="store_true",
                            help="redo the chosen rows though they have results: measure again, train on from the "
                                 "last checkpoint (after raising max_epochs); delete a row's run folder to train it "
                                 "from scratch")
        parser.add_argument("--budget-s", type=float, default=None,
                            help="stop every row by this many seconds after the start (each tests its best "
                                 "checkpoint and records \"converged\": false; the next call goes on)")
        parser.add_argument("--margin-s", type=float, default=self.margin_s,
                            help=f"with --budget-s: stop training this long before its end, for the test pass and "
                                 f"the scoring (default {self.margin_s:.0f})")
        parser.add_argument("--extra", default="", help="overrides added to every row that leave what it trains "
                                                        "alone (trainer=gpu), or a smoke test's "
                                                        "('corpus.train_size=20000 trainer.limit_train_batches=5')")
        parser.add_argument("--results", default=str(self.results), help="where result files go")
        parser.add_argument("--runs", default=str(self.runs), help="where the rows' run folders go")
        return parser

    def chosen(self, args: argparse.Namespace) -> list[str]:
        """--rows (names of rows, or of sweeps: their rows) in the order the driver declares them (a first model
        before the rows that start from it); every row when empty; an unknown one exits with the valid ones named."""
        picked = set(args.rows.split(",") if args.rows else self.rows)
        sweeps = {row.sweep for row in self.rows.values() if row.sweep}
        if unknown := sorted(picked - set(self.rows) - sweeps):
            bad_input(f"--rows: unknown rows {unknown}; rows are {', '.join(self.rows)}"
                      + (f"; sweeps {', '.join(sorted(sweeps))}" if sweeps else ""))
        return [name for name, row in self.rows.items() if name in picked or row.sweep in picked]

    def main(self, doc: str, parser: argparse.ArgumentParser | None = None,
             choose: Callable[[argparse.Namespace], list[str]] | None = None,
             train: Callable[[argparse.Namespace, list[str]], bool] | None = None) -> None:
        """Parse the command line (`parser`: `arguments(doc)` with a driver's own options added), train or measure
        the chosen rows (`choose`: a driver's own choice; `train`: a driver's own loop, used where it returns
        True), then write the README unless the results went elsewhere (a smoke test's) and print the tables."""
        os.environ.setdefault("WANDB_MODE", "offline")
        args = (parser or self.arguments(doc)).parse_args()
        chosen = choose(args) if choose else self.chosen(args)
        self.results, self.runs = Path(args.results).resolve(), Path(args.runs).resolve()
        if not args.report_only and not (train and train(args, chosen)):
            deadline = time.time() + args.budget_s if args.budget_s else None
            for name in chosen:
                self.run_row(name, args.threads, deadline, args.extra.split(), args.rerun)
        if self.results == self.here / "results":
            (self.here / "README.md").write_text(self.readme())
        print(self.tables())


def bad_input(message: str) -> NoReturn:
    """A command line the driver cannot run: the one line that says why, on stderr, and exit status 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def first_model(row: str, runs: Callable[[], Path]) -> Callable[[], list[str]]:
    """`Row.first` of a learned-tree row: the best checkpoint of row `row` (its first model) in the folder `runs()`
    names (the driver's, read when the row starts), as tree.bootstrap_checkpoint; Wait while `row` has not finished."""
    def checkpoint() -> list[str]:
        record = replication.read_record(runs() / row)
        if not record or record.get("status") != "finished" or not record.get("best_checkpoint"):
            raise Wait(f"its first model ({row}) has not finished")
        return [f"tree.bootstrap_checkpoint={record['best_checkpoint']}"]
    return checkpoint


def sibling(path: str, name: str):
    """The module <name>.py beside the driver file `path`, imported under a name of its own (every driver's folder
    may have a report.py)."""
    import importlib.util

    where = Path(path).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{where.parent.name}_{name}", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep_job(sweep: str, **choice) -> list[str]:
    """The overrides of the one job of conf/sweep/<sweep>.yaml (as `nplm-train -m +sweep=<sweep>` expands its
    `hydra.sweeper.params`) that sets each key of `choice` (dots as "__") to its value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from nplm.config import CONF_DIR

    params = OmegaConf.load(Path(CONF_DIR) / "sweep" / f"{sweep}.yaml").hydra.sweeper.params
    given = [f"{key}={value}" for key, value in params.items()]
    axes = []  # per key, its overrides: the one given for a fixed value, one per value swept (the basic sweeper's grid)
    for text, o in zip(given, OverridesParser.create().parse_overrides(given)):
        axes.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                    else [text])
    jobs = list(itertools.product(*axes))
    wanted = {f"{key.replace('__', '.')}={value}" for key, value in choice.items()}
    matching = [job for job in jobs if wanted <= set(job)]
    if len(matching) != 1:
        raise ValueError(f"sweep {sweep}: {len(matching)} jobs set {sorted(wanted)}, not one")
    return list(matching[0])
