"""The NPLM and its softmax head against the paper's formulas and hand-derived backpropagation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from nplm.config.schema import check_group, groups
from nplm.errors import UserError
from nplm.heads import build_head
from nplm.models.nplm import NPLM, NPLMConfig
from nplm.optimizers import InverseTimeDecay, param_groups
from nplm.training.perplexity import Perplexity


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("V,n,m,h", [(17_905, 5, 60, 50), (100, 3, 7, 11), (50, 5, 30, 0)])
def test_parameter_count_is_the_papers_formula(V, n, m, h):
    """Bengio et al. (2003), section 2: |V|(1 + nm + h) + h(1 + (n-1)m) free parameters (direct)."""
    model = NPLM(V, NPLMConfig(context_size=n - 1, embed_dim=m, hidden_dim=h, direct=True))
    head = build_head({"name": "softmax"}, model.feature_dim, V)
    assert n_params(model) + n_params(head) == V * (1 + n * m + h) + h * (1 + (n - 1) * m)


def test_parameter_count_without_direct_connections():
    V, n, m, h = 200, 4, 10, 20
    model = NPLM(V, NPLMConfig(context_size=n - 1, embed_dim=m, hidden_dim=h, direct=False))
    head = build_head({"name": "softmax"}, model.feature_dim, V)
    assert n_params(model) + n_params(head) == V * (1 + m + h) + h * (1 + (n - 1) * m)


def test_softmax_head_computes_equation_1():
    """y = b + W x + U tanh(d + H x), with W and U the two blocks of the head's weight."""
    torch.manual_seed(0)
    V, k, m, h = 30, 3, 4, 5
    model = NPLM(V, NPLMConfig(context_size=k, embed_dim=m, hidden_dim=h, direct=True)).double()
    head = build_head({"name": "softmax"}, model.feature_dim, V).double()
    context = torch.randint(0, V, (6, k))
    x = model.C(context).flatten(1)
    W, U, b = head.out.weight[:, : k * m], head.out.weight[:, k * m:], head.out.bias
    y = b + x @ W.T + torch.tanh(model.H.bias + x @ model.H.weight.T) @ U.T
    torch.testing.assert_close(head.log_probs(model(context)), torch.log_softmax(y, -1))
    target = torch.randint(0, V, (6,))
    torch.testing.assert_close(head.nll(model(context), target), -torch.log_softmax(y, -1)[torch.arange(6), target])


def test_autograd_matches_hand_derived_backpropagation():
    """Lecture-notes backprop for a sigmoid hidden layer and softmax output, one example:
    dy = p - onehot(t); db = dy; dW = dy x^T; dU = dy a^T; da = U^T dy * a(1-a); dd = da; dH = da x^T;
    dx = W^T dy + H^T da, scattered back into the rows of C."""
    torch.manual_seed(1)
    V, k, m, h = 12, 3, 4, 6
    model = NPLM(V, NPLMConfig(context_size=k, embed_dim=m, hidden_dim=h, direct=True,
                               activation="sigmoid")).double()
    head = build_head({"name": "softmax"}, model.feature_dim, V).double()
    context, target = torch.tensor([[3, 7, 3]]), torch.tensor([5])
    head.nll(model(context), target).sum().backward()

    with torch.no_grad():
        x = model.C.weight[context[0]].reshape(-1)  # [(n-1)m]
        a = torch.sigmoid(model.H.bias + model.H.weight @ x)  # [h]
        Wfull = head.out.weight
        W, U = Wfull[:, : k * m], Wfull[:, k * m:]
        p = torch.softmax(head.out.bias + W @ x + U @ a, 0)
        dy = p - torch.nn.functional.one_hot(target[0], V).double()
        da = (U.T @ dy) * a * (1 - a)
        dx = W.T @ dy + model.H.weight.T @ da
        dC = torch.zeros_like(model.C.weight)
        for j, w in enumerate(context[0]):
            dC[w] += dx[j * m:(j + 1) * m]
    torch.testing.assert_close(head.out.bias.grad, dy)
    torch.testing.assert_close(head.out.weight.grad, torch.outer(dy, torch.cat([x, a])))
    torch.testing.assert_close(model.H.bias.grad, da)
    torch.testing.assert_close(model.H.weight.grad, torch.outer(da, x))
    torch.testing.assert_close(model.C.weight.grad, dC)


def test_perplexity_is_token_weighted_over_the_split():
    metric = Perplexity()
    metric.update(torch.full((1,), 2.0))
    metric.update(torch.full((3,), 1.0))
    assert metric.compute().item() == pytest.approx(math.exp((2.0 + 3.0) / 4))
    assert metric.compute().item() != pytest.approx(math.exp((2.0 + 1.0) / 2))  # not a mean of batch means


def test_weight_decay_applies_to_weights_and_embeddings_not_biases():
    model = NPLM(10, NPLMConfig(context_size=2, embed_dim=3, hidden_dim=4))
    decay, no_decay = param_groups(model, 1e-4)
    assert {p.shape for p in decay["params"]} == {torch.Size([10, 3]), torch.Size([4, 6])}
    assert no_decay["weight_decay"] == 0.0 and [p.shape for p in no_decay["params"]] == [torch.Size([4])]


def test_sgd_schedule_is_inverse_time_decay():
    schedule = InverseTimeDecay(1e-3)
    assert schedule(0) == 1.0 and schedule(1000) == pytest.approx(0.5)


@pytest.mark.parametrize("group, values, message", [
    ("optimizer", {"name": "sgd", "lr": 0}, "optimizer.lr=0: must be a finite number > 0"),
    ("model", {"name": "nplm", "context_size": 2, "foo": 1},
     "model.foo=1: unknown key of model=nplm; valid keys: activation, context_size, direct, dropout, embed_dim, "
     "hidden_dim, name, sparse_embeddings"),
    ("model", {"name": "nplm", "hidden_dim": -1}, "model.hidden_dim=-1: must be an integer >= 0"),
    ("model", {"name": "nplm", "hidden_dim": 0, "direct": False},
     "model.hidden_dim=0: must be an integer >= 1 when model.direct=false (else there are no features)"),
])
def test_the_keys_a_model_or_optimizer_registered_are_checked(group, values, message):
    """NPLMConfig's fields are the model's keys (`option`): the schema checks them, nothing else does."""
    with pytest.raises(UserError) as err:
        check_group(group, groups()[group], values)
    assert str(err.value) == message


def test_model_keys_are_the_dataclass_fields():
    assert set(groups()["model"].keys_of("nplm")) == {"name", *(f.name for f in dataclasses.fields(NPLMConfig))}


@pytest.mark.parametrize("weights", [[0.2] * 5, [1.0, -2.0, 0.0, 3.0, 0.5]])
def test_softmax_nll_backward_equals_cross_entropy(weights):
    """The in-place backward matches autograd's for positive, mixed-sign and zero upstream gradients."""
    import torch.nn.functional as F

    from nplm.heads.softmax import SoftmaxNLL

    torch.manual_seed(0)
    target, w = torch.randint(0, 7, (5,)), torch.tensor(weights, dtype=torch.float64)
    y = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    (SoftmaxNLL.apply(y, target) * w).sum().backward()
    ours, y.grad = y.grad.clone(), None
    (F.cross_entropy(y, target, reduction="none") * w).sum().backward()
    torch.testing.assert_close(ours, y.grad)


def test_cpu_embedding_lookup_gives_nn_embeddings_features_and_gradient():
    """NPLM.embed uses index_select on a CPU (a faster backward): the same values and gradient of C."""
    torch.manual_seed(0)
    model = NPLM(50, NPLMConfig(context_size=3, embed_dim=4, hidden_dim=5))
    context = torch.randint(0, 50, (16, 3))
    context[0] = 7  # a repeated id: its gradient rows add up
    fast = model(context).square().sum()
    (fast_grad,) = torch.autograd.grad(fast, model.C.weight)
    slow = model.features_from_embeddings(model.C(context)).square().sum()
    (slow_grad,) = torch.autograd.grad(slow, model.C.weight)
    assert torch.equal(fast.detach(), slow.detach())
    assert torch.allclose(fast_grad, slow_grad, rtol=1e-6, atol=1e-7)
