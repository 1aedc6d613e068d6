"""The one checked schema of nplm-train's configuration: every key of every group, its type and range.

`validate(cfg)` runs right after Hydra composes the config, before any data is read or any run
folder or W&B run is made. A wrong value raises a one-line `UserError`:

    model.context_size=2.5: must be an integer >= 1
    corpus.anything=1: unknown key of corpus=toy; valid keys: max_vocab, min_count, name, ...

A group with options (corpus, model, head, tree, optimizer) is checked against the option its `name`
picks, with the keys, types and help that option registered where it is defined
(`nplm.config.registry`); keys it did not register are refused, `+group.key=` ones included. Rules
across groups (`CROSS_GROUP`: a head that cannot take what the model, tree or optimizer asks of it)
ask the head's registered class (`can_tie`, `uses_tree`, `has_predicted_representation`). Checks that
need the data (a vocabulary of at least 2 words, a context shorter than every split) run in
`nplm.data.datamodule` once the corpus is read, still before anything is written.
"""

from __future__ import annotations

import functools
import importlib
import os
import time
from dataclasses import dataclass, field

from nplm.config.rules import (AnyOf, Bool, Check, Choice, Float, Int, IntList, MaxTime, Name, Resume, Rule, Section,
                               Str, StrList, show)
from nplm.errors import UserError

SEED = Int(0, 2**32 - 1)


@dataclass(frozen=True)
class Group:
    """A config group. `options`: the keys of each option, picked by the group's `name` key (or a
    single option "" for groups without names); `common`: keys every option has; `checks`: rules
    across keys, of every option, and `option_checks` of one option. `nullable`: the whole group may
    be null (tree)."""

    options: dict[str, dict[str, Rule]]
    common: dict[str, Rule] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    nullable: bool = False
    option_checks: dict[str, tuple[Check, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, registry, nullable: bool = False) -> "Group":
        """The group of a registry (`nplm.config.registry`): its options' registered keys and checks."""
        options = registry.options()
        return cls(options={name: o.keys for name, o in options.items()}, common=registry.common,
                   checks=registry.checks, nullable=nullable,
                   option_checks={name: o.checks for name, o in options.items() if o.checks})

    def keys_of(self, option: str) -> dict[str, Rule]:
        named = {"name": Choice(options=tuple(self.options))} if option != "" else {}
        return {**named, **self.common, **self.options.get(option, {})}

    def checks_of(self, option: str) -> tuple[Check, ...]:
        return self.checks + self.option_checks.get(option, ())


# -- trainer: the pytorch_lightning.Trainer arguments nplm supports ----------------------------------------
BATCH_LIMIT = AnyOf(nullable=True, rules=(Int(1), Float(gt=0, le=1)),
                    words="a count >= 1 or a fraction in (0, 1] of the batches (0 would run no batches)")
TRAINER = Group(options={"": {
    "max_epochs": Int(1, hint="-1, endless training, is refused"), "min_epochs": Int(0, nullable=True), "max_steps": AnyOf(rules=(Int(1), Choice(options=(-1,))),
                                                                                words="-1 (no limit) or an integer >= 1"),
    "accelerator": Choice(options=("cpu", "gpu", "cuda", "mps", "auto")),
    "devices": AnyOf(rules=(Int(1), Choice(options=("auto",)), IntList(0)),
                     words="an integer >= 1, auto, or a list of device ids"),
    # (not Lightning's old names 16 and bf16, which it runs as 16-mixed and bf16-mixed with a warning of its own)
    "num_nodes": Int(1), "strategy": Str(), "precision": Choice(options=(
        "32-true", "32", 32, "64-true", "64", 64, "16-mixed", "bf16-mixed", "bf16-true", "16-true")),
    "gradient_clip_val": Float(gt=0, nullable=True), "gradient_clip_algorithm": Choice(options=("norm", "value")),
    "log_every_n_steps": Int(1), "val_check_interval": AnyOf(rules=(Int(1), Float(gt=0, le=1)),
                                                             words="a fraction in (0, 1] of an epoch or a count >= 1"),
    "num_sanity_val_steps": Int(-1), "deterministic": Bool(), "benchmark": Bool(nullable=True),
    "enable_progress_bar": Bool(nullable=True), "detect_anomaly": Bool(),
    "limit_train_batches": BATCH_LIMIT, "limit_val_batches": BATCH_LIMIT, "limit_test_batches": BATCH_LIMIT,
    "max_time": MaxTime(nullable=True, doc="training time over every piece of the run: then it stops inside its epoch, "
                        "with a checkpoint there, recorded stopped (nplm's, not Lightning's)"),
    "check_val_every_n_epoch": Int(1), "accumulate_grad_batches": Int(1), "use_distributed_sampler": Bool(),
}}, checks=(Check("min_epochs", lambda t: None if (t.get("min_epochs") or 0) <= t.get("max_epochs", 1) else
                  f"at most trainer.max_epochs={t['max_epochs']} (Lightning stops there whatever min_epochs says)"),))

LOGGER = Group(options={"": {"csv": Bool(), "wandb": Section(nullable=True)}})  # wandb: WANDB below, or null
# W&B's own rules (wandb 0.2x, wandb_settings.py): a project name of at most 128 characters without
# / \ # ? % : (an entity, the other part of a run's URL, likewise), tags of 1 to 64 characters.
WANDB_NAME = dict(forbidden="/\\#?%:", max_len=128, hint="W&B's rule")
WANDB = Group(options={"": {"project": Name(**WANDB_NAME), "entity": Name(nullable=True, **WANDB_NAME),
                            "mode": Choice(options=("offline", "online", "disabled")), "job_type": Str(nullable=True),
                            "tags": StrList(max_len=64, hint="W&B's limit"), "name": Str(nullable=True),
                            "notes": Str(nullable=True)}})
DATA = Group(options={"": {"batch_size": Int(1), "eval_batch_size": Int(1), "overfit_batches": Int(0),
                           "block_size": Int(0, nullable=True, hint="null or 0: one window per example")}})
CALLBACKS = Group(options={"": {"early_stopping_patience": Int(1, nullable=True),
                                "ema_decay": Float(gt=0, lt=1, nullable=True)}})
PATHS = Group(options={"": {"data_dir": Str(), "output_dir": Str()}})
PROGRESS = Group(options={"": {"interval": Float(gt=0, default=30.0)}})

FIXED_GROUPS: dict[str, Group] = {"trainer": TRAINER, "logger": LOGGER, "data": DATA, "callbacks": CALLBACKS,
                                  "paths": PATHS, "progress": PROGRESS}
# The groups whose options are registered by their packages (a new option is its module + its yaml).
REGISTRIES = {"corpus": "nplm.data.corpora:CORPORA", "model": "nplm.models:MODELS", "head": "nplm.heads:HEADS",
              "tree": "nplm.trees:TREES", "optimizer": "nplm.optimizers:OPTIMIZERS"}


@functools.cache
def groups() -> dict[str, Group]:
    """Every config group's schema: the registered groups (importing their packages, and so torch) and
    the fixed ones."""
    out = {}
    for name, where in REGISTRIES.items():
        module, attr = where.split(":")
        out[name] = Group.of(getattr(importlib.import_module(module), attr), nullable=name == "tree")
    return {**out, **FIXED_GROUPS}

# The groups, which are top-level keys too (known without importing the registries).
TOP_GROUPS = (*REGISTRIES, *FIXED_GROUPS)
# torch.compile's modes and the backends nplm offers (aot_eager: inductor's graph capture without code generation)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager", "cudagraphs")
# Top-level keys besides the groups.
TOP: dict[str, Rule] = {
    "experiment_name": Str(),
    "seed": SEED,
    "threads": Int(1, nullable=True),
    "resume": Resume(),
    "resume_allow_changes": Bool(default=False),
    "verbose": Bool(default=False),
    "steps_per_execution": Int(1, default=16),
    "compile": Bool(default=False),
    "compile_mode": Choice(options=COMPILE_MODES, nullable=True),
    "compile_backend": Choice(options=COMPILE_BACKENDS, default="inductor"),
    "cuda_graphs": Bool(nullable=True),
    "capture_dry": Bool(default=False),
    "sync_debug": Bool(default=False),
    "tf32": Bool(default=True),
    "malloc_keep_freed": Bool(default=False),
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
    "compile_mode": "torch.compile's mode with compile=true (reduce-overhead: its own CUDA graphs, nplm's capture off)",
    "compile_backend": "torch.compile's backend with compile=true (aot_eager: its graph capture without code generation)",
    "cuda_graphs": "on a CUDA device, replay each training step as a captured CUDA graph (null: yes; false: eager)",
    "capture_dry": "run the captured step (static buffers, one function, replays counted) without CUDA graphs, on any device",
    "sync_debug": "on a CUDA device: any host-device sync inside a training step raises (refused on a CPU run)",
    "tf32": "TF32 matmuls on CUDA (no effect on CPU)",
    "malloc_keep_freed": "Linux: glibc's malloc keeps large freed buffers for the whole process (faster big-vocabulary CPU steps)",
    "stop_at": "Unix time: stop by then (with a checkpoint to resume from), test the best checkpoint",
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
    for key, rule in keys.items():  # a key set where the option's mode does not use it
        if not rule.when or values.get(key, rule.default) == rule.default:
            continue
        for other, allowed in rule.when:
            if values.get(other, keys[other].default) not in allowed:
                chosen = " or ".join(f"{prefix}.{other}={show(a)}" for a in allowed)
                raise _fail(f"{prefix}.{key}", values[key], f"applies only with {chosen} (here {prefix}.{other}="
                            f"{show(values.get(other, keys[other].default))}); set {prefix}.{other}={show(allowed[0])}, "
                            f"or leave {prefix}.{key} out")
    for check in group.checks_of(option):
        problem = check.test(values)
        if problem is not None:
            raise _fail(f"{prefix}.{check.key}", values.get(check.key), f"must be {problem}")


def check_tree(cfg: dict) -> None:
    """Every key of the resolved config `cfg` (a plain dict), group by group, then the top level."""
    for key, value in cfg.items():
        if key not in TOP and key not in TOP_GROUPS:
            raise _fail(key, value, f"unknown key; valid top-level keys: {', '.join(sorted([*TOP, *TOP_GROUPS]))}")
    for key, rule in TOP.items():
        if key in cfg:
            problem = rule(cfg[key])
            if problem is not None:
                raise _fail(key, cfg[key], f"must be {problem}")
    for name, group in groups().items():
        if name in cfg:
            check_group(name, group, cfg[name])
        elif not group.nullable and name not in ("progress",):
            raise UserError(f"{name}: the config has no {name} group; pick one with {name}=<option>")
    wandb = cfg["logger"].get("wandb")
    if wandb is not None:
        check_group("logger.wandb", WANDB, wandb)


def _blocks_need_a_block_model(cfg: dict) -> str | None:
    """`data.block_size` (whole blocks, `nplm.data.blocks`) with a model that predicts one window at a
    time (without `Model.trains_on_blocks`)."""
    block = cfg["data"].get("block_size")
    if not block:
        return None
    from nplm.models import MODELS, model_options

    name, _ = model_options(cfg["model"])
    if MODELS.get(name).trains_on_blocks:
        return None
    able = [option for option, o in MODELS.options().items() if o.target.trains_on_blocks]
    return (f"data.block_size={show(block)}: must be null for model={name}, which predicts one window at a time; "
            f"whole blocks need model={' or model='.join(able)}")


@functools.cache
def yaml_default(group: str, key: str):
    """The value train.yaml gives `group.key`."""
    from omegaconf import OmegaConf

    from nplm.config import CONF_DIR

    return OmegaConf.load(CONF_DIR / "train.yaml")[group][key]


def _stream_models_read_whole_streams(cfg: dict) -> str | None:
    """What a model that carries its state (`Model.carries_state`) cannot do: `nplm.models.stream`."""
    from nplm.models.stream import config_problem

    return config_problem(cfg, yaml_default("data", "eval_batch_size"))


def _head(cfg: dict):
    """The class of the head the config names (its registry is loaded by `groups()`)."""
    from nplm.heads import head_class

    return head_class(cfg["head"]["name"])


def _tie_needs_output_vectors(cfg: dict) -> str | None:
    """model.tie_embeddings=true with a head that has no output vector per word."""
    from nplm.heads import tie_refusal

    if cfg["model"].get("tie_embeddings") is True and not _head(cfg).can_tie:
        return tie_refusal(cfg["head"]["name"])
    return None


def _learned_tree_needs_predicted_representations(cfg: dict) -> str | None:
    """A tree learned from a first model (tree=learned) clusters that model's predicted representations: a
    head that uses the tree has to make them."""
    from nplm.heads import HEADS
    from nplm.trees import DEFAULT_TREE, FROM_FIRST_MODEL, TREES

    tree, head = (cfg.get("tree") or {}).get("name"), _head(cfg)
    if not tree or not TREES.trait(tree, FROM_FIRST_MODEL) or not head.uses_tree(cfg["head"]) \
            or head.has_predicted_representation:
        return None
    can = "|".join(n for n, o in HEADS.options().items() if o.target.has_predicted_representation)
    return (f"tree={tree}: head={cfg['head']['name']} makes no predicted word representations for the tree to "
            f"cluster; use head={can}, or a tree built from the corpus (e.g. tree={DEFAULT_TREE})")


def _sparse_keys(cfg: dict) -> list[str]:
    """The keys set to train with row-sparse gradients."""
    return [f"{group}.{key}" for group, key in (("model", "sparse_embeddings"), ("head", "sparse"))
            if cfg[group].get(key) is True]


def _sparse_rows_need_no_momentum(cfg: dict) -> str | None:
    """Row-sparse gradients (model.sparse_embeddings, head.sparse) are stepped without momentum (`LazySGD`)."""
    momentum, sparse = cfg["optimizer"].get("momentum") or 0, _sparse_keys(cfg)
    if not momentum or not sparse:
        return None
    return (f"optimizer.momentum={show(momentum)}: must be 0 with {sparse[0]}=true (row-sparse updates have no "
            f"momentum); set optimizer.momentum=0 or {sparse[0]}=false")


def _compile_needs_dense_gradients(cfg: dict) -> str | None:
    """torch.compile (inductor) cannot train row-sparse gradients: the step fails at its first batch."""
    sparse = _sparse_keys(cfg)
    if not cfg.get("compile") or not sparse:
        return None
    return (f"compile=true: torch.compile cannot train the row-sparse gradients of {sparse[0]}=true; set "
            f"compile=false or {sparse[0]}=false")


def _compile_options_need_compile(cfg: dict) -> str | None:
    """compile_mode and compile_backend are torch.compile's: without compile=true nothing is compiled."""
    if cfg.get("compile"):
        return None
    for key, default in (("compile_mode", None), ("compile_backend", "inductor")):
        if cfg.get(key, default) != default:
            return f"{key}={show(cfg[key])}: applies only with compile=true; set compile=true, or leave {key} out"
    return None


def _dry_capture_needs_cuda_graphs(cfg: dict) -> str | None:
    """capture_dry runs the captured step, which cuda_graphs=false turns off."""
    if cfg.get("capture_dry") and cfg.get("cuda_graphs") is False:
        return ("capture_dry=true: dry-runs the captured step, which cuda_graphs=false turns off; set "
                "cuda_graphs=true or capture_dry=false")
    return None


def _head_fits_the_features(cfg: dict) -> str | None:
    """The head's options against the model's feature size F (the model built on the meta device: no memory)."""
    import torch

    from nplm.heads import Head
    from nplm.models import build_model

    head = _head(cfg)
    if head.features_problem.__func__ is Head.features_problem.__func__ and not head.tied_values:
        return None  # no rule of its own: no model is built
    with torch.device("meta"):
        model = build_model(cfg["model"], 2, head_can_tie=head.can_tie)
    options = {k: v for k, v in cfg["head"].items() if k != "name"}
    if model.output_embeddings() is None:
        return head.features_problem(options, model.feature_dim)
    keys = groups()["head"].keys_of(cfg["head"]["name"])  # tied: the head's own output vectors' keys are fixed
    for key, allowed in head.tied_values.items():
        if options.get(key, keys[key].default) not in (keys[key].default, *allowed):
            return (f"head.{key}={show(options[key])}: model={cfg['model']['name']} ties the head's output vectors to "
                    f"its input vectors (model.tie_embeddings={show(cfg['model'].get('tie_embeddings'))}), which "
                    f"fixes head.{key}={show(allowed[0])}; set model.tie_embeddings=false, or head.{key}="
                    f"{show(allowed[0])}")
    return None


def _fp16_clipping_needs_an_unfused_optimizer(cfg: dict) -> str | None:
    """fp16 mixed precision scales the loss; a fused optimizer unscales inside its update, after clipping would
    have read the scaled gradients (Lightning refuses it at the first step)."""
    trainer = cfg.get("trainer") or {}
    if str(trainer.get("precision")) not in ("16-mixed", "16") or not trainer.get("gradient_clip_val"):
        return None
    if cfg["optimizer"].get("fused") is False:
        return None
    return (f"trainer.precision={trainer['precision']}: gradient clipping (trainer.gradient_clip_val="
            f"{show(trainer['gradient_clip_val'])}) with a fused optimizer, which unscales fp16 gradients inside its "
            "update; set optimizer.fused=false, or trainer.precision=bf16-mixed")


def _learned_tree_needs_a_validated_first_model(cfg: dict) -> str | None:
    """A tree learned from a first model (tree=learned) reads that model's checkpoint, saved when it validates:
    `trainer.check_val_every_n_epoch` beyond the first phase's epochs would leave none."""
    from nplm.trees import FROM_FIRST_MODEL, TREES

    tree, trainer = cfg.get("tree") or {}, cfg["trainer"]
    if not tree.get("name") or not TREES.trait(tree["name"], FROM_FIRST_MODEL) \
            or not _head(cfg).uses_tree(cfg["head"]):
        return None
    every, epochs = trainer.get("check_val_every_n_epoch") or 1, tree.get("bootstrap_epochs") or trainer["max_epochs"]
    if every <= epochs:
        return None
    return (f"trainer.check_val_every_n_epoch={every}: tree={tree['name']}'s first model trains {epochs} epoch(s) and "
            f"would never validate, leaving no checkpoint to learn the tree from; set trainer.check_val_every_n_epoch="
            f"{epochs} or less, or tree.bootstrap_epochs={every}")


HALF_ADAM_EPS = 1e-4  # the smallest Adam eps measured to train in float16 weights and state (toy, lr 0.01: 1e-7 diverges)


def _half_weights_need_a_larger_adam_eps(cfg: dict) -> str | None:
    """trainer.precision=16-true keeps Adam's state in float16, where the squared gradients of most rows underflow
    to 0: with a small eps, their steps m / (sqrt(v) + eps) are 0/0 or huge, and the first steps give NaN."""
    eps = cfg["optimizer"].get("eps")
    if str(cfg["trainer"].get("precision")) != "16-true" or eps is None or eps >= HALF_ADAM_EPS:
        return None
    return (f"optimizer.eps={show(eps)}: too small for Adam's float16 state with trainer.precision=16-true (squared "
            f"gradients underflow to 0, and the steps to NaN); set optimizer.eps={HALF_ADAM_EPS:g} or more, or "
            "trainer.precision=bf16-true")


def _determinism_needs_no_benchmark(cfg: dict) -> str | None:
    """torch ignores deterministic cuDNN algorithms while cuDNN benchmarks them (Lightning only warns)."""
    trainer = cfg["trainer"]
    if not (trainer.get("deterministic") and trainer.get("benchmark")):
        return None
    return ("trainer.deterministic=true: torch ignores it while trainer.benchmark=true picks cuDNN's fastest "
            "algorithms; set trainer.benchmark=false (or null), or trainer.deterministic=false")


# Rules across config groups, each `test(cfg) -> the one-line message or None`, run after every group passed.
CROSS_GROUP = (_tie_needs_output_vectors, _learned_tree_needs_predicted_representations, _sparse_rows_need_no_momentum,
               _compile_needs_dense_gradients, _head_fits_the_features, _blocks_need_a_block_model,
               _stream_models_read_whole_streams,
               _fp16_clipping_needs_an_unfused_optimizer, _compile_options_need_compile, _dry_capture_needs_cuda_graphs,
               _half_weights_need_a_larger_adam_eps, _learned_tree_needs_a_validated_first_model,
               _determinism_needs_no_benchmark)


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_devices(trainer: dict) -> None:
    """trainer=gpu (or accelerator=cuda/mps) on a machine without one, or more CPU processes than cores:
    refused before anything runs."""
    accelerator = trainer.get("accelerator", "cpu")
    import torch

    if accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available()):
        if str(trainer.get("precision")) in ("16-mixed", "16"):  # (Lightning would train in bf16-mixed instead)
            raise _fail("trainer.precision", trainer["precision"], "a CPU has no float16 mixed precision (Lightning "
                        "would train in bf16-mixed instead); set trainer.precision=bf16-mixed, or 32")
        devices = trainer.get("devices", 1)
        if isinstance(devices, int) and devices > cpu_cores():
            raise _fail("trainer.devices", devices, f"at most {cpu_cores()}, the CPU cores of this machine (one "
                        "process each); lower trainer.devices")
        return
    if accelerator not in ("gpu", "cuda", "mps"):
        return

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


def check_cuda_only(cfg: dict) -> None:
    """sync_debug=true (a CUDA device's syncs) and cuda_graphs=true (a CUDA device's captured step, unless
    capture_dry runs its logic anywhere): refused where the trainer config trains on another device."""
    wanted = [key for key in ("sync_debug", "cuda_graphs") if cfg.get(key) is True
              and not (key == "cuda_graphs" and cfg.get("capture_dry"))]
    if not wanted:
        return
    import torch

    accelerator = cfg["trainer"].get("accelerator", "cpu")
    if accelerator in ("cpu", "mps") or (accelerator == "auto" and not torch.cuda.is_available()):
        where = "finds no CUDA GPU here" if accelerator == "auto" else "trains on no CUDA device"
        what = {"sync_debug": "checks a CUDA device's host-device syncs",
                "cuda_graphs": "captures the training step on a CUDA device"}[wanted[0]]
        fix = "sync_debug=false" if wanted[0] == "sync_debug" else "leave cuda_graphs out"
        raise UserError(f"{wanted[0]}=true: {what}, and trainer.accelerator={accelerator} {where}; set trainer=gpu, "
                        f"or {fix}")


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
    if plain.get("stop_at") is not None and plain["stop_at"] <= time.time():
        raise _fail("stop_at", plain["stop_at"], "that time has passed; give a later Unix time")
    for rule in CROSS_GROUP:
        problem = rule(plain)
        if problem is not None:
            raise UserError(problem)
    check_devices(plain["trainer"])
    check_cuda_only(plain)
    return cfg
