"""The cost of ``dynajax.compile``'s device-side index checks (``check_indices=True``, the default;
``compile.checks``), side by side in one process: the same training steps compiled with and without them,
timed in alternating pairs.

Workloads: benchmarks/compile_step.py's MLP (cross-entropy targets checked), CNN (cross-entropy) and LSTM
language model (embedding indices and cross-entropy targets checked). On a CPU, these index tensors are the
step's arguments (the LSTM's targets reshaped in the step), read on the host at each call, so the checked
executable is the unchecked one. Elsewhere (an accelerator, or indices computed in the step) each step also
computes a min/max per index tensor, a report, and a select per state tensor (parameters, optimizer state,
buffers, the RNG key), or one cond around the updates, and leaves the report pending until the next call
reads it.

    python benchmarks/index_checks.py [--steps 5] [--rounds 100] [--only mlp cnn lstm]

Prints, per workload, the median ms/step of each (a step waited for, and steps back to back with one wait
at the end) and the median ratio checked / unchecked within time-neighbouring pairs.
"""
from __future__ import annotations

import argparse
import statistics

import jax
from compile_step import WARM, WORKLOADS, _time, _time_pipelined

KEYS = ("mlp", "cnn", "lstm")


def measure(w, steps: int, rounds: int) -> dict:
    """Paired timings: each pair runs one waited step of each build, then ``steps`` back-to-back steps of each,
    in alternating order; the ratio is taken within a pair (neighbours in time), so the load other processes
    put on the machine cancels out of it, and the median over ``rounds`` pairs is reported."""
    block = jax.block_until_ready
    runs = {flag: w.dynajax(True, True, check_indices=flag) for flag in (True, False)}
    for run, _ in runs.values():   # compile, warm up (and let the default's settling happen)
        for _ in range(WARM + 5):
            block(run())
    ops = {flag: fn.stats.recorded_ops for flag, (_, fn) in runs.items()}
    waited = {flag: [] for flag in runs}
    piped = {flag: [] for flag in runs}
    ratios, piped_ratios = [], []
    for i in range(rounds):
        for flag in ((True, False) if i % 2 else (False, True)):
            run = runs[flag][0]
            waited[flag].append(_time(run, 1, block))
            piped[flag].append(_time_pipelined(run, steps, block))
        ratios.append(waited[True][-1] / waited[False][-1])
        piped_ratios.append(piped[True][-1] / piped[False][-1])
    return {"ms": {f: statistics.median(v) for f, v in waited.items()},
            "piped": {f: statistics.median(v) for f, v in piped.items()}, "ops": ops,
            "ratio": statistics.median(ratios), "piped_ratio": statistics.median(piped_ratios)}


def pairs(steps: int = 5, rounds: int = 100, only=None) -> list:
    """(workload, measure's result) per workload; a program for run_all (its output is kept verbatim)."""
    rows = []
    for w in WORKLOADS:
        if w.key not in (only or KEYS):
            continue
        r = measure(w, steps, rounds)
        rows.append((w, r))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--only", nargs="+", choices=KEYS)
    a = ap.parse_args()
    print(f"JAX on {jax.devices()[0].device_kind} ({jax.default_backend()}); {a.rounds} pairs: one waited step "
          f"and {a.steps} back-to-back steps of each build, alternating; medians (ms/step), ratio within pairs\n")
    print(f"{'workload':48s}{'checked':>9s}{'unchecked':>10s}{'ratio':>7s}   back to back: checked, unchecked, ratio")
    for w, r in pairs(a.steps, a.rounds, a.only):
        on, off = r["ms"][True], r["ms"][False]
        pon, poff = r["piped"][True], r["piped"][False]
        print(f"{w.title[:46]:48s}{on:9.3f}{off:10.3f}{r['ratio']:7.3f}   {pon:.3f}, {poff:.3f}, {r['piped_ratio']:.3f}"
              f"   (recorded ops {r['ops'][True]} vs {r['ops'][False]})")


if __name__ == "__main__":
    main()
