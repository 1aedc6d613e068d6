"""nplm-generate: sample text from a trained model. It reads nothing of the corpus (the vocabulary and any
subword tokenizer travel in the checkpoint), so unlike nplm-eval and nplm-mix it has no data to check.

    nplm-generate outputs/.../checkpoints/last.ckpt --prompt "ROMEO:" --length 300 --temperature 0.8
"""

from __future__ import annotations

import logging
import math

from nplm.cli import args as arg
from nplm.errors import report_user_errors
from nplm.inference import OOV_MODES

LENGTH = arg.integer(1)
TEMPERATURE = arg.real(0, meaning="(0 = always the most likely token)")
TOP_K = arg.integer(0, meaning="(0 = sample among all tokens)")
SEED = arg.integer(0, 2**63 - 1)
OOV = arg.choice(*OOV_MODES)


def generate(checkpoint: str, prompt: str = "", length: int = 200, temperature: float = 1.0,
             top_k: int = 0, seed: int = 0, oov: str = "unk") -> str:
    """The prompt followed by `length` sampled tokens, joined as the corpus' tokens are (decoded by a
    subword model: the text re-encodes to the prompt's ids and the sampled ones, `sample_ids`)."""
    for flag, value, checked_type in (("--length", length, LENGTH), ("--temperature", temperature, TEMPERATURE),
                                      ("--top-k", top_k, TOP_K), ("--seed", seed, SEED), ("--oov", oov, OOV)):
        arg.check(flag, value, checked_type)
    from nplm.training.checkpoint import load_model  # here: a bad flag is refused before torch and Lightning load

    module = load_model(checkpoint)
    out = sample_ids(module, prompt, length, temperature, top_k, seed, oov)
    vocab = module.vocab
    if vocab.subword is not None:
        return prompt + vocab.subword.decode(out)
    return prompt + (vocab.joiner if prompt and out else "") + vocab.joiner.join(vocab.decode(out))


def sample_ids(module, prompt: str, length: int, temperature: float = 1.0, top_k: int = 0, seed: int = 0,
               oov: str = "unk") -> list[int]:
    """`length` token ids sampled after `prompt`. With a subword vocabulary a candidate is drawn again
    (without it) when the current line's ids would not be those its text encodes to (`canonical`), so that
    the generated text re-encodes to exactly these ids."""
    import torch

    from nplm.inference.prompting import canonical, model_context, next_log_probs, prompt_vectors, sample_next

    vectors, _ = prompt_vectors(module, prompt, oov)
    C = module.model.input_embeddings()
    subword = module.vocab.subword
    line = _last_line(subword, subword.encode(prompt)) if subword is not None else []
    context = model_context(module, list(vectors))
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(length):
        log_probs = next_log_probs(module, torch.stack(context)).clone()  # [V]
        i = sample_next(log_probs, temperature, top_k, generator)
        while subword is not None and not canonical(subword, line + [i]) and torch.isfinite(log_probs).sum() > 1:
            log_probs[i] = -math.inf
            i = sample_next(log_probs, temperature, top_k, generator)
        out.append(i)
        if subword is not None:
            line = _last_line(subword, line + [i])
        context = model_context(module, context + [C[i]])
    return out


def _last_line(subword, ids: list[int]) -> list[int]:
    """The ids after the last piece that ends a line (lines are encoded one at a time)."""
    ends = [n for n, i in enumerate(ids) if subword.tokens[i].endswith(("\n", "Ċ"))]
    return ids[ends[-1] + 1:] if ends else ids


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = arg.Parser("nplm-generate", __doc__)
    parser.add_argument("checkpoint", type=arg.checkpoint_file, help="a .ckpt file written by nplm-train")
    parser.add_argument("--prompt", default="", help="text to continue (default: none)")
    parser.add_argument("--length", type=LENGTH, default=200, help="tokens to generate, >= 1 (default 200)")
    parser.add_argument("--temperature", type=TEMPERATURE, default=1.0,
                        help="divide log-probabilities by this; 0 = greedy (default 1.0)")
    parser.add_argument("--top-k", type=TOP_K, default=0, help="sample among the k most likely only; 0 = all")
    parser.add_argument("--seed", type=SEED, default=0, help="random seed, >= 0 (default 0)")
    parser.add_argument("--oov", type=OOV, default="unk",
                        help="unknown prompt words: unk (<unk>), or bengio (Bengio et al.'s expected vector)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="nplm: %(levelname)s: %(message)s")
    print(generate(args.checkpoint, args.prompt, args.length, args.temperature, args.top_k, args.seed, args.oov))


if __name__ == "__main__":
    main()
