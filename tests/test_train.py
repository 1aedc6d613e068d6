"""End-to-end training through the real Hydra configs, on tiny data."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from nplm.training.checkpoint import load_model
from nplm.cli.evaluate import evaluate
from nplm.cli.generate import generate
from nplm.cli.predict import predict

from conftest import TOY_FAST, make_fake_brown, run_cli
from nplm.cli.train import main as train_main


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def test_toy_run_writes_metrics_config_history_and_checkpoint(toy_run):
    metrics, run = toy_run.metrics, toy_run.folder
    record = read_metrics(run)
    assert record["status"] == "finished" and record["seed"] == 1234 and record["epochs"] == 2
    assert record["corpus"]["vocab_size"] == 42 and record["corpus"]["train_tokens"] == 121
    assert record["metrics"]["test/ppl"] == pytest.approx(metrics["test/ppl"])
    assert 1.0 < metrics["val/ppl_best"] < 42
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    assert float(rows[1]["val/ppl_best"]) == pytest.approx(metrics["val/ppl_best"])
    assert "model:" in (run / "config.yaml").read_text()
    assert (run / "checkpoints" / "last.ckpt").is_file()


def test_same_seed_same_perplexities(tmp_path, toy_run):
    from conftest import compose_cfg
    from nplm.training.train import train

    a = toy_run.metrics  # TOY_FAST, trained earlier in this process
    b = train(compose_cfg(tmp_path / "b", *TOY_FAST))
    assert a["val/ppl_best"] == b["val/ppl_best"] and a["test/ppl"] == b["test/ppl"]


@pytest.mark.slow
def test_overfit_one_batch_from_log_v_to_zero(run_train, tmp_path):
    """The notebook's check: on one repeated batch the loss starts near log|V| and falls below 0.01.
    (A random text, so no context in the batch has two different next words.)"""
    g = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in torch.randint(0, 40, (400,), generator=g).tolist()]
    (tmp_path / "train.txt").write_text(" ".join(words))
    run_train("corpus=text_files", f"corpus.train={tmp_path / 'train.txt'}", f"corpus.valid={tmp_path / 'train.txt'}",
              "corpus.eos=false", "debug=overfit", "model.context_size=3", "model.embed_dim=16",
              "model.hidden_dim=32", "optimizer.lr=0.01", "data.batch_size=64", "trainer.max_epochs=150")
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    vocab_size = read_metrics(tmp_path / "run")["corpus"]["vocab_size"]
    first, last = math.log(float(rows[0]["train/ppl"])), math.log(float(rows[-1]["train/ppl"]))
    assert abs(first - math.log(vocab_size)) < 0.3
    assert last < 0.01


def test_tiny_shakespeare_characters_from_a_local_file(run_train, tmp_path):
    text = tmp_path / "plays.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 30)
    metrics = run_train("corpus=tiny_shakespeare", f"corpus.path={text}", "corpus.test_size=0.1", "corpus.train_size=0.8",
                        "corpus.valid_size=0.1", "model.context_size=4", "model.embed_dim=8",
                        "model.hidden_dim=16", "trainer.max_epochs=2")
    record = read_metrics(tmp_path / "run")
    assert record["corpus"]["vocab_size"] == len(set(text.read_text()))
    assert record["data_files"] == {str(text): __import__("hashlib").sha256(text.read_bytes()).hexdigest()}
    assert metrics["test/ppl"] < record["corpus"]["vocab_size"]


@pytest.mark.parametrize("corpus", ["brown", "brown_gpt2"])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_brown_pipelines_on_a_fake_nltk_corpus(run_train, tmp_path, corpus):
    nltk_data = make_fake_brown(tmp_path)
    run_train(f"corpus={corpus}", f"corpus.nltk_data={nltk_data}", "corpus.download=false",
              "corpus.train_size=0.8", "corpus.valid_size=0.1", "corpus.min_count=1",
              "model.context_size=2", "model.embed_dim=8", "model.hidden_dim=8", "trainer.max_epochs=1")
    record = read_metrics(tmp_path / "run")
    assert record["status"] == "finished" and record["corpus"]["name"] == corpus
    assert record["metrics"]["test/ppl"] > 1


def test_text_files_with_eos_and_unk(run_train, tmp_path):
    (tmp_path / "train.txt").write_text("a b c\nb c d\n" * 20)
    (tmp_path / "valid.txt").write_text("a b zzz\n")
    metrics = run_train("corpus=text_files", f"corpus.train={tmp_path / 'train.txt'}",
                        f"corpus.valid={tmp_path / 'valid.txt'}", "model.context_size=2", "model.embed_dim=4",
                        "model.hidden_dim=4", "trainer.max_epochs=1")
    record = read_metrics(tmp_path / "run")
    assert record["corpus"]["vocab_size"] == 6  # a b c d <eos> <unk>
    assert record["corpus"]["valid_oov_rate"] == pytest.approx(0.25)
    assert "test/ppl" not in metrics


@pytest.mark.slow  # trained until it predicts the toy corpus
def test_checkpoint_loads_weights_only_and_serves_predict_generate_eval(run_train, tmp_path):
    run_train("corpus=toy", "model.context_size=3", "model.embed_dim=16", "model.hidden_dim=32",
              "optimizer.lr=0.01", "data.batch_size=16", "trainer.max_epochs=60")
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    raw = torch.load(ckpt, weights_only=True)
    assert raw["nplm"]["vocab"]["tokens"][:3] == ["the", "<eos>", "a"]
    assert predict(str(ckpt), "the cat sat", top_k=1)[0][0] == "down"
    assert predict(str(ckpt), "a dog barked", top_k=1)[0][0] == "loudly"
    ranked = predict(str(ckpt), "the cat zebra", top_k=3, oov="bengio")
    assert len(ranked) == 3 and sum(p for _, p in ranked) <= 1.0
    text = generate(str(ckpt), "the cat", length=5, temperature=0)
    assert text.startswith("the cat ") and len(text.split()) == 7
    result = evaluate(str(ckpt), split="test", data_dir=str(tmp_path))
    assert result["tokens"] == 121 - 3
    module = load_model(ckpt)
    assert len(module.vocab) == 42


@pytest.mark.slow
def test_multirun_2x2_gives_four_runs_with_wandb_offline(tmp_path):
    """`nplm-train -m model.context_size=2,4 model.embed_dim=16,32 corpus=toy`: 4 jobs, each with its
    own metrics.json and its own offline W&B run holding the perplexities."""
    sweep = tmp_path / "sweep"
    result = run_cli(train_main, "-m", "model.context_size=2,4", "model.embed_dim=16,32", "corpus=toy",
                     "trainer.max_epochs=1", "threads=1", f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path}",
                     cwd=tmp_path)
    assert result.code == 0, result.err[-2000:]
    jobs = sorted(p.parent for p in sweep.glob("*/metrics.json"))
    assert len(jobs) == 4
    shapes = set()
    for job in jobs:
        record = read_metrics(job)
        assert record["status"] == "finished"
        shapes.add((record["corpus"]["name"],) + tuple(
            int(line.split(": ")[1]) for line in (job / "config.yaml").read_text().splitlines()
            if line.startswith(("  context_size:", "  embed_dim:"))))
        runs = list((job / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(runs) == 1
        data = runs[0].read_bytes()
        assert b"val/ppl" in data and b"test/ppl" in data and b"train/ppl" in data
    assert shapes == {("toy", 2, 16), ("toy", 2, 32), ("toy", 4, 16), ("toy", 4, 32)}


@pytest.mark.slow
def test_stop_at_stops_training_by_a_wall_clock_deadline_and_still_tests(run_train, tmp_path):
    import time

    from conftest import TOY_FAST

    from nplm.errors import UserError

    with pytest.raises(UserError, match=r"stop_at=1.0: that time has passed; give a later Unix time"):
        run_train(*TOY_FAST, "stop_at=1.0")
    metrics = run_train(*TOY_FAST, "trainer.max_epochs=100000", f"stop_at={time.time() + 3}")
    record = json.loads((tmp_path / "call2" / "run" / "metrics.json").read_text())  # run_train's second run
    # stopped, never finished: where it stopped is recorded, and the best checkpoint so far is tested
    assert record["status"] == "stopped" and record["stopped"]["by"] == "stop_at" and 1 <= record["epochs"] < 100000
    assert metrics["test/ppl"] > 1 and record["metrics"]["test/ppl"] == metrics["test/ppl"]
