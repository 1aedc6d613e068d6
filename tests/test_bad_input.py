"""User mistakes: one line `key=value: what is allowed`, exit status 2, no half-written run.

Most cases call `train(cfg)`; the command line's are `nplm-train`'s entry point called in this process
(`run_cli`); only what a fresh interpreter imports is checked in one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from nplm.config.schema import cpu_cores
from nplm.models import MODELS
from nplm.errors import UserError

from conftest import TOY_FAST, compose_cfg, error_lines, run_cli
from nplm.cli.train import main as nplm_train


def expect_error(tmp_path, message: str, *overrides: str) -> None:
    """train(cfg) refuses the config with exactly `message` (a regex when it starts with ^)."""
    from nplm.training.train import train

    with pytest.raises(UserError) as info:
        train(compose_cfg(tmp_path, *overrides))
    got = str(info.value)
    assert "\n" not in got
    if message.startswith("^"):
        assert __import__("re").match(message, got), got
    else:
        assert got == message
    assert not (tmp_path / "run").exists(), "a failed run must not leave a half-written directory"


def text_files(tmp_path, train_text: bytes | None, valid_text: bytes = b"a b c d e f\n") -> list[str]:
    train, valid = tmp_path / "train.txt", tmp_path / "valid.txt"
    if train_text is not None:
        train.write_bytes(train_text)
    valid.write_bytes(valid_text)
    return ["corpus=text_files", f"corpus.train={train}", f"corpus.valid={valid}"]


# -- settings: refused by the schema before any data is read ----------------------------------------------
@pytest.mark.parametrize("override,message", [
    ("seed=abc", "seed=abc: must be an integer from 0 to 4294967295"),
    ("seed=1.5", "seed=1.5: must be an integer from 0 to 4294967295"),
    ("optimizer.lr=abc", "optimizer.lr=abc: must be a finite number > 0"),
    ("optimizer.lr=nan", "optimizer.lr=nan: must be a finite number > 0"),
    ("optimizer.lr=0", "optimizer.lr=0: must be a finite number > 0"),
    ("optimizer.lr=-0.1", "optimizer.lr=-0.1: must be a finite number > 0"),
    ("optimizer.eps=0", "optimizer.eps=0: must be a finite number > 0"),
    ("optimizer.betas=[1,2]", "optimizer.betas=[1,2]: must be two numbers in [0, 1), e.g. [0.9,0.999]"),
    ("threads=-1", "threads=-1: must be an integer >= 1 or null"),
    ("threads=0", "threads=0: must be an integer >= 1 or null"),
    ("model.context_size=2.5", "model.context_size=2.5: must be an integer >= 1"),
    ("model.context_size=0", "model.context_size=0: must be an integer >= 1"),
    ("model.embed_dim=0", "model.embed_dim=0: must be an integer >= 1"),
    ("model.hidden_dim=-3", "model.hidden_dim=-3: must be an integer >= 0"),
    ("model.dropout=1", "model.dropout=1: must be a number in [0, 1)"),
    ("model.activation=relu", "model.activation=relu: must be one of: tanh, sigmoid"),
    ("data.batch_size=0", "data.batch_size=0: must be an integer >= 1"),
    ("trainer.max_epochs=0", "trainer.max_epochs=0: must be an integer >= 1 (-1, endless training, is refused)"),
    ("trainer.max_epochs=-1", "trainer.max_epochs=-1: must be an integer >= 1 (-1, endless training, is refused)"),
    ("trainer.limit_train_batches=0", "trainer.limit_train_batches=0: must be a count >= 1 or a fraction in (0, 1] "
                                      "of the batches (0 would run no batches) or null"),
    ("callbacks.early_stopping_patience=-1", "callbacks.early_stopping_patience=-1: must be an integer >= 1 or null"),
    ("callbacks.early_stopping_patience=0", "callbacks.early_stopping_patience=0: must be an integer >= 1 or null"),
    ("callbacks.ema_decay=1", "callbacks.ema_decay=1: must be a number in (0, 1) or null"),
    ("callbacks.ema_decay=fast", "callbacks.ema_decay=fast: must be a number in (0, 1) or null"),
    ("corpus.min_count=0", "corpus.min_count=0: must be an integer >= 1"),
    ("+corpus.anything=1", "corpus.anything=1: unknown key of corpus=toy; valid keys: max_vocab, min_count, name, "
                           "order, tokenizer, unk, vocab_from, vocab_size"),
    ("corpus.tokenizer=sentencepiece", "corpus.tokenizer=sentencepiece: must be one of: bpe, wordpiece, unigram or null"),
    ("+model.foo=1", "model.foo=1: unknown key of model=nplm; valid keys: activation, context_size, direct, dropout, "
                     "embed_dim, hidden_dim, name, sparse_embeddings"),
    ("+foo=1", "^foo=1: unknown key; valid top-level keys: callbacks, capture_dry, compile, compile_backend, "
               "compile_mode, corpus, cuda_graphs, data, "),
    ("tree=file", "tree.path=???: must be set for tree=file: the path of a file (e.g. tree.path=<run>/tree.json)"),
    ("head=hierarchical head.node_init=uniform", "head.node_init=uniform: must be one of: random, zero, unigram"),
    ("head=adaptive head.cutoffs=[3,2]", "head.cutoffs=[3,2]: must be a non-empty list of increasing integers >= 1, "
                                         "e.g. [2000,10000] or null"),
    ("optimizer.lr_decay=0.1 optimizer.plateau_factor=0.5",
     "optimizer.plateau_factor=0.5: must be 1 when optimizer.lr_decay > 0 (two schedules; set one of them)"),
    ("model.hidden_dim=0 model.direct=false",
     "model.hidden_dim=0: must be an integer >= 1 when model.direct=false (else there are no features)"),
    # rules across keys of one option and across groups: refused before the corpus is read or a phase trains
    ("head=hierarchical tree=learned tree.split=balanced tree.eps=0.1",
     "tree.eps=0.1: must be 0 with tree.split=balanced (BALANCED splits give one code per word); or set "
     "tree.split=adaptive"),
    ("head=class_based head.classes=tree tree=learned",
     "tree=learned: head=class_based makes no predicted word representations for the tree to cluster; "
     "use head=hierarchical, or a tree built from the corpus (e.g. tree=balanced)"),
    ("model=modern model.context_size=3 model.window=3 model.summaries=0 head=hierarchical model.tie_embeddings=true",
     "model.tie_embeddings=true: head=hierarchical has no output vector per word to tie to the model's input word "
     "vectors; set model.tie_embeddings=auto (ties where the head can) or false, or use "
     "head=adaptive|importance_sampling|nce|softmax"),
    ("model=modern model.tie_embeddings=yes", "model.tie_embeddings=yes: must be auto, true or false"),
    ("optimizer=adamw trainer.precision=16-mixed trainer.gradient_clip_val=0.25",
     "trainer.precision=16-mixed: gradient clipping (trainer.gradient_clip_val=0.25) with a fused optimizer, which "
     "unscales fp16 gradients inside its update; set optimizer.fused=false, or trainer.precision=bf16-mixed"),
    ("optimizer=sgd optimizer.momentum=0.9 model.sparse_embeddings=true",
     "optimizer.momentum=0.9: must be 0 with model.sparse_embeddings=true (row-sparse updates have no momentum); "
     "set optimizer.momentum=0 or model.sparse_embeddings=false"),
    ("optimizer=sgd optimizer.momentum=0.5 head=nce head.sparse=true",
     "^optimizer.momentum=0.5: must be 0 with head.sparse=true"),
    ("compile=true model.sparse_embeddings=true", "compile=true: torch.compile cannot train the row-sparse "
                                                  "gradients of model.sparse_embeddings=true; set compile=false or "
                                                  "model.sparse_embeddings=false"),
    ("compile=true head=hierarchical head.sparse=true", "^compile=true: torch.compile cannot train the row-sparse "
                                                        "gradients of head.sparse=true"),
    ("head=adaptive head.div_value=1000", "head.div_value=1000 leaves tail cluster 1 a 0-dimensional projection of "
                                          "the 40 features; lower head.div_value or use fewer cutoffs"),
    ("head=adaptive head.div_value=4 head.cutoffs=[5,10,20]",
     "head.div_value=4 leaves tail cluster 3 a 0-dimensional projection of the 40 features; lower head.div_value "
     "or use fewer cutoffs"),  # (F = 3 x 8 direct + 16 hidden; the tails: 40 // 4 = 10, 40 // 16 = 2, 40 // 64 = 0)
    ("stop_at=1", "stop_at=1: that time has passed; give a later Unix time"),
    ("trainer.deterministic=true +trainer.benchmark=true",
     "trainer.deterministic=true: torch ignores it while trainer.benchmark=true picks cuDNN's fastest algorithms; set "
     "trainer.benchmark=false (or null), or trainer.deterministic=false"),
    ("trainer.precision=bf16", "^trainer.precision=bf16: must be one of: .*bf16-mixed"),  # Lightning's old names
    ("trainer.precision=16", "^trainer.precision=16: must be one of: .*16-mixed"),
    # what Lightning refuses when it makes the Trainer, and more CPU processes than cores
    ("trainer.devices=1000", "trainer.devices=1000: at most %d, the CPU cores of this machine (one process each); "
                             "lower trainer.devices"),
    ("trainer.devices=[0,1]", "trainer.devices=[0,1]: Lightning refuses it here (`devices` selected with "
                              "`CPUAccelerator` should be an int > 0); change trainer.devices "
                              "(e.g. trainer.devices=1)"),
    ("+trainer.strategy=bogus", "^trainer.strategy=bogus: Lightning refuses it here \\(You selected an invalid "
                                "strategy name: .*\\); change trainer.strategy \\(e.g. trainer.strategy=auto\\)$"),
    ("+trainer.strategy=deepspeed", "^trainer.strategy=deepspeed: Lightning refuses it here \\(.*\\); change "
                                    "trainer.strategy"),
])
def test_bad_settings(tmp_path, override, message):
    if "%d" in message:
        message = message % cpu_cores()
    expect_error(tmp_path, message, *TOY_FAST, *override.split())


def test_lbl_tied_to_a_head_without_output_vectors(tmp_path):
    expect_error(tmp_path, "^model.tie_embeddings=true: head=class_based has no output vector per word",
                 "corpus=toy", "model=lbl", "head=class_based", "model.tie_embeddings=true")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("override,message", [
    ("+trainer.strategy=fsdp", "trainer.strategy=fsdp: Lightning refuses it here (The strategy `fsdp` requires a GPU "
                               "accelerator, but received `accelerator='cpu'`); change trainer.strategy (e.g. "
                               "trainer.strategy=auto)"),
    ("trainer.accelerator=mps", "^trainer.accelerator=mps: (no Apple MPS device here|Lightning refuses it here)"),
])
def test_settings_this_cpu_machine_cannot_run(tmp_path, override, message):
    expect_error(tmp_path, message, *TOY_FAST, *override.split())


def test_corpus_encoding_must_be_known_and_text_files_need_their_files(tmp_path):
    expect_error(tmp_path, "corpus.encoding=klingon: must be a text encoding Python knows, e.g. utf-8 or latin-1",
                 *text_files(tmp_path, b"a b c\n"), "corpus.encoding=klingon")
    expect_error(tmp_path, "corpus.train=null: must be set for corpus=text_files: the path of a file "
                 "(e.g. corpus.train=/path/to/train.txt)", "corpus=text_files")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpu_trainer_without_a_gpu(tmp_path):
    expect_error(tmp_path, "trainer.accelerator=gpu: no CUDA GPU is visible on this machine; use trainer=default (CPU)",
                 *TOY_FAST, "trainer=gpu")


# -- data: refused once it is read, before any run folder or W&B run --------------------------------------
def test_min_count_leaving_one_word_is_refused(tmp_path):
    expect_error(tmp_path, "corpus.min_count=100000: leaves 1 word(s) in the vocabulary of corpus 'toy' (<unk>); "
                 "a language model needs at least 2, lower corpus.min_count", *TOY_FAST, "corpus.min_count=100000")


def test_context_longer_than_a_split(tmp_path):
    expect_error(tmp_path, "model.context_size=5: longer than the train split of corpus 'text_files' (3 tokens; it "
                 "needs at least 6); use a smaller context or more text",
                 *text_files(tmp_path, b"a b\n"), "model.context_size=5")


def test_a_fraction_of_batches_that_leaves_none(tmp_path):
    expect_error(tmp_path, "trainer.limit_train_batches=0.001: leaves no batch of the train split (4 batches of 32 "
                 "windows); use at least 0.25, or a count like 1", *TOY_FAST, "trainer.limit_train_batches=0.001")


@pytest.mark.skipif(cpu_cores() < 2, reason="two DDP processes need two CPU cores")
def test_more_processes_than_training_batches(tmp_path):
    """Each DDP rank trains on every 2nd batch: 1 batch of 128 windows leaves both none (Lightning warned,
    trained nothing and called the run finished)."""
    expect_error(tmp_path, "trainer.devices=2: the 2 training processes share the training split's 1 batch(es) of "
                 "data.batch_size=128 windows (118 in all), one in 2 each: none; use data.batch_size=59 or lower, "
                 "or fewer devices", *TOY_FAST, "trainer=ddp", "data.batch_size=128")


def test_several_nodes_without_a_cluster(tmp_path, monkeypatch):
    """No SLURM, no torchrun, no MASTER_ADDR: Lightning waited for the second node forever."""
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    expect_error(tmp_path, "trainer.num_nodes=2: no cluster here to join (no SLURM or torchrun, MASTER_ADDR unset), "
                 "so the run would wait for the other nodes forever; start it on every node with MASTER_ADDR, "
                 "MASTER_PORT and NODE_RANK set, or drop trainer.num_nodes", *TOY_FAST, "+trainer.num_nodes=2")


def test_a_validation_interval_longer_than_an_epoch(tmp_path):
    expect_error(tmp_path, "trainer.val_check_interval=100: more than the 4 training batches of an epoch; use at most "
                 "4, or a fraction of the epoch such as 0.5", *TOY_FAST, "trainer.val_check_interval=100")


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_split_with_no_tokens(tmp_path):
    expect_error(tmp_path, "corpus.valid_size=0: the valid split of corpus 'tiny_shakespeare' has no tokens; "
                 "raise corpus.valid_size", "corpus=tiny_shakespeare", "corpus.valid_size=0", "corpus.test_size=0.1")


def test_split_sizes_beyond_the_corpus(tmp_path):
    expect_error(tmp_path, "corpus.train_size=200: with corpus.valid_size=100 and corpus.test_size=null the splits "
                 "need 300 tokens, more than the corpus' 205; lower them", "corpus=tiny_shakespeare",
                 f"corpus.path={_small_text(tmp_path)}", "corpus.train_size=200", "corpus.valid_size=100",
                 "corpus.test_size=null")


def _small_text(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text("x" * 205)
    return path


def test_missing_corpus_file(tmp_path):
    path = tmp_path / "train.txt"
    expect_error(tmp_path, f"corpus.train={path}: no such file ({path}); set corpus.train=/path/to/file",
                 *text_files(tmp_path, None))


def test_folder_given_as_corpus_file(tmp_path):
    expect_error(tmp_path, f"corpus.path={tmp_path}: is a folder, not a text file; give the path of a file",
                 "corpus=tiny_shakespeare", f"corpus.path={tmp_path}")


def test_empty_corpus_file(tmp_path):
    expect_error(tmp_path, f"corpus.train={tmp_path / 'train.txt'}: the file is empty (3 bytes, no text); give "
                 "corpus.train a file with text", *text_files(tmp_path, b"  \n"))


def test_non_utf8_corpus_file_names_the_offset_and_the_setting(tmp_path):
    expect_error(tmp_path, f"corpus.train={tmp_path / 'train.txt'}: not valid utf-8 at byte offset 10 (line 2, byte "
                 "0xe9); set corpus.encoding to the file's encoding (e.g. corpus.encoding=latin-1) or convert the "
                 "file to utf-8", *text_files(tmp_path, b"a b c\ncaf \xe9 au lait\n"))


def test_brown_offline_without_a_local_copy(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [])
    monkeypatch.delenv("NLTK_DATA", raising=False)
    (tmp_path / "empty").mkdir()
    expect_error(tmp_path, r"^NLTK corpus 'brown' not found .* downloads are off; set NLTK_DATA=/dir/with/corpora/"
                 r"brown.zip", "corpus=brown", f"corpus.nltk_data={tmp_path / 'empty'}", "corpus.download=false")


# -- end to end: the command line --------------------------------------------------------------------
def cli(tmp_path, *args: str):
    return run_cli(nplm_train, f"hydra.run.dir={tmp_path / 'run'}", "logger=none", *args, cwd=tmp_path)


@pytest.mark.parametrize("args,message", [
    (["seed=abc"], "seed=abc: must be an integer from 0 to 4294967295"),
    (["trainer.max_epochs=-1"], "trainer.max_epochs=-1: must be an integer >= 1 (-1, endless training, is refused)"),
    (["+corpus.anything=1"], "corpus.anything=1: unknown key of corpus=toy; valid keys: max_vocab, min_count, name, "
                             "order, tokenizer, unk, vocab_from, vocab_size"),
    # refused before Hydra starts: no config has the key or the option
    (["model.embedding=16"], "model.embedding=16: unknown key of model; valid keys: "
                             + ", ".join(sorted({"name", *(k for o in MODELS.options().values() for k in o.keys)}))),
    # (of any model: activation, context_matrices, context_size, direct, dropout, embed_dim, ...)
    (["corpus=wikipedia"], "corpus=wikipedia: no such option; valid: brown, brown_bengio2003, brown_gpt2, "
                           "brown_morin2005, hf, ptb, text_files, tiny_shakespeare, tiny_shakespeare_heldout, toy, "
                           "wikitext103, wikitext2"),
    # a key of another option of the group (Hydra alone says so in five lines, exit 1)
    (["head.node_dim=4"], "head.node_dim=4: not a key of head=softmax; it is a key of head=hierarchical: "
                          "add head=hierarchical"),
    (["optimizer.momentum=0.9"], "optimizer.momentum=0.9: not a key of optimizer=adam; it is a key of "
                                 "optimizer=sgd: add optimizer=sgd"),
    # heavy-ball momentum of 1 or more grows the step without bound: it trained, toward inf
    (["optimizer=sgd", "optimizer.momentum=2"], "optimizer.momentum=2: must be a number in [0, 1)"),
    # a key of a group without options that its yaml leaves out
    (["trainer.strategy=ddp"], "trainer.strategy=ddp: a key the trainer group's yaml does not set; add it with "
                               "+trainer.strategy=ddp"),
    # the cases: refused before the corpus is read (no traceback, no first phase trained)
    (["head=class_based", "head.classes=tree", "tree=learned"],
     "tree=learned: head=class_based makes no predicted word representations for the tree to cluster; "
     "use head=hierarchical, or a tree built from the corpus (e.g. tree=balanced)"),
    (["trainer.devices=1000"], "trainer.devices=1000: at most %d, the CPU cores of this machine (one process each); "
                               "lower trainer.devices"),
    # settings that would be accepted and then ignored: each refused, naming the key that decides
    (["model=transformer", "model.local_window=3"],
     "model.local_window=3: applies only with model.first_layer=local (here model.first_layer=attention); set "
     "model.first_layer=local, or leave model.local_window out"),
    (["model=transformer", "model.summaries=2"],
     "model.summaries=2: applies only with model.first_layer=nplm (here model.first_layer=attention); set "
     "model.first_layer=nplm, or leave model.summaries out"),
    (["model=transformer", "head=adaptive", "head.div_value=1000"],
     "head.div_value=1000: model=transformer ties the head's output vectors to its input vectors "
     "(model.tie_embeddings=auto), which fixes head.div_value=1.0; set model.tie_embeddings=false, or "
     "head.div_value=1.0"),
    (["model=lstm", "data.block_size=0"],
     "data.block_size=0: model=lstm trains on blocks of T tokens, carrying its state from one to the next, and has no "
     "window mode; give data.block_size a T > 0, or null for its T = 35"),
    (["model=lstm", "data.eval_batch_size=64"],
     "data.eval_batch_size=64: model=lstm reads each evaluation split as one stream, one block per batch, so it has "
     "no evaluation batch size; leave data.eval_batch_size out"),
    (["cuda_graphs=true"], "cuda_graphs=true: captures the training step on a CUDA device, and trainer.accelerator=cpu "
                           "trains on no CUDA device; set trainer=gpu, or leave cuda_graphs out"),
    (["corpus=brown", "corpus.nltk_data=/no/such/folder"],
     "corpus.nltk_data=/no/such/folder: must be an existing folder (empty: none) or null"),
    (["experiment=zaremba2014/small", "data.block_size=null"],
     "optimizer.lr: cannot be resolved (ValueError raised while resolving interpolation: data.block_size (the "
     "recipe's step is per unrolled step) must be a number, not None)"),
])
def test_cli_error_is_one_line_exit_2_and_leaves_nothing(tmp_path, args, message):
    if "%d" in message:
        message = message % cpu_cores()
    result = cli(tmp_path, "corpus=toy", *args)
    assert result.code == 2, result.err[-2000:]
    assert error_lines(result) == [f"nplm: error: {message}"]
    assert not (tmp_path / "run").exists()


def test_a_data_error_leaves_no_empty_output_folders(tmp_path):
    result = run_cli(nplm_train, "head=hierarchical", "tree=file", f"tree.path={tmp_path / 'missing.json'}",
                     "corpus=toy", "logger=none", cwd=tmp_path)
    assert result.code == 2
    missing = tmp_path / "missing.json"
    assert error_lines(result) == [f"nplm: error: tree.path={missing}: must be an existing file: none at {missing}"]
    assert list(tmp_path.iterdir()) == []  # not even outputs/toy/runs


def test_a_multirun_over_a_key_of_another_option_is_one_line(tmp_path):
    result = run_cli(nplm_train, "-m", "corpus=toy", "head.node_dim=4,8", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                     cwd=tmp_path)
    assert result.code == 2
    assert error_lines(result) == ["nplm: error: head.node_dim=4: not a key of head=softmax; it is a key of "
                                   "head=hierarchical: add head=hierarchical"]
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow  # every job of four sweeps composed and checked
def test_a_multirun_with_a_bad_value_in_a_later_job_runs_none(tmp_path):
    """Every job of a sweep is composed and checked before the first starts: the second job's mistake does not
    wait for the first to train (nor does a cross-key one, nor one Lightning refuses, nor one of a preset sweep)."""
    for sweep, args, message in [
            ("a", ["trainer.max_epochs=1,0"],  # (nothing trains, the toy corpus's default settings suffice)
             "trainer.max_epochs=0: must be an integer >= 1 (-1, endless training, is refused) (job #1 of the sweep's 2"),
            ("b", ["model=modern", "head=softmax,class_based", "model.tie_embeddings=true"],
             "model.tie_embeddings=true: head=class_based has no output vector per word"),
            ("c", [f"trainer.devices=1,{cpu_cores() + 1}"], f"trainer.devices={cpu_cores() + 1}: at most {cpu_cores()}"),
            ("d", ["+sweep=seeds", "optimizer.lr=-1"],
             "optimizer.lr=-1: must be a finite number > 0 (job #0 of the sweep's 5; no job has started)")]:
        result = run_cli(nplm_train, "-m", "corpus=toy", *args, "logger=none", f"hydra.sweep.dir={tmp_path / sweep}",
                         cwd=tmp_path)
        assert result.code == 2, result.err
        assert [line[:len("nplm: error: " + message)] for line in error_lines(result)] == ["nplm: error: " + message]
        assert error_lines(result)[0].endswith("; no job has started)")
        assert not (tmp_path / sweep).exists()


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_sweeps_jobs_are_those_of_hydras_basic_sweeper():
    """What the check before a sweep composes: the product of every override's values, a preset sweep's
    `hydra.sweeper.params` first and the command line's value of the same key instead; none for optuna."""
    from nplm.cli.train import CONF_DIR, _compose, sweep_jobs

    argv = ["+sweep=seeds", "corpus=toy", "seed=7,8", "model.embed_dim=8,16", "optimizer.lr=choice(0.1,0.2)"]
    jobs = sweep_jobs(argv, _compose(["+sweep=seeds", "corpus=toy"], CONF_DIR))
    assert len(jobs) == 8 and jobs[0] == ["seed=7", "+sweep=seeds", "corpus=toy", "model.embed_dim=8", "optimizer.lr=0.1"]
    assert sorted({job[0] for job in jobs}) == ["seed=7", "seed=8"]  # not the preset's 1,2,3,4,5
    assert len(sweep_jobs(["+sweep=seeds", "corpus=toy"], _compose(["+sweep=seeds", "corpus=toy"], CONF_DIR))) == 5
    assert sweep_jobs(["corpus=toy", "model.dropout=interval(0,0.5)"], _compose(["corpus=toy"], CONF_DIR)) is None
    optuna = ["+sweep=optuna", "corpus=toy"]  # (the sweep extra: hydra-optuna-sweeper)
    assert sweep_jobs(optuna, _compose(optuna, CONF_DIR)) is None


def test_a_deleted_key_is_deleted_in_the_check_before_the_run_and_in_each_sweep_job(tmp_path, monkeypatch):
    """`~head.div_value` removes the key an experiment file sets for another head: the check before the run
    composes with it (it had been left out, and the key then refused as unknown to head=softmax)."""
    from hydra.core.hydra_config import HydraConfig

    from nplm.cli.train import CONF_DIR, _compose, check_composition, sweep_jobs

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", HydraConfig.instance().cfg)  # (check_composition sets it)
    run = ["experiment=sun2021/transformer_small", "corpus=toy", "head=softmax", "~head.div_value"]
    check_composition(run)
    check_composition(["-m", *run[:2], "head=softmax,nce", "~head.div_value"])
    jobs = sweep_jobs([*run[:2], "head=softmax,nce", "~head.div_value"], _compose(run, CONF_DIR))
    assert [job[2:] for job in jobs] == [["head=softmax", "~head.div_value"], ["head=nce", "~head.div_value"]]
    with pytest.raises(UserError, match=r"^head.div_value=1.0: unknown key of head=softmax"):
        check_composition(run[:3])


@pytest.mark.slow  # a sweep whose first job trains
def test_in_a_multirun_a_job_whose_data_is_bad_fails_alone_and_records_its_error(tmp_path):
    (tmp_path / "train.txt").write_text("the cat sat on the mat\n" * 50)
    (tmp_path / "empty.txt").write_text("")
    sweep = tmp_path / "sweep"
    result = run_cli(nplm_train, "-m", *TOY_FAST, "corpus=text_files", f"corpus.train={tmp_path / 'train.txt'}",
                     f"corpus.valid={tmp_path / 'train.txt'},{tmp_path / 'empty.txt'}", "trainer.max_epochs=1",
                     "logger=none", "threads=1", f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path}", cwd=tmp_path)
    assert result.code == 1
    message = f"corpus.valid={tmp_path / 'empty.txt'}: the file is empty (0 bytes, no text)"
    assert any(line.startswith("nplm: error: " + message) for line in result.err.splitlines())
    ok, bad = (json.loads((sweep / n / "metrics.json").read_text()) for n in ("0", "1"))
    assert ok["status"] == "finished" and ok["metrics"]["val/ppl_best"] > 1
    assert bad["status"] == "failed" and bad["error"].startswith(message)


def python(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (what a command imports shows in its sys.modules)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_help_is_the_projects_own_and_imports_no_torch(tmp_path):
    code = ("import sys; sys.argv = ['nplm-train', '--help']\n"
            "from nplm.cli.train import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "heavy = [m for m in ('torch', 'pytorch_lightning', 'wandb', 'hydra') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    result = python(code)
    assert result.returncode == 0, result.stderr
    page = result.stdout
    for line in ("  tree", "    huffman                       Huffman (1952) tree of the training unigram counts",
                 "  seed                   seed of every random choice", "nplm-train -m model.context_size=2,4",
                 "resume=true", "nplm-compare"):
        assert line in page, line
    short = run_cli(nplm_train, "-h")
    assert short.code == 0 and short.out == page


@pytest.mark.slow  # a fresh interpreter imports torch (what it imports is the point)
def test_a_bad_value_is_refused_before_lightning_and_wandb_load():
    """The registered options' keys are read from their modules, which import torch; the check needs
    nothing more (the trainer, the loggers)."""
    code = ("import sys\n"
            "from nplm.cli.train import command_line\n"
            "try:\n    command_line(['corpus=toy', 'model.context_size=2.5'])\nexcept SystemExit as e:\n"
            "    assert e.code == 2, e.code\n"
            "heavy = [m for m in ('pytorch_lightning', 'lightning_fabric', 'wandb') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "nplm: error: model.context_size=2.5: must be an integer >= 1"


def test_import_nplm_is_cheap():
    result = subprocess.run([sys.executable, "-c", "import sys, nplm, nplm.config; "
                             "print(sorted(m for m in ('torch', 'pytorch_lightning', 'wandb') if m in sys.modules))"],
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]"


def test_checkpoint_errors(tmp_path):
    from nplm.training.checkpoint import read_checkpoint

    with pytest.raises(UserError, match=r"does not exist; pass a <run>/checkpoints/\*.ckpt file"):
        read_checkpoint(tmp_path / "nope.ckpt")
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=r"cannot be read safely \(UnpicklingError\)"):
        read_checkpoint(tmp_path / "bad.ckpt")
