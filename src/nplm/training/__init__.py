"""The training core: `train(cfg) -> metrics`, the LightningModule, the trainer and its callbacks,
execution of several batches per step, checkpoints and perplexity."""
