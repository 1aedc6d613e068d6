"""README.md stays true where code can tell: its table of top-level keys lists every key the schema knows."""

from __future__ import annotations

import re
from pathlib import Path

from nplm.config.schema import FIXED_GROUPS, TOP

README = Path(__file__).resolve().parents[1] / "README.md"
LISTED_GROUPS = ("data", "callbacks", "progress")  # the fixed groups whose keys the table lists one by one


def test_the_top_level_key_table_lists_every_key():
    text = README.read_text()
    table = text[text.index("| key | default | what it does |"):]
    table = table[:table.index("\n\n")]
    listed = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", table, re.M))
    known = set(TOP) | {f"{g}.{k}" for g in LISTED_GROUPS for k in FIXED_GROUPS[g].options[""]}
    assert listed == known, (f"missing from README: {sorted(known - listed)}; "
                             f"not keys: {sorted(listed - known)}")
