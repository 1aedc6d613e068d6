"""nplm's own entry in each Lightning checkpoint (`CHECKPOINT_KEY`), written and read by `LanguageModel`'s
checkpoint hooks: what rebuilds the model from the checkpoint alone (vocabulary, tree, learned tokenizer) and what
a resumed run goes on from (the best validation perplexity, the random generators, the head's sizes, and inside an
epoch the epoch so far: `nplm.training.epoch_state`). Plain tensors and containers only, so checkpoints load with
`torch.load(weights_only=True)`."""

from __future__ import annotations

from nplm.training.capture import eager_optimizer_state
from nplm.training.rng import rng_state

CHECKPOINT_KEY = "nplm"  # our entry in Lightning checkpoints


def write_entry(module, checkpoint: dict) -> None:
    """`module` (a `LanguageModel`)'s entry into `checkpoint`, and its optimizer states as an eager run saves them:
    float step sizes, not capturable (resumable anywhere)."""
    if "optimizer_states" in checkpoint:
        checkpoint["optimizer_states"] = [eager_optimizer_state(s) for s in checkpoint["optimizer_states"]]
    now = module.training_epoch()
    checkpoint[CHECKPOINT_KEY] = {
        "vocab": module.vocab.to_dict(), "best_val_ppl": module.best_val_ppl,
        "tree": module.tree.to_dict() if module.tree is not None else None,
        "tokenizer": None if module.vocab.subword is None else module.vocab.subword.to_dict(),
        "rng": rng_state(module.device), "head_sizes": list(module.head.graph_sizes()),
        # inside an epoch, what the rest of it needs (the batches already trained: the training loader's state)
        "epoch_so_far": None if now is None else now.state(module.model.carried_state("train"))}


def read_entry(checkpoint: dict) -> dict:
    """The entry `write_entry` wrote (older checkpoints: without the keys added since)."""
    entry = checkpoint[CHECKPOINT_KEY]
    return {"best_val_ppl": entry["best_val_ppl"], "rng": entry.get("rng"), "epoch_so_far": entry.get("epoch_so_far"),
            "head_sizes": tuple(entry.get("head_sizes", ()))}
