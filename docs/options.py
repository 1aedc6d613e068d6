"""docs/options.md: the keys of every config option, with their defaults, written from the schema, its
registrations and the shipped yaml files.

    python docs/options.py            # rewrite docs/options.md
    python docs/options.py --check    # exit 1 when docs/options.md is not what this writes

Each option's keys are what `nplm-train --help group=option` prints: the rule the schema checks and the
help the option registered (`nplm.config.registry`); the fixed groups' keys (trainer, data, ...) likewise.
A key's default is the value its yaml file gives it: the option's own file (`conf/<group>/<option>.yaml`),
for the fixed groups the file train.yaml picks (`conf/trainer/default.yaml`, `conf/logger/wandb.yaml`,
`conf/paths/default.yaml`) or train.yaml itself (data, callbacks, progress); a trainer key that no file sets
is Lightning's own default, read from `pytorch_lightning.Trainer`'s signature.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from nplm.config import CONF_DIR
from nplm.config.rules import show
from nplm.config.schema import FIXED_GROUPS, WANDB, groups

PAGE = Path(__file__).with_name("options.md")
REGISTERED = ("corpus", "model", "head", "tree", "optimizer")  # the groups whose options register their keys
# The yaml file that gives each fixed group's keys their values (the option train.yaml's defaults list picks;
# data, callbacks and progress are sections of train.yaml itself).
FIXED_FILES = {"trainer": ("trainer/default.yaml", None), "logger": ("logger/wandb.yaml", None),
               "logger.wandb": ("logger/wandb.yaml", "wandb"), "data": ("train.yaml", "data"),
               "callbacks": ("train.yaml", "callbacks"), "paths": ("paths/default.yaml", None),
               "progress": ("train.yaml", "progress")}
HEADER = "| key | default | allowed | what it does |"


def cell(text: str) -> str:
    """`text` inside a Markdown table cell: pipes escaped, and angle brackets, which would read as HTML tags."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def code(value) -> str:
    """A yaml value as a code span, as the user would type it (interpolations unresolved: `${oc.env:...}`)."""
    text = show(value)
    assert "|" not in text and "`" not in text, text  # a code span inside a table cell
    return f"`{text}`"


def yaml_values(path: str, section: str | None = None) -> dict:
    """The keys a shipped yaml file (or one section of it) sets, their values unresolved."""
    values = OmegaConf.to_container(OmegaConf.load(CONF_DIR / path), resolve=False)
    values = values.get(section) or {} if section else values
    return {k: v for k, v in values.items() if k != "defaults"}


def lightning_defaults() -> dict:
    """pytorch_lightning.Trainer's own defaults: what a trainer key no yaml file sets means."""
    from pytorch_lightning import Trainer

    return {name: p.default for name, p in inspect.signature(Trainer.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def default(values: dict, key: str, rule, fallback: dict | None = None) -> str:
    """The default cell of `key`: its yaml value (`???`, Hydra's missing value: a key the user must set); a key
    the yaml leaves out means `fallback`'s value (Lightning's, for the trainer) or else the rule's default."""
    if key in values:
        return "required" if values[key] == "???" else code(values[key])
    if fallback is not None and key in fallback:
        return f"{code(fallback[key])} (Lightning's)"
    return code(rule.default)


def common_default(group: str, key: str) -> str:
    """A key every option of `group` takes: the value most of their yaml files give it, then the exceptions."""
    rule = groups()[group].common[key]
    by_option = {option: default(yaml_values(f"{group}/{option}.yaml"), key, rule) for option in groups()[group].options}
    usual, _ = Counter(by_option.values()).most_common(1)[0]
    others = {}
    for option, value in by_option.items():
        if value != usual:
            others.setdefault(value, []).append(f"{group}={option}")
    return "; ".join([usual, *(f"{value} with {', '.join(options)}" for value, options in others.items())])


def only_with(prefix: str, rule) -> str:
    """Where a key applies only in some modes (`Rule.when`): " (only with group.key=value)"."""
    if not rule.when:
        return ""
    return " (only with " + "; ".join(f"{prefix}.{other}=" + " or ".join(map(str, allowed))
                                      for other, allowed in rule.when) + ")"


def described(group: str, option: str) -> str:
    """The leading comment of the option's yaml file (its first paragraph), as one line."""
    lines = []
    for line in (CONF_DIR / group / f"{option}.yaml").read_text().splitlines():
        if not line.startswith("#") or line.startswith("# @package"):
            if lines or not line.startswith("# @package"):
                break
            continue
        lines.append(line.lstrip("#").strip())
    return cell(" ".join(lines))


def key_table(prefix: str, keys: dict, defaults) -> list[str]:
    """A Markdown table of `keys` ({name: Rule}) as `prefix.name`; `defaults(key, rule)` is a key's default cell."""
    if not keys:
        return ["No keys of its own."]
    lines = [HEADER, "|---|---|---|---|"]
    lines += [f"| `{prefix}.{key}` | {defaults(key, rule)} | {cell(rule.describe())} | "
              f"{cell((rule.doc or '') + only_with(prefix, rule))} |" for key, rule in keys.items()]
    return lines


def fixed_defaults(group: str):
    path, section = FIXED_FILES[group]
    values, fallback = yaml_values(path, section), lightning_defaults() if group == "trainer" else None
    return lambda key, rule: default(values, key, rule, fallback)


def page() -> str:
    lines = ["# The keys of every option", "",
             f"Written by `python docs/{Path(__file__).name}` from the schema (`src/nplm/config/schema.py`), the",
             "options' registrations and their yaml files; `nplm-train --help group=option` prints the same keys and",
             "rules. A key's default is the value its yaml file gives it (`conf/<group>/<option>.yaml`; for `data`,",
             "`callbacks` and `progress`, `conf/train.yaml`); an experiment (`experiment=...`) may set others.",
             "Overview: [configuration.md](configuration.md).", ""]
    schema = groups()
    for group in REGISTERED:
        lines += [f"## {group}", ""]
        if schema[group].common:
            lines += [f"Every `{group}` option takes:", "",
                      *key_table(group, schema[group].common, lambda key, rule, g=group: common_default(g, key)), ""]
        for option, keys in schema[group].options.items():
            values = yaml_values(f"{group}/{option}.yaml")
            lines += [f"### `{group}={option}`", "", described(group, option), "",
                      *key_table(group, keys, lambda key, rule, v=values: default(v, key, rule)), ""]
    for group, fixed in FIXED_GROUPS.items():
        keys = fixed.options[""]
        if group == "logger":
            keys = {k: r for k, r in keys.items() if k != "wandb"}
        lines += [f"## {group}", ""]
        if group == "trainer":
            lines += ["`pytorch_lightning.Trainer`'s arguments of these names; the defaults of `trainer=default`.", ""]
        if group == "logger":
            lines += ["The defaults of `logger=wandb`.", ""]
        lines += [*key_table(group, keys, fixed_defaults(group)), ""]
        if group == "logger":
            lines += ["With `logger=wandb` (W&B's own rules for names and tags):", "",
                      *key_table("logger.wandb", WANDB.options[""], fixed_defaults("logger.wandb")), ""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/options.md differs")
    args = parser.parse_args()
    if args.check:
        sys.exit(0 if PAGE.read_text() == page() else "docs/options.md differs; python docs/options.py")
    PAGE.write_text(page())


if __name__ == "__main__":
    main()
