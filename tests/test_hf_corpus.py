"""corpus=hf: a Hugging Face `datasets` dataset the test builds and saves locally (no network) trains with the
token counts of a hand count; a wrong column or split, an unknown name offline and a missing `datasets`
package are one line each."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import importlib.util

import pytest

import warm_python
from conftest import compose_cfg
from nplm.cli.evaluate import evaluate
from nplm.errors import UserError
from nplm.training.train import train

# (imported by the tests that use it, not when the suite is collected: a second and a half)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                                reason="the datasets package is not installed (pip install -e '.[hf]')")


@pytest.fixture(scope="module")
def datasets():
    """The Hugging Face `datasets` package."""
    import datasets

    return datasets

ROWS = {  # a row may hold several lines (each gets an <eos>); blank lines and an empty row give none
    "train": ["the cat sat on the mat", "the dog sat\non the log", "", "a cat saw a dog", "the dog ran"] * 4,
    "validation": ["the cat ran", "a dog sat on the mat"],
    "test": ["the bird sat"],
}
SMALL = ["model.context_size=2", "model.embed_dim=8", "model.hidden_dim=8", "data.batch_size=8", "debug=fast",
         "logger=none", "seed=1"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, datasets):
    """A DatasetDict of three splits (a `text` and a `label` column) written with save_to_disk."""
    folder = tmp_path_factory.mktemp("hf") / "saved"
    datasets.DatasetDict({split: datasets.Dataset.from_dict({"text": rows, "label": list(range(len(rows)))})
                          for split, rows in ROWS.items()}).save_to_disk(str(folder))
    return folder


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_saved_dataset_trains_with_the_hand_counted_tokens(saved, tmp_path):
    metrics = train(compose_cfg(tmp_path, "corpus=hf", f"corpus.dataset={saved}", *SMALL))
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # train, per repeat: 6 + 3 + 3 + 5 + 3 words in 5 lines (the empty row has none), an <eos> after each
    assert record["corpus"]["train_tokens"] == 4 * (20 + 5)
    # the types: the cat sat on mat dog log a saw ran, <eos>, <unk>
    assert record["corpus"]["vocab_size"] == 10 + 2
    assert record["corpus"]["valid_tokens"] == 3 + 6 + 2 and record["corpus"]["test_tokens"] == 3 + 1
    assert record["corpus"]["test_oov_rate"] == pytest.approx(1 / 4)  # "bird"
    assert record["data_files"] == {f"{saved}[{split}].text": hashlib.sha256(
        "".join(row + "\n" for row in rows).encode()).hexdigest() for split, rows in ROWS.items()}
    # nplm-eval --text tokenises a text as the corpus tokenised its rows: the test split's one row
    text = tmp_path / "test.txt"
    text.write_text(ROWS["test"][0] + "\n")
    result = evaluate(metrics["best_checkpoint"], text=str(text), data_dir=str(tmp_path / "data"))
    assert result["ppl"] == pytest.approx(metrics["test/ppl"], rel=1e-6)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_local_folder_of_data_files_goes_through_load_dataset_offline(tmp_path, monkeypatch, datasets):
    """Not a save_to_disk folder: `datasets.load_dataset` reads its parquet files (the cache in HF_HOME)."""
    folder = tmp_path / "files"
    for split, rows in ROWS.items():
        datasets.Dataset.from_dict({"text": rows}).to_parquet(str(folder / f"{split}.parquet"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    train(compose_cfg(tmp_path, "corpus=hf", f"corpus.dataset={folder}", *SMALL))
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["corpus"]["train_tokens"] == 4 * (20 + 5) and record["corpus"]["vocab_size"] == 12


def test_a_subword_vocabulary_and_no_test_split(saved, tmp_path):
    train(compose_cfg(tmp_path, "corpus=hf", f"corpus.dataset={saved}", "corpus.tokenizer=unigram",
                      "corpus.vocab_size=30", "corpus.test_split=null", *SMALL))
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "finished" and record["corpus"]["vocab_size"] <= 30
    assert "test_tokens" not in record["corpus"] and len(record["data_files"]) == 2


def expect_error(tmp_path, message: str, *overrides: str) -> None:
    with pytest.raises(UserError) as info:
        train(compose_cfg(tmp_path, "corpus=hf", *overrides, *SMALL))
    assert str(info.value) == message
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # the saved dataset loaded five times
def test_a_wrong_column_or_split_is_one_line(saved, tmp_path):
    expect_error(tmp_path, f"corpus.text_column=body: no such column in split train of {saved}; its columns: "
                 "text, label", f"corpus.dataset={saved}", "corpus.text_column=body")
    expect_error(tmp_path, f"corpus.text_column=label: a column of int64, not text; the text columns of {saved}: "
                 "text", f"corpus.dataset={saved}", "corpus.text_column=label")
    expect_error(tmp_path, f"corpus.valid_split=dev: {saved} has no such split; its splits: train, validation, "
                 "test; set corpus.valid_split to one of them", f"corpus.dataset={saved}", "corpus.valid_split=dev")
    expect_error(tmp_path, f"corpus.test_split=heldout: {saved} has no such split; its splits: train, validation, "
                 "test; set corpus.test_split to one of them (or null: no test split)", f"corpus.dataset={saved}",
                 "corpus.test_split=heldout")
    nowhere = tmp_path / "nowhere"
    expect_error(tmp_path, f"corpus.dataset={nowhere}: no such folder ({nowhere}); give a save_to_disk folder or a "
                 "Hugging Face Hub dataset name", f"corpus.dataset={nowhere}")


def test_without_the_datasets_package_corpus_hf_names_the_extra(saved, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    expect_error(tmp_path, "corpus=hf: needs the Hugging Face datasets package; pip install 'nplm-lab[hf]' (or pip "
                 "install datasets)", f"corpus.dataset={saved}")


@pytest.mark.slow
def test_an_unknown_name_offline_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    home = tmp_path / "hf_home"
    home.mkdir()
    result = warm_python.run([sys.executable, "-m", "nplm.cli.train", f"hydra.run.dir={tmp_path / 'run'}",
                             "logger=none", "corpus=hf", "corpus.dataset=wikitext", *SMALL],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "HF_HOME": str(home), "HF_DATASETS_OFFLINE": "1",
                                 "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("nplm: error:")]
    assert errors == [f"nplm: error: corpus.dataset=wikitext: no local copy (not in the Hugging Face cache "
                      f"{home / 'datasets'}, not a save_to_disk folder) and no network; download it once online, "
                      "or point corpus.dataset at a save_to_disk folder"]
    assert not (tmp_path / "run").exists() and list(home.iterdir()) == []
