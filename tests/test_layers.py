"""The package's house rules, read from its source: rooms by role, imports one way, no import cycle,
no concrete model named outside `models/`, no concrete head named outside `heads/`."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "nplm"

# Lowest first: a module may import from its own layer and the layers below, never from above.
LAYERS = [
    ["nplm", "nplm.errors", "nplm.files", "nplm.config", "nplm.config.rules", "nplm.config.registry"],  # what every layer uses
    ["nplm.fast"],  # optional speed paths over torch
    ["nplm.data"],
    ["nplm.trees"],
    ["nplm.ngram", "nplm.models", "nplm.heads", "nplm.optimizers"],  # the config groups' options
    ["nplm.config.schema"],  # built from the registries of the layer below
    ["nplm.tracking"],
    ["nplm.training"],
    ["nplm.inference"],
    ["nplm.cli"],  # the commands
    ["nplm.api"],  # the commands' functions for notebooks and scripts (nplm's __getattr__ loads it on first use)
]


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """The syntax tree of a source file, parsed once for all the checks below."""
    return ast.parse(path.read_text())


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def layer_of(module: str) -> int:
    """The layer of the longest prefix of `module` that LAYERS names."""
    best, depth = None, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and name.count(".") > depth:
                best, depth = i, name.count(".")
    assert best is not None, f"{module} is in no layer of tests/test_layers.py: add it"
    return best


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The nplm modules `name` imports anywhere in its file (lazy imports inside functions too)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(parsed(path)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


@functools.lru_cache(maxsize=None)
def graph() -> dict[str, frozenset[str]]:
    found = modules()
    return {name: frozenset(imports(name, path, set(found))) for name, path in found.items()}


def test_the_package_root_holds_only_what_every_layer_uses():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "errors.py"]


# upward on purpose: `import nplm` re-exports the Python API's names, loading it on first use (module __getattr__)
LAZY_EXPORTS = {("nplm", "nplm.api")}


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_imports_run_one_way_from_the_commands_down():
    upward = [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
              for a, targets in graph().items() for b in targets
              if layer_of(b) > layer_of(a) and (a, b) not in LAZY_EXPORTS]
    assert upward == []


def test_no_import_cycle():
    g = graph()
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(g[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(g):
        if node not in state:
            visit(node, [node])
    # a package's __init__ and the modules it registers import each other by design (the registry
    # imports every module of its folder lazily, by name): only cycles between other modules count
    real = [c for c in cycles if not any(a.startswith(b + ".") or b.startswith(a + ".") for a, b in zip(c, c[1:]))]
    assert real == []


def code_outside(package: str, pattern: str) -> list[str]:
    """Lines of code (not docstrings or comments) outside `package` that match `pattern`."""
    hits = []
    for name, path in modules().items():
        if name == package or name.startswith(package + "."):
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.Name, ast.Attribute, ast.alias)):
                text = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) \
                    else node.name
                if re.fullmatch(pattern, text.rpartition(".")[2]):
                    hits.append(f"{name}:{node.lineno} {text}")
    return hits


def test_no_code_outside_models_names_a_concrete_model():
    assert code_outside("nplm.models", r"NPLM|NPLMConfig|nplm\.models\.nplm|LBL\w*|Modern\w*|Transformer\w*") == []


def test_no_code_outside_heads_names_a_concrete_head():
    assert code_outside("nplm.heads", r"(Softmax|Hierarchical|ClassBased|Adaptive|ImportanceSampling|NCE)Head") == []


def test_the_lightning_module_holds_the_hooks_and_the_steps_their_own_files():
    """training/module.py stays under 300 lines (what it computes lives beside it), and each way of taking a
    training step is a file of nplm.training.steps."""
    assert len((PACKAGE / "training" / "module.py").read_text().splitlines()) < 300
    steps = {p.stem for p in (PACKAGE / "training" / "steps").glob("*.py")}
    assert {"autograd", "by_hand", "captured", "compiled"} <= steps
