"""model=transformer (`nplm.models.transformer`): block features are the features of the block's prefixes,
attention is causal, Transformer-C's first layer reads only its local window, Transformer-N's first layer is
the modern NPLM's concatenation layer, tying follows the head, bad keys are refused in one line, and its
FLOPs are the hand-counted matmuls."""

from __future__ import annotations

import pytest
import torch

from nplm.config.schema import check_group, groups
from nplm.errors import UserError
from nplm.fast import plain
from nplm.heads import build_head, head_class
from nplm.models import build_model
from nplm.models.modern import ModernConfig, ModernNPLM
from nplm.training.flops import count_step_flops

from conftest import error_lines, run_cli
from nplm.cli.train import main as nplm_train

V, K = 30, 6
TINY = {"name": "transformer", "context_size": K, "embed_dim": 16, "num_heads": 2, "hidden_dim": 24,
        "num_layers": 2, "window": 2, "summaries": 2, "local_window": 3, "dropout": 0.1}
FIRST_LAYERS = ["attention", "local", "nplm"]


def transformer(first_layer: str = "attention", **changes):
    """A tiny transformer with random weights (LN and A too: not their starting values), in eval mode, float64."""
    torch.manual_seed(0)
    model = build_model({**TINY, "first_layer": first_layer, **changes}, V).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def ids(B: int, n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("first_layer", FIRST_LAYERS)
def test_block_row_t_is_the_window_mode_features_of_the_blocks_first_t_plus_k_tokens(first_layer):
    model, T = transformer(first_layer), 7
    block = ids(3, T + K)
    with torch.no_grad():
        rows = model.block_features(block)  # [3, T, d]
        prefixes = torch.stack([model(block[:, : t + K]) for t in range(T)], dim=1)  # [3, T, d]
    assert rows.shape == (3, T, 16)
    torch.testing.assert_close(rows, prefixes, rtol=0, atol=1e-12)
    torch.testing.assert_close(rows[:, 0], model(block[:, :K]), rtol=0, atol=1e-12)  # the window of k tokens


@pytest.mark.parametrize("first_layer", FIRST_LAYERS)
def test_a_later_token_changes_no_earlier_position(first_layer):
    model, changed_at = transformer(first_layer), 8
    a = ids(2, 12)
    b = a.clone()
    b[:, changed_at] = (b[:, changed_at] + 1) % V
    with torch.no_grad():
        fa, fb = (model.sequence_features(model.embed(x)) for x in (a, b))  # [2, 12, d]
    torch.testing.assert_close(fa[:, :changed_at], fb[:, :changed_at], rtol=0, atol=0)
    assert (fa[:, changed_at:] - fb[:, changed_at:]).abs().amin(dim=-1).gt(1e-6).all()  # every later one


@pytest.mark.parametrize("first_layer,reach", [("local", 3), ("attention", 12)])
def test_the_local_first_layer_reads_only_its_window(first_layer, reach):
    """One layer: position 11 of 12 changes with token 11 - c + 1 (c = local_window = 3) and not with token 8;
    full attention reads every earlier token."""
    model = transformer(first_layer, num_layers=1)
    base = ids(2, 12)
    first = []
    for p in range(12):
        x = base.clone()
        x[:, p] = (x[:, p] + 1) % V
        with torch.no_grad():
            diff = model(x) - model(base)  # position 11's features [2, d]
        first.append(bool(diff.abs().max() > 1e-9))
    assert first == [p >= 12 - reach for p in range(12)]


def test_the_nplm_first_layer_is_the_modern_nplms_concatenation_on_the_same_weights():
    """Transformer-N's x_1 at position i equals the modern NPLM's first block (num_layers=1) over x_0's k vectors
    ending at i: the same E, A and FF_1, and modern's own window and summaries."""
    model = transformer("nplm")
    modern = ModernNPLM(V, ModernConfig(context_size=K, window=2, summaries=2, embed_dim=16, hidden_dim=24,
                                        num_layers=1)).double().eval()
    concat = model.layers[0]
    with torch.no_grad():
        modern.A.copy_(concat.A)
        modern.blocks[0].load_state_dict(concat.block.state_dict())
        x0 = model.inputs(model.embed(ids(2, 10)))  # [2, 10, d]
        x1 = concat(x0)  # [2, 10, d]
        for i in range(K - 1, 10):  # modern scales its input by sqrt(d): hand it x_0 / sqrt(d)
            want = modern.features_from_embeddings(x0[:, i - K + 1: i + 1] / modern.scale)  # [2, d]
            torch.testing.assert_close(x1[:, i], want, rtol=0, atol=1e-12)
        padded = torch.cat([torch.zeros(2, K - 1, 16, dtype=x0.dtype), x0], dim=1)  # zeros before the start
        torch.testing.assert_close(x1[:, 0], modern.features_from_embeddings(padded[:, :K] / modern.scale))


@pytest.mark.parametrize("head,tied", [("softmax", True), ("adaptive", True), ("hierarchical", False),
                                       ("class_based", False)])
def test_auto_ties_the_output_vectors_where_the_head_has_one_per_word(head, tied):
    model = build_model({**TINY, "tie_embeddings": "auto"}, V, head_can_tie=head_class(head).can_tie)
    assert (model.output_embeddings() is model.E.weight) == tied
    assert build_model({**TINY, "tie_embeddings": False}, V, head_can_tie=True).output_embeddings() is None
    # without the key, its default (auto) is resolved too: tied only where the head can take it
    untied = {k: v for k, v in TINY.items() if k != "tie_embeddings"}
    assert build_model(untied, V).output_embeddings() is None
    assert build_model(untied, V, head_can_tie=True).output_embeddings() is not None


def test_a_bad_first_layer_is_refused_in_one_line_with_exit_2(tmp_path):
    result = run_cli(nplm_train, "corpus=toy", "model=transformer", "model.first_layer=conv", "logger=none",
                     f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.code == 2
    assert error_lines(result) == ["nplm: error: model.first_layer=conv: must be one of: attention, local, nplm"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("values,message", [
    ({"embed_dim": 16, "num_heads": 3}, "model.num_heads=3: must be a divisor of model.embed_dim=16"),
    ({"first_layer": "nplm", "context_size": 4, "window": 8}, "model.window=8: must be an integer <= "
                                                              "model.context_size=4"),
    ({"first_layer": "nplm", "context_size": 8, "window": 4, "summaries": 0}, "model.summaries=0: must be an "
                                                                              "integer >= 1 when"),
])
def test_contradicting_keys_are_refused(values, message):
    with pytest.raises(UserError) as info:
        check_group("model", groups()["model"], {"name": "transformer", **values})
    assert str(info.value).startswith(message), str(info.value)


def test_a_first_layers_keys_are_refused_under_another_first_layer():
    """model.window and model.summaries shape first_layer=nplm, model.local_window first_layer=local: set under
    another first layer they would change nothing, so they are refused, naming the key that decides."""
    with pytest.raises(UserError, match=r"^model.window=8: applies only with model.first_layer=nplm \(here "
                                        r"model.first_layer=attention\); set model.first_layer=nplm, or leave model.window out$"):
        check_group("model", groups()["model"], {"name": "transformer", "context_size": 4, "window": 8})
    with pytest.raises(UserError, match=r"^model.local_window=3: applies only with model.first_layer=local \(here "
                                        r"model.first_layer=nplm\)"):
        check_group("model", groups()["model"], {"name": "transformer", "first_layer": "nplm", "local_window": 3})
    # their defaults (what the yaml sets) are no choice of the user's: accepted under any first layer
    check_group("model", groups()["model"], {"name": "transformer", "context_size": 4, "window": 5, "local_window": 5})


def test_the_model_arithmetic_computes_the_same_features_as_the_fused_attention():
    model, block = transformer("local"), ids(2, 11)
    with torch.no_grad():
        fused = model.block_features(block)
        with plain.model_arithmetic():
            counted = model.block_features(block)
    torch.testing.assert_close(counted, fused, rtol=0, atol=1e-12)
    assert not model.can_backprop_by_hand()  # trains through autograd (nplm.fast.backprop)


def attention_layer_flops(N: int, B: int, n: int, d: int, H: int) -> int:
    """A decoder layer's forward matmuls over N = B n positions: Q, K, V and W_O (4 d^2 a position), Q K^T and
    the weights times V (2 n d a position, every query against every key: the causal mask's half included,
    as FlopCounterMode counts fused attention), the feed-forward network (2 d H a position); 2 per multiply-add."""
    return 2 * N * (4 * d * d + 2 * d * H) + 2 * 2 * B * n * n * d


@pytest.mark.parametrize("first_layer", ["attention", "nplm"])
def test_the_flop_count_is_the_hand_counted_matmuls(first_layer):
    """Forward + backward (two products for each one of the forward: the input's and the weight's gradient)
    of a training batch of B blocks of T targets: the model's n = T + k - 1 positions and an untied softmax
    head over the T targets. Transformer-N's first layer: the g summaries over k - w vectors and FF_1 over
    the (w + g) d concatenation."""
    B, T, d, H, w, g, L = 2, 5, 16, 24, 2, 2, 2
    model = build_model({**TINY, "first_layer": first_layer, "tie_embeddings": False, "dropout": 0.0}, V)
    head = build_head({"name": "softmax"}, d, V)
    block, targets = ids(B, T + K), ids(B, T, seed=2)
    n = T + K - 1
    N = B * n
    if first_layer == "nplm":
        first = 2 * N * (K - w) * g * d + 2 * N * ((w + g) * d * H + H * d)
    else:
        first = attention_layer_flops(N, B, n, d, H)
    forward = first + (L - 1) * attention_layer_flops(N, B, n, d, H) + 2 * B * T * d * V

    def features(c, t):
        return model.block_features(c).flatten(0, 1), t.flatten()

    assert count_step_flops(model, head, block, targets, features=features) == 3 * forward


def test_the_executed_count_adds_the_fused_backwards_recomputation():
    """On a CPU the fused attention kernel runs (its own FLOP formula, `nplm.training.flops.extra_formulas`);
    what it executes is the model's arithmetic and, in each layer's backward, Q K^T once more (2 B n^2 d)."""
    if not hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
        pytest.skip("this torch has no fused CPU attention kernel")
    B, T = 2, 5
    model = build_model({**TINY, "tie_embeddings": False, "dropout": 0.0}, V)
    head = build_head({"name": "softmax"}, 16, V)
    block, targets = ids(B, T + K), ids(B, T, seed=2)

    def features(c, t):
        return model.block_features(c).flatten(0, 1), t.flatten()

    counted = count_step_flops(model, head, block, targets, features=features)
    executed = count_step_flops(model, head, block, targets, features=features, executed=True)
    n = T + K - 1
    assert executed == counted + TINY["num_layers"] * 2 * B * n * n * 16


def test_the_wikitext103_recipes_differ_in_the_first_layer_alone():
    """experiment=sun2021/transformer_n and transformer_c are experiment=sun2021/transformer (the paper's sizes)
    with another first layer (Transformer-N's added to the 16 attention layers), nothing else."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from nplm.config import CONF_DIR

    groups = ("corpus", "model", "head", "optimizer", "data", "trainer")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        n, c = ({g: OmegaConf.to_container(cfg[g], resolve=False) for g in groups}
                for cfg in (compose(config_name="train", overrides=[f"experiment=sun2021/{name}"])
                            for name in ("transformer_n", "transformer_c")))
    model = c["model"]
    assert (model["embed_dim"], model["num_layers"], model["num_heads"], model["hidden_dim"], model["first_layer"],
            model["local_window"], n["data"]["block_size"]) == (410, 16, 10, 2100, "local", 5, 384)
    assert n["model"] == {**model, "num_layers": 17, "first_layer": "nplm", "window": 5, "summaries": 1}
    assert all(n[g] == c[g] for g in groups if g != "model")
