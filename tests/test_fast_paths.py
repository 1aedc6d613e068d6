"""The training step without host syncs: compile=true against eager, the static-shape head paths used
on accelerators against the CPU's grouped ones, bf16 autocast, and batches gathered on the device."""

from __future__ import annotations

import pytest
import torch

from nplm.data.windows import BatchIndices, Windows
from nplm.heads.softmax import SoftmaxNLL

from conftest import TOY_FAST, build_any_head, head_overrides, head_params


FULL_BATCHES = "trainer.limit_train_batches=3"  # the toy epoch's first 3 batches: no smaller last batch


def one_epoch(run_train, *overrides) -> dict:
    metrics = run_train(*TOY_FAST, "trainer.max_epochs=1", *overrides)
    return {k: metrics[k] for k in ("train/ppl", "train/ppl_sampled", "val/ppl") if k in metrics}


@pytest.mark.slow  # torch.compile of every head: seconds each
@pytest.mark.parametrize("name,options", head_params())
def test_compile_true_trains_every_head_as_eager_does(run_train, compile_backend, name, options):
    """fullgraph=True: a graph break (or a data-dependent branch) fails the run. The capture goes
    through AOT autograd as inductor's does; code generation is left out here to keep the suite
    fast (NPLM_TEST_INDUCTOR=1 compiles with inductor; experiments/bench/gpu_check.py does on a GPU).
    The softmax's run trains the whole epoch, its smaller last batch compiled again with dynamic shapes (5 s
    a head); the other heads train whole batches (`FULL_BATCHES`), the adaptive head's two batch sizes
    compiled in tests/test_adaptive_capacity.py."""
    limit = [] if name == "softmax" else [FULL_BATCHES]
    eager = one_epoch(run_train, *head_overrides(name, options), *limit)
    torch._dynamo.reset()
    compiled = one_epoch(run_train, *head_overrides(name, options), *limit, "compile=true", compile_backend)
    assert eager.keys() == compiled.keys() and len(eager) == 2
    for key, value in eager.items():
        assert compiled[key] == pytest.approx(value, rel=1e-4), key


V, F, B = 37, 16, 64


COUNTS = [int(300 / (r + 1)) for r in range(V)]


def any_head(name: str, options: dict):
    """Head `name` with `options`, over a balanced tree where it uses one."""
    torch.manual_seed(0)
    return build_any_head(name, options, F, V, COUNTS)


@pytest.mark.parametrize("name,options", [("class_based", {}), ("class_based", {"classes": "tree"}),
                                          ("adaptive", {}), ("adaptive", {"cutoffs": [2, 9, 30], "div_value": 2.0})])
def test_static_path_equals_the_grouped_one_with_its_gradient(name, options):
    """The accelerator path (every class/cluster for every row, masked) computes the same NLL and
    gradients as the CPU path that groups the batch."""
    head = any_head(name, options).double()
    f = torch.randn(B, F, dtype=torch.float64, requires_grad=True)
    target = torch.arange(B) % V
    grouped = head.nll(f, target)
    grads = torch.autograd.grad(grouped.sum(), [f, *head.parameters()])
    if name == "class_based":
        klass = head.class_of[target]
        static = SoftmaxNLL.apply(head.class_out(f), klass) + head._within_class_static(f, target, klass)
    else:
        static = -head._log_prob_static(f, head.rank[target])
    torch.testing.assert_close(static, grouped)
    for a, b in zip(torch.autograd.grad(static.sum(), [f, *head.parameters()]), grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name,options", head_params())
def test_bf16_autocast_nll_is_finite_and_close_to_float32(name, options):
    """trainer.precision=bf16-mixed is torch.autocast(bfloat16): matmul inputs rounded to 8-bit
    mantissas (relative error 2^-9 each), products summed in float32, log-softmax / log-sigmoid and
    the NLL in float32. With features and weights of order 1 the scores move by about 1% of their
    size, so a token's NLL by a few hundredths of a nat: 0.1 nat per token and 1% on the batch's
    mean NLL leave room for that and catch a head that loses its float32 reductions."""
    head = any_head(name, options)
    f = torch.randn(B, F, generator=torch.Generator().manual_seed(1))
    target = torch.arange(B) % V
    exact = head.nll(f, target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = head.nll(f, target)
        loss = head.loss(f, target)
    assert low.dtype == torch.float32 and loss.dtype == torch.float32
    assert torch.isfinite(low).all() and torch.isfinite(loss).all()
    assert (low - exact).abs().max() < 0.1
    assert low.mean().item() == pytest.approx(exact.mean().item(), rel=0.01)


@pytest.mark.slow  # two runs
def test_bf16_mixed_training_runs_for_a_tree_head(run_train):
    """trainer.precision=bf16-mixed end to end (CPU autocast): the perplexities come out finite and
    near the float32 run's."""
    exact = one_epoch(run_train, "head=hierarchical")
    low = one_epoch(run_train, "head=hierarchical", "trainer.precision=bf16-mixed")
    for key, value in exact.items():
        assert low[key] == pytest.approx(value, rel=0.05), key


def test_batches_are_gathered_on_the_windows_device():
    """Windows.to copies the stream once; BatchIndices hands out index batches on that device; the
    batch is the same one as from the CPU stream (meta device stands in for a GPU's placement)."""
    ids = torch.arange(50)
    windows = Windows(ids, 3)
    assert windows.to("cpu") is windows
    sampler = BatchIndices(len(windows), 8, shuffle=True, seed=3)
    first = next(iter(sampler))
    assert first.device.type == "cpu" and first.shape == (8,)
    moved = BatchIndices(len(windows), 8, shuffle=True, seed=3, device="meta")
    assert next(iter(moved)).device.type == "meta"
    meta = windows.to("meta")
    assert meta.ids.device.type == "meta" and len(meta) == len(windows) == 47
    context, target = windows[first]
    torch.testing.assert_close(target, first + 3)
    torch.testing.assert_close(context[:, 0], first)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (experiments/bench/gpu_check.py)")


@pytest.fixture
def full_float32_matmuls():
    """float32 matmuls in full precision on CUDA for the test, as the CPU computes them: a `train` earlier
    in the process (tf32=true, its default, on a machine with a GPU) leaves TF32 on process-wide, and its
    10-bit mantissa moves the NLL by about 1e-4 relative (7 of 8 heads failed so on an H200)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved[0]
    torch.set_float32_matmul_precision(saved[1])


@CUDA
@pytest.mark.parametrize("name,options", head_params())
def test_every_head_on_cuda_gives_the_cpu_nll_and_gradient(name, options, full_float32_matmuls):
    cpu = any_head(name, options).eval()
    gpu = any_head(name, options).eval().cuda()
    f = torch.randn(B, F, generator=torch.Generator().manual_seed(2))
    target = torch.arange(B) % V
    want = cpu.nll(f.requires_grad_(), target)
    (want_grad,) = torch.autograd.grad(want.sum(), f)
    fg = f.detach().cuda().requires_grad_()
    got = gpu.nll(fg, target.cuda())
    (got_grad,) = torch.autograd.grad(got.sum(), fg)
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_grad.cpu(), want_grad, rtol=1e-4, atol=1e-5)


@CUDA
@pytest.mark.parametrize("precision", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name,options", head_params())
def test_training_step_of_every_head_never_syncs_on_cuda(name, options, precision):
    """Forward, backward and a fused Adam update with torch.cuda.set_sync_debug_mode("error"): a
    host-device sync anywhere in them raises."""
    from nplm.models.nplm import NPLM, NPLMConfig
    from nplm.optimizers import build_optimizer

    model = NPLM(V, NPLMConfig(context_size=3, embed_dim=8, hidden_dim=16)).cuda()
    head = build_any_head(name, options, model.feature_dim, V, COUNTS).cuda().train()
    optimizer = build_optimizer(torch.nn.ModuleList([model, head]), {"name": "adam", "lr": 1e-3})
    windows = Windows(torch.randint(0, V, (1000,)), 3).to("cuda")
    batches = list(BatchIndices(len(windows), B, shuffle=True, device="cuda"))
    for i, idx in enumerate(batches[:4]):
        context, target = windows[idx]
        torch.cuda.set_sync_debug_mode("error" if i > 0 else "default")  # step 0 creates the optimizer state
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == torch.bfloat16):
                loss = head.loss(model(context), target).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss).item()
