"""Windows, batches, vocabulary, splits and corpus loaders."""

from __future__ import annotations

import pytest
import torch

from nplm.data.corpora import load_corpus, split_sizes
from nplm.data.corpora.toy import TOY_SENTENCES
from nplm.data.datamodule import LMDataModule
from nplm.data.tokenizers import clean_brown_text, gpt2
from nplm.data.vocabulary import UNK, Vocabulary
from nplm.data.windows import BatchIndices, Windows

from conftest import FAKE_BROWN_SENTENCES, SHARED_NLTK, make_fake_brown


def test_windows_are_a_zero_copy_view_with_context_and_target():
    ids = torch.arange(10)
    w = Windows(ids, context_size=3)
    assert len(w) == 7
    assert w.windows.untyped_storage().data_ptr() == ids.untyped_storage().data_ptr()
    context, target = w[torch.tensor([0, 6])]
    assert context.tolist() == [[0, 1, 2], [6, 7, 8]]
    assert target.tolist() == [3, 9]


def test_batches_cover_every_window_once_and_reshuffle_reproducibly():
    sampler = BatchIndices(1000, 64, shuffle=True, seed=7)
    epoch0 = torch.cat(list(sampler))
    assert sorted(epoch0.tolist()) == list(range(1000))
    assert len(list(sampler)) == len(sampler) == 16
    again = torch.cat(list(BatchIndices(1000, 64, shuffle=True, seed=7)))
    assert torch.equal(epoch0, again)
    sampler.set_epoch(1)
    assert not torch.equal(epoch0, torch.cat(list(sampler)))


def test_off_the_cpu_the_next_epochs_order_is_drawn_ahead_and_is_the_same_order(monkeypatch):
    """Where the training runs off the host, each epoch's iterator starts drawing the next epoch's permutation in a
    thread; the orders are those drawn on demand, for the epoch drawn ahead, one skipped to, and with shards."""
    import nplm.data.windows as windows

    def epochs(sampler, numbers):
        out = []
        for epoch in numbers:
            sampler.set_epoch(epoch)
            out.append(torch.cat(list(sampler)))
        return out

    want = epochs(BatchIndices(1000, 64, shuffle=True, seed=7), [0, 1, 2, 5, 6])
    want_shard = epochs(BatchIndices(1000, 64, shuffle=True, seed=7, rank=1, world_size=2), [0, 1])
    monkeypatch.setattr(windows, "draws_ahead", lambda device: True)
    sampler = BatchIndices(1000, 64, shuffle=True, seed=7)
    iter(sampler)
    assert sampler._ahead.epoch == 1 and torch.equal(sampler._ahead.result(), want[1])
    got = epochs(sampler, [0, 1, 2, 5, 6])  # (epoch 5: drawn on demand, not the 3 drawn ahead)
    assert all(torch.equal(a, b) for a, b in zip(got, want)) and sampler._ahead.epoch == 7
    sharded = epochs(BatchIndices(1000, 64, shuffle=True, seed=7, rank=1, world_size=2), [0, 1])
    assert all(torch.equal(a, b) for a, b in zip(sharded, want_shard))


def test_an_order_that_failed_to_draw_ahead_is_drawn_again():
    from nplm.data.windows import DrawnAhead, draws_ahead

    def draw(epoch):
        raise RuntimeError("out of memory")

    assert DrawnAhead(draw, 3).result() is None
    sampler = BatchIndices(100, 10, shuffle=True, seed=1)
    sampler._ahead = DrawnAhead(draw, 0)
    assert sorted(torch.cat(list(sampler)).tolist()) == list(range(100))
    assert not draws_ahead(torch.device("cpu")) and draws_ahead(torch.device("cuda"))


def test_an_order_drawn_ahead_for_a_gpu_is_plain_host_memory():
    """The thread that draws ahead must make no CUDA call (pinned memory is allocated through CUDA): under a CUDA
    graph capture of the training step, in PyTorch's default capture mode, any thread's such call is an error."""
    order = BatchIndices(1000, 64, shuffle=True, seed=7, device="cuda")._draw(1)
    assert order.device.type == "cpu" and not order.is_pinned()
    assert torch.equal(order, torch.randperm(1000, generator=torch.Generator().manual_seed(8)))


def test_batches_are_sharded_across_ranks_without_overlap():
    shards = [torch.cat(list(BatchIndices(100, 10, True, seed=1, rank=r, world_size=2))) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == 50
    assert not set(shards[0].tolist()) & set(shards[1].tolist())


def test_vocabulary_min_count_max_vocab_and_unk():
    stream = "a a a b b c d d d d".split()
    v = Vocabulary.build([stream], min_count=2)
    assert v.tokens == ["d", "a", "b", UNK]
    assert v.counts == [4, 3, 2, 1]
    assert v.encode(["a", "zzz", "c"]).tolist() == [1, 3, 3]
    assert v.oov_rate(["a", "c", "zzz", "d"]) == 0.5
    assert Vocabulary.build([stream], max_vocab=3).tokens == ["d", "a", UNK]
    assert Vocabulary.from_dict(v.to_dict()).index == v.index


def test_split_sizes_counts_fractions_and_rest():
    assert split_sizes(1000, 0.9, None, 0) == (900, 100, 0)
    assert split_sizes(1000, 800, 150, None) == (800, 150, 50)
    with pytest.raises(Exception, match="the splits need 1100 tokens, more than the corpus' 1000"):
        split_sizes(1000, 800, 300, None)


def test_tiny_shakespeare_shipped_copy_matches_the_notebook_split():
    text = load_corpus({"name": "tiny_shakespeare", "train_size": 0.9, "valid_size": None, "test_size": 0},
                       "unused")
    assert (len(text.train), len(text.valid), len(text.test)) == (1_003_854, 111_540, 0)
    assert len(set(text.train) | set(text.valid)) == 65
    assert list(text.files.values()) == ["86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"]


def test_valid_windows_take_context_from_the_end_of_train(tmp_path):
    dm = LMDataModule({"name": "tiny_shakespeare", "path": None, "train_size": 0.9, "valid_size": None,
                       "test_size": 0, "vocab_from": "all", "unk": None, "order": "sorted"}, 5, 8, 8)
    dm.setup()
    assert len(dm.vocab) == 65 and dm.vocab.tokens[0] == "\n"
    assert dm.stats["valid"].predicted == 111_540  # every valid character is scored
    context, target = dm.windows["valid"][torch.tensor([0])]
    assert context[0].tolist() == dm.ids["train"][-5:].tolist()
    assert target.item() == dm.ids["valid"][0].item()


def test_the_loader_hands_a_group_of_gathered_batches_on_as_they_are():
    """The training loader's groups reach the LightningModule as the dataset gathered them: no collate walk, and
    Lightning's transfer hook passes batches already on the model's device through (the same tensors); a batch
    elsewhere still moves."""
    dm = LMDataModule({"name": "toy"}, 3, 8, 8)
    dm.setup()
    dm.group_training(4)
    group = next(iter(dm.train_dataloader()))
    assert len(group) == 4 and all(context.shape == (8, 3) and target.shape == (8,) for context, target in group)
    assert dm.transfer_batch_to_device(group, torch.device("cpu"), 0) is group
    moved = dm.transfer_batch_to_device(group, torch.device("meta"), 0)
    assert moved is not group and moved[3][1].device == torch.device("meta")
    assert [t.shape for t in moved[3]] == [t.shape for t in group[3]]


def test_toy_corpus_has_twenty_sentences_with_eos():
    text = load_corpus({"name": "toy"}, "unused")
    assert len(TOY_SENTENCES) == 20
    assert text.train.count("<eos>") == 20 and text.train[:5] == ["the", "cat", "sat", "down", "<eos>"]


def test_fake_brown_word_stream_and_gpt2_pipeline(tmp_path):
    nltk_data = make_fake_brown(tmp_path)
    words = load_corpus({"name": "brown", "nltk_data": str(nltk_data), "download": False,
                         "train_size": 100, "valid_size": 20, "test_size": None}, tmp_path)
    assert words.train[:4] == ["The", "jury", "said", "``"]
    assert len(words.train) == 100 and len(words.valid) == 20
    pieces = load_corpus({"name": "brown_gpt2", "nltk_data": str(nltk_data), "download": False,
                          "train_size": 0.8, "valid_size": 0.1, "test_size": None}, tmp_path)
    assert pieces.train[:8] == ["The", " jury", " said", ' "', "the", " election", " was", " fair"]


def test_brown_markers_end_every_paragraph_and_every_text(tmp_path):
    nltk_data = make_fake_brown(tmp_path)  # 2 texts of 12 copies of the one-sentence paragraphs
    paragraphs = 2 * 12 * len(FAKE_BROWN_SENTENCES)
    cfg = {"name": "brown", "nltk_data": str(nltk_data), "download": False, "train_size": 1.0,
           "valid_size": 0, "test_size": None}
    words = load_corpus(cfg, tmp_path).train
    marked = load_corpus({**cfg, "markers": True}, tmp_path).train
    assert len(marked) == len(words) + paragraphs + 2
    assert marked.count("<p>") == paragraphs and marked.count("<text>") == 2
    assert marked[marked.index("<p>") - 1:marked.index("<p>") + 2] == [".", "<p>", "It"]  # 2nd paragraph
    assert marked[-2:] == ["<p>", "<text>"]
    assert [w for w in marked if w not in ("<p>", "<text>")] == words


def test_brown_cleaning_and_gpt2_pattern():
    text = clean_brown_text("He said `` no '' , and the mayor 's men did n't ( really ) go .")
    assert text == "He said \"no\", and the mayor's men didn't (really) go."
    assert gpt2("I'll go, ok?") == ["I", "'ll", " go", ",", " ok", "?"]


@pytest.mark.skipif(not (SHARED_NLTK / "corpora" / "brown.zip").is_file(), reason="no local Brown copy")
@pytest.mark.slow
def test_real_brown_follows_the_bengio_2003_protocol():
    dm = LMDataModule({"name": "brown", "nltk_data": str(SHARED_NLTK), "download": False, "train_size": 800_000,
                       "valid_size": 200_000, "test_size": None, "vocab_from": "all", "min_count": 4}, 4, 8, 8)
    dm.setup()
    assert len(dm.vocab) == 17_905
    assert [dm.stats[s].tokens for s in ("train", "valid", "test")] == [800_000, 200_000, 161_192]
    assert 0.04 < dm.stats["test"].oov_rate < 0.05


@pytest.mark.skipif(not (SHARED_NLTK / "corpora" / "brown.zip").is_file(), reason="no local Brown copy")
@pytest.mark.slow
def test_real_brown_with_the_papers_paragraph_and_text_marks():
    dm = LMDataModule({"name": "brown", "nltk_data": str(SHARED_NLTK), "download": False, "markers": True,
                       "train_size": 800_000, "valid_size": 200_000, "test_size": None, "vocab_from": "all",
                       "min_count": 4}, 4, 8, 8)
    dm.setup()
    assert len(dm.vocab) == 17_907  # the two marks join the vocabulary
    assert [dm.stats[s].tokens for s in ("train", "valid", "test")] == [800_000, 200_000, 177_359]


def test_download_verifies_the_checksum_and_writes_atomically(tmp_path):
    import hashlib

    from nplm.data.sources import download
    from nplm.errors import UserError

    source = tmp_path / "remote.txt"
    source.write_text("To be, or not to be")
    good = hashlib.sha256(source.read_bytes()).hexdigest()
    dest = download(source.as_uri(), tmp_path / "data" / "input.txt", good)
    assert dest.read_text() == "To be, or not to be"
    with pytest.raises(UserError, match=r"has sha256 [0-9a-f]{64}, expected 0+; the download is corrupt"):
        download(source.as_uri(), tmp_path / "data" / "other.txt", "0" * 64)
    assert not (tmp_path / "data" / "other.txt").exists() and not list((tmp_path / "data").glob("*.part"))
    with pytest.raises(UserError, match=r"could not download .*; put a local copy at"):
        download((tmp_path / "missing.txt").as_uri(), tmp_path / "data" / "x.txt", None)
