"""One registry per config group (model, head, tree, corpus, optimizer), keyed by the option's name.

An option registers itself where it is defined, with the keys its yaml file may set:

    from nplm.heads import register_head

    @register_head("hierarchical", keys={"node_dim": Int(1, doc="width of a node's hidden layer")})
    class HierarchicalHead(Head): ...

`keys` is a dict of rules (`nplm.config.rules`) or a dataclass whose fields carry them (`option`
below: the model's hyperparameters). The schema (`nplm.config.schema`) reads every option's keys,
types and help from here, so a new option is its module, its yaml and its test. A registry imports
every module of its package the first time it is asked (fairseq's registries do the same), so a new
file in `heads/` is found without being listed anywhere.

Cheap to import: no torch.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from nplm.config.rules import Check, Rule
from nplm.errors import UserError


def option(default: Any, rule: Rule, doc: str = "", when: dict[str, tuple] | None = None) -> Any:
    """A dataclass field that is also a config key: `context_size: int = option(4, Int(1), "n-1")`. `when`: the
    values of other keys of the option under which the key matters (`{"first_layer": ("nplm",)}`); a value other
    than `default` under any other is refused, naming the key that decides."""
    rule = dataclasses.replace(rule, doc=doc or rule.doc, default=default, when=tuple((when or {}).items()))
    return field(default=default, metadata={"rule": rule})


def setting_of(cls: type) -> Callable[[dict, str], Any]:
    """`get(values, key)`: a config group's value of `key`, or where `values` lacks it the default of the
    dataclass `cls`'s field (for the checks across a model's keys)."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return lambda values, key: values.get(key, defaults[key])


def dataclass_keys(cls: type) -> dict[str, Rule]:
    """The rules of a dataclass's `option` fields, by field name."""
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls) if "rule" in f.metadata}


@dataclass(frozen=True)
class Option:
    """One registered option of a group: the object it names (a class or a function), its keys
    (besides `name` and the group's common keys), rules across its keys, its help line, and what else the
    code asks of it by name (`traits`: e.g. a tree's `cached`), so that no code outside the option's
    module names it."""

    name: str
    target: Any
    keys: dict[str, Rule]
    checks: tuple[Check, ...] = ()
    doc: str = ""
    traits: dict[str, Any] = field(default_factory=dict)


@dataclass
class Registry:
    """The options of config group `group`, defined in the modules of package `package`.

    `common`: keys every option of the group has (the corpus's vocabulary settings, the optimizer's
    schedule); `checks`: rules across keys that hold for every option."""

    group: str
    package: str
    common: dict[str, Rule] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    _options: dict[str, Option] = field(default_factory=dict)
    _loaded: bool = False

    def register(self, name: str, keys: dict[str, Rule] | type | None = None, checks: tuple[Check, ...] = (),
                 doc: str = "", **traits: Any) -> Callable[[Any], Any]:
        """Decorator: register the class or function it decorates as option `name`; `traits`: what the code
        asks of the option (`Registry.trait`)."""

        def add(target: Any) -> Any:
            if name in self._options and self._options[name].target is not target:
                raise ValueError(f"{self.group}={name} is registered twice: {self._options[name].target} and {target}")
            rules = dataclass_keys(keys) if isinstance(keys, type) else dict(keys or {})
            text = doc or (target.__doc__ or "").strip().split("\n")[0]
            self._options[name] = Option(name, target, rules, tuple(checks), text, dict(traits))
            if isinstance(target, type):
                target.option_name = name  # what the class is called in the config (its error messages)
            return target

        return add

    def load(self) -> "Registry":
        """Import every module of the package (each registers its options); once."""
        if not self._loaded:
            self._loaded = True  # first: a module that asks the registry while being imported finds it loading
            try:
                package = importlib.import_module(self.package)
                for module in pkgutil.iter_modules(package.__path__):
                    importlib.import_module(f"{self.package}.{module.name}")
            except BaseException:
                self._loaded = False  # the import's own error, not "no such option", now and next time
                raise
        return self

    def options(self) -> dict[str, Option]:
        return dict(sorted(self.load()._options.items()))

    def names(self) -> list[str]:
        return list(self.options())

    def __getitem__(self, name: str) -> Option:
        options = self.options()
        if name not in options:
            raise UserError(f"{self.group}={name}: no such option; valid: {', '.join(options)}")
        return options[name]

    def trait(self, name: str, trait: str) -> Any:
        """What option `name` registered as `trait` (None where it registered none)."""
        return self[name].traits.get(trait)

    def get(self, name: str) -> Any:
        """The class or function registered as `name`."""
        return self[name].target
