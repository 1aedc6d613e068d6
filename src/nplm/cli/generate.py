"""nplm-generate: sample text from a trained model.

    nplm-generate outputs/.../checkpoints/last.ckpt --prompt "ROMEO:" --length 300 --temperature 0.8
"""

from __future__ import annotations

import logging

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
    """The prompt followed by `length` sampled tokens, joined as the corpus' tokens are."""
    for flag, value, checked_type in (("--length", length, LENGTH), ("--temperature", temperature, TEMPERATURE),
                                      ("--top-k", top_k, TOP_K), ("--seed", seed, SEED), ("--oov", oov, OOV)):
        arg.check(flag, value, checked_type)
    import torch  # here, not at the top: a bad flag is refused before torch and Lightning load

    from nplm.training.checkpoint import load_model
    from nplm.inference.prompting import next_log_probs, prompt_vectors, sample_next

    module = load_model(checkpoint)
    vectors, _ = prompt_vectors(module, prompt, oov)
    k, C = module.model.context_size, module.model.input_embeddings()
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
