"""Shapes that vary, plain ``dynajax.compile(step)``: an MLP 784-512-512-10 Adam step over 600 batches whose
sizes are drawn from 1..256, total wall time including compiles, against PyTorch eager on the same batches,
side by side in one process. Target (issue 33): at most 1.5x PyTorch eager in a first run, 1.1x in a
second process (warm on-disk compile cache).

    python benchmarks/shapes_mlp_batches.py [--steps 600]
"""
from __future__ import annotations

import time

import numpy as np


def batches(steps: int, seed: int = 0):
    r = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        n = int(r.integers(1, 257))
        out.append((r.standard_normal((n, 784)).astype(np.float32), r.integers(0, 10, n)))
    return out


def run_dynajax(data):
    import dynajax as dj
    import dynajax.nn as nn
    import dynajax.nn.functional as F
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = dj.optim.Adam(model.parameters(), lr=1e-3)

    @dj.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    t0 = time.perf_counter()
    for x, y in data:
        loss = step(dj.tensor(x), dj.tensor(y))
    loss.item()
    return time.perf_counter() - t0, step.stats


def run_torch(data):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
    loss.item()
    return time.perf_counter() - t0


if __name__ == "__main__":
    from _first_run import main
    main("MLP 784-512-512-10 Adam, batch sizes 1..256", 1.5, 1.1, 600, batches, run_torch, run_dynajax)
