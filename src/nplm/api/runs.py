"""`nplm.train`, `nplm.Run` and `nplm.compare`: nplm-train and nplm-compare from Python (`nplm.api`)."""

from __future__ import annotations

import copy
import csv
import glob
import io
import json
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nplm.cli import args as arg
from nplm.errors import UserError

LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's, as in a command's train.log


@dataclass
class Run:
    """A run folder: its status, final metrics (metrics.json), best checkpoint, config and per-epoch history."""

    path: Path
    status: str
    metrics: dict
    best_checkpoint: Path | None
    config: dict
    history: list[dict] = field(default_factory=list)  # one dict per epoch (epoch 0 first), as metrics.csv

    @classmethod
    def load(cls, path: str | Path) -> Run:
        """The run in folder `path` (written by `nplm.train` or `nplm-train`).

        >>> run = nplm.Run.load("outputs/default/runs/2026-12-01_10-00-00_ab12cd")
        >>> run.metrics["test/ppl"], run.best_checkpoint
        """
        folder = Path(path).expanduser()
        try:
            record = json.loads((folder / "metrics.json").read_text())
        except (OSError, ValueError) as err:
            raise UserError(f"run={folder}: has no readable metrics.json ({type(err).__name__}); "
                            "pass a run folder written by nplm.train or nplm-train") from None
        from omegaconf import OmegaConf

        config_file = folder / "config.yaml"
        config = OmegaConf.to_container(OmegaConf.load(config_file)) if config_file.exists() else {}
        best = record.get("best_checkpoint")
        if best and not Path(best).exists():  # the folder moved since: the same file in it
            best = folder / "checkpoints" / Path(best).name
        return cls(folder, record.get("status", "unknown"), record.get("metrics") or {},
                   Path(best) if best else None, config, record.get("history") or [])


def train(*overrides: str, run_dir: str | Path | None = None, **options) -> Run:
    """Train one run, as `nplm-train *overrides` does, and return it.

    `overrides` are nplm-train's (`"corpus=toy"`, `"head=hierarchical"`, `"trainer.max_epochs=2"`); each
    keyword option is one more (`seed=3` is `"seed=3"`; `__` stands for a dot: `trainer__max_epochs=2`).
    They are checked as nplm-train checks them, before anything loads. The run goes into `run_dir`, by default
    a fresh folder under outputs/ as nplm-train's (`outputs/<experiment>/runs/<time>_<id>`), with its
    train.log (`logging.basicConfig(level=logging.INFO)` shows the log here too).

    >>> run = nplm.train("corpus=toy", "trainer.max_epochs=2", seed=3)
    >>> run.metrics["val/ppl_best"], run.best_checkpoint
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from nplm.cli import train as command
    from nplm.config import CONF_DIR
    from nplm.training.train import train as train_run

    argv = [*overrides, *(f"{key.replace('__', '.')}={_override_value(v)}" for key, v in options.items())]
    for item in argv:
        if not isinstance(item, str):
            raise UserError(f"overrides: {item!r} is not a string; pass 'key=value' strings (e.g. 'corpus=toy')")
        if item.startswith("-"):
            raise UserError(f"{item}: nplm.train runs one run; call it once per setting (nplm-train -m for a sweep)")
    if run_dir is not None:
        quoted = str(Path(run_dir).expanduser().absolute()).replace("'", "\\'")
        argv.append(f"hydra.run.dir='{quoted}'")  # (quoted: any character a path may hold)
    command.register_run_id()  # a fresh folder's id, as nplm-train's (before the checks, which resolve the folder)
    hydra_before = HydraConfig.instance().cfg  # the checks set Hydra's run config: put back at the end
    try:
        command.check_overrides(argv)
        try:
            command.check_composition(argv)  # composed and checked as nplm-train does
        except SystemExit as stop:  # resume=<a finished run>: nothing to train; train_run hands back its record
            if stop.code not in (0, None):
                raise
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=argv, return_hydra_config=True)
        folder = Path(str(OmegaConf.select(cfg, "hydra.run.dir"))).absolute()
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(folder)  # (Hydra's run sets it when it makes the folder)
        HydraConfig.instance().set_config(cfg)  # the job's overrides (the record, resume, W&B's name), ${hydra:...}
        run_cfg = copy.deepcopy(cfg)
        with open_dict(run_cfg):
            del run_cfg["hydra"]
            run_cfg.paths.output_dir = str(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with _log_to(folder / "train.log"):
            metrics = train_run(run_cfg)
    finally:
        HydraConfig.instance().cfg = hydra_before
    best = metrics.get("best_checkpoint")
    return Run.load(Path(best).parent.parent if best else folder)  # (resume= may continue an older run's folder)


def _override_value(value) -> str:
    """A Python value as an override's value: True -> true, None -> null, [1, 2] -> [1,2]."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_override_value, value)) + "]"
    return str(value)


@contextmanager
def _log_to(path: Path):
    """Within `with`: the log (INFO and above) appended to `path`, as a command's train.log."""
    handler, root = logging.FileHandler(path, mode="a"), logging.getLogger()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    level = root.level
    root.addHandler(handler)
    if level > logging.INFO:  # (as Hydra's job logging sets it; NOTSET passes everything already)
        root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)


def compare(paths_or_glob) -> Table:
    """nplm-compare's table of the runs below the given folders: one folder, a glob, a `Run`, or a list of them.

    Rows are dicts with numbers as numbers (nplm-compare's --csv columns); `print(table)` shows the table as
    nplm-compare prints it, and `table.to_pandas()` is a DataFrame where pandas is installed.

    >>> table = nplm.compare("outputs/default/multiruns/*")
    >>> [(row["job"], row["val_ppl_mean"]) for row in table]
    """
    from nplm.cli import compare as command

    items = paths_or_glob if isinstance(paths_or_glob, (list, tuple)) else [paths_or_glob]
    paths = []
    for item in items:
        item = item.path if isinstance(item, Run) else item
        found = sorted(glob.glob(os.path.expanduser(str(item)))) if glob.has_magic(str(item)) else [item]
        if not found:
            raise UserError(f"paths={item}: matches no folder")
        for path in found:
            arg.check("paths", path, arg.input_dir)  # nplm-compare's check of its folders
            paths.append(Path(path).expanduser())
    rows = command.group_seeds(command.find_jobs(paths))
    root = paths[0] if len(paths) == 1 else None
    header, body = command.table(rows, root)
    records = [{key: _number(value) for key, value in row.items()}
               for row in csv.DictReader(io.StringIO(command.as_csv(rows, root)))]
    return Table(records, command.as_text(header, body), command.as_markdown(header, body))


def _number(cell: str):
    """A CSV cell as an int or float where it is one, None where empty, else the text."""
    if cell == "":
        return None
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell


class Table(list):
    """nplm-compare's rows as a list of dicts; prints as nplm-compare's table (a notebook shows its Markdown)."""

    def __init__(self, rows: list[dict], text: str, markdown: str):
        super().__init__(rows)
        self.text, self.markdown = text, markdown

    def __str__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return self.markdown

    def to_pandas(self):
        """The rows as a pandas DataFrame (pandas is not a dependency of nplm: install it to use this).

        >>> nplm.compare("outputs/default").to_pandas().sort_values("test_ppl_mean")
        """
        try:
            import pandas
        except ImportError:
            raise UserError("to_pandas: pandas is not installed (pip install pandas); the rows are a list of dicts") from None
        return pandas.DataFrame(list(self))
