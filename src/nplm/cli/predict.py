"""nplm-predict: the top-k next tokens after a context, with their probabilities.

    nplm-predict outputs/.../checkpoints/last.ckpt "the cat sat" --top-k 5
"""

from __future__ import annotations

import logging

from nplm.cli import args as arg
from nplm.errors import UserError, report_user_errors
from nplm.inference import OOV_MODES


def predict(checkpoint: str, context: str, top_k: int = 10, oov: str = "unk") -> list[tuple[str, float]]:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise UserError(f"--top-k={top_k}: must be an integer >= 1")
    from nplm.training.checkpoint import load_model  # here: a bad flag is refused before torch and Lightning load
    from nplm.inference.prompting import model_context, next_log_probs, prompt_vectors

    module = load_model(checkpoint)
    vectors, _ = prompt_vectors(module, context, oov)
    probs = next_log_probs(module, model_context(module, vectors)).exp()
    top = probs.topk(min(top_k, probs.numel()))
    vocab = module.vocab
    text = (lambda i: vocab.subword.decode([i])) if vocab.subword is not None else vocab.tokens.__getitem__
    return [(text(int(i)), float(p)) for p, i in zip(top.values, top.indices)]


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = arg.Parser("nplm-predict", __doc__)
    parser.add_argument("checkpoint", type=arg.checkpoint_file, help="a .ckpt file written by nplm-train")
    parser.add_argument("context", help="the preceding text (words, or characters for a character model)")
    parser.add_argument("--top-k", type=arg.integer(1), default=10, help="how many candidates to print (default 10)")
    parser.add_argument("--oov", type=arg.choice(*OOV_MODES), default="unk",
                        help="unknown context words: unk (<unk>), or bengio (Bengio et al.'s expected vector)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="nplm: %(levelname)s: %(message)s")
    for token, p in predict(args.checkpoint, args.context, args.top_k, args.oov):
        print(f"{p:.4f}\t{token!r}")


if __name__ == "__main__":
    main()
