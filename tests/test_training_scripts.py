"""Smoke tests of the complete training scripts in examples/: a few steps each, the metric moves the right way,
the checkpoint is written where asked, and two steps after reloading it match two steps without stopping."""
import math

import pytest
from test_examples import load


def _resumed_exactly(r: dict) -> bool:
    return all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) for a, b in zip(r["continued"], r["resumed"]))


def test_mnist_like_classifier_learns_and_resumes(tmp_path):
    r = load("mnist_like_classifier").main(steps=30, checkpoint_dir=str(tmp_path), batch=32, test_size=32,
                                           verbose=False)
    assert r["loss_after"] < r["loss_before"] - 0.3
    assert r["accuracy"] > r["accuracy_before"] + 0.15
    assert (tmp_path / "mnist_like_classifier.ckpt").exists() and _resumed_exactly(r)


def test_lstm_language_model_perplexity_falls_and_resumes(tmp_path):
    r = load("lstm_language_model").main(steps=15, checkpoint_dir=str(tmp_path), batch=16, length=8,
                                         test_size=16, verbose=False)
    assert r["perplexity_after"] < 0.7 * r["perplexity_before"]
    assert (tmp_path / "lstm_language_model.ckpt").exists() and _resumed_exactly(r)


def test_vae_elbo_rises_and_resumes(tmp_path):
    r = load("vae").main(steps=30, checkpoint_dir=str(tmp_path), batch=32, test_size=32, verbose=False)
    assert r["elbo_after"] > r["elbo_before"] + 5
    assert (tmp_path / "vae.ckpt").exists() and _resumed_exactly(r)


def test_training_scripts_help_and_bad_steps(capsys):
    for name in ["mnist_like_classifier", "lstm_language_model", "vae"]:
        ex = load(name)
        with pytest.raises(SystemExit) as info:
            ex.parse_args(["--help"])
        assert info.value.code == 0 and "--checkpoint-dir" in capsys.readouterr().out
        with pytest.raises(SystemExit) as info:
            ex.parse_args(["--steps", "0"])
        assert "--steps must be a positive integer" in str(info.value.code)
