"""What one config value may be: a type and a range, with the words a user sees when it is wrong.

Each rule is a small callable object: `rule(value)` returns None when the value is allowed, else
the text after "must be", e.g. `Int(1)` -> "an integer >= 1". `describe()` gives the same text for
the help page. No torch, no Hydra: importing this is cheap.
"""

from __future__ import annotations

import codecs
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable


def show(value: Any) -> str:
    """A value as the user would type it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    return str(value)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Base: `nullable` lets the value be null; `default` is what a missing key means."""

    nullable: bool = False
    default: Any = None
    required: bool = False  # the key must be given (no usable default)
    hint: str = ""  # added to the description, e.g. "-1, endless training, is refused"
    doc: str = ""  # what the key does, for the help page (`nplm-train --help GROUP=OPTION`)
    # ((other key, its values), ...): the key matters only where each other key of its group has one of those
    # values; another value than `default` elsewhere is refused (`nplm.config.schema.check_group`)
    when: tuple = ()

    def __call__(self, value) -> str | None:
        if value is None:
            return None if self.nullable else self.describe()
        return None if self.ok(value) else self.describe()

    def ok(self, value) -> bool:
        raise NotImplementedError

    def text(self) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        words = self.text() + (" or null" if self.nullable else "")
        return f"{words} ({self.hint})" if self.hint else words


@dataclass(frozen=True)
class Int(Rule):
    lo: int | None = None
    hi: int | None = None

    def ok(self, v) -> bool:
        return _is_int(v) and (self.lo is None or v >= self.lo) and (self.hi is None or v <= self.hi)

    def text(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an integer from {self.lo} to {self.hi}"
        if self.lo is not None:
            return f"an integer >= {self.lo}"
        return "an integer"


@dataclass(frozen=True)
class Float(Rule):
    """A finite number (an integer is accepted) in the range given by the bounds."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def ok(self, v) -> bool:
        return (_is_number(v) and (self.gt is None or v > self.gt) and (self.ge is None or v >= self.ge)
                and (self.lt is None or v < self.lt) and (self.le is None or v <= self.le))

    def text(self) -> str:
        low = f"({self.gt:g}" if self.gt is not None else f"[{self.ge:g}" if self.ge is not None else None
        high = f"{self.lt:g})" if self.lt is not None else f"{self.le:g}]" if self.le is not None else None
        if low and high:
            return f"a number in {low}, {high}"
        if low:
            return f"a finite number {'>' if self.gt is not None else '>='} {low[1:]}"
        if high:
            return f"a finite number {'<' if self.lt is not None else '<='} {high[:-1]}"
        return "a finite number"


@dataclass(frozen=True)
class Bool(Rule):
    def ok(self, v) -> bool:
        return isinstance(v, bool)

    def text(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Str(Rule):
    """A non-empty string."""

    def ok(self, v) -> bool:
        return isinstance(v, str) and v != ""

    def text(self) -> str:
        return "a non-empty string"


@dataclass(frozen=True)
class SearchDir(Rule):
    """A folder to search, which must exist (one that does not would be passed over for another in silence), or
    "" (an empty environment variable such as NLTK_DATA=) for none."""

    def ok(self, v) -> bool:
        from pathlib import Path

        return isinstance(v, str) and (v == "" or Path(v).expanduser().is_dir())

    def text(self) -> str:
        return "an existing folder (empty: none)"


@dataclass(frozen=True)
class FilePath(Str):
    def text(self) -> str:
        return "the path of a file"


@dataclass(frozen=True)
class ExistingFile(FilePath):
    """A file that must exist when the config is checked (relative to the working folder): a missing one is
    refused before any data is read, naming where it was looked for."""

    def __call__(self, value) -> str | None:
        from pathlib import Path

        problem = super().__call__(value)
        if problem is None and value is not None and not Path(value).expanduser().is_file():
            return f"an existing file: none at {Path(value).expanduser().resolve()}"
        return problem


@dataclass(frozen=True)
class Choice(Rule):
    options: tuple = ()

    def ok(self, v) -> bool:
        return any(v == o and type(v) is type(o) for o in self.options)

    def text(self) -> str:
        return "one of: " + ", ".join(dict.fromkeys(show(o) for o in self.options))  # 32 and "32" read alike


@dataclass(frozen=True)
class Encoding(Rule):
    """A text encoding Python knows (utf-8, latin-1, cp1252, ...)."""

    def ok(self, v) -> bool:
        try:
            return isinstance(v, str) and codecs.lookup(v) is not None
        except LookupError:
            return False

    def text(self) -> str:
        return "a text encoding Python knows, e.g. utf-8 or latin-1"


@dataclass(frozen=True)
class Size(Rule):
    """A split size: a token count or a fraction of the corpus."""

    def ok(self, v) -> bool:
        return (_is_int(v) and v >= 0) or (isinstance(v, float) and 0.0 <= v <= 1.0)

    def text(self) -> str:
        return "a token count >= 0 or a fraction in [0, 1]"


@dataclass(frozen=True)
class IntList(Rule):
    """A non-empty list of strictly increasing integers >= `lo`."""

    lo: int = 1

    def ok(self, v) -> bool:
        return (isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_int(x) and x >= self.lo for x in v)
                and all(a < b for a, b in zip(v, v[1:])))

    def text(self) -> str:
        return f"a non-empty list of increasing integers >= {self.lo}, e.g. [2000,10000]"


@dataclass(frozen=True)
class Name(Str):
    """A non-empty string of at most `max_len` characters with none of the characters `forbidden`
    (a tracker's project or entity name, which becomes part of a URL)."""

    forbidden: str = ""
    max_len: int | None = None

    def ok(self, v) -> bool:
        return (super().ok(v) and not any(c in v for c in self.forbidden)
                and (self.max_len is None or len(v) <= self.max_len))

    def text(self) -> str:
        most = f" of at most {self.max_len} characters" if self.max_len else ""
        return f"a non-empty name{most}" + (f" without any of: {' '.join(self.forbidden)}" if self.forbidden else "")


@dataclass(frozen=True)
class StrList(Rule):
    """A list of strings; with `max_len`, each of 1 to `max_len` characters."""

    max_len: int | None = None

    def ok(self, v) -> bool:
        return isinstance(v, (list, tuple)) and all(
            isinstance(x, str) and (self.max_len is None or 1 <= len(x) <= self.max_len) for x in v)

    def text(self) -> str:
        each = f" of 1 to {self.max_len} characters each" if self.max_len else ""
        return f"a list of strings{each}, e.g. [a,b]"


@dataclass(frozen=True)
class Betas(Rule):
    def ok(self, v) -> bool:
        return isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_number(x) and 0 <= x < 1 for x in v)

    def text(self) -> str:
        return "two numbers in [0, 1), e.g. [0.9,0.999]"


@dataclass(frozen=True)
class MaxTime(Rule):
    """Lightning's `max_time` as text: days:hours:minutes:seconds."""

    def ok(self, v) -> bool:
        parts = re.fullmatch(r"(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})", v) if isinstance(v, str) else None
        return parts is not None and any(int(p) for p in parts.groups())  # 00:00:00:00 would train no step

    def text(self) -> str:
        return 'a duration "DD:HH:MM:SS" longer than 0, e.g. "00:12:00:00"'


@dataclass(frozen=True)
class Section(Rule):
    """A nested group of settings, checked by its own schema."""

    def ok(self, v) -> bool:
        return isinstance(v, dict)

    def text(self) -> str:
        return "a group of settings"


@dataclass(frozen=True)
class Resume(Rule):
    """`resume`: true (the latest unfinished run with these overrides), false/null, or a path."""

    def __call__(self, value) -> str | None:
        return None if value is None or self.ok(value) else self.describe()

    def ok(self, v) -> bool:
        return isinstance(v, bool) or (isinstance(v, str) and v != "")

    def text(self) -> str:
        return "true, false, null, or a <run> folder or .ckpt path"


@dataclass(frozen=True)
class AnyOf(Rule):
    """The value passes one of `rules`; `words` says what that means."""

    rules: tuple = ()
    words: str = ""

    def ok(self, v) -> bool:
        return any(r.ok(v) for r in self.rules)

    def text(self) -> str:
        return self.words


@dataclass(frozen=True)
class Check:
    """A rule that spans several keys of one group: `test(group) -> message or None`, reported
    against `key` (e.g. model.hidden_dim=0 with model.direct=false)."""

    key: str
    test: Callable[[dict], str | None] = field(compare=False)
