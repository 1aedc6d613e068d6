"""Hierarchical softmax (Morin & Bengio 2005): normalisation, NLL, a naive path walk, the toy notebook."""

from __future__ import annotations

import math

import pytest
import torch

from nplm.config.schema import check_group, groups
from nplm.errors import UserError
from nplm.heads import build_head
from nplm.heads.hierarchical import HierarchicalHead
from nplm.cli.predict import predict
from nplm.training.train import train
from nplm.trees.tree import Tree, balanced_nested

from conftest import compose_cfg

# An unbalanced tree over 6 words: ((0, (1, 2)), (3, (4, 5)))... made deeper on one side.
NESTED = ((0, (1, (2, 3))), (4, 5))


def naive_prob(head: HierarchicalHead, f: torch.Tensor, word: int) -> float:
    """Walk from the root to `word`, multiplying sigmoid(+-s(node, f)) by the node form's formula."""
    tree = head.tree
    parent_of = {}
    for node, pair in enumerate(tree.children):
        for turn, c in enumerate(pair):
            parent_of[c] = (node, turn)
    prob, c = 1.0, -1 - word
    while c in parent_of:
        node, turn = parent_of[c]
        if head.node_form == "logistic":
            s = float(head.b[node] + head.q[node] @ f)
        else:
            g = f / f.norm() if head.node_input == "normalized" else f  # (what enters the node network)
            hidden = torch.tanh(head.W.bias + head.W.weight @ g + head.U.weight @ head.N[node])
            s = float(head.alpha[node] + head.beta @ hidden)
        prob *= 1 / (1 + math.exp(-s)) if turn == 1 else 1 / (1 + math.exp(s))
        c = node
    return prob


@pytest.mark.parametrize("form,node_input", [("morin_bengio", "normalized"), ("morin_bengio", "raw"),
                                             ("logistic", "normalized")])
@pytest.mark.parametrize("nested,V", [(NESTED, 6), (balanced_nested(list(range(37))), 37)])
def test_distribution_is_normalised_and_matches_nll_and_a_naive_walk(form, node_input, nested, V):
    torch.manual_seed(0)
    tree = Tree.from_nested(nested, V)
    head = HierarchicalHead(7, tree, form, node_dim=3, node_hidden=5, chunk_elements=11, node_init="random",
                            node_input=node_input).double()
    f = torch.randn(4, 7, dtype=torch.float64)
    log_p = head.log_probs(f)  # [4, V]
    torch.testing.assert_close(log_p.logsumexp(-1), torch.zeros(4, dtype=torch.float64), atol=1e-5, rtol=0)
    target = torch.tensor([0, V - 1, 2, 3])
    torch.testing.assert_close(head.nll(f, target), -log_p[torch.arange(4), target])
    for b in range(4):
        for w in range(V):
            assert math.exp(log_p[b, w]) == pytest.approx(naive_prob(head, f[b], w), rel=1e-9)


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_morin_bengio_full_distribution_is_exact_past_the_product_forms_range(scale):
    """Pre-activations beyond +-40 (|2a| > 80) leave the exp-product form for sigmoid; both agree with nll."""
    torch.manual_seed(1)
    V = 37
    head = HierarchicalHead(7, Tree.from_nested(balanced_nested(list(range(V))), V), "morin_bengio",
                            node_dim=3, node_hidden=5, chunk_elements=64, node_input="raw", node_init="random")
    f = torch.randn(6, 7) * scale  # [6, F]
    log_p = head.log_probs(f)  # [6, V]
    target = torch.arange(6) * 5
    torch.testing.assert_close(log_p.logsumexp(-1), torch.zeros(6), atol=1e-5, rtol=0)
    torch.testing.assert_close(-log_p[torch.arange(6), target], head.nll(f, target), atol=1e-4, rtol=1e-5)


def test_nll_is_the_sum_over_the_path_not_the_mean():
    tree = Tree.from_nested(NESTED, 6)
    head = HierarchicalHead(2, tree, "logistic", node_init="random")
    with torch.no_grad():
        head.q.zero_(), head.b.zero_()
    # every turn has probability 1/2: word 2 is 4 turns deep -> NLL = 4 log 2
    assert head.nll(torch.zeros(1, 2), torch.tensor([2])).item() == pytest.approx(4 * math.log(2))


def test_hierarchical_head_needs_a_tree_of_the_right_size():
    with pytest.raises(UserError, match=r"head=hierarchical needs a tree: add tree=<one of balanced, brown, file, "):
        build_head({"name": "hierarchical"}, 4, 6)
    tree = Tree.from_nested(NESTED, 6)
    with pytest.raises(UserError, match=r"the tree has 6 leaves but the vocabulary 7 words"):
        build_head({"name": "hierarchical"}, 4, 7, tree=tree)
    with pytest.raises(UserError, match=r"head.node_form=nope: must be one of: morin_bengio, logistic"):
        check_group("head", groups()["head"], {"name": "hierarchical", "node_form": "nope"})  # its registered keys


@pytest.mark.slow  # trained until it predicts the toy corpus
def test_toy_hsm_notebook_predicts_down_and_loudly(run_train, tmp_path):
    """experiment=toy_hsm, then nplm-predict ranks "down" after "the cat sat" and "loudly" after
    "a dog barked", as the notebook did; the tree travels in the run dir and the checkpoint."""
    run_train("experiment=toy_hsm")
    run = tmp_path / "run"
    tree = Tree.load(run / "tree.json")
    assert tree.kind == "balanced" and len(tree.children) == 41
    ckpt = str(run / "checkpoints" / "last.ckpt")
    assert predict(ckpt, "the cat sat", top_k=1)[0][0] == "down"
    assert predict(ckpt, "a dog barked", top_k=1)[0][0] == "loudly"


def test_tree_from_another_vocabulary_is_refused(run_train, tmp_path):
    other = Tree.from_nested(balanced_nested(list(range(42))), 42, fingerprint="0123456789abcdef")
    other.save(tmp_path / "tree.json")
    with pytest.raises(UserError, match=rf"^tree.path={tmp_path}/tree.json: this .*tree was built for another "
                                        r"vocabulary .* rebuild it from this corpus$"):  # names the key
        run_train("experiment=toy_hsm", "tree=file", f"tree.path={tmp_path / 'tree.json'}")


def test_tree_with_a_head_that_uses_none_warns(run_train, caplog):
    from conftest import compose_cfg, TOY_FAST

    run_train(*TOY_FAST, "tree=balanced")
    assert "tree=balanced has no effect with head=softmax, which uses no tree" in caplog.text


@pytest.mark.slow  # two training phases
def test_learned_tree_trains_in_two_phases_from_one_command(run_train, tmp_path):
    run_train("experiment=toy_hsm", "tree=learned", "tree.bootstrap_epochs=2", "trainer.max_epochs=3")
    run = tmp_path / "run"
    phase1 = __import__("json").loads((run / "bootstrap" / "metrics.json").read_text())
    assert phase1["status"] == "finished" and phase1["epochs"] == 2 and phase1["tree"]["kind"] == "random"
    tree = Tree.load(run / "tree.json")
    assert tree.kind == "learned" and len(tree.children) == 41
    assert Tree.load(run / "bootstrap" / "learned_tree.json").children == tree.children
    assert torch.load(run / "bootstrap" / "word_vectors.pt").shape == (42, 16)  # c + W f of Morin-Bengio nodes
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["nplm"]["tree"]["kind"] == "learned"


@pytest.mark.slow  # both phases trained, then the first again
def test_learned_tree_killed_in_phase_one_goes_on_from_its_checkpoint(run_train, tmp_path):
    import json

    run_train("experiment=toy_hsm", "tree=learned", "tree.bootstrap_epochs=1", "trainer.max_epochs=1")
    run = tmp_path / "run"
    boot = run / "bootstrap"
    record = json.loads((boot / "metrics.json").read_text())
    (boot / "metrics.json").write_text(json.dumps({**record, "status": "running"}))  # as if killed in epoch 2
    for path in (boot / "word_vectors.pt", boot / "learned_tree.json", run / "metrics.json"):
        path.unlink()
    (run / "checkpoints" / "last.ckpt").unlink()
    train(compose_cfg(tmp_path, "experiment=toy_hsm", "tree=learned", "tree.bootstrap_epochs=2",  # the same folder
                      "trainer.max_epochs=1", "tree.split=adaptive", "tree.eps=0.2"))
    again = json.loads((boot / "metrics.json").read_text())
    assert again["status"] == "finished" and len(again["history"]) == 2  # epoch 1 kept, epoch 2 trained
    assert Tree.load(run / "tree.json").stats()["codes_per_word"] >= 1.0
    assert json.loads((run / "metrics.json").read_text())["tree"]["codes_per_word"] == Tree.load(
        boot / "learned_tree.json").codes_per_word


@pytest.mark.parametrize("node_form", ["morin_bengio", "logistic"])
def test_multi_code_tree_sums_over_codes_and_stays_normalised_over_words(node_form):
    from nplm.trees.mixture_tree import mixture_tree

    gen = torch.Generator().manual_seed(0)
    vectors = torch.randn(30, 4, generator=gen, dtype=torch.float64).numpy()
    tree = mixture_tree(vectors, seed=0, split="adaptive", eps=0.3, runs=2)  # 2 runs: >= 2 codes per word
    assert tree.codes_per_word > 2.0 and tree.num_leaves == len(tree.leaf_words)
    head = HierarchicalHead(6, tree, node_form=node_form, node_init="random").double()
    features = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    log_probs = head.log_probs(features)  # [5, 30]
    assert log_probs.shape == (5, 30)
    torch.testing.assert_close(log_probs.exp().sum(1), torch.ones(5, dtype=torch.float64))
    target = torch.arange(30).view(5, 6)[:, 0] + torch.tensor([0, 1, 2, 3, 4])
    torch.testing.assert_close(head.nll(features, target), -log_probs.gather(1, target[:, None]).squeeze(1))
    # a word's probability is the sum over its codes: the leaves' probabilities, added up by hand
    nodes, codes, lengths = tree.paths()
    leaf = (codes.double() * 2 - 1) * head._path_scores(features[:1].expand(len(nodes), 6), nodes)[:, :]
    leaf_lp = (torch.nn.functional.logsigmoid(leaf) * (torch.arange(nodes.shape[1]) < lengths[:, None])).sum(1)
    w = tree.leaf_words[0]
    by_hand = sum(leaf_lp[i].exp() for i, v in enumerate(tree.leaf_words) if v == w)
    torch.testing.assert_close(log_probs[0, w].exp(), by_hand)


@pytest.mark.parametrize("runs", [1, 2])
@pytest.mark.parametrize("node_form", ["morin_bengio", "logistic"])
def test_compact_path_scores_equal_the_padded_ones_with_their_gradients(node_form, runs):
    """On a CPU `nll` scores only the real turns (`_log_prob_compact`); GPUs and torch.compile use the
    padded paths. Same values and gradients, on an unbalanced tree (eps 0) and a multi-code one."""
    from nplm.trees.mixture_tree import mixture_tree

    gen = torch.Generator().manual_seed(1)
    vectors = torch.randn(40, 4, generator=gen, dtype=torch.float64).numpy()
    tree = mixture_tree(vectors, seed=0, split="adaptive", eps=0.3 if runs > 1 else 0.0, runs=runs)
    nodes, _, lengths = tree.paths()
    assert lengths.min() < nodes.shape[1]  # some paths are padded
    head = HierarchicalHead(6, tree, node_form=node_form, node_init="random").double()
    features = torch.randn(9, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 40, (9,), generator=gen)
    grads = []
    for log_prob in (head._log_prob_compact, head._log_prob_padded):
        head.zero_grad()
        features.grad = None
        value = log_prob(features, target)
        (value * torch.arange(1.0, 10.0, dtype=torch.float64)).sum().backward()
        grads.append((value.detach(), features.grad.clone(), [p.grad.clone() for p in head.parameters()]))
    (v1, f1, p1), (v2, f2, p2) = grads
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(f1, f2)
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(head.nll(features, target), -v1)
    padded_turns = nodes.shape[1] * (head.word_leaves.shape[1] if runs > 1 else 1)
    assert head.compact_on_cpu == (padded_turns > 1.25 * lengths.sum().item() / 40)


def test_a_balanced_tree_keeps_the_padded_paths():
    from nplm.trees.tree import Tree, balanced_nested

    tree = Tree.from_nested(balanced_nested(list(range(16))), 16)  # depth 4 everywhere
    assert not HierarchicalHead(6, tree, node_form="logistic", node_init="random").compact_on_cpu


def test_learned_tree_refuses_a_first_model_from_another_vocabulary(run_train, tmp_path, toy_run):
    first = toy_run.best  # a softmax model on the toy corpus: 42 words
    with pytest.raises(UserError, match=r"tree.bootstrap_checkpoint=.*trained on another vocabulary \(42 words\) than this corpus. \(10\)"):
        run_train("experiment=toy_hsm", "corpus.max_vocab=10", "tree=learned", f"tree.bootstrap_checkpoint={first}",
                  "paths.output_dir=" + str(tmp_path / "second"))


@pytest.mark.parametrize("runs", [1, 2])
def test_unigram_node_init_makes_the_untrained_tree_the_unigram_model(runs):
    """head.node_init=unigram: node vectors at zero, node biases log(right mass / left mass): the
    untrained tree's distribution is (count + 1) / total, also when words have several codes."""
    from nplm.trees.mixture_tree import mixture_tree

    gen = torch.Generator().manual_seed(2)
    tree = mixture_tree(torch.randn(20, 3, generator=gen, dtype=torch.float64).numpy(), seed=0,
                        eps=0.3 if runs > 1 else 0.0, runs=runs)
    counts = torch.randint(0, 50, (20,), generator=gen).tolist()
    head = HierarchicalHead(4, tree, node_form="logistic", node_init="unigram", counts=counts).double()
    expected = (torch.tensor(counts, dtype=torch.float64) + 1) / (sum(counts) + 20)
    torch.testing.assert_close(head.log_probs(torch.randn(3, 4, dtype=torch.float64)).exp(), expected.expand(3, 20))


def test_zero_node_init_starts_every_turn_at_one_half():
    from nplm.trees.tree import Tree, balanced_nested

    tree = Tree.from_nested(balanced_nested(list(range(16))), 16)
    for form in ("logistic", "morin_bengio"):
        head = HierarchicalHead(4, tree, node_form=form, node_init="zero")
        if form == "morin_bengio":
            head.alpha.data.zero_(), head.W.weight.data.zero_(), head.W.bias.data.zero_()
        torch.testing.assert_close(head.log_probs(torch.randn(3, 4)).exp(), torch.full((3, 16), 1 / 16))
