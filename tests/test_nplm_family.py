"""The log-bilinear model (LBL), the modern NPLM and the NCE head against their papers' formulas,
computed naively; input and output word vectors tied through `build_head(..., tie_to=...)`."""

from __future__ import annotations

import math

import pytest
import torch

from nplm.config.schema import check_group, groups
from nplm.errors import UserError
from nplm.heads import HEADS, build_head, head_class
from nplm.models import build_model
from nplm.models.lbl import LBL, LBLConfig
from nplm.models.modern import ModernConfig, ModernNPLM

from conftest import build_any_head, head_params

V, B = 23, 6
COUNTS = [int(100 / (r + 1)) for r in range(V)]


def n_params(*modules) -> int:
    return sum(p.numel() for p in torch.nn.ModuleList(modules).parameters())  # a shared parameter counts once


# -- LBL -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["full", "diagonal"])
def test_lbl_predicts_the_sum_of_context_matrices_times_representations(form):
    """r_hat = sum_i C_i r_{w_{t-i}}; with the softmax head s(w) = r_hat . q_w + b_w (Mnih & Hinton 2007)."""
    torch.manual_seed(0)
    k, m = 3, 5
    model = LBL(V, LBLConfig(context_size=k, embed_dim=m, context_matrices=form)).double()
    head = build_head({"name": "softmax"}, model.feature_dim, V).double()
    context = torch.randint(0, V, (B, k))
    r = model.R.weight[context]  # [B, k, m]
    C = model.context_matrices  # [k, m, m] or [k, m], oldest word first
    if form == "full":
        r_hat = sum(r[:, i] @ C[i].T for i in range(k))
    else:
        r_hat = sum(r[:, i] * C[i] for i in range(k))
    torch.testing.assert_close(model(context), r_hat)
    s = r_hat @ head.out.weight.T + head.out.bias
    torch.testing.assert_close(head.log_probs(model(context)), torch.log_softmax(s, -1))
    # parameters: R [V, m], C, the head's q [V, m] and b [V]
    assert n_params(model, head) == V * m + (k * m * m if form == "full" else k * m) + V * m + V


def test_lbl_tied_scores_with_its_own_representations_and_has_one_table():
    """tie_embeddings=true: q_w = r_w (the 2007 paper's energy); one [V, m] table, trained by both sides."""
    torch.manual_seed(0)
    model = LBL(V, LBLConfig(context_size=2, embed_dim=4, tie_embeddings=True))
    head = build_head({"name": "softmax"}, model.feature_dim, V, COUNTS, tie_to=model.output_embeddings())
    assert head.out.weight is model.R.weight
    assert n_params(model, head) == V * 4 + 2 * 16 + V
    context = torch.randint(0, V, (B, 2))
    head.nll(model(context), torch.arange(B)).sum().backward()
    assert model.R.weight.grad[torch.arange(B)].abs().sum() > 0  # the targets' rows get the output side's gradient
    assert LBL(V, LBLConfig(tie_embeddings=False)).output_embeddings() is None  # the 2009 and 2012 papers
    assert LBLConfig().tie_embeddings == "auto"  # tied where the head can (build_model resolves it)


# -- the modern NPLM ---------------------------------------------------------------------------------------
def naive_modern(model: ModernNPLM, context: torch.Tensor) -> torch.Tensor:
    """The module docstring's equations one example at a time (eval mode: no dropout)."""
    cfg = model.cfg
    k, w, g = cfg.context_size, cfg.window, cfg.summaries
    out = []
    for row in context:
        e = [model.E.weight[i] * math.sqrt(cfg.embed_dim) for i in row.tolist()]  # oldest first
        s = [sum(model.A[j, p] * e[p] for p in range(k - w)) for j in range(g)]
        parts = e[k - w:] + s
        block = model.blocks[0]
        h = block.norm(sum(parts) + block.ff(torch.cat(parts)))
        for block in model.blocks[1:]:
            h = block.norm(h + block.ff(h)) + sum(s)
        out.append(h)
    return torch.stack(out)


def test_modern_nplm_computes_its_equation():
    torch.manual_seed(0)
    model = ModernNPLM(V, ModernConfig(context_size=7, window=3, summaries=2, embed_dim=6, hidden_dim=10,
                                       num_layers=3)).double().eval()
    with torch.no_grad():
        model.A.normal_()  # not the plain means they start as
    context = torch.randint(0, V, (B, 7))
    torch.testing.assert_close(model(context), naive_modern(model, context))
    assert model.feature_dim == 6 and model.output_embeddings() is model.E.weight  # tied by default


def test_modern_nplm_first_block_has_its_own_hidden_width():
    """model.first_hidden_dim: the first block's FF_1 is [(w + g) d -> 7 -> d], the others keep hidden_dim."""
    model = ModernNPLM(V, ModernConfig(context_size=7, window=3, summaries=2, embed_dim=6, hidden_dim=10,
                                       first_hidden_dim=7, num_layers=3))
    widths = [(b.ff[0].in_features, b.ff[0].out_features, b.ff[2].out_features) for b in model.blocks]
    assert widths == [(30, 7, 6), (6, 10, 6), (6, 10, 6)]
    assert model(torch.randint(0, V, (B, 7))).shape == (B, 6)


def test_modern_nplm_ablations_drop_their_part():
    torch.manual_seed(0)
    cfg = ModernConfig(context_size=4, window=4, summaries=0, embed_dim=6, hidden_dim=10, num_layers=2,
                       residual=False, layer_norm=False, tie_embeddings=False)
    model = ModernNPLM(V, cfg).double().eval()
    context = torch.randint(0, V, (B, 4))
    x = model.E.weight[context].flatten(1) * math.sqrt(6)
    h = model.blocks[1].ff(model.blocks[0].ff(x))
    torch.testing.assert_close(model(context), h)
    assert model.A is None and model.output_embeddings() is None


@pytest.mark.parametrize("values,message", [
    ({"context_size": 4, "window": 8}, "model.window=8: must be an integer <= model.context_size=4"),
    ({"context_size": 16, "window": 8, "summaries": 0}, "model.summaries=0: must be an integer >= 1 when "
                                                        "model.context_size > model.window"),
    ({"context_size": 8, "window": 8, "summaries": 2}, "model.summaries=2: must be 0 when model.context_size "
                                                       "equals model.window"),
    ({"context_matrices": "lowrank"}, "model.context_matrices=lowrank: must be one of: full, diagonal"),
])
def test_contradicting_keys_are_refused_before_training(values, message):
    name = "lbl" if "context_matrices" in values else "modern"
    with pytest.raises(UserError) as info:
        check_group("model", groups()["model"], {"name": name, **values})
    assert str(info.value).startswith(message), str(info.value)


# -- tying, for every head ---------------------------------------------------------------------------------
# every head whose class `can_tie`; the adaptive head's checks below read these cutoffs
ADAPTIVE = {"cutoffs": [3, 9], "div_value": 2.0}


@pytest.mark.parametrize("name,options", [p for p in head_params() if head_class(p.values[0]).can_tie])
def test_tied_heads_score_every_word_with_the_models_table(name, options):
    """Every word's output vector is a row of the model's table: log P(w | f) comes from E[w] . f and
    the head's own biases (and the adaptive head's cluster rows), normalised; both sides' gradients
    reach the one table."""
    torch.manual_seed(0)
    model = build_model({"name": "modern", "context_size": 5, "window": 3, "summaries": 1, "embed_dim": 8,
                         "hidden_dim": 8, "num_layers": 1}, V, head_can_tie=True).double()
    options = {**options, **ADAPTIVE} if name == "adaptive" else options
    head = build_any_head(name, options, model.feature_dim, V, COUNTS, tie_to=model.output_embeddings()).double()
    E = model.E.weight
    assert any(p is E for p in head.parameters())
    f = torch.randn(B, 8, dtype=torch.float64)
    log_p = head.log_probs(f)
    torch.testing.assert_close(log_p.exp().sum(1), torch.ones(B, dtype=torch.float64))
    target = torch.arange(B) * 3
    torch.testing.assert_close(head.nll(f, target), -log_p[torch.arange(B), target])
    with torch.no_grad():  # a word's score moves with its row of E alone
        E[target[0]] += 10 * f[0] / f[0].norm()
    assert head.log_probs(f)[0, target[0]] > log_p[0, target[0]] + 1
    if name == "adaptive":  # rank r < c_1: the shortlist row is E[w]; a tail word scores E[w] . f + b_w
        a, order = head.adaptive, torch.argsort(head.rank)
        torch.testing.assert_close(a.head.weight[:3], E[order[:3]])
        torch.testing.assert_close(a.tail[1](f), f @ E[order[9:]].T + a.tail[1][1].bias)
    head.train()
    head.loss(model(torch.randint(0, V, (B, 5))), target).sum().backward()
    assert E.grad is not None and E.grad.abs().sum() > 0


@pytest.mark.parametrize("name,options", [p for p in head_params() if not head_class(p.values[0]).can_tie])
def test_heads_without_a_vector_per_word_refuse_to_tie(name, options):
    model = build_model({"name": "lbl", "context_size": 2, "embed_dim": 8, "tie_embeddings": True}, V)
    can = r"\|".join(n for n in HEADS.names() if head_class(n).can_tie)  # adaptive|importance_sampling|nce|softmax
    with pytest.raises(UserError, match=rf"^model.tie_embeddings=true: head={name} has no output vector per word"
                                        rf".*set model.tie_embeddings=auto \(ties where the head can\) or false, "
                                        rf"or use head={can}$"):
        build_any_head(name, options, model.feature_dim, V, COUNTS, tie_to=model.output_embeddings())


# -- NCE -----------------------------------------------------------------------------------------------------
def nce_head(k: int, power: float = 1.0):
    torch.manual_seed(0)
    return build_head({"name": "nce", "num_samples": k, "proposal_power": power}, 8, V, COUNTS).double()


def test_nce_loss_is_the_papers_objective_and_evaluation_is_the_exact_softmax():
    """-J = -log sigma(Delta(t)) - sum_j log(1 - sigma(Delta(x_j))), Delta(w) = s(w) - log(k P_n(w))
    (Mnih & Teh 2012, eq. 7-8); nll and log_probs are the full softmax of the same scores."""
    k = 4
    head = nce_head(k).train()
    f = torch.randn(B, 8, dtype=torch.float64)
    target = torch.arange(B) * 2
    torch.manual_seed(3)
    noise = head.sample()
    loss = head.sampled_loss(f, target, noise)
    P_n = head.proposal.tolist()  # (count + 1) / sum, stored in float32
    assert P_n == pytest.approx([(c + 1) / (sum(COUNTS) + V) for c in COUNTS], rel=1e-6)
    sigma = lambda x: 1 / (1 + math.exp(-x))
    for i, t in enumerate(target.tolist()):
        s = lambda w: (head.out.weight[w] @ f[i] + head.out.bias[w]).item()
        delta = lambda w: s(w) - math.log(k * P_n[w])
        J = math.log(sigma(delta(t))) + sum(math.log(1 - sigma(delta(x))) for x in noise.tolist())
        assert loss[i].item() == pytest.approx(-J, rel=1e-10)
    torch.manual_seed(3)
    torch.testing.assert_close(head.loss(f, target), loss)  # the noise comes from torch's global RNG
    y = f @ head.out.weight.T + head.out.bias
    torch.testing.assert_close(head.log_probs(f), torch.log_softmax(y, -1))
    torch.testing.assert_close(head.nll(f, target), -torch.log_softmax(y, -1)[torch.arange(B), target])
    torch.testing.assert_close(head.eval().loss(f, target), head.nll(f, target))
    assert not head.exact_training_loss


def test_nce_starts_self_normalised_and_its_gradient_tends_to_the_unnormalised_likelihoods():
    """b_w starts at log unigram(w), so sum_w exp(b_w) = 1. As k grows the NCE gradient tends to that of
    -s(t) + sum_w exp(s(w)), which is the NLL's where the model is self-normalised (Z = 1)."""
    head = nce_head(20000, power=0.5).train()
    assert head.out.bias.exp().sum().item() == pytest.approx(1.0)
    f = (0.3 * torch.randn(B, 8, dtype=torch.float64)).requires_grad_()
    target = torch.arange(B) * 2
    y = f @ head.out.weight.T + head.out.bias
    want = -y[torch.arange(B), target] + y.exp().sum(1)
    (want_grad,) = torch.autograd.grad(want.sum(), f)
    torch.manual_seed(5)
    grad = sum(torch.autograd.grad(head.loss(f, target).sum(), f)[0] for _ in range(10)) / 10
    assert (grad - want_grad).abs().max().item() < 0.05 * want_grad.abs().max().item()


@pytest.mark.parametrize("options,message", [
    ({"num_samples": 0}, "head.num_samples=0: must be an integer >= 1"),
    ({"proposal_power": -1}, "head.proposal_power=-1: must be a finite number >= 0"),
    ({"k": 3}, "head.k=3: unknown key of head=nce; valid keys: name, num_samples, proposal_power, sparse"),
])
def test_nce_options_are_checked_by_the_keys_it_registered(options, message):
    with pytest.raises(UserError) as info:
        check_group("head", groups()["head"], {"name": "nce", **options})
    assert str(info.value) == message


def test_nce_needs_the_training_counts():
    with pytest.raises(UserError, match="head=nce needs training unigram counts"):
        build_head({"name": "nce"}, 8, V, None)
