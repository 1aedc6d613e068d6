"""The modern NPLM's concatenation layer (Sun & Iyyer 2021), shared by `model=modern` (its first block) and
`model=transformer`'s `first_layer=nplm` (their Transformer-N, whose first layer it is).

At a position that reads the k vectors e_1..e_k before it (oldest first), split into the distant part
e_1..e_{k-w} and the local window of the last w:

    s_j = sum_{p=1}^{k-w} A_{jp} e_p,   j = 1..g                  # [B, g, d] distant context summaries
    x   = [e_{k-w+1}; ...; e_k; s_1; ...; s_g]                    # [B, (w + g) d] the concatenation
    h_1 = LN(sum(x's w + g vectors) + Dropout(FF_1(x)))           # [B, d]
    FF(x) = W_2 ReLU(W_1 x + b_1) + b_2

A [g, k-w] are learned weighted averages of the distant vectors (the paper's "kernel" aggregation).

Every position of a sequence at once (`sliding_parts`): position t = 1..T of a sequence e_1..e_{T+k-1} reads
the window e_{t+k-w}..e_{t+k-1} as w shifted views of the vectors and the summaries

    s_j(t) = sum_{p=1}^{k-w} A_{jp} e_{t+p-1},   t = 1..T                 # [B, T, g, d]

a 1-D cross-correlation of each of the d channels of e_1..e_{T+k-w-1} with the kernel A_j, computed as
one matrix product with A's banded Toeplitz matrices M_j[t, t + p - 1] = A_{jp} ([g T, T + k - w - 1] @
[B, T + k - w - 1, d]), instead of T matmuls over k - w vectors each. (The band's zeros double the
multiply-adds, but a dense GEMM runs near the card's peak: the same sums as a `conv1d` over the B d channels
took most of a GPU training step at WikiText-103's shape; bench notes in git: experiments/bench/README.md at
efe32f1, the WikiText-103 step's kernels.)
"""

from __future__ import annotations

import torch
from torch import nn

from nplm.fast import aligned, plain
from nplm.fast.dropout import Dropout


def window_problem(context_size: int, window: int) -> str | None:
    """Why a window of `window` tokens does not fit a context of `context_size` (None where it does)."""
    if window > context_size:
        return f"an integer <= model.context_size={context_size} (the window is the context's last tokens)"
    return None


def summaries_problem(context_size: int, window: int, summaries: int) -> str | None:
    """Why `summaries` does not match the distant context's context_size - window tokens (None where it does)."""
    distant = context_size - window
    if distant > 0 and summaries == 0:
        return (f"an integer >= 1 when model.context_size > model.window (the {distant} tokens before the window "
                "are read only through the summaries); or set model.context_size equal to model.window")
    if distant == 0 and summaries > 0:
        return "0 when model.context_size equals model.window (there is no distant context to summarise)"
    return None


def summary_weights(context_size: int, window: int, summaries: int) -> nn.Parameter | None:
    """A [g, k - w], each row starting as the plain mean of the distant vectors; None where g = 0."""
    distant = context_size - window
    return nn.Parameter(torch.full((summaries, distant), 1.0 / max(distant, 1))) if summaries else None


def sliding_summaries(e: torch.Tensor, A: torch.Tensor, T: int) -> torch.Tensor:
    """s_j(t) = sum_{p=1}^{n} A_{jp} e_{t+p-1} for t = 1..T: the distant summaries of every position of a
    sequence, `e` [B, T + n - 1, d] (the distant vectors), `A` [g, n] -> [B, T, g, d], as one matmul with
    A's banded Toeplitz matrices (module docstring)."""
    g, n = A.shape
    if plain.counting():  # the model's own arithmetic: each position's n vectors (nplm.fast.plain)
        return torch.einsum("btdn,gn->btgd", e.unfold(1, n, 1), A)  # [B, T, d, n] x [g, n] -> [B, T, g, d]
    L = e.shape[1]  # T + n - 1
    # M_j[t, t + p - 1] = A_jp: A_j padded with zeros to L + 1, tiled T times and cut into rows of L, so that row
    # t starts t places further back in the tiling (its wrapped part is the padding). Its backward sums the
    # tiles; gathering A at a [T, L] index instead scattered T L entries back onto n of them, a large part of
    # a GPU's WikiText-103 step (bench notes in git: experiments/bench/README.md at efe32f1, the WikiText-103
    # step's kernels)
    M = nn.functional.pad(A, (0, L + 1 - n)).repeat(1, T)[:, : T * L].view(g, T, L)  # [g, T, L]
    s = torch.matmul(M.reshape(g * T, L), e)  # [B, g T, d]
    return s.view(e.shape[0], g, T, -1).transpose(1, 2)  # [B, T, g, d]


def window_parts(e: torch.Tensor, A: torch.Tensor | None, window: int):
    """One position that reads `e` [B, k, d] (oldest first) -> (its window [B, w, d], summaries [B, g, d] or
    None where A is None)."""
    distant = e.shape[1] - window
    # [g, k - w] @ [B, k - w, d] -> [B, g, d] the distant summaries
    return e[:, distant:], (A @ e[:, :distant] if A is not None else None)


def sliding_parts(e: torch.Tensor, A: torch.Tensor | None, window: int):
    """Every position t = 1..T of a sequence `e` [B, T + k - 1, d], position t reading e[t - 1 : t + k - 1]
    -> (windows [B, T, w, d], summaries [B, T, g, d] or None where A is None); k = w + A's columns."""
    distant = A.shape[1] if A is not None else 0  # k - w
    T = e.shape[1] - distant - window + 1
    windows = e[:, distant:].unfold(1, window, 1).transpose(2, 3)  # [B, T, w, d]: row t is e[t + k - w : t + k]
    return windows, (sliding_summaries(e[:, : T + distant - 1], A, T) if A is not None else None)


def concatenation(block: "Block", window: torch.Tensor, summaries: torch.Tensor | None, residual: bool) -> torch.Tensor:
    """h_1 [..., d] of the module docstring from the window `[..., w, d]` and the summaries `[..., g, d]` (or
    None): `block` is FF_1 with its dropout and LN; `residual=false` leaves the sum of the w + g vectors out."""
    x = window if summaries is None else torch.cat([window, summaries], dim=-2)  # [..., w + g, d]
    return block(x.flatten(-2), x.sum(-2) if residual else None)  # [..., d]


class Block(nn.Module):
    """LN(residual + Dropout(W_2 ReLU(W_1 x + b_1) + b_2)): x [..., d_in] -> [..., d]."""

    def __init__(self, d_in: int, hidden: int, d: int, dropout: float, layer_norm: bool):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d))
        self.dropout = Dropout(dropout)
        self.norm = nn.LayerNorm(d) if layer_norm else nn.Identity()
        for layer in (self.ff[0], self.ff[2]):  # the public code's initialisation
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        first, second = self.ff[0], self.ff[2]
        # at widths the GPU's tensor cores take whole (nplm.fast.aligned): the hidden keeps its zero padding
        hidden = torch.relu(aligned.linear(x, first.weight, first.bias, keep_padding=True))  # [..., hidden (+ pad)]
        out = self.dropout(aligned.linear(hidden, second.weight, second.bias))  # [..., d]
        return self.norm(out if residual is None else residual + out)
