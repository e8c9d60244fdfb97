"""Quickstart: define-by-run gradients, then the same graph lowered to a JAX function.

First the seed snippet (``z = x + y``, ``z.backward()``). Then a small fit of ``w`` and ``b`` to points
on a line, once with the native tape (``loss.backward()`` and an optimizer) and once as JAX code
(``dynajax.lower`` records the loss once; ``jax.grad`` of the lowered function drives plain gradient
descent). Both start from the same values and take ``--steps`` steps, so they print the same losses.

    python examples/quickstart.py [--steps 50] [--device cpu]
"""
from __future__ import annotations

import jax
import numpy as np

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj

LR = 0.1


def seed_snippet(device: str = "cpu"):
    """z = x + y, backward: dz/dx = 1, and the same gradient from jax.grad of the lowered graph."""
    x = dj.tensor(1.0, requires_grad=True, device=device)
    y = dj.tensor(2.0, requires_grad=True, device=device)
    z = x + y
    z.backward()
    lowered = dj.lower(lambda a, b: a + b, x, y)
    gx = jax.grad(lowered.fn, argnums=0)(x.detach().numpy(), y.detach().numpy())
    return x.grad, float(gx)


def fit_with_tape(xs, ys, steps: int, device: str = "cpu") -> list:
    """Fit y = w x + b with loss.backward() and dynajax.optim.SGD; the loss before each step."""
    w = dj.zeros(1, requires_grad=True, device=device)
    b = dj.zeros(1, requires_grad=True, device=device)
    opt = dj.optim.SGD([w, b], lr=LR)
    x, y = dj.tensor(xs, device=device), dj.tensor(ys, device=device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((w * x + b - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def fit_with_jax(xs, ys, steps: int, device: str = "cpu") -> list:
    """The same fit as JAX code: the loss recorded once by dynajax.lower, differentiated by jax.grad."""
    x, y = dj.tensor(xs, device=device), dj.tensor(ys, device=device)
    w0, b0 = dj.zeros(1, device=device), dj.zeros(1, device=device)
    lowered = dj.lower(lambda w, b: ((w * x + b - y) ** 2).mean(), w0, b0)
    value_and_grad = jax.jit(jax.value_and_grad(lowered.fn, argnums=(0, 1)))
    w, b = w0.numpy(), b0.numpy()
    losses = []
    for _ in range(steps):
        loss, (gw, gb) = value_and_grad(w, b)
        w, b = w - LR * gw, b - LR * gb
        losses.append(float(loss))
    return losses


def main(steps: int = 50, device: str = "cpu", verbose: bool = True) -> dict:
    grad, jax_grad = seed_snippet(device)
    xs = np.linspace(-1, 1, 16, dtype=np.float32)
    ys = 3 * xs + 0.5
    tape, lowered = fit_with_tape(xs, ys, steps, device), fit_with_jax(xs, ys, steps, device)
    if verbose:
        print(grad)
        print("jax.grad of the lowered graph:", jax_grad)
        print(f"fit y = 3x + 0.5, {steps} steps of gradient descent:")
        print(f"  loss.backward() + optim.SGD: {tape[0]:.4f} -> {tape[-1]:.4f}")
        print(f"  jax.grad(lower(loss)):       {lowered[0]:.4f} -> {lowered[-1]:.4f}")
    return {"grad": grad.item(), "jax_grad": jax_grad, "tape": tape, "lowered": lowered}


def parse_args(argv=None):
    """Command-line flags (see _cli.py)."""
    return _cli.parse(_cli.parser(__doc__, steps=50), argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.device)
