"""Lazy (row-sparse) updates of the embedding table C (`model.sparse_embeddings=true`), and the step-size schedules."""

from __future__ import annotations

import re

import math

import pytest
import torch
from torch import nn

from nplm.config.schema import check_group, groups
from nplm.errors import UserError
from nplm.optimizers import build_optimizer, lazy
from nplm.optimizers.lazy import step_without_profiler
from conftest import TOY_FAST, compose_cfg
from omegaconf import OmegaConf


def _two_tables(seed: int = 0) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    dense = nn.Sequential(nn.Embedding(6, 3), nn.Linear(3, 2))
    sparse = nn.Sequential(nn.Embedding(6, 3, sparse=True), nn.Linear(3, 2))
    sparse.load_state_dict(dense.state_dict())
    return dense, sparse


def _train(module: nn.Module, cfg: dict, batches: list[torch.Tensor]) -> torch.Tensor:
    opt = build_optimizer(module, cfg)
    opt = opt["optimizer"] if isinstance(opt, dict) else opt
    for ids in batches:
        opt.zero_grad()
        module(ids).pow(2).sum().backward()
        opt.step()
    return module[0].weight.detach()


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_lazy_update_equals_the_dense_one_when_every_row_is_in_every_batch(name):
    dense, sparse = _two_tables()
    cfg = {"name": name, "lr": 0.05, "weight_decay": 0.01, "fused": False}
    batches = [torch.randperm(6) for _ in range(5)]  # every row, every step
    torch.testing.assert_close(_train(sparse, cfg, batches), _train(dense, cfg, batches), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(sparse[1].weight, dense[1].weight, atol=1e-6, rtol=1e-5)  # dense params as before


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("name, torch_class", [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_direct_fused_step_gives_torchs_fused_adam_bit_for_bit(name, torch_class, kernels, monkeypatch):
    """LazyAdam calls the fused kernel itself on every step after the first (torch's Adam.step only
    creates the state) and moves the parameters exactly as torch's Adam/AdamW(fused=True): weight
    decay on the weights only, and a parameter without a gradient left alone. The kernels are private
    ops (`lazy.fused_adam_kernels` checks them once): forced unavailable, every step is torch's, and
    the parameters are the same."""
    assert lazy.fused_adam_kernels()  # this torch: the direct call is live
    if not kernels:
        monkeypatch.setattr(lazy, "fused_adam_kernels", lambda: False)
    torch.manual_seed(0)
    ours_net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3), nn.Linear(3, 3))
    theirs_net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3), nn.Linear(3, 3))
    theirs_net.load_state_dict(ours_net.state_dict())
    ours = build_optimizer(ours_net, {"name": name, "lr": 0.01, "weight_decay": 0.1})
    decay = [p for p in theirs_net.parameters() if p.dim() >= 2]
    theirs = torch_class([{"params": decay, "weight_decay": 0.1},
                          {"params": [p for p in theirs_net.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                         lr=0.01, fused=True)
    torch_steps = []
    torch_step = torch.optim.Adam.step
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, *a, **k: (torch_steps.append(self is ours),
                                                                         torch_step(self, *a, **k))[1])
    for _ in range(4):
        x = torch.randn(8, 4)
        for net, opt in ((ours_net, ours), (theirs_net, theirs)):
            opt.zero_grad(set_to_none=True)
            net[:3](x).square().sum().backward()  # net[3] gets no gradient
            opt.step()
    assert torch_steps.count(True) == (1 if kernels else 4)  # with the kernels, torch's step once: the first
    assert ours.state[ours_net[0].weight]["step"].item() == 4.0
    for a, b in zip(ours_net.parameters(), theirs_net.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("wrapper", [True, False])
def test_step_without_profiler_steps_as_step_and_keeps_hooks_and_schedulers(wrapper, monkeypatch):
    """Where torch wraps `step` as `lazy.torch_step_wrapper` checks (private attributes), the step
    skips the wrapper only where nothing listens. Forced to say no: every step is `optimizer.step()`,
    the same parameters; the first step, through torch's Adam.step (which a plain Adam in the process
    has wrapped too), then runs the hooks a second time."""
    assert lazy.torch_step_wrapper()  # this torch
    if not wrapper:
        monkeypatch.setattr(lazy, "torch_step_wrapper", lambda: False)

    def run(step, listen: str = "") -> tuple[torch.Tensor, list]:
        torch.manual_seed(0)
        layer = nn.Linear(4, 3)
        opt = build_optimizer(layer, {"name": "adam", "lr": 0.1})
        heard = []
        torch.optim.Adam([nn.Parameter(torch.ones(1))])  # torch wraps Adam.step: the hooks must still run once
        if listen == "hook":
            opt.register_step_post_hook(lambda *args: heard.append("hook"))
        elif listen == "scheduler":
            torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0)  # wraps opt.step to count its calls
            heard.append(opt._opt_called if hasattr(opt, "_opt_called") else None)
        for _ in range(3):
            layer(torch.ones(2, 4)).square().sum().backward()
            step(opt)
            opt.zero_grad()
        if listen == "scheduler":
            heard.append(opt._opt_called)
        return layer.weight.detach(), heard

    reference, _ = run(lambda opt: opt.step())
    weight, heard = run(step_without_profiler)
    assert torch.equal(weight, reference) and heard == []
    assert run(step_without_profiler, "hook")[1] == ["hook"] * (3 if wrapper else 4)
    assert run(step_without_profiler, "scheduler")[1][-1] is True  # the scheduler saw the steps


def test_rows_outside_the_batch_do_not_move_under_lazy_adam():
    dense, sparse = _two_tables()
    before = sparse[0].weight.detach().clone()
    cfg = {"name": "adam", "lr": 0.05, "weight_decay": 0.01}
    batches = [torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([2])]
    after_sparse = _train(sparse, cfg, batches)
    assert torch.equal(after_sparse[3:], before[3:])  # never in a batch
    assert torch.equal(after_sparse[:3].ne(before[:3]).all(dim=1), torch.tensor([True, True, True]))
    # dense Adam keeps moving rows 0 and 1 in step 3 on momentum; lazy Adam does not
    assert not torch.allclose(_train(dense, cfg, batches)[:2], after_sparse[:2])


@pytest.mark.slow  # two runs compared
def test_training_with_sparse_embeddings_matches_dense_sgd(run_train, tmp_path):
    """Plain SGD without weight decay: the lazy update of C is the dense one exactly (a zero gradient
    row does not move), so whole runs agree."""
    sgd = ["optimizer=sgd", "optimizer.lr=0.5", "optimizer.weight_decay=0", "optimizer.lr_decay=0"]
    sparse = run_train(*TOY_FAST, *sgd, "model.sparse_embeddings=true", f"paths.output_dir={tmp_path / 's'}")
    dense = run_train(*TOY_FAST, *sgd, f"paths.output_dir={tmp_path / 'd'}")
    assert sparse["test/ppl"] == pytest.approx(dense["test/ppl"], rel=1e-5)
    assert sparse["test/ppl"] < 20  # it learned: the toy corpus has 25 words


def test_plateau_factor_shrinks_the_step_after_an_epoch_without_a_better_val_ppl():
    module = nn.Linear(3, 2)
    got = build_optimizer(module, {"name": "adam", "lr": 0.01, "plateau_factor": 0.5})
    assert got["lr_scheduler"]["monitor"] == "val/ppl" and got["lr_scheduler"]["interval"] == "epoch"
    schedule, opt = got["lr_scheduler"]["scheduler"], got["optimizer"]
    for val_ppl, lr in [(100.0, 0.01), (90.0, 0.01), (95.0, 0.005), (89.0, 0.005), (89.5, 0.0025)]:
        schedule.step(val_ppl)  # what Lightning does at the end of each validation
        assert opt.param_groups[0]["lr"] == pytest.approx(lr)


def test_cosine_anneals_the_step_to_zero_over_the_run():
    module = nn.Linear(3, 2)
    got = build_optimizer(module, {"name": "adam", "lr": 0.01, "cosine": True}, total_steps=4)
    assert got["lr_scheduler"]["interval"] == "step"
    schedule, opt = got["lr_scheduler"]["scheduler"], got["optimizer"]
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(5):  # what _optimizer_step does after each update; past T the step stays 0
        opt.step()
        schedule.step()
        seen.append(opt.param_groups[0]["lr"])
    half = 0.01 * (1 + math.cos(math.pi / 4)) / 2
    assert seen == pytest.approx([0.01, half, 0.005, 0.01 - half, 0.0, 0.0])


def _lrs(options: dict, total_steps: int, steps: int) -> list[float]:
    """The step size before the first update and after each of `steps` updates."""
    got = build_optimizer(nn.Linear(3, 2), {"name": "adam", "lr": 0.01, **options}, total_steps=total_steps)
    schedule, opt = got["lr_scheduler"]["scheduler"], got["optimizer"]
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        schedule.step()
        seen.append(opt.param_groups[0]["lr"])
    return seen


def test_warmup_then_cosine_over_the_updates_left():
    """W = 2 warm-up updates at lr (t + 1) / W, then the half cosine over the T - W = 4 updates left, to 0."""
    half = 0.01 * (1 + math.cos(math.pi / 4)) / 2
    assert _lrs({"warmup_steps": 2, "cosine": True}, total_steps=6, steps=7) == pytest.approx(
        [0.005, 0.01, 0.01, half, 0.005, 0.01 - half, 0.0, 0.0])


def test_warmup_then_the_inverse_time_decay_or_a_constant_step():
    assert _lrs({"warmup_steps": 4}, total_steps=100, steps=5) == pytest.approx(
        [0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])
    assert _lrs({"warmup_steps": 1, "lr_decay": 0.5}, total_steps=100, steps=3) == pytest.approx(
        [0.01, 0.01, 0.01 / 1.5, 0.01 / 2])


def test_epoch_decay_keeps_the_step_for_n_epochs_then_multiplies_it_every_epoch():
    """An epoch schedule: lr for the first N = 4 epochs, then halved after every epoch (stepped at each
    epoch's end, `step_epoch_schedules`), saved as plain data."""
    import io

    got = build_optimizer(nn.Linear(3, 2), {"name": "sgd", "lr": 1.0, "epoch_decay": 0.5, "epoch_decay_after": 4})
    assert got["lr_scheduler"]["interval"] == "epoch"
    schedule, opt = got["lr_scheduler"]["scheduler"], got["optimizer"]
    seen = []
    for _ in range(7):
        seen.append(opt.param_groups[0]["lr"])  # the epoch's step size
        opt.step()
        schedule.step()
    assert seen == pytest.approx([1, 1, 1, 1, 0.5, 0.25, 0.125])
    buffer = io.BytesIO()
    torch.save(schedule.state_dict(), buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["lr_lambdas"][0] == {"factor": 0.5, "after": 4}


def test_a_warmup_schedule_saves_as_plain_data():
    """LambdaLR keeps the schedule object's attributes in the checkpoint, read back with weights_only."""
    import io
    got = build_optimizer(nn.Linear(3, 2), {"name": "adam", "lr": 0.01, "warmup_steps": 3, "cosine": True}, 10)
    buffer = io.BytesIO()
    torch.save(got["lr_scheduler"]["scheduler"].state_dict(), buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["lr_lambdas"][0] == {"steps": 3, "cosine_steps": 7, "rate": 0.0}


@pytest.mark.parametrize("options, message", [
    ({"warmup_steps": -1}, "optimizer.warmup_steps=-1: must be an integer >= 0"),
    ({"warmup_steps": 10, "plateau_factor": 0.5}, "optimizer.warmup_steps=10: must be 0 when optimizer.plateau_factor "
     "< 1 (the plateau schedule works per epoch; warm-up per update)"),
    ({"plateau_factor": 0.0}, "optimizer.plateau_factor=0.0: must be a number in (0, 1]"),
    ({"plateau_factor": 1.5}, "optimizer.plateau_factor=1.5: must be a number in (0, 1]"),
    ({"plateau_factor": 0.5, "lr_decay": 1e-8},
     "optimizer.plateau_factor=0.5: must be 1 when optimizer.lr_decay > 0 (two schedules; set one of them)"),
    ({"cosine": True, "plateau_factor": 0.5}, "optimizer.cosine=true: must be false when optimizer.lr_decay > 0 or "
     "optimizer.plateau_factor < 1 (two schedules; set one of them)"),
    ({"cosine": True, "lr_decay": 1e-8}, "optimizer.cosine=true: must be false when optimizer.lr_decay > 0 or "
     "optimizer.plateau_factor < 1 (two schedules; set one of them)"),
    ({"cosine": "yes"}, "optimizer.cosine=yes: must be true or false"),
    ({"epoch_decay": 0.5, "cosine": True}, "optimizer.epoch_decay=0.5: must be 1 when optimizer.cosine=true (two "
     "schedules; set one of them)"),
    ({"epoch_decay": 0.0}, "optimizer.epoch_decay=0.0: must be a number in (0, 1]"),
    ({"epoch_decay_after": -1}, "optimizer.epoch_decay_after=-1: must be an integer >= 0"),
])
def test_bad_schedule_settings_are_refused_in_one_line(options, message):
    with pytest.raises(UserError) as err:
        check_group("optimizer", groups()["optimizer"], {"name": "sgd", "lr": 0.1, **options})
    assert str(err.value) == message


def test_adamw_decays_decoupled_also_where_torch_has_no_such_group_key():
    """torch < 2.7 has no `decoupled_weight_decay` group key (AdamW was its own class, no Adam): the
    lazy optimizers then tell AdamW by its class, in the fused kernel's choice and the sparse rows' step."""
    from nplm.optimizers.lazy import LazyAdam, LazyAdamW

    weight = nn.Parameter(torch.ones(4, 3))
    rows, grad = torch.tensor([0, 2]), torch.full((2, 3), 0.5)
    for cls, decoupled in ((LazyAdamW, True), (LazyAdam, False)):
        results = []
        for drop_key in (False, True):
            param = nn.Parameter(weight.detach().clone())
            opt = cls([param], lr=0.1, weight_decay=0.5)
            group = dict(opt.param_groups[0])
            if drop_key:
                group.pop("decoupled_weight_decay")
            assert lazy._decoupled(opt, group) is decoupled
            with torch.no_grad():
                opt._sparse_step(group, param, rows, grad)
            results.append(param.detach().clone())
        assert torch.equal(*results)
    # AdamW's own constructor runs for LazyAdamW (its default decay, 1e-2; Adam's is 0)
    assert LazyAdamW([nn.Parameter(torch.ones(1))]).param_groups[0]["weight_decay"] == 1e-2
    assert LazyAdam([nn.Parameter(torch.ones(1))]).param_groups[0]["weight_decay"] == 0


@pytest.mark.parametrize("recipe,max_epoch,decay,epochs", [("small", 4, 2.0, 13), ("medium", 6, 1.2, 39),
                                                            ("large", 14, 1.15, 55)])
def test_zaremba_recipes_decay_the_step_as_their_main_lua(tmp_path, recipe, max_epoch, decay, epochs):
    """Zaremba et al.'s main.lua divides the step by `decay` after an epoch's validation `if epoch > max_epoch`
    (epoch = the epochs completed): max_epoch + 1 epochs at lr, then one division per epoch."""
    cfg = compose_cfg(tmp_path, f"experiment=zaremba2014/{recipe}")
    options = OmegaConf.to_container(cfg.optimizer, resolve=True)
    lr = options["lr"]
    got = build_optimizer(nn.Linear(3, 2), options)
    schedule, opt = got["lr_scheduler"]["scheduler"], got["optimizer"]
    seen, theirs, their_lr = [], [], 1.0
    for epoch in range(1, cfg.trainer.max_epochs + 1):  # main.lua's loop, their step (lr 1) times T
        seen.append(opt.param_groups[0]["lr"])
        theirs.append(their_lr * cfg.data.block_size)
        opt.step()
        schedule.step()
        if epoch > max_epoch:
            their_lr /= decay
    assert cfg.trainer.max_epochs == epochs and lr == cfg.data.block_size
    assert seen == pytest.approx(theirs, rel=1e-8)  # (the yamls write 1 / 1.2 to 10 digits)
