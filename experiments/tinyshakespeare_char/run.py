"""Tiny Shakespeare characters, the notebook's 90/10 split: the notebook's network and the modern NPLM
(Sun & Iyyer 2021) beside the Kneser-Ney 5-gram counted on the same split and nanoGPT's character
Transformer as its README gives it.

    python experiments/tinyshakespeare_char/run.py                    # every row not done yet (resumable)
    python experiments/tinyshakespeare_char/run.py --rows modern --threads 1 --budget-s 3600
    python experiments/tinyshakespeare_char/run.py --report-only

Rows: `notebook` (`experiment=tinyshakespeare_char`), `modern` (`experiment=sun2021/tinyshakespeare_char`),
`modern-regularised` (the same against its overfitting: more dropout, weight decay, a step halved after an
epoch with no better validation), `modern-wide` (twice the blocks' hidden width, more dropout, the step
halved, under bf16 autocast, which these CPUs' avx512_bf16 make faster than the fp32 recipe at half the
width), `modern-wide-regularised` (the wide row with the weight decay), each trained to early stopping
(patience 2), and `modern-cosine`, `modern-d256-cosine`, `modern-d256-w8-cosine`,
`modern-d256-w8-dropout5-cosine`, `modern-d256-w8-dropout2-cosine` and `modern-d256-w4-cosine` (the
regularised row; the same with width d = 256 under bf16; that with a window of 8 characters and 8
averages of the 56 before it; that with dropout 0.5, and 0.2; and a window of 4 with 12 averages: each
with the step annealed to 0 along a cosine over 12 epochs instead of halved, trained for those 12),
`modern-d256-w8-dropout2-cosine10`, `modern-d256-w8-dropout2-wd3-cosine10` and
`modern-d256-w8-dropout15-cosine10` (the dropout-0.2 row with its cosine over 10 epochs, that with weight
decay 0.3, and with dropout 0.15), `modern-d256-w8-dropout2-cosine10-seed2` (the 10-epoch row with seed 2:
how far the seed moves it), `modern-d256-w8-dropout2-cosine10-ema` (the 10-epoch row validated,
checkpointed and scored on an exponential moving average of its weights, decay 0.9995 per step),
`modern-d256-w8-dropout2-cosine8` (the dropout-0.2 row over 8 epochs), `modern-d256-w4-dropout2-cosine10`
(the window of 4 with dropout 0.2 over 10 epochs; `-seed2` and `-ema` as the window-8 row's),
`modern-d256-w4-dropout2-wd3-cosine12-ema` (that with weight decay 0.3 and the moving average, its cosine
over 12 epochs; `-cosine14-ema` over 14; `modern-d256-w3-dropout2-wd3-cosine12-ema` with a window of 3
and 13 averages; `modern-d256-l6-w3-dropout2-wd3-cosine12-ema` that with 6 blocks, `-seed2` with seed 2), `modern-d256-w4-dropout2-wd3-cosine12-ema-block16` and `-cosine16-ema-block16` (that row
trained on batches of 16 blocks of 16 consecutive characters, every position of a block at once, over 12
and 16 epochs), and the `modern-gpu-*` rows, which need a CUDA GPU (`gpu_rows.sh` trains them in parallel on one: longer
contexts, and the window-4 row again with and without the average, with a second seed, and with more
dropout, weight decay 0.3, 0.4 or 0.6, a longer average or wider layers against its overfitting, and
windows of 2 and 3 with more averages). The rows of a search round that varied one setting of the cosine
recipe are the jobs of its sweep config (src/nplm/conf/sweep/tinyshakespeare_*.yaml: `nplm-train -m
+sweep=tinyshakespeare_w8_dropout` runs that round on its own, in multirun/; `--rows tinyshakespeare_w8_dropout`
trains its rows here). For each
finished row, `nplm.inference.mixture.mix` (what `nplm-mix CKPT --ngram kn5` prints) scores the row's best checkpoint, the modified Kneser-Ney 5-gram of
the same training characters and their mixture (weight fitted by EM on the validation split) on the
validation split. Resumable as experiments/mnih2009: a row stopped by `--budget-s` goes on from its last
checkpoint on the next call. Runs live in outputs/tinyshakespeare_char/<row>; each result is
results/<row>.json; README.md is INTRO.md plus the tables written from the result files only.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the drivers' shared helpers
import replication
from driver import Driver, Row, sibling, sweep_job
from replication import (DATA_DIR, best_epoch, cut_epochs, epoch_steps, last_epoch_cut, machine_line,
                         seconds_per_epoch, stopped_by)

HERE = Path(__file__).resolve().parent
PATIENCE = 2  # as the two experiment files
HELDOUT = "tiny_shakespeare_heldout"  # the corpus with a test split that chose nothing


def cosine_row(model: list[str], dropout: float, bf16: bool = True, gpu: bool = False, epochs: int = 12,
               weight_decay: float = 0.1, seed: int | None = None, ema: float | None = None,
               heldout: bool = False) -> Row:
    """A row of the cosine recipe: the modern NPLM with the `model` overrides, `dropout`, AdamW with
    `weight_decay` and the step annealed to 0 along a cosine over `epochs` epochs, trained for those; under bf16
    autocast where `bf16`; on one CUDA GPU where `gpu`; with `seed` in place of conf/train.yaml's where given;
    validated on the weights' moving average with decay `ema` (`callbacks.ema_decay`) where given; on the
    held-out split (`corpus=tiny_shakespeare_heldout`: 80% train, 10% valid, the last 10% test) where
    `heldout`."""
    return cosine_recipe(["experiment=sun2021/tinyshakespeare_char", *(["trainer=gpu"] if gpu else []),
                          *([f"corpus={HELDOUT}"] if heldout else []), *model,
                          f"model.dropout={dropout}", "optimizer=adamw", f"optimizer.weight_decay={weight_decay}",
                          "optimizer.cosine=true", f"trainer.max_epochs={epochs}",
                          *(["trainer.precision=bf16-mixed"] if bf16 else []),
                          *([f"seed={seed}"] if seed is not None else []),
                          f"callbacks.ema_decay={ema if ema is not None else 'null'}"])


def searched(sweep: str, **choice) -> Row:
    """The job of the search conf/sweep/<sweep>.yaml that sets `choice` (`driver.sweep_job`), as a row."""
    return replace(cosine_recipe(sweep_job(sweep, **choice)), sweep=sweep)


def cosine_recipe(overrides: list[str]) -> Row:
    """A row of the cosine recipe trained for its `trainer.max_epochs`, said in words from its overrides."""
    return Row(overrides, cosine_words(overrides), int(setting(overrides, "trainer.max_epochs")), PATIENCE)


def setting(overrides: list[str], key: str, default: str | None = None) -> str | None:
    """The value `overrides` give `key` (the last one), or `default`."""
    return next((o.split("=", 1)[1] for o in reversed(overrides) if o.split("=", 1)[0] == key), default)


def cosine_words(overrides: list[str]) -> str:
    """A cosine row in the tables' words: the model's changes, the regularisation, the schedule, the rest."""
    def get(key: str, default: str | None = None) -> str | None:
        return setting(overrides, key, default)

    model = "".join(f"{words.format(value)}, " for key, words in (("model.embed_dim", "width {}"),
                                                                 ("model.hidden_dim", "hidden {}"),
                                                                 ("model.num_layers", "{} blocks"))
                    if (value := get(key)))
    if window := get("model.window"):
        before = int(get("model.context_size", "64")) - int(window)
        model += f"a window of {window} and {get('model.summaries')} averages of the {before} before it, "
    if block := get("data.block_size"):
        model += f"trained on batches of {get('data.batch_size')} blocks of {block} consecutive characters, "
    ema, seed = get("callbacks.ema_decay", "null"), get("seed")
    return (f"the modern NPLM, {model}dropout {get('model.dropout')}, AdamW (weight decay "
            f"{get('optimizer.weight_decay')}), step annealed along a cosine over {get('trainer.max_epochs')} epochs"
            + (", bf16" if get("trainer.precision") == "bf16-mixed" else "")
            + (", on a GPU" if get("trainer") == "gpu" else "") + (f", seed {seed}" if seed else "")
            + (f", validated on the weights' moving average (decay {ema})" if ema != "null" else "")
            + (", trained on the first 80% and tested on the held-out last 10%" if get("corpus") == HELDOUT else ""))


# The recipe validates on the weights' moving average since it was measured to help (the -ema rows; Brown's
# sun2021-ema); every row before that trained without it, and keeps doing so
NO_EMA = ["callbacks.ema_decay=null"]


def window_split(window: int, *more: str) -> list[str]:
    """Width 256 and the 16 vectors a position reads split as a local `window` and 16 - `window` learned
    averages of the 64 - `window` characters before it; `more` model overrides after them."""
    return ["model.embed_dim=256", f"model.window={window}", f"model.summaries={16 - window}", *more]


W8, W4, W3, W2 = (window_split(w) for w in (8, 4, 3, 2))
BLOCK16 = ["data.block_size=16", "data.batch_size=16"]  # batches of 16 blocks of 16 targets: 256 a step
MODERN = ["experiment=sun2021/tinyshakespeare_char", *NO_EMA]
PLATEAU = ["optimizer.plateau_factor=0.5"]  # the step halved after an epoch with no better validation
ROWS = {  # the notebook's 15 epochs are its protocol; the cosine rows train for their schedule
    "notebook": Row(["experiment=tinyshakespeare_char"], "the notebook's network (`experiment=tinyshakespeare_char`)",
                    15, PATIENCE),
    "modern": Row(MODERN, "the modern NPLM (`experiment=sun2021/tinyshakespeare_char`, no moving average)", 30,
                  PATIENCE),
    "modern-regularised": Row([*MODERN, "model.dropout=0.3", "optimizer=adamw", "optimizer.weight_decay=0.1", *PLATEAU],
                              "the modern NPLM, dropout 0.3, AdamW (weight decay 0.1), step halved on a plateau", 30,
                              PATIENCE),
    "modern-wide": Row([*MODERN, "model.hidden_dim=1024", "model.dropout=0.3", *PLATEAU, "trainer.precision=bf16-mixed"],
                       "the modern NPLM, hidden 1024, dropout 0.3, step halved on a plateau, bf16", 30, PATIENCE),
    "modern-wide-regularised": Row([*MODERN, "model.hidden_dim=1024", "model.dropout=0.3", "optimizer=adamw",
                                    "optimizer.weight_decay=0.1", *PLATEAU, "trainer.precision=bf16-mixed"],
                                   "the modern NPLM, hidden 1024, dropout 0.3, AdamW (weight decay 0.1), step halved "
                                   "on a plateau, bf16", 30, PATIENCE),
    # the cosine recipe: the step annealed to 0 over the epochs trained; the rows of each search round of it that
    # varied one setting are the jobs of its sweep (conf/sweep/tinyshakespeare_*.yaml)
    "modern-cosine": cosine_row([], 0.3, bf16=False),
    "modern-d256-cosine": cosine_row(["model.embed_dim=256"], 0.3),
    "modern-d256-w8-cosine": searched("tinyshakespeare_w8_dropout", model__dropout=0.3),
    "modern-d256-w8-dropout5-cosine": searched("tinyshakespeare_w8_dropout", model__dropout=0.5),
    "modern-d256-w8-dropout2-cosine": searched("tinyshakespeare_w8_dropout", model__dropout=0.2),
    "modern-d256-w8-dropout2-cosine10": searched("tinyshakespeare_w8_epochs", trainer__max_epochs=10),
    "modern-d256-w8-dropout2-cosine10-seed2": cosine_row(W8, 0.2, epochs=10, seed=2),
    "modern-d256-w8-dropout2-cosine10-ema": cosine_row(W8, 0.2, epochs=10, ema=0.9995),
    "modern-d256-w8-dropout2-wd3-cosine10": cosine_row(W8, 0.2, epochs=10, weight_decay=0.3),
    "modern-d256-w8-dropout15-cosine10": cosine_row(W8, 0.15, epochs=10),
    "modern-d256-w8-dropout2-cosine8": searched("tinyshakespeare_w8_epochs", trainer__max_epochs=8),
    "modern-d256-w4-cosine": cosine_row(W4, 0.3),
    "modern-d256-w4-dropout2-cosine10": cosine_row(W4, 0.2, epochs=10),
    "modern-d256-w4-dropout2-cosine10-seed2": cosine_row(W4, 0.2, epochs=10, seed=2),
    "modern-d256-w4-dropout2-cosine10-ema": cosine_row(W4, 0.2, epochs=10, ema=0.9995),
    # on one CUDA GPU (trainer=gpu; experiments/tinyshakespeare_char/gpu_rows.sh runs them in parallel)
    "modern-gpu-c128-cosine": cosine_row(["model.context_size=128", "model.embed_dim=256", "model.window=8",
                                          "model.summaries=16"], 0.3, gpu=True),
    "modern-gpu-c256-cosine": cosine_row(["model.context_size=256", "model.embed_dim=256", "model.window=8",
                                          "model.summaries=32"], 0.3, gpu=True),
    "modern-gpu-d384-c128-cosine": cosine_row(["model.context_size=128", "model.embed_dim=384", "model.hidden_dim=1024",
                                               "model.window=8", "model.summaries=16"], 0.35, gpu=True),
    # the window-4 rows of 10 epochs again on one GPU, to their end: without and with the weights' moving
    # average (now the recipe's default), a second seed of the averaged one, and a wider one
    "modern-gpu-d256-w4-dropout2-cosine10": searched("tinyshakespeare_gpu_w4_ema", callbacks__ema_decay="null"),
    "modern-gpu-d256-w4-dropout2-cosine10-ema": searched("tinyshakespeare_gpu_w4_ema", callbacks__ema_decay=0.9995),
    "modern-gpu-d256-w4-dropout2-cosine10-ema-seed2": cosine_row(W4, 0.2, epochs=10, gpu=True, seed=2, ema=0.9995),
    "modern-gpu-d384-w4-dropout3-cosine10-ema": cosine_row(["model.embed_dim=384", "model.hidden_dim=1024",
                                                            "model.window=4", "model.summaries=12"], 0.3, epochs=10,
                                                           gpu=True, ema=0.9995),
    # the averaged row against its overfitting after the 7th epoch: more dropout, more weight decay, a longer
    # average, a wider hidden layer with more dropout
    "modern-gpu-d256-w4-dropout3-cosine10-ema": cosine_row(W4, 0.3, epochs=10, gpu=True, ema=0.9995),
    "modern-gpu-d256-w4-dropout2-wd3-cosine10-ema": cosine_row(W4, 0.2, epochs=10, gpu=True, weight_decay=0.3,
                                                               ema=0.9995),
    "modern-gpu-d256-w4-dropout2-cosine10-ema9998": searched("tinyshakespeare_gpu_w4_ema", callbacks__ema_decay=0.9998),
    "modern-gpu-d256-h1024-w4-dropout3-cosine10-ema": cosine_row([*W4, "model.hidden_dim=1024"], 0.3, epochs=10,
                                                                 gpu=True, ema=0.9995),
    # on the CPU, the best of those (weight decay 0.3, still improving when its device call ended after 9 of
    # its 10 epochs) with the cosine stretched over 12 epochs, in float32 (CPUs without bf16 arithmetic), and
    # over 14 (the 12-epoch row's best was its 11th epoch, its validation still falling as the step fell)
    "modern-d256-w4-dropout2-wd3-cosine12-ema": searched("tinyshakespeare_w4_epochs", trainer__max_epochs=12),
    "modern-d256-w4-dropout2-wd3-cosine14-ema": searched("tinyshakespeare_w4_epochs", trainer__max_epochs=14),
    # ... and with a window of 3 and 13 averages (on the GPU the best of the 12-epoch rows: 4.561 against the
    # window of 4's 4.586 and 4.600)
    "modern-d256-w3-dropout2-wd3-cosine12-ema": cosine_row(W3, 0.2, epochs=12, weight_decay=0.3, ema=0.9995,
                                                           bf16=False),
    # that CPU row again on one GPU, in float32 (with a second seed: how far the seed moves it) and in bf16
    # (which of precision and schedule length made it the best), with weight decay 0.4 and 0.6 against its
    # overfitting (0.3 beat 0.1 on the GPU, and the 14-epoch cosine above fits the training characters further
    # and validates worse), and with the same 16 vectors a position split as a window of 2 or 3 and more
    # averages (a window of 4 and 12 averages beat a window of 8 and 8); each a few minutes on a GPU, run in
    # parallel
    "modern-gpu-d256-w4-dropout2-wd3-cosine12-ema-fp32": searched("tinyshakespeare_gpu_w4_weight_decay",
                                                                  optimizer__weight_decay=0.3),
    "modern-gpu-d256-w4-dropout2-wd3-cosine12-ema-fp32-seed2": cosine_row(W4, 0.2, epochs=12, weight_decay=0.3,
                                                                          ema=0.9995, bf16=False, gpu=True, seed=2),
    "modern-gpu-d256-w4-dropout2-wd3-cosine12-ema": cosine_row(W4, 0.2, epochs=12, weight_decay=0.3, ema=0.9995,
                                                               gpu=True),
    "modern-gpu-d256-w4-dropout2-wd4-cosine12-ema-fp32": searched("tinyshakespeare_gpu_w4_weight_decay",
                                                                  optimizer__weight_decay=0.4),
    "modern-gpu-d256-w4-dropout2-wd6-cosine12-ema-fp32": searched("tinyshakespeare_gpu_w4_weight_decay",
                                                                  optimizer__weight_decay=0.6),
    "modern-gpu-d256-w2-dropout2-wd3-cosine12-ema-fp32": cosine_row(W2, 0.2, epochs=12, weight_decay=0.3, ema=0.9995,
                                                                    bf16=False, gpu=True),
    "modern-gpu-d256-w3-dropout2-wd3-cosine12-ema-fp32": cosine_row(W3, 0.2, epochs=12, weight_decay=0.3, ema=0.9995,
                                                                    bf16=False, gpu=True),
    # the CPU row trained as the paper trains: batches of 16 blocks of 16 consecutive characters, every position
    # of a block at once (whole-block training; 2.3x the windows' tokens/s on these 2 CPUs), its cosine over 12
    # epochs and over 16
    "modern-d256-w4-dropout2-wd3-cosine12-ema-block16": searched("tinyshakespeare_block16_epochs",
                                                                 trainer__max_epochs=12),
    "modern-d256-w4-dropout2-wd3-cosine16-ema-block16": searched("tinyshakespeare_block16_epochs",
                                                                 trainer__max_epochs=16),
    # the CPU's window of 3 with 6 blocks in place of 4: more capacity where every position shares it (the two
    # added blocks, 0.5M parameters, 17% more arithmetic a character), not in the first block's weights per
    # position (more width or hidden width helped at dropout 0.3; weight decay, schedule and window split left
    # the 4-block rows between 4.561 and 4.600)
    "modern-d256-l6-w3-dropout2-wd3-cosine12-ema": cosine_row(window_split(3, "model.num_layers=6"), 0.2, epochs=12,
                                                              weight_decay=0.3, ema=0.9995, bf16=False),
    "modern-d256-l6-w3-dropout2-wd3-cosine12-ema-seed2": cosine_row(window_split(3, "model.num_layers=6"), 0.2,
                                                                    epochs=12, weight_decay=0.3, ema=0.9995,
                                                                    bf16=False, seed=2),
    # the best of those on a split that chose nothing: the same recipe trained on the first 80%, validated on the
    # next 10% and tested once on the last 10%, which no row above has seen
    "heldout-d256-l6-w3-dropout2-wd3-cosine12-ema": cosine_row(window_split(3, "model.num_layers=6"), 0.2,
                                                               epochs=12, weight_decay=0.3, ema=0.9995,
                                                               bf16=False, heldout=True),
}


# -- training ----------------------------------------------------------------------------------------------
def row_result(row: str, spec: Row, record: dict) -> dict:
    """What results/<row>.json keeps: validation perplexity, epochs, best epoch, what stopped the run, the
    parameters, the learning curve, and the Kneser-Ney 5-gram and the mixture on the same split."""
    from nplm.inference.mixture import mix
    from nplm.training.checkpoint import load_model

    history = record["history"]
    module = load_model(record["best_checkpoint"])
    scored = mix(record["best_checkpoint"], "kn5", None, DATA_DIR)
    return {
        "row": row, "command": "nplm-train " + " ".join(spec.overrides), "git_commit": record["git_commit"],
        "machine": machine_line(record["machine"]),
        "parameters": sum(p.numel() for p in module.parameters()),
        "context": module.model.context_size,
        "epochs": len(history), "best_epoch": best_epoch(history),
        "stopped_by": stopped_by(history, PATIENCE),
        "converged": replication.converged(record, spec.patience, spec.max_epochs),
        "train_s_per_epoch": seconds_per_epoch([r["train/epoch_time_s"] for r in history],
                                               cut_epochs(history) or last_epoch_cut(history)),
        "cut_epochs": cut_epochs(history),  # a time limit cut them short (a resumed row goes on from their end)
        "wall_time_s": round(record["wall_time_s"]),
        "valid": record["metrics"]["val/ppl_best"],
        "scored_valid": scored["valid"]["neural"],  # the best checkpoint scored again by nplm-mix
        "kn5_valid": scored["valid"]["ngram"], "mix_valid": scored["valid"]["mix_em"],
        "mix_weight": scored["weights"]["em"], "valid_tokens": scored["tokens"]["valid"],
        **({"test": record["metrics"]["test/ppl"], "test_bpb": record["metrics"].get("test/bpb"),
            "scored_test": scored["test"]["neural"], "kn5_test": scored["test"]["ngram"],
            "mix_test": scored["test"]["mix_em"], "test_tokens": scored["tokens"]["test"]} if "test" in scored else {}),
        "history": [{"epoch": r["epoch"] + 1, "train_ppl": r.get("train/ppl"), "valid_ppl": r["val/ppl"],
                     "tokens_per_s": r["train/tokens_per_s"], "epoch_time_s": r["train/epoch_time_s"], "steps": n}
                    for r, n in zip(history, epoch_steps(history) or [None] * len(history))],
    }


report = sibling(__file__, "report")  # the README's tables, from the result files
epoch_seconds = report.epoch_seconds


def tables(results: Path | None = None) -> str:
    return report.tables(results or DRIVER.results, ROWS)


DRIVER = Driver(HERE, ROWS, row_result, tables, margin_s=180,  # the margin: the KN5 scoring (60 s is enough on a GPU)
                said=lambda r: f"valid {r['valid']:.3f} (KN5 {r['kn5_valid']:.3f}), {r['epochs']} epochs (best "
                               f"{r['best_epoch']}), stopped by {r['stopped_by']}")

if __name__ == "__main__":
    DRIVER.main(__doc__)
