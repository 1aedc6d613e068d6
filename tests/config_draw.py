"""A seeded generator of valid nplm-train configurations, and a runner that trains each for a batch.

`draw(rng, data)` picks an option of every config group (corpus, model, head, tree, optimizer, logger), then
sets each of the keys that option registered (and the trainer's, data's, callbacks' and the top-level keys)
with some probability to a value its rule accepts: at the rule's bounds, next to them, or typical
(`candidates`). Sizes are capped so that a batch trains in well under a second. `try_config` composes the
real configs with those overrides and runs `train` on a batch of training, validation and test; the outcome is

    trained  - it finished, with finite metrics and a "finished" record;
    refused  - a one-line `UserError` naming `key=value` (`before_data`: whether the corpus had been read);
    diverged - a clean `Diverged` stop (one line naming the key to change);
    failed   - anything else: a traceback, a refusal of many lines or naming no key, a run that trained no step.

The large draw (`make fuzz`): python tests/config_draw.py --count 500 --seed 0
Replay one configuration:        python tests/config_draw.py --replay "model=lbl head=nce ..."
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import re
import shlex
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from nplm.config import rules as R
from nplm.config.schema import COMPILE_BACKENDS, COMPILE_MODES, DATA, CALLBACKS, PROGRESS, TOP, TRAINER, groups

# What every drawn run shares: one epoch of one training, validation and test batch, no tracker.
FIXED = ["trainer.max_epochs=1", "trainer.limit_train_batches=1", "trainer.limit_val_batches=1",
         "trainer.limit_test_batches=1", "logger=none", "threads=1"]
# Corpora that need no download: read from tiny files `Fixtures` writes (toy needs none). Weights: toy most.
CORPORA = {"toy": 12, "text_files": 2, "tiny_shakespeare": 1, "brown": 1, "brown_gpt2": 1, "hf": 1, "ptb": 1,
           "wikitext2": 1, "wikitext103": 1}
# Values of keys whose rule alone would allow sizes too large (or values too slow) for a batch in under a second,
# or whose rule is a string. Keys not listed draw from their rule (`candidates`).
VALUES = {
    "model.context_size": [1, 2, 3, 6], "model.embed_dim": [1, 2, 8, 16], "model.hidden_dim": [0, 1, 8, 16],
    "model.first_hidden_dim": [None, 1, 8], "model.num_layers": [1, 2, 3], "model.window": [1, 2, 3, 6],
    "model.summaries": [0, 1, 2, 3], "model.dropout": [0.0, 0.5, 0.99], "model.num_heads": [1, 2],
    "head.node_dim": [1, 4, 16], "head.node_hidden": [1, 4, 16], "head.chunk_elements": [1, 7, 1048576],
    "head.num_samples": [1, 2, 25, 500], "head.proposal_power": [0.0, 0.75, 1.0, 30.0, 1000.0],
    "head.cutoffs": [None, [1], [2], [1, 2], [5, 20], [40], [60], [1000]], "head.num_classes": [None, 1, 2, 7, 1000],
    "head.div_value": [0.001, 1.0, 4.0, 100.0],
    "tree.num_classes": [2, 3, 1000], "tree.sweeps": [0, 1, 3], "tree.iterations": [1, 2], "tree.runs": [1, 2],
    "tree.bootstrap_epochs": [None, 1], "tree.dim": [1, 4], "tree.contexts": [1, 5, 50],
    "tree.seed": [None, 0, 2**32 - 1], "tree.eps": [0.0, 0.1, 0.499], "tree.bootstrap_checkpoint": [None],
    "optimizer.lr": [1e-6, 1e-3, 0.1, 10.0], "optimizer.weight_decay": [0.0, 1e-4, 10.0],
    "optimizer.lr_decay": [0.0, 1e-8, 1.0, 1000.0], "optimizer.plateau_factor": [1e-6, 0.5, 1.0],
    "optimizer.warmup_steps": [0, 1, 1000], "optimizer.eps": [1e-12, 1e-8, 1.0, 1000.0],
    "optimizer.momentum": [0.0, 0.9, 0.999], "optimizer.betas": [[0.0, 0.0], [0.9, 0.999], [0.999999, 0.999999]],
    "corpus.min_count": [1, 2, 3, 1000], "corpus.max_vocab": [None, 2, 3, 10, 1000],
    "corpus.unk": [None, "<unk>", "UNK"], "corpus.vocab_size": [256, 300],
    "corpus.train_size": [0, 1, 50, 0.5, 0.8, 0.8, 0.9, 1.0, 10**6], "corpus.valid_size": [None, 0, 1, 0.1, 0.1, 1.0],
    "corpus.test_size": [None, 0, 0, 1, 0.1, 0.1, 1.0], "corpus.encoding": ["utf-8", "latin-1", "utf-16"],
    "trainer.max_epochs": [1], "trainer.min_epochs": [None, 0, 1, 2], "trainer.max_steps": [-1, 1, 2],
    "trainer.accelerator": ["cpu", "auto"], "trainer.devices": [1, "auto", [0]],
    "trainer.num_nodes": [1], "trainer.strategy": ["auto"],
    "trainer.gradient_clip_val": [None, 1e-12, 0.5, 1.0, 1e6], "trainer.log_every_n_steps": [1, 50],
    "trainer.val_check_interval": [1.0, 0.5, 1e-6, 1, 3], "trainer.num_sanity_val_steps": [-1, 0, 1, 2],
    "trainer.limit_train_batches": [1, 1, 2, 0.01, 1.0], "trainer.limit_val_batches": [1, 1, 0.5, 1.0, None],
    "trainer.limit_test_batches": [1, 1, 0.5, None], "trainer.max_time": [None, "00:00:00:01", "00:01:00:00"],
    "trainer.check_val_every_n_epoch": [1, 2], "trainer.accumulate_grad_batches": [1, 2, 3],
    "data.batch_size": [1, 2, 16, 64], "data.eval_batch_size": [1, 3, 64, 1024], "data.overfit_batches": [0, 1, 2],
    "data.block_size": [None, 0, 1, 4], "callbacks.early_stopping_patience": [None, 1, 3],
    "callbacks.ema_decay": [None, 1e-6, 0.5, 0.999999], "progress.interval": [1e-3, 30.0],
    "seed": [0, 1234, 2**32 - 1], "threads": [1, 1, 1, None], "resume": [None, False, True],
    "steps_per_execution": [1, 2, 16, 1000], "experiment_name": ["default", "drawn"],
    "stop_at": [None, 4102444800.0], "compile_backend": ["eager", "aot_eager"],
}
# Values that the schema or a later check refuses alone, or that are valid only with other keys: drawn rarely.
RARE = {"trainer.accelerator": ["gpu", "mps"], "trainer.devices": [3], "trainer.num_nodes": [2],
        "trainer.strategy": ["nosuch"], "stop_at": [1.0], "corpus.vocab_size": [2, 3, 20, 255],
        "data.block_size": [4], "trainer.precision": ["16-mixed"]}
P_RARE = 0.05  # the chance that a key with rare values takes one
VALID_SHARE = 0.85  # the share of draws redrawn (a few times) until the schema accepts them
# Keys drawn every time (sizes: their defaults, e.g. the modern NPLM's 512-wide blocks, are slow for a batch).
ALWAYS = {"model.context_size", "model.embed_dim", "model.hidden_dim", "model.window", "model.num_layers",
          "model.num_heads", "model.first_hidden_dim", "head.num_samples", "head.node_dim", "head.node_hidden",
          "tree.num_classes", "tree.iterations", "tree.dim", "tree.contexts", "tree.bootstrap_epochs", "corpus.train_size",
          "corpus.valid_size", "corpus.test_size"}
# Keys left at their yaml value: where the runner puts files and data, and the fixed batch limits above.
SKIP = {"paths.data_dir", "paths.output_dir", "trainer.max_epochs", "logger.csv", "logger.wandb", "tree.path",
        "corpus.nltk_data", "corpus.download", "corpus.url", "corpus.sha256", "corpus.path", "corpus.dataset",
        "corpus.config", "corpus.train_split", "corpus.valid_split", "corpus.test_split", "corpus.text_column",
        "corpus.train", "corpus.valid", "corpus.test", "tree.nltk_data", "tree.download", "compile", "compile_mode",
        "compile_backend", "threads", "corpus.tokenizer", "corpus.vocab_size"}
P_KEY = 0.2  # the chance that a key (not in ALWAYS) is set


def candidates(rule: R.Rule) -> list:
    """Values `rule` accepts, at and next to its bounds and typical ones; [] where none can be made up (strings)."""
    out: list = [None] if rule.nullable else []
    if isinstance(rule, R.Bool):
        return out + [False, True]
    if isinstance(rule, R.Choice):
        return out + list(rule.options)
    if isinstance(rule, R.Int):
        lo = rule.lo if rule.lo is not None else 0
        hi = rule.hi if rule.hi is not None else lo + 4
        return out + sorted({lo, min(lo + 1, hi), hi})
    if isinstance(rule, R.Float):
        low = rule.ge if rule.ge is not None else (rule.gt + 1e-6 if rule.gt is not None else -1.0)
        high = rule.le if rule.le is not None else (rule.lt - 1e-6 if rule.lt is not None else max(low, 0) + 10.0)
        return out + sorted({low, (low + high) / 2, high})
    if isinstance(rule, R.AnyOf):
        return out + [v for r in rule.rules for v in candidates(r) if v is not None]
    if isinstance(rule, R.Size):
        return out + [0, 1, 0.5, 1.0]
    if isinstance(rule, R.MaxTime):
        return out + ["00:00:01:00"]
    return []


@dataclass
class Fixtures:
    """Tiny corpora on disk for the corpora that read files, and a tree.json for tree=file."""

    root: Path
    overrides: dict = field(default_factory=dict)  # corpus name -> the overrides that point it at its files

    @classmethod
    def make(cls, root: Path) -> "Fixtures":
        from nplm.data.corpora.toy import TOY_SENTENCES

        root.mkdir(parents=True, exist_ok=True)
        text = "\n".join(TOY_SENTENCES) + "\n"
        for split in ("train", "valid", "test"):
            (root / f"{split}.txt").write_text(text)
        words = root / "words"  # the published corpora's file names, unverified
        words.mkdir(exist_ok=True)
        for split in ("train", "valid", "test"):
            (words / f"ptb.{split}.txt").write_text(text)
            (words / f"wiki.{split}.tokens").write_text(text)
        published = [f"corpus.path={words}", "corpus.verify=false", "corpus.download=false"]
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from conftest import make_fake_brown

        nltk = make_fake_brown(root / "brown") if not (root / "brown").exists() else root / "brown" / "nltk_data"
        brown = [f"corpus.nltk_data={nltk}", "corpus.download=false"]
        out = {"toy": [], "text_files": [f"corpus.{s}={root / s}.txt" for s in ("train", "valid", "test")],
               "tiny_shakespeare": [f"corpus.path={root / 'train.txt'}", "corpus.sha256=null", "corpus.download=false"],
               "brown": brown, "brown_gpt2": brown, "ptb": published, "wikitext2": published, "wikitext103": published}
        try:
            import datasets

            datasets.disable_progress_bars()
            rows = {"text": TOY_SENTENCES}
            datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s in ("train", "validation", "test")}
                                 ).save_to_disk(str(root / "hf"))
            out["hf"] = [f"corpus.dataset={root / 'hf'}"]
        except ImportError:  # the optional extra is not installed: corpus=hf is not drawn
            pass
        return cls(root, out)

    def tree_file(self) -> Path:
        """A tree.json over toy's default vocabulary (made by a run of its own, once)."""
        path = self.root / "tree.json"
        if not path.exists():
            from conftest import compose_cfg
            from nplm.training.train import train

            train(compose_cfg(self.root / "tree_run", *FIXED, "corpus=toy", "head=hierarchical", "tree=balanced"))
            (self.root / "tree_run" / "run" / "tree.json").rename(path)
        return path


def _value(v) -> str:
    """A value as a Hydra override writes it."""
    if isinstance(v, str) and re.search(r"[:<>\s,\[\]=]", v):
        return json.dumps(v)
    return R.show(v)


def draw(rng: random.Random, fixtures: Fixtures) -> list[str]:
    """One configuration's overrides (`FIXED` aside), every group's option and keys drawn from `rng`."""
    from nplm.heads import head_class

    registered = groups()
    out: list[str] = []

    def pick(key: str, rule: R.Rule) -> None:
        if key in SKIP or not (key in ALWAYS or rng.random() < P_KEY):
            return
        values = VALUES.get(key) or candidates(rule)
        if key in RARE and rng.random() < P_RARE:
            values = RARE[key]
        elif key in RARE:
            values = [v for v in values if v not in RARE[key]]
        if values:
            out.append(f"++{key}={_value(rng.choice(values))}")

    def group(name: str, option: str) -> None:
        for key, rule in registered[name].keys_of(option).items():
            if key != "name":
                pick(f"{name}.{key}", rule)

    corpora = {c: w for c, w in CORPORA.items() if c in fixtures.overrides}
    corpus = rng.choices(list(corpora), weights=list(corpora.values()))[0]
    out += [f"corpus={corpus}", *fixtures.overrides[corpus]]
    if rng.random() < 0.1:  # a learned subword vocabulary, of a size it accepts
        tokenizer = rng.choice(['bpe', 'wordpiece', 'unigram'])
        sizes = [256, 300] if tokenizer == "bpe" else [20, 60, 300]
        out += [f"++corpus.tokenizer={tokenizer}", f"++corpus.vocab_size={rng.choice(sizes)}"]
    elif rng.random() < P_RARE:
        out.append(f"++corpus.vocab_size={rng.choice(RARE['corpus.vocab_size'])}")
    group("corpus", corpus)
    for name in ("model", "head", "optimizer"):
        option = rng.choice(list(registered[name].options))
        out.append(f"{name}={option}")
        group(name, option)
    head = next(o.split("=")[1] for o in out if o.startswith("head="))
    if rng.random() < (0.9 if head_class(head).uses_tree({"classes": "tree"}) else 0.15):  # mostly the heads with one
        tree = rng.choice(list(registered["tree"].options))
        out.append(f"tree={tree}")
        if tree == "file":
            out.append(f"tree.path={fixtures.tree_file() if rng.random() < 0.8 else fixtures.root / 'nosuch.json'}")
        group("tree", tree)
    for name, schema in (("trainer", TRAINER), ("data", DATA), ("callbacks", CALLBACKS), ("progress", PROGRESS)):
        for key, rule in schema.keys_of("").items():
            pick(f"{name}.{key}", rule)
    if rng.random() < 0.1:
        out.append(f"logger={rng.choice(['csv', 'wandb'])}")
        if out[-1] == "logger=wandb":
            out.append(f"logger.wandb.mode={rng.choice(['disabled', 'disabled', 'offline'])}")
    for key, rule in TOP.items():
        pick(key, rule)
    if rng.random() < 0.05:  # torch.compile: slow (seconds), so rare; never inductor (a C++ build per run)
        out += ["compile=true", f"compile_backend={rng.choice(VALUES['compile_backend'])}"]
        if rng.random() < 0.3:
            out.append(f"compile_mode={rng.choice(COMPILE_MODES)}")
    elif rng.random() < 0.02:  # compile's options without compile=true
        out.append(rng.choice([f"compile_mode={rng.choice(COMPILE_MODES)}", f"compile_backend={COMPILE_BACKENDS[1]}"]))
    return out


# A refusal names what to change: `key=value` (e.g. "model.context_size=0: must be ...").
NAMES_A_KEY = re.compile(r"(?<![\w.+])\+*([a-z_][\w.]*)=\S")


@dataclass
class Outcome:
    overrides: list[str]
    kind: str  # trained | refused | diverged | failed
    message: str = ""
    key: str = ""  # the key a refusal names
    before_data: bool = True  # refused before the corpus was read
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def replay(self) -> str:
        return "nplm-train " + " ".join(shlex.quote(o) for o in [*FIXED, *self.overrides])


def _problem_with_run(metrics: dict, folder: Path) -> str | None:
    """What is wrong with a run that `train` returned from: its record and metrics."""
    record = json.loads((folder / "run" / "metrics.json").read_text())
    if record.get("status") != "finished":
        return f"train returned but the run's record says status={record.get('status')}"
    if not any(row.get("step", 0) > 0 for row in record.get("history") or []):
        return "the run is finished but trained no step (its history has no step > 0)"
    # (but a sampled training figure of +inf: exp of a sampled loss past 709 nats a token, beyond float64, which
    # the record writes as null; it is no perplexity of the model, and the run trained)
    bad = {k: v for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)
           and not (k == "train/ppl_sampled" and v == math.inf)}
    if bad:
        return f"non-finite metrics of a finished run: {bad}"
    return None


def try_config(overrides: list[str], folder: Path) -> Outcome:
    """Compose `FIXED` + `overrides` in `folder` and train; the outcome (see the module's docstring)."""
    from conftest import compose_cfg
    from nplm.data.datamodule import LMDataModule
    from nplm.errors import UserError
    from nplm.training.module import Diverged
    from nplm.training.train import train

    read = {"data": False}
    setup = LMDataModule.setup

    def watched(self, *args, **kwargs):
        read["data"] = True
        return setup(self, *args, **kwargs)

    start = time.perf_counter()
    outcome = Outcome(overrides, "failed")
    LMDataModule.setup = watched
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg = compose_cfg(folder, *FIXED, *overrides)
            metrics = train(cfg)
        problem = _problem_with_run(metrics, folder)
        outcome.kind, outcome.message = ("failed", problem) if problem else ("trained", "")
        outcome.warnings = sorted({str(w.message).splitlines()[0][:160] for w in caught})
    except UserError as err:
        message = str(err)
        named = NAMES_A_KEY.search(message)
        outcome.key = named.group(1) if named else ""
        outcome.before_data = not read["data"]
        if "\n" in message or not named:
            outcome.message = f"a refusal must be one line naming key=value: {message!r}"
        else:
            outcome.kind, outcome.message = ("diverged" if isinstance(err, Diverged) else "refused"), message
    except Exception:  # a traceback: a bug (Hydra's own errors included: the generator wrote a bad override)
        outcome.message = traceback.format_exc(limit=-8)
    finally:
        LMDataModule.setup = setup
    outcome.seconds = time.perf_counter() - start
    return outcome


def accepted(overrides: list[str], folder: Path) -> bool:
    """Whether the schema and the trainer's check accept the configuration (nothing is read or written)."""
    from conftest import compose_cfg
    from nplm.config.schema import validate
    from nplm.errors import UserError
    from nplm.training.trainer import check_trainer
    from nplm.training.tree_phase import container

    try:
        check_trainer(container(validate(compose_cfg(folder, *FIXED, *overrides)).trainer))
    except UserError:
        return False
    return True


def draw_nth(seed: int, index: int, fixtures: Fixtures, tries: int = 4) -> list[str]:
    """Configuration `index` of the draw `seed` (it depends only on both: replayable alone). A share
    `VALID_SHARE` of them is redrawn up to `tries` times until the schema accepts it, so that most train; the
    rest are taken as drawn (their cross-key mistakes are the schema's to refuse)."""
    rng = random.Random(f"{seed}/{index}")
    valid = rng.random() < VALID_SHARE
    for _ in range(tries):
        overrides = draw(rng, fixtures)
        if not valid or accepted(overrides, fixtures.root / "check"):
            break
    return overrides


def summary(outcomes: list[Outcome]) -> str:
    """The counts, the refusals by key, the warnings seen, and every failure with its replay command."""
    kinds = collections.Counter(o.kind for o in outcomes)
    lines = [f"tried {len(outcomes)} configurations: {kinds['trained']} trained, {kinds['refused']} refused, "
             f"{kinds['diverged']} diverged, {kinds['failed']} failed "
             f"({sum(o.seconds for o in outcomes):.0f} s)"]
    for kind in ("refused", "diverged"):
        keys = collections.Counter((o.key, o.before_data) for o in outcomes if o.kind == kind)
        if keys:
            lines.append(f"{kind} by key: " + ", ".join(
                f"{key}{'' if before else ' (after reading the data)'} x{n}" for (key, before), n in keys.most_common()))
    for name in ("corpus", "model", "head", "tree", "optimizer", "logger"):  # options drawn: trained / tried
        tried = collections.Counter(o.split("=", 1)[1] for c in outcomes for o in c.overrides if o.startswith(f"{name}="))
        trained = collections.Counter(o.split("=", 1)[1] for c in outcomes if c.kind == "trained"
                                      for o in c.overrides if o.startswith(f"{name}="))
        lines.append(f"{name}: " + ", ".join(f"{k} {trained[k]}/{n}" for k, n in sorted(tried.items())))
    values = {o.lstrip("+") for c in outcomes for o in c.overrides}
    lines.append(f"{len({v.split('=')[0] for v in values})} keys set, {len(values)} distinct key=value overrides")
    seen = collections.Counter(w for o in outcomes for w in o.warnings)
    lines += [f"warning x{n}: {w}" for w, n in seen.most_common()]
    for o in outcomes:
        if o.kind == "failed":
            lines += ["", "FAILED: " + o.replay(), o.message.rstrip()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train drawn nplm-train configurations for a batch each.")
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", help="one configuration's overrides (as printed after FAILED:)")
    parser.add_argument("--verbose", action="store_true", help="a line per configuration")
    args = parser.parse_args(argv)
    import logging

    import torch

    torch.set_num_threads(1)
    logging.disable(logging.WARNING)  # the runs' own log lines; the outcome says what matters
    with tempfile.TemporaryDirectory() as tmp:
        fixtures = Fixtures.make(Path(tmp) / "fixtures")
        replay = [o for o in shlex.split(args.replay or "") if o not in FIXED and o != "nplm-train"]
        outcomes = []
        for i in range(1 if args.replay else args.count):
            overrides = replay or draw_nth(args.seed, i, fixtures)
            outcomes.append(try_config(overrides, Path(tmp) / f"c{i}"))
            o = outcomes[-1]
            if args.verbose or o.kind == "failed":
                print(f"[{i}] {o.kind} {o.seconds:.1f}s {' '.join(overrides)}"
                      + (f"\n    {o.message.splitlines()[-1] if o.message else ''}" if o.kind != "trained" else ""),
                      flush=True)
        print(summary(outcomes), flush=True)
    return 1 if any(o.kind == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
