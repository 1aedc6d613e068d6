"""Captured training steps (nplm.training.capture, config key `cuda_graphs`): the dry run of the captured
step (the same step function on static buffers, without a graph) against the eager step for every
registered model x head, the device-side step size and loss sum, clipping, the configurations that
train eagerly, portable checkpoints, no host read of a tensor between log lines; on a CUDA device the captured
graph itself, under sync debug mode."""

from __future__ import annotations

import collections
import contextlib
import copy
import logging
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf

from nplm.config import CONF_DIR
from nplm.data.vocabulary import Vocabulary
from nplm.errors import UserError
from nplm.heads import HEADS, head_class
from nplm.heads.adaptive import AdaptiveHead
from nplm.models import MODELS
from nplm.optimizers import build_optimizer
from nplm.training import capture
from nplm.training.capture import CapturedStep, capture_blocker, eager_optimizer_state
from nplm.training.module import LanguageModel
from nplm.training.train import train
from nplm.trees.tree import Tree, balanced_nested

from conftest import TOY_FAST, compose_cfg

V, B, K, STEPS = 41, 16, 3, 6  # vocabulary, batch, context, training steps (3 warm-up, 3 on the static buffers)
SMALL = {"context_size": K, "embed_dim": 16, "hidden_dim": 16, "window": 2, "summaries": 1, "num_layers": 2,
         "first_hidden_dim": None}
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (experiments/bench/gpu_check.py)")


def group_defaults(group: str, name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / group / f"{name}.yaml"))


def language_model(model: str, head: str, dropout: float = 0.2) -> LanguageModel:
    """A small `model` x `head` with their config files' defaults (a balanced tree where the head uses
    one; tied output vectors where the model ties them and the head can), dropout on where the model has it."""
    model_cfg = {k: SMALL.get(k, v) for k, v in group_defaults("model", model).items()}
    if "dropout" in model_cfg:
        model_cfg["dropout"] = dropout
    head_cfg = group_defaults("head", head)
    if head_cfg.get("num_samples"):
        head_cfg["num_samples"] = 8
    if "tie_embeddings" in model_cfg:
        model_cfg["tie_embeddings"] = model_cfg["tie_embeddings"] and head_class(head).can_tie
    tree = Tree.from_nested(balanced_nested(list(range(V))), V) if head_class(head).uses_tree(head_cfg) else None
    vocab = Vocabulary([f"w{i}" for i in range(V)], [int(400 / (r + 1)) + 1 for r in range(V)], unk=None)
    torch.manual_seed(0)
    return LanguageModel(model_cfg, head_cfg, {"name": "adam", "lr": 0.01}, vocab, tree=tree)


def batches(n: int = STEPS, batch: int = B, device="cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = [(torch.randint(0, V, (batch, K), generator=g), torch.randint(0, V, (batch,), generator=g)) for _ in range(n)]
    return [(c.to(device), t.to(device)) for c, t in out]


def optimizer_of(lm: LanguageModel, **options):
    """The optimizer and its per-step schedule, as nplm-train builds them (a warm-up then a cosine)."""
    config = build_optimizer(lm, {"name": "adam", "lr": 0.01, "warmup_steps": 2, "cosine": True, **options}, STEPS)
    return config["optimizer"], config["lr_scheduler"]["scheduler"]


def clip(lm: LanguageModel, clip_val, algorithm: str) -> None:
    if clip_val and algorithm == "value":
        torch.nn.utils.clip_grad_value_(lm.parameters(), clip_val)
    elif clip_val:
        torch.nn.utils.clip_grad_norm_(lm.parameters(), clip_val)


def train_eager(lm: LanguageModel, data, clip_val=None, algorithm="norm", **options) -> list[float]:
    """The plain eager loop: each batch's summed per-token loss (float64)."""
    optimizer, schedule = optimizer_of(lm, **options)
    torch.manual_seed(7)
    sums = []
    for context, target in data:
        nll = lm._train_loss(context, target)
        nll.mean().backward()
        clip(lm, clip_val, algorithm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        sums.append(nll.detach().sum(dtype=torch.float64).item())
    return sums


def train_captured(lm: LanguageModel, data, clip_val=None, algorithm="norm", dry=True, **options):
    optimizer, schedule = optimizer_of(lm, **options)
    step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, clip_val, algorithm, dry=dry)
    torch.manual_seed(7)
    sums = []
    for context, target in data:
        step.step(context, target)
        schedule.step()
        sums.append(step.take_loss_sum().item())
    return sums, step, optimizer, schedule


@pytest.mark.parametrize("head", HEADS.names())
@pytest.mark.parametrize("model", MODELS.names())
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_dry_captured_step_trains_every_model_and_head_as_the_eager_step(model, head):
    """Every loss and every final parameter of the dry captured step (the graph's step function on static
    buffers, a tensor step size updated in place, the loss summed on the device) equal the eager loop's,
    dropout and sampling included (the same random draws in the same order); the last batch, smaller,
    trains eagerly through the same step."""
    data = batches() + batches(1, batch=B // 2)
    eager = language_model(model, head)
    dry = copy.deepcopy(eager)
    want = train_eager(eager, data)
    got, step, _, _ = train_captured(dry, data)
    assert step.replays == STEPS - capture.WARMUP_STEPS  # the partial batch did not replay
    assert got == pytest.approx(want, rel=1e-5)
    for (name, a), b in zip(eager.named_parameters(), dry.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("algorithm,clip_val", [("norm", 0.05), ("value", 0.001)])
def test_dry_captured_step_clips_as_the_eager_step(algorithm, clip_val):
    """Clipping tight enough to act on every step: the same parameters as the eager loop's, and not the
    unclipped ones."""
    start = language_model("nplm", "softmax")
    eager, dry, free = (copy.deepcopy(start) for _ in range(3))
    train_eager(eager, batches(), clip_val, algorithm)
    train_captured(dry, batches(), clip_val, algorithm)
    train_eager(free, batches())
    for a, b, c in zip(eager.parameters(), dry.parameters(), free.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert max((a - c).abs().max().item() for a, c in zip(eager.parameters(), free.parameters())) > 1e-4


def test_the_step_size_is_one_device_tensor_the_schedules_update_in_place():
    """LambdaLR fills the tensor `lr` the graph reads (never replaces it), with the schedule's value."""
    lm = language_model("nplm", "softmax")
    _, step, optimizer, schedule = train_captured(lm, batches())
    lr = optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.dim() == 0 and lr.dtype == torch.float32
    before = lr
    schedule.step()
    assert optimizer.param_groups[0]["lr"] is before
    assert lr.item() == pytest.approx(schedule.get_last_lr()[0].item(), rel=1e-7)
    # warm-up of 2 then a cosine over the 4 steps left: after 7 steps, at its end
    assert lr.item() == pytest.approx(0.0, abs=1e-9)


def test_the_plateau_schedule_fills_the_tensor_step_size():
    lm = language_model("nplm", "softmax")
    config = build_optimizer(lm, {"name": "sgd", "lr": 0.1, "plateau_factor": 0.5, "fused": True})
    optimizer, plateau = config["optimizer"], config["lr_scheduler"]["scheduler"]
    CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=True)
    lr = optimizer.param_groups[0]["lr"]
    plateau.step(1.0)
    plateau.step(2.0)  # no better: halved
    assert optimizer.param_groups[0]["lr"] is lr and lr.item() == pytest.approx(0.05)


def test_the_loss_sum_accumulates_on_the_device_until_taken():
    lm = language_model("nplm", "softmax")
    optimizer, _ = optimizer_of(lm)
    step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=True)
    data = batches(5)
    torch.manual_seed(7)
    for context, target in data:
        step.step(context, target)
    total = step.take_loss_sum()
    assert total.dtype == torch.float64 and total.item() > 0
    assert step.loss_sum.item() == 0.0 and step.take_loss_sum().item() == 0.0


def test_reset_warms_up_and_fills_the_static_buffers_again():
    lm = language_model("nplm", "softmax")
    optimizer, _ = optimizer_of(lm)
    step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=True)
    for context, target in batches(5):
        step.step(context, target)
    assert step.replays == 5 - capture.WARMUP_STEPS and step._inputs is not None
    step.reset()
    assert step.replays == 0 and step._inputs is None and all(p.grad is None for p in lm.parameters())


def test_the_graph_lives_across_epochs_until_the_head_resizes():
    """An epoch's start keeps the captured graph (no warm-up, no capture: about 0.1 s an epoch on an H200)
    unless the head's host-side sizes changed; the replay count is the epoch's."""
    lm = language_model("nplm", "adaptive")
    optimizer, _ = optimizer_of(lm)
    step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=True)
    step.new_epoch(lm.head.graph_sizes())
    for context, target in batches(5):
        step.step(context, target)
    kept = step._inputs
    step.new_epoch(lm.head.graph_sizes())
    assert step.replays == 0 and step._inputs is kept
    for context, target in batches(2):
        step.step(context, target)
    assert step.replays == 2  # both replayed: no warm-up
    lm.head.capacity_extra[0] += 3  # what check_training does after an overflow
    step.new_epoch(lm.head.graph_sizes())
    assert step._inputs is None and step.replays == 0


def test_a_failed_capture_that_broke_the_generator_stops_in_one_line_else_trains_eagerly(monkeypatch, caplog):
    """A capture that fails (here: no CUDA to capture on) trains eagerly, one warning; where the failure left the
    device's generator refusing to draw (seen on an H200: "Offset increment outside graph capture"), the eager
    fallback cannot go on: one error naming cuda_graphs=false."""
    def refused(*args, **kwargs):
        raise RuntimeError("Offset increment outside graph capture encountered unexpectedly.")

    assert capture.random_numbers_work(torch.device("cpu"))
    with monkeypatch.context() as patch:
        patch.setattr(torch, "rand", refused)
        assert not capture.random_numbers_work(torch.device("cpu"))
    for broken in (False, True):
        lm = language_model("nplm", "softmax")
        optimizer, _ = optimizer_of(lm)
        step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=True)
        step.graphed = True  # as on CUDA: the step after the warm-up captures (torch.cuda.CUDAGraph fails here)
        monkeypatch.setattr(capture, "random_numbers_work", lambda device, ok=not broken: ok)
        data = batches(capture.WARMUP_STEPS + 2)
        for context, target in data[:capture.WARMUP_STEPS]:
            step.step(context, target)
        if broken:
            with pytest.raises(capture.CaptureBrokeGenerator, match=r"^cuda_graphs: capturing the training step "
                               r"failed \(.+\) and left the GPU's random number generator refusing to draw .+; run "
                               r"again with cuda_graphs=false$"):
                step.step(*data[-2])
        else:
            with caplog.at_level(logging.WARNING, logger="nplm.training.capture"):
                for context, target in data[-2:]:
                    step.step(context, target)
            assert step.failed and step.replays == 0 and "training eagerly" in caplog.text


def test_a_partial_batch_after_the_warm_up_trains_eagerly_and_is_not_captured():
    """The graph keeps the first batch's shape: a short last batch right after the warm-up does not become
    the static shape (with the graph kept across epochs, every later full batch would run eagerly)."""
    lm = language_model("nplm", "softmax")
    optimizer, _ = optimizer_of(lm)
    step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=True)
    for context, target in batches(capture.WARMUP_STEPS) + batches(1, batch=5) + batches(2):
        step.step(context, target)
    assert step.replays == 2 and step._inputs[0].shape == (B, K)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_compiled_loss_is_compiled_once_though_the_batches_are_strided_views():
    """The warm-up runs on the static buffers the capture records: a compiled loss (guarded on its inputs'
    strides) compiles in the first warm-up step and never again, though each batch is a strided view of the
    token stream (nplm.data.windows). Compiled again inside the capture, it failed it on an H200."""
    from torch._dynamo.testing import CompileCounter

    from nplm.data.windows import Windows

    lm = language_model("modern", "adaptive")
    windows = Windows(torch.randint(0, V, (400,)), K)
    strided = [windows[torch.arange(i * B, (i + 1) * B)] for i in range(capture.WARMUP_STEPS + 3)]
    assert not strided[0][0].is_contiguous()
    counter = CompileCounter()
    torch._dynamo.reset()
    optimizer, _ = optimizer_of(lm)
    step = CapturedStep(torch.compile(lm._train_loss, backend=counter, fullgraph=True), lm.parameters(), optimizer,
                        dry=True)
    for context, target in strided:
        step.step(context, target)
    assert step.replays == 3 and counter.frame_count == 1


def test_a_head_without_host_side_sizes_says_none():
    assert language_model("nplm", "softmax").head.graph_sizes() == ()
    adaptive = language_model("nplm", "adaptive").head
    assert adaptive.graph_sizes() == (0,) * len(adaptive.capacity_extra)


@pytest.mark.parametrize("overrides,reason", [
    ({"model": {"sparse_embeddings": True}}, "row-sparse gradients"),
    ({"head": {"sparse": True}}, "row-sparse gradients"),
    ({"accumulate": 2}, "trainer.accumulate_grad_batches=2"),
    ({"direct": False}, "the step goes through Lightning"),
    ({"counted": False}, "optimizer-step counter"),
    ({"optimizer": {"name": "sgd", "lr": 0.1, "fused": False}}, "optimizer=sgd with optimizer.fused=false"),
])
def test_configurations_that_cannot_be_captured_say_why(overrides, reason):
    model_cfg = {**group_defaults("model", "nplm"), **SMALL, **overrides.get("model", {})}
    model_cfg = {k: v for k, v in model_cfg.items() if k in group_defaults("model", "nplm")}
    head_cfg = {**group_defaults("head", "nce"), **overrides.get("head", {})}
    vocab = Vocabulary([f"w{i}" for i in range(V)], [1] * V, unk=None)
    lm = LanguageModel(model_cfg, head_cfg, {"name": "adam", "lr": 0.01}, vocab)
    config = build_optimizer(lm, overrides.get("optimizer", {"name": "adam", "lr": 0.01}))
    why = capture_blocker(lm, config, overrides.get("accumulate", 1), overrides.get("direct", True),
                          overrides.get("counted", True))
    assert reason in why


def test_a_capturable_configuration_has_no_blocker():
    lm = language_model("modern", "adaptive")
    for optimizer in ({"name": "adamw", "lr": 0.01}, {"name": "sgd", "lr": 0.1, "fused": True, "momentum": 0.9}):
        assert capture_blocker(lm, build_optimizer(lm, optimizer), 1, True, True) is None


def test_a_checkpoint_holds_the_optimizer_state_as_an_eager_run_saves_it():
    """Float step sizes and capturable off in the saved copy; the live optimizer keeps its tensor lr."""
    lm = language_model("nplm", "softmax")
    _, _, optimizer, _ = train_captured(lm, batches())
    for group in optimizer.param_groups:
        group["capturable"] = True  # as on a CUDA device
    saved = eager_optimizer_state(optimizer.state_dict())
    assert all(isinstance(g["lr"], float) and not g["capturable"] for g in saved["param_groups"])
    assert saved["param_groups"][0]["lr"] == pytest.approx(optimizer.param_groups[0]["lr"].item())
    assert isinstance(optimizer.param_groups[0]["lr"], torch.Tensor) and optimizer.param_groups[0]["capturable"]


def dry_run(run_train, *overrides: str) -> dict:
    return run_train(*overrides, "capture_dry=true")


def full_batches(metrics: dict, batch: int = 32) -> int:
    """The full batches of a run's last training epoch (its tokens over TOY_FAST's batch size)."""
    return round(metrics["train/tokens_per_s"] * metrics["train/epoch_time_s"]) // batch


@pytest.mark.parametrize("model", ["nplm", "modern"])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_nplm_train_with_the_dry_captured_step_gives_the_eager_run(run_train, model):
    """Through nplm-train (Lightning, groups of batches, a partial last group, a per-step schedule,
    validation, checkpoints): the dry captured step's run has the eager run's perplexities; it logs the
    batches that ran on the static buffers."""
    overrides = [*TOY_FAST, "trainer.max_epochs=2", "steps_per_execution=4", "optimizer.warmup_steps=3",
                 "trainer.gradient_clip_val=1.0"]
    if model == "modern":
        overrides += ["model=modern", "model.window=2", "model.summaries=1", "model.num_layers=2",
                      "model.first_hidden_dim=null"]
    eager = run_train(*overrides)
    dry = dry_run(run_train, *overrides)
    assert "train/graph_steps" not in eager
    # the last epoch replayed every full batch: the graph of the first epoch was kept (no warm-up again)
    assert dry["train/graph_steps"] == full_batches(dry)
    for key in ("train/ppl", "val/ppl", "test/ppl", "train/lr"):
        assert dry[key] == pytest.approx(eager[key], rel=1e-4), key
    assert 0 < dry["train/lr"] < 0.01  # the cosine's value after two epochs, not the tensor's initial one


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_weights_moving_average_keeps_the_step_captured(run_train):
    """callbacks.ema_decay (the sun2021 recipes' default) listens to no per-batch backward/optimizer hook: the
    step stays captured, and the averaged weights validate as in the eager run."""
    overrides = [*TOY_FAST, "trainer.max_epochs=2", "callbacks.ema_decay=0.9"]
    eager = run_train(*overrides)
    dry = dry_run(run_train, *overrides)
    assert dry["train/graph_steps"] > 0
    for key in ("val/ppl", "test/ppl"):
        assert dry[key] == pytest.approx(eager[key], rel=1e-4), key


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_plateau_schedule_of_a_dry_captured_run_gives_the_eager_run(run_train):
    """ReduceLROnPlateau steps after validation, filling the captured step's tensor step size in place."""
    overrides = [*TOY_FAST, "trainer.max_epochs=3", "optimizer=sgd", "optimizer.lr=5.0", "optimizer.lr_decay=0",
                 "optimizer.plateau_factor=0.5"]
    eager = run_train(*overrides)
    dry = dry_run(run_train, *overrides)
    for key in ("train/ppl", "val/ppl", "train/lr"):
        assert dry[key] == pytest.approx(eager[key], rel=1e-4), key
    assert dry["train/lr"] == 2.5  # the last epoch's: halved once after a validation no better than the best


def test_an_uncapturable_run_says_why_in_one_line_and_trains_eagerly(run_train, caplog):
    with caplog.at_level(logging.WARNING, logger="nplm.training.steps.captured"):
        metrics = dry_run(run_train, *TOY_FAST, "trainer.max_epochs=1", "model.sparse_embeddings=true")
    lines = [r.getMessage() for r in caplog.records if "cuda_graphs" in r.getMessage()]
    assert len(lines) == 1 and "row-sparse gradients" in lines[0] and "cuda_graphs=false silences this" in lines[0]
    assert "train/graph_steps" not in metrics and metrics["train/ppl"] > 0


def test_capture_dry_with_cuda_graphs_false_is_refused_before_any_data(run_train):
    with pytest.raises(UserError) as info:
        dry_run(run_train, *TOY_FAST, "trainer.max_epochs=1", "cuda_graphs=false")
    assert str(info.value) == ("capture_dry=true: dry-runs the captured step, which cuda_graphs=false turns off; set "
                               "cuda_graphs=true or capture_dry=false")


def test_cuda_graphs_must_be_a_boolean(run_train):
    with pytest.raises(UserError, match="cuda_graphs"):
        run_train(*TOY_FAST, "cuda_graphs=sometimes")


# -- on a CUDA device: the graph itself ---------------------------------------------------------------
def steps_on_cuda(step: CapturedStep, schedule, data) -> list[torch.Tensor]:
    """Train on `data` through `step`, under torch.cuda.set_sync_debug_mode("error") from the first replay on
    (a host-device sync raises); each batch's loss sum."""
    sums = []
    for i, (context, target) in enumerate(data):
        torch.cuda.set_sync_debug_mode("error" if i > capture.WARMUP_STEPS else "default")
        try:
            step.step(context, target)
            schedule.step()
            sums.append(step.take_loss_sum())
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sums


@CUDA
@pytest.mark.parametrize("precision", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head", HEADS.names())
@pytest.mark.parametrize("model", MODELS.names())
def test_captured_step_on_cuda_trains_as_the_eager_step_without_a_host_sync(model, head, precision):
    """Capture and replay with torch.cuda.set_sync_debug_mode("error") from the first replay on: the
    graph replayed (no capture failure), and its losses and parameters equal the eager loop's within the
    precision's tolerance (no dropout here: the graph's Philox offsets need not match eager draws)."""
    data = batches(device="cuda") + batches(1, batch=B // 2, device="cuda")
    eager = language_model(model, head, dropout=0.0).cuda()
    graphed = copy.deepcopy(eager)
    # cache_enabled=False: each eager step casts the weights it just updated, as Lightning's per-step autocast
    # does (one cached autocast around the whole loop would keep the first step's bf16 weights)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == torch.bfloat16, cache_enabled=False):
        want = train_eager(eager, data)
        optimizer, schedule = optimizer_of(graphed)
        step = CapturedStep(graphed._train_loss, graphed.parameters(), optimizer, dry=False)
        torch.manual_seed(7)
        sums = steps_on_cuda(step, schedule, data)
    assert step.failed is None and step.replays == STEPS - capture.WARMUP_STEPS
    tolerance = 1e-3 if precision == torch.float32 else 3e-2
    sampled = not head_class(head).exact_training_loss  # the graph's samples differ from eager draws
    got = [s.item() for s in sums]
    assert got[:capture.WARMUP_STEPS] == pytest.approx(want[:capture.WARMUP_STEPS], rel=tolerance)
    if not sampled:
        assert got == pytest.approx(want, rel=tolerance)
        for a, b in zip(eager.parameters(), graphed.parameters()):
            torch.testing.assert_close(b, a, rtol=tolerance, atol=tolerance)
    assert all(torch.isfinite(p).all() for p in graphed.parameters())


@CUDA
def test_dropout_masks_differ_between_replays_on_cuda():
    """The default generator's Philox offset advances with every replay: a model with dropout trained on
    the same batch again and again gets a different loss each replay even with its weights frozen (lr 0)."""
    lm = language_model("modern", "softmax", dropout=0.5).cuda()
    optimizer = build_optimizer(lm, {"name": "adam", "lr": 1e-30})
    step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=False)
    context, target = batches(1, device="cuda")[0]
    sums = []
    for _ in range(capture.WARMUP_STEPS + 3):
        step.step(context, target)
        sums.append(step.take_loss_sum().item())
    assert step.replays == 3 and len(set(sums[capture.WARMUP_STEPS:])) == 3


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_a_dry_captured_run_writes_checkpoints_an_eager_run_resumes(run_train, tmp_path):
    """last.ckpt holds float step sizes, capturable off; resuming it without the captured step trains on."""
    first = dry_run(run_train, *TOY_FAST, "trainer.max_epochs=1")
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    groups = saved["optimizer_states"][0]["param_groups"]
    assert all(isinstance(g["lr"], float) and not g.get("capturable") for g in groups)
    resumed = train(compose_cfg(tmp_path / "again", *TOY_FAST, "trainer.max_epochs=2", f"resume={last}",
                                "resume_allow_changes=true"))
    assert 0 < resumed["train/ppl"] < first["train/ppl"]  # a second epoch trained on


@CUDA
def test_the_reduce_overhead_mode_on_cuda_trains_as_the_eager_step():
    """compile_mode=reduce-overhead on a GPU, as training_step drives it (a cudagraph step per batch, the
    losses copied out): the modern NPLM with the adaptive head trains as the eager loop does (fp32, no dropout)."""
    from torch._inductor import config

    data = batches(device="cuda")
    eager = language_model("modern", "adaptive", dropout=0.0).cuda()
    compiled = copy.deepcopy(eager)
    want = train_eager(eager, data)
    loss = torch.compile(compiled._train_loss, fullgraph=True, mode="reduce-overhead")
    optimizer, schedule = optimizer_of(compiled)
    got = []
    with config.patch(fallback_random=True):
        for context, target in data:
            torch.compiler.cudagraph_mark_step_begin()
            nll = loss(context, target)
            nll.mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            got.append(nll.detach().clone().sum(dtype=torch.float64))
    assert [g.item() for g in got] == pytest.approx(want, rel=1e-3)


@CUDA
def test_a_compiled_step_on_cuda_is_captured_and_trains_as_the_eager_step():
    """compile=true on CUDA: inductor's step (compiled in the first warm-up step) captured with the optimizer
    update as one graph, replayed with no host sync; bf16 losses as the eager loop's (no dropout)."""
    data = batches(device="cuda")
    eager = language_model("modern", "adaptive", dropout=0.0).cuda()
    compiled = copy.deepcopy(eager)
    assert capture_blocker(compiled, build_optimizer(compiled, {"name": "adamw", "lr": 0.01}), 1, True, True) is None
    torch._dynamo.reset()
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        want = train_eager(eager, data)
        optimizer, schedule = optimizer_of(compiled)
        step = CapturedStep(torch.compile(compiled._train_loss, fullgraph=True), compiled.parameters(), optimizer)
        sums = steps_on_cuda(step, schedule, data)
    assert step.failed is None and step.replays == STEPS - capture.WARMUP_STEPS
    assert [s.item() for s in sums] == pytest.approx(want, rel=3e-2)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_nplm_train_captures_the_compiled_step_compiling_it_once(run_train, compile_backend, monkeypatch):
    """compile=true with the captured step (dry: the same calls on the static buffers, no graph), as a GPU run
    drives it: every full batch replays, the loss is compiled once for them (and once more for the epoch's
    partial last batch, of another shape), and the perplexities are the uncaptured compiled run's."""
    from torch._dynamo.testing import CompileCounter

    overrides = [*TOY_FAST, "trainer.max_epochs=1", "compile=true", compile_backend,
                 "data.batch_size=8"]  # 14 full batches, 1 short
    plain = run_train(*overrides)
    torch._dynamo.reset()
    counter = CompileCounter()
    compile_ = torch.compile  # the run's compile, through a backend that counts the graphs it is handed
    monkeypatch.setattr(torch, "compile", lambda f, **kw: compile_(f, **{**kw, "backend": counter}))
    captured = dry_run(run_train, *overrides)
    assert captured["train/graph_steps"] == full_batches(captured, batch=8) - capture.WARMUP_STEPS == 11
    assert counter.frame_count == 2  # the full batches' shape, and the partial last batch's
    for key in ("train/ppl", "val/ppl"):
        assert captured[key] == pytest.approx(plain[key], rel=1e-5), key


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_reduce_overhead_mode_marks_each_step_and_keeps_the_losses_it_sums(run_train, compile_backend,
                                                                              monkeypatch):
    """compile_mode=reduce-overhead (torch.compile's own CUDA graphs): every training batch starts a new
    cudagraph step and its losses are copied out before the next one reuses the graph's memory; nplm's own
    capture stays off. On the CPU the mode captures nothing: the same perplexities as the plain compiled run."""
    overrides = [*TOY_FAST, "trainer.max_epochs=1", "compile=true", compile_backend]
    plain = run_train(*overrides)
    torch._dynamo.reset()
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    trees = dry_run(run_train, *overrides, "compile_mode=reduce-overhead")
    assert len(marks) == full_batches(trees) + 1  # each batch, the last partial one too
    assert "train/graph_steps" not in trees  # nplm's capture is off
    for key in ("train/ppl", "val/ppl"):
        assert trees[key] == pytest.approx(plain[key], rel=1e-5), key


# a tensor's value read on the host: on a GPU each is a host-device sync, which drains the queue of replays
HOST_READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__format__", "__repr__", "numpy",
              "__array__", "cpu", "nonzero", "unique", "masked_select", "equal", "allclose"}


class HostReads(torch.overrides.TorchFunctionMode):
    """The names of the tensor calls made inside it that read a value on the host (HOST_READS, or indexing by a
    boolean mask, whose result's size is data-dependent)."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        masked = (name in ("__getitem__", "__setitem__") and isinstance(args[1], torch.Tensor)
                  and args[1].dtype == torch.bool)
        if name in HOST_READS or masked:
            self.names.append(name)
        return func(*args, **(kwargs or {}))


class ReadsPerStep(pl.Callback):
    """The host reads of each Lightning training step after the first epoch (whose first steps warm up and
    capture), from its start to the next step's start (the step, its callbacks, the next batch's fetch), an
    epoch's last step to its end (validation left out); `log_steps`: the steps that wrote a training log line."""

    def __init__(self):
        self.watch: HostReads | None = None
        self.steps: list[list[str]] = []
        self.log_steps: set[int] = set()

    def on_train_batch_start(self, trainer, *args) -> None:
        self.stop()
        if trainer.current_epoch >= 1:
            self.watch = HostReads().__enter__()
            self.steps.append(self.watch.names)

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.is_last_batch:  # (validation follows)
            self.stop()

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.__exit__(None, None, None)
            self.watch = None


@pytest.mark.parametrize("mode", [
    ["data.batch_size=4", "callbacks.ema_decay=0.9"],  # shuffled windows, the weights' moving average (sun2021/brown)
    ["data.block_size=8", "data.batch_size=2", "optimizer.warmup_steps=3", "trainer.gradient_clip_val=1.0"],  # blocks
    ["data.batch_size=4", "callbacks.ema_decay=0.9", "cuda_graphs=false"],  # the eager step (a configuration not captured)
], ids=["windows", "blocks", "eager"])
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_lightning_steps_read_the_device_only_at_log_lines(tmp_path, monkeypatch, mode):
    """Between log lines nplm-train's Lightning steps (each a group of batches, captured or eager, the loss sum
    and the finite check kept on the device, the weights' moving average, the per-step schedule, the next
    group's fetch) read no tensor on the host, in window and in block training: on a GPU such a read waits
    for all the queued work and leaves the card idle while the host catches up (AveragedModel's own update
    did, twice a step: this test fails with it back). At a log line the loss check reads
    (module.check_finite), and the test sees it."""
    recorder, log_window = ReadsPerStep(), LanguageModel._log_window

    def spied_log_window(self, *args, **kwargs):
        if recorder.watch is not None:
            recorder.log_steps.add(len(recorder.steps) - 1)
        return log_window(self, *args, **kwargs)

    monkeypatch.setattr(LanguageModel, "_log_window", spied_log_window)
    # as on a GPU: the adaptive head does not read the device to score a batch beyond its capacities exactly
    monkeypatch.setattr(AdaptiveHead, "_host_reads_free", staticmethod(lambda features: False))
    cfg = compose_cfg(tmp_path, *TOY_FAST, "model=modern", "model.window=2", "model.summaries=1", "model.num_layers=2",
                      "model.first_hidden_dim=null", "head=adaptive", "head.div_value=1.0", "model.tie_embeddings=true",
                      "head.training_path=capacity", "steps_per_execution=2", "trainer.log_every_n_steps=6",
                      "trainer.max_epochs=3", *mode, *([] if "cuda_graphs=false" in mode else ["capture_dry=true"]))
    metrics = train(cfg, callbacks=[recorder])
    captured = "cuda_graphs=false" not in mode
    assert metrics["train/graph_steps"] > 0 if captured else "train/graph_steps" not in metrics
    reading = {i for i, names in enumerate(recorder.steps) if names}
    assert len(recorder.steps) >= 8 and 2 <= len(recorder.log_steps) <= len(recorder.steps) // 2
    assert reading == recorder.log_steps, {i: recorder.steps[i] for i in sorted(reading ^ recorder.log_steps)}
    assert all("tolist" in recorder.steps[i] for i in recorder.log_steps)  # check_finite's one read of the device


class AtenOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops dispatched inside it, by name (on a GPU, about one kernel each)."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_the_captured_step_is_the_plain_loops_step_and_a_few_ops_of_bookkeeping(tmp_path):
    """What a captured replay runs beyond a plain training loop's step (loss.mean().backward(), torch's fused
    capturable AdamW over one group), at `experiment=sun2021/brown`'s model and head: the copies of the batch
    into the static inputs, the loss sum for the log, and the update of the second parameter group (biases and
    norms, no weight decay). The one-graph gap to the plain loop on a GPU (experiments/bench/README.md) is not
    in the graph's own work: a new op in the step fails here."""
    cfg = compose_cfg(tmp_path, "experiment=sun2021/brown")
    vocab = Vocabulary([f"w{i}" for i in range(400)], [int(4000 / (r + 1)) + 1 for r in range(400)], unk=None)
    plain = OmegaConf.to_container
    g = torch.Generator().manual_seed(0)
    context, target = torch.randint(0, 20, (64, 32), generator=g), torch.randint(0, 20, (64,), generator=g)

    torch.manual_seed(0)
    lm = LanguageModel(plain(cfg.model), {**plain(cfg.head), "training_path": "capacity"}, plain(cfg.optimizer), vocab)
    optimizer = build_optimizer(lm, plain(cfg.optimizer))
    step = CapturedStep(lm._train_loss, lm.parameters(), optimizer, dry=True)
    for group in optimizer.param_groups:
        group["capturable"] = True  # as on a CUDA device
    for _ in range(capture.WARMUP_STEPS + 1):
        step.step(context, target)
    with AtenOps() as captured:
        step.step(context, target)

    torch.manual_seed(0)
    lm = LanguageModel(plain(cfg.model), {**plain(cfg.head), "training_path": "capacity"}, plain(cfg.optimizer), vocab)
    adamw = torch.optim.AdamW(lm.parameters(), lr=torch.tensor(1e-3), weight_decay=0.1, fused=True, capturable=True)
    for i in range(2):  # (the first step makes the optimizer's state)
        with AtenOps() if i else contextlib.nullcontext() as loop:
            lm._train_loss(context, target).mean().backward()
            adamw.step()
        adamw.zero_grad(set_to_none=True)

    more = captured.counts - loop.counts
    assert not loop.counts - captured.counts and sum(loop.counts.values()) > 300
    assert dict(more) == {"copy_": 2, "sum": 1, "add_": 1, "detach": 1, "_fused_adamw_": 1, "_foreach_add_": 1}
