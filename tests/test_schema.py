"""The schema covers every key: each shipped config passes, and for every key of every option of every
group (and the top level) a value of the wrong type, or a key the option lacks, is refused with
`key=value: ...` naming it."""

from __future__ import annotations

import copy

import pytest
from omegaconf import OmegaConf

from hydra import compose, initialize_config_dir

from nplm.cli.train import options
from nplm.config import CONF_DIR
from nplm.config.rules import AnyOf, Bool, Choice, Resume, Rule, SearchDir, Section, Str, StrList, show
from nplm.config.schema import TOP, WANDB, check_tree, groups, validate

GROUPS = groups()
from nplm.errors import UserError

from conftest import compose_cfg

# group -> the option to compose for each of its schema options
PICK = {"corpus": "corpus", "model": "model", "head": "head", "tree": "tree", "optimizer": "optimizer"}


_COMPOSED: dict = {}


def composed(tmp_path, group: str | None = None, option: str | None = None) -> dict:
    """The resolved config with `group=option` (composed once per option; a fresh copy each call)."""
    if (group, option) not in _COMPOSED:
        _COMPOSED[group, option] = _compose(tmp_path, group, option)
    return copy.deepcopy(_COMPOSED[group, option])


def _compose(tmp_path, group, option) -> dict:
    overrides = [f"{group}={option}"] if group in PICK else []
    if group == "tree" and option == "file":
        overrides.append("tree.path=tree.json")
    if group == "corpus" and option == "text_files":
        overrides += ["corpus.train=a.txt", "corpus.valid=b.txt"]
    if group == "corpus" and option == "hf":
        overrides.append("corpus.dataset=wikitext")
    return OmegaConf.to_container(compose_cfg(tmp_path, *overrides), resolve=True)


def wrong_value(rule: Rule):
    """A value of the wrong type for `rule`: a number where text is expected, else a word."""
    if isinstance(rule, (Str, StrList, Resume, SearchDir)):
        return 12345
    if isinstance(rule, Bool):
        return "maybe"
    if isinstance(rule, AnyOf) or isinstance(rule, Choice):
        return "not_an_option"
    return [] if isinstance(rule, Section) else "not_a_number"


CASES = [(g, o, k) for g, schema in GROUPS.items() for o in schema.options for k in schema.keys_of(o)]


@pytest.mark.slow
def test_every_shipped_config_and_option_passes(tmp_path):
    experiments = options("experiment")
    assert len(experiments) >= 10
    for overrides in ([f"experiment={e}"] for e in experiments):
        validate(compose_cfg(tmp_path, *overrides))
    (tmp_path / "t.json").write_text("{}")  # tree.path must name an existing file
    for group in ("corpus", "model", "head", "tree", "optimizer", "trainer", "logger", "debug"):
        for option in options(group):
            extra = [f"tree.path={tmp_path / 't.json'}"] if option == "file" else ["corpus.train=a", "corpus.valid=b"] \
                if option == "text_files" else ["corpus.dataset=wikitext"] if option == "hf" else []
            if (group, option) == ("trainer", "gpu"):
                continue  # refused without a GPU: test_bad_input
            validate(compose_cfg(tmp_path, f"{group}={option}", *extra))


@pytest.mark.parametrize("group,option,key", CASES, ids=[f"{g}.{o or '-'}.{k}" for g, o, k in CASES])
def test_a_wrong_type_for_every_key_is_refused_by_name(tmp_path, group, option, key):
    cfg = composed(tmp_path, group, option)
    if group == "progress":
        cfg["progress"] = {"interval": 30}
    if group == "tree" and cfg.get("tree") is None:
        cfg["tree"] = {"name": option}
    rule = GROUPS[group].keys_of(option)[key]
    bad = wrong_value(rule)
    cfg[group][key] = bad
    with pytest.raises(UserError) as info:
        check_tree(cfg)
    assert str(info.value).startswith(f"{group}.{key}={show(bad)}: must be"), str(info.value)


@pytest.mark.parametrize("group,option", sorted({(g, o) for g, o, _ in CASES}))
def test_a_key_the_option_lacks_is_refused_with_the_valid_keys(tmp_path, group, option):
    cfg = composed(tmp_path, group, option)
    cfg.setdefault(group, {"name": option} if option else {})
    if cfg[group] is None:
        cfg[group] = {"name": option}
    cfg[group]["bogus"] = 1
    with pytest.raises(UserError) as info:
        check_tree(cfg)
    where = f"{group}={option}" if option else group
    valid = ", ".join(sorted(GROUPS[group].keys_of(option)))
    assert str(info.value) == f"{group}.bogus=1: unknown key of {where}; valid keys: {valid}"


@pytest.mark.parametrize("key", sorted([*TOP, "logger.wandb." + next(iter(WANDB.keys_of("")))]))
def test_a_wrong_type_for_every_top_level_key_is_refused(tmp_path, key):
    cfg = composed(tmp_path)
    cfg["logger"]["wandb"] = {"project": "nplm"}
    *parents, last = key.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    rule = TOP.get(key) or WANDB.keys_of("")[last]
    node[last] = bad = wrong_value(rule)
    with pytest.raises(UserError) as info:
        check_tree(cfg)
    assert str(info.value).startswith(f"{key}={show(bad)}: must be"), str(info.value)


@pytest.mark.slow
def test_every_config_group_folder_has_a_schema():
    folders = {p.name for p in CONF_DIR.iterdir() if p.is_dir()} - {"hydra", "experiment", "debug", "sweep"}
    assert folders <= set(GROUPS), folders - set(GROUPS)
    for group in ("corpus", "model", "head", "tree", "optimizer"):
        assert set(GROUPS[group].options) <= set(options(group)), group  # each registered option has its yaml
        for option in options(group):  # and each yaml (presets of an option too) picks a registered option
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                name = compose(config_name="train", overrides=[f"{group}={option}"])[group]["name"]
            assert name in GROUPS[group].options, (group, option, name)


def test_an_empty_nltk_data_variable_means_none(tmp_path, monkeypatch):
    monkeypatch.setenv("NLTK_DATA", "")  # `export NLTK_DATA=` in a shell or a Makefile
    cfg = compose_cfg(tmp_path, "corpus=brown")
    assert cfg.corpus.nltk_data == ""
    validate(cfg)


def test_every_registered_key_says_what_it_does():
    """`nplm-train --help GROUP=OPTION` shows each key's help: every option registers it."""
    missing = [f"{group}={option}: {key}" for group in ("corpus", "model", "head", "tree", "optimizer")
               for option in GROUPS[group].options for key, rule in GROUPS[group].keys_of(option).items()
               if key != "name" and not rule.doc]
    assert missing == []


def test_help_for_an_option_lists_its_registered_keys(capsys):
    from nplm.cli.train import command_line

    with pytest.raises(SystemExit) as done:
        command_line(["--help", "head=hierarchical"])
    page = capsys.readouterr().out
    assert done.value.code == 0 and page.startswith("head=hierarchical: Hierarchical softmax")
    assert "  node_dim               size of a node's feature vector N (morin_bengio) [an integer >= 1]" in page
    with pytest.raises(SystemExit) as done:
        command_line(["--help", "head=nope"])
    assert done.value.code == 2 and capsys.readouterr().err.startswith("nplm: error: head=nope: no such option; valid:")
