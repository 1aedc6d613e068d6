"""nplm-mix: a trained neural model mixed with an n-gram baseline, per-token probabilities averaged.

    nplm-mix outputs/.../checkpoints/best-epoch004.ckpt                      # + interpolated trigram, 0.5/0.5
    nplm-mix outputs/.../checkpoints/last.ckpt --ngram kn5 --json mix.json   # + modified Kneser-Ney 5-gram

Each split's perplexity of the neural model, the baseline, their 0.5/0.5 mixture (Bengio et al. 2003)
and the mixture with the weight fitted by EM on validation (`nplm.inference.mixture`).
"""

from __future__ import annotations

from nplm.cli import args as arg
from nplm.errors import UserError, report_user_errors
from nplm.ngram.specs import NGRAM_SPECS, parse_ngram_spec


def format_table(result: dict) -> str:
    """The perplexities of `mix` as a small plain-text table, one row per split."""
    from nplm.inference.mixture import EVAL_SPLITS

    w = result["weights"]
    columns = [("neural", "neural"), ("ngram", result["ngram"])]
    if w["fixed"] is not None:
        columns.append(("mix_fixed", f"mix w={w['fixed']:.3g}"))
    columns.append(("mix_em", f"mix EM w={w['em']:.3f}"))
    header = ["split", "tokens"] + [title for _, title in columns]
    rows = [[split, str(result["tokens"][split])] + [f"{result[split][key]:.2f}" for key, _ in columns]
            for split in EVAL_SPLITS if split in result]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(wd) if i == 0 else c.rjust(wd) for i, (c, wd) in enumerate(zip(r, widths)))
             for r in [header] + rows]
    out = [f"{result['corpus']}: perplexity, w = the neural model's weight", *lines]
    for split in EVAL_SPLITS:
        if split in result:
            out += ["", f"{split}: mean NLL by the target word's training count (share of ln ppl difference)"]
            out += [f"  {b['band']:>9s}  {100 * b['share']:5.1f}% of tokens  neural {b['neural_nll']:6.3f}  "
                    f"n-gram {b['ngram_nll']:6.3f}  {b['log_ppl_difference']:+.4f}" for b in result[split]["by_train_count"]]
    return "\n".join(out)


def ngram_spec(text: str) -> str:
    """argparse type of --ngram: one of NGRAM_SPECS."""
    try:
        parse_ngram_spec(text)
    except UserError:
        arg.refuse(f"must be one of: {', '.join(NGRAM_SPECS)}")
    return text


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = arg.Parser("nplm-mix", __doc__[:__doc__.index("\nEach")])
    parser.add_argument("checkpoint", type=arg.checkpoint_file, help="a .ckpt file written by nplm-train")
    parser.add_argument("--ngram", type=ngram_spec, default="interpolated-trigram",
                        help=f"the n-gram baseline: {', '.join(NGRAM_SPECS)} (default interpolated-trigram)")
    parser.add_argument("--weight", type=arg.real(0, 1), default=0.5,
                        help="fixed weight of the neural model in [0, 1] (default 0.5, as in Bengio et al. 2003)")
    parser.add_argument("--json", type=arg.output_file, metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--data-dir", type=arg.output_dir, default="data_cache",
                        help="where corpus downloads go (default data_cache)")
    parser.add_argument("--batch-size", type=arg.integer(1), default=1024, help="windows per batch (default 1024)")
    parser.add_argument("--changed-data", action="store_true",
                        help="use the corpus's files as they are now, also where they differ from those the "
                             "checkpoint's run read (refused otherwise)")
    args = parser.parse_args(argv)
    from nplm.inference.mixture import mix  # (torch and Lightning: after the flags are checked)
    from nplm.tracking.records import standard_json

    result = mix(str(args.checkpoint), args.ngram, args.weight, str(args.data_dir), args.batch_size, args.changed_data)
    print(format_table(result))
    if args.json:
        arg.write_text(args.json, standard_json(result) + "\n", "--json")


if __name__ == "__main__":
    main()
