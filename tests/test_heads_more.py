"""Every registered head (each of its `variants`) against the generic checks: a normalised distribution whose
entry is the NLL, gradients to every parameter, a tiny batch fitted, unigram counts asked for where its class
`needs_counts`; and the class-based, adaptive and softmax-scored heads against their formulas, computed naively."""

from __future__ import annotations

import math

import pytest
import torch

from nplm.config.schema import check_group, groups
from nplm.errors import UserError
from nplm.heads import HEADS, build_head, head_class
from nplm.heads.class_based import WithinClassNLL, frequency_bins, tree_cut
from nplm.trees.tree import Tree, balanced_nested

from conftest import build_any_head, head_params

V, F, B = 37, 16, 5


def zipf_counts(V: int = V, seed: int = 0) -> list[int]:
    """Zipfian counts with a few zeros, shuffled so that word ids are not in frequency order."""
    counts = [int(200 / (r + 1)) for r in range(V)]
    counts[-4:] = [0, 0, 0, 0]
    perm = torch.randperm(V, generator=torch.Generator().manual_seed(seed)).tolist()
    return [counts[perm[i]] for i in range(V)]


COUNTS = zipf_counts()
BY_FREQUENCY = sorted(range(V), key=lambda w: (-COUNTS[w], w))  # word ids, most frequent first


def make(name: str, **options):
    torch.manual_seed(0)
    return build_any_head(name, options, F, V, COUNTS).double()


def features(n: int = B, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, F, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


TARGETS = torch.tensor([BY_FREQUENCY[r] for r in (0, 3, 10, 20, 36)])  # one per cluster/class region


def class_based_log_prob(head, f: torch.Tensor, w: int) -> float:
    """P(c(w) | f) * exp(y_w) / sum_{w' in c(w)} exp(y_w') (Goodman 2001, Mikolov et al. 2011)."""
    c = int(head.class_of[w])
    s = [float(head.class_out.weight[k] @ f + head.class_out.bias[k]) for k in range(head.num_classes)]
    members = [u for u in range(V) if int(head.class_of[u]) == c]
    y = {u: float(head.word_out.weight[head.position[u]] @ f + head.word_out.bias[head.position[u]]) for u in members}
    return s[c] - math.log(sum(map(math.exp, s))) + y[w] - math.log(sum(math.exp(v) for v in y.values()))


def adaptive_log_prob(head, f: torch.Tensor, w: int) -> float:
    """The shortlist softmax, times a tail cluster's softmax (Grave et al. 2017)."""
    a = head.adaptive
    h = [float(row @ f + b) for row, b in zip(a.head.weight, a.head.bias)]
    log_head = lambda i: h[i] - math.log(sum(map(math.exp, h)))
    r, cut = int(head.rank[w]), a.cutoffs
    if r < cut[0]:
        return log_head(r)
    i = max(j for j in range(len(cut) - 1) if cut[j] <= r)
    proj, out = a.tail[i]
    t = [float(row @ (proj.weight @ f) + b) for row, b in zip(out.weight, out.bias)]
    return log_head(cut[0] + i) + t[r - cut[i]] - math.log(sum(map(math.exp, t)))


def softmax_log_prob(head, f: torch.Tensor, w: int) -> float:
    """The full softmax over y = W f + b (Bengio et al. 2003, eq. 1)."""
    y = [float(head.out.weight[u] @ f + head.out.bias[u]) for u in range(V)]
    return y[w] - math.log(sum(map(math.exp, y)))


# log P(w | f) from a head's parameters by its paper's formula, one example at a time (hierarchical:
# tests/test_hierarchical.py); a head without one here is still put through every generic check below
NAIVE = {"class_based": class_based_log_prob, "adaptive": adaptive_log_prob, "softmax": softmax_log_prob,
         "importance_sampling": softmax_log_prob, "nce": softmax_log_prob}


def test_every_formula_is_of_a_registered_head():
    assert set(NAIVE) <= set(HEADS.names())


@pytest.mark.parametrize("name,options", head_params())
def test_log_probs_normalised_and_nll_is_its_entry(name, options):
    head = make(name, **options).eval()
    f = features()
    log_p = head.log_probs(f)  # [B, V]
    assert log_p.shape == (B, V)
    assert torch.logsumexp(log_p, 1).abs().max().item() < 1e-5
    torch.testing.assert_close(head.nll(f, TARGETS), -log_p[torch.arange(B), TARGETS])
    torch.testing.assert_close(head.loss(f, TARGETS), head.nll(f, TARGETS))  # eval mode: exact
    one = head.nll(f[:1], TARGETS[:1])  # a batch of one
    assert one.shape == (1,) and abs(one.item() + log_p[0, TARGETS[0]].item()) < 1e-10


@pytest.mark.parametrize("name", NAIVE)
def test_vectorised_code_matches_a_naive_loop_over_the_formula(name):
    head = make(name).eval()
    f = features(3)
    with torch.no_grad():
        for pname, p in head.named_parameters():
            if pname.endswith("bias"):  # zero-initialised biases would not show a formula that forgets them
                p.normal_(generator=torch.Generator().manual_seed(3))
        log_p = head.log_probs(f)
        naive = torch.tensor([[NAIVE[name](head, f[i], w) for w in range(V)] for i in range(3)], dtype=torch.float64)
    torch.testing.assert_close(log_p, naive, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name,options", head_params())
def test_gradients_reach_every_parameter(name, options):
    """After one optimizer step: a head may start what the features add to its scores at zero (the class-based
    head's rows, the hierarchical head's node vectors), which lets no gradient reach the features before it."""
    head = make(name, **options).train()
    first = torch.optim.Adam(head.parameters(), lr=0.01)
    head.loss(features(), TARGETS).sum().backward()
    first.step()
    first.zero_grad()
    f = features().requires_grad_()
    (head.loss(f, TARGETS).sum() + head.nll(f, TARGETS).sum()).backward()
    assert f.grad.abs().sum().item() > 0
    for pname, p in head.named_parameters():
        assert p.grad is not None and p.grad.abs().sum().item() > 0, pname


@pytest.mark.parametrize("name,options", head_params())
@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_adam_fits_a_tiny_batch(name, options):
    if name == "adaptive":
        options = {**options, "div_value": 2.0}  # 16 // 4^2 = 1 dim is too few
    head = make(name, **options).train()
    f = features(16, seed=2)
    t = torch.tensor([BY_FREQUENCY[r] for r in range(0, 32, 2)])
    before = head.nll(f, t).mean().item()
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    torch.manual_seed(3)
    for _ in range(300):
        opt.zero_grad()
        head.loss(f, t).mean().backward()
        opt.step()
    after = head.nll(f, t).mean().item()
    assert before > 3.5 and after < 0.1, (before, after)  # from about log 37 to near 0


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_within_class_nll_backward_passes_gradcheck():
    head = make("class_based")
    f = features().requires_grad_()
    w = head.word_out.weight.detach().clone().requires_grad_()
    b = head.word_out.bias.detach().clone().requires_grad_()
    args = (head.position[TARGETS], head.class_of[TARGETS], head.bounds.tolist())
    assert torch.autograd.gradcheck(lambda f, w, b: WithinClassNLL.apply(f, w, b, *args), (f, w, b))


def test_frequency_bins_hold_about_equal_mass_and_are_never_empty():
    order, classes = frequency_bins([5, 50, 5, 30, 10], 3)  # by count: 50 30 10 5 5
    assert order.tolist() == [1, 3, 4, 0, 2] and classes.tolist() == [0, 1, 2, 2, 2]
    assert frequency_bins([100, 1, 1, 1, 1], 3)[1].tolist() == [0, 1, 2, 2, 2]  # a dominant word
    assert frequency_bins([7] * 100, 10)[1].bincount().tolist() == [10] * 10
    _, zipf = frequency_bins([int(1e6 / r) for r in range(1, 2001)], 20)
    mass = torch.zeros(20).index_add_(0, zipf, torch.tensor([1e6 / r for r in range(1, 2001)]))
    assert zipf.unique().numel() == 20 and (mass[5:] / mass.sum()).max().item() < 0.06
    head = make("class_based")
    assert head.num_classes == 6  # round(sqrt(37))
    assert head.class_of[BY_FREQUENCY[0]].item() == 0 and head.class_of[BY_FREQUENCY[-1]].item() == 5
    assert make("adaptive").rank[BY_FREQUENCY[0]].item() == 0


def test_tree_classes_split_the_heaviest_subtree_first():
    tree = Tree.from_nested(((0, 1), (2, (3, 4))), 5)
    order, classes = tree_cut(tree, [1, 1, 10, 5, 5], 3)  # root -> (0 1) | (2 (3 4)), then the heavier
    assert order.tolist() == [0, 1, 2, 3, 4] and classes.tolist() == [0, 0, 1, 2, 2]
    order, classes = tree_cut(tree, [10, 10, 1, 1, 1], 3)
    assert order.tolist() == [0, 1, 2, 3, 4] and classes.tolist() == [0, 1, 2, 2, 2]
    assert tree_cut(tree, [1] * 5, 5)[1].tolist() == [0, 1, 2, 3, 4]  # K = V: every word its own class


def test_class_based_head_on_tree_classes_matches_its_formula():
    words = sorted(range(V), key=lambda w: (w % 5, w))  # a tree whose subtrees are not frequency bands
    tree = Tree.from_nested(balanced_nested(words), V)
    torch.manual_seed(0)
    head = build_head({"name": "class_based", "classes": "tree", "num_classes": 4}, F, V, COUNTS, tree).double()
    with torch.no_grad():
        head.word_out.bias.normal_()
    assert head.num_classes == 4 and sorted(head.class_of.bincount().tolist()) == sorted(
        tree_cut(tree, COUNTS, 4)[1].bincount().tolist())
    f = features()
    nll = head.nll(f, TARGETS)
    for i, t in enumerate(TARGETS.tolist()):
        assert abs(-nll[i].item() - class_based_log_prob(head, f[i], t)) < 1e-10
    torch.testing.assert_close(head.log_probs(f).exp().sum(1), torch.ones(B, dtype=torch.float64))


def test_sampled_loss_matches_its_formula_and_differs_from_the_nll():
    head = make("importance_sampling", num_samples=5).train()
    f = features()
    torch.manual_seed(4)
    samples = head.sample()
    with torch.no_grad():
        loss = head.sampled_loss(f, TARGETS, samples)
    k, q = 5, head.proposal.double()
    for i, t in enumerate(TARGETS.tolist()):
        y = lambda w: (head.out.weight[w] @ f[i] + head.out.bias[w]).item()
        z = [y(t) - math.log(k * q[t])] + [y(s) - math.log(k * q[s]) for s in samples.tolist()]
        assert abs(loss[i].item() - (math.log(sum(map(math.exp, z))) - y(t))) < 1e-10
    torch.manual_seed(4)
    torch.testing.assert_close(head.loss(f, TARGETS), loss)  # seeded by torch's global RNG
    assert (head.loss(f, TARGETS) - head.nll(f, TARGETS)).abs().min().item() > 1e-3


@pytest.mark.parametrize("power,k,tol", [(0.0, 2000, 0.01), (1.0, 4000, 0.05)])
def test_sampled_loss_and_gradient_approach_the_exact_ones_for_large_k(power, k, tol):
    head = make("importance_sampling", num_samples=k, proposal_power=power).train()
    f = features().requires_grad_()
    exact = head.nll(f, TARGETS)
    (exact_grad,) = torch.autograd.grad(exact.sum(), f)
    torch.manual_seed(5)
    draws = 40
    mean, grad = torch.zeros(B, dtype=torch.float64), torch.zeros_like(f)
    for _ in range(draws):
        loss = head.loss(f, TARGETS)
        grad += torch.autograd.grad(loss.sum(), f)[0] / draws
        mean += loss.detach() / draws
    assert (mean - exact.detach()).abs().max().item() < tol
    assert (grad - exact_grad).abs().max().item() < 2 * tol


@pytest.mark.parametrize("name,options,message", [
    ("class_based", {"num_classes": 0}, "head.num_classes=0: must be an integer >= 1 or null"),
    ("class_based", {"classes": 4}, "head.classes=4: must be one of: frequency, tree"),
    ("class_based", {"bins": 4}, "head.bins=4: unknown key of head=class_based; valid keys: classes, name, num_classes"),
    ("adaptive", {"cutoffs": [9, 2]}, "head.cutoffs=[9,2]: must be a non-empty list of increasing integers >= 1"),
    ("adaptive", {"cutoffs": [0, 9]}, "head.cutoffs=[0,9]: must be a non-empty list of increasing integers >= 1"),
    ("adaptive", {"cutoffs": 5}, "head.cutoffs=5: must be a non-empty list of increasing integers >= 1"),
    ("adaptive", {"div_value": 0}, "head.div_value=0: must be a finite number > 0"),
    ("importance_sampling", {"num_samples": 0}, "head.num_samples=0: must be an integer >= 1"),
    ("importance_sampling", {"proposal_power": -1}, "head.proposal_power=-1: must be a finite number >= 0"),
    ("importance_sampling", {"k": 3}, "head.k=3: unknown key of head=importance_sampling; "
                                      "valid keys: name, num_samples, proposal_power, sparse"),
])
def test_bad_options_are_refused_by_the_keys_the_head_registered(name, options, message):
    """Each head's keys, types and ranges are checked once, by the schema built from its registration."""
    with pytest.raises(UserError) as err:
        check_group("head", groups()["head"], {"name": name, **options})
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("name,options,message", [
    ("class_based", {"num_classes": 38}, "head.num_classes=38 must be an integer from 1 to the vocabulary size 37; "
                                         "e.g. head.num_classes=6 (about sqrt(V)), or null for that default"),
    ("class_based", {"classes": "tree"}, "head.classes=tree needs a tree: add tree=<one of balanced, brown, file, "
                                          "huffman, learned, random, wordnet>"),
    ("adaptive", {"div_value": 8.0}, "head.div_value=8.0 leaves tail cluster 2 a 0-dimensional projection"),
])
def test_options_this_vocabulary_cannot_take_are_one_line_user_errors(name, options, message):
    """What only the data can refuse (a size against the vocabulary's), when the head is built."""
    with pytest.raises(UserError) as err:
        build_head({"name": name, **options}, F, V, COUNTS)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name,options", [*head_params(), ("hierarchical", {"node_init": "unigram"})])
def test_missing_counts_are_refused_where_the_head_needs_them(name, options):
    """build_head asks the class (`needs_counts`): a head that needs the unigram counts is refused without
    them, in one line; one that does not is built without."""
    if not head_class(name).needs_counts(options):
        assert make(name, **options) is not None
        return
    with pytest.raises(UserError, match=f"^head={name} needs training unigram counts for all 37 words, got None$"):
        build_any_head(name, options, F, V, None)


@pytest.mark.parametrize("cutoffs,kept", [([5, 37], [5]), ([5, 36, 40], [5, 36]), ([20000, 40000], [2, 9])])
def test_adaptive_cutoffs_beyond_the_vocabulary_are_dropped(cutoffs, kept):
    """A recipe's cutoffs fit any vocabulary: those >= V (a cluster of no words) are dropped, and
    where none is left the default for V (37 words: [2, 9]) is taken."""
    head = build_head({"name": "adaptive", "cutoffs": cutoffs}, F, V, COUNTS)
    assert head.adaptive.cutoffs == kept + [V]


@pytest.mark.parametrize("V_small", [2, 3, 4])
def test_adaptive_default_cutoffs_work_for_tiny_vocabularies(V_small):
    head = build_head({"name": "adaptive", "div_value": 2.0}, F, V_small, [3] * V_small).double()
    log_p = head.log_probs(features())
    assert torch.logsumexp(log_p, 1).abs().max().item() < 1e-10
    assert head.adaptive.cutoffs[-1] == V_small and len(head.adaptive.cutoffs) == (2 if V_small == 2 else 3)


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_class_based_head_with_brown_tree_classes_trains_and_reloads(run_train, tmp_path):
    from conftest import TOY_FAST
    from nplm.training.checkpoint import load_model
    from nplm.cli.evaluate import evaluate

    run_train(*TOY_FAST, "head=class_based", "head.classes=tree", "head.num_classes=5", "tree=brown")
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, weights_only=True)
    assert saved["nplm"]["tree"]["kind"] == "brown"
    module = load_model(ckpt)
    expected = tree_cut(module.tree, module.vocab.counts, 5)[1].bincount()
    assert module.head.class_of.bincount().tolist() == expected.tolist() and len(expected) == 5
    record = __import__("json").loads((tmp_path / "run" / "metrics.json").read_text())
    result = evaluate(record["best_checkpoint"], split="test", data_dir=str(tmp_path))
    assert abs(result["ppl"] - record["metrics"]["test/ppl"]) < 1e-4 * result["ppl"]
