"""Hierarchical softmax over a binary tree of the vocabulary (Morin & Bengio 2005).

A word w is the leaf at the end of a path of internal nodes n_1..n_D(w) with turns b_j in {0, 1}:

    P(w | context) = prod_j P(b_j | n_j, context),   P(b = 1 | n, f) = sigmoid(s(n, f))    (eq. 4-5)

so training costs O(depth) = O(log |V|) node evaluations per example instead of O(|V|) (with
`sparse`, the optimizer's update too: only the batch's nodes, instead of all |V| - 1). The NLL is
the sum over the path of the binary log-losses (not their mean, which is not a log-likelihood).

Node forms (`node_form`), over the NPLM features f:
- `morin_bengio`: s(n, f) = alpha_n + beta . tanh(c + W f + U N_n), with learned node embeddings N
  (Morin & Bengio's eq. 6; with `model.hidden_dim=0 model.direct=true`, f is the concatenated word
  vectors, exactly their model);
- `logistic`: s(n, f) = b_n + q_n . f (word2vec; Mnih & Hinton 2009).

The features' scale differs by two orders of magnitude between models (a Transformer's final LayerNorm gives
|f| about sqrt(d); an LSTM's below 1). Morin & Bengio's network as written (`node_input=raw`,
`node_init=random`) suffers from both ends: from the Transformer's features one Adam step turns c + W f into
one offset shared by every node, so every node turns the same way (tests/test_first_step.py); from the
LSTM's, W f and U N_n are so small that tanh is linear and every node sees the same function of f, so
training stays near the unigram model. `node_input=normalized` (the config's default) feeds f / |f| and
starts N_n and W at unit scale (U at 1 / sqrt(node_dim)), so that each node works at its own point of the
tanh whatever the model. `node_init` zero or unigram start what the features add to s at zero (q_n, or
beta; word2vec's node vectors start at zero), so the first steps cannot push every node one way; unigram
also starts the tree at the unigram model (b_n or alpha_n: log(right mass / left mass)), the config's
default.

The full distribution [B, V] is computed level by level from the root,
log P(child) = log P(parent) + log sigmoid(+-s(parent)), which costs O(B x nodes) after the node
scores, instead of gathering every word's path (O(B x V x depth)).

Several codes per word (a multi-code tree, `Tree.leaf_words`; Mnih & Hinton 2009, section 4): the
probability of a word is the sum over its leaves, P(w | ctx) = sum_k P(leaf_k(w) | ctx), taken as a
log-sum-exp of the path log-probabilities in `nll` and in `log_probs` alike; the leaves' probabilities
sum to 1 and each leaf has one word, so the distribution over words stays normalised.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nplm.errors import UserError
from nplm.fast import plain
from nplm.config.rules import Bool, Choice, Int
from nplm.heads import register_head
from nplm.heads.base import Head, rows, wide, require_counts, require_tree
from nplm.trees.tree import Tree

NODE_FORMS = ("morin_bengio", "logistic")
MORIN_BENGIO_ONLY = (("node_form", ("morin_bengio",)),)  # the node network's keys (`Rule.when`)
NODE_INITS = ("random", "zero", "unigram")
NODE_INPUTS = ("normalized", "raw")
COMPACT_WASTE = 1.25  # on a CPU, score only the real turns once padding would add more than 25% (nll)
EXP_SAFE = 80.0  # |x| <= 80: exp(+-x) is finite and normal in float32 (float32 exp overflows past 88)


@register_head("hierarchical", keys={
    "node_form": Choice(options=NODE_FORMS, default="morin_bengio", doc="morin_bengio: sigmoid(alpha + beta.tanh(c + W f + U N)); logistic"),
    "node_dim": Int(1, default=16, when=MORIN_BENGIO_ONLY, doc="size of a node's feature vector N (morin_bengio)"),
    "node_hidden": Int(1, default=16, when=MORIN_BENGIO_ONLY, doc="hidden units of the node network (morin_bengio)"),
    "node_input": Choice(options=NODE_INPUTS, default="normalized", when=MORIN_BENGIO_ONLY,
                         doc="normalized: f / |f| enters the node network, its weights at unit scale; raw: f as "
                             "Morin & Bengio write it"),
    "node_init": Choice(options=NODE_INITS, doc="random; zero: what the features add to s starts at 0 (q_n, or "
                                                "beta); unigram: zero, and the node biases from the unigram split"),
    "chunk_elements": Int(1, doc="scores computed per chunk of this many elements (memory bound)"),
    "sparse": Bool(doc="row-sparse gradients for the node parameters: only the batch's nodes are updated "
                       "(lazy Adam), as model.sparse_embeddings for C; pays at large |V|")})
class HierarchicalHead(Head):
    has_predicted_representation = True  # `predicted_representation`: what tree=learned clusters
    variants = ({}, {"node_form": "logistic"})
    avoids_full_scores = True  # the nodes on each target's path only

    @classmethod
    def uses_tree(cls, options) -> bool:
        return True

    @classmethod
    def needs_counts(cls, options) -> bool:
        return options.get("node_init") == "unigram"  # the node biases: log-odds of the unigram split

    def __init__(self, feature_dim: int, tree: Tree, node_form: str = "morin_bengio", node_dim: int = 16,
                 node_hidden: int = 16, chunk_elements: int = 1 << 20, node_init: str = "unigram",
                 counts=None, sparse: bool = False, node_input: str = "normalized"):
        """`counts` [V]: the words' training counts, for node_init=unigram. Morin & Bengio's network as their
        paper writes it: node_input="raw", node_init="random"."""
        super().__init__()
        self.tree, self.node_form, self.chunk_elements = tree, node_form, chunk_elements
        self.node_input = node_input
        self.sparse = sparse  # row-sparse gradients of the per-node parameters (q, b / N, alpha)
        I = len(tree.children)
        with torch.device("cpu"):  # the paths' index tables: real tensors under the memory estimate's meta device too
            nodes, codes, lengths = tree.paths()
            self.register_buffer("path_nodes", nodes, persistent=False)  # [L, D], per leaf (= word in a plain tree)
            self.register_buffer("path_signs", codes.float() * 2 - 1, persistent=False)  # [L, D], +1 = right
            self.register_buffer("path_mask", torch.arange(nodes.shape[1]) < lengths[:, None], persistent=False)
            self.multi_code = tree.leaf_words is not None
            if self.multi_code:  # each word's leaves [V, K], padded with leaf 0 and masked out
                self._ranks = tree.code_ranks()
                K = len(self._ranks)
                leaves = torch.zeros(tree.vocab_size, K, dtype=torch.long)
                mask = torch.zeros(tree.vocab_size, K, dtype=torch.bool)
                for r, (rank_leaves, rank_words) in enumerate(self._ranks):
                    leaves[rank_words, r], mask[rank_words, r] = rank_leaves, True
                self.register_buffer("word_leaves", leaves, persistent=False)  # [V, K]
                self.register_buffer("word_leaf_mask", mask, persistent=False)  # [V, K]
            self._levels = _level_plan(tree)
            K = self.word_leaves.shape[1] if self.multi_code else 1
            self.compact_on_cpu = nodes.shape[1] * K > COMPACT_WASTE * lengths.sum().item() / tree.vocab_size
        if node_form == "logistic":
            self.q = nn.Parameter(torch.randn(I, feature_dim) * feature_dim ** -0.5)  # [I, F]
            self.b = nn.Parameter(torch.zeros(I))
        else:
            self.N = nn.Parameter(torch.randn(I, node_dim) * 0.1)  # node embeddings [I, d_N]
            self.W = nn.Linear(feature_dim, node_hidden)  # weight W, bias c
            self.U = nn.Linear(node_dim, node_hidden, bias=False)
            self.beta = nn.Parameter(torch.randn(node_hidden) * node_hidden ** -0.5)
            self.alpha = nn.Parameter(torch.zeros(I))
        with torch.no_grad():
            if node_form != "logistic" and node_input == "normalized":  # every term of c + W f + U N_n about unit scale
                self.N.normal_()
                self.W.weight.normal_()
                self.W.bias.zero_()
                self.U.weight.normal_(std=node_dim ** -0.5)
            if node_init in ("zero", "unigram"):  # what the features add to s(n, f) starts at 0 (word2vec's q_n)
                (self.q if node_form == "logistic" else self.beta).zero_()
            if node_init == "unigram":
                require_counts("hierarchical", counts, tree.vocab_size)  # built directly, not by build_head
                (self.b if node_form == "logistic" else self.alpha).copy_(unigram_log_odds(tree, counts))

    @classmethod
    def from_config(cls, options: dict, *, feature_dim: int, vocab_size: int, counts, tree=None) -> "Head":
        require_tree("head=hierarchical", tree, vocab_size)
        return cls(feature_dim, tree, **options, counts=counts)

    # -- node scores ------------------------------------------------------------------------
    def predicted_representation(self, features: torch.Tensor) -> torch.Tensor:
        """The context's side of the node score, the vector the tree's nodes score: Mnih & Hinton's
        (2009) "predicted representation" r^, scored by node n as q_n . r^. Features [B, F] ->
        logistic: f itself [B, F] (s = b_n + q_n . f); morin_bengio: c + W f [B, node_hidden], the
        per-example part of the node's hidden pre-activation c + W f + U N_n (the node adds U N_n)."""
        return features if self.node_form == "logistic" else self._context_part(features)

    def _context_part(self, features: torch.Tensor) -> torch.Tensor:
        """c + W f [B, h]; with node_input=normalized, c + W f / |f|."""
        if self.node_input == "normalized":
            features = features / features.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        return self.W(features)

    def _path_scores(self, features: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """s(n, f) for each example's own nodes: features [B, F], nodes [B, D] -> [B, D]."""
        if self.node_form == "logistic":
            return (torch.bmm(rows(self.q, nodes, self.sparse), features[:, :, None]).squeeze(2)
                    + rows(self.b, nodes, self.sparse))
        pre = self._context_part(features)[:, None, :] + self.U(rows(self.N, nodes, self.sparse))  # [B, D, h]
        return _tanh_dot(pre, self.beta) + rows(self.alpha, nodes, self.sparse)  # [B, D]

    def _all_scores(self, features: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """s(n, f) for every internal node, node-major: [I, B] (into `out` if given).

        The Morin-Bengio form costs B x I x h activations. With a = c + W f (per example) and
        u = U N_n (per node), beta . tanh(a + u) = 2 beta . sigmoid(2a + 2u) - sum(beta), and
        sigmoid(2a + 2u) = 1 / (1 + exp(-2a) exp(-2u)): the exponentials are taken once per example
        and once per node, leaving one multiply and one reciprocal per activation (cheaper than
        torch's sigmoid, which is itself faster than its tanh, on CPU). The exponentials stay finite
        and non-zero while |2a|, |2u| <= 80; beyond that the activations go through sigmoid. Computed
        in chunks of nodes of about `chunk_elements` activations, laid out [chunk, h, B]."""
        B, I = features.shape[0], len(self.tree.children)
        if out is None:
            out = features.new_empty(I, B)
        if self.node_form == "logistic":
            return torch.addmm(self.b[:, None], self.q, features.T, out=out)  # [I, B]
        Wf2 = (2 * self._context_part(features)).T.contiguous()  # 2(c + W f): [h, B], B contiguous for the chunk products
        UN2 = 2 * self.U(self.N)  # 2 U N_n: [I, h]
        h = UN2.shape[1]
        product_form = max(Wf2.abs().max().item(), UN2.abs().max().item()) <= EXP_SAFE
        if product_form:
            Wf2, UN2 = Wf2.neg_().exp_(), UN2.neg().exp_()  # exp(-2a) [h, B], exp(-2u) [I, h]
        step = max(1, self.chunk_elements // max(1, B * h))
        for start in range(0, I, step):
            stop = min(I, start + step)
            if product_form:
                hidden = torch.mul(UN2[start:stop, :, None], Wf2[None]).add_(1).reciprocal_()  # [chunk, h, B]
            else:
                hidden = torch.add(UN2[start:stop, :, None], Wf2[None]).sigmoid_()  # [chunk, h, B]
            torch.matmul(self.beta, hidden, out=out[start:stop])  # [chunk, B]
        return out.mul_(2).add_(self.alpha[:, None] - self.beta.sum())

    # -- the head interface --------------------------------------------------------------------
    def nll(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        compact = (self.compact_on_cpu and features.device.type == "cpu") or plain.counting()  # (real turns only)
        if compact and not torch.compiler.is_compiling():
            return -self._log_prob_compact(features, target)
        return -self._log_prob_padded(features, target)

    def _log_prob_padded(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """log P(w | ctx) [B] from every word's paths padded to the deepest leaf (and, in a multi-code
        tree, to the most codes): fixed shapes, no host sync, for GPUs and `torch.compile`."""
        if self.multi_code:
            return self._multi_code_log_prob(features, target)
        nodes, signs, mask = self.path_nodes[target], self.path_signs[target], self.path_mask[target]  # [B, D]
        log_p_turns = F.logsigmoid(signs * wide(self._path_scores(features, nodes)))  # [B, D], float32 under autocast
        return (log_p_turns * mask).sum(dim=1)  # [B]

    def _multi_code_log_prob(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """log P(w | ctx) = logsumexp over the K codes of w of the code's path log-probability: [B]."""
        leaves = self.word_leaves[target]  # [B, K]
        B, K = leaves.shape
        D = self.path_nodes.shape[1]
        nodes = self.path_nodes[leaves].view(B, K * D)  # [B, K D]
        scores = self._path_scores(features, nodes).view(B, K, D)
        log_p_turns = F.logsigmoid(self.path_signs[leaves] * scores) * self.path_mask[leaves]  # [B, K, D]
        log_p_codes = log_p_turns.sum(dim=2).masked_fill(~self.word_leaf_mask[target], float("-inf"))  # [B, K]
        return torch.logsumexp(log_p_codes, dim=1)  # [B]

    def _log_prob_compact(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The same log P(w | ctx) [B], scoring only the turns that exist: the batch's codes, then their
        real path positions, picked out with `nonzero` (a host sync, free on a CPU). `nll` uses it on a
        CPU when padding to the deepest leaf and the most codes would add more than COMPACT_WASTE:
        nll + backward then skips the padding's work, a large share for an uneven tree (a learned tree:
        mean depth 17.6, max 34) and most of it for a two-run ADAPTIVE(0.4) tree (2.2 codes per word, up
        to 9); on a balanced tree (13.4 of 14) the padded batched product is as fast, and faster without
        a gradient."""
        if self.multi_code:
            has_code = self.word_leaf_mask[target]  # [B, K]
            example, rank = has_code.nonzero(as_tuple=True)  # [P]: the batch's codes
            leaves = self.word_leaves[target[example], rank]  # [P]
        else:
            example, leaves = torch.arange(len(target), device=target.device), target  # [B]: one code each
        code, depth = self.path_mask[leaves].nonzero(as_tuple=True)  # [T]: every code's real turns
        nodes, signs = self.path_nodes[leaves[code], depth], self.path_signs[leaves[code], depth]  # [T]
        if self.node_form == "logistic":
            scores = ((rows(self.q, nodes, self.sparse) * features[example[code]]).sum(1)
                      + rows(self.b, nodes, self.sparse))  # [T]
        else:
            pre = self._context_part(features)[example[code]] + self.U(rows(self.N, nodes, self.sparse))  # [T, h]
            scores = _tanh_dot(pre, self.beta) + rows(self.alpha, nodes, self.sparse)  # [T]
        log_p_turns = F.logsigmoid(signs * wide(scores))  # [T]
        log_p_codes = log_p_turns.new_zeros(len(leaves)).index_add_(0, code, log_p_turns)  # [P]
        if not self.multi_code:
            return log_p_codes
        by_rank = log_p_codes.new_full(has_code.shape, float("-inf"))  # [B, K]
        return torch.logsumexp(by_rank.index_put_((example, rank), log_p_codes), dim=1)  # [B]

    @torch.no_grad()
    def log_probs(self, features: torch.Tensor) -> torch.Tensor:
        """Level by level from the root, node-major so every gather moves whole rows of B values:
        log P(child) = log P(parent) + log sigmoid(+-s(parent)), with log sigmoid(-s) = log sigmoid(s) - s.
        For prediction, sampling and mixing: no gradient (training uses `nll`, O(depth) per word)."""
        B = features.shape[0]
        scores, buffers = self._scratch(features)
        self._all_scores(features, out=scores)  # [I, B]
        log_right = F.logsigmoid(scores)  # [I, B]
        log_left = scores.sub_(log_right).neg_()  # log sigmoid(-s) = log sigmoid(s) - s, in place
        out = scores.new_empty(self.tree.num_leaves, B)  # [L, B] per leaf (= per word in a plain tree)
        reach = scores.new_zeros(1, B)  # log P(reach node) for the current level, root first
        for depth, ((start, stop), internal, leaves, words) in enumerate(self._levels_on(scores.device)):
            n = stop - start
            kids = buffers[depth % 2, : 2 * n].view(n, 2, B)  # (parent, turn) order = breadth-first order
            torch.add(reach, log_left[start:stop], out=kids[:, 0])
            torch.add(reach, log_right[start:stop], out=kids[:, 1])
            kids = kids.view(2 * n, B)
            if leaves.numel():
                out.index_copy_(0, words, kids.index_select(0, leaves))
                reach = kids.index_select(0, internal)  # the next level's nodes, in their numbering order
            else:
                reach = kids
        if self.multi_code:
            out = self._sum_codes(out)
        return out.T  # [B, V]

    def _sum_codes(self, leaf_lp: torch.Tensor) -> torch.Tensor:
        """Leaf log-probabilities [L, B] -> word log-probabilities [V, B]: log-sum-exp over each word's
        codes, one rank of codes at a time (rank 0: every word's first leaf, in word order)."""
        ranks = self._ranks_on(leaf_lp.device)
        words_lp = leaf_lp.index_select(0, ranks[0][0])  # [V, B]
        for leaves, words in ranks[1:]:
            both = torch.logaddexp(words_lp.index_select(0, words), leaf_lp.index_select(0, leaves))  # [n_r, B]
            words_lp.index_copy_(0, words, both)
        return words_lp

    def _ranks_on(self, device: torch.device) -> list[tuple]:
        if self._ranks[0][0].device != device:
            self._ranks = [(leaves.to(device), words.to(device)) for leaves, words in self._ranks]
        return self._ranks

    def _scratch(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Working memory of the full-distribution pass, kept between calls of the same batch size:
        node scores [I, B] and the ping-pong buffers of two levels' children [2, 2 x widest, B].
        (Fresh ~100 MB per call costs more in page faults than the arithmetic at |V| = 17,905.)"""
        key = (features.shape[0], features.dtype, features.device)
        if getattr(self, "_scratch_key", None) != key:
            B, I = features.shape[0], len(self.tree.children)
            widest = max(stop - start for (start, stop), *_ in self._levels)
            self._scratch_buffers = (features.new_empty(I, B), features.new_empty(2, 2 * widest, B))
            self._scratch_key = key
        return self._scratch_buffers

    def _levels_on(self, device: torch.device) -> list[tuple]:
        if self._levels and self._levels[0][1].device != device:
            self._levels = [(span, internal.to(device), leaves.to(device), words.to(device))
                            for span, internal, leaves, words in self._levels]
        return self._levels


def _tanh_dot(pre: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """tanh(pre) @ beta [..., h] -> [...]. On a CPU as 2 sigmoid(2 pre) @ beta - sum(beta) (the same
    function): torch's CPU tanh and its backward are slower than sigmoid's here (the
    [B, D, h] node activations of a tree over a large vocabulary), a noticeable part of a training
    step of MLP1's shape with this head."""
    if pre.device.type != "cpu":
        return torch.tanh(pre) @ beta
    return (torch.sigmoid(2 * pre) @ beta) * 2 - beta.sum()


def _level_plan(tree: Tree) -> list[tuple]:
    """Per depth: the span [start, stop) of its nodes (breadth-first numbering makes each level a
    contiguous range, and its internal children the next level in order), and which of the level's
    2n (parent, turn) children are internal nodes, which are leaves, and those leaves' numbers (the
    words, in a plain tree)."""
    children = tree.children_tensor()  # [I, 2]
    plan = []
    for level in tree.levels():
        start, stop = int(level[0]), int(level[-1]) + 1
        assert torch.equal(level, torch.arange(start, stop)), "breadth-first numbering"
        kids = children[start:stop].reshape(-1)  # [2n] in (parent, turn) order
        internal = (kids >= 0).nonzero().squeeze(1)
        leaves = (kids < 0).nonzero().squeeze(1)
        plan.append(((start, stop), internal, leaves, -1 - kids[leaves]))
    return plan


def unigram_log_odds(tree: Tree, counts) -> torch.Tensor:
    """[I]: log(mass of the right subtree / mass of the left one) per internal node, the mass being the
    training count of the words under it (+1 per word; a multi-code word's split evenly over its
    codes), so that with b_n = this, sigmoid(b_n) = P(right | n) and the untrained tree is the unigram
    model."""
    with torch.device("cpu"):  # (data, also when the head is built on the memory estimate's meta device)
        word = tree.word_of_leaf()  # [L]
        codes = torch.bincount(word, minlength=tree.vocab_size).double()  # [V] codes per word
        leaf_mass = ((torch.as_tensor(counts, dtype=torch.float64) + 1) / codes)[word].tolist()  # [L]
    children = tree.children_tensor().tolist()  # [I, 2]; breadth-first: children are numbered after parents
    mass, log_odds = [0.0] * len(children), [0.0] * len(children)
    for n in range(len(children) - 1, -1, -1):
        left, right = (mass[c] if c >= 0 else leaf_mass[-1 - c] for c in children[n])
        mass[n], log_odds[n] = left + right, math.log(right / left)
    return torch.tensor(log_odds, device="cpu")
