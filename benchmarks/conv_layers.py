"""The convolutions of compile_step.py's CNN, one layer at a time, side by side in one process: forward, and
forward with its gradients, as ``dynajax.compile``'s executable computes them (``dynajax.lower`` of the layer
under ``jax.jit``: the whole-program formulation, ``nn._ops._conv_fn``), as XLA's own NHWC convolution computes
them (the hand-written JAX step's), and in PyTorch eager.

It says where the CNN step's time goes and what bounds it: the layer kernels, which no capture or dispatch
work can change. dynajax's layer alone takes and gives NCHW arrays, so its times include the transposes to and
from the NHWC layout XLA:CPU computes convolutions in; inside a whole step those cancel between layers
(``nn._ops.to_channels_last``), so its column is an upper bound there. Layers (batch 64, 3x3, padding 1,
float32):

- conv1: 1 -> 16 channels at 28x28, its input the data (gradients of the weight and bias only);
- conv2: 16 -> 32 channels at 14x14, its input an activation (gradients of the input, weight and bias).

    python benchmarks/conv_layers.py [--steps 20] [--rounds 5]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import dynajax as dj
import dynajax.nn.functional as F

BATCH = 64
LAYERS = {"conv1": (1, 16, 28, False), "conv2": (16, 32, 14, True)}   # in, out, size, input needs grad


def _arrays(c_in: int, c_out: int, size: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, c_in, size, size)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, 3, 3)) / np.sqrt(9 * c_in)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    g = rng.standard_normal((BATCH, c_out, size, size)).astype(np.float32)
    return x, w, b, g


def _wrt(fn, grad_x: bool):
    """jit of ``fn(x, w, b)`` with its vjp of the cotangent ``g``: (output, gradients), differentiating ``x`` only
    where ``grad_x`` (a layer's data input needs no gradient, and XLA drops what nobody reads)."""
    def both(x, w, b, g):
        if grad_x:
            y, back = jax.vjp(fn, x, w, b)
        else:
            y, back = jax.vjp(lambda w, b: fn(x, w, b), w, b)
        return y, back(g)
    return jax.jit(both)


def dynajax_layer(name: str):
    """(forward, forward + gradients) runners of the layer as a compiled step computes it, and its outputs."""
    c_in, c_out, size, grad_x = LAYERS[name]
    x, w, b, g = (jnp.asarray(a) for a in _arrays(c_in, c_out, size, 0))
    low = dj.lower(lambda x, w, b: F.conv2d(x, w, b, padding=1), dj.tensor(np.asarray(x)),
                   dj.tensor(np.asarray(w)), dj.tensor(np.asarray(b)))
    fwd, bwd = jax.jit(low.fn), _wrt(low.fn, grad_x)
    return (lambda: fwd(x, w, b)), (lambda: bwd(x, w, b, g))


def jax_layer(name: str):
    """The same with XLA's own convolution on NHWC arrays (the hand-written JAX step's)."""
    c_in, c_out, size, grad_x = LAYERS[name]
    x, w, b, g = _arrays(c_in, c_out, size, 0)
    x, g = jnp.asarray(x.transpose(0, 2, 3, 1)), jnp.asarray(g.transpose(0, 2, 3, 1))
    w, b = jnp.asarray(w.transpose(2, 3, 1, 0)), jnp.asarray(b)

    def conv(x, w, b):
        return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                            dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
    fwd, bwd = jax.jit(conv), _wrt(conv, grad_x)
    return (lambda: fwd(x, w, b)), (lambda: bwd(x, w, b, g))


def torch_layer(name: str):
    """The same in PyTorch eager (raises ImportError without torch)."""
    import torch
    c_in, c_out, size, grad_x = LAYERS[name]
    x, w, b, g = (torch.from_numpy(a) for a in _arrays(c_in, c_out, size, 0))
    x.requires_grad_(grad_x)
    w.requires_grad_(True)
    b.requires_grad_(True)

    def fwd():
        with torch.no_grad():
            return torch.nn.functional.conv2d(x, w, b, padding=1)

    def bwd():
        x.grad = w.grad = b.grad = None
        y = torch.nn.functional.conv2d(x, w, b, padding=1)
        y.backward(g)
        return y, w.grad
    return fwd, bwd


def _check(name: str) -> None:
    """The three agree on the layer's output and gradients (raises ImportError without torch)."""
    import torch
    c_in, c_out, size, grad_x = LAYERS[name]
    x, w, b, g = (torch.from_numpy(a) for a in _arrays(c_in, c_out, size, 0))
    x.requires_grad_(grad_x)
    w.requires_grad_(True)
    b.requires_grad_(True)
    y = torch.nn.functional.conv2d(x, w, b, padding=1)
    y.backward(g)
    ref = [y.detach().numpy()] + ([x.grad.numpy()] if grad_x else []) + [w.grad.numpy(), b.grad.numpy()]
    fwd, bwd = dynajax_layer(name)
    got = [fwd()] + list(bwd()[1])
    fwd, bwd = jax_layer(name)
    nchw = lambda a: np.asarray(a).transpose(0, 3, 1, 2)   # noqa: E731
    j = [fwd()] + list(bwd()[1])
    hand = [nchw(j[0])] + ([nchw(j[1])] if grad_x else []) + [np.asarray(j[-2]).transpose(3, 2, 0, 1), j[-1]]
    for who, outs in (("dynajax", got), ("hand-written JAX", hand)):
        for a, r in zip(outs, ref, strict=True):
            np.testing.assert_allclose(np.asarray(a), r, rtol=2e-4, atol=2e-3, err_msg=f"{who}, {name}")


def _time(run, steps: int) -> float:
    for _ in range(2):
        jax.block_until_ready(run())
    t0 = time.perf_counter()
    for _ in range(steps):
        jax.block_until_ready(run())
    return (time.perf_counter() - t0) / steps * 1e3


def measure(name: str, steps: int, rounds: int) -> dict:
    """Median ms of each contender's forward and forward + gradients, rounds in a fresh random order."""
    made = {"dynajax_compiled": dynajax_layer(name), "jax": jax_layer(name)}
    try:
        made["torch"] = torch_layer(name)
    except ImportError:
        pass
    times = {(who, part): [] for who in made for part in (0, 1)}
    for _ in range(rounds):
        order = list(times)
        random.shuffle(order)
        for who, part in order:
            times[who, part].append(_time(made[who][part], steps))
    return {k: statistics.median(v) for k, v in times.items()}


def run(steps: int = 20, rounds: int = 5) -> list[dict]:
    rows = []
    for name, (c_in, c_out, size, grad_x) in LAYERS.items():
        try:
            _check(name)
        except ImportError:
            pass
        m = measure(name, steps, rounds)
        grads = "input, weight, bias" if grad_x else "weight, bias"
        for part, what in ((0, "forward"), (1, f"forward and gradients ({grads})")):
            rows.append({"workload": f"{name} {c_in}->{c_out} 3x3 at {size}x{size}, batch {BATCH}: {what}",
                         "unit": "ms", "dynajax_eager": None,
                         **{who: m.get((who, part)) for who in ("dynajax_compiled", "jax", "torch")},
                         "notes": "dynajax compiled: the layer lowered and jitted as a compiled step's executable "
                                  "computes it; hand-written JAX: XLA's NHWC convolution"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    print(f"{'layer':70s} {'dynajax compiled':>17s} {'XLA NHWC':>9s} {'PyTorch':>8s} {'dj/XLA':>7s} {'dj/torch':>8s} "
          f"{'XLA/torch':>9s}")
    for r in run(a.steps, a.rounds):
        d, j, t = r["dynajax_compiled"], r["jax"], r.get("torch")
        tt = f"{t:8.3f}" if t else f"{'-':>8s}"
        print(f"{r['workload']:70s} {d:17.3f} {j:9.3f} {tt} {d / j:6.2f}x "
              + (f"{d / t:7.2f}x {j / t:8.2f}x" if t else ""))


if __name__ == "__main__":
    main()
