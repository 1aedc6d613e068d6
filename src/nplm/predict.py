"""nplm-predict: the top-k next tokens after a context, with their probabilities.

    nplm-predict outputs/.../checkpoints/last.ckpt "the cat sat" --top-k 5
"""

from __future__ import annotations

import argparse
import logging

from nplm.checkpoint import load_model
from nplm.errors import UserError, report_user_errors
from nplm.prompting import OOV_MODES, next_log_probs, prompt_vectors


def predict(checkpoint: str, context: str, top_k: int = 10, oov: str = "unk") -> list[tuple[str, float]]:
    if top_k <= 0:
        raise UserError(f"--top-k {top_k} must be >= 1")
    module = load_model(checkpoint)
    vectors, _ = prompt_vectors(module, context, oov)
    k = module.model_cfg.context_size
    probs = next_log_probs(module, vectors[-k:]).exp()
    top = probs.topk(min(top_k, probs.numel()))
    return [(module.vocab.tokens[i], float(p)) for p, i in zip(top.values, top.indices)]


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nplm-predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt file written by nplm-train")
    parser.add_argument("context", help="the preceding text (words, or characters for a character model)")
    parser.add_argument("--top-k", type=int, default=10, help="how many candidates to print (default 10)")
    parser.add_argument("--oov", choices=OOV_MODES, default="unk",
                        help="unknown context words: <unk>, or Bengio et al.'s expected vector (default unk)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="nplm: %(levelname)s: %(message)s")
    for token, p in predict(args.checkpoint, args.context, args.top_k, args.oov):
        print(f"{p:.4f}\t{token!r}")


if __name__ == "__main__":
    main()
