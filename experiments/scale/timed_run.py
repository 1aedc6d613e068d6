"""One measured process of experiments/scale/run.py (run as a subprocess, so that every figure is the
process's own: imports, peak resident memory, first batch).

    python timed_run.py MODE OUT.json T0 [overrides...]

MODE:
- `setup`: compose nplm-train's config with the overrides and set up its datamodule (the token-id
  cache built, or read when there); times `setup`, reports the corpus statistics.
- `train`: `nplm.training.train.train(cfg)` itself, nplm-train's run, with `LanguageModel.training_step`
  timed: the time of every Lightning step (a group of `steps_per_execution` batches) and the examples
  it trained; checkpoints are not written (a measurement of training, not of saving 1 GB of softmax
  weights). Also times the datamodule's setup and the tree's build.
- `tree`: set up the datamodule, then build the tree `tree=...` names, timed (built: the tree cache
  beside the ids is neither read nor written).

T0 is the Unix time at which the parent started this process: the time to first batch counts from it
(interpreter start and imports included). Writes OUT.json with the timings, `ru_maxrss` (peak resident
memory of this process, which includes the memory-mapped token ids it touched) and the run's metrics.
"""

from __future__ import annotations

import json
import resource
import sys
import time

T0 = float(sys.argv[3])
IMPORTED = None


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose, initialize_config_dir

    from nplm.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    overrides = sys.argv[4:]
    import torch  # noqa: F401  (the imports, timed)

    from nplm.data.datamodule import LMDataModule
    from nplm.training import train as train_module
    from nplm.training.module import LanguageModel

    result: dict = {"mode": mode, "overrides": overrides, "imports_s": time.time() - T0}
    cfg = compose(overrides)
    result["config_done_s"] = time.time() - T0
    setup = LMDataModule.setup

    def timed_setup(self, stage=None):
        if self.windows:
            return setup(self, stage)
        start = time.time()
        setup(self, stage)
        result["setup_s"] = time.time() - start
        result["setup_done_s"] = time.time() - T0
        if self.id_cache is not None:
            result["id_cache"] = {"built": self.id_cache.built, "seconds": self.id_cache.seconds,
                                  "folder": str(self.id_cache.cache_dir)}
        result["corpus"] = self.summary()

    LMDataModule.setup = timed_setup

    if mode == "setup":
        from nplm.training.tree_phase import container

        dm = LMDataModule(container(cfg.corpus), cfg.model.context_size, cfg.data.batch_size,
                          cfg.data.eval_batch_size, data_dir=cfg.paths.data_dir)
        dm.setup()
    elif mode == "tree":  # built, never read from the tree cache beside the ids
        from nplm.training.tree_phase import container
        from nplm.trees import TreeContext, build_tree

        torch.set_num_threads(int(cfg.threads or 1))
        dm = LMDataModule(container(cfg.corpus), cfg.model.context_size, cfg.data.batch_size,
                          cfg.data.eval_batch_size, data_dir=cfg.paths.data_dir)
        dm.setup()
        start = time.time()
        tree = build_tree(container(cfg.tree), TreeContext(dm.vocab, dm.ids["train"], dm.vocab.counts, cfg.seed,
                                                           cfg.paths.data_dir))
        result["tree_s"] = time.time() - start
        result["tree"] = tree.stats(dm.vocab.counts)
    else:
        from pytorch_lightning.callbacks import ModelCheckpoint

        for hook in ("on_train_batch_end", "on_train_epoch_end", "on_validation_end", "on_train_end"):
            setattr(ModelCheckpoint, hook, lambda self, *args, **kwargs: None)  # measuring training, not saving
        tree_of_run = train_module.tree_of_run

        def timed_tree(*args, **kwargs):
            start = time.time()
            tree = tree_of_run(*args, **kwargs)
            result["tree_s"] = time.time() - start
            result["tree_done_s"] = time.time() - T0
            return tree

        train_module.tree_of_run = timed_tree
        check_memory = train_module.check_memory

        def timed_check(*args, **kwargs):  # the memory estimate builds the module once on the meta device
            start = time.time()
            check_memory(*args, **kwargs)
            result["memory_check_s"] = time.time() - start

        train_module.check_memory = timed_check
        build_trainer = train_module.build_trainer

        def timed_trainer(*args, **kwargs):  # called once the module is built
            result["module_done_s"] = time.time() - T0
            return build_trainer(*args, **kwargs)

        train_module.build_trainer = timed_trainer
        steps: list[tuple[float, float, int]] = []  # (start, end, examples) of each Lightning step
        training_step = LanguageModel.training_step

        def timed_step(self, batches, batch_idx):
            start = time.time()
            out = training_step(self, batches, batch_idx)
            steps.append((start - T0, time.time() - T0, int(out["tokens"])))
            return out

        LanguageModel.training_step = timed_step
        metrics = train_module.train(cfg)
        result["metrics"] = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        result["steps"] = steps
        result["first_batch_s"] = steps[0][0] if steps else None
    result["peak_rss_mb"] = peak_rss_mb()
    result["total_s"] = time.time() - T0
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
