"""`nplm.load` and `Model`: a trained model's perplexity, log probabilities, samples and predictions, each
computed by its command's own function (nplm-eval, nplm-generate, nplm-predict) (`nplm.api`)."""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path

from nplm.api.runs import Run
from nplm.cli import args as arg
from nplm.errors import UserError
from nplm.files import atomic_write


def load(checkpoint_or_run_dir: str | Path | Run) -> Model:
    """A trained model: a .ckpt file, or a run folder (its best checkpoint, else its last).

    >>> model = nplm.load("outputs/default/runs/2026-12-01_10-00-00_ab12cd")
    >>> model = nplm.load("outputs/.../checkpoints/last.ckpt")
    """
    path = checkpoint_or_run_dir.path if isinstance(checkpoint_or_run_dir, Run) else Path(checkpoint_or_run_dir)
    path = path.expanduser()
    if path.is_dir() and (path / "metrics.json").exists():
        best = Run.load(path).best_checkpoint
        path = best if best is not None and best.exists() else path / "checkpoints" / "last.ckpt"
    arg.check("checkpoint", path, arg.checkpoint_file)  # nplm-eval's check of its checkpoint argument
    from nplm.training.checkpoint import load_model

    return Model(path, load_model(path))


class Model:
    """A trained model: `module` (the LightningModule: model, head and vocabulary) and `vocab`.

    `evaluate`, `perplexity`, `generate` and `predict` run their command's own function on the checkpoint file
    (which reads it again), so their numbers are the command's; `log_probs` scores with `module`.
    """

    def __init__(self, checkpoint: Path, module):
        self.checkpoint = Path(checkpoint)
        self.module = module
        self.vocab = module.vocab

    def __repr__(self) -> str:
        model = self.module.hparams["model"]["name"]
        return f"Model({model}, head={self.module.hparams['head']['name']}, {len(self.vocab)} tokens, {self.checkpoint})"

    def evaluate(self, text: str | None = None, *, file: str | Path | None = None, split: str | None = None,
                 data_dir: str | Path = "data_cache") -> dict:
        """nplm-eval's result (ppl, nll_per_token, tokens, oov_rate, bpb, word_ppl) on `text`, a `file`, or a
        `split` ("train", "valid", "test") of the checkpoint's corpus (read into `data_dir`).

        >>> model.evaluate(split="test")["ppl"]
        """
        from nplm.cli.evaluate import evaluate

        if sum(x is not None for x in (text, file, split)) != 1:
            raise UserError("text, file, split: give exactly one of them")
        if split is not None:
            arg.check("split", split, arg.choice("train", "valid", "test"))
            return evaluate(str(self.checkpoint), split, data_dir=str(data_dir))
        with _text_file(text, file) as (path, name):
            try:
                result = evaluate(str(self.checkpoint), text=path, data_dir=str(data_dir))
            except UserError as err:  # the command's flag and the temporary file's name: the key given here
                raise UserError(str(err).replace(f"--text={path}", name)) from None
        return result if file is not None else {**result, "source": "text"}

    def perplexity(self, text: str | None = None, *, file: str | Path | None = None, split: str | None = None,
                   data_dir: str | Path = "data_cache") -> float:
        """The perplexity nplm-eval prints for `text` (tokenised as the checkpoint's corpus), a `file` or a `split`.

        >>> model.perplexity("the cat sat on the mat .")
        >>> model.perplexity(file="my_text.txt"), model.perplexity(split="test")
        """
        return self.evaluate(text, file=file, split=split, data_dir=data_dir)["ppl"]

    def log_probs(self, text: str | None = None, *, file: str | Path | None = None) -> list[tuple[str, float]]:
        """(token, natural log probability) of every token the model scores in `text` or `file` (all but the
        first context_size, which are its first context); exp(-mean) is `perplexity` of the same text.

        >>> model.log_probs("the cat sat on the mat .")[:2]
        """
        import torch

        from nplm.cli.evaluate import text_ids
        from nplm.data.blocks import index_batches
        from nplm.data.windows import Windows
        from nplm.training.stream_eval import stream_blocks

        module, k = self.module, self.module.model.context_size
        with _text_file(text, file) as (path, name):
            ids = text_ids(module, path, name)[0]  # [L], as nplm-eval --text reads the file
        if len(ids) < k + 1:
            raise UserError(f"{name}: has {len(ids)} tokens; the model needs at least {k + 1}")
        source = stream_blocks(module, ids) if module.model.carries_state else Windows(ids, k)  # as nplm-eval
        targets, nll = [], []
        with torch.no_grad():
            for idx in index_batches(source, 1 if module.model.carries_state else 1024, shuffle=False):
                context, target = source[idx]
                targets.append(target.reshape(-1))  # [N]
                nll.append(module.nll(context, target).double().reshape(-1))  # [N]
        token = self._token_text
        return [(token(int(i)), -float(x)) for i, x in zip(torch.cat(targets), torch.cat(nll))]

    def _token_text(self, i: int) -> str:
        return self.vocab.subword.decode([i]) if self.vocab.subword is not None else self.vocab.tokens[i]

    def generate(self, prompt: str = "", tokens: int = 200, *, seed: int = 0, temperature: float = 1.0,
                 top_k: int = 0, oov: str = "unk") -> str:
        """The prompt and `tokens` sampled tokens: nplm-generate's text for the same arguments and seed.

        >>> model.generate("ROMEO:", tokens=300, seed=1, temperature=0.8)
        """
        from nplm.cli import generate as command

        _require_text("prompt", prompt)
        for key, value, checked in (("tokens", tokens, command.LENGTH), ("seed", seed, command.SEED),
                                    ("temperature", temperature, command.TEMPERATURE), ("top_k", top_k, command.TOP_K),
                                    ("oov", oov, command.OOV)):
            arg.check(key, value, checked)
        return command.generate(str(self.checkpoint), prompt, int(tokens), float(temperature), int(top_k), int(seed), oov)

    def predict(self, context: str, k: int = 5, *, oov: str = "unk") -> list[tuple[str, float]]:
        """The `k` most likely next tokens after `context`, with their probabilities: nplm-predict's list.

        >>> model.predict("the cat", k=3)
        [('sat', 0.61...), ...]
        """
        from nplm.cli import predict as command
        from nplm.inference import OOV_MODES

        _require_text("context", context)
        arg.check("k", k, arg.integer(1))
        arg.check("oov", oov, arg.choice(*OOV_MODES))
        return command.predict(str(self.checkpoint), context, int(k), oov)


@contextmanager
def _text_file(text: str | None, file: str | Path | None):
    """`with _text_file(text, file) as (path, name)`: the path of `file`, or of a temporary file holding `text`,
    and the key an error names ("file=PATH", "text")."""
    if (text is None) == (file is None):
        raise UserError("text, file: give one of them")
    if file is not None:
        arg.check("file", file, arg.input_file)  # nplm-eval --text's check
        yield str(Path(file).expanduser()), f"file={file}"
        return
    if not isinstance(text, str) or not text:
        raise UserError(f"text={text!r}: must be a non-empty string")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "text.txt"
        atomic_write(path, text.encode("utf-8"), what="the text to score")
        yield str(path), "text"


def _require_text(key: str, value) -> None:
    if not isinstance(value, str):
        raise UserError(f"{key}={value!r}: must be a string")
