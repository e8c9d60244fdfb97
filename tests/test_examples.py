"""Smoke tests of examples/: each runs a shortened version and its metric must move the right way."""
import importlib.util
import pathlib
import sys

import pytest
from helpers import unavailable_device

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
TRAINING = ["rnn_variable_length", "adaptive_depth", "tree_lstm", "mixture_of_experts"]


def load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))   # the examples import their shared _cli.py, as when run as scripts
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rnn_variable_length_learns():
    r = load("rnn_variable_length").main(steps=8, batch=4, test_size=16, verbose=False)
    assert r["loss_after"] < r["loss_before"] - 0.02


def test_adaptive_depth_learns_and_varies_depth():
    ex = load("adaptive_depth")
    r = ex.main(steps=10, batch=8, test_size=32, verbose=False)
    assert r["loss_after"] < r["loss_before"] - 0.05
    assert r["accuracy"] > 0.5  # chance
    assert 1 <= r["mean_depth"] <= 6


def test_adaptive_depth_halting_decides_depth():
    import dynajax as dj
    dj.manual_seed(0)
    model = load("adaptive_depth").AdaptiveDepthNet(max_depth=3)
    x = dj.tensor([[0.5, -0.5]])
    model.threshold = 0.99          # halting probabilities start near 0.5: more than one layer runs
    _, depth, remainder = model(x)
    assert depth > 1 and 0 < remainder.item() < 1
    model.threshold = 0.0           # halts after the first layer with the whole weight
    _, depth, remainder = model(x)
    assert depth == 1 and remainder == 1


def test_tree_lstm_learns():
    ex = load("tree_lstm")
    assert ex.value(("-", ("+", 3, 4), 9)) == -2 and ex.show(("-", 1, 2)) == "(1 - 2)"
    r = ex.main(steps=10, batch=8, test_size=16, verbose=False)
    assert r["loss_after"] < r["loss_before"] * 0.8


def test_mixture_of_experts_learns():
    r = load("mixture_of_experts").main(steps=20, batch=16, test_size=32, verbose=False)
    assert r["loss_after"] < r["loss_before"] - 0.05 and r["accuracy"] > 0.5
    assert sum(r["usage"]) == 2 * 32  # top-2 routing: two experts per example


def test_graph_visualization_graphs_differ(tmp_path):
    r = load("graph_visualization").main(out=str(tmp_path), verbose=False)
    short, long = r["ops"]["short_positive"], r["ops"]["long_negative"]
    assert len(long) > len(short) and short.count("tanh") == 2 and long.count("tanh") == 4
    dots = sorted(p.name for p in tmp_path.glob("*.dot"))
    assert dots == ["long_negative.dot", "short_positive.dot"]
    assert (tmp_path / "short_positive.dot").read_text().startswith("digraph")


@pytest.mark.parametrize("name", TRAINING + ["graph_visualization"])
def test_help_and_bad_flags(name, capsys):
    ex = load(name)
    with pytest.raises(SystemExit) as e:
        ex.parse_args(["--help"])
    assert e.value.code == 0 and "usage" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        ex.parse_args(["--device", unavailable_device()])
    assert e.value.code and "available" in str(e.value.code) and "\n" not in str(e.value.code)
    if name in TRAINING:
        with pytest.raises(SystemExit) as e:
            ex.parse_args(["--steps", "-3"])
        assert "--steps must be a positive integer, got -3" in str(e.value.code)
        assert ex.parse_args(["--steps", "5"]).steps == 5
