"""One LightningDataModule for every corpus: loader -> vocabulary -> id streams -> window batches, or
batches of whole blocks (`data.block_size`, `nplm.data.blocks`)."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from nplm.config.rules import show
from nplm.data.blocks import Blocks, index_batches
from nplm.data.corpora import CORPORA, CorpusText, load_corpus
from nplm.data.id_cache import IdStreams, load_ids
from nplm.data.resumable import resumable
from nplm.data.streams import StreamBatches
from nplm.data.subwords import Subwords
from nplm.data.subwords import lines as lines_of
from nplm.data.text_units import TextUnits, text_units, units_of_ids
from nplm.data.tokenizers import JOINERS, render
from nplm.data.vocabulary import UNK, Vocabulary
from nplm.data.windows import GroupedBatches, Windows
from nplm.errors import UserError

log = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")

# The epoch a training sampler shuffles for is the one Lightning gives its own samplers,
# `trainer.fit_loop.epoch_progress.current.processed`: not a public API. It differs from the public
# `trainer.current_epoch` right after resuming from a checkpoint taken at the end of an epoch, where
# `current_epoch` still names the epoch before while Lightning draws the first batches. `training_epoch`
# checks once per loader that it is there; where it is not (or LIGHTNING_EPOCH_PROGRESS is False: the
# tests force it so) the sampler takes `trainer.current_epoch`: the same runs, except that a run resumed
# from an epoch's end repeats that epoch's order once.
LIGHTNING_EPOCH_PROGRESS = True


def training_epoch(trainer: pl.Trainer) -> Callable[[], int]:
    """The epoch being trained, read when a training epoch's batches are drawn."""
    progress = getattr(getattr(trainer, "fit_loop", None), "epoch_progress", None)
    if LIGHTNING_EPOCH_PROGRESS and hasattr(getattr(progress, "current", None), "processed"):
        return lambda: trainer.fit_loop.epoch_progress.current.processed
    return lambda: trainer.current_epoch


@dataclass
class SplitStats:
    tokens: int  # tokens in the split
    predicted: int  # tokens the model predicts (windows)
    oov_rate: float  # fraction mapped to <unk>


class LMDataModule(pl.LightningDataModule):
    """Windows of `context_size` ids over each split of the corpus named by `corpus_cfg`.

    The vocabulary is counted on `corpus_cfg.vocab_from` ("all" splits as in Bengio et al. 2003, or
    "train"), keeping words seen >= `min_count` times, at most `max_vocab`; others become `<unk>`.
    With `block_size` T (> 0) the loaders give batches of whole blocks instead (`nplm.data.blocks`):
    `batch_size` and `eval_batch_size` then count blocks of T predicted tokens each. For a model that carries
    its state between blocks (`carries_state`, `Model.carries_state`) training batches are block i of
    `batch_size` parallel streams, in order (`nplm.data.streams`), and validation and test read each split as
    one stream, one block per batch, in order (`eval_batch_size` is not used).
    """

    def __init__(self, corpus_cfg: dict, context_size: int, batch_size: int, eval_batch_size: int,
                 seed: int = 0, data_dir: str = "data_cache", vocab: Vocabulary | None = None,
                 overfit_batches: int = 0, block_size: int | None = None, carries_state: bool = False,
                 batch_size_chosen: bool = True):
        super().__init__()  # the values were checked against nplm.config.schema
        self.corpus_cfg = dict(corpus_cfg)
        self.context_size, self.batch_size, self.eval_batch_size = context_size, batch_size, eval_batch_size
        self.seed, self.data_dir = seed, data_dir
        self.vocab: Vocabulary | None = vocab  # given: encode with it (evaluating a checkpoint)
        self.overfit_batches = overfit_batches  # > 0: train, validate and test on these first train batches
        self.ids: dict[str, torch.Tensor] = {}
        self.windows: dict[str, Windows] = {}
        self.block_size = block_size or None  # T; None: window batches
        self.carries_state = carries_state  # stream batches in order (a model that carries its state)
        self.batch_size_chosen = batch_size_chosen  # False: the schema's default, cut to the streams a corpus holds
        if carries_state:
            self.eval_batch_size = 1  # each evaluation split as one stream
        self._on_device: dict[tuple, Windows | Blocks] = {}  # (split, device) -> the split's batches' source there
        self.stats: dict[str, SplitStats] = {}
        self.units: dict[str, TextUnits] = {}  # valid/test: the bytes and words their scored tokens cover
        self.files: dict[str, str] = {}
        self.id_cache: IdStreams | None = None  # the cached id streams of a corpus read line by line
        self.train_group, self.train_limit = 1, None  # `group_training`

    def setup(self, stage: str | None = None) -> None:
        """Load, count and encode once; later calls (Lightning calls setup per stage) are free."""
        if self.windows:
            return
        cfg = self.corpus_cfg
        built_here = self.vocab is None
        k = self.context_size
        heads: dict[str, TextUnits] = {}  # split -> the units of its first k tokens
        lines = CORPORA.get(cfg.get("name")).line_files(cfg, Path(self.data_dir).expanduser())
        if lines is not None:  # split files read line by line into ids once, then cached (nplm.data.id_cache)
            self.id_cache = load_ids(lines, cfg, self.data_dir, self.vocab)
            self.files, self.vocab, contiguous = self.id_cache.files, self.id_cache.vocab, False
            _check_vocab_size(cfg, self.vocab)
            streams = ((s, self.id_cache.ids[s], self.id_cache.tokens[s], self.id_cache.oov_rate.get(s, 0.0))
                       for s in SPLITS)
            totals = {s: TextUnits(self.id_cache.tokens[s], st["text_bytes"], st["text_words"])
                      for s, st in self.id_cache.stats.items()}
        else:
            text = load_corpus(cfg, self.data_dir)
            self.files, contiguous = text.files, text.contiguous
            if not text.train:  # (before the vocabulary, which would be empty: the key to change is the split's)
                _require_tokens(cfg, "train", 0, 0, k)
            texts = {s: render(getattr(text, s), JOINERS[text.tokenizer]) for s in SPLITS}
            if cfg.get("tokenizer") is not None:  # a learned subword vocabulary: trained on the training text
                start = time.perf_counter()
                subword = self.vocab.subword if self.vocab is not None else Subwords.train(
                    cfg["tokenizer"], int(cfg["vocab_size"]), lambda: lines_of(texts["train"]), text.tokenizer)
                trained = time.perf_counter()
                encoded = {s: torch.tensor(subword.encode(texts[s]), dtype=torch.long) for s in SPLITS}
                log.info("corpus %s: a %s vocabulary of %d pieces %s in %.1f s, the splits encoded in %.1f s",
                         cfg["name"], cfg["tokenizer"], len(subword.tokens), "read" if self.vocab is not None else "trained",
                         trained - start, time.perf_counter() - trained)
                if built_here:
                    self.vocab = Vocabulary.of_subwords(subword, encoded["train"])
                streams = ((s, encoded[s], len(encoded[s]), unknown_rate(encoded[s], self.vocab)) for s in SPLITS)
            else:
                if built_here:
                    self.vocab = self._build_vocab(text)
                streams = ((s, self.vocab.encode(getattr(text, s)), len(getattr(text, s)),
                            self.vocab.oov_rate(getattr(text, s))) for s in SPLITS)  # encoded one split at a time
            totals = {s: text_units(texts[s], len(getattr(text, s))) for s in SPLITS}
            if self.vocab.subword is None:  # the first k words as they are, not as <unk>
                heads = {s: text_units(render(getattr(text, s)[:k], JOINERS[text.tokenizer]), k) for s in SPLITS}
        previous: torch.Tensor | None = None
        for split, ids, tokens, oov_rate in streams:
            # In one contiguous text, a split's first k tokens are predicted from the previous split's
            # last k tokens, so every token of valid/test is scored.
            context = previous[-k:] if contiguous and previous is not None and len(previous) >= k else None
            stream = ids if context is None else torch.cat([context, ids])
            self.ids[split] = ids
            previous = ids
            if tokens == 0 and split == "test":
                continue
            _require_tokens(cfg, split, tokens, len(stream), k)
            self.windows[split] = Windows(stream, k)
            self.stats[split] = SplitStats(tokens, len(self.windows[split]), oov_rate)
            if split in totals and split != "train":  # what the scored tokens cover (nplm.data.text_units)
                total = dataclasses.replace(totals[split], tokens=len(ids))
                head = heads[split] if split in heads else units_of_ids(self.vocab, ids[:k])
                self.units[split] = total if context is not None else total.less(k, head)
        if built_here and lines is None:  # counts are training-split counts, whatever the vocabulary was counted on
            self.vocab.counts = torch.bincount(self.ids["train"], minlength=len(self.vocab)).tolist()
        for split, s in self.stats.items():
            log.info("corpus %s %s: %d tokens, %d predicted, OOV rate %.4f", cfg["name"], split, s.tokens,
                     s.predicted, s.oov_rate)
        log.info("corpus %s: |V| = %d", cfg["name"], len(self.vocab))
        predicted = self.stats["train"].predicted
        if self.block_size and predicted < self.block_size:
            raise UserError(f"data.block_size={self.block_size}: longer than the {predicted} tokens the train split "
                            f"of corpus '{cfg['name']}' predicts; use data.block_size <= {predicted}")
        whole = predicted // self.block_size if self.block_size else 0
        if self.carries_state and whole < self.batch_size and not self.batch_size_chosen:
            log.info("data.batch_size=%d: the %d whole blocks of data.block_size=%d tokens in the train split of corpus "
                     "'%s' (the default, %d streams, is more than it holds; set data.batch_size to choose)", whole, whole,
                     self.block_size, cfg["name"], self.batch_size)
            self.batch_size = whole
        elif self.carries_state and whole < self.batch_size:
            raise UserError(f"data.batch_size={self.batch_size}: more parallel streams than the {whole} blocks of "
                            f"data.block_size={self.block_size} tokens in the train split of corpus '{cfg['name']}' "
                            f"(each stream needs one at least); use data.batch_size <= {whole}")

    def _build_vocab(self, text: CorpusText) -> Vocabulary:
        cfg = self.corpus_cfg
        source = cfg.get("vocab_from", "train")
        streams = [text.train] if source == "train" else [text.train, text.valid, text.test]
        min_count = int(cfg.get("min_count", 1))
        vocab = Vocabulary.build(
            streams, min_count=min_count, max_vocab=cfg.get("max_vocab"),
            unk=cfg.get("unk", UNK), order=cfg.get("order", "frequency"),
            joiner=JOINERS[text.tokenizer], tokenizer=text.tokenizer,
        )
        _check_vocab_size(cfg, vocab)
        return vocab

    def require_batches(self, trainer_cfg, processes: int = 1) -> None:
        """A fraction `trainer.limit_*_batches` that leaves a split no whole batch is refused here, with the
        smallest fraction that works (Lightning would stop with a traceback after the run started); so are
        `processes` > 1 (DDP's ranks, each training on every processes-th batch) with fewer training batches
        than ranks (Lightning would train nothing and call the run finished)."""
        units = "blocks" if self.block_size else "windows"
        if processes > 1 and (batches := self.train_batches()) < processes:
            items = self._train_items()
            raise UserError(f"trainer.devices={show(trainer_cfg.get('devices'))}: the {processes} training processes "
                            f"share the training split's {batches} batch(es) of data.batch_size="
                            f"{self.batch_size} {units} ({items} in all), one in {processes} each: none; use data.batch_size="
                            f"{max(1, items // processes)} or lower, or fewer devices")
        for split, key, batch_size in (("train", "limit_train_batches", self.batch_size),
                                       ("valid", "limit_val_batches", self.eval_batch_size),
                                       ("test", "limit_test_batches", self.eval_batch_size)):
            limit = trainer_cfg.get(key)
            if not isinstance(limit, float) or split not in self.windows:
                continue
            if self.overfit_batches > 0:  # every stage runs the first training batches (`_loader`)
                batches, batch_size = self.train_batches(), self.batch_size
                split = f"{split} split (data.overfit_batches={self.overfit_batches}: the first training batches)"
            else:
                batches = self.train_batches() if split == "train" else len(
                    index_batches(self.source(split), batch_size, shuffle=False))
                split = f"{split} split"
            if int(limit * batches) == 0:
                raise UserError(f"trainer.{key}={limit}: leaves no batch of the {split} ({batches} batches "
                                f"of {batch_size} {units}); use at least {1 / batches:.3g}, or a count like 1")

    def _train_items(self) -> int:
        """Training windows (whole blocks with `block_size`) per epoch: all, or the first `overfit_batches`
        batches' worth."""
        n = self.blocks("train").whole if self.block_size else len(self.windows["train"])
        return min(n, self.overfit_batches * self.batch_size) if self.overfit_batches > 0 else n

    def train_batches(self) -> int:
        """Batches in a training epoch (all of them; before trainer.limit_train_batches): stream batches hold
        only whole streams (`nplm.data.streams`)."""
        if self.carries_state:
            return self._train_items() // self.batch_size
        return -(-self._train_items() // self.batch_size)

    def blocks(self, split: str) -> Blocks:
        """The split's blocks of `block_size` tokens (views of its windows' stream)."""
        return Blocks(self.windows[split].ids, self.context_size, self.block_size)

    def source(self, split: str) -> Windows | Blocks:
        """What the split's batches are gathered from: its windows, or its blocks."""
        return self.blocks(split) if self.block_size else self.windows[split]

    def group_training(self, size: int, limit: int | None = None) -> None:
        """The training loader yields lists of `size` consecutive batches, `limit` batches per epoch
        (`nplm.training.execution.ExecutionPlan`); validation and test batches stay single."""
        self.train_group, self.train_limit = size, limit

    def has_split(self, split: str) -> bool:
        return split in self.windows

    def _loader(self, split: str, batch_size: int, shuffle: bool) -> DataLoader:
        dataset = self.source(split)
        if self.overfit_batches > 0:  # the same few training batches, in order, for every stage
            tokens = self._train_items() * (self.block_size or 1) + self.context_size
            ids, k = self.windows["train"].ids[:tokens], self.context_size
            dataset = Blocks(ids, k, self.block_size) if self.block_size else Windows(ids, k)
            batch_size, shuffle = self.batch_size, False
        rank, world, epoch_fn, device = 0, 1, None, torch.device("cpu")
        if self.trainer is not None:
            trainer = self.trainer
            # the epoch being trained, as Lightning counts it for its own samplers (right after a resume too)
            rank, world = trainer.global_rank, trainer.world_size
            epoch_fn = training_epoch(trainer)
            device = trainer.strategy.root_device
        # On a GPU: the stream copied to the device once per split, batches gathered there.
        if (split, device) not in self._on_device:
            self._on_device[split, device] = dataset.to(device)
        dataset = self._on_device[split, device]
        if self.carries_state and (split == "train" or self.overfit_batches > 0):  # parallel streams, in order
            sampler = StreamBatches(dataset.whole, batch_size, device)
        else:
            sampler = index_batches(dataset, batch_size, shuffle and not self.carries_state, self.seed, rank, world,
                                    epoch_fn, device)
        if split == "train" and (self.train_group > 1 or self.train_limit is not None):
            sampler = GroupedBatches(sampler, self.train_group, self.train_limit)
        # batch_size=None: the sampler yields whole index batches, the dataset gathers them at once. A generator
        # of its own: each iterator draws a seed (for workers; none here) from it, not from torch's global one,
        # which then holds only the model's draws (dropout, sampled heads): a resumed run draws as the run it
        # continues (LanguageModel.on_train_start, `nplm.training.rng`), whenever Lightning makes the epoch's iterator.
        # collate_fn: the gathered batches as they are (torch's default walks every tensor of every batch again)
        args = dict(batch_size=None, collate_fn=as_gathered, generator=torch.Generator().manual_seed(self.seed))
        if split == "train":  # a run stopped inside an epoch resumes with the rest of its batches (nplm.data.resumable)
            return resumable(sampler, self._trained_this_epoch, dataset=dataset, **args)
        return DataLoader(dataset, sampler=sampler, **args)

    def _trained_this_epoch(self) -> int | None:
        """Batches the module has trained in the current epoch (its `training_epoch()`), where it counts them."""
        module = self.trainer.lightning_module if self.trainer is not None else None
        now = module.training_epoch() if hasattr(module, "training_epoch") else None
        return None if now is None else now.batches

    def transfer_batch_to_device(self, batch, device: torch.device, dataloader_idx: int):
        """Lightning's hook: the batches are gathered where the model is (`_loader`), so they are handed on as
        they are; Lightning's own transfer would walk the group's 2 S tensors, each Lightning step."""
        if on_device(batch, device):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size, shuffle=False)

    def summary(self) -> dict:
        """Corpus statistics for logs and metrics.json."""
        return {
            "name": self.corpus_cfg["name"],
            "vocab_size": len(self.vocab),
            **{f"{split}_{key}": value for split, s in self.stats.items() for key, value in vars(s).items()},
            **{f"{split}_scored_{key}": getattr(u, key) for split, u in self.units.items()
               for key in ("bytes", "words")},
        }


def as_gathered(batch):
    """The DataLoader's collate_fn: a batch (or group of batches) the dataset gathered, unchanged."""
    return batch


def on_device(batch, device: torch.device) -> bool:
    """Whether `batch` is tensors on `device`: a tensor, or lists and tuples of them (a `(context, target)`
    batch, a group of them)."""
    if isinstance(batch, torch.Tensor):
        return batch.device == device
    return isinstance(batch, (list, tuple)) and all(on_device(item, device) for item in batch)


def unknown_rate(ids: torch.Tensor, vocab: Vocabulary) -> float:
    """Fraction of `ids` that are the unknown token (a subword vocabulary: characters never seen in training)."""
    return float((ids == vocab.unk_id).double().mean()) if vocab.unk_id is not None and len(ids) else 0.0


def _check_vocab_size(cfg: dict, vocab: Vocabulary) -> None:
    if len(vocab) < 2:  # one word: every prediction is certain and perplexity a meaningless 1.0
        raise UserError(f"corpus.min_count={int(cfg.get('min_count', 1))}: leaves {len(vocab)} word(s) in the "
                        f"vocabulary of corpus '{cfg['name']}' ({', '.join(vocab.tokens) or 'none'}); a language "
                        "model needs at least 2, lower corpus.min_count")


def _require_tokens(cfg: dict, split: str, tokens: int, stream: int, k: int) -> None:
    """A split must have tokens, and with the context carried over from the previous split at least
    k + 1 of them (k = model.context_size) to make one window."""
    files = cfg["name"] == "text_files"
    key = split if files else f"{split}_size"
    if tokens == 0:
        fix = f"give corpus.{key} a file with words in it" if files else f"raise corpus.{key}"
        raise UserError(f"corpus.{key}={cfg.get(key)}: the {split} split of corpus '{cfg['name']}' has no tokens; "
                        f"{fix}")
    if stream < k + 1:
        raise UserError(f"model.context_size={k}: longer than the {split} split of corpus '{cfg['name']}' "
                        f"({tokens} tokens; it needs at least {k + 1}); use a smaller context or more text")
