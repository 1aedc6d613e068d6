"""Recipes apart from protocols: an experiment file sets the model shape, head, optimizer and schedule;
the corpus and its split (the papers' protocols: corpus=brown_bengio2003, corpus=brown_morin2005) are
corpus options, picked by the experiment's defaults list, that a `corpus=...` on the command line
replaces whole. So every recipe trains on the user's own corpus, and the paper experiments compose as
they did when their results were made (tests/experiments_composed.json).

When an experiment file changes on purpose, rewrite the expectation and review its diff:

    python tests/test_recipes.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nplm.cli.train import options
from nplm.config import CONF_DIR
from nplm.config.schema import validate

from conftest import compose_cfg

EXPECTED = Path(__file__).with_name("experiments_composed.json")
ROWS = ("mlp1", "mlp3", "mlp5", "mlp7", "mlp9", "wide")
PAPERS = ("bengio2003/", "morin2005/")


def compositions() -> list[str]:
    """The paper experiments: every file of experiment/bengio2003 and experiment/morin2005 alone, and
    the Bengio driver's rows under the `modern` and `converged` recipes (experiments/bengio2003/run.py:
    `experiment=[bengio2003/<row>,bengio2003/<recipe>]`)."""
    alone = [f"experiment={name}" for name in sorted(options("experiment")) if name.startswith(PAPERS)]
    return alone + [f"experiment=[bengio2003/{row},bengio2003/{recipe}]" for row in ROWS
                    for recipe in ("modern", "converged")]


def composed(*commands: str) -> dict:
    """{command: `nplm-train command`'s config as {group: {key: value}} (top-level keys under "")},
    without the groups that do not change what is trained (paths, logger, progress, verbose);
    interpolations unresolved (`${oc.env:NLTK_DATA,null}`), so the same on every machine."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return {c: grouped(OmegaConf.to_container(compose(config_name="train", overrides=c.split()), resolve=False))
                for c in commands}


def grouped(cfg: dict) -> dict:
    out: dict = {"": {}}
    for key, value in cfg.items():
        if key in ("paths", "logger", "progress", "verbose"):
            continue
        if isinstance(value, dict):
            out[key] = {k: v for k, v in flat(value).items()}
        else:
            out[""][key] = value
    return out


def flat(node: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def expectation() -> dict:
    return composed(*compositions())


def dump(expected: dict) -> str:
    """One line per group of each composition: a changed value shows as one changed line."""
    lines = ["{"]
    for i, (command, groups) in enumerate(expected.items()):
        lines.append(f" {json.dumps(command)}: {{")
        lines += [f"  {json.dumps(g)}: {json.dumps(keys)}" + ("," if j < len(groups) - 1 else "")
                  for j, (g, keys) in enumerate(groups.items())]
        lines.append(" }" + ("," if i < len(expected) - 1 else ""))
    return "\n".join(lines + ["}"]) + "\n"


@pytest.mark.slow  # ~10 s: 26 compositions
def test_the_paper_experiments_compose_as_when_their_results_were_made():
    """Every key the paper experiments and the drivers' rows had when their expectation was written
    (from the experiment files of f9945d9, before the recipes were parted from the protocols) still has
    its value: same corpus, split, shape, head, optimizer, schedule and trainer. Keys added since
    (a new option's default) are not compared."""
    expected = json.loads(EXPECTED.read_text())
    assert sorted(expected) == sorted(compositions()), "experiments added or removed: python tests/test_recipes.py --write"
    got = expectation()
    for command, groups in expected.items():
        for group, keys in groups.items():
            for key, value in keys.items():
                assert got[command].get(group, {}).get(key, "<missing>") == value, f"{command}: {'.'.join(filter(None, (group, key)))}"


def test_no_experiment_file_sets_corpus_keys():
    """Corpus keys belong to corpus options: an experiment's `corpus.x: ...` would be left over on
    another corpus (`corpus.markers=true: unknown key of corpus=text_files`)."""
    for name in options("experiment"):
        text = yaml.safe_load((CONF_DIR / "experiment" / f"{name}.yaml").read_text()) or {}
        assert "corpus" not in text, f"experiment/{name}.yaml sets corpus keys: make them a conf/corpus option"


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_paper_protocols_are_corpus_options():
    cfg = composed("experiment=bengio2003/mlp1", "corpus=brown_bengio2003", "experiment=morin2005/nplm",
                   "corpus=brown_morin2005")
    bengio, morin = cfg["corpus=brown_bengio2003"]["corpus"], cfg["corpus=brown_morin2005"]["corpus"]
    assert cfg["experiment=bengio2003/mlp1"]["corpus"] == bengio and cfg["experiment=morin2005/nplm"]["corpus"] == morin
    assert (bengio["name"], bengio["markers"], bengio["train_size"], bengio["valid_size"]) == ("brown", True, 800000, 200000)
    assert (morin["name"], morin["max_vocab"], morin["train_size"], morin["valid_size"], morin["vocab_from"]) == (
        "brown", 10000, 900000, 100000, "train")


WORDS = "the cat sat on the mat and the dog ran to the red door while a bird sang in the old tree".split()


def text_files(tmp_path: Path) -> list[str]:
    """Three small plain-text files (about 2,000 words, 18 distinct) and the overrides naming them."""
    paths = []
    for split, lines in (("train", 160), ("valid", 30), ("test", 30)):
        path = tmp_path / f"{split}.txt"
        path.write_text("".join(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(7 + i % 5)) + "\n"
                                for i in range(lines)))
        paths.append(f"corpus.{split}={path}")
    return ["corpus=text_files", *paths]


@pytest.mark.parametrize("experiment", ["[bengio2003/wide,bengio2003/modern]",
                                        *(pytest.param(e, marks=pytest.mark.slow) for e in
                                          ("bengio2003/mlp1", "morin2005/hierarchical", "morin2005/importance_sampling"))])
def test_a_paper_recipe_trains_on_your_own_corpus(run_train, tmp_path, experiment):
    overrides = [f"experiment={experiment}", *text_files(tmp_path), "debug=fast", "trainer.limit_train_batches=2"]
    cfg = compose_cfg(tmp_path, *overrides)
    validate(cfg)
    assert cfg.corpus.name == "text_files" and "markers" not in cfg.corpus and "max_vocab" in cfg.corpus
    recipe = composed(f"experiment={experiment}")[f"experiment={experiment}"]
    for group in ("model", "head", "optimizer", "data", "callbacks"):  # the recipe, unchanged by the corpus
        assert flat(OmegaConf.to_container(cfg[group])) == recipe[group], group
    metrics = run_train(*overrides)
    assert metrics["test/ppl"] > 1


@pytest.mark.slow  # a run of the recipe
def test_the_wikitext103_recipe_trains_on_a_small_corpus(run_train, tmp_path):
    """Its cutoffs [20000, 40000, 200000] are beyond a 19-word vocabulary: dropped, the default taken;
    warm-up, cosine over updates, the first block's width and clipping as the paper's (a smaller model)."""
    overrides = ["experiment=sun2021/wikitext103", *text_files(tmp_path), "debug=fast", "trainer.limit_train_batches=2",
                 "model.num_layers=2", "model.hidden_dim=32", "model.first_hidden_dim=16", "model.embed_dim=8",
                 "model.context_size=40",
                 "data.batch_size=2", "data.eval_batch_size=2"]
    cfg = compose_cfg(tmp_path, *overrides)
    assert (cfg.optimizer.warmup_steps, cfg.optimizer.cosine, cfg.trainer.max_steps, cfg.trainer.gradient_clip_val,
            cfg.data.block_size) == (4000, True, 200000, 0.25, 512)
    metrics = run_train(*overrides)
    assert metrics["test/ppl"] > 1


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(__doc__)
    EXPECTED.write_text(dump(expectation()))
    print(f"wrote {EXPECTED}")
