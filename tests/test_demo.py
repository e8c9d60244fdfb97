"""``python -m dynajax.demo``: flags, the status line, and a shortened run's report."""
import io
import subprocess
import sys

import numpy as np
import pytest

import dynajax as dj
from dynajax import demo
from helpers import unavailable_device


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_help_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "dynajax.demo", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--steps" in proc.stdout and "--device" in proc.stdout


@pytest.mark.parametrize("argv, message", [(["--steps", "-1"], "--steps must be a positive integer, got -1"),
                                           (["--device", unavailable_device()], "available"),
                                           (["--device", "abacus"], "device type")])
def test_bad_flags_exit_with_one_line(argv, message, capsys):
    assert demo.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_status_line_in_place_on_a_terminal_plain_lines_otherwise():
    tty, plain = _Terminal(), io.StringIO()
    for out in (tty, plain):
        status = demo.Status(out, 8)
        for i in range(1, 9):
            status.update("eager", i, 0.5)
        status.done()
    assert tty.getvalue().count("\r") >= 8 and "\n" not in tty.getvalue()
    assert plain.getvalue().count("\n") == 4 and "\r" not in plain.getvalue()


def test_batches_have_one_length_each_and_majority_labels():
    batches = demo.make_batches(5, 4, lengths=(3, 6), seed=1)
    for tokens, labels in batches:
        assert tokens.shape[0] == 4 and tokens.shape[1] in (3, 6)
        np.testing.assert_array_equal(labels, (tokens == 0).sum(1) > (tokens == 1).sum(1))


def test_short_run_reports_both_phases_and_the_cross_check():
    out = io.StringIO()
    r = demo.run(steps=5, batch=8, lengths=(3, 6), out=out)
    text = out.getvalue()
    eager = r["eager"]
    assert eager.graphs == 2 and len(eager.losses) == 5 and all(np.isfinite(eager.losses))
    assert r["max_grad_error"] < 1e-5 and "agree, max abs error" in text
    if not hasattr(dj, "compile"):
        assert "compiled phase: unavailable" in text
        return
    compiled = r["compiled"]
    assert compiled.stats.compiles >= 2 and compiled.stats.cache_hits >= 1
    assert r["loss_gap"] < 1e-4   # same batches, same weights: the same losses
    assert "compiled vs eager" in text and "x the steps/s warm" in text
    assert r["replayed"].stats.compiles >= 2 and r["replay_loss_gap"] < 1e-4 and "replayed vs compiled" in text


def test_a_repeated_length_is_replayed():
    """One sequence length: the replayed phase records the first three calls (the first makes Adam's
    moments, the next two agree) and replays the rest, with eager's losses."""
    r = demo.run(steps=6, batch=8, lengths=(4,), out=io.StringIO())
    assert r["replayed"].stats.replayed == 3 and r["replay_loss_gap"] < 1e-5
    np.testing.assert_allclose(r["replayed"].losses, r["eager"].losses, rtol=1e-5)
