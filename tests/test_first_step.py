"""An output layer trains on any model's features: for every registered model (each mode of it: every value of a
key that decides which of its keys apply, such as the Transformer's `first_layer`) and every head (each variant
it lists), one optimizer step of the default recipe on `toy` never raises the validation perplexity above the
untrained model's. The features' scale differs by two orders of magnitude between families (a Transformer's
final LayerNorm gives norm about sqrt(d), an LSTM's below 1), so a head whose start depends on it fails here."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose_cfg, head_id, head_overrides, head_variants
from nplm.config.schema import groups
from nplm.data.datamodule import LMDataModule
from nplm.models import data_layout
from nplm.optimizers import build_optimizer
from nplm.training.module import LanguageModel
from nplm.training.tree_phase import tree_for_head

STREAM_TOY = ["data.batch_size=4", "data.block_size=10"]  # toy's 3 blocks of 35 tokens feed no 128 streams


def model_modes() -> list[tuple[str, dict]]:
    """(model, {deciding key: value}): each model's yaml, and each other value of a Choice key that another of
    its keys depends on (`Rule.when`)."""
    modes = []
    for name in groups()["model"].options:
        keys = groups()["model"].keys_of(name)
        deciding = {other for rule in keys.values() for other, _ in rule.when}
        modes.append((name, {}))
        modes += [(name, {key: value}) for key in sorted(deciding) for value in keys[key].options
                  if value != keys[key].default]
    return modes


def cases():
    for model, mode in model_modes():
        for head, options in head_variants():
            yield pytest.param(model, mode, head, options, id="-".join(
                [model, *(f"{k}={v}" for k, v in mode.items()), head_id(head, options)]))


def plain(node):
    return OmegaConf.to_container(node, resolve=True)


def validation_perplexity(module: LanguageModel, dm: LMDataModule) -> float:
    module.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in dm.val_dataloader():
            nll = module.nll(*batch)  # [N]
            total, count = total + nll.sum().item(), count + nll.numel()
    module.train()
    return math.exp(total / count)


@pytest.mark.parametrize("model,mode,head,options", cases())
def test_one_optimizer_step_never_raises_the_validation_perplexity(tmp_path, model, mode, head, options):
    overrides = ["corpus=toy", f"model={model}", *(f"model.{k}={v}" for k, v in mode.items()),
                 *head_overrides(head, options)]
    cfg = compose_cfg(tmp_path, *overrides)
    context_size, block_size, carries_state = data_layout(plain(cfg.model), cfg.data.get("block_size"))
    if carries_state:
        cfg = compose_cfg(tmp_path, *overrides, *STREAM_TOY)
        context_size, block_size, carries_state = data_layout(plain(cfg.model), cfg.data.get("block_size"))
    torch.manual_seed(cfg.seed)
    dm = LMDataModule(plain(cfg.corpus), context_size, cfg.data.batch_size, cfg.data.eval_batch_size, seed=cfg.seed,
                      data_dir=cfg.paths.data_dir, block_size=block_size, carries_state=carries_state)
    dm.setup()
    module = LanguageModel(plain(cfg.model), plain(cfg.head), plain(cfg.optimizer), dm.vocab,
                           tree=tree_for_head(cfg, dm))
    optimizer = build_optimizer(module, plain(cfg.optimizer), 100)
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    untrained = validation_perplexity(module, dm)
    optimizer.zero_grad()
    module._train_loss(*next(iter(dm.train_dataloader()))).mean().backward()
    optimizer.step()
    assert validation_perplexity(module, dm) <= untrained
