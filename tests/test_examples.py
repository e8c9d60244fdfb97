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


# ---------------------------------------------------------------- every example's command line
ALL = sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_"))


def run_main(name: str, argv: list, monkeypatch, capsys) -> str:
    """Run examples/<name>.py as ``python <name>.py argv...`` would, in this process; its stdout."""
    import runpy
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr(sys, "argv", [f"{name}.py"] + argv)
    runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")
    return capsys.readouterr().out


@pytest.mark.parametrize("name", ALL)
def test_every_example_takes_help_and_steps(name, capsys):
    ex = load(name)
    with pytest.raises(SystemExit) as e:
        ex.parse_args(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage:") and "--steps" in out
    if name != "data_parallel":   # (its default --simulate needs a fresh process: tested below)
        assert ex.parse_args(["--steps", "2"]).steps == 2


def test_quickstart_from_the_command_line(monkeypatch, capsys):
    out = run_main("quickstart", ["--steps", "3"], monkeypatch, capsys).splitlines()
    assert out[0] == "tensor(1.)" and out[1] == "jax.grad of the lowered graph: 1.0"
    tape = [float(v) for v in out[3].split(":")[1].split("->")]
    lowered = [float(v) for v in out[4].split(":")[1].split("->")]
    assert tape == lowered and tape[1] < tape[0]   # the tape and jax.grad take the same steps


def test_quickstart_uses_only_public_api():
    src = (EXAMPLES / "quickstart.py").read_text()
    assert "._" not in src.replace("__doc__", "") and "except" not in src and "pass" not in src.split()


def test_static_vs_dynamic_from_the_command_line(monkeypatch, capsys):
    out = run_main("static_vs_dynamic", ["--steps", "2"], monkeypatch, capsys)
    grads = [ln.split(":", 1)[1].strip() for ln in out.splitlines() if "dx = " in ln]
    assert len(grads) == 2 and grads[0] == grads[1] == "dx = [1.0, 1.0, 1.0]  dy = [1.0, 1.0, 1.0]"
    assert "per call (2 calls)" in out


def test_graph_visualization_from_the_command_line(monkeypatch, capsys, tmp_path):
    out = run_main("graph_visualization", ["--steps", "2", "--out", str(tmp_path)], monkeypatch, capsys)
    before, after = out.splitlines()[0].split("loss ")[1].split(" -> ")
    assert out.startswith("2 SGD steps on both inputs") and float(after) < float(before)
    assert (tmp_path / "long_negative.dot").exists()
    r = load("graph_visualization").main(out=str(tmp_path), verbose=False, steps=5)
    assert len(r["losses"]) == 5 and r["losses"][-1] < r["losses"][0]


def test_data_parallel_default_run_compares_one_device_with_four():
    """Run as a script with no --simulate: it splits the CPU into 4 devices itself (XLA_FLAGS before JAX starts)."""
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, str(EXAMPLES / "data_parallel.py"), "--steps", "2", "--batch", "32"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=EXAMPLES.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3 and all("1 device: loss" in ln and "4 devices: loss" in ln for ln in lines[:2])
    assert "throughput ratio 4/1 = " in lines[-1]
    assert float(lines[-1].split("largest loss difference ")[1]) < 1e-5
