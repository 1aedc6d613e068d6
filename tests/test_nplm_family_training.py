"""Every model with every head trains end to end on the toy corpus; the LBL and the modern NPLM
compile (fullgraph), train under bf16 autocast, serve nplm-predict / generate / eval / mix from their
checkpoints, and a sweep `-m model=nplm,lbl,modern` comes out as one nplm-compare table."""

from __future__ import annotations

import json

import pytest
import torch

from nplm.cli.compare import main as compare
from nplm.cli.evaluate import evaluate
from nplm.cli.generate import generate
from nplm.cli.predict import predict
from nplm.heads import head_class
from nplm.inference.mixture import mix
from nplm.models import MODELS
from nplm.training.checkpoint import load_model

from conftest import head_id, head_overrides, head_variants, run_cli
from nplm.cli.train import main as train_main

TOY = ["corpus=toy", "data.batch_size=32", "optimizer.lr=0.01"]
UNIFORM = 42  # the toy vocabulary: a model no better than uniform has perplexity 42
# smaller than the models' defaults, for the toy corpus; a model not named here trains with its defaults
SMALL = {
    "nplm": ["model.context_size=3", "model.embed_dim=8", "model.hidden_dim=16"],
    "lbl": ["model.context_size=3", "model.embed_dim=16"],
    "modern": ["model.context_size=6", "model.window=3", "model.summaries=1", "model.embed_dim=16",
               "model.hidden_dim=32", "model.num_layers=2"],
    "lstm": ["model.hidden_dim=16", "model.num_layers=1", "data.block_size=8", "data.batch_size=4"],  # 4 streams
    "transformer": ["model.context_size=6", "model.embed_dim=16", "model.num_heads=2", "model.hidden_dim=32",
                    "model.num_layers=2", "data.block_size=8"],
}
HLBL = ("hierarchical", {"node_form": "logistic"})


def model_overrides(model: str) -> list[str]:
    return [f"model={model}", *SMALL.get(model, [])]


def pair(model: str, head: str, options: dict | None = None) -> list[str]:
    """The overrides of a model x head pair; the modern NPLM ties its output vectors (its default,
    tie_embeddings=auto) where the head has one per word (its class's `can_tie`), the LBL too when asked
    to (auto: here, to train that path too)."""
    tie = ["model.tie_embeddings=auto"] if model == "lbl" else []
    return [*TOY, *model_overrides(model), *head_overrides(head, options or {}), *tie]


@pytest.mark.slow
@pytest.mark.parametrize("model,head,options", [
    pytest.param(model, name, options, id=f"{model}-{head_id(name, options)}")
    for model in MODELS.names() for name, options in head_variants()])
def test_every_model_trains_with_every_head(run_train, model, head, options):
    """Three epochs of four batches: finite perplexities, and every head's exact validation perplexity
    (the training loss of a sampling head, importance sampling and NCE, is not, their evaluation is) beats
    uniform."""
    metrics = run_train(*pair(model, head, options), "trainer.max_epochs=3")
    ppl = {k: v for k, v in metrics.items() if "ppl" in k}
    assert {"val/ppl", "test/ppl"} <= ppl.keys() and all(torch.isfinite(torch.tensor(v)) for v in ppl.values()), ppl
    assert ("train/ppl_sampled" in ppl) == (not head_class(head).exact_training_loss)
    assert metrics["val/ppl"] < UNIFORM, ppl


COMPILED = [("lbl", "softmax", {}), ("lbl", "nce", {}), ("modern", "adaptive", {}), ("modern", *HLBL)]
FULL_BATCHES = "trainer.limit_train_batches=3"  # the toy epoch's 3 whole batches of 32, not its last of 22


def one_epoch(run_train, *overrides) -> dict:
    metrics = run_train(*overrides, "trainer.max_epochs=1")
    return {k: metrics[k] for k in ("train/ppl", "train/ppl_sampled", "val/ppl") if k in metrics}


@pytest.mark.slow  # 5-15 s a pair: the compiled run trains for real
@pytest.mark.parametrize("model,head,options", COMPILED)
def test_compile_true_trains_as_eager_does(run_train, compile_backend, model, head, options):
    """fullgraph=True through AOT autograd (tests/test_fast_paths.py): the same perplexities as eager,
    dropout included (the modern NPLM's 0.2); whole batches (the smaller last batch's recompile: there)."""
    eager = one_epoch(run_train, *pair(model, head, options), FULL_BATCHES)
    torch._dynamo.reset()
    compiled = one_epoch(run_train, *pair(model, head, options), FULL_BATCHES, "compile=true", compile_backend)
    assert eager.keys() == compiled.keys() and len(eager) == 2
    for key, value in eager.items():
        assert compiled[key] == pytest.approx(value, rel=1e-4), key


@pytest.mark.slow  # two runs a pair
@pytest.mark.parametrize("model,head", [("lbl", "softmax"), ("modern", "adaptive")])
def test_bf16_mixed_training_is_finite_and_near_float32(run_train, model, head):
    exact = one_epoch(run_train, *pair(model, head))
    low = one_epoch(run_train, *pair(model, head), "trainer.precision=bf16-mixed")
    for key, value in exact.items():
        assert low[key] == pytest.approx(value, rel=0.05), key


@pytest.mark.parametrize("model", ["lbl", "modern"])
@pytest.mark.slow
def test_checkpoint_serves_predict_generate_eval_and_mix(run_train, tmp_path, model):
    """The commands read the model through its interface alone (embed, features_from_embeddings,
    input_embeddings, context_size): a tied checkpoint reloads, and predicts the toy corpus's
    continuation once trained."""
    extra = ["model.tie_embeddings=true"] if model == "lbl" else ["model.dropout=0.0"]
    run_train(*TOY, *model_overrides(model), "head=softmax", *extra, "trainer.max_epochs=40")
    ckpt = str(tmp_path / "run" / "checkpoints" / "last.ckpt")
    module = load_model(ckpt)
    assert module.head.out.weight is module.model.output_embeddings()  # tied again after loading
    # the modern NPLM's distant context memorises the corpus: give it the training context, not padding
    assert predict(ckpt, "dog sat down <eos> a dog barked", top_k=1)[0][0] == "loudly"
    assert len(predict(ckpt, "the cat zebra", top_k=3, oov="bengio")) == 3  # the expected vector of an unknown word
    text = generate(ckpt, "the cat", length=5, temperature=0)
    assert text.startswith("the cat ") and len(text.split()) == 7
    k = module.model.context_size
    result = evaluate(ckpt, split="test", data_dir=str(tmp_path / "data"))
    assert result["tokens"] == 121 - k and result["ppl"] < 10
    mixed = mix(ckpt, "kn3", data_dir=str(tmp_path / "data"))
    assert mixed["test"]["neural"] == pytest.approx(result["ppl"], rel=1e-4)


@pytest.mark.slow  # two training phases
def test_hlbl_on_a_learned_multi_code_tree_from_the_lbls_predicted_representations(run_train, tmp_path):
    """Mnih & Hinton (2009): a first HLBL on a random tree, its predicted representations r_hat averaged
    per word, a tree of recursive mixtures on them (ADAPTIVE(eps) x2: several codes per word), a second
    HLBL trained on it; `predicted_word_vectors` reads any model's features."""
    metrics = run_train(*TOY, *model_overrides("lbl"), "head=hierarchical", "head.node_form=logistic", "tree=learned",
                        "tree.bootstrap=random", "tree.bootstrap_epochs=2", "tree.runs=2", "tree.eps=0.2",
                        "trainer.max_epochs=3")
    tree = json.loads((tmp_path / "run" / "metrics.json").read_text())["tree"]
    assert tree["kind"] == "learned" and tree["codes_per_word"] > 1
    assert metrics["val/ppl"] < UNIFORM


@pytest.mark.slow
def test_a_sweep_over_the_three_models_is_one_compare_table(tmp_path, capsys):
    """`nplm-train -m model=nplm,lbl,modern`: three jobs with the same head, corpus and budget; nplm-compare
    lists them side by side, one row per model."""
    sweep = tmp_path / "sweep"
    result = run_cli(train_main, "-m", "model=nplm,lbl,modern", "corpus=toy", "model.embed_dim=16",
                     "trainer.max_epochs=2", "logger=none", "threads=1", f"hydra.sweep.dir={sweep}",
                     f"paths.data_dir={tmp_path / 'data'}", cwd=tmp_path)
    assert result.code == 0, result.err[-3000:]
    records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/metrics.json"))]
    assert [r["status"] for r in records] == ["finished"] * 3
    capsys.readouterr()
    compare([str(sweep), "--markdown", str(tmp_path / "table.md")])
    printed = capsys.readouterr().out
    lines = (tmp_path / "table.md").read_text().splitlines()
    header, rows = lines[0], lines[2:]
    assert "model" in header and len(rows) == 3
    for name, record in zip(("nplm", "lbl", "modern"), records):
        row = next(r for r in rows if f"| {name} |" in r)
        assert f"{record['metrics']['test/ppl']:.2f}" in row, (row, record["metrics"])
        assert name in printed
