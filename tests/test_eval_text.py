"""nplm-eval CHECKPOINT --text FILE tokenises the file as the checkpoint's corpus did, so evaluating a
text_files run's own test file reproduces the run's test perplexity; bad checkpoints are refused."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import compose_cfg
from nplm.cli.evaluate import evaluate, main
from nplm.training.train import train

LINES = ["The cat sat on the mat", "the dog sat on the log", "A cat saw a dog", "the dog ran away",
         "The bird sang", "a bird saw the cat", "the cat ran after the bird", "The mat was red"]


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A few steps of a text_files run with lowercase=true and latin-1 files (every line one sentence)."""
    tmp = tmp_path_factory.mktemp("eval_text")
    files = {}
    for split, lines in (("train", LINES * 6), ("valid", LINES[::2] * 2), ("test", LINES[1::2] + ["Café noir"])):
        files[split] = tmp / f"{split}.txt"
        files[split].write_bytes("\n\n".join(lines).encode("latin-1") + b"\n")  # blank lines: no <eos> of their own
    record = train(compose_cfg(tmp, "corpus=text_files", *(f"corpus.{s}={p}" for s, p in files.items()),
                               "corpus.lowercase=true", "corpus.encoding=latin-1", "model.context_size=2",
                               "model.embed_dim=8", "model.hidden_dim=8", "data.batch_size=16",
                               "trainer.max_epochs=2", "seed=3"))
    return record, files, tmp


def test_eval_text_reproduces_the_runs_own_test_perplexity(text_run, tmp_path, capsys):
    record, files, tmp = text_run
    result = evaluate(record["best_checkpoint"], text=str(files["test"]), data_dir=str(tmp / "data"))
    assert result["ppl"] == pytest.approx(record["test/ppl"], rel=1e-6)
    # 19 words in 4 lines + "café noir", an <eos> after each line, minus the first context of 2
    assert result["tokens"] == 19 + 2 + 5 - 2
    assert result["oov_rate"] == pytest.approx(2 / 26)  # "café" and "noir" are not in train
    out = tmp_path / "new" / "eval.json"
    main([record["best_checkpoint"], "--text", str(files["test"]), "--json", str(out)])
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) and printed["ppl"] == result["ppl"]


def test_eval_split_equals_the_text_of_that_split(text_run):
    record, files, tmp = text_run
    split = evaluate(record["best_checkpoint"], split="valid", data_dir=str(tmp / "data"))
    text = evaluate(record["best_checkpoint"], text=str(files["valid"]), data_dir=str(tmp / "data"))
    assert split["ppl"] == pytest.approx(text["ppl"], rel=1e-12) and split["tokens"] == text["tokens"]


def test_truncated_checkpoint_and_undecodable_text_are_refused(text_run, tmp_path, capsys):
    record, files, _ = text_run
    data = open(record["best_checkpoint"], "rb").read()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(SystemExit) as exit_info:
        main([str(cut)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nplm: error: checkpoint={cut}: cannot be read safely (") and err.count("\n") == 1
    assert err.endswith("); is it a complete nplm checkpoint?\n")
    few = tmp_path / "few.txt"
    few.write_text("cat\n")  # one word + <eos>: the context of 2 needs 3 tokens
    with pytest.raises(SystemExit):
        main([record["best_checkpoint"], "--text", str(few)])
    assert capsys.readouterr().err == f"nplm: error: --text={few}: has 2 tokens; the model needs at least 3\n"


def test_eval_prints_progress_lines_on_stderr_only(text_run, capsys):
    from nplm.training.checkpoint import load_model
    from nplm.data.windows import Windows
    from nplm.cli.evaluate import perplexity

    record, _, _ = text_run
    module = load_model(record["best_checkpoint"])
    windows = Windows(torch.arange(50) % len(module.vocab), 2)  # 48 windows, batches of 10
    result = perplexity(module, windows, batch_size=10, interval=0.0)  # every batch is due
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and result["tokens"] == 48
    assert [line.split("  ")[0] for line in lines] == [f"nplm-eval: batch {i}/5" for i in range(1, 6)]
    assert lines[-1].endswith("ETA 0s") and "tokens/s" in lines[0]
