"""Grouped (depthwise) convolutions on CPU, side by side in one process: a depthwise-separable CNN
training step (MobileNet-style blocks) through ``dynajax.compile`` with grouped convolutions computed
by taps (the default on CPU, ``nn._ops.TAPS_MAX``) and with XLA's own grouped convolution, against
PyTorch eager. XLA:CPU runs depthwise convolutions far below its speed on ungrouped ones; the taps
form is a sum of per-tap products that XLA fuses into one loop.

Model: conv 3->32 3x3 + ReLU, then per block a depthwise 3x3 (groups = channels) + BatchNorm + ReLU
and a pointwise 1x1 + ReLU (32->64 at 32x32, 64->128 after a 2x2 max-pool), global average pool,
Linear to 10; batch 32 of 32x32x3, cross-entropy, SGD momentum.

    python benchmarks/depthwise.py [--steps 10] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import numpy as np

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax.nn import _ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_step import _dynajax_runner  # noqa: E402

BATCH, SIZE = 32, 32


def _layers(ns):
    def block(c_in, c_out):
        return [ns.Conv2d(c_in, c_in, 3, padding=1, groups=c_in), ns.BatchNorm2d(c_in), ns.ReLU(),
                ns.Conv2d(c_in, c_out, 1), ns.ReLU()]
    return ns.Sequential(ns.Conv2d(3, 32, 3, padding=1), ns.ReLU(), *block(32, 64), ns.MaxPool2d(2),
                         *block(64, 128), ns.AdaptiveAvgPool2d(1), ns.Flatten(), ns.Linear(128, 10))


def _data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((BATCH, 3, SIZE, SIZE)).astype(np.float32), rng.integers(0, 10, BATCH)


def dynajax_runner(taps_max: int):
    """A compiled step whose grouped convolutions use taps up to ``taps_max`` (0: XLA's own)."""
    dj.manual_seed(0)
    model = _layers(nn)
    opt = dj.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run, _ = _dynajax_runner(model, opt, F.cross_entropy, *_data(), compiled=True, donate=True)
    keep, _ops.TAPS_MAX = _ops.TAPS_MAX, taps_max
    try:
        for _ in range(2):   # traced (and compiled) with this setting: the first graph and the steady one
            jax.block_until_ready(run())
    finally:
        _ops.TAPS_MAX = keep
    return lambda: jax.block_until_ready(run())


def torch_runner():
    import torch
    torch.manual_seed(0)
    model = _layers(torch.nn)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = map(torch.from_numpy, _data())

    def run():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return run


def measure(steps: int = 10, rounds: int = 5) -> dict:
    runs = {"dynajax compiled, taps": dynajax_runner(_ops.TAPS_MAX), "dynajax compiled, XLA grouped conv": dynajax_runner(0)}
    try:
        runs["PyTorch eager"] = torch_runner()
    except ImportError:
        pass
    res = {k: [] for k in runs}
    for _ in range(rounds):
        for k, run in runs.items():   # interleaved rounds: machine noise hits all alike
            run()
            ts = []
            for _ in range(steps):
                t0 = time.perf_counter()
                run()
                ts.append(time.perf_counter() - t0)
            res[k].append(statistics.median(ts) * 1e3)
    return {k: statistics.median(v) for k, v in res.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    ms = measure(a.steps, a.rounds)
    ref = ms.get("PyTorch eager")
    print(f"depthwise-separable CNN, batch {BATCH} of {SIZE}x{SIZE}x3, SGD momentum; median ms/step of "
          f"{a.rounds} rounds x {a.steps} steps")
    base = ms["dynajax compiled, taps"]
    for k, m in ms.items():
        vs = f"{m / ref:6.2f}x PyTorch" if ref else ""
        print(f"  {k:36s}{m:9.2f}  {m / base:6.2f}x taps  {vs}")


if __name__ == "__main__":
    main()
