"""The same gradient, define-by-run and define-and-run.

``z = x + y``: the dynamic path records the graph on every call and walks it
backward (``z.backward()``); the static path records it once, lowers it to a
pure JAX function and calls ``jax.jit(jax.grad(...))`` repeatedly. Both print
their gradients and the per-call time, measured side by side.

    python examples/static_vs_dynamic.py [--steps 300] [--device cpu]
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj


def f(x, y):
    z = x + y
    return z.sum()


def per_call(fn, calls: int = 300) -> float:
    fn()  # warm up: jit compiles happen here, not in the timing
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def main(steps: int = 300, device: str = "cpu", verbose: bool = True) -> dict:
    """Both gradients and ``steps`` timed calls of each path; returns the gradients and per-call seconds."""
    x0, y0 = dj.tensor([1.0, 2.0, 3.0], device=device), dj.tensor([4.0, 5.0, 6.0], device=device)

    def dynamic():  # define-by-run: record, then walk the tape backward
        x, y = x0.detach().requires_grad_(), y0.detach().requires_grad_()
        f(x, y).backward()
        return x.grad, y.grad

    lowered = dj.lower(f, x0, y0)  # define-and-run: record once ...
    grad_fn = jax.jit(jax.grad(lowered.fn, argnums=(0, 1)))  # ... then compile the gradient
    xa, ya = x0.numpy(), y0.numpy()

    def static():
        gx, gy = grad_fn(xa, ya)
        return jax.block_until_ready(gx), gy

    gx, gy = dynamic()
    sx, sy = static()
    t_dyn, t_static = per_call(dynamic, steps), per_call(static, steps)
    if verbose:
        print("lowered graph:")
        lowered.print()
        print(f"define-by-run   (z.backward()):            dx = {gx.tolist()}  dy = {gy.tolist()}")
        print(f"define-and-run  (jit(grad(lower(f)))):     dx = {jnp.asarray(sx).tolist()}  "
              f"dy = {jnp.asarray(sy).tolist()}")
        print(f"per call ({steps} calls): define-by-run {t_dyn * 1e6:8.1f} us | define-and-run "
              f"{t_static * 1e6:8.1f} us | ratio {t_dyn / t_static:.1f}x")
    return {"dynamic": (gx.tolist(), gy.tolist()), "static": (jnp.asarray(sx).tolist(), jnp.asarray(sy).tolist()),
            "seconds_dynamic": t_dyn, "seconds_static": t_static}


def parse_args(argv=None):
    """Command-line flags (see _cli.py); --steps is the number of timed calls of each path."""
    return _cli.parse(_cli.parser(__doc__, steps=300, steps_help="timed calls of each path"), argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.device)
