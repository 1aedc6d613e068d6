"""Turning a text prompt into context vectors and next-token distributions for a trained model.

Unknown words become `<unk>` with a warning, or, with `oov="bengio"`, get the vector that Bengio et al.
(2003), section 4, propose for an out-of-vocabulary word j: C(j) = sum_i C(i) P(i | w_{t-n+1}^{t-1}),
the expected word vector under the model's prediction for j's position.
"""

from __future__ import annotations

import logging

import torch

from nplm.data.tokenizers import TOKENIZERS
from nplm.data.vocabulary import EOS
from nplm.errors import UserError
from nplm.inference import OOV_MODES
from nplm.training.module import LanguageModel

log = logging.getLogger("nplm")


def boundary_id(module: LanguageModel) -> int:
    """The token that pads a prompt shorter than the context: an end of sentence or line."""
    vocab = module.vocab
    for tok in (EOS, "\n", ".", vocab.unk):
        if tok is not None and tok in vocab.index:
            return vocab.index[tok]
    return 0


def model_context(module: LanguageModel, vectors):
    """What the model reads to predict the next token, of the vectors so far (a list or `[n, m]`): its last k
    (`context_size`), or every one for a model that carries its state (an LSTM: read from a zero state, as
    evaluation reads a split from its first token)."""
    return vectors if module.model.carries_state else vectors[-module.model.context_size:]


@torch.no_grad()
def next_log_probs(module: LanguageModel, context_vectors: torch.Tensor) -> torch.Tensor:
    """Context vectors `[n, m]` (`model_context`) -> log P(next token) `[V]`."""
    features = module.model.features_from_embeddings(context_vectors.unsqueeze(0))  # [1, F]
    return module.head.log_probs(features)[0]  # [V]


@torch.no_grad()
def prompt_vectors(module: LanguageModel, text: str, oov: str = "unk") -> tuple[torch.Tensor, list[str]]:
    """Word vectors `[k + T, m]` of a prompt of T tokens, left-padded with k boundary tokens."""
    if oov not in OOV_MODES:
        raise UserError(f"--oov={oov}: must be one of: {', '.join(OOV_MODES)}")
    vocab, C = module.vocab, module.model.input_embeddings()  # C: [V, m]
    k = module.model.context_size
    tokens = vocab.subword.pieces(text) if vocab.subword is not None else TOKENIZERS[vocab.tokenizer](text)
    vectors = [C[boundary_id(module)]] * k
    for tok in tokens:
        if tok in vocab.index:
            vectors.append(C[vocab.index[tok]])
        elif oov == "unk" and vocab.unk_id is not None:
            log.warning("unknown token %r in the prompt: using %s (or pass --oov bengio)", tok, vocab.unk)
            vectors.append(C[vocab.unk_id])
        else:
            log.warning("unknown token %r in the prompt: using sum_i C(i) P(i | context)", tok)
            p = next_log_probs(module, torch.stack(model_context(module, vectors))).exp()  # [V]
            vectors.append(p @ C)  # [m]
    return torch.stack(vectors), tokens


def canonical(subword, line: list[int]) -> bool:
    """Whether the ids of a line re-encode to themselves from their text (`nplm.data.subwords`): a
    subword model can give a text's pieces in several ways, encoding gives one."""
    return subword.encode(subword.decode(line)) == line


def sample_next(log_probs: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator) -> int:
    """One token id from `log_probs [V]` sharpened by `temperature` and cut to the `top_k` best."""
    if temperature <= 0:
        return int(log_probs.argmax())
    logits = log_probs / temperature
    if 0 < top_k < logits.numel():
        kth = logits.topk(top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator))
