"""Every flag and file argument of nplm-eval, -generate, -predict, -mix and -compare is checked before
anything runs: one line `nplm: error: <flag>=<value>: <what is allowed>` on stderr, exit status 2,
no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nplm.cli import compare, evaluate, generate, mix, predict

COMMANDS = {"eval": evaluate.main, "generate": generate.main, "predict": predict.main, "mix": mix.main,
            "compare": compare.main}


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """A fake checkpoint (non-empty, not a checkpoint), an empty file, a text file, a folder."""
    (tmp_path / "fake.ckpt").write_bytes(b"not a checkpoint")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "text.txt").write_text("the cat sat\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "last.ckpt").write_bytes(b"x")
    names = {"ckpt": "fake.ckpt", "empty": "empty.txt", "text": "text.txt", "folder": "folder", "run": "run",
             "missing": "missing.txt"}
    return {key: str(tmp_path / name) for key, name in names.items()}


FLOAT = "must be a finite number"
# (command, arguments after the checkpoint, the message after "nplm: error: ")
BAD_FLAGS = [
    ("eval", ["--split", "dev"], "--split=dev: must be one of: train, valid, test"),
    ("eval", ["--batch-size", "0"], "--batch-size=0: must be an integer >= 1"),
    ("eval", ["--batch-size", "-5"], "--batch-size=-5: must be an integer >= 1"),
    ("eval", ["--batch-size", "2.5"], "--batch-size=2.5: must be an integer"),
    ("eval", ["--batch-size", "abc"], "--batch-size=abc: must be an integer"),
    ("generate", ["--temperature", "nan"], f"--temperature=nan: {FLOAT} >= 0 (0 = always the most likely token)"),
    ("generate", ["--temperature", "inf"], f"--temperature=inf: {FLOAT} >= 0"),
    ("generate", ["--temperature", "-1"], f"--temperature=-1: {FLOAT} >= 0"),
    ("generate", ["--temperature", "warm"], "--temperature=warm: must be a number"),
    ("generate", ["--top-k", "-3"], "--top-k=-3: must be an integer >= 0 (0 = sample among all tokens)"),
    ("generate", ["--length", "0"], "--length=0: must be an integer >= 1"),
    ("generate", ["--length", "-1"], "--length=-1: must be an integer >= 1"),
    ("generate", ["--seed", "-1"], "--seed=-1: must be an integer in [0, 9223372036854775807]"),
    ("generate", ["--seed", "x"], "--seed=x: must be an integer"),
    ("generate", ["--oov", "zero"], "--oov=zero: must be one of: unk, bengio"),
    ("predict", ["the cat", "--top-k", "0"], "--top-k=0: must be an integer >= 1"),
    ("predict", ["the cat", "--top-k", "-3"], "--top-k=-3: must be an integer >= 1"),
    ("predict", ["the cat", "--oov", "skip"], "--oov=skip: must be one of: unk, bengio"),
    ("mix", ["--weight", "nan"], f"--weight=nan: {FLOAT} in [0, 1]"),
    ("mix", ["--weight", "1.5"], f"--weight=1.5: {FLOAT} in [0, 1]"),
    ("mix", ["--weight", "-0.1"], f"--weight=-0.1: {FLOAT} in [0, 1]"),
    ("mix", ["--ngram", "kn9"], "--ngram=kn9: must be one of: interpolated-trigram, kn1,"),
    ("mix", ["--batch-size", "0"], "--batch-size=0: must be an integer >= 1"),
]


def run(command: str, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        COMMANDS[command](argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command, args, message", BAD_FLAGS, ids=[" ".join([c, *a]) for c, a, _ in BAD_FLAGS])
def test_bad_flag_values_are_refused(command, args, message, files, capsys):
    err = run(command, [files["ckpt"], *args], capsys)
    assert err.startswith(f"nplm: error: {message}"), err


CHECKPOINT_COMMANDS = [("eval", []), ("generate", []), ("predict", ["the cat"]), ("mix", [])]
BAD_CHECKPOINTS = [
    ("missing", "does not exist; pass a <run>/checkpoints/*.ckpt file written by nplm-train"),
    ("empty", "is empty; not a checkpoint"),
    ("folder", "is a folder; pass a checkpoint file (<run>/checkpoints/*.ckpt)"),
    ("run", "is a folder; pass a checkpoint file, e.g. {run}/checkpoints/last.ckpt"),
    ("ckpt", "cannot be read safely (UnpicklingError); is it a complete nplm checkpoint?"),
]


@pytest.mark.parametrize("command, rest", CHECKPOINT_COMMANDS, ids=[c for c, _ in CHECKPOINT_COMMANDS])
@pytest.mark.parametrize("name, message", BAD_CHECKPOINTS, ids=[n for n, _ in BAD_CHECKPOINTS])
def test_bad_checkpoint_files_are_refused(command, rest, name, message, files, capsys):
    err = run(command, [files[name], *rest], capsys)
    assert err == f"nplm: error: checkpoint={files[name]}: {message.format(**files)}\n"


@pytest.mark.parametrize("name, message", [("missing", "does not exist"), ("empty", "is empty"),
                                           ("folder", "is a folder; pass a file")])
def test_eval_text_must_be_a_readable_file(name, message, files, capsys):
    err = run("eval", [files["ckpt"], "--text", files[name]], capsys)
    assert err == f"nplm: error: --text={files[name]}: {message}\n"


@pytest.mark.parametrize("command, flag", [("eval", "--json"), ("mix", "--json"), ("compare", "--markdown"),
                                           ("compare", "--csv"), ("compare", "--html")])
def test_output_files_must_not_be_folders_or_below_a_file(command, flag, files, capsys):
    first = files["folder"] if command == "compare" else files["ckpt"]
    err = run(command, [first, flag, files["folder"]], capsys)
    assert err == f"nplm: error: {flag}={files['folder']}: is a folder; pass a file name\n"
    below_a_file = os.path.join(files["text"], "out.md")
    err = run(command, [first, flag, below_a_file], capsys)
    assert err == f"nplm: error: {flag}={below_a_file}: {files['text']} is a file, not a folder\n"


@pytest.mark.parametrize("command", ["eval", "mix"])
def test_data_dir_must_not_be_a_file(command, files, capsys):
    err = run(command, [files["ckpt"], "--data-dir", files["text"]], capsys)
    assert err == f"nplm: error: --data-dir={files['text']}: is a file; pass a folder (it is created if missing)\n"


def test_compare_paths_and_plots_folder(files, tmp_path, capsys):
    err = run("compare", [files["missing"]], capsys)
    assert err.startswith(f"nplm: error: paths={files['missing']}: does not exist; pass a run or sweep folder")
    err = run("compare", [files["text"]], capsys)
    assert err.startswith(f"nplm: error: paths={files['text']}: is a file; pass a run or sweep folder")
    err = run("compare", [files["folder"], "--plots", files["text"]], capsys)  # an existing file
    assert err == f"nplm: error: --plots={files['text']}: is a file; pass a folder (it is created if missing)\n"
    err = run("compare", [files["folder"], "--markdown", str(tmp_path / "new" / "t.md")], capsys)
    assert err == f"nplm: error: no metrics.json below {files['folder']}; is this an nplm output folder?\n"
    assert not (tmp_path / "new").exists()  # nothing written when the command fails


def test_missing_and_unknown_arguments_get_one_line(files, capsys):
    assert run("generate", [], capsys) == \
        "nplm: error: the following arguments are required: checkpoint (see nplm-generate --help)\n"
    assert run("predict", [files["ckpt"], "x", "--topk", "3"], capsys) == \
        "nplm: error: unrecognized arguments: --topk 3 (see nplm-predict --help)\n"


def test_python_api_applies_the_same_checks(files):
    from nplm.errors import UserError

    with pytest.raises(UserError, match=r"^--temperature=nan: must be a finite number >= 0"):
        generate.generate(files["ckpt"], temperature=float("nan"))
    with pytest.raises(UserError, match=r"^--top-k=-3: must be an integer >= 0"):
        generate.generate(files["ckpt"], top_k=-3)
    with pytest.raises(UserError, match=r"^--top-k=0: must be an integer >= 1"):
        predict.predict(files["ckpt"], "the", top_k=0)


@pytest.mark.parametrize("argv, message", [
    (["nplm.cli.generate", "{ckpt}", "--temperature", "nan"],
     "nplm: error: --temperature=nan: must be a finite number >= 0 (0 = always the most likely token)\n"),
    (["nplm.cli.generate", "{ckpt}", "--top-k", "-3"],
     "nplm: error: --top-k=-3: must be an integer >= 0 (0 = sample among all tokens)\n"),
    (["nplm.cli.predict", "{ckpt}", "the", "--oov", "drop"], "nplm: error: --oov=drop: must be one of: unk, bengio\n"),
    (["nplm.cli.evaluate", "{empty}"], "nplm: error: checkpoint={empty}: is empty; not a checkpoint\n"),
    (["nplm.cli.mix", "{ckpt}", "--weight", "nan"], "nplm: error: --weight=nan: must be a finite number in [0, 1]\n"),
    (["nplm.cli.compare", "{folder}", "--plots", "{text}"],
     "nplm: error: --plots={text}: is a file; pass a folder (it is created if missing)\n"),
])
def test_as_a_subprocess_one_line_and_exit_2(argv, message, files):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", *(a.format(**files) for a in argv)], capture_output=True,
                            text=True, env=env, timeout=120)
    assert (result.returncode, result.stderr, result.stdout) == (2, message.format(**files), "")


def test_flags_are_checked_before_torch_is_imported():
    """eval, generate, predict, mix and compare parse their flags without loading torch or Lightning."""
    code = ("import sys, nplm.cli.evaluate, nplm.cli.generate, nplm.cli.predict, nplm.cli.mix, nplm.cli.compare; "
            "print(sorted(m for m in ('torch', 'pytorch_lightning', 'wandb') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.stdout == "[]\n", result.stderr
