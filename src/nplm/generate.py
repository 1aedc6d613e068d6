"""nplm-generate: sample text from a trained model.

    nplm-generate outputs/.../checkpoints/last.ckpt --prompt "ROMEO:" --length 300 --temperature 0.8
"""

from __future__ import annotations

import argparse
import logging

import torch

from nplm.checkpoint import load_model
from nplm.errors import UserError, report_user_errors
from nplm.prompting import OOV_MODES, next_log_probs, prompt_vectors, sample_next


def generate(checkpoint: str, prompt: str = "", length: int = 200, temperature: float = 1.0,
             top_k: int = 0, seed: int = 0, oov: str = "unk") -> str:
    """The prompt followed by `length` sampled tokens, joined as the corpus' tokens are."""
    if length < 0:
        raise UserError(f"--length {length} must be >= 0")
    if temperature < 0:
        raise UserError(f"--temperature {temperature} must be >= 0 (0 picks the most likely token)")
    module = load_model(checkpoint)
    vectors, _ = prompt_vectors(module, prompt, oov)
    k, C = module.model_cfg.context_size, module.model.C.weight
    context = list(vectors[-k:])
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(length):
        i = sample_next(next_log_probs(module, torch.stack(context)), temperature, top_k, generator)
        out.append(module.vocab.tokens[i])
        context = context[1:] + [C[i]]
    joiner = module.vocab.joiner
    return prompt + (joiner if prompt and out else "") + joiner.join(out)


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nplm-generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt file written by nplm-train")
    parser.add_argument("--prompt", default="", help="text to continue (default: none)")
    parser.add_argument("--length", type=int, default=200, help="tokens to generate (default 200)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="divide log-probabilities by this; 0 = greedy (default 1.0)")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most likely only; 0 = all")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--oov", choices=OOV_MODES, default="unk",
                        help="unknown prompt words: <unk>, or Bengio et al.'s expected vector")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="nplm: %(levelname)s: %(message)s")
    print(generate(args.checkpoint, args.prompt, args.length, args.temperature, args.top_k, args.seed, args.oov))


if __name__ == "__main__":
    main()
