"""Mistakes that do not depend on the data are refused before the corpus is read: one line naming the key
the user typed and the fix. The corpus's `setup` is replaced by one that fails the test if it runs."""

from __future__ import annotations

import pytest

from conftest import TOY_FAST, compose_cfg
from nplm.data.datamodule import LMDataModule
from nplm.errors import UserError
from nplm.training.train import train


@pytest.fixture
def no_data(monkeypatch):
    def read(self, *args, **kwargs):
        raise AssertionError("the corpus was read before the mistake was refused")

    monkeypatch.setattr(LMDataModule, "setup", read)


@pytest.fixture(scope="module")
def softmax_checkpoint(tmp_path_factory):
    """A toy run's last checkpoint (softmax head)."""
    folder = tmp_path_factory.mktemp("softmax")
    train(compose_cfg(folder, *TOY_FAST, "trainer.max_epochs=1"))
    return folder / "run" / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize("overrides, message", [
    (["corpus.tokenizer=bpe", "corpus.vocab_size=3"],
     "corpus.vocab_size=3: must be at least 256 with corpus.tokenizer=bpe (its alphabet is the 256 bytes), "
     "e.g. corpus.vocab_size=512"),
    (["head=hierarchical", "tree=file", "tree.path=nosuch.json"], "tree.path=nosuch.json: must be an existing file: none at "),
    (["trainer.precision=16-mixed"], "trainer.precision=16-mixed: a CPU has no float16 mixed precision (Lightning would "
                                     "train in bf16-mixed instead); set trainer.precision=bf16-mixed, or 32"),
    (["trainer.max_time=00:00:00:00"], 'trainer.max_time=00:00:00:00: must be a duration "DD:HH:MM:SS" longer than 0'),
])
def test_a_mistake_is_refused_before_the_data(tmp_path, no_data, overrides, message):
    with pytest.raises(UserError) as err:
        train(compose_cfg(tmp_path, *TOY_FAST, *overrides))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_a_data_dir_that_cannot_be_written_is_refused_before_the_data(tmp_path, no_data):
    (tmp_path / "afile").write_text("")
    cfg = compose_cfg(tmp_path, *TOY_FAST)
    cfg.paths.data_dir = str(tmp_path / "afile" / "cache")
    with pytest.raises(UserError, match=rf"^paths.data_dir={tmp_path}/afile/cache: {tmp_path}/afile is a file, not a "
                                        "folder; give paths.data_dir a folder you can write$"):
        train(cfg)


def test_resuming_a_checkpoint_of_another_head_is_refused_before_the_data(tmp_path, no_data, softmax_checkpoint):
    with pytest.raises(UserError, match=rf"^resume: checkpoint '{softmax_checkpoint}' was trained with head=softmax, not "
                                        "head=hierarchical; resume it with head=softmax$"):
        train(compose_cfg(tmp_path, *TOY_FAST, "head=hierarchical", "tree=balanced", f"resume={softmax_checkpoint}"))
    (tmp_path / "broken.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=r"broken.ckpt: cannot be read safely"):
        train(compose_cfg(tmp_path, *TOY_FAST, f"resume={tmp_path / 'broken.ckpt'}"))


@pytest.mark.parametrize("head", ["nce", "importance_sampling"])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_noise_distribution_that_gives_words_no_chance_names_the_heads_key(tmp_path, head):
    with pytest.raises(UserError, match=rf"^head.proposal_power=1000: the noise distribution gives \d+ of the \d+ words "
                                        r"a probability of 0 in float32; lower head.proposal_power"):
        train(compose_cfg(tmp_path, *TOY_FAST, f"head={head}", "head.proposal_power=1000"))
    metrics = train(compose_cfg(tmp_path / "fine", *TOY_FAST, f"head={head}", "head.proposal_power=3",
                                "trainer.max_epochs=1"))
    assert metrics["val/ppl"] < 1e3  # a sharp but usable noise distribution trains (no overflow)


@pytest.mark.parametrize("argv", [
    ["corpus=toy", "corpus.tokenizer=bpe", "corpus.vocab_size=300", "corpus.max_vocab=100", "corpus.min_count=5"],
    ["-m", "corpus=toy", "corpus.tokenizer=bpe", "corpus.vocab_size=300,400", "corpus.max_vocab=100"],
])
def test_keys_a_subword_vocabulary_makes_meaningless_are_refused(tmp_path, monkeypatch, argv):
    from hydra.core.hydra_config import HydraConfig

    from nplm.cli.train import check_composition

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", HydraConfig.instance().cfg)  # (check_composition sets it)
    with pytest.raises(UserError, match=r"^corpus.max_vocab=100: has no effect with corpus.tokenizer=bpe \(a vocabulary "
                                        r"of corpus.vocab_size pieces learned on the training split\); leave "
                                        r"corpus.max_vocab out"):
        check_composition(argv)
    check_composition(["corpus=brown", "corpus.tokenizer=bpe", "corpus.vocab_size=300"])  # brown's own min_count: fine
    check_composition(["corpus=toy", "corpus.tokenizer=bpe", "corpus.vocab_size=300", "~corpus.min_count"])  # deleting the key: fine
