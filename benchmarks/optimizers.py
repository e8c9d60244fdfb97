"""Fused optimizer updates, eagerly, side by side in one process: an MLP training step (784-512-512-10,
batch 128, cross-entropy) with each optimizer, updating every parameter group with its fused op (the
default), op by op (the single-tensor update each optimizer keeps as its fallback), and in PyTorch eager.

The fused op is one dispatch per group instead of ~5-15 per parameter; the ratio "op by op / fused" is
what fusing saves in a whole eager step (forward and backward included). Under ``dynajax.compile`` both
forms become one executable, so fusing matters there only for capture time and for speculation (the
fused ops' numbers carry recipes).

    python benchmarks/optimizers.py [--steps 10] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import jax

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_step import SIZES, _data, _dynajax_runner, _time, _torch_runner  # noqa: E402

OPTIMIZERS = [
    ("SGD", dict(lr=0.01)),
    ("SGD", dict(lr=0.01, momentum=0.9)),
    ("Adam", dict(lr=1e-3)),
    ("AdamW", dict(lr=1e-3, amsgrad=True)),
    ("RMSprop", dict(lr=1e-3, momentum=0.9)),
    ("Adagrad", dict(lr=0.01)),
    ("Adadelta", dict(lr=1.0)),
    ("Adamax", dict(lr=1e-3)),
    ("NAdam", dict(lr=1e-3)),
    ("RAdam", dict(lr=1e-3)),
]


def _op_by_op(cls):
    """``cls`` updating each parameter with its single-tensor rule (no fused op)."""
    class OpByOp(cls):
        def _update_group(self, items, group) -> None:
            for p, grad, state in items:
                self._update(p, grad, state, group)
    return OpByOp


def _layers(ns):
    layers = []
    for i, (a, b) in enumerate(zip(SIZES, SIZES[1:])):
        layers += [ns.Linear(a, b)] + ([ns.ReLU()] if i < len(SIZES) - 2 else [])
    return ns.Sequential(*layers)


def dynajax_runner(name: str, kwargs: dict, fused: bool):
    dj.manual_seed(0)
    model = _layers(nn)
    cls = getattr(dj.optim, name)
    opt = (cls if fused else _op_by_op(cls))(model.parameters(), **kwargs)
    run, _ = _dynajax_runner(model, opt, F.cross_entropy, *_data(), compiled=False, donate=True)
    return lambda: jax.block_until_ready(run())


def torch_runner(name: str, kwargs: dict):
    import torch
    torch.manual_seed(0)
    model = _layers(torch.nn)
    opt = getattr(torch.optim, name)(model.parameters(), **kwargs)
    run = _torch_runner(model, opt, torch.nn.functional.cross_entropy, *map(torch.from_numpy, _data()))
    return lambda: run().item()


def measure(name: str, kwargs: dict, steps: int, rounds: int) -> dict:
    runs = {"dynajax eager, fused": dynajax_runner(name, kwargs, True),
            "dynajax eager, op by op": dynajax_runner(name, kwargs, False)}
    try:
        runs["PyTorch eager"] = torch_runner(name, kwargs)
    except ImportError:
        pass
    for run in runs.values():   # warm up (kernels compile, state is made)
        for _ in range(3):
            run()
    times = {k: [] for k in runs}
    for _ in range(rounds):   # interleaved rounds: machine noise hits all alike
        for k, run in runs.items():
            times[k].append(_time(run, steps, lambda r: r))   # (each runner waits for its step)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    for name, kwargs in OPTIMIZERS:
        ms = measure(name, kwargs, a.steps, a.rounds)
        fused = ms["dynajax eager, fused"]
        args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        print(f"{name}({args}); eager MLP {'-'.join(map(str, SIZES))} training step, batch 128, median ms/step "
              f"of {a.rounds} rounds x {a.steps} steps")
        for k, v in ms.items():
            print(f"  {k:26s} {v:8.2f}    {v / fused:5.2f}x fused")


if __name__ == "__main__":
    main()
