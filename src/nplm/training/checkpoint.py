"""Loading a trained model from a Lightning checkpoint, safely (`torch.load(weights_only=True)`)."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch

from nplm.data.subwords import KINDS as SUBWORD_KINDS, Subwords
from nplm.data.vocabulary import Vocabulary
from nplm.errors import UserError
from nplm.training.module import CHECKPOINT_KEY, LanguageModel

DATA_FILES_KEY = "nplm_data_files"  # the checkpoint's entry: each data file its run read -> its sha256


class DataFilesInCheckpoint(pl.Callback):
    """Writes the run's data files (name -> sha256, `LMDataModule.files`) into every checkpoint, so that a
    command using the checkpoint later (nplm-eval, nplm-mix) can tell the data it reads from the data the
    run was trained and tested on."""

    def __init__(self, files: dict[str, str]):
        self.files = dict(files)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[DATA_FILES_KEY] = self.files


def read_checkpoint(path: str | Path) -> dict:
    """The checkpoint's dict; plain tensors and containers only, nothing is unpickled as code."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise UserError(f"checkpoint={p}: is a folder; pass a <run>/checkpoints/*.ckpt file")
    if not p.is_file():
        raise UserError(f"checkpoint={p}: does not exist; pass a <run>/checkpoints/*.ckpt file")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # empty, truncated, corrupt, or holding pickled objects
        raise UserError(f"checkpoint={p}: cannot be read safely ({type(err).__name__}); "
                        "is it a complete nplm checkpoint?") from None
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt or "hyper_parameters" not in ckpt:
        raise UserError(f"checkpoint={p}: is not an nplm checkpoint (no vocabulary or hyperparameters in it)")
    return ckpt


def load_model(path: str | Path) -> LanguageModel:
    """Rebuild the `LanguageModel` (model + head + vocabulary) of a checkpoint, in eval mode."""
    ckpt = read_checkpoint(path)
    entry = ckpt[CHECKPOINT_KEY]
    vocab = Vocabulary.from_dict(entry["vocab"])
    if vocab.tokenizer in SUBWORD_KINDS:  # a learned subword vocabulary: its model encodes and decodes text
        if not entry.get("tokenizer"):
            raise UserError(f"checkpoint={path}: its {vocab.tokenizer} vocabulary has no tokenizer (the "
                            f"'{CHECKPOINT_KEY}' entry lacks 'tokenizer'); use the checkpoint nplm-train wrote, "
                            "whose run folder also holds tokenizer.json")
        vocab.subword = Subwords.from_dict(entry["tokenizer"])
    module = LanguageModel(**ckpt["hyper_parameters"], vocab=vocab, tree=entry.get("tree"))
    module.data_files = ckpt.get(DATA_FILES_KEY)  # (None: a checkpoint written before they were recorded)
    try:
        module.load_state_dict(ckpt["state_dict"])
    except RuntimeError as err:
        first = str(err).splitlines()[0]
        raise UserError(f"checkpoint={path}: does not match its own model config ({first})") from None
    return module.eval()


def where_free(corpus: dict) -> dict:
    """A corpus config without the keys that say where its files are (folders and files), which may move."""
    from nplm.config.rules import FilePath, SearchDir
    from nplm.config.schema import groups

    keys = groups()["corpus"].keys_of(corpus.get("name"))
    return {k: v for k, v in corpus.items() if not isinstance(keys.get(k), (FilePath, SearchDir))}


# keys that choose how a loss is computed, not what is learned: a run may go on with another value
PATH_KEYS = {("head", "training_path")}


def check_resumable_settings(path: str | Path, model: dict, head: dict, corpus: dict | None = None) -> dict:
    """Before any data is read: refuse to continue a run of `model`, `head` and `corpus` (their config groups)
    from a checkpoint that cannot be read or was trained with another model, head or corpus (a corpus's folders
    and files may move), naming what differs. Returns the checkpoint's vocabulary, tree and hyperparameters for
    `check_resumable_data`."""
    ckpt = read_checkpoint(path)
    theirs = dict(ckpt["hyper_parameters"])
    parts = [("model", model), ("head", head)]
    if corpus is not None and (theirs.get("data") or {}).get("corpus") is not None:
        theirs["corpus"] = where_free(theirs["data"]["corpus"])
        parts.append(("corpus", where_free(corpus)))
    for part, ours in parts:
        name = theirs.get(part, {}).get("name")
        if name != ours.get("name"):
            raise UserError(f"resume: checkpoint {str(path)!r} was trained with {part}={name}, not {part}="
                            f"{ours.get('name')}; resume it with {part}={name}")
        diff = sorted(k for k in set(ours) | set(theirs.get(part, {}))
                      if ours.get(k) != theirs.get(part, {}).get(k) and (part, k) not in PATH_KEYS)
        if diff:
            raise UserError(f"resume: checkpoint {str(path)!r} has another {part} ("
                            f"{', '.join(f'{part}.{k}' for k in diff)} differ); resume with the settings it was "
                            "trained with")
    loader_states = ckpt.get("loops", {}).get("fit_loop", {}).get("state_dict", {}).get("combined_loader") or [{}]
    return {"hyper_parameters": ckpt["hyper_parameters"], CHECKPOINT_KEY: ckpt[CHECKPOINT_KEY], "callbacks": ckpt.get("callbacks") or {},
            "position": {"epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step"),
                         "inside_epoch": ckpt[CHECKPOINT_KEY].get("epoch_so_far") is not None,
                         "batch": loader_states[0].get("batches"), "group": loader_states[0].get("group")}}


def check_resumable_position(resumed: dict, batches_per_step: int) -> None:
    """Refuse to go on inside an epoch with another number of batches per Lightning step than the checkpoint's
    (`steps_per_execution`): Lightning counts the epoch's trained steps in the checkpoint's groups."""
    position = resumed["position"]
    if position["inside_epoch"] and position["group"] not in (None, batches_per_step):
        raise UserError(f"steps_per_execution: this run stopped inside an epoch with {position['group']} batches "
                        f"per Lightning step, this one takes {batches_per_step}; resume it with steps_per_execution="
                        f"{position['group']}")


def check_resumable_data(ckpt: dict, path: str | Path, module: LanguageModel) -> None:
    """Once the corpus is read: refuse to continue training `module` from checkpoint `ckpt` (read from `path`
    by `check_resumable_settings`) of another vocabulary or tree, instead of failing inside `load_state_dict`."""
    vocab = ckpt[CHECKPOINT_KEY]["vocab"]["tokens"]
    if vocab != module.vocab.tokens:
        raise UserError(f"checkpoint {str(path)!r} was trained on another vocabulary ({len(vocab)} words, this "
                        f"corpus has {len(module.vocab)}); resume it with its own corpus settings")
    theirs_tree = (ckpt[CHECKPOINT_KEY].get("tree") or {}).get("children")
    if theirs_tree != (module.tree.to_dict()["children"] if module.tree is not None else None):
        raise UserError(f"checkpoint {str(path)!r} was trained on another tree; resume with tree=file "
                        "tree.path=<its run>/tree.json")


def check_recorded_data(module: LanguageModel, path: str | Path, files: dict[str, str], flag: str) -> None:
    """Refuse data `files` (name -> sha256) that differ from those the run of checkpoint `path` (loaded as
    `module`) read: recorded in the checkpoint, or in its run folder's metrics.json for older checkpoints.
    `flag`: the command's own flag that evaluates the data as it is now."""
    from nplm.tracking.records import same_files
    from nplm.tracking.runs import read_record

    recorded, where = module.data_files, Path(path)
    if recorded is None:  # <run>/checkpoints/<name>.ckpt: the run's record
        record = read_record(Path(path).expanduser().resolve().parent.parent) or {}
        recorded, where = record.get("data_files"), Path(path).expanduser().resolve().parent.parent / "metrics.json"
    if recorded:
        same_files(recorded, files, "the checkpoint's run", where, f"pass {flag} to use the data as it is now")

