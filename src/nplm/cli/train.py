"""`nplm-train`: the help page, checks of the command line before Hydra starts, and Hydra around
`nplm.training.train.train`.

`--help` and `--version` import neither torch, Lightning nor W&B: they answer at once, the help page read
from the config folder itself (each group's options with the first comment line of their yaml file) and the top-level keys
of `nplm.config.schema`. An override naming a key or option no config has, or a value the schema
refuses, is one line and exit 2 before Lightning and W&B load (the registered options' keys are
read from their modules, which import torch).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
from pathlib import Path

from nplm import __version__
from nplm.config import CONF_DIR
from nplm.config.schema import TOP, TOP_DOC, TOP_GROUPS, groups
from nplm.errors import EXIT_USER_ERROR, UserError

# Groups chosen on the command line (`group=option`) that hold no training keys of their own.
CHOICE_ONLY = ("experiment", "debug", "sweep")
HELP_FLAGS = ("-h", "--help")
VERSION_FLAG = "--version"

EXAMPLES = """\
examples:
  nplm-train experiment=quickstart                              a run (Tiny Shakespeare, 3 epochs)
  nplm-train corpus=brown head=hierarchical tree=huffman optimizer.lr=0.003
  nplm-train -m model.context_size=2,4 model.embed_dim=16,32 corpus=toy   a sweep: 4 jobs
  nplm-train -m +sweep=seeds experiment=brown_mlp1              a preset sweep (conf/sweep/)
  nplm-train experiment=brown_mlp1 resume=true                  resume the last unfinished run
  nplm-compare outputs/brown_mlp1 --markdown table.md           compare the runs and sweeps
  nplm-train experiment=quickstart --cfg job                    print the composed config, run nothing
  nplm-train --help head=hierarchical                            an option's keys, their types and help"""


def options(group: str, conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """{option: its yaml file's first comment line} for a config group (subfolders as a/b)."""
    folder = conf_dir / group
    out = {}
    for path in sorted(folder.rglob("*.yaml")):
        first = ""
        for line in path.read_text().splitlines():
            text = line.lstrip("# ").strip()
            if line.startswith("#") and text and not text.startswith("@package"):
                first = text
                break
        out[path.relative_to(folder).with_suffix("").as_posix()] = first
    return out


def help_text(conf_dir: Path = CONF_DIR) -> str:
    """The `nplm-train --help` page."""
    lines = ["usage: nplm-train [-m] [group=option ...] [key=value ...] [--cfg job] [-h] [--version]", "",
             "Train a neural probabilistic language model; every setting is a Hydra override.",
             "Every value is checked before anything runs (docs/configuration.md: What is checked).", "",
             "config groups (group=option; change one of its keys with group.key=value):"]
    for group in sorted(p.name for p in conf_dir.iterdir() if p.is_dir() and p.name not in ("hydra", "paths")):
        lines.append(f"  {group}")
        for option, doc in options(group, conf_dir).items():
            lines.append(f"    {option:30s}{doc if len(doc) <= 88 else doc[:87] + '...'}")
    lines += ["", "top-level keys (key=value):"]
    for key, rule in TOP.items():
        lines.append(f"  {key:22s} {TOP_DOC.get(key, '')} [{rule.describe()}]")
    lines += ["  data.batch_size / data.eval_batch_size   windows (blocks) per training / evaluation batch",
              "  data.block_size                          T: batches of whole blocks of T tokens (model=modern, transformer)",
              "  callbacks.early_stopping_patience        stop after this many epochs without a better val/ppl",
              "  callbacks.ema_decay                      e.g. 0.999: validate, checkpoint, test a moving average of the weights",
              "  paths.data_dir                           downloads ($NPLM_DATA_DIR, default ./data_cache)",
              "", EXAMPLES, "",
              "Hydra's own flags: nplm-train --hydra-help",
              "The command's name and version: nplm-train --version"]
    return "\n".join(lines)


def _simple_values(value: str) -> list[str] | None:
    """`a,b,c` -> [a, b, c] for plain names; None for anything Hydra's grammar may treat specially."""
    return value.split(",") if re.fullmatch(r"[\w./-]+(,[\w./-]+)*", value) else None


def check_overrides(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Refuse, with the valid keys or options, an override no config can have: a group option with no
    yaml file (`corpus=wikipedia`), a top-level key (`foo=1`) or group key (`model.embedding=16`,
    `+corpus.anything=1`) that no option of the group has. Keys valid in another option of the group
    are left to the schema check on the composed config."""
    chosen_options = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if re.fullmatch(r"\w+=\w+", a)}
    for arg in argv:
        if arg.startswith("-") or "=" not in arg or arg.startswith("~"):
            continue
        key, value = arg.lstrip("+").split("=", 1)
        if key.startswith("hydra") or "/" in key or "@" in key:
            continue
        if "." not in key:
            if key in TOP_GROUPS or key in CHOICE_ONLY:
                if (conf_dir / key).is_dir():
                    valid = options(key, conf_dir)
                    for choice in _simple_values(value) or []:
                        if choice not in valid and choice != "null":
                            raise UserError(f"{key}={choice}: no such option; valid: {', '.join(valid)}")
            elif key not in TOP:
                raise UserError(f"{key}={value}: unknown key; valid top-level keys: "
                                f"{', '.join(sorted([*TOP, *TOP_GROUPS]))}")
            continue
        group, sub = key.split(".", 1)
        if group in TOP_GROUPS and group != "logger":
            schema = groups()[group]
            chosen = chosen_options.get(group)
            picked = [chosen] if chosen in schema.options else list(schema.options)
            keys = sorted({k for option in picked for k in schema.keys_of(option)})
            if sub not in keys:
                where = f"{group}={chosen}" if len(picked) == 1 and chosen else group
                raise UserError(f"{key}={value}: unknown key of {where}; valid keys: {', '.join(keys)}")


def check_composition(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Compose the config of a single run, or of every job of a `-m` sweep, as Hydra will, and check each
    against the schema before any job starts (a sweep with a mistake in its last job runs none). A
    composition error becomes one line: above all a key that exists only in another option of its group
    (`head.node_dim=4` while head is softmax), which Hydra reports in five lines with exit 1. A single run
    is checked before torch loads; a sweep's jobs also against what Lightning refuses at start-up (it loads
    Lightning, which its first job would load anyway)."""
    multirun = argv[:1] in (["-m"], ["--multirun"])
    rest = argv[1:] if multirun else argv
    if any(a.startswith("-") for a in rest):  # --cfg, --hydra-help, ...: Hydra's own modes
        return
    folders = ("hydra.run.dir", "hydra.sweep.dir")  # Hydra's own keys that are checked here (check_run_folder)
    overrides = [a for a in rest if ("=" in a or a.startswith("~"))  # ~key: a deletion, with or without its value
                 and (not a.lstrip("+~").startswith("hydra") or a.split("=")[0] in folders)]
    if not multirun:
        cfg = _compose(overrides, conf_dir)
        check_run_folder(cfg, multirun)
        _validate(cfg)
        check_subword_keys(overrides, cfg)
        leave_finished_run(cfg)
        return
    firsts = {a: _simple_values(a.partition("=")[2]) for a in overrides}  # a sweep's first job, for its folder
    first = [a.split("=", 1)[0] + "=" + values[0] if (values := firsts[a]) else a
             for a in overrides if firsts[a] or "(" not in a]
    cfg = _compose(first, conf_dir)
    check_run_folder(cfg, multirun)
    jobs = sweep_jobs(overrides, cfg)
    if jobs is None:  # another sweeper (optuna) or a sweep Hydra expands itself (glob): the first job only
        _validate(cfg)
        return
    from omegaconf import OmegaConf

    trainers: list[tuple[dict, int]] = []  # each distinct trainer group, with the first job (Hydra's #) that has it
    for n, job in enumerate(jobs):
        try:
            composed = _validate(_compose(job, conf_dir))
            check_subword_keys(job, composed)
            trainer = OmegaConf.to_container(composed.trainer, resolve=True)
        except UserError as err:
            raise UserError(f"{err} (job #{n} of the sweep's {len(jobs)}; no job has started)") from None
        if all(trainer != seen for seen, _ in trainers):
            trainers.append((trainer, n))
    from nplm.tracking.quiet import quiet
    from nplm.training.trainer import check_trainer

    quiet(bool(cfg.get("verbose")))  # Lightning's "GPU available" lines: the jobs print what they print
    for trainer, n in trainers:
        try:
            check_trainer(trainer)
        except UserError as err:
            raise UserError(f"{err} (job #{n} of the sweep's {len(jobs)}; no job has started)") from None


def leave_finished_run(cfg) -> None:
    """`resume=<a finished run>` with nothing left to train: say so and exit 0 before Hydra writes anything
    (with hydra.run.dir=<that run> it would write into the run's folder), so the run stays byte for byte."""
    from omegaconf import OmegaConf

    from nplm.tracking.runs import finished_named_run

    plain = OmegaConf.to_container(cfg, resolve=False)
    for key in ("hydra", "paths"):  # (Hydra's run resolves them; no part of what is trained)
        plain.pop(key, None)
    done = finished_named_run(cfg.get("resume"), OmegaConf.to_container(OmegaConf.create(plain), resolve=True))
    if done is not None:
        print(f"nplm: resume={cfg.resume}: that run has finished and has nothing left to train (test/ppl "
              f"{done['metrics'].get('test/ppl')}); it stays as it is", flush=True)
        sys.exit(0)


def check_subword_keys(overrides: list[str], cfg) -> None:
    """Refuse a vocabulary key typed on the command line that the composed run's learned subword vocabulary
    (corpus.tokenizer) makes meaningless (`SUBWORD_IGNORES`), rather than ignore it."""
    from nplm.data.corpora import SUBWORD_IGNORES
    from nplm.tracking.runs import override_key

    tokenizer = cfg.corpus.get("tokenizer")
    for arg in overrides if tokenizer is not None else []:
        key = override_key(arg)  # (`~corpus.min_count` deletes the key: nothing to ignore)
        if not arg.startswith("~") and key.startswith("corpus.") and key[len("corpus."):] in SUBWORD_IGNORES:
            raise UserError(f"{arg.lstrip('+')}: has no effect with corpus.tokenizer={tokenizer} (a vocabulary of "
                            f"corpus.vocab_size pieces learned on the training split); leave {key} out")


def sweep_jobs(overrides: list[str], cfg) -> list[list[str]] | None:
    """The jobs of a `-m` sweep as Hydra's basic sweeper makes them (`hydra.sweeper.params` of the composed
    `cfg`, e.g. `+sweep=seeds`, then the command line's overrides, a key given twice taking the later): the
    product of each override's values (`a,b`, `range(...)`, `choice(...)`). None where Hydra's basic
    sweeper does not make them (another sweeper, an `interval`, a `glob` over a group's options)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    sweeper = OmegaConf.select(cfg, "hydra.sweeper", default=None) or {}
    if not str(sweeper.get("_target_", "")).endswith(".BasicSweeper"):
        return None
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    values: dict[str, list[str]] = {}
    try:
        for override in OverridesParser.create().parse_overrides([*params, *overrides]):
            key = override.get_key_element()
            if override.is_delete():  # ~key (~key=value: deleted where it has that value), as typed
                values[key] = [override.input_line]
            elif not override.is_sweep_override():
                values[key] = [f"{key}={override.get_value_element_as_str()}"]
            elif override.is_discrete_sweep():
                values[key] = [f"{key}={v}" for v in override.sweep_string_iterator()]
            else:
                return None
    except Exception:  # a glob needs Hydra's config loader; Hydra reports any grammar error itself
        return None
    return [list(job) for job in itertools.product(*values.values())]


def _compose(overrides: list[str], conf_dir: Path):
    """The config Hydra composes from `overrides` (with its `hydra` node); a composition error as one line."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            return compose(config_name="train", overrides=overrides, return_hydra_config=True)
    except HydraException as err:
        text = str(err)
        failed = re.search(r"Could not override '([\w.]+)'", text)
        if not failed or "." not in failed.group(1):
            raise UserError(text.splitlines()[0] if text else type(err).__name__) from None
        key = failed.group(1)
        group, sub = key.split(".", 1)
        arg = next((a.lstrip("+") for a in overrides if a.lstrip("+").startswith(key + "=")), key)
        schema = groups().get(group)
        holders = [o for o in schema.options if sub in schema.keys_of(o)] if schema else []
        if holders == [""]:  # a group without options (trainer, data, ...): a key its yaml leaves out
            raise UserError(f"{arg}: a key the {group} group's yaml does not set; add it with +{arg}") from None
        rest = [a for a in overrides if not a.lstrip("+").startswith(key + "=")]
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            chosen = compose(config_name="train", overrides=rest).get(group) or {}
        where = f"{group}={chosen.get('name')}" if chosen.get("name") else f"the chosen {group}"
        hint = f"; it is a key of {group}={'/'.join(holders)}: add {group}={holders[0]}" if holders else ""
        raise UserError(f"{arg}: not a key of {where}{hint}") from None


def _validate(cfg):
    """Every value of a composed `cfg` against the schema (quickly, rather than after torch and
    Lightning load); returns the validated config, without its `hydra` node."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from nplm.config.schema import validate

    HydraConfig.instance().set_config(cfg)  # what ${hydra:...} in paths resolves against
    cfg = cfg.copy()
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = "<the run folder Hydra makes>"  # runtime.output_dir exists only in a run
    return validate(cfg)


def check_run_folder(cfg, multirun: bool) -> None:
    """The folder Hydra is about to make (hydra.run.dir, or hydra.sweep.dir of a multirun): refused
    in one line if it cannot be made or written (tried for real, `nplm.files.folder_problem`), or,
    for a single run, if another nplm-train is writing it now (`nplm.tracking.lock`), before Hydra
    writes anything into it."""
    from omegaconf import OmegaConf

    from nplm.files import folder_problem
    from nplm.tracking.lock import holder

    if not OmegaConf.has_resolver("nplm_uid"):  # registered for the real run by _run_jobs
        OmegaConf.register_new_resolver("nplm_uid", lambda: "000000")
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = str(OmegaConf.select(cfg, key))
    except Exception:  # an interpolation only Hydra's run can resolve: Hydra reports it
        return
    problem = folder_problem(folder)
    if problem is not None:
        raise UserError(f"{key}={folder}: {problem}" + ("" if ";" in problem else f"; give {key} a folder you can write"))
    # (not in the other processes of a DDP run, which Lightning starts with this command line: rank 0 holds it)
    child = any(os.environ.get(k, "0") not in ("", "0") for k in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"))
    busy = None if multirun or child else holder(folder)
    if busy is not None:
        raise UserError(busy)


def option_help(group: str, option: str) -> str:
    """`nplm-train --help GROUP=OPTION`: the option's keys as it registered them, with their rules and
    what each does."""
    schema = groups()[group]
    if option not in schema.options:
        raise UserError(f"{group}={option}: no such option; valid: {', '.join(schema.options)}")
    lines = [f"{group}={option}: {options(group).get(option, '')}", "", f"keys ({group}.<key>=<value>):"]
    for key, rule in schema.keys_of(option).items():
        if key != "name":
            lines.append(f"  {key:22s} {rule.doc + ' ' if rule.doc else ''}[{rule.describe()}]")
    return "\n".join(lines)


def command_line(argv: list[str]) -> None:
    """`--help` (with `group=option`: that option's keys): print the page and exit 0; `--version`: print
    `nplm-train <version>` and exit 0; an impossible override: one line on stderr, exit 2."""
    if VERSION_FLAG in argv and not any(a in HELP_FLAGS for a in argv):
        print(f"nplm-train {__version__}", flush=True)
        sys.exit(0)
    if any(a in HELP_FLAGS for a in argv):
        chosen = [a.split("=", 1) for a in argv if re.fullmatch(r"\w+=[\w/]+", a) and a.split("=")[0] in TOP_GROUPS]
        try:
            print("\n\n".join(option_help(g, o) for g, o in chosen) if chosen else help_text(), flush=True)
        except BrokenPipeError:  # `nplm-train --help | head`: the reader left, nothing is wrong
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except UserError as err:
            print(f"nplm: error: {err}", file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)
        sys.exit(0)
    try:
        check_overrides(argv)
        check_composition(argv)
    except UserError as err:
        print(f"nplm: error: {err}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def sweep_objective(metrics: dict) -> float:
    """What a job returns to a hyperparameter-search sweeper (Optuna): its best validation perplexity, or NaN
    where no validation ran (`val/ppl_best` null: a trial without a value, as a failed job's)."""
    best = metrics.get("val/ppl_best")
    return float("nan") if best is None else float(best)


def register_run_id() -> None:
    """${nplm_uid:}, the random suffix of a fresh run folder's name (conf/hydra/default.yaml): Hydra's
    second-resolution timestamps collide when jobs start together."""
    import secrets

    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("nplm_uid", lambda: secrets.token_hex(3), use_cache=True, replace=True)


def _run_jobs() -> None:
    """Hydra's part: compose each job's config (one, or each of a `-m` sweep) and call `train(cfg)`. In
    a multirun a job that fails (its settings were checked before the first job: bad data, a fault) is
    recorded and the sweep goes on; the exit code is 1 at the end if any job failed."""
    import hydra

    from nplm.tracking.runs import is_multirun
    from nplm.training.train import train

    register_run_id()
    failed: list[str] = []

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
    def job(cfg) -> float:
        try:
            metrics = train(cfg)
        except UserError as err:
            print(f"nplm: error: {err}", file=sys.stderr)
            if not is_multirun():
                sys.exit(EXIT_USER_ERROR)
            failed.append(str(err))
            return float("nan")
        except Exception as err:
            if not is_multirun():
                raise
            logging.getLogger(__name__).exception("job failed; the sweep goes on")
            failed.append(f"{type(err).__name__}: {err}")
            return float("nan")
        return sweep_objective(metrics)

    job()
    if failed:
        print(f"nplm: error: {len(failed)} job(s) of the sweep failed; see their metrics.json "
              "(nplm-compare shows them)", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    """The `nplm-train` console script: --help, --version and impossible overrides are answered before Hydra
    and torch start; then Hydra runs the job(s)."""
    command_line(sys.argv[1:])
    _run_jobs()


if __name__ == "__main__":
    main()
