"""The one checked schema of nplm-train's configuration: every key of every group, its type and range.

`validate(cfg)` runs right after Hydra composes the config, before any data is read or any run
folder or W&B run is made. A wrong value raises a one-line `UserError`:

    model.context_size=2.5: must be an integer >= 1
    corpus.anything=1: unknown key of corpus=toy; valid keys: max_vocab, min_count, name, ...

A group with options (corpus, head, tree, optimizer) is checked against the option its `name`
picks; keys the group's yaml files do not have are refused, `+group.key=` ones included. Checks that
need the data (a vocabulary of at least 2 words, a context shorter than every split) run in
`nplm.data.datamodule` once the corpus is read, still before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nplm.config.rules import (AnyOf, Betas, Bool, Check, Choice, Encoding, FilePath, Float, Int, IntList,
                               MaxTime, Resume, Rule, SearchDir, Section, Size, Str, StrList, show)
from nplm.errors import UserError

SEED = Int(0, 2**32 - 1)


@dataclass(frozen=True)
class Group:
    """A config group. `options`: the keys of each option, picked by the group's `name` key (or a
    single option "" for groups without names); `common`: keys every option has; `checks`: rules
    across keys. `nullable`: the whole group may be null (tree)."""

    options: dict[str, dict[str, Rule]]
    common: dict[str, Rule] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    nullable: bool = False

    def keys_of(self, option: str) -> dict[str, Rule]:
        named = {"name": Choice(options=tuple(self.options))} if option != "" else {}
        return {**named, **self.common, **self.options.get(option, {})}


# -- corpus ------------------------------------------------------------------------------------------
SIZES = {"train_size": Size(required=True), "valid_size": Size(nullable=True), "test_size": Size(nullable=True)}
NLTK = {"nltk_data": SearchDir(nullable=True), "download": Bool(default=True)}  # ${oc.env:NLTK_DATA}: "" if set empty


def _one_rest(c: dict) -> str | None:
    if "train_size" in c and c.get("valid_size") is None and c.get("test_size") is None:
        return "a number when corpus.test_size=null (only one of valid_size / test_size may be the rest)"
    return None


CORPUS = Group(
    common={"vocab_from": Choice(options=("train", "all")), "min_count": Int(1), "max_vocab": Int(2, nullable=True),
            "unk": Str(nullable=True), "order": Choice(options=("frequency", "sorted"))},
    options={
        "toy": {},
        "tiny_shakespeare": {"path": Str(nullable=True), "download": Bool(), "url": Str(), "sha256": Str(nullable=True),
                             "encoding": Encoding(), **SIZES},
        "brown": {**NLTK, "markers": Bool(), **SIZES},
        "brown_gpt2": {**NLTK, **SIZES},
        "text_files": {"train": FilePath(required=True, hint="e.g. corpus.train=/path/to/train.txt"),
                       "valid": FilePath(required=True, hint="e.g. corpus.valid=/path/to/valid.txt"),
                       "test": FilePath(nullable=True),
                       "eos": Bool(), "lowercase": Bool(), "encoding": Encoding()},
    },
    checks=(Check("valid_size", _one_rest),),
)

# -- model -------------------------------------------------------------------------------------------
MODEL = Group(
    options={"": {"context_size": Int(1), "embed_dim": Int(1), "hidden_dim": Int(0), "direct": Bool(),
                  "activation": Choice(options=("tanh", "sigmoid")), "dropout": Float(ge=0, lt=1),
                  "sparse_embeddings": Bool()}},
    checks=(Check("hidden_dim", lambda m: "an integer >= 1 when model.direct=false (else there are no features)"
                  if m.get("hidden_dim") == 0 and m.get("direct") is False else None),),
)

# -- head --------------------------------------------------------------------------------------------
HEAD = Group(options={
    "softmax": {},
    "class_based": {"num_classes": Int(1, nullable=True), "classes": Choice(options=("frequency", "tree"))},
    "adaptive": {"cutoffs": IntList(1, nullable=True), "div_value": Float(gt=0)},
    "importance_sampling": {"num_samples": Int(1), "proposal_power": Float(ge=0)},
    "hierarchical": {"node_form": Choice(options=("morin_bengio", "logistic")), "node_dim": Int(1),
                     "node_hidden": Int(1), "node_init": Choice(options=("random", "zero", "unigram")),
                     "chunk_elements": Int(1)},
})

# -- tree --------------------------------------------------------------------------------------------
TREE_SEED = Int(0, 2**32 - 1, nullable=True)
TREE = Group(nullable=True, options={
    "balanced": {},
    "random": {"seed": TREE_SEED},
    "huffman": {},
    "brown": {"num_classes": Int(2), "sweeps": Int(0), "within": Choice(options=("huffman", "balanced"))},
    "wordnet": {"unplaced": Choice(options=("nearest", "subtree")), **NLTK, "download": Bool(), "dim": Int(1),
                "contexts": Int(1), "iterations": Int(1), "seed": TREE_SEED,
                "binarise": Choice(options=("balanced", "kmeans"), default="balanced")},
    "learned": {"iterations": Int(1), "seed": TREE_SEED,
                "bootstrap": Choice(options=("balanced", "random", "huffman", "brown", "wordnet")),
                "bootstrap_epochs": Int(1, nullable=True, hint="null: as long as the run"),
                "split": Choice(options=("adaptive", "balanced"), default="adaptive"),
                "eps": Float(ge=0, lt=0.5, default=0.0), "runs": Int(1, default=1),
                "bootstrap_checkpoint": FilePath(nullable=True)},
    "file": {"path": FilePath(required=True, hint="e.g. tree.path=<run>/tree.json")},
})

# -- optimizer ---------------------------------------------------------------------------------------
SCHEDULE = {"lr": Float(gt=0, required=True), "weight_decay": Float(ge=0), "lr_decay": Float(ge=0),
            "plateau_factor": Float(gt=0, le=1), "fused": Bool()}
ADAM = {**SCHEDULE, "betas": Betas(), "eps": Float(gt=0)}
OPTIMIZER = Group(
    options={"sgd": {**SCHEDULE, "momentum": Float(ge=0)}, "adam": ADAM, "adamw": ADAM},
    checks=(Check("plateau_factor", lambda o: "1 when optimizer.lr_decay > 0 (two schedules; set one of them)"
                  if (o.get("lr_decay") or 0) > 0 and (o.get("plateau_factor") or 1) < 1 else None),),
)

# -- trainer: the pytorch_lightning.Trainer arguments nplm supports ----------------------------------------
BATCH_LIMIT = AnyOf(nullable=True, rules=(Int(1), Float(gt=0, le=1)),
                    words="a count >= 1 or a fraction in (0, 1] of the batches (0 would run no batches)")
TRAINER = Group(options={"": {
    "max_epochs": Int(1, hint="-1, endless training, is refused"), "min_epochs": Int(0, nullable=True), "max_steps": AnyOf(rules=(Int(1), Choice(options=(-1,))),
                                                                                words="-1 (no limit) or an integer >= 1"),
    "accelerator": Choice(options=("cpu", "gpu", "cuda", "mps", "auto")),
    "devices": AnyOf(rules=(Int(1), Choice(options=("auto",)), IntList(0)),
                     words="an integer >= 1, auto, or a list of device ids"),
    "num_nodes": Int(1), "strategy": Str(), "precision": Choice(options=(
        "32-true", "32", 32, "64-true", "64", 64, "16-mixed", "16", 16, "bf16-mixed", "bf16", "bf16-true", "16-true")),
    "gradient_clip_val": Float(gt=0, nullable=True), "gradient_clip_algorithm": Choice(options=("norm", "value")),
    "log_every_n_steps": Int(1), "val_check_interval": AnyOf(rules=(Int(1), Float(gt=0, le=1)),
                                                             words="a fraction in (0, 1] of an epoch or a count >= 1"),
    "num_sanity_val_steps": Int(-1), "deterministic": Bool(), "benchmark": Bool(nullable=True),
    "enable_progress_bar": Bool(nullable=True), "detect_anomaly": Bool(),
    "limit_train_batches": BATCH_LIMIT, "limit_val_batches": BATCH_LIMIT, "limit_test_batches": BATCH_LIMIT,
    "max_time": MaxTime(nullable=True),
    "check_val_every_n_epoch": Int(1), "accumulate_grad_batches": Int(1), "use_distributed_sampler": Bool(),
}})

LOGGER = Group(options={"": {"csv": Bool(), "wandb": Section(nullable=True)}})  # wandb: WANDB below, or null
WANDB = Group(options={"": {"project": Str(), "entity": Str(nullable=True),
                            "mode": Choice(options=("offline", "online", "disabled")), "job_type": Str(nullable=True),
                            "tags": StrList(), "name": Str(nullable=True), "notes": Str(nullable=True)}})
DATA = Group(options={"": {"batch_size": Int(1), "eval_batch_size": Int(1), "overfit_batches": Int(0)}})
CALLBACKS = Group(options={"": {"early_stopping_patience": Int(1, nullable=True)}})
PATHS = Group(options={"": {"data_dir": Str(), "output_dir": Str()}})
PROGRESS = Group(options={"": {"interval": Float(gt=0, default=30.0)}})

GROUPS: dict[str, Group] = {"corpus": CORPUS, "model": MODEL, "head": HEAD, "tree": TREE, "optimizer": OPTIMIZER,
                            "trainer": TRAINER, "logger": LOGGER, "data": DATA, "callbacks": CALLBACKS,
                            "paths": PATHS, "progress": PROGRESS}

# Top-level keys (the groups above are top-level keys too).
TOP: dict[str, Rule] = {
    "experiment_name": Str(),
    "seed": SEED,
    "threads": Int(1, nullable=True),
    "resume": Resume(),
    "resume_allow_changes": Bool(default=False),
    "verbose": Bool(default=False),
    "steps_per_execution": Int(1, default=16),
    "compile": Bool(default=False),
    "tf32": Bool(default=True),
    "stop_at": Float(gt=0, nullable=True),
}
# What each top-level key does, for `nplm-train --help`.
TOP_DOC = {
    "experiment_name": "output folder outputs/<name>/ and W&B group",
    "seed": "seed of every random choice (weights, batches, trees)",
    "threads": "torch CPU threads for this job (null: one per core)",
    "resume": "true: continue the latest unfinished run with the same overrides; or a <run> folder / .ckpt",
    "resume_allow_changes": "let resume go on with overrides that differ from the stored run's",
    "verbose": "show third-party info and warnings that are silenced by default",
    "steps_per_execution": "training batches per Lightning step, each its own optimizer step (less overhead)",
    "compile": "torch.compile the training step",
    "tf32": "TF32 matmuls on CUDA (no effect on CPU)",
    "stop_at": "Unix time: train until then, then test the best checkpoint",
}


def _fail(path: str, value, what: str) -> UserError:
    return UserError(f"{path}={show(value)}: {what}")


def check_group(prefix: str, group: Group, values) -> None:
    """Check one group's dict `values` (already resolved) against `group`."""
    if values is None:
        if group.nullable:
            return
        raise _fail(prefix, None, "must be a group of settings, not null")
    if not isinstance(values, dict):
        raise _fail(prefix, values, f"is a group of settings; set its keys, e.g. {prefix}.<key>=<value>")
    option = ""
    if "" not in group.options:
        name = values.get("name")
        if name not in group.options:
            raise _fail(f"{prefix}.name", name, "must be " + Choice(options=tuple(group.options)).text())
        option = name
    keys = group.keys_of(option)
    where = f" of {prefix}={option}" if option else f" of {prefix}"
    for key, value in values.items():
        if key not in keys:
            raise _fail(f"{prefix}.{key}", value, f"unknown key{where}; valid keys: {', '.join(sorted(keys))}")
    for key, rule in keys.items():
        value = values.get(key, "???")
        if value == "???" or (value is None and rule.required):
            if rule.required or key in values:
                raise _fail(f"{prefix}.{key}", value, f"must be set for {prefix}={option or '...'}: {rule.describe()}")
            continue
        problem = rule(value)
        if problem is not None:
            raise _fail(f"{prefix}.{key}", value, f"must be {problem}")
    for check in group.checks:
        problem = check.test(values)
        if problem is not None:
            raise _fail(f"{prefix}.{check.key}", values.get(check.key), f"must be {problem}")


def check_tree(cfg: dict) -> None:
    """Every key of the resolved config `cfg` (a plain dict), group by group, then the top level."""
    for key, value in cfg.items():
        if key not in GROUPS and key not in TOP:
            raise _fail(key, value, f"unknown key; valid top-level keys: {', '.join(sorted([*TOP, *GROUPS]))}")
    for key, rule in TOP.items():
        if key in cfg:
            problem = rule(cfg[key])
            if problem is not None:
                raise _fail(key, cfg[key], f"must be {problem}")
    for name, group in GROUPS.items():
        if name in cfg:
            check_group(name, group, cfg[name])
        elif not group.nullable and name not in ("progress",):
            raise UserError(f"{name}: the config has no {name} group; pick one with {name}=<option>")
    wandb = cfg["logger"].get("wandb")
    if wandb is not None:
        check_group("logger.wandb", WANDB, wandb)


def check_devices(trainer: dict) -> None:
    """trainer=gpu (or accelerator=cuda/mps) on a machine without one: refused before anything runs."""
    accelerator = trainer.get("accelerator", "cpu")
    if accelerator not in ("gpu", "cuda", "mps"):
        return
    import torch

    if accelerator == "mps":
        if not torch.backends.mps.is_available():
            raise _fail("trainer.accelerator", accelerator, "no Apple MPS device here; use trainer=default (CPU)")
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise _fail("trainer.accelerator", accelerator,
                    "no CUDA GPU is visible on this machine; use trainer=default (CPU)")
    devices = trainer.get("devices", 1)
    wanted = len(devices) if isinstance(devices, (list, tuple)) else devices if isinstance(devices, int) else 1
    if wanted > count:
        raise _fail("trainer.devices", devices, f"at most {count}, the GPUs visible on this machine")


def validate(cfg):
    """Check the composed config `cfg` (DictConfig or dict) and return it unchanged; raise a one-line
    `UserError` naming the first bad key, its value and what is allowed."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        raise UserError(f"{key}: cannot be resolved ({str(err).splitlines()[0]})") from None
    check_tree(plain)
    check_devices(plain["trainer"])
    return cfg
