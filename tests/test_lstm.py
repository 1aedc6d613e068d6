"""model=lstm (Zaremba et al. 2014, `nplm.models.lstm`): evaluation with the state carried is the model
reading the split one token at a time, the carried state helps, training batches are parallel streams in
order (`nplm.data.streams`), the state is reset at each epoch's start and left alone by validation,
dropout acts on the non-recurrent connections only, and bad settings are refused in one line."""

from __future__ import annotations

import pytest
import torch

from nplm.cli.evaluate import perplexity
from nplm.cli.train import main as train_main
from nplm.data.blocks import Blocks
from nplm.data.streams import StreamBatches
from nplm.data.vocabulary import Vocabulary
from nplm.data.windows import Windows
from nplm.inference.mixture import neural_log_probs
from nplm.training.module import LanguageModel
from nplm.training.train import train
from nplm.trees.tree import Tree, balanced_nested

from conftest import compose_cfg, run_cli

V = 12
LSTM = {"name": "lstm", "hidden_dim": 16, "num_layers": 2, "dropout": 0.0, "init_scale": 0.3, "tie_embeddings": "auto"}
TOY = ["corpus=toy", "model=lstm", "model.hidden_dim=8", "model.num_layers=1", "data.block_size=8", "data.batch_size=3",
       "optimizer.lr=0.01"]


def language_model(head: dict, **model) -> LanguageModel:
    vocab = Vocabulary([f"w{i}" for i in range(V)], [100 - 5 * i for i in range(V)], unk=None)
    tree = Tree.from_nested(balanced_nested(list(range(V))), V) if head["name"] == "hierarchical" else None
    torch.manual_seed(0)
    return LanguageModel({**LSTM, **model}, head, {"name": "adam", "lr": 0.01}, vocab, tree=tree)


def periodic(length: int, period: int = 9, seed: int = 0) -> torch.Tensor:
    """A random sequence of `period` ids over V repeated: its bigrams are ambiguous, its next id is certain
    given the last `period` ones."""
    cycle = torch.randint(0, V, (period,), generator=torch.Generator().manual_seed(seed))
    return cycle.repeat(length // period + 1)[:length]


@pytest.mark.parametrize("head", [{"name": "softmax"}, {"name": "hierarchical"},
                                  {"name": "adaptive", "cutoffs": [4], "div_value": 2.0}])
def test_evaluation_with_the_state_carried_is_feeding_one_token_at_a_time(head):
    """nplm-eval's per-token NLL over a stream of 60 tokens, in blocks of 7 (the last one partial), equals the
    same nn.LSTM stepped token by token from a zero state with the head's log-probabilities of each next id; so
    do nplm-mix's per-token log-probabilities."""
    module = language_model(head).eval()
    ids = torch.randint(0, V, (60,), generator=torch.Generator().manual_seed(1))
    got = perplexity(module, Windows(ids, 1), block_size=7)
    model, nll, state = module.model, 0.0, None
    with torch.no_grad():
        for t in range(len(ids) - 1):
            out, state = model.lstm(model.E.weight[ids[t]].view(1, 1, -1), state)  # [1, 1, H]
            nll -= module.head.log_probs(out[:, 0])[0, ids[t + 1]].item()  # [1, V]
    assert got["tokens"] == len(ids) - 1
    assert got["nll_per_token"] == pytest.approx(nll / (len(ids) - 1), abs=1e-5)
    mixed = neural_log_probs(module, Windows(ids, 1))  # nplm-mix's per-token figures: blocks of 35 by default
    assert mixed.shape == (len(ids) - 1,) and -mixed.mean() == pytest.approx(nll / (len(ids) - 1), abs=1e-5)


def test_a_trained_model_scores_better_with_the_state_carried_than_reset_at_every_block():
    """A periodic stream (period 9, blocks of 6): trained briefly on stream batches, the model's NLL with the
    state carried through the split is well below that with the state reset before every block."""
    module = language_model({"name": "softmax"}, num_layers=1, hidden_dim=32, init_scale=0.1)
    ids, T = periodic(1200), 6
    blocks = Blocks(ids, 1, T)
    optimizer = torch.optim.Adam(module.parameters(), lr=0.03)
    module.train()
    for _ in range(4):
        module.model.reset_state()
        for idx in StreamBatches(blocks.whole, 8):
            module._train_loss(*blocks[idx]).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    module.eval()
    test = periodic(300, seed=0)[5:]  # the same cycle, entered at another phase
    carried = perplexity(module, Windows(test, 1), block_size=T)["nll_per_token"]
    test_blocks, reset = Blocks(test, 1, T), 0.0
    with torch.no_grad():
        for b in range(len(test_blocks)):
            module.model.reset_state()
            reset += module.nll(*test_blocks[b]).sum().item()
    reset /= len(test) - 1
    assert carried < 0.5 * reset, (carried, reset)


def test_stream_batches_are_block_i_of_every_stream_in_order():
    """Batch i holds block i of each of the B streams; row s of batch i + 1 starts where row s of batch i ended
    (its last id, the last target, is the next block's first input); every epoch the same order."""
    ids, T, B = torch.arange(103), 5, 3
    blocks = Blocks(ids, 1, T)  # 102 predicted tokens: 20 whole blocks, 6 per stream
    sampler = StreamBatches(blocks.whole, B)
    batches = [blocks[idx] for idx in sampler]
    assert len(batches) == len(sampler) == 6
    for i, (inputs, targets) in enumerate(batches):
        assert inputs.tolist() == [list(range(s * 30 + i * T, s * 30 + i * T + T + 1)) for s in range(B)]
        assert torch.equal(targets, inputs[:, 1:])
    for (a, _), (b, _) in zip(batches, batches[1:]):
        assert torch.equal(a[:, -1], b[:, 0])
    assert [idx.tolist() for idx in sampler] == [idx.tolist() for idx in sampler]


def test_the_data_module_streams_training_and_reads_each_evaluation_split_as_one_stream(tmp_path):
    from nplm.data.datamodule import LMDataModule
    from nplm.training.tree_phase import container

    cfg = compose_cfg(tmp_path, *TOY)
    dm = LMDataModule(container(cfg.corpus), 1, 3, 64, data_dir=str(tmp_path), block_size=8, carries_state=True)
    dm.setup()
    train_ids, whole = dm.windows["train"].ids, dm.blocks("train").whole
    per_stream = whole // 3
    assert dm.train_batches() == len(dm.train_dataloader()) == per_stream
    for i, (inputs, targets) in enumerate(dm.train_dataloader()):
        starts = [(s * per_stream + i) * 8 for s in range(3)]
        assert inputs.tolist() == [train_ids[j: j + 9].tolist() for j in starts]
    valid = [batch for batch in dm.val_dataloader()]  # one block a batch, in order, the partial last one too
    assert all(inputs.shape[0] == 1 for inputs, _ in valid)
    assert torch.cat([t[0] for _, t in valid]).tolist() == dm.windows["valid"].ids[1:].tolist()


class StateWatch:
    """Records the training slot's state at each training batch's start and around each validation."""

    def __init__(self):
        import pytorch_lightning as pl

        watch = self

        class Callback(pl.Callback):
            def on_train_batch_start(self, trainer, module, batch, batch_idx):
                watch.batches.append((trainer.current_epoch, batch_idx, watch.train_state(module)))

            def on_validation_start(self, trainer, module):
                watch.around.append(["before", watch.train_state(module)])

            def on_validation_end(self, trainer, module):
                watch.around[-1] += ["after", watch.train_state(module), module.model.carried.get("eval")]

        self.callback, self.batches, self.around = Callback(), [], []

    @staticmethod
    def train_state(module):
        state = module.model.carried.get("train")
        return None if state is None else state[0].clone()


def test_the_state_is_reset_at_each_epoch_start_and_validation_leaves_it_alone(tmp_path):
    """Two epochs, a validation in the middle of each (trainer.val_check_interval=0.5), one batch per Lightning
    step: the first batch of each epoch starts from no state, every later one from the state the batch before
    left, and each validation runs in its own slot, the training slot's state the same after it as before.
    nplm-eval of the best checkpoint gives the run's own test perplexity (the test split as one stream)."""
    from nplm.cli.evaluate import evaluate

    watch = StateWatch()
    metrics = train(compose_cfg(tmp_path, *TOY, "trainer.max_epochs=2", "trainer.val_check_interval=0.5",
                                "steps_per_execution=1", "trainer.num_sanity_val_steps=0"), callbacks=[watch.callback])
    again = evaluate(metrics["best_checkpoint"], split="test", data_dir=str(tmp_path / "data"))
    assert again["ppl"] == pytest.approx(metrics["test/ppl"], rel=1e-5) and again["tokens"] == 120
    from nplm.errors import UserError

    with pytest.raises(UserError, match=r"^--batch-size=64: model=lstm reads the text as one stream, one block per "
                                        r"batch \(its state carried\); leave --batch-size out$"):
        evaluate(metrics["best_checkpoint"], split="test", data_dir=str(tmp_path / "data"), batch_size=64)
    firsts = [state for epoch, index, state in watch.batches if index == 0]
    assert len(firsts) == 2 and all(state is None for state in firsts)
    later = [state for epoch, index, state in watch.batches if index > 0]
    assert later and all(state is not None and state.shape == (1, 3, 8) for state in later)
    mid_epoch = [entry for entry in watch.around if entry[1] is not None]
    assert mid_epoch
    for _, before, _, after, evaluated in mid_epoch:
        assert torch.equal(before, after) and evaluated is not None and evaluated[0].shape == (1, 1, 8)


def test_dropout_acts_on_the_non_recurrent_connections_only():
    """The word vectors and the last layer's output through `drop`, between layers nn.LSTM's own dropout (each
    layer's output but the last), no other dropout and no change to the recurrent weights; in evaluation the
    features do not depend on it."""
    module = language_model({"name": "softmax"}, dropout=0.4)
    model = module.model
    assert model.drop.p == 0.4 and model.lstm.dropout == 0.4 and model.lstm.num_layers == 2
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts == [model.drop]
    names = {name for name, _ in model.lstm.named_parameters()}
    assert names == {f"{kind}_{part}_l{layer}" for kind in ("weight", "bias") for part in ("ih", "hh")
                     for layer in (0, 1)}
    assert all(-0.3 <= p.min() and p.max() <= 0.3 for p in model.parameters())  # init_scale
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(3))
    model.eval()
    quiet = language_model({"name": "softmax"}, dropout=0.0).model.eval()
    with torch.no_grad():
        evaluated = model.block_features(ids)
        model.reset_state()
        assert torch.equal(model.block_features(ids), evaluated)
        torch.testing.assert_close(quiet.block_features(ids), evaluated)
        model.train()
        model.reset_state()
        assert not torch.allclose(model.block_features(ids), evaluated)


def test_the_flop_count_holds_the_lstm_layers():
    """Per token and layer 2 (I + H) 4H multiply-adds forward, twice that backward (oneDNN's LSTM layers on a
    CPU, which FlopCounterMode does not count itself), plus the softmax head's 2 H V, three times."""
    from nplm.training.flops import count_step_flops

    module = language_model({"name": "softmax"})
    ids = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(4))
    flops = count_step_flops(module.model, module.head, ids, ids[:, 1:], features=module.features)
    tokens, H = 3 * 5, 16
    assert flops == 3 * tokens * (2 * 2 * (H + H) * 4 * H + 2 * H * V)


def test_cudnns_lstm_on_a_gpu_is_counted_as_the_cpus_layers_are():
    """On CUDA torch.nn.LSTM is one `_cudnn_rnn` op (FlopCounterMode has no formula for it): its formula counts the
    same hand-counted matmuls as the CPU's per-layer one, with or without biases (4 or 2 weights a layer)."""
    from nplm.training.flops import _cudnn_rnn_backward_flops, _cudnn_rnn_flops, _lstm_layer_flops, extra_formulas

    assert extra_formulas()[torch.ops.aten._cudnn_rnn] is _cudnn_rnn_flops
    assert extra_formulas()[torch.ops.aten._cudnn_rnn_backward] is _cudnn_rnn_backward_flops
    B, T, I, H = 3, 5, 12, 16
    lstm = torch.nn.LSTM(I, H, num_layers=2, batch_first=True)
    shapes = [tuple(w.shape) for layer in lstm.all_weights for w in layer]  # as cuDNN gets them: w_ih, w_hh, b_ih, b_hh
    hand = 2 * B * T * ((I + H) + (H + H)) * 4 * H  # 2 flops a multiply-add, per layer (I_l + H) inputs, 4H gates
    assert _cudnn_rnn_flops((B, T, I), shapes, 4) == hand
    assert _cudnn_rnn_flops((B, T, I), [s for s in shapes if len(s) == 2], 2) == hand  # (bias=False)
    assert _cudnn_rnn_backward_flops((B, T, I), shapes, 4) == 2 * hand
    cpu = _lstm_layer_flops((B, T, I), shapes[0], shapes[1]) + _lstm_layer_flops((B, T, H), shapes[4], shapes[5])
    assert cpu == hand


def test_paths_that_cannot_carry_the_state_say_why():
    from nplm.training.capture import capture_blocker

    module = language_model({"name": "softmax"})
    why = capture_blocker(module, torch.optim.SGD(module.parameters(), lr=1.0, fused=True), 1, True, True)
    assert why.startswith("model=lstm carries its state from one batch to the next")
    assert not module.model.can_backprop_by_hand()
    step = module._train_loss
    module.compile_training_step("aot_eager")
    assert module._train_loss == step and not module._compiled


@pytest.mark.parametrize("overrides,message", [
    (["head=hierarchical", "model.tie_embeddings=true"],
     "model.tie_embeddings=true: head=hierarchical has no output vector per word to tie to the model's input word "
     "vectors"),
    (["model.init_scale=0"], "model.init_scale=0: must be a finite number > 0"),
    (["model.dropout=1"], "model.dropout=1: must be a number in [0, 1)"),
    (["trainer.devices=2"], "trainer.devices=2: model=lstm carries its state from one batch to the next along "
                            "data.batch_size parallel streams, which several processes would split; use "
                            "trainer.devices=1"),
    (["trainer.accelerator=gpu", "trainer.devices=auto"],
     "trainer.devices=auto: model=lstm carries its state from one batch to the next along data.batch_size parallel "
     "streams, which several processes would split (auto: one process per GPU found); use trainer.devices=1"),
    (["optimizer=sgd", "optimizer.epoch_decay=0.5"],
     "optimizer.epoch_decay=0.5: must be 1 when optimizer.lr_decay > 0 (two schedules; set one of them)"),
    (["corpus=toy", "data.batch_size=128"],
     "data.batch_size=128: more parallel streams than the 3 blocks of data.block_size=35 tokens in the train split "
     "of corpus 'toy' (each stream needs one at least); use data.batch_size <= 3"),
])
def test_bad_settings_are_refused_in_one_line(tmp_path, overrides, message):
    result = run_cli(train_main, "model=lstm", *overrides, f"paths.data_dir={tmp_path}/data",
                     f"paths.output_dir={tmp_path}/run", "logger.wandb=null")
    assert result.code == 2
    assert f"nplm: error: {message}" in result.err, result.err


@pytest.mark.slow  # a toy run through nplm-train's command line
def test_the_default_batch_is_cut_to_the_streams_a_short_corpus_holds_and_said(tmp_path):
    """data.batch_size left at the schema's default (128 windows) on toy's 3 blocks: 3 streams, a log line says so,
    and the run's config and record say 3; typed, the same 128 is refused (above)."""
    result = run_cli(train_main, "model=lstm", "corpus=toy", "trainer.max_epochs=1", f"paths.data_dir={tmp_path}/data",
                     f"paths.output_dir={tmp_path}/run", "logger.wandb=null")
    assert result.code == 0, result.err
    assert ("data.batch_size=3: the 3 whole blocks of data.block_size=35 tokens in the train split of corpus 'toy' "
            "(the default, 128 streams, is more than it holds; set data.batch_size to choose)") in result.out
    assert "  batch_size: 3\n" in (tmp_path / "run" / "config.yaml").read_text()


def test_prompts_and_generation_read_the_whole_history_as_evaluation_does():
    """nplm-predict's next-token distribution after a prompt, and nplm-generate's greedy continuation, are those of
    the LSTM stepped token by token over the boundary token, the prompt and what was generated, from a zero state."""
    from nplm.cli.generate import sample_ids
    from nplm.inference.prompting import model_context, next_log_probs, prompt_vectors

    module = language_model({"name": "softmax"}).eval()
    model, prompt = module.model, [3, 5, 1, 7]

    def stepped(ids: list[int]) -> torch.Tensor:  # log P(next | ids) [V], token by token
        state = None
        with torch.no_grad():
            for i in ids:
                out, state = model.lstm(model.E.weight[i].view(1, 1, -1), state)  # [1, 1, H]
            return module.head.log_probs(out[:, 0])[0]

    vectors, _ = prompt_vectors(module, " ".join(f"w{i}" for i in prompt))
    history = [0, *prompt]  # the boundary token (w0: this vocabulary has no <eos>) and the prompt
    torch.testing.assert_close(next_log_probs(module, model_context(module, vectors)), stepped(history))
    assert not torch.allclose(next_log_probs(module, vectors[-1:]), stepped(history), atol=1e-4)  # not the last alone
    greedy = sample_ids(module, " ".join(f"w{i}" for i in prompt), length=5, temperature=0)
    for i in greedy:
        assert i == int(stepped(history).argmax())
        history.append(i)
