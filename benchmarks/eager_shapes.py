"""Eager mode on shapes that keep changing: dynajax eager vs PyTorch eager, side by side in one process.

Two workloads, the same batches for both contenders (issue 33's eager targets):

- GRU language model written as a Python loop over ``GRUCell``: embedding 64, hidden 128, vocab 100,
  batch 32, lengths drawn from 10..50, 200 steps, cross-entropy over every position, Adam;
- MLP 784-512-512-10, Adam, cross-entropy, 600 batches whose sizes are drawn from 1..256.

Each new length or batch size is a new input shape for every eager op. The totals include every compile
dynajax pays for them (the eager kernels; what the on-disk kernel cache saves). The default run is a
first run: it points dynajax's kernel cache at a new empty folder, times both workloads, then starts this
script again in a second process on the now warm folder (``--second-run``) and prints both.

    python benchmarks/eager_shapes.py [--gru-steps 200] [--mlp-steps 600] [--only gru mlp]
    python benchmarks/eager_shapes.py --second-run --cache-dir DIR    # one process on DIR as it is
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

VOCAB, EMBED, HIDDEN, BATCH, LO, HI = 100, 64, 128, 32, 10, 50
SIZES, MLP_MAX = (784, 512, 512, 10), 256
LR = 1e-3


def gru_batches(steps: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        seq = rng.integers(0, VOCAB, (int(rng.integers(LO, HI + 1)) + 1, BATCH))
        out.append((seq[:-1].astype(np.int64), seq[1:].astype(np.int64)))
    return out


def mlp_batches(steps: int, seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        n = int(rng.integers(1, MLP_MAX + 1))
        out.append((rng.standard_normal((n, SIZES[0])).astype(np.float32), rng.integers(0, SIZES[-1], n)))
    return out


def _start(lib, params: list, init) -> None:
    """Both libraries start from the same weights (``init``: numpy arrays in ``params``' order)."""
    with lib.no_grad():
        for p, a in zip(params, init):
            p.copy_(lib.tensor(a))


def _gru_run(lib, data, init) -> tuple:
    """Seconds and losses of the GRUCell-loop LM on ``data``, written once for dynajax and torch (``lib``)."""
    nn, F = lib.nn, lib.nn.functional
    emb, cell, head = nn.Embedding(VOCAB, EMBED), nn.GRUCell(EMBED, HIDDEN), nn.Linear(HIDDEN, VOCAB)
    params = [*emb.parameters(), *cell.parameters(), *head.parameters()]
    _start(lib, params, init)
    opt = lib.optim.Adam(params, lr=LR)
    losses = []
    t0 = time.perf_counter()
    for tok, tgt in data:
        opt.zero_grad()
        x = emb(lib.tensor(tok))
        h, hs = lib.zeros(BATCH, HIDDEN), []
        for xt in x.unbind(0):
            h = cell(xt, h)
            hs.append(h)
        loss = F.cross_entropy(head(lib.stack(hs)).reshape(-1, VOCAB), lib.tensor(tgt).reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    losses = [float(v) for v in losses]   # waits for the last step
    return time.perf_counter() - t0, losses


def _mlp_run(lib, data, init) -> tuple:
    nn, F = lib.nn, lib.nn.functional
    model = nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.ReLU(), nn.Linear(SIZES[1], SIZES[2]), nn.ReLU(),
                          nn.Linear(SIZES[2], SIZES[3]))
    _start(lib, list(model.parameters()), init)
    opt = lib.optim.Adam(model.parameters(), lr=LR)
    losses = []
    t0 = time.perf_counter()
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(lib.tensor(x)), lib.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    losses = [float(v) for v in losses]
    return time.perf_counter() - t0, losses


def _init(shapes, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-1, 1, s) / np.sqrt(s[-1])).astype(np.float32) for s in shapes]


GRU_SHAPES = [(VOCAB, EMBED), (3 * HIDDEN, EMBED), (3 * HIDDEN, HIDDEN), (3 * HIDDEN,), (3 * HIDDEN,),
              (VOCAB, HIDDEN), (VOCAB,)]
MLP_SHAPES = [s for i, o in zip(SIZES, SIZES[1:]) for s in ((o, i), (o,))]
WORKLOADS = {"gru": (_gru_run, gru_batches, GRU_SHAPES), "mlp": (_mlp_run, mlp_batches, MLP_SHAPES)}


def measure(only, steps: dict, torch_too: bool = True) -> dict:
    """{workload: {"dynajax": s, "torch": s, "compiles": n, "loads": n, "max_loss_diff": d}}, one process."""
    import jax

    import dynajax as dj
    from dynajax import _kernel_cache
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, *a, **k: compiles.append(1) if name.endswith("backend_compile_duration") else None)
    try:
        import torch
        torch.set_num_threads(1)   # this machine is shared: PyTorch's thread pool is slower here than 1 thread
    except ImportError:
        torch = None
    res = {}
    for name in only:
        run, make, shapes = WORKLOADS[name]
        data, init = make(steps[name]), _init(shapes, 2)
        n0, l0 = len(compiles), _kernel_cache.stats["kernels_loaded"]
        secs, losses = run(dj, data, init)
        row = {"dynajax": secs, "compiles": len(compiles) - n0, "loads": _kernel_cache.stats["kernels_loaded"] - l0}
        if torch is not None and torch_too:
            tsecs, tlosses = run(torch, data, init)
            row.update(torch=tsecs, max_loss_diff=float(np.max(np.abs(np.subtract(losses, tlosses)))))
        res[name] = row
    return res


def report(title: str, res: dict) -> None:
    print(title)
    for name, r in res.items():
        line = f"  {name}: dynajax eager {r['dynajax']:.2f} s ({r['compiles']} XLA compiles, {r['loads']} kernels from disk)"
        if "torch" in r:
            line += (f", PyTorch eager {r['torch']:.2f} s: {r['dynajax'] / r['torch']:.2f}x"
                     f" (losses agree to {r['max_loss_diff']:.1e})")
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gru-steps", type=int, default=200)
    ap.add_argument("--mlp-steps", type=int, default=600)
    ap.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--second-run", action="store_true", help="one process on --cache-dir as it is")
    ap.add_argument("--cache-dir", help="the kernel cache folder (default: a new temporary one)")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args()
    steps = {"gru": a.gru_steps, "mlp": a.mlp_steps}
    if a.second_run:
        os.environ["DYNAJAX_KERNEL_CACHE"] = a.cache_dir
        res = measure(a.only, steps)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f)
        report("second run (a new process, warm on-disk kernel cache):", res)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.cache_dir or os.path.join(tmp, "kernels")
        os.environ["DYNAJAX_KERNEL_CACHE"] = folder
        report("first run (empty on-disk kernel cache):", measure(a.only, steps))
        sys.stdout.flush()
        # (its output printed from here: benchmarks/run_all.py captures this process's stdout, not the child's)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--second-run", "--cache-dir", folder,
                            "--gru-steps", str(a.gru_steps), "--mlp-steps", str(a.mlp_steps), "--only", *a.only],
                           capture_output=True, text=True, check=False)
        print(p.stdout, end="")
        if p.returncode:
            sys.stderr.write(p.stderr)
            raise SystemExit(f"the second run failed (exit status {p.returncode})")


if __name__ == "__main__":
    main()
