"""nplm-eval: perplexity of a trained model on a split of its corpus or on any text file.

    nplm-eval outputs/.../checkpoints/best-epoch004.ckpt --split test
    nplm-eval outputs/.../checkpoints/last.ckpt --text my_text.txt
    nplm-eval outputs/.../checkpoints/last.ckpt --block-size 512    (whole blocks: the same tokens, faster)

A --text file is tokenised exactly as the checkpoint's corpus tokenised its own text (its encoding and
lowercasing, <eos> after every line for text_files, characters for tiny_shakespeare), so evaluating
a run's own test file gives the run's test perplexity.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING

from nplm.cli import args as arg
from nplm.errors import UserError, report_user_errors

if TYPE_CHECKING:  # torch and Lightning are imported when a model is used, so a bad flag fails at once
    from nplm.data.windows import Windows
    from nplm.training.module import LanguageModel


def text_ids(module: LanguageModel, path: str, option: str) -> tuple:
    """(ids [L], tokens or None, the text as the model reads it) of the file `path` (`option`: the key an error
    names): tokenised as the checkpoint's corpus tokenises its files, or, for a checkpoint that does not record its
    corpus, by its vocabulary's tokenizer on UTF-8; with a subword vocabulary, the text rendered from those tokens
    and encoded into pieces (tokens None where there are no corpus tokens)."""
    import torch

    from nplm.data.corpora import file_tokens
    from nplm.data.sources import read_text
    from nplm.data.tokenizers import JOINERS, TOKENIZERS, render

    vocab, data = module.vocab, module.hparams.get("data") or {}
    if "corpus" in data:
        tokens = file_tokens(data["corpus"], path, option)
        plain = render(tokens, JOINERS[vocab.subword.base] if vocab.subword is not None else vocab.joiner)
    else:  # a checkpoint that does not record its corpus: the vocabulary's tokenizer on UTF-8
        plain = read_text(path, option=option)
        tokens = None if vocab.subword is not None else TOKENIZERS[vocab.tokenizer](plain)
    if vocab.subword is not None:
        return torch.tensor(vocab.subword.encode(plain), dtype=torch.long), tokens, plain
    return vocab.encode(tokens), tokens, plain


def perplexity(module: LanguageModel, windows: Windows, batch_size: int = 1024, interval: float = 30.0,
               block_size: int | None = None) -> dict:
    """exp(sum of per-token NLL / tokens) over every window, in float64; with `block_size` T, the same
    tokens in batches of `batch_size` blocks of T (`nplm.data.blocks`). A model that carries its state
    (`Model.carries_state`) reads the whole stream in order, one block of T (`block_size`, else the run's
    data.block_size, else the model's default) per batch, the state carried from the first token, as its
    validation does. A progress line goes to stderr every `interval` seconds (stdout keeps only the result)."""
    import torch

    from nplm.data.blocks import Blocks, index_batches
    from nplm.tracking.progress import duration
    from nplm.training.stream_eval import stream_blocks

    nll_sum, tokens = 0.0, 0
    if module.model.carries_state:  # one stream, in order
        source, batch_size = stream_blocks(module, windows.ids, block_size), 1
    else:
        source = Blocks(windows.ids, windows.context_size, block_size) if block_size else windows
    batches = index_batches(source, batch_size, shuffle=False)
    start = last = time.monotonic()
    for i, idx in enumerate(batches, 1):
        context, target = source[idx]
        with torch.no_grad():
            nll_sum += module.nll(context, target).double().sum().item()
        tokens += target.numel()
        if (now := time.monotonic()) - last >= interval:
            last = now
            print(f"nplm-eval: batch {i}/{len(batches)}  {tokens / (now - start):,.0f} tokens/s  "
                  f"ETA {duration((len(batches) - i) * (now - start) / i)}", file=sys.stderr, flush=True)
    return {"ppl": math.exp(nll_sum / tokens), "nll_per_token": nll_sum / tokens, "tokens": tokens}


DEFAULT_BATCH_SIZE = 1024  # windows (blocks) per batch


def evaluate(checkpoint: str, split: str = "test", text: str | None = None, data_dir: str = "data_cache",
             batch_size: int | None = None, block_size: int | None = None, changed_data: bool = False) -> dict:
    """Perplexity of the checkpoint's model on a `split` of its corpus, or on the file `text` (in
    batches of whole blocks of `block_size` tokens where given: a model with `trains_on_blocks`). The
    corpus's files must be those the checkpoint's run read (their sha256), unless `changed_data`."""
    import torch

    from nplm.training.checkpoint import check_recorded_data, load_model
    from nplm.data.corpora import missing_file
    from nplm.data.datamodule import LMDataModule, unknown_rate
    from nplm.data.text_units import text_units, units_of_ids
    from nplm.data.tokenizers import render
    from nplm.data.windows import Windows

    module = load_model(checkpoint)
    k = module.model.context_size
    if batch_size is not None and module.model.carries_state:
        raise UserError(f"--batch-size={batch_size}: model={type(module.model).option_name} reads the text as one "
                        "stream, one block per batch (its state carried); leave --batch-size out")
    batch_size = batch_size or DEFAULT_BATCH_SIZE
    if block_size and not module.model.trains_on_blocks:
        raise UserError(f"--block-size={block_size}: model={type(module.model).option_name} predicts one window at "
                        "a time; leave --block-size out")
    data = module.hparams.get("data") or {}
    if text is not None:
        vocab = module.vocab
        ids, tokens, plain = text_ids(module, text, "--text")
        if vocab.subword is not None:
            head, oov_rate = units_of_ids(vocab, ids[:k]), unknown_rate(ids, vocab)
        else:
            oov_rate = vocab.oov_rate(tokens)
            head = text_units(render(tokens[:k], vocab.joiner), k)
        if len(ids) < k + 1:
            raise UserError(f"--text={text}: has {len(ids)} tokens; the model needs at least {k + 1}")
        result = perplexity(module, Windows(ids, k), batch_size, block_size=block_size)
        units = text_units(plain, len(ids)).less(k, head)  # the scored tokens: all but the first k
        return {"source": str(text), "oov_rate": oov_rate, **result, **_figures(result, units)}
    if "corpus" not in data:
        raise UserError("this checkpoint does not record its corpus; evaluate a file with --text")
    missing_file(data["corpus"], "evaluate another file with --text FILE")
    dm = LMDataModule(data["corpus"], k, 1, batch_size, data_dir=data_dir, vocab=module.vocab)
    dm.setup()
    if not changed_data:
        check_recorded_data(module, checkpoint, dm.files, "--changed-data")
    if not dm.has_split(split):
        raise UserError(f"--split={split}: corpus '{data['corpus']['name']}' has no {split} split; try --split valid")
    result = perplexity(module, dm.windows[split], batch_size, block_size=block_size)
    return {"source": f"{data['corpus']['name']}/{split}", "oov_rate": dm.stats[split].oov_rate, **result,
            **_figures(result, dm.units.get(split))}


def _figures(result: dict, units) -> dict:
    """Bits per byte and per-word perplexity (`nplm.data.text_units`) of a `perplexity` result over `units`."""
    from nplm.data.text_units import figures

    if units is None or units.tokens != result["tokens"]:
        return {}
    return figures(result["nll_per_token"] * result["tokens"], units)


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = arg.Parser("nplm-eval", __doc__)
    parser.add_argument("checkpoint", type=arg.checkpoint_file, help="a .ckpt file written by nplm-train")
    parser.add_argument("--split", type=arg.choice("train", "valid", "test"), default="test",
                        help="split of the checkpoint's own corpus: train, valid or test (default test)")
    parser.add_argument("--text", type=arg.input_file,
                        help="evaluate this text file instead, tokenised as the checkpoint's corpus")
    parser.add_argument("--data-dir", type=arg.output_dir, default="data_cache",
                        help="where corpus downloads go (default data_cache)")
    parser.add_argument("--batch-size", type=arg.integer(1),
                        help=f"windows (blocks with --block-size) per batch (default {DEFAULT_BATCH_SIZE}; a model that "
                             "carries its state reads one block per batch)")
    parser.add_argument("--block-size", type=arg.integer(1), metavar="T",
                        help="score batches of whole blocks of T tokens (models that train on blocks: modern, transformer)")
    parser.add_argument("--changed-data", action="store_true",
                        help="evaluate the corpus's files as they are now, also where they differ from those the "
                             "checkpoint's run read (refused otherwise)")
    parser.add_argument("--json", type=arg.output_file, metavar="OUT", help="also write the result to this JSON file")
    args = parser.parse_args(argv)
    from nplm.tracking.records import standard_json  # (torch: after the flags are checked)

    result = standard_json(evaluate(args.checkpoint, args.split, args.text, str(args.data_dir), args.batch_size,
                                    args.block_size, args.changed_data))
    print(result)
    if args.json:
        arg.write_text(args.json, result + "\n", "--json")


if __name__ == "__main__":
    main()
