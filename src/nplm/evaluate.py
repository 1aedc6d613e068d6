"""nplm-eval: perplexity of a trained model on a split of its corpus or on any text file.

    nplm-eval outputs/.../checkpoints/best-epoch004.ckpt --split test
    nplm-eval outputs/.../checkpoints/last.ckpt --text my_text.txt
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from nplm.checkpoint import load_model
from nplm.data.datamodule import LMDataModule
from nplm.data.sources import read_text
from nplm.data.tokenizers import TOKENIZERS
from nplm.data.windows import BatchIndices, Windows
from nplm.errors import UserError, report_user_errors
from nplm.lit import LanguageModel


@torch.no_grad()
def perplexity(module: LanguageModel, windows: Windows, batch_size: int = 1024) -> dict:
    """exp(sum of per-token NLL / tokens) over every window, in float64."""
    nll_sum, tokens = 0.0, 0
    for idx in BatchIndices(len(windows), batch_size, shuffle=False):
        context, target = windows[idx]
        nll_sum += module.nll(context, target).double().sum().item()
        tokens += target.numel()
    return {"ppl": math.exp(nll_sum / tokens), "nll_per_token": nll_sum / tokens, "tokens": tokens}


def evaluate(checkpoint: str, split: str = "test", text: str | None = None, data_dir: str = "data_cache",
             batch_size: int = 1024) -> dict:
    module = load_model(checkpoint)
    k = module.model_cfg.context_size
    if text is not None:
        tokens = TOKENIZERS[module.vocab.tokenizer](read_text(text, option="--text"))
        if len(tokens) < k + 1:
            raise UserError(f"--text {text!r} has {len(tokens)} tokens; the model needs at least {k + 1}")
        result = perplexity(module, Windows(module.vocab.encode(tokens), k), batch_size)
        return {"source": text, "oov_rate": module.vocab.oov_rate(tokens), **result}
    data = module.hparams.get("data") or {}
    if "corpus" not in data:
        raise UserError("this checkpoint does not record its corpus; evaluate a file with --text")
    dm = LMDataModule(data["corpus"], k, 1, batch_size, data_dir=data_dir, vocab=module.vocab)
    dm.setup()
    if not dm.has_split(split):
        raise UserError(f"corpus '{data['corpus']['name']}' has no {split} split; try --split valid")
    return {"source": f"{data['corpus']['name']}/{split}", "oov_rate": dm.stats[split].oov_rate,
            **perplexity(module, dm.windows[split], batch_size)}


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nplm-eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt file written by nplm-train")
    parser.add_argument("--split", choices=("train", "valid", "test"), default="test",
                        help="split of the checkpoint's own corpus (default test)")
    parser.add_argument("--text", help="evaluate this UTF-8 text file instead of a corpus split")
    parser.add_argument("--data-dir", default="data_cache", help="where corpus downloads go (default data_cache)")
    parser.add_argument("--batch-size", type=int, default=1024, help="windows per batch (default 1024)")
    args = parser.parse_args(argv)
    if args.batch_size <= 0:
        raise UserError(f"--batch-size {args.batch_size} must be >= 1")
    print(json.dumps(evaluate(args.checkpoint, args.split, args.text, args.data_dir, args.batch_size), indent=2))


if __name__ == "__main__":
    main()
