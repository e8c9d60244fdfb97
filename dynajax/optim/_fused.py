"""Fused per-parameter updates: one op for the whole Adam / SGD-momentum update of a parameter.

Written op by op, an Adam update is ~12 ops per parameter, each a dispatch in
eager mode and a recorded op under ``dynajax.compile``; as one op it is one of
each. The arithmetic is the unfused update's, in the same order and with the
same Python-computed constants, so results are bit-identical to it (and to
PyTorch's single-tensor update, which the optimizer tests compare against).
The updates run under ``no_grad`` and have no VJP.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..ops.registry import apply, op


@op("adam_update", nout=4)
def _adam(p, g, m, v, step, c1, b2, c2, bc2_sqrt, eps, neg_step_size, wd, *, weight_decay):
    """(p, m, v, step + 1) after one Adam step; ``weight_decay``: "" (none), "l2" (added to the gradient) or
    "decoupled" (``wd`` is then the factor ``1 - lr * weight_decay`` applied to ``p`` first)."""
    if weight_decay == "decoupled":
        p = p * wd
    elif weight_decay == "l2":
        g = g + p * wd
    m = m + (g - m) * c1
    v = v * b2 + g * g * c2
    denom = jnp.sqrt(v) / bc2_sqrt + eps
    return p + (m / denom) * neg_step_size, m, v, step + 1


@op("sgd_momentum_update", nout=2)
def _sgd_momentum(p, g, buf, mu, c, neg_lr, wd, *, nesterov, l2):
    """(p, momentum buffer) after one SGD step with an existing momentum buffer (``c = 1 - dampening``)."""
    if l2:
        g = g + p * wd
    buf = buf * mu + g * c
    g = g + buf * mu if nesterov else buf
    return p + g * neg_lr, buf


def fusable(*tensors) -> bool:
    """The fused updates cover real floating tensors of one dtype and shape."""
    v0 = tensors[0]._value
    dt, shape = v0.dtype, tuple(v0.shape)
    return dt.kind == "f" and all(t._value.dtype == dt and tuple(t._value.shape) == shape for t in tensors[1:])


def adam_update(p, g, m, v, step, *, lr, b1, b2, eps, weight_decay, decoupled, step_size, bc2_sqrt):
    mode = "" if not weight_decay else ("decoupled" if decoupled else "l2")
    wd = 1 - lr * weight_decay if decoupled else weight_decay
    return apply(_adam, p, g, m, v, step, 1 - b1, b2, 1 - b2, bc2_sqrt, eps, -step_size, float(wd),
                 weight_decay=mode)


def sgd_momentum_update(p, g, buf, *, lr, momentum, dampening, weight_decay, nesterov):
    return apply(_sgd_momentum, p, g, buf, momentum, 1 - dampening, -lr, float(weight_decay),
                 nesterov=bool(nesterov), l2=bool(weight_decay))
