"""docs/options.md: the keys of every config option, written from the schema and its registrations.

    python docs/options.py            # rewrite docs/options.md
    python docs/options.py --check    # exit 1 when docs/options.md is not what this writes

Each option's keys are what `nplm-train --help group=option` prints: the rule the schema checks and the
help the option registered (`nplm.config.registry`); the fixed groups' keys (trainer, data, ...) likewise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nplm.config import CONF_DIR
from nplm.config.schema import FIXED_GROUPS, WANDB, groups

PAGE = Path(__file__).with_name("options.md")
REGISTERED = ("corpus", "model", "head", "tree", "optimizer")  # the groups whose options register their keys


def cell(text: str) -> str:
    """`text` inside a Markdown table cell: pipes escaped, and angle brackets, which would read as HTML tags."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


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


def key_table(prefix: str, keys: dict) -> list[str]:
    """A Markdown table of `keys` ({name: Rule}) as `prefix.name`."""
    if not keys:
        return ["No keys of its own."]
    lines = ["| key | allowed | what it does |", "|---|---|---|"]
    lines += [f"| `{prefix}.{key}` | {cell(rule.describe())} | {cell((rule.doc or '') + only_with(prefix, rule))} |"
              for key, rule in keys.items()]
    return lines


def page() -> str:
    lines = ["# The keys of every option", "",
             f"Written by `python docs/{Path(__file__).name}` from the schema (`src/nplm/config/schema.py`) and the",
             "options' registrations; `nplm-train --help group=option` prints the same. Overview: "
             "[configuration.md](configuration.md).", ""]
    schema = groups()
    for group in REGISTERED:
        lines += [f"## {group}", ""]
        if schema[group].common:
            lines += [f"Every `{group}` option takes:", "", *key_table(group, schema[group].common), ""]
        for option, keys in schema[group].options.items():
            lines += [f"### `{group}={option}`", "", described(group, option), "", *key_table(group, keys), ""]
    for group, fixed in FIXED_GROUPS.items():
        keys = fixed.options[""]
        if group == "logger":
            keys = {k: r for k, r in keys.items() if k != "wandb"}
        lines += [f"## {group}", ""]
        if group == "trainer":
            lines += ["`pytorch_lightning.Trainer`'s arguments of these names.", ""]
        lines += [*key_table(group, keys), ""]
        if group == "logger":
            lines += ["With `logger=wandb` (W&B's own rules for names and tags):", "",
                      *key_table("logger.wandb", WANDB.options[""]), ""]
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
