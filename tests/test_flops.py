"""FLOPs and model FLOP utilisation: the count against the NPLM's matmuls, every model x head counted,
the MFU arithmetic, the peak table and the cached measurement, a real run's record, and a run that
trains bit for bit as without the count."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from omegaconf import OmegaConf

from conftest import TOY_FAST, compose_cfg
from nplm.fast.cpu_gemm import ONEDNN_MIN_OUTPUTS
from nplm.heads import HEADS, build_head, head_class
from nplm.models import MODELS, build_model
from nplm.training import peak
from nplm.training.flops import FlopCount, FlopReport, count_step_flops
from nplm.training.peak import Peak, device_peak, precision_of, table_peak
from nplm.trees.tree import Tree, balanced_nested


def nplm_softmax_flops(B: int, k: int, m: int, h: int, V: int, direct: bool) -> int:
    """The matmuls of a training step of the NPLM with a softmax head (what FlopCounterMode counts, 2 per
    multiply-add): forward H x [B, km] x [km, h] and y = f [W | U]^T [B, F] x [F, V]; the backward has
    two of each (the input's and the weight's gradient; x needs one: C is trained)."""
    F = (k * m if direct else 0) + h
    return 3 * 2 * B * (k * m * h + F * V)


@pytest.mark.parametrize("V", [7, ONEDNN_MIN_OUTPUTS + 1])  # the second: oneDNN's linear on a CPU, where it works
@pytest.mark.parametrize("direct", [True, False])
def test_nplm_softmax_count_is_its_matmuls_and_leaves_the_modules_as_they_were(V, direct):
    B, k, m, h = 3, 2, 4, 5
    torch.manual_seed(0)
    model = build_model({"name": "nplm", "context_size": k, "embed_dim": m, "hidden_dim": h, "direct": direct,
                         "dropout": 0.5}, V).eval()
    head = build_head({"name": "softmax"}, model.feature_dim, V)
    context, target = torch.randint(V, (B, k)), torch.randint(V, (B,))
    rng = torch.get_rng_state()
    assert count_step_flops(model, head, context, target) == nplm_softmax_flops(B, k, m, h, V, direct)
    assert torch.equal(torch.get_rng_state(), rng)  # the dropout's draws were forked
    assert [p.grad for p in [*model.parameters(), *head.parameters()]] == [None] * 5
    assert (model.training, head.training) == (False, True)


def built(model_name: str, head_name: str, tmp_path):
    """The model and head of `model=<model_name> head=<head_name>` with their yaml defaults, over the toy
    corpus's vocabulary size, with a balanced tree where the head uses one."""
    cfg = compose_cfg(tmp_path, "corpus=toy", f"model={model_name}", f"head={head_name}")
    V = 42
    model = build_model(OmegaConf.to_container(cfg.model), V)
    options = OmegaConf.to_container(cfg.head)
    tree = Tree.from_nested(balanced_nested(list(range(V))), V) if head_class(head_name).uses_tree(options) else None
    head = build_head(options, model.feature_dim, V, counts=[V - w for w in range(V)], tree=tree)
    return model, head, V


@pytest.mark.parametrize("model_name", MODELS.names())
@pytest.mark.parametrize("head_name", HEADS.names())
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_every_model_and_head_counts_some_flops(model_name, head_name, tmp_path):
    model, head, V = built(model_name, head_name, tmp_path)
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(V, (8, model.context_size), generator=generator)
    target = torch.randint(V, (8,), generator=generator)
    assert count_step_flops(model, head, context, target) > 0


def test_mfu_is_flops_per_token_times_tokens_per_s_over_the_peak():
    report = FlopReport(per_step=600, tokens_per_step=3, peak=Peak(1e6, "measured", "fp32"))
    assert report.per_token == 200
    assert report.mfu(2500) == 0.5  # 2500 tokens/s x 200 FLOPs / 1e6 FLOP/s
    assert report.mfu(2500, devices=2) == 0.25
    assert report.metrics() == {"train/flops_per_step": 600, "train/flops_per_token": 200,
                                "device/peak_flops": 1e6}


def test_precision_picks_the_peak_column():
    assert [precision_of(p, tf32=True) for p in ("bf16-mixed", "bf16-true", "16-mixed", "32-true", "64-true")] == [
        "bf16", "bf16", "fp16", "tf32", "fp64"]
    assert precision_of("32-true", tf32=False) == "fp32"


@pytest.mark.parametrize("name,precision,expected", [
    ("NVIDIA H100 80GB HBM3", "bf16", Peak(989.5e12, "table: H100 SXM", "bf16")),
    ("NVIDIA H100 PCIe", "tf32", Peak(378e12, "table: H100 PCIe", "tf32")),
    ("NVIDIA H100 NVL", "fp16", Peak(835.5e12, "table: H100 NVL", "fp16")),
    ("NVIDIA H200", "tf32", Peak(494.5e12, "table: H200 SXM", "tf32")),
    ("NVIDIA A100-SXM4-80GB", "fp32", Peak(19.5e12, "table: A100", "fp32")),
    ("NVIDIA L4", "bf16", Peak(121e12, "table: L4", "bf16")),
    ("NVIDIA L40S", "bf16", Peak(366.5e12, "table: L40S", "bf16")),
    ("NVIDIA A10", "tf32", Peak(62.5e12, "table: A10", "tf32")),
    ("NVIDIA GeForce RTX 4090", "bf16", Peak(165.2e12, "table: RTX 4090", "bf16")),
    ("Tesla V100-PCIE-32GB", "fp16", Peak(112e12, "table: V100 PCIe", "fp16")),
    ("Tesla V100-SXM2-16GB", "tf32", Peak(15.7e12, "table: V100 SXM2", "fp32")),  # no TF32: float32
    ("Tesla T4", "tf32", Peak(8.1e12, "table: T4", "fp32")),
    ("Tesla T4", "bf16", None),  # no bf16 tensor cores: measured
    ("NVIDIA A10G", "bf16", None),  # not the A10
    ("NVIDIA GeForce RTX 3090", "bf16", None),
])
def test_the_peak_table_picks_the_device_and_precision(name, precision, expected):
    assert table_peak(name, precision) == expected


def test_a_measured_peak_is_cached_and_read_back(tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(peak, "measure_peak", lambda device, dtype: measured.append(dtype) or 2.5e10)
    monkeypatch.setattr(peak, "_measured", {})
    cpu = torch.device("cpu")
    assert device_peak(cpu, "fp32", tmp_path) == Peak(2.5e10, "measured", "fp32")
    assert measured == [torch.float32]
    cache = json.loads((tmp_path / peak.CACHE_FILE).read_text())
    key = f"{peak.device_name(cpu)}|torch.float32|threads={torch.get_num_threads()}"
    assert cache == {key: 2.5e10}
    (tmp_path / peak.CACHE_FILE).write_text(json.dumps({key: 3e10}))
    monkeypatch.setattr(peak, "_measured", {})  # a new process: reads the file, measures nothing
    assert device_peak(cpu, "fp32", tmp_path).flops == 3e10
    assert measured == [torch.float32]
    assert device_peak(cpu, "bf16", tmp_path).flops == 2.5e10 and measured == [torch.float32, torch.bfloat16]
    assert set(json.loads((tmp_path / peak.CACHE_FILE).read_text())) == {key, key.replace("float32", "bfloat16")}


def test_a_real_matmul_measures_a_positive_peak():
    assert peak.measure_peak(torch.device("cpu"), torch.float32, seconds=0.01) > 1e6


def test_a_run_records_its_flops_and_mfu(run_train, tmp_path, monkeypatch):
    monkeypatch.setattr(peak, "_measured", {})  # as in a new process: measured and cached in this run's data dir
    metrics = run_train(*TOY_FAST)  # context 3, embeddings 8, 16 hidden units, batch 32, 42 words
    step = nplm_softmax_flops(B=32, k=3, m=8, h=16, V=42, direct=True)
    assert metrics["train/flops_per_step"] == step and metrics["train/flops_per_token"] == step / 32
    assert 0 < metrics["train/mfu"] < 1 and metrics["device/peak_flops"] > 1e6
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["flops"]["flops_per_step"] == step and record["flops"]["peak_source"] == "measured"
    assert record["metrics"]["train/mfu"] == metrics["train/mfu"]
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert len(rows) == 2 and all(0 < float(r["train/mfu"]) < 1 for r in rows)
    assert (tmp_path / "data" / peak.CACHE_FILE).is_file()


def test_an_mfu_above_100_percent_is_shown_and_warned_never_clamped(run_train, tmp_path, monkeypatch, caplog):
    """A cached CPU peak of 1 kFLOP/s (as measured beside another job, far below any real rate): every
    epoch's MFU is far above 1, as it is, and each such epoch warns."""
    monkeypatch.setattr(peak, "_measured", {})
    key = f"{peak.device_name(torch.device('cpu'))}|torch.float32|threads={torch.get_num_threads()}"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / peak.CACHE_FILE).write_text(json.dumps({key: 1e3}))
    with caplog.at_level("WARNING", logger="nplm.training.throughput"):
        metrics = run_train(*TOY_FAST)
    assert metrics["device/peak_flops"] == 1e3
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert len(rows) == 2 and all(float(r["train/mfu"]) > 100 for r in rows)
    warnings = [r.getMessage() for r in caplog.records if "is above 100%" in r.getMessage()]
    assert len(warnings) == 2 and "the peak, 1000 FLOP/s (measured)" in warnings[0]


def _adaptive_count(path: str, executed: bool = False, tied: bool = False) -> int:
    """The FLOPs of one batch of 64 through the adaptive head with `training_path=path`."""
    V, F, B = 400, 32, 64
    counts = [1000 // (i + 1) + 1 for i in range(V)]  # Zipfian
    torch.manual_seed(0)
    model = build_model({"name": "nplm", "context_size": 3, "embed_dim": 8, "hidden_dim": F, "direct": False}, V)
    head = build_head({"name": "adaptive", "cutoffs": [40, 160], "training_path": path}, F, V, counts)
    targets = torch.multinomial(torch.tensor(counts, dtype=torch.float), B, replacement=True)  # [B]
    return count_step_flops(model, head, torch.randint(V, (B, 3)), targets, executed=executed)


def test_model_flops_are_the_same_for_every_training_path_of_the_adaptive_head():
    """auto (torch's grouping on a CPU), capacity and all: the same model FLOPs (each row: the shortlist and
    its own cluster), while what each path executes differs (capacity margins, every cluster)."""
    counted = {path: _adaptive_count(path) for path in ("auto", "capacity", "all")}
    assert len(set(counted.values())) == 1, counted
    executed = {path: _adaptive_count(path, executed=True) for path in ("auto", "capacity", "all")}
    assert executed["auto"] == counted["auto"] < executed["capacity"] < executed["all"], executed


def test_model_flops_of_the_modern_nplm_are_the_same_in_windows_and_in_blocks():
    """Whole blocks compute the distant summaries with banded Toeplitz matrices (zeros included) where
    windows sum each position's own vectors: the model's FLOPs a token are the same either way."""
    from nplm.data.blocks import Blocks
    from nplm.data.windows import Windows

    V, k, T = 50, 8, 16
    cfg = {"name": "modern", "context_size": k, "window": 2, "summaries": 2, "embed_dim": 16, "hidden_dim": 24,
           "num_layers": 2, "dropout": 0.0}
    torch.manual_seed(0)
    model = build_model(cfg, V)
    head = build_head({"name": "softmax"}, model.feature_dim, V)
    ids = torch.randint(V, (400,))
    blocks = Blocks(ids, k, T)
    context, target = blocks[torch.arange(4)]  # [4, T + k], [4, T]

    def features(c, t):
        return model.block_features(c).flatten(0, 1), t.flatten()

    per_token_blocks = count_step_flops(model, head, context, target, features=features) / target.numel()
    executed_blocks = count_step_flops(model, head, context, target, features=features, executed=True) / target.numel()
    windows = Windows(ids, k)
    context, target = windows[torch.arange(64)]  # [64, k], [64]
    per_token_windows = count_step_flops(model, head, context, target) / target.numel()
    assert per_token_blocks == per_token_windows < executed_blocks


def test_a_block_run_counts_every_position_of_its_blocks(run_train):
    """data.block_size=5: a training batch is up to 32 blocks of 5 tokens (the toy corpus has 23 whole
    blocks), every position through the head: 115 tokens a step, not 23."""
    metrics = run_train(*TOY_FAST, "model=modern", "model.context_size=4", "model.window=2", "model.summaries=1",
                        "data.block_size=5", "trainer.max_epochs=1")
    assert metrics["train/flops_per_step"] / metrics["train/flops_per_token"] == 115


@pytest.mark.slow  # two runs compared
def test_counting_changes_no_number_of_the_run(run_train, tmp_path, monkeypatch):
    """NCE draws its noise words and the model its dropout from the global generator; the count forks it."""
    setting = [*TOY_FAST, "head=nce", "model.dropout=0.3", "trainer.max_epochs=2"]
    counted = run_train(*setting)
    monkeypatch.setattr(FlopCount, "on_train_start", lambda *args: None)
    plain = run_train(*setting)
    assert "train/mfu" in counted and "train/mfu" not in plain
    for key in ("train/ppl_sampled", "val/ppl", "val/ppl_best", "test/ppl"):
        assert counted[key] == plain[key], key
    curves = [[(r["train/ppl_sampled"], r["val/ppl"]) for r in csv.DictReader(open(run / "metrics.csv"))]
              for run in (tmp_path / "run", tmp_path / "call2" / "run")]
    assert curves[0] == curves[1]
