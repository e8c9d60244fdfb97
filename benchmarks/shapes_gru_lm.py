"""Shapes that vary, plain ``dynajax.compile(step)``: a 200-step language model written as a Python loop over
``nn.GRUCell`` (embedding 64, hidden 128, vocab 100, batch 32, lengths drawn from 10..50, Adam), total wall
time including compiles, against PyTorch eager on the same batches, side by side in one process.

No options: the automatic policy pads the length (a dim that changed between calls) to geometric buckets,
with exact results (``compile.padding``). Target (issue 33): at most 1.3x PyTorch eager in a first run,
1.0x in a second process (warm on-disk compile cache).

    python benchmarks/shapes_gru_lm.py [--steps 200]
"""
from __future__ import annotations

import time

import numpy as np

E, H, V, B = 64, 128, 100, 32


def batches(steps: int, seed: int = 0):
    r = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        t = int(r.integers(10, 51))
        tok = r.integers(0, V, (B, t + 1))
        out.append((tok[:, :-1].copy(), tok[:, 1:].copy()))
    return out


def run_dynajax(data):
    import dynajax as dj
    import dynajax.nn as nn
    import dynajax.nn.functional as F

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.cell, self.head = nn.Embedding(V, E), nn.GRUCell(E, H), nn.Linear(H, V)

        def forward(self, x):
            e = self.emb(x)
            h = dj.zeros(x.shape[0], H)
            outs = []
            for t in range(x.shape[1]):
                h = self.cell(e[:, t], h)
                outs.append(h)
            return self.head(dj.stack(outs, 1))

    dj.manual_seed(0)
    model = LM()
    opt = dj.optim.Adam(model.parameters(), lr=1e-3)

    @dj.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
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
    emb, cell, head = nn.Embedding(V, E), nn.GRUCell(E, H), nn.Linear(H, V)
    params = [*emb.parameters(), *cell.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    t0 = time.perf_counter()
    for x, y in data:
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        opt.zero_grad()
        e = emb(x)
        h = torch.zeros(x.shape[0], H)
        outs = []
        for t in range(x.shape[1]):
            h = cell(e[:, t], h)
            outs.append(h)
        loss = F.cross_entropy(head(torch.stack(outs, 1)).reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
    loss.item()
    return time.perf_counter() - t0


if __name__ == "__main__":
    from _first_run import main
    main("GRUCell-loop LM, lengths 10..50", 1.3, 1.0, 200, batches, run_torch, run_dynajax)
