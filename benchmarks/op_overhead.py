"""Per-op dispatch cost of dynajax eager vs a jitted single-op JAX call and PyTorch eager, and the cost
of recording one op under ``dynajax.compile``.

Prints, side by side in one process, the median per-call time of an 8x8 float32
add and matmul, with and without requires_grad, and the ratios the core issue
targets: dynajax eager / jitted JAX <= 1.5 without grad, <= 2 with grad recording.
The capture cost per recorded op is the slope of a compiled step's capture time
over its number of ops (steps of 50 and 250 chained 8x8 multiplies by a weight
that requires grad): what one more op costs to record, without the step's fixed
costs (planning, write-back, dispatch), which compile_step.py reports per step.

    python benchmarks/op_overhead.py [--repeat 7] [--number 2000]
"""
from __future__ import annotations

import argparse
import statistics
import timeit

import jax
import jax.numpy as jnp
import numpy as np

import dynajax as dj
from dynajax.compile import guards


def per_call_us(fn, number: int, repeat: int) -> float:
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _measure(repeat: int, number: int) -> list:
    """(op, jax.jit, dj eager, dj +grad, torch, torch +grad) per-call microseconds, per op."""
    try:
        import torch
    except ImportError:
        torch = None

    a_np = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    ja = jnp.asarray(a_np)
    jit_add, jit_mm = jax.jit(jnp.add), jax.jit(jnp.matmul)
    da, dg = dj.tensor(a_np), dj.tensor(a_np, requires_grad=True)
    rows = []
    for name, jf, df in (("add", jit_add, lambda x: x + x), ("matmul", jit_mm, lambda x: x @ x)):
        if name == "matmul" and not hasattr(dj.Tensor, "__matmul__"):
            continue
        t_jax = per_call_us(lambda: jf(ja, ja), number, repeat)
        t_dj = per_call_us(lambda: df(da), number, repeat)
        t_djg = per_call_us(lambda: df(dg), number, repeat)
        t_pt = t_ptg = float("nan")
        if torch is not None:
            ta, tg = torch.from_numpy(a_np), torch.from_numpy(a_np).requires_grad_()
            t_pt = per_call_us(lambda: df(ta), number, repeat)
            t_ptg = per_call_us(lambda: df(tg), number, repeat)
        rows.append((name, t_jax, t_dj, t_djg, t_pt, t_ptg))
    return rows


def capture_us_per_op(lo: int = 50, hi: int = 250, calls: int = 30) -> float:
    """Marginal capture time of one recorded op (an 8x8 multiply that records a grad node)."""
    w = dj.randn(8, 8, requires_grad=True)
    x = dj.randn(8, 8)

    def chain(n):
        def step(x):
            h = x
            for _ in range(n):
                h = h * w
            return h.sum()
        # every call recorded: the default mode would replay this pure step without recording it
        guards.ENABLED = False
        try:
            return dj.compile(step)
        finally:
            guards.ENABLED = True
    medians = []
    for n in (lo, hi):
        f = chain(n)
        for _ in range(3):
            f(x)
        times = []
        for _ in range(calls):
            c0 = f.stats.capture_time
            f(x)
            times.append(f.stats.capture_time - c0)
        medians.append(statistics.median(times))
    return (medians[1] - medians[0]) / (hi - lo) * 1e6


def x64_scope_us(number: int, repeat: int) -> tuple:
    """(us of the 64-bit scope every op dispatch enters and leaves, us of a no-grad dynajax 8x8 add) per call:
    dynajax keeps PyTorch's int64/float64 by turning JAX's 64-bit types on for its own thread while an op
    runs (``_dtype.x64``), not process-wide; this is what that costs an op (issue target: <= 0.5 us)."""
    from dynajax._dtype import x64_set, x64_swap

    def scope():
        x64_set(x64_swap(True))
    da = dj.tensor(np.ones((8, 8), np.float32))
    return per_call_us(scope, number, repeat), per_call_us(lambda: da + da, number, repeat)


def run(repeat: int = 7, number: int = 2000) -> list[dict]:
    """Rows for benchmarks/run_all.py: per-call microseconds of one 8x8 op (no compiled variant)."""
    out = []
    for name, tj, td, tg, tp, tpg in _measure(repeat, number):
        common = {"unit": "us/call", "dynajax_compiled": None, "jax": tj}
        out.append({"workload": f"{name} 8x8 f32, no grad", "dynajax_eager": td, "torch": tp, **common})
        out.append({"workload": f"{name} 8x8 f32, requires_grad", "dynajax_eager": tg, "torch": tpg, **common})
    mul = dict(zip(("jax", "torch"), next((r[1], r[5]) for r in _measure(3, number) if r[0] == "add")))
    out.append({"workload": "capture: one more recorded op (8x8 mul, requires_grad) in a compiled step",
                "unit": "us/op", "dynajax_eager": None, "dynajax_compiled": capture_us_per_op(), **mul,
                "notes": "dynajax compiled = marginal capture time per recorded op (slope over 50 and 250 ops); "
                         "hand-written JAX = one jitted add dispatch; PyTorch eager = one add with grad recording"})
    scope, add = x64_scope_us(number, repeat)
    out.append({"workload": "64-bit scope entered and left by every op (per op)", "unit": "us/op",
                "dynajax_eager": scope, "dynajax_compiled": None, "jax": None, "torch": None,
                "notes": f"{scope / add:.1%} of a no-grad dynajax 8x8 add ({add:.2f} us); target <= 0.5 us"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--number", type=int, default=2000)
    args = ap.parse_args()
    rows = _measure(args.repeat, args.number)
    print(f"8x8 float32, median of {args.repeat} x {args.number} calls, microseconds per call")
    print(f"{'op':8} {'jax.jit':>8} {'dj eager':>9} {'dj +grad':>9} {'torch':>7} {'torch+grad':>10} "
          f"{'dj/jit':>7} {'dj+g/jit':>9} {'dj/torch':>9} {'dj+g/torch+g':>13}")
    for name, tj, td, tg, tp, tpg in rows:
        print(f"{name:8} {tj:8.2f} {td:9.2f} {tg:9.2f} {tp:7.2f} {tpg:10.2f} {td / tj:7.2f} {tg / tj:9.2f} "
              f"{td / tp:9.2f} {tg / tpg:13.2f}")
    print("targets: dj/jit <= 1.5, dj+g/jit <= 2.0")
    print(f"dynajax.compile capture, one more recorded op (8x8 mul, requires_grad): {capture_us_per_op():.1f} us "
          "(target <= 10)")
    scope, add = x64_scope_us(args.number, args.repeat)
    print(f"64-bit scope entered and left by every op: {scope:.3f} us = {scope / add:.1%} of a no-grad dynajax "
          f"8x8 add ({add:.2f} us) (target <= 0.5 us)")


if __name__ == "__main__":
    main()
