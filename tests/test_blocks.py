"""Whole-block training and evaluation (`data.block_size`, `nplm.data.blocks`, `Model.block_features`):
the blocks score exactly the windows' tokens, the modern NPLM's block features are its window features,
and a run trains, evaluates and resumes on blocks."""

from __future__ import annotations

import json

import pytest
import torch

from nplm.data.blocks import BlockBatches, Blocks, index_batches
from nplm.data.windows import BatchIndices, Windows
from nplm.errors import UserError

from conftest import TOY_FAST, compose_cfg

K, W, G = 12, 4, 2
MODERN = {"name": "modern", "context_size": K, "window": W, "summaries": G, "embed_dim": 16, "hidden_dim": 24,
          "num_layers": 3, "dropout": 0.3}
SMALL = ["corpus=toy", "model=modern", f"model.context_size={K}", f"model.window={W}", f"model.summaries={G}",
         "model.embed_dim=16", "model.hidden_dim=24", "model.num_layers=2", "data.block_size=8", "data.batch_size=4",
         "data.eval_batch_size=3", "optimizer.lr=0.003"]


def modern(vocab_size=50, **changes):
    """A small modern NPLM with random weights (A too: not the plain mean), in eval mode."""
    from nplm.models import build_model

    torch.manual_seed(0)
    model = build_model({**MODERN, **changes}, vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("changes", [{}, {"residual": False, "layer_norm": False},
                                     {"context_size": W, "summaries": 0}], ids=["paper", "plain", "window_only"])
def test_block_features_equal_window_features_at_every_position(changes):
    model = modern(**changes)
    k, T = model.context_size, 20
    ids = torch.randint(0, 50, (3, T + k), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        blocks = model.block_features(ids)  # [3, T, d]
        windows = torch.stack([model(ids[:, t: t + k]) for t in range(T)], dim=1)  # [3, T, d]
    assert blocks.shape == (3, T, 16)
    torch.testing.assert_close(blocks, windows, rtol=0, atol=1e-5)


def test_in_training_each_vector_is_dropped_out_once_per_block():
    """Every position that reads token p reads the same dropped-out vector: the training-mode block
    features are the window features of one dropped-out copy of the block's vectors (the blocks'
    own dropout off, so that the input dropout is the only draw)."""
    model = modern().train()
    for block in model.blocks:
        block.dropout.p = 0.0
    k, T = model.context_size, 10
    ids = torch.randint(0, 50, (2, T + k), generator=torch.Generator().manual_seed(2))
    torch.manual_seed(3)
    blocks = model.block_features(ids)  # [2, T, d]
    torch.manual_seed(3)
    dropped = model.dropout(model.embed(ids) * model.scale)  # [2, T + k, d] the same draw
    assert (dropped == 0).any()
    model.dropout.p = 0.0
    windows = torch.stack([model.features_from_embeddings(dropped[:, t: t + k] / model.scale) for t in range(T)], 1)
    torch.testing.assert_close(blocks, windows, rtol=0, atol=1e-5)


def test_blocks_tile_the_windows_targets_once_in_order_and_the_contexts_match():
    L, k, T = 103, 5, 8  # 98 windows: 12 whole blocks and a partial one of 2 tokens
    stream = torch.arange(1000, 1000 + L)
    windows, blocks = Windows(stream, k), Blocks(stream, k, T)
    assert (blocks.whole, len(blocks)) == (12, 13)
    scored, contexts = [], []
    for idx in BlockBatches(blocks, BatchIndices(blocks.whole, 5, shuffle=False)):
        ids, targets = blocks[idx]  # [B, T_b + k], [B, T_b]
        assert ids.shape[1] == targets.shape[1] + k
        scored.append(targets.flatten())
        contexts += [ids[b, t: t + k] for b in range(len(ids)) for t in range(targets.shape[1])]
    context, target = windows[torch.arange(len(windows))]
    assert torch.equal(torch.cat(scored), target)
    assert torch.equal(torch.stack(contexts), context)


def test_a_split_shorter_than_a_block_is_one_partial_block():
    blocks = Blocks(torch.arange(10), 3, 16)
    assert (blocks.whole, len(blocks)) == (0, 1)
    sampler = index_batches(blocks, 4, shuffle=False)
    batches = list(sampler)
    assert len(sampler) == 1
    assert batches == [0]
    ids, targets = blocks[0]
    assert torch.equal(ids, torch.arange(10).unsqueeze(0)) and torch.equal(targets, torch.arange(3, 10).unsqueeze(0))


def test_evaluation_blocks_are_shared_out_among_ranks_and_the_partial_block_is_the_last_ranks():
    blocks = Blocks(torch.arange(103), 5, 8)
    per_rank = [list(BlockBatches(blocks, BatchIndices(blocks.whole, 5, shuffle=False, rank=r, world_size=2)))
                for r in range(2)]
    assert [len(batches) for batches in per_rank] == [2, 3]
    assert per_rank[1][-1] == 12  # the partial block, an int index of a batch of its own
    whole = torch.cat([i for batches in per_rank for i in batches if isinstance(i, torch.Tensor)])
    assert torch.equal(whole, torch.arange(12))


def test_training_blocks_are_a_seeded_permutation_per_epoch_without_the_partial_block():
    blocks = Blocks(torch.arange(103), 5, 8)

    def epoch(seed, number):
        sampler = BlockBatches(blocks, BatchIndices(blocks.whole, 5, shuffle=True, seed=seed))
        sampler.set_epoch(number)
        assert len(sampler) == 3
        return torch.cat(list(sampler)).tolist()

    assert sorted(epoch(0, 0)) == list(range(12))
    assert epoch(0, 0) == epoch(0, 0)
    assert epoch(0, 1) != epoch(0, 0)
    assert epoch(1, 0) != epoch(0, 0)


def data_module(tmp_path, block_size, batch_size=3):
    from nplm.data.datamodule import LMDataModule
    from nplm.training.tree_phase import container

    cfg = compose_cfg(tmp_path, *SMALL)
    dm = LMDataModule(container(cfg.corpus), K, batch_size, batch_size, data_dir=str(tmp_path),
                      block_size=block_size)
    dm.setup()
    return dm


def test_the_summed_nll_of_a_split_in_blocks_is_window_modes(tmp_path):
    from nplm.training.module import LanguageModel

    windows, blocks = data_module(tmp_path, None, batch_size=7), data_module(tmp_path, 5)
    assert all(len(blocks.blocks(split)) > blocks.blocks(split).whole for split in ("valid", "test"))  # partial ones
    module = LanguageModel(MODERN, {"name": "softmax"}, {"name": "adam", "lr": 1e-3}, windows.vocab).eval()
    module.model.load_state_dict(modern(len(windows.vocab)).state_dict())
    for loaders in ((windows.val_dataloader(), blocks.val_dataloader()),
                    (windows.test_dataloader(), blocks.test_dataloader())):
        sums = []
        with torch.no_grad():
            for loader in loaders:
                nll = torch.cat([module.nll(*batch) for batch in loader]).double()
                sums.append((nll.sum().item(), nll.numel()))
        (window_sum, window_tokens), (block_sum, block_tokens) = sums
        assert block_tokens == window_tokens == windows.stats["valid"].predicted
        assert block_sum == pytest.approx(window_sum, rel=1e-6)
    assert len(blocks.train_dataloader()) == -(-(windows.stats["train"].predicted // 5) // 3)


@pytest.mark.slow  # a run, then a killed one resumed
def test_a_run_on_blocks_trains_validates_tests_and_resumes_to_the_same_numbers(run_train, tmp_path):
    from nplm.cli.evaluate import evaluate

    whole = run_train(*SMALL, "trainer.max_epochs=3")
    assert 1 < whole["val/ppl"] < len(data_module(tmp_path, 8).vocab)  # better than uniform
    for block_size in (None, 5):  # nplm-eval in window mode, and on blocks of 5
        again = evaluate(whole["best_checkpoint"], split="test", data_dir=str(tmp_path), block_size=block_size)
        assert again["ppl"] == pytest.approx(whole["test/ppl"], rel=1e-5)
        assert again["tokens"] == data_module(tmp_path, None).stats["test"].predicted
    run_train(*SMALL, "trainer.max_epochs=1")  # in call2/run
    resumed = run_train(*SMALL, "trainer.max_epochs=3", f"resume={tmp_path / 'call2' / 'run'}",
                        "resume_allow_changes=true")
    assert len(json.loads((tmp_path / "call2" / "run" / "metrics.json").read_text())["history"]) == 3  # it trained on
    for key in ("val/ppl_best", "test/ppl"):  # dropout's draws too: the generators restored, the loaders' own
        assert resumed[key] == pytest.approx(whole[key], rel=1e-5), key


@pytest.mark.slow  # a run
def test_tokens_per_second_counts_every_position_of_a_block(run_train, tmp_path):
    metrics = run_train(*SMALL, "trainer.max_epochs=1", "steps_per_execution=2")
    blocks = data_module(tmp_path, 8).blocks("train").whole  # all trained: 8 tokens each
    tokens = metrics["train/tokens_per_s"] * metrics["train/epoch_time_s"]
    assert tokens == pytest.approx(blocks * 8, rel=1e-4)


def test_a_model_without_blocks_is_refused_in_one_line_with_exit_2(tmp_path, capsys):
    from nplm.cli.train import command_line
    from nplm.training.train import train

    from nplm.models import MODELS

    able = " or ".join(f"model={name}" for name, o in MODELS.options().items() if o.target.trains_on_blocks)
    message = f"data.block_size=8: must be null for model=nplm, which predicts one window at a time; " \
              f"whole blocks need {able}"
    assert "model=modern" in able
    with pytest.raises(UserError, match="^" + message + "$"):
        train(compose_cfg(tmp_path, "corpus=toy", "model=nplm", "data.block_size=8"))
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit) as exit_info:
        command_line(["corpus=toy", "model=nplm", "data.block_size=8"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == f"nplm: error: {message}"


def test_a_block_longer_than_the_training_split_is_refused(tmp_path):
    from nplm.training.train import train

    predicted = data_module(tmp_path, None).stats["train"].predicted
    with pytest.raises(UserError, match=f"^data.block_size=100000: longer than the {predicted} tokens the train "
                                        f"split of corpus 'toy' predicts; use data.block_size <= {predicted}$"):
        train(compose_cfg(tmp_path / "too_long", *SMALL, "data.block_size=100000"))


def test_nplm_eval_refuses_blocks_for_a_model_without_them(run_train, tmp_path):
    from nplm.cli.evaluate import evaluate

    checkpoint = run_train(*TOY_FAST[:-1], "trainer.max_epochs=1")["best_checkpoint"]
    with pytest.raises(UserError, match="^--block-size=8: model=nplm predicts one window at a time; leave "
                                        "--block-size out$"):
        evaluate(checkpoint, data_dir=str(tmp_path), block_size=8)


@pytest.mark.slow  # the compiled run trains for real
def test_compile_true_trains_on_blocks_as_eager_does(run_train, compile_backend):
    """fullgraph=True through AOT autograd: the block path (unfold, conv1d, dropout) in one graph, the
    same perplexities as eager."""
    eager = run_train(*SMALL, "trainer.max_epochs=1")
    torch._dynamo.reset()
    compiled = run_train(*SMALL, "trainer.max_epochs=1", "compile=true", compile_backend)
    for key in ("train/ppl", "val/ppl"):
        assert compiled[key] == pytest.approx(eager[key], rel=1e-4), key


def test_the_memory_estimate_counts_a_batch_of_blocks():
    """The meta forward of `block_features` runs (a failure would silently leave the batch out): B blocks
    of T tokens need less than the B T windows of the same tokens, each of which holds k vectors."""
    from nplm.data.vocabulary import Vocabulary
    from nplm.training.memory import _batch_bytes
    from nplm.training.module import LanguageModel

    with torch.device("meta"):
        module = LanguageModel(MODERN, {"name": "softmax"}, {"name": "adam", "lr": 1e-3},
                               Vocabulary.build([list("abcdefgh")]))
    blocks, windows = _batch_bytes(module, 8, True, block_size=16), _batch_bytes(module, 8 * 16, True)
    assert blocks is not None and windows is not None
    assert _batch_bytes(module, 8, True) < blocks < windows


def test_sliding_summaries_are_the_cross_correlation_with_each_row_of_A():
    """s_j(t) = sum_p A[j, p] e[t + p] at every position t, values and gradients, against the sums written out."""
    from nplm.models.concat import sliding_summaries

    torch.manual_seed(0)
    B, T, n, g, d = 2, 6, 4, 3, 5
    e = torch.randn(B, T + n - 1, d, dtype=torch.float64, requires_grad=True)
    A = torch.randn(g, n, dtype=torch.float64, requires_grad=True)
    got = sliding_summaries(e, A, T)  # [B, T, g, d]
    want = torch.stack([torch.einsum("jp,bpd->bjd", A, e[:, t: t + n]) for t in range(T)], 1)  # [B, T, g, d]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    weights = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad((got * weights).sum(), (e, A)),
                               torch.autograd.grad((want * weights).sum(), (e, A)), rtol=0, atol=1e-12)
