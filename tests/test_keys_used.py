"""Nothing accepted is ignored, checked from the registries: for every option of the model and head groups, each
of its keys set to another valid value than its yaml's either changes what the option computes (its parameters,
its features or scores, one training step's loss and gradients; for a model, whether it ties the head's output
vectors) or is refused by the schema, naming the key. A key that only matters in another mode (another
`first_layer`, `node_form`, a tied head) must be declared so (`option(when=...)`, `Head.tied_values`): it is then
refused there. The few keys that choose how the same numbers are computed are listed below, each with why."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from omegaconf import OmegaConf

from conftest import build_any_head
from nplm.config import CONF_DIR
from nplm.config.rules import AnyOf, Bool, Choice, Float, Int, IntList, Rule
from nplm.config.schema import check_group, groups
from nplm.errors import UserError
from nplm.heads import head_class
from nplm.models import build_model

V = 24
COUNTS = [int(200 / (r + 1)) + 1 for r in range(V)]
# keys that choose how the same numbers are computed (a faster path), with where the sameness is tested
SAME_NUMBERS = {
    ("model", "sparse_embeddings"): "row-sparse gradients of C, the same updates (tests/test_optim.py)",
    ("head", "sparse"): "row-sparse gradients of the head's rows, the same updates (tests/test_optim.py)",
    ("head", "training_path"): "the adaptive head's ways to the same loss (tests/test_adaptive_capacity.py)",
    ("head", "chunk_elements"): "the chunk size of the full-distribution pass: the same scores (tests/test_hierarchical.py)",
}


def yaml_options(group: str, name: str) -> dict:
    """The option's own yaml: what a user gets without typing the key."""
    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / group / f"{name}.yaml"), resolve=True)


def another_value(rule: Rule, value):
    """A value `rule` accepts that differs from `value` (None where it finds none)."""
    if isinstance(rule, Bool):
        candidates = [not value]
    elif isinstance(rule, Choice):
        candidates = [o for o in rule.options if o != value]
    elif isinstance(rule, Int):  # (null: the option chooses; any number is a choice of the user's)
        candidates = [4, 2, 8] if value is None else [value + 1, value - 1, value * 2]
    elif isinstance(rule, Float):
        candidates = [0.5] if value is None else [value * 0.5 if value else 0.25, value + 0.1]
    elif isinstance(rule, IntList):
        candidates = [[3], [4, 12]]
    elif isinstance(rule, AnyOf):
        candidates = [False, True, "auto"]  # (auto ties where the head can: as true here)
    else:
        candidates = []
    return next((c for c in candidates if c != value and rule(c) is None), None)


def keys_to_try(group: str):
    for name, option in groups()[group].options.items():
        for key, rule in option.items():
            if key != "name" and (group, key) not in SAME_NUMBERS:
                yield pytest.param(name, key, id=f"{group}={name}.{key}")


def model_signature(cfg: dict) -> list:
    """What the model computes: its parameters' shapes, whether it ties, its features in training mode (dropout
    drawn from a fixed seed) and their gradients' sums, on a fixed batch."""
    torch.manual_seed(0)
    model = build_model(cfg, V, head_can_tie=True).double()
    k = model.context_size
    ids = torch.randint(V, (2, 6 + k), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    features = model.block_features(ids) if model.trains_on_blocks else model(ids[:, :k])
    (features.pow(2).sum() + (model.output_embeddings().sum() if model.output_embeddings() is not None else 0)).backward()
    return [[tuple(p.shape) for p in model.parameters()], model.output_embeddings() is None, features.detach(),
            [p.grad.to_dense().sum().item() for p in model.parameters() if p.grad is not None]]


def head_signature(name: str, options: dict, tied: bool) -> list:
    """What the head computes on fixed features: its parameters' shapes, log-probabilities, NLL, and one training
    loss (sampled heads draw from a fixed seed) with its gradients' sums."""
    F = 32
    torch.manual_seed(0)
    tie_to = torch.nn.Parameter(torch.randn(V, F)) if tied else None
    head = build_any_head(name, options, F, V, COUNTS, tie_to=tie_to).double()
    features = torch.randn(6, F, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.randint(V, (6,), generator=torch.Generator().manual_seed(2))
    head.eval()
    with torch.no_grad():
        scores = [head.log_probs(features), head.nll(features, target)]
    head.train()
    torch.manual_seed(3)
    head.loss(features, target).sum().backward()
    return [[tuple(p.shape) for p in head.parameters()], *scores,
            [p.grad.to_dense().sum().item() for p in head.parameters() if p.grad is not None]]


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def refused(group: str, values: dict) -> bool:
    try:
        check_group(group, groups()[group], values)
    except UserError:
        return True
    return False


@pytest.mark.parametrize("name,key", keys_to_try("model"))
def test_every_model_key_changes_what_the_model_computes_or_is_refused(name, key):
    base = yaml_options("model", name)
    rule = groups()["model"].keys_of(name)[key]
    value = another_value(rule, base.get(key))
    assert value is not None, f"no other value of model.{key} to try"
    changed = {**base, key: value}
    if refused("model", changed):
        return
    assert not same(model_signature(changed), model_signature(base)), (
        f"model={name} model.{key}={value}: accepted and changes nothing; refuse it where it does not apply "
        "(option(when=...)) or use it")


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("name,key", keys_to_try("head"))
def test_every_head_key_changes_what_the_head_computes_or_is_refused(name, key, tied):
    cls = head_class(name)
    if tied and not cls.can_tie:
        pytest.skip("a head without an output vector per word is never tied (refused: tests/test_bad_input.py)")
    base = {k: v for k, v in yaml_options("head", name).items() if k != "name"}
    rule = groups()["head"].keys_of(name)[key]
    value = another_value(rule, base.get(key))
    assert value is not None, f"no other value of head.{key} to try"
    changed = {**base, key: value}
    if refused("head", {"name": name, **changed}):
        return
    if tied and key in cls.tied_values:  # the schema refuses it with a tying model (tests/test_bad_input.py)
        assert value not in cls.tied_values[key]
        return
    assert not same(head_signature(name, changed, tied), head_signature(name, base, tied)), (
        f"head={name} head.{key}={value} ({'tied' if tied else 'untied'}): accepted and changes nothing; refuse "
        "it where it does not apply or use it")


def conditional_keys():
    for group, schema in groups().items():
        for name in schema.options:
            for key, rule in schema.keys_of(name).items():
                if rule.when:
                    yield pytest.param(group, name, key, id=f"{group}={name}.{key}")


@pytest.mark.parametrize("group,name,key", conditional_keys())
def test_a_key_of_another_mode_is_refused_naming_the_key_that_decides(group, name, key):
    keys = groups()[group].keys_of(name)
    value = another_value(keys[key], keys[key].default)
    for other, allowed in keys[key].when:
        elsewhere = next(o for o in keys[other].options if o not in allowed)
        with pytest.raises(UserError, match=rf"^{group}.{key}={value}: applies only with {group}.{other}={allowed[0]} "
                                            rf"\(here {group}.{other}={elsewhere}\)"):
            check_group(group, groups()[group], {"name": name, key: value, other: elsewhere})
        try:  # in its own mode it is a setting like any other
            check_group(group, groups()[group], {"name": name, key: value, other: allowed[0]})
        except UserError as err:
            assert "applies only" not in str(err)
