"""Scans along a dim (the family of ``cumsum``/``cumprod`` in :mod:`reduce`): ``cummax``/``cummin``
(values and indices), ``logcumsumexp``, and ``diff``."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _wrap_dim
from .elementwise import exp, export, log, logical_xor, where
from .join import cat, flip
from .reduce import _scatter_along, return_type
from .registry import apply, op
from .index import narrow

__all__ = ["cummax", "cummin", "diff", "logcumsumexp"]

_cummax_t = return_type("cummax", "values", "indices")
_cummin_t = return_type("cummin", "values", "indices")


# ---------------------------------------------------------------- cummax / cummin
def _running_pick(later_wins):
    """The impl of a running max/min along ``axis``: an associative scan over (value, index) pairs in which
    the later pair wins where ``later_wins(earlier, later)`` (ties go to the later one, as in PyTorch), or
    where it holds a NaN; an earlier NaN beats every later number."""
    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        if va.dtype.kind == "f":
            take_b = jnp.isnan(vb) | (~jnp.isnan(va) & later_wins(va, vb))
        else:
            take_b = later_wins(va, vb)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    def impl(x, *, axis):
        if x.ndim == 0:
            return x, jnp.zeros((), jnp.int64)
        idx = jax.lax.broadcasted_iota(jnp.int64, x.shape, axis)
        if x.shape[axis] == 0:
            return x, idx
        return jax.lax.associative_scan(combine, (x, idx), axis=axis)
    return impl


def _running_vjp(g, out, x, *, axis):
    # each output's gradient goes to the element it picked; repeats add up (PyTorch's scatter_add)
    gv = g[0]
    if x._v.ndim == 0:
        return (gv,)
    return (apply(_scatter_along, gv, out[1], axis=axis, shape=tuple(x._v.shape)),)


_cummax = op("cummax", nout=2)(_running_pick(lambda a, b: b >= a))
_cummin = op("cummin", nout=2)(_running_pick(lambda a, b: b <= a))
_cummax.defvjp(_running_vjp, saves_out=(1,))   # the indices only: the values may change in place
_cummin.defvjp(_running_vjp, saves_out=(1,))


def _running(o, input: Tensor, dim: int, result):
    axis = _wrap_dim(dim, input._v.ndim)
    return result(*apply(o, input, axis=axis))


def cummax(input: Tensor, dim: int):
    """``(values, indices)`` of the running maximum along ``dim`` (a NaN, once met, is kept)."""
    return _running(_cummax, input, dim, _cummax_t)


def cummin(input: Tensor, dim: int):
    """``(values, indices)`` of the running minimum along ``dim`` (a NaN, once met, is kept)."""
    return _running(_cummin, input, dim, _cummin_t)


export(cummax)
export(cummin)


# ---------------------------------------------------------------- logcumsumexp
@op("logcumsumexp")
def _logcumsumexp(x, *, axis):
    if x.ndim == 0 or x.shape[axis] == 0:
        return x
    return jax.lax.cumlogsumexp(x, axis=axis)


def _rev_lcse(t: Tensor, axis: int) -> Tensor:
    """``logcumsumexp`` from the end of ``axis`` backwards."""
    return flip(apply(_logcumsumexp, flip(t, axis), axis=axis), axis)


def _signed_log(t: Tensor, positive: bool) -> Tensor:
    """``log(t)`` where ``t > 0`` (``log(-t)`` where ``t < 0`` for ``positive=False``), elsewhere a finite
    stand-in for -inf (a quarter of the dtype's lowest value): its exponential is 0 as -inf's, but sums and
    differences with it stay finite, so the gradient of this gradient has no inf - inf in it."""
    m = t > 0 if positive else t < 0
    low = float(np.finfo(t._v.dtype).min) / 4
    return where(m, log(where(m, t if positive else -t, 1.0)), low)


@_logcumsumexp.defvjp
def _logcumsumexp_vjp(g, out, x, *, axis):
    # d out[i] / d x[k] = exp(x[k] - out[i]) for i >= k: the gradient is a reverse scan of g * exp(-out),
    # computed in log space separately for the positive and negative parts of g so it cannot overflow
    if x._v.ndim == 0:
        return (g,)
    pos = exp(_rev_lcse(_signed_log(g, True) - out, axis) + x)
    neg = exp(_rev_lcse(_signed_log(g, False) - out, axis) + x)
    return (pos - neg,)


@export
def logcumsumexp(input: Tensor, dim: int) -> Tensor:
    """``log(cumsum(exp(input), dim))``, computed stably."""
    if not _dtype.is_float(input._v.dtype):
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for '{input.dtype.legacy_name}'")
    axis = _wrap_dim(dim, input._v.ndim)
    return apply(_logcumsumexp, input, axis=axis)


# ---------------------------------------------------------------- diff
@export
def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Tensor | None = None,
         append: Tensor | None = None) -> Tensor:
    """The ``n``-th forward difference along ``dim`` (a bool tensor's is ``!=``), after joining ``prepend``
    and ``append`` along it."""
    nd = input._v.ndim
    if nd == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = _wrap_dim(dim, nd)
    for extra in (prepend, append):
        if extra is not None and extra._v.ndim != nd:
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
    parts = [t for t in (prepend, input, append) if t is not None]
    x = cat(parts, d) if len(parts) > 1 else input
    boolean = x._v.dtype == np.bool_
    for _ in range(n):
        size = x._v.shape[d]
        if size == 0:
            break
        a, b = narrow(x, d, 1, size - 1), narrow(x, d, 0, size - 1)
        x = logical_xor(a, b) if boolean else a - b
    return x


__all__ += ["gradient"]


def gradient(input: Tensor, *, spacing=1, dim=None, edge_order: int = 1) -> tuple:
    """torch.gradient: the derivative estimate along each of ``dim`` (all dims when None) by second-order
    central differences inside and first- or second-order (``edge_order``) one-sided differences at the ends;
    ``spacing`` is a scalar step, one per dim, or one coordinate tensor per dim (numpy.gradient's formulas)."""
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    dims = list(range(input.dim())) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    dims = [_wrap_dim(d, input.dim()) for d in dims]
    if spacing is None:
        spacing = 1
    steps = list(spacing) if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
    if len(steps) != len(dims) and dim is None:
        raise RuntimeError(
            "torch.gradient expected spacing to be unspecified, a scalar, or a list of length equal to "
            f"'self.dim() = {input.dim()}', since dim argument was not given, but got a list of length {len(steps)}")
    if len(steps) != len(dims):
        raise RuntimeError(
            "torch.gradient expected spacing to be unspecified, a scalar or it's spacing and dim arguments to have "
            f"the same length, but got a spacing argument of length {len(steps)} and a dim argument of length "
            f"{len(dims)}.")
    for i, d in enumerate(dims):
        if d in dims[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    for d in dims:
        if input.shape[d] < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least edge_order+1")
    out = []
    for d, h in zip(dims, steps):
        n = input.shape[d]
        x = lambda start, length: narrow(input, d, start, length)   # noqa: E731
        if isinstance(h, Tensor):
            shape = [1] * input.dim()
            shape[d] = n - 2
            dx = h[1:] - h[:-1]
            dx1, dx2 = dx[:-1], dx[1:]
            a = (-dx2 / (dx1 * (dx1 + dx2))).reshape(shape)
            b = ((dx2 - dx1) / (dx1 * dx2)).reshape(shape)
            c = (dx1 / (dx2 * (dx1 + dx2))).reshape(shape)
            center = a * x(0, n - 2) + b * x(1, n - 2) + c * x(2, n - 2)
            if edge_order == 1:
                first = (x(1, 1) - x(0, 1)) / dx[0]
                last = (x(n - 1, 1) - x(n - 2, 1)) / dx[-1]
            else:
                d0, d1 = dx[0], dx[1]
                first = (-(2.0 * d0 + d1) / (d0 * (d0 + d1)) * x(0, 1) + (d0 + d1) / (d0 * d1) * x(1, 1)
                         - d0 / (d1 * (d0 + d1)) * x(2, 1))
                e1, e2 = dx[-1], dx[-2]
                last = (e1 / (e2 * (e1 + e2)) * x(n - 3, 1) - (e1 + e2) / (e1 * e2) * x(n - 2, 1)
                        + (2.0 * e1 + e2) / (e1 * (e1 + e2)) * x(n - 1, 1))
        else:
            center = (x(2, n - 2) - x(0, n - 2)) / (2 * h)
            if edge_order == 1:
                first = (x(1, 1) - x(0, 1)) / h
                last = (x(n - 1, 1) - x(n - 2, 1)) / h
            else:
                first = (-1.5 * x(0, 1) + 2 * x(1, 1) - 0.5 * x(2, 1)) / h
                last = (0.5 * x(n - 3, 1) - 2 * x(n - 2, 1) + 1.5 * x(n - 1, 1)) / h
        out.append(cat([first, center, last], d))
    return tuple(out)
