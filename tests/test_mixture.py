"""Neural + n-gram mixtures (`nplm.inference.mixture`, `nplm-mix`): EM weight, exact endpoints, end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nplm.training.checkpoint import load_model
from nplm.data.datamodule import LMDataModule
from nplm.errors import UserError
from nplm.cli.mix import main
from nplm.inference.mixture import (build_ngram, fit_mixture_weight, mix, mix_log_probs, neural_log_probs,
                                   perplexity)
from nplm.ngram import DeletedInterpolationTrigram, KneserNey, split_context
from nplm.training.train import train

from conftest import compose_cfg, make_fake_brown


def two_distributions(seed: int = 0, k: int = 20) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(k, 0.3)), rng.dirichlet(np.full(k, 0.3))  # [k], [k]


def sample_mixture(w: float, n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """ln p_a(x), ln p_b(x) `[n]` for x drawn from w p_a + (1 - w) p_b."""
    p_a, p_b = two_distributions()
    rng = np.random.default_rng(seed)
    from_a = rng.random(n) < w
    x = np.where(from_a, rng.choice(len(p_a), n, p=p_a), rng.choice(len(p_b), n, p=p_b))  # [n]
    return np.log(p_a[x]), np.log(p_b[x])


@pytest.mark.parametrize("w_true", [0.3, 0.7])
def test_em_recovers_the_weight_of_a_known_mixture(w_true):
    log_a, log_b = sample_mixture(w_true, 20_000)
    w = fit_mixture_weight(log_a, log_b)
    assert abs(w - w_true) < 0.05
    # EM is at the maximum of the (concave) log-likelihood: nearby weights are no better
    ll = lambda v: mix_log_probs(log_a, log_b, v).sum()  # noqa: E731
    assert ll(w) >= max(ll(w - 0.01), ll(w + 0.01))


def test_weights_one_and_zero_return_the_components_exactly():
    log_a, log_b = sample_mixture(0.3, 1000)
    assert np.array_equal(mix_log_probs(log_a, log_b, 1.0), log_a)
    assert np.array_equal(mix_log_probs(log_a, log_b, 0.0), log_b)
    assert np.array_equal(mix_log_probs(log_a, log_b, 1), log_a)
    # a component that gives a token probability 0 is fine as long as the other does not
    a = np.array([-np.inf, -1.0])
    assert np.isfinite(mix_log_probs(a, np.array([-2.0, -3.0]), 0.5)).all()
    assert 0 < fit_mixture_weight(a, np.array([-2.0, -3.0])) < 1
    with pytest.raises(UserError, match=r"weight 1.5 must be a number in \[0, 1\]"):
        mix_log_probs(log_a, log_b, 1.5)
    with pytest.raises(ValueError, match="different tokens"):
        mix_log_probs(log_a, log_b[:-1], 0.5)


def test_mixture_is_never_worse_than_the_worse_component_and_em_beats_half_half():
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(1, 500))
        log_a = np.log(rng.random(n)) * rng.uniform(0.1, 5)  # [n] arbitrary per-token log-probs
        log_b = np.log(rng.random(n)) * rng.uniform(0.1, 5)
        worse = max(perplexity(log_a), perplexity(log_b))
        for w in np.linspace(0, 1, 11):
            assert perplexity(mix_log_probs(log_a, log_b, w)) <= worse * (1 + 1e-12)
        w_em = fit_mixture_weight(log_a, log_b)
        assert 0 <= w_em <= 1
        half = perplexity(mix_log_probs(log_a, log_b, 0.5))
        assert perplexity(mix_log_probs(log_a, log_b, w_em)) <= half * (1 + 1e-12)


def test_perplexity_is_exp_of_the_mean_nll():
    assert perplexity(np.log([0.5, 0.125])) == pytest.approx(4.0)
    assert perplexity(np.full(3, -math.log(7))) == pytest.approx(7.0)


# -- end to end on trained checkpoints ------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory, toy_run):
    """Two tiny trained runs: the toy corpus (splits not contiguous: the shared `toy_run`) and a fake Brown
    (contiguous)."""
    brown = tmp_path_factory.mktemp("brown")
    nltk_data = make_fake_brown(brown)
    brown_cfg = compose_cfg(brown, "corpus=brown", f"corpus.nltk_data={nltk_data}", "corpus.download=false",
                            "corpus.train_size=0.8", "corpus.valid_size=0.1", "corpus.min_count=1",
                            "model.context_size=2", "model.embed_dim=8", "model.hidden_dim=8",
                            "trainer.max_epochs=1")
    train(brown_cfg)
    return {"toy": (toy_run.folder, toy_run.data_dir), "brown": (brown / "run", str(brown / "data"))}


def rebuilt_datamodule(ckpt, data_dir):
    module = load_model(ckpt)
    dm = LMDataModule(module.hparams["data"]["corpus"], module.model.context_size, 1, 1024,
                      data_dir=data_dir, vocab=module.vocab)
    dm.setup()
    return module, dm


def best_checkpoint(run):
    record = json.loads((run / "metrics.json").read_text())
    return record["best_checkpoint"], record["metrics"]


@pytest.mark.slow  # over 2 s: trains, compiles or composes many configs (make test-fast stays fast)
def test_mix_a_trained_toy_model_with_kn3(runs):
    run, data_dir = runs["toy"]
    ckpt, metrics = best_checkpoint(run)
    result = mix(ckpt, "kn3", data_dir=data_dir)
    module, dm = rebuilt_datamodule(ckpt, data_dir)
    k = module.model.context_size
    for split in ("valid", "test"):  # toy splits are not contiguous: the first k tokens are only context
        assert result["tokens"][split] == dm.stats[split].predicted == len(dm.ids[split]) - k
    assert result["test"]["neural"] == pytest.approx(metrics["test/ppl"], rel=1e-4)
    kn = KneserNey(3).fit(dm.ids["train"], len(dm.vocab))
    assert result["test"]["ngram"] == pytest.approx(math.exp(-kn.score(dm.ids["test"])[k:].mean()), rel=1e-12)
    assert result["weights"]["fixed"] == 0.5 and 0 <= result["weights"]["em"] <= 1
    for split in ("valid", "test"):
        row = result[split]
        assert row["mix_fixed"] <= max(row["neural"], row["ngram"]) * (1 + 1e-12)
    assert result["valid"]["mix_em"] <= result["valid"]["mix_fixed"] * (1 + 1e-12)
    # the per-token neural scores are the module's own NLLs
    lp = neural_log_probs(module, dm.windows["test"], batch_size=7)
    assert lp.shape == (result["tokens"]["test"],) and lp.dtype == np.float64
    assert perplexity(lp) == pytest.approx(result["test"]["neural"], rel=1e-9)
    # the frequency bands cover every token once and their differences add up to ln(ppl_nn / ppl_ngram)
    bands = result["test"]["by_train_count"]
    assert sum(b["share"] for b in bands) == pytest.approx(1.0)
    assert sum(b["log_ppl_difference"] for b in bands) == pytest.approx(
        math.log(result["test"]["neural"] / result["test"]["ngram"]), rel=1e-9)


def test_mix_on_a_contiguous_corpus_scores_every_token_with_the_same_history(runs):
    run, data_dir = runs["brown"]
    ckpt, metrics = best_checkpoint(run)
    module, dm = rebuilt_datamodule(ckpt, data_dir)
    for spec in ("kn4", "interpolated-trigram"):
        result = mix(ckpt, spec, weight=None, data_dir=data_dir)
        assert result["tokens"] == {split: len(dm.ids[split]) for split in ("valid", "test")}
        assert result["test"]["neural"] == pytest.approx(metrics["test/ppl"], rel=1e-4)
        assert result["weights"]["fixed"] is None and "mix_fixed" not in result["valid"]
    # kn4 with context_size 2: the n-gram history reaches 3 tokens into the previous split
    kn = KneserNey(4).fit(dm.ids["train"], len(dm.vocab))
    result = mix(ckpt, "kn4", data_dir=data_dir)
    assert result["valid"]["ngram"] == pytest.approx(kn.perplexity(dm.ids["valid"], split_context(dm, "valid", 4)))
    assert result["test"]["ngram"] == pytest.approx(kn.perplexity(dm.ids["test"], split_context(dm, "test", 4)))
    trigram = build_ngram("interpolated-trigram", dm)
    reference = DeletedInterpolationTrigram().fit(dm.ids["train"], dm.ids["valid"], len(dm.vocab),
                                                  valid_prefix=split_context(dm, "valid", 3))
    assert np.allclose(trigram.lambdas, reference.lambdas)
    assert isinstance(build_ngram("kn3-backoff", dm), KneserNey) and not build_ngram("kn3-backoff", dm).interpolate
    assert build_ngram("kn3-backoff", dm).min_counts == (1, 1, 1)
    srilm = build_ngram("KN3-backoff-srilm", dm)  # SRILM ngram-count's default cutoffs
    assert isinstance(srilm, KneserNey) and not srilm.interpolate and srilm.min_counts == (1, 1, 2)


def test_cli_prints_a_table_writes_json_and_rejects_user_mistakes(runs, tmp_path, capsys):
    run, data_dir = runs["toy"]
    ckpt, _ = best_checkpoint(run)
    out = tmp_path / "mix" / "result.json"
    main([ckpt, "--ngram", "kn2", "--weight", "0.25", "--json", str(out), "--data-dir", data_dir])
    table = capsys.readouterr().out
    assert "mix w=0.25" in table and "valid" in table and "test" in table
    saved = json.loads(out.read_text())
    assert saved["ngram"] == "kn2" and saved["weights"]["fixed"] == 0.25
    for argv, message in [([ckpt, "--ngram", "kn9"], "--ngram=kn9: must be one of: interpolated-trigram, kn1"),
                          ([ckpt, "--ngram", "trigram"], "--ngram=trigram: must be one of"),
                          ([ckpt, "--weight", "1.5"], "--weight=1.5: must be a finite number in [0, 1]"),
                          ([str(tmp_path / "missing.ckpt")], "does not exist")]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv + ["--data-dir", data_dir])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
