"""A trained neural model mixed with an n-gram baseline, per-token probabilities averaged (`nplm-mix`,
`nplm.cli.mix`).

Bengio et al. (2003), "A Neural Probabilistic Language Model", JMLR 3, section 4.1 and Table 1: the
"MLP" rows with mixture "yes" average the network's conditional probabilities with those of the
interpolated (deleted-interpolation) trigram, with weight 0.5 each,

    p_mix(w_t | h_t) = w p_nn(w_t | h_t) + (1 - w) p_ngram(w_t | h_t),       w = 1/2,

which lowered the test perplexity on both Brown and AP News. Besides the fixed weight, the weight w
is also fitted by EM on the validation split (a two-component mixture whose components are fixed,
only the mixing proportion is learned). With r_t the posterior of the neural component for token t,

    E: r_t = w p_a(t) / (w p_a(t) + (1 - w) p_b(t))       M: w <- (1/N) sum_t r_t,

computed in log space, r_t = exp(ln w + ln p_a(t) - logaddexp(ln w + ln p_a(t), ln(1 - w) + ln p_b(t))).
Each step never lowers the validation log-likelihood, which is concave in w, so EM from w = 1/2
ends at least as good as the fixed 1/2 on the validation split. Validation perplexities of the fitted
weight (and of the interpolated trigram, whose lambdas are also fitted on validation) are optimistic;
the test split is the honest comparison.

Both models score exactly the same tokens: the neural windows of a split (`LMDataModule.windows`) and
the n-gram on their targets with the same preceding text as history (`split_context`: the previous
split's tail in a contiguous corpus; otherwise the split's own first k = context_size tokens, which
the network only uses as context).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from nplm.training.checkpoint import check_recorded_data, load_model
from nplm.data.corpora import missing_file
from nplm.data.datamodule import LMDataModule
from nplm.data.windows import BatchIndices, Windows
from nplm.errors import UserError, report_user_errors
from nplm.training.module import LanguageModel
from nplm.training.stream_eval import stream_blocks
from nplm.ngram import DeletedInterpolationTrigram, KneserNey, NgramLanguageModel, split_context
from nplm.ngram.specs import parse_ngram_spec

EVAL_SPLITS = ("valid", "test")


# -- per-token probabilities -------------------------------------------------------------------
@torch.no_grad()
def neural_log_probs(module: LanguageModel, windows: Windows, batch_size: int = 1024) -> np.ndarray:
    """ln p(target | context) of every window, in order: `[L]` float64 nats (L = len(windows)); for a model
    that carries its state, of every token of the stream read in order, the state carried (its evaluation)."""
    module.eval()
    device = next(module.parameters()).device
    if module.model.carries_state:
        blocks = stream_blocks(module, windows.ids.to(device))
        return torch.cat([-module.nll(*blocks[b]) for b in range(len(blocks))]).double().cpu().numpy()  # [L]
    out = np.empty(len(windows), dtype=np.float64)  # [L]
    for idx in BatchIndices(len(windows), batch_size, shuffle=False):
        context, target = windows[idx]  # [B, k], [B]
        nll = module.nll(context.to(device), target.to(device))  # [B]
        out[idx.numpy()] = -nll.double().cpu().numpy()
    return out


def split_targets(dm: LMDataModule, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor | np.ndarray]:
    """(the ids the neural windows of `split` predict `[L]`, the text before them as n-gram history).

    Contiguous corpus: all of the split's ids, after the previous split's last n-1 ids. Otherwise the
    windows start at the split's (k+1)-th token, and its first k tokens are the history."""
    stream = dm.windows[split].ids  # [L + k]
    k = dm.context_size
    prefix = split_context(dm, split, n)
    return stream[k:], (stream[:k] if prefix is None else prefix)


def ngram_log_probs(model: NgramLanguageModel, dm: LMDataModule, split: str) -> np.ndarray:
    """ln p of the tokens the neural windows of `split` predict, under the n-gram `model`: `[L]`."""
    targets, prefix = split_targets(dm, split, model.order)
    return model.score(targets, context_prefix=prefix)


# -- the mixture -------------------------------------------------------------------------------
def _pair(log_p_a, log_p_b) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(log_p_a, dtype=np.float64)  # [N]
    b = np.asarray(log_p_b, dtype=np.float64)  # [N]
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"the two components score different tokens: shapes {a.shape} and {b.shape}")
    if len(a) == 0:
        raise ValueError("no tokens to mix")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("log-probabilities must not be NaN")
    if (np.isneginf(a) & np.isneginf(b)).any():
        raise ValueError("both components give some token probability 0; the mixture is undefined")
    return a, b


def _check_weight(w) -> float:
    if isinstance(w, bool) or not isinstance(w, (int, float, np.floating)) or not 0.0 <= w <= 1.0:
        raise UserError(f"mixture weight {w!r} must be a number in [0, 1] (the neural model's share, e.g. 0.5)")
    return float(w)


def mix_log_probs(log_p_a, log_p_b, w: float) -> np.ndarray:
    """ln(w p_a + (1 - w) p_b) per token: `[N]` float64; w = 1 and w = 0 give the components exactly."""
    a, b = _pair(log_p_a, log_p_b)
    w = _check_weight(w)
    if w == 1.0:
        return a.copy()
    if w == 0.0:
        return b.copy()
    return np.logaddexp(math.log(w) + a, math.log1p(-w) + b)  # [N]


def fit_mixture_weight(log_p_a, log_p_b, iters: int = 100, tol: float = 1e-9) -> float:
    """The weight w of component a maximising sum_t ln(w p_a(t) + (1 - w) p_b(t)), by EM from w = 1/2
    (see the module docstring); stops after `iters` steps or when w moves less than `tol`."""
    a, b = _pair(log_p_a, log_p_b)
    w = 0.5
    for _ in range(iters):
        with np.errstate(divide="ignore"):  # w reaching 0 or 1 exactly: ln 0 = -inf is fine here
            la = math.log(w) + a if w > 0 else np.full_like(a, -np.inf)  # [N] ln w p_a
            lb = math.log1p(-w) + b if w < 1 else np.full_like(b, -np.inf)  # [N] ln (1-w) p_b
        posterior = np.exp(la - np.logaddexp(la, lb))  # [N] r_t
        w_new = float(posterior.mean())
        done = abs(w_new - w) < tol
        w = w_new
        if done:
            break
    return w


def perplexity(log_probs) -> float:
    """exp(-mean ln p) over the tokens of `log_probs` [N]."""
    lp = np.asarray(log_probs, dtype=np.float64)
    if lp.size == 0:
        raise ValueError("cannot compute the perplexity of zero tokens")
    return math.exp(-float(lp.mean()))


# -- n-gram baselines --------------------------------------------------------------------------
def build_ngram(spec: str, dm: LMDataModule) -> NgramLanguageModel:
    """The n-gram baseline named by `spec`, fitted on `dm`'s training ids with its vocabulary.

    "interpolated-trigram": `DeletedInterpolationTrigram` counted on train, lambdas by EM on the tokens
    the neural model predicts in valid; "knN": interpolated modified Kneser-Ney of order N (1-5);
    "knN-backoff": its back-off variant, every n-gram kept; "knN-backoff-srilm": the back-off variant
    with SRILM ngram-count's default count cutoffs (`KneserNey(N, False, min_counts="srilm")`: n-grams of
    order >= 3 seen once are dropped, their mass backs off), i.e. `ngram-count -kndiscount` with its
    defaults, presumably what Bengio et al. (2003)'s back-off rows used. On Brown (|V| = 17,905) the
    cutoffs lower the back-off test perplexity for N = 3, 4 and 5 (bench notes in git:
    experiments/bench/README.md at efe32f1, heads, trees and n-grams; the rows with the cutoffs:
    experiments/bengio2003/README.md)."""
    kind, order, interpolate = parse_ngram_spec(spec)
    V = len(dm.vocab)
    if kind in ("kn", "kn-srilm"):
        min_counts = "srilm" if kind == "kn-srilm" else None
        return KneserNey(order, interpolate=interpolate, min_counts=min_counts).fit(dm.ids["train"], V)
    if not dm.has_split("valid"):
        raise UserError(f"--ngram {spec} fits its weights on the valid split, which this corpus lacks; use kn3")
    valid, prefix = split_targets(dm, "valid", 3)
    return DeletedInterpolationTrigram().fit(dm.ids["train"], valid, V, valid_prefix=prefix)


# -- a checkpoint + a baseline -----------------------------------------------------------------
def mix(checkpoint_path: str, ngram: str = "interpolated-trigram", weight: float | None = 0.5,
        data_dir: str = "data_cache", batch_size: int = 1024, changed_data: bool = False) -> dict:
    """Perplexities of the checkpoint's model, the n-gram baseline and their mixtures (the fixed
    `weight` for the neural model, None: skip it; and the weight fitted by EM on valid) on the valid
    and test splits of the checkpoint's corpus, whose files must be those the checkpoint's run read
    (their sha256), unless `changed_data`."""
    parse_ngram_spec(ngram)  # a bad spec fails before anything is loaded
    if weight is not None:
        weight = _check_weight(weight)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch size {batch_size!r} must be an integer >= 1")
    module = load_model(checkpoint_path)
    data = module.hparams.get("data") or {}
    if "corpus" not in data:
        raise UserError(f"checkpoint {str(checkpoint_path)!r} does not record its corpus; it cannot be mixed "
                        "with an n-gram model of that corpus")
    missing_file(data["corpus"], "mix a checkpoint trained on the data you have")
    dm = LMDataModule(data["corpus"], module.model.context_size, 1, batch_size, data_dir=data_dir,
                      vocab=module.vocab)
    dm.setup()
    if not changed_data:
        check_recorded_data(module, checkpoint_path, dm.files, "--changed-data")
    if not dm.has_split("valid"):
        raise UserError(f"corpus '{data['corpus']['name']}' has no valid split to fit the mixture weight on")
    model = build_ngram(ngram, dm)
    scores: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split in EVAL_SPLITS:
        if not dm.has_split(split):
            continue
        neural = neural_log_probs(module, dm.windows[split], batch_size)  # [L]
        baseline = ngram_log_probs(model, dm, split)  # [L]
        if neural.shape != baseline.shape:
            raise RuntimeError(f"{split}: the neural model scores {len(neural)} tokens but the n-gram "
                               f"{len(baseline)}; they must score the same tokens")
        scores[split] = (neural, baseline)
    w_em = fit_mixture_weight(*scores["valid"])
    result = {"checkpoint": str(checkpoint_path), "corpus": data["corpus"]["name"], "ngram": ngram,
              "weights": {"fixed": weight, "em": w_em}}
    for split, (neural, baseline) in scores.items():
        row = {"neural": perplexity(neural), "ngram": perplexity(baseline)}
        if weight is not None:
            row["mix_fixed"] = perplexity(mix_log_probs(neural, baseline, weight))
        row["mix_em"] = perplexity(mix_log_probs(neural, baseline, w_em))
        targets = split_targets(dm, split, model.order)[0]  # [L] the words both models scored
        row["by_train_count"] = nll_by_train_count(neural, baseline, targets, module.vocab)
        result[split] = row
    result["tokens"] = {split: len(neural) for split, (neural, _) in scores.items()}
    return result


COUNT_BANDS = ((0, 1), (1, 10), (10, 100), (100, 1000), (1000, None))  # training counts [lo, hi)


def nll_by_train_count(neural: np.ndarray, baseline: np.ndarray, targets, vocab) -> list[dict]:
    """Where the two models differ: mean NLL (nats) of each over the tokens whose word has a training
    count in each band (`<unk>` apart), and that band's share of the log-perplexity difference
    sum_band (nll_neural - nll_ngram) / L, so the shares add up to ln(ppl_neural / ppl_ngram)."""
    targets = np.asarray(targets)  # [L]
    counts = np.asarray(vocab.counts)[targets]  # [L] training count of each target word
    unk = targets == vocab.index[vocab.unk] if vocab.unk is not None else np.zeros(len(targets), bool)
    bands = [("<unk>", unk)] + [(f"{lo}-{hi - 1}" if hi else f">={lo}", ~unk & (counts >= lo) & (counts < (hi or np.inf)))
                                for lo, hi in COUNT_BANDS]
    return [{"band": name, "share": float(mask.mean()), "neural_nll": float(-neural[mask].mean()),
             "ngram_nll": float(-baseline[mask].mean()),
             "log_ppl_difference": float((baseline[mask] - neural[mask]).sum() / len(targets))}
            for name, mask in bands if mask.any()]
