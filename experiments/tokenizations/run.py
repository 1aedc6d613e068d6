"""Characters, words and learned subwords compared on bits per byte: one modern NPLM recipe per corpus,
trained on each tokenisation to early stopping, beside the Kneser-Ney 5-gram of the same tokens.

    python experiments/tokenizations/run.py                         # every row not done yet (resumable)
    python experiments/tokenizations/run.py --rows ts-bpe512 --threads 1 --budget-s 3600
    python experiments/tokenizations/run.py --report-only          # README.md from results/ only

Rows: Tiny Shakespeare (the notebook's 90/10 split, no test split) as characters and as byte-level BPE
of 512 and 1,024 tokens (`corpus.tokenizer=bpe corpus.vocab_size=N`, trained on the training split);
Brown (Bengio et al.'s split) as words and as byte-level BPE of 2,000 tokens. Every row trains the same
model (`RECIPE`: the modern NPLM with a context of 32 tokens, whole blocks of 64) to early stopping
(patience 1, at most 8 epochs). Per-token perplexities do not compare across tokenisations; bits per byte
(total NLL in bits over the UTF-8 bytes the scored tokens cover) and, on Brown, per-word perplexity do
(`nplm.data.text_units`). The Kneser-Ney 5-gram of each row's own tokens is scored by `nplm-mix CKPT
--ngram kn5` on the same split and converted with the row's own byte and word counts. Each row's result:
results/<row>.json; README.md is written from them (INTRO.md, then the tables).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import replication  # noqa: E402
from driver import Driver, Row  # noqa: E402
from replication import (best_epoch, finished, load_result, machine_line, provenance_footnote,  # noqa: E402
                         row_marks, seconds_per_epoch, last_epoch_cut, short_commit, stopped_by)

PATIENCE, MAX_EPOCHS = 1, 8
RECIPE = ["model=modern", "model.context_size=32", "model.window=8", "model.summaries=2", "model.embed_dim=128",
          "model.hidden_dim=512", "model.num_layers=2", "model.dropout=0.2", "head=softmax", "optimizer=adamw",
          "optimizer.lr=0.002", "optimizer.weight_decay=0.1", "data.block_size=64", "data.batch_size=16",
          f"trainer.max_epochs={MAX_EPOCHS}", f"callbacks.early_stopping_patience={PATIENCE}"]
CORPORA = {  # name: (corpus overrides, corpus label, tokenisation label)
    "ts-chars": (["corpus=tiny_shakespeare"], "Tiny Shakespeare", "characters"),
    "ts-bpe512": (["corpus=tiny_shakespeare", "corpus.tokenizer=bpe", "corpus.vocab_size=512"], "Tiny Shakespeare",
                  "byte-level BPE, 512"),
    "ts-bpe1024": (["corpus=tiny_shakespeare", "corpus.tokenizer=bpe", "corpus.vocab_size=1024"], "Tiny Shakespeare",
                   "byte-level BPE, 1,024"),
    "brown-words": (["corpus=brown"], "Brown", "words"),
    "brown-bpe2000": (["corpus=brown", "corpus.tokenizer=bpe", "corpus.vocab_size=2000"], "Brown", "byte-level BPE, 2,000"),
}
ROWS = {name: Row([*corpus, *RECIPE], what, MAX_EPOCHS, PATIENCE) for name, (corpus, _, what) in CORPORA.items()}
NANOGPT_LOSS = 1.4697  # karpathy/nanoGPT README: validation loss, nats per character of Tiny Shakespeare (ASCII)
NANOGPT_BPB = NANOGPT_LOSS / math.log(2)  # one byte per character: 2.120 bits per byte


def at_best(record: dict, key: str):
    """`key` of the run's history at its best epoch (lowest val/ppl)."""
    history = record["history"]
    return history[best_epoch(history) - 1].get(key)


def row_result(row: str, spec: Row, record: dict) -> dict:
    """results/<row>.json: per-token perplexity, bits per byte and per-word perplexity (valid, and test where
    the corpus has one) of the best checkpoint, and the same figures of the Kneser-Ney 5-gram of its tokens."""
    from nplm.inference.mixture import mix

    history = record["history"]
    metrics = record["metrics"]
    valid_ppl, valid_bpb, valid_word = metrics["val/ppl_best"], at_best(record, "val/bpb"), at_best(record, "val/word_ppl")
    scored = mix(record["best_checkpoint"], "kn5", None, replication.DATA_DIR)
    kn = {split: scored[split]["ngram"] for split in ("valid", "test") if scored.get(split)}

    def convert(ppl: float, bpb: float | None, word: float | None, ref_ppl: float) -> tuple:
        """(bpb, word ppl) of a perplexity `ppl` over the same tokens as (ref_ppl, bpb, word)."""
        ratio = math.log(ppl) / math.log(ref_ppl)  # total NLL against the reference's, same tokens
        return (bpb * ratio if bpb else None, math.exp(math.log(word) * ratio) if word else None)

    result = {
        "row": row, "command": "nplm-train " + " ".join(spec.overrides), "git_commit": record["git_commit"],
        "machine": machine_line(record["machine"]), "vocab_size": (record.get("corpus") or {}).get("vocab_size"),
        "epochs": len(history), "best_epoch": best_epoch(history), "stopped_by": stopped_by(history, PATIENCE),
        "converged": replication.converged(record, spec.patience, spec.max_epochs),
        "train_s_per_epoch": seconds_per_epoch([r["train/epoch_time_s"] for r in history], last_epoch_cut(history)),
        "wall_time_s": round(record["wall_time_s"]),
        "valid_ppl": valid_ppl, "valid_bpb": valid_bpb, "valid_word_ppl": valid_word,
        "valid_tokens": scored["tokens"]["valid"],
        "valid_oov_rate": (record.get("corpus") or {}).get("valid_oov_rate"),  # tokens mapped to <unk>
        "kn5_valid_ppl": kn["valid"],
    }
    result["kn5_valid_bpb"], result["kn5_valid_word_ppl"] = convert(kn["valid"], valid_bpb, valid_word, valid_ppl)
    if "test" in kn and metrics.get("test/ppl"):
        test_ppl, test_bpb, test_word = metrics["test/ppl"], metrics.get("test/bpb"), metrics.get("test/word_ppl")
        result.update(test_ppl=test_ppl, test_bpb=test_bpb, test_word_ppl=test_word, kn5_test_ppl=kn["test"])
        result["kn5_test_bpb"], result["kn5_test_word_ppl"] = convert(kn["test"], test_bpb, test_word, test_ppl)
    result["history"] = [{"epoch": r["epoch"] + 1, "valid_ppl": r["val/ppl"], "valid_bpb": r.get("val/bpb"),
                          "tokens_per_s": r["train/tokens_per_s"], "epoch_time_s": r["train/epoch_time_s"]}
                         for r in history]
    return result


def fmt(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def tables(results: Path | None = None) -> str:
    results = results or DRIVER.results
    rows = {row: load_result(results, row) for row in ROWS}
    lines = ["Bits per byte: total NLL in bits over the UTF-8 bytes of the scored text; per-word perplexity: "
             "over its whitespace words (`nplm.data.text_units`). Tiny Shakespeare has no test split; its "
             "figures are on the validation split (111,540 characters). KN5: the modified Kneser-Ney 5-gram of the "
             "row's own tokens (`nplm-mix CKPT --ngram kn5`), same split. <unk>: the share of validation tokens "
             "outside the vocabulary; a word row prices those words' bytes at P(<unk>) instead of spelling them out, "
             "so its bits per byte are a lower bound beside the open-vocabulary rows (characters, byte-level BPE: "
             "none). * = not finished (a time limit stopped it before early stopping or the epoch cap); empty = not "
             "run yet.", "",
             "| corpus | tokens | vocabulary | <unk> | valid ppl per token | valid bits per byte | KN5 bits per byte | "
             "valid ppl per word | test bits per byte | test ppl per word | epochs / best | s / epoch |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row, (_, corpus, what) in CORPORA.items():
        r = rows[row]
        if not r:
            lines.append(f"| {corpus} | {what} |  |  |  |  |  |  |  |  |  |  |")
            continue
        star = "" if finished(r) else "*"
        oov = r.get("valid_oov_rate")
        lines.append(f"| {corpus} | {what}{row_marks(r)} | {fmt(r.get('vocab_size'), ',')} | "
                     f"{'' if oov is None else format(oov, '.1%')} | {r['valid_ppl']:.3f} | "
                     f"{fmt(r['valid_bpb'], '.4f')} | {fmt(r['kn5_valid_bpb'], '.4f')} | "
                     f"{fmt(r.get('valid_word_ppl'), '.1f')} | {fmt(r.get('test_bpb'), '.4f')} | "
                     f"{fmt(r.get('test_word_ppl'), '.1f')} | {r['epochs']}{star} / {r['best_epoch']} | "
                     f"{r['train_s_per_epoch']:.0f} |")
    lines.append(f"| Tiny Shakespeare | characters: nanoGPT's character Transformer (published, its README) | 65 | "
                 f"0.0% | {math.exp(NANOGPT_LOSS):.3f} | {NANOGPT_BPB:.4f} |  |  |  |  |  |  |")
    lines += ["", *verdicts(rows)]
    for row, (_, corpus, what) in CORPORA.items():
        r = rows[row]
        if r:
            lines += ["", f"- {corpus}, {what}: `{r['command']}` at `{short_commit(r['git_commit'])}`, {r['machine']}; "
                          f"wall time {r['wall_time_s'] / 60:.0f} min; valid bits per byte per epoch "
                          + ", ".join(fmt(h['valid_bpb'], '.4f') for h in r["history"]) + "."]
    lines += ["", *provenance_footnote(r for r in rows.values() if r)]
    return "\n".join(lines) + "\n"


def verdicts(rows: dict) -> list[str]:
    """Per corpus: which tokenisation's finished row has the fewest bits per byte; Tiny Shakespeare's best
    against nanoGPT's 2.120."""
    lines = []
    for corpus in dict.fromkeys(c for _, c, _ in CORPORA.values()):
        done = {row: r for row, r in rows.items() if r and CORPORA[row][1] == corpus and finished(r)}
        if not done:
            lines.append(f"{corpus}: no finished row yet.")
            continue
        best = min(done, key=lambda row: done[row]["valid_bpb"])
        ranking = ", ".join(f"{CORPORA[row][2]} {done[row]['valid_bpb']:.4f}" for row in sorted(done, key=lambda x: done[x]["valid_bpb"]))
        line = (f"{corpus}: the NPLM does best on {CORPORA[best][2]} ({ranking} valid bits per byte; finished rows "
                f"only, {len(done)} of {sum(1 for _, c, _ in CORPORA.values() if c == corpus)})")
        if done[best].get("valid_oov_rate"):
            line += (f", with {done[best]['valid_oov_rate']:.1%} of its validation tokens <unk> (a lower bound: "
                     "see above)")
        if corpus == "Tiny Shakespeare":
            gap = done[best]["valid_bpb"] - NANOGPT_BPB
            line += f"; {gap:+.3f} bits per byte from nanoGPT's {NANOGPT_BPB:.3f} ({done[best]['valid_bpb'] / NANOGPT_BPB - 1:+.1%})"
        lines.append(line + ".")
    return lines


DRIVER = Driver(HERE, ROWS, row_result, tables, margin_s=300,
                said=lambda r: f"valid {r['valid_bpb']:.4f} bits per byte (KN5 {r['kn5_valid_bpb']:.4f}), {r['epochs']} "
                               f"epochs (best {r['best_epoch']}), stopped by {r['stopped_by']}")

if __name__ == "__main__":
    DRIVER.main(__doc__)
