"""The adaptive head's capacity path (`AdaptiveHead.loss` off the CPU's float32 eager path): each row pays
for the shortlist and its own target's cluster, with static shapes and no host sync, and its loss is
torch's `AdaptiveLogSoftmaxWithLoss` output exactly, also for rows over a cluster's capacity."""

from __future__ import annotations

import json
import math

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nplm.errors import UserError
from nplm.heads import build_head
from nplm.heads.adaptive import AdaptiveHead

from conftest import TOY_FAST, compose_cfg
from nplm.training.train import train

V, F = 200, 16
CUTOFFS = [20, 60, 150]
COUNTS = [int(3000 / (r + 1)) for r in range(V)]  # Zipfian; word id = frequency rank


def make(tied: bool) -> AdaptiveHead:
    torch.manual_seed(0)
    head = build_head({"name": "adaptive", "cutoffs": CUTOFFS, "div_value": 2.0}, F, V, COUNTS)
    if tied:
        head.tie_output_embeddings(nn.Parameter(torch.randn(V, F) / 4))
    head.path = "capacity"
    return head.double()


def cluster_of(target: torch.Tensor) -> torch.Tensor:
    return torch.bucketize(target, torch.tensor(CUTOFFS), right=True)  # [B] 0: shortlist, i: tail cluster i


def with_cluster_3_over(rows: int) -> torch.Tensor:
    """24 targets in cluster 3 (over its capacity 18 at 64 rows; 8 spill rows), the rest spread over the
    shortlist and clusters 1 and 2 within their capacities."""
    return torch.cat([torch.arange(150, 174), torch.arange(0, 3 * (rows - 24), 3)])


def zipf_targets(rows: int, seed: int = 1) -> torch.Tensor:
    return torch.multinomial(torch.tensor(COUNTS, dtype=torch.float64), rows, replacement=True,
                             generator=torch.Generator().manual_seed(seed))


def features(rows: int, seed: int = 2) -> torch.Tensor:
    return torch.randn(rows, F, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def torch_nll(head: AdaptiveHead, f: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return -head.adaptive(f, head.rank[target]).output  # [B] torch's module, the batch grouped on the host


@pytest.mark.parametrize("tied", [False, True])
def test_zipfian_batch_fits_the_capacities_and_equals_torchs_module(tied):
    head = make(tied)
    target = zipf_targets(256)
    sizes = torch.bincount(cluster_of(target), minlength=4)[1:].tolist()
    assert all(s > 0 for s in sizes) and all(s <= c for s, c in zip(sizes, head.capacities(256)))
    f = features(256)
    torch.testing.assert_close(head.loss(f, target), torch_nll(head, f, target), rtol=0, atol=1e-10)
    assert head.overflow_rows.tolist() == [0, 0, 0] and head.dropped_rows.item() == 0


@pytest.mark.parametrize("tied", [False, True])
def test_rows_over_a_capacity_are_scored_exactly_by_the_spill_and_counted(tied):
    """64 rows: cluster 3 (p = 0.048) has capacity ceil(3.05 + 4 * 1.70) + 8 = 18, the spill 8 rows; 24
    targets in cluster 3 overflow it by 6, all scored by the spill."""
    head = make(tied)
    assert head.capacities(64)[2] == 18 and head.spill_rows(64) == 8
    target = with_cluster_3_over(64)[torch.randperm(64, generator=torch.Generator().manual_seed(0))]
    f = features(64)
    torch.testing.assert_close(head.loss(f, target), torch_nll(head, f, target), rtol=0, atol=1e-10)
    assert head.overflow_rows.tolist() == [0, 0, 6] and head.overflow_peak.tolist() == [0, 0, 6]
    assert head.dropped_rows.item() == 0
    head.check_training(epoch_end=False)
    assert head.capacities(64)[2] == 18
    head.check_training(epoch_end=True)  # the epoch's worst batch fits from now on
    assert head.capacities(64)[2] == 24 and head.overflow_peak.tolist() == [0, 0, 0]
    head.loss(f, target)
    assert head.overflow_rows.tolist() == [0, 0, 6]


def all_in_cluster_3(rows: int = 64) -> torch.Tensor:
    """64 targets all in cluster 3: 18 within its capacity, 8 in the spill, 38 beyond both."""
    return 150 + torch.arange(rows) % 50


def test_rows_beyond_capacity_and_spill_are_scored_exactly_on_a_cpu_and_the_capacities_grow(caplog):
    """On a CPU in eager mode reading the device is free: a batch with rows beyond the capacity and the
    spill is scored on every cluster (exactly torch's loss), counted, logged at the epoch's end, and its
    overflow grows the capacity."""
    head = make(tied=False)
    f, target = features(64), all_in_cluster_3()
    torch.testing.assert_close(head.loss(f, target), torch_nll(head, f, target), rtol=0, atol=1e-10)
    assert head.fallback_batches == 1 and head.dropped_rows.item() == 0
    with caplog.at_level("INFO", logger="nplm.heads.adaptive_capacity"):
        head.check_training(epoch_end=True)
    assert "head=adaptive: 1 training batches had rows beyond the capacities" in caplog.text
    assert head.fallback_batches == 0 and head.capacities(64)[2] == 64  # 18 + the 56 it overflowed by


def test_without_a_free_host_read_a_batch_with_rows_left_out_trains_nothing_and_stops(monkeypatch):
    """Where reading the device would stall it (a GPU, torch.compile): the batch's loss and every gradient
    are NaN, so no step taken with rows left out is kept; `check_training` stops the run naming the fix."""
    monkeypatch.setattr(AdaptiveHead, "_host_reads_free", staticmethod(lambda features: False))
    head = make(tied=False)
    f = features(64).requires_grad_()
    got = head.loss(f, all_in_cluster_3())
    (grad,) = torch.autograd.grad(got.sum(), f)
    assert torch.isnan(got).all() and torch.isnan(grad).all() and head.dropped_rows.item() == 38
    with pytest.raises(UserError, match="^head=adaptive: 38 training rows were beyond their tail cluster's capacity "
                                        r"and the spill rows, .*resume it with head.training_path=all"):
        head.check_training(epoch_end=True)
    fits = zipf_targets(64)
    head = make(tied=False)
    torch.testing.assert_close(head.loss(features(64), fits), torch_nll(head, features(64), fits), rtol=0, atol=1e-10)


class SmallCapacities(pl.Callback):
    """From epoch `epoch` on, the head's capacities are 1 row a cluster and there is no spill, so most rows of
    every batch are beyond both; `free_reads=False`: as on a GPU, where the head cannot read the device."""

    def __init__(self, epoch: int, free_reads: bool = True):
        self.epoch, self.free_reads = epoch, free_reads

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch == self.epoch:
            head = module.head
            head.capacities = lambda rows: [1 + e for e in head.capacity_extra]
            head.spill_rows = lambda rows: 0
            head._host_reads_free = lambda features: self.free_reads


ADAPTIVE_RUN = [*TOY_FAST, "head=adaptive", "trainer.max_epochs=3"]


@pytest.mark.slow  # three toy runs
def test_a_run_beyond_its_capacities_trains_exactly_or_stops_keeping_its_checkpoints(tmp_path):
    """On a CPU the batches beyond the capacities are scored on every cluster: the run trains as the
    all-clusters path does, and its checkpoints keep the capacities it grew to. Where the device cannot be
    read (a GPU), the run stops at the next log line with the head's one line, keeping its folder, the
    epoch's checkpoints and a record saying why; resumed with head.training_path=all it finishes."""
    exact = train(compose_cfg(tmp_path / "all", *ADAPTIVE_RUN, "head.training_path=all"))
    grown = train(compose_cfg(tmp_path / "grown", *ADAPTIVE_RUN, "head.training_path=capacity"),
                  callbacks=[SmallCapacities(0)])
    assert grown["val/ppl_best"] == pytest.approx(exact["val/ppl_best"], rel=1e-4)
    sizes = torch.load(tmp_path / "grown" / "run" / "checkpoints" / "last.ckpt", weights_only=False)["nplm"]["head_sizes"]
    assert sizes and all(s > 0 for s in sizes)  # each tail cluster grew by what its batches overflowed

    run = tmp_path / "stopped" / "run"
    with pytest.raises(UserError, match=r"^head=adaptive: \d+ training rows were beyond their tail cluster's"):
        train(compose_cfg(tmp_path / "stopped", *ADAPTIVE_RUN, "head.training_path=capacity"),
              callbacks=[SmallCapacities(1, free_reads=False)])
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "failed" and "resume it with head.training_path=all" in record["error"]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["epoch"] == 0  # the epoch before
    again = train(compose_cfg(tmp_path / "again", *ADAPTIVE_RUN, "head.training_path=all", f"resume={run}"))
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "finished" and record["epochs"] == 3 and math.isfinite(again["val/ppl_best"])


@pytest.mark.parametrize("tied", [False, True])
def test_gradients_equal_the_all_clusters_path(tied):
    head = make(tied)
    target = with_cluster_3_over(64)  # the spill too
    params = [p for p in head.parameters() if p.requires_grad]
    grads = {}
    for path in ("all", "capacity"):
        head.path = path
        f = features(64).requires_grad_()
        weight = torch.linspace(0.5, 1.5, 64, dtype=torch.float64)  # a weighted sum: each row's gradient counts
        grads[path] = torch.autograd.grad((head.loss(f, target) * weight).sum(), [f, *params])
    for a, b in zip(grads["capacity"], grads["all"]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_the_training_path_key_picks_the_loss_path_and_a_bad_one_is_refused(run_train):
    """head.training_path: auto leaves the choice to the device and precision; capacity and all force one. The
    CPU in float32 eager would take torch's grouping: forced onto `all`, the loss costs a full softmax's FLOPs."""
    target = with_cluster_3_over(64)
    f = features(64).float()
    flops = {}
    for path in ("auto", "capacity", "all"):
        head = build_head({"name": "adaptive", "cutoffs": CUTOFFS, "div_value": 2.0, "training_path": path}, F, V, COUNTS)
        assert head.path == (None if path == "auto" else path)
        with FlopCounterMode(display=False) as counter:
            head.loss(f, target)
        flops[path] = counter.get_total_flops()
    bounds, rows = [*CUTOFFS, V], 64
    tails = sum(F // 2 ** (i + 1) * (F + hi - lo) for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])))
    assert flops["all"] == 2 * rows * (F * (CUTOFFS[0] + len(CUTOFFS)) + tails)  # every cluster for every row
    assert flops["capacity"] < 0.75 * flops["all"] and flops["auto"] < 0.75 * flops["all"]
    with pytest.raises(UserError, match=r"head.training_path=fast: .*auto, capacity, all"):
        run_train(*TOY_FAST, "head=adaptive", "head.training_path=fast")


@pytest.mark.slow  # torch.compile: seconds a graph
@pytest.mark.parametrize("tied", [False, True])
def test_fullgraph_compile_has_no_host_sync_and_equals_eager(tied):
    """fullgraph=True fails on a graph break: `.item()`, `nonzero()`, a boolean mask or any data-dependent
    size in the path would be one. Two batch sizes (the epoch's last batch is smaller); the counters
    update inside the graph."""
    torch._dynamo.reset()
    head = make(tied)
    loss = torch.compile(head.loss, fullgraph=True, backend="aot_eager")
    for rows, extra in ((64, 6), (48, 0)):
        target = with_cluster_3_over(rows) if extra else zipf_targets(rows)
        f = features(rows).requires_grad_()
        before = head.overflow_rows.clone()
        got = loss(f, target)
        torch.testing.assert_close(got, torch_nll(head, f, target), rtol=0, atol=1e-10)
        assert (head.overflow_rows - before).sum().item() >= extra
        (g,) = torch.autograd.grad(got.sum(), f)
        (h,) = torch.autograd.grad(torch_nll(head, f, target).sum(), f)
        torch.testing.assert_close(g, h)
    torch._dynamo.reset()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's sync debug mode needs a GPU")
def test_no_host_sync_on_cuda():
    head = make(tied=True).float().cuda()
    target, f = zipf_targets(512).cuda(), features(512).float().cuda().requires_grad_()
    head.loss(f, target)  # first call: kernels load
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        head.loss(f, target).sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(head.loss(f, target), torch_nll(head.cpu(), f.detach().cpu(), target.cpu()))


def test_bf16_autocast_gives_float32_log_probs_near_the_exact_ones():
    head = make(tied=False).float()
    target, f = zipf_targets(128), features(128).float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = head.loss(f, target)
    assert low.dtype == torch.float32
    assert (low - torch_nll(head, f, target)).abs().max().item() < 0.1


WT103_V, WT103_F, WT103_CUTOFFS, WT103_ROWS = 267_735, 410, [20_000, 40_000, 200_000], 2048


def training_flops(head: AdaptiveHead, target: torch.Tensor) -> int:
    f = torch.empty(len(target), head.adaptive.in_features, device="meta", requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        head.loss(f, target.to("meta")).sum().backward()
    return counter.get_total_flops()


def test_training_flops_at_wikitext103_shape_are_near_the_shortlist_plus_own_cluster():
    """Tied, div_value 1, 2,048 Zipfian targets, on meta tensors (the capacity path's shapes, hence its
    FLOPs, do not depend on the values). The floor: per row 2 F (c_1 + n) for the head's scores plus
    2 F |cluster(row)| for its own cluster's (0 in the shortlist), times 3 for the forward and the
    backward's two products (gradients of the features and of the weights)."""
    counts = [int(1e9 / (r + 1)) for r in range(WT103_V)]  # Zipfian; word id = rank
    with torch.device("meta"):
        head = AdaptiveHead(WT103_F, WT103_V, counts, WT103_CUTOFFS, div_value=1.0)
        head.tie_output_embeddings(nn.Parameter(torch.empty(WT103_V, WT103_F)))
    target = torch.multinomial(torch.tensor(counts, dtype=torch.float64), WT103_ROWS, replacement=True,
                               generator=torch.Generator().manual_seed(0))
    bounds = [*WT103_CUTOFFS, WT103_V]
    cluster_size = torch.tensor([0] + [hi - lo for lo, hi in zip(bounds, bounds[1:])])  # [n + 1]
    clusters = torch.bucketize(target, torch.tensor(WT103_CUTOFFS), right=True)
    floor = 3 * 2 * WT103_F * (WT103_ROWS * (WT103_CUTOFFS[0] + 3) + cluster_size[clusters].sum().item())
    head.path = "capacity"
    capacity = training_flops(head, target)
    head.path = "all"
    every_cluster = training_flops(head, target)
    assert every_cluster == 3 * 2 * WT103_F * WT103_ROWS * (WT103_V + 3)  # a full softmax's, and the n cluster rows
    assert floor < capacity < 1.5 * floor
    assert every_cluster > 4 * capacity


def test_blocks_calibrate_the_capacities_to_the_variance_of_a_blocks_counts():
    """Blocks of T = 8 with 2, 4, 2, 4 targets in cluster 3 (none in clusters 1 and 2): one block's count has
    mean 3 and variance 4/3, so 80 rows (10 blocks) get ceil(30 + 4 sqrt(10 * 4/3)) + 8 = 53 rows in cluster 3,
    where the binomial count of shuffled windows gives 20; the empty clusters keep 8."""
    head = make(tied=False)
    assert head.capacities(80) == [37, 34, 20]
    rare = [[150] * n + [0] * (8 - n) for n in (2, 4, 2, 4)]
    head.calibrate(torch.tensor(rare))  # [4, 8]
    assert head.capacities(80) == [8, 8, 53]


def bursty_corpus(folder, lines=120, seed=0):
    """A training split of two halves, as a concatenated corpus may be: Zipfian words, then as many words each
    seen once (the rarest ranks: tail cluster 3); a batch of whole blocks holds mostly one half or the other."""
    g = torch.Generator().manual_seed(seed)

    def zipf_lines(n):
        ids = torch.multinomial(torch.tensor(COUNTS, dtype=torch.float64), n * 24, replacement=True, generator=g)
        return [" ".join(f"w{int(i)}" for i in ids[j * 24:(j + 1) * 24]) for j in range(n)]

    rare = [" ".join(f"r{j * 24 + i}" for i in range(24)) for j in range(lines)]
    for split, part in (("train", zipf_lines(lines) + rare), ("valid", zipf_lines(12)), ("test", zipf_lines(12))):
        (folder / f"{split}.txt").write_text("\n".join(part) + "\n")
    return [f"corpus.{split}={folder / f'{split}.txt'}" for split in ("train", "valid", "test")]


@pytest.mark.slow  # a run on blocks
def test_whole_blocks_of_bursty_text_train_on_the_capacity_path(run_train, tmp_path, monkeypatch):
    """Blocks of 24 consecutive tokens, 6 a batch: a batch with 5 or 6 blocks of the rare half holds 120 or
    more rows of tail cluster 3, beyond its binomial capacity (about 72 + 4 sd + 8) and the spill of 8 (their
    loss NaN: the run would stop); capacities calibrated on the training blocks (`LanguageModel.on_fit_start`)
    score every row, exactly."""
    monkeypatch.setattr(AdaptiveHead, "_torch_grouping", staticmethod(lambda features: False))
    metrics = run_train("corpus=text_files", *bursty_corpus(tmp_path), "model=modern", "model.context_size=8",
                        "model.window=4", "model.summaries=1", "model.embed_dim=16", "model.hidden_dim=24",
                        "model.num_layers=1", "data.block_size=24", "data.batch_size=6", "head=adaptive",
                        "head.cutoffs=[20,60,150]", "head.div_value=1.0", "trainer.max_epochs=2", "optimizer.lr=0.003")
    assert metrics["val/ppl_best"] > 1 and metrics["test/ppl"] < 400
