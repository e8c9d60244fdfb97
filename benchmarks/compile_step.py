"""Training-step time, side by side in one process: dynajax eager, dynajax.compile, hand-written jax.jit,
PyTorch eager. MLP 784-512-512-10, batch 128, Adam, cross-entropy.

Prints medians (ms) and ratios to the hand-written jax.jit step; also first-call compile time, the
capture (re-running the Python step) cost per call and per recorded op, and graph breaks per step.
Rounds interleave the contenders so machine noise hits all of them alike.

    python benchmarks/compile_step.py [--steps 30] [--rounds 5] [--no-donate]
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F

SIZES = (784, 512, 512, 10)
BATCH = 128
LR = 1e-3


def _data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((BATCH, SIZES[0])).astype(np.float32), rng.integers(0, SIZES[-1], BATCH)


def dynajax_step(compiled: bool, donate: bool = True):
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = dj.optim.Adam(model.parameters(), lr=LR)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    fn = dj.compile(step, donate=donate) if compiled else step
    xn, yn = _data()
    x, y = dj.tensor(xn), dj.tensor(yn)
    return (lambda: fn(x, y)._value), fn


def jax_step():
    key = jax.random.PRNGKey(0)
    params = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        k1, k2 = jax.random.split(jax.random.fold_in(key, i))
        bound = 1 / np.sqrt(a)
        params.append((jax.random.uniform(k1, (a, b), jnp.float32, -bound, bound),
                       jax.random.uniform(k2, (b,), jnp.float32, -bound, bound)))
    state = (params, jax.tree_util.tree_map(jnp.zeros_like, params), jax.tree_util.tree_map(jnp.zeros_like, params),
             jnp.zeros((), jnp.float32))

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], 1))

    @jax.jit
    def step(state, x, y):
        params, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        lr = LR / (1 - 0.9 ** t)
        c2 = jnp.sqrt(1 - 0.999 ** t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) / c2 + 1e-8), params, m, v)
        return loss, (params, m, v, t)
    xn, yn = _data()
    x, y = jnp.asarray(xn), jnp.asarray(yn)

    def run():
        nonlocal state
        loss, state = step(state, x, y)
        return loss
    return run


def torch_step():
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    xn, yn = _data()
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)

    def run():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return run


def _time(run, steps: int, block) -> float:
    """Median wall time of one step (ms), each step run to completion."""
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        block(run())
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-donate", action="store_true")
    a = ap.parse_args()
    jax_block = jax.block_until_ready
    contenders = {}
    t0 = time.perf_counter()
    comp_run, comp = dynajax_step(True, donate=not a.no_donate)
    jax_block(comp_run())
    first_call = time.perf_counter() - t0
    contenders["dynajax compiled"] = (comp_run, jax_block)
    contenders["jax.jit (hand-written)"] = (jax_step(), jax_block)
    contenders["dynajax eager"] = (dynajax_step(False)[0], jax_block)
    try:
        contenders["PyTorch eager"] = (torch_step(), lambda r: r.item())
    except ImportError:
        pass
    for run, block in contenders.values():   # warm up (compiles, allocator)
        for _ in range(3):
            block(run())
    results = {k: [] for k in contenders}
    st = comp.stats
    calls0, cap0, breaks0 = st.calls, st.capture_time, st.graph_breaks
    for _ in range(a.rounds):
        for name, (run, block) in contenders.items():
            results[name].append(_time(run, a.steps if name != "dynajax eager" else max(5, a.steps // 3), block))
    ref = statistics.median(results["jax.jit (hand-written)"])
    print(f"MLP 784-512-512-10, batch {BATCH}, Adam; median of {a.rounds} rounds x {a.steps} steps "
          f"(donate={not a.no_donate})")
    print(f"{'':26s}{'ms/step':>10s}{'vs jax.jit':>12s}{'steps/s':>10s}")
    for name, r in results.items():
        m = statistics.median(r)
        print(f"{name:26s}{m:10.3f}{m / ref:11.2f}x{1e3 / m:10.1f}")
    if "PyTorch eager" in results:
        print(f"dynajax compiled / PyTorch eager: "
              f"{statistics.median(results['dynajax compiled']) / statistics.median(results['PyTorch eager']):.2f}x")
    n = st.calls - calls0
    print(f"first call (capture + trace + XLA compile + run): {first_call * 1e3:.0f} ms; "
          f"compiles: {st.compiles}, cache hits: {st.cache_hits}")
    print(f"capture: {(st.capture_time - cap0) / n * 1e3:.3f} ms/call, {st.recorded_ops} recorded ops, "
          f"{(st.capture_time - cap0) / n / st.recorded_ops * 1e6:.1f} us/op; "
          f"graph breaks/step: {(st.graph_breaks - breaks0) / n:.1f}")


if __name__ == "__main__":
    main()
